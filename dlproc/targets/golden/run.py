"""Network-level executors: a float32 IR network and an int8 quantized network, batch at a time.

:func:`run_float` runs an :class:`dlproc.ir.Network` with the float reference operations of
:mod:`dlproc.targets.golden.float_ops`; the quantizer calibrates with it, and it is the float reference
of Darknet networks. :func:`run_int8` runs a :class:`dlproc.quant.QuantizedNetwork` with the
integer operations of :mod:`dlproc.targets.golden.ops` and nothing else for the arithmetic of hardware
layers, because it is the reference the compiled program on the processor is checked against.

Both take the network input as one NCHW array (single-input networks) or a dict keyed by input
layer name, and return a dict ``{output layer name: array}``; with ``collect=True`` the dict
holds the output of every layer instead, in network order. Every tensor is shaped
``(N, C, H, W)`` after the layer's IR shape (a fully connected layer gives ``(N, Cout, 1, 1)``).

Software layers (softmax, yolo, region) run in float32 in both executors (a softmax quantized for
the softmax block is a hardware layer: :func:`run_int8` runs ``ops.softmax_int8`` like the block). In :func:`run_int8`
their inputs are dequantized with the producer's scale and zero point; their float output is
returned as float32, and quantized again only if a hardware layer consumes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from dlproc.errors import QuantizationError
from dlproc.ir import Layer, Network
from dlproc.targets.golden import float_ops, ops

if TYPE_CHECKING:  # the quantizer imports this module; avoid the import cycle at run time
    from dlproc.quant.qnet import QLayer, QuantizedNetwork

__all__ = ["run_float", "run_int8", "yolo_float", "region_float"]

Inputs = np.ndarray | Mapping[str, np.ndarray]


def _input_dict(input_names: list[str], x: Inputs) -> dict[str, np.ndarray]:
    if isinstance(x, Mapping):
        missing = [name for name in input_names if name not in x]
        if missing:
            raise QuantizationError(f"no data for network input(s) {', '.join(missing)}")
        return {name: np.asarray(x[name]) for name in input_names}
    if len(input_names) != 1:
        raise QuantizationError(
            f"the network has {len(input_names)} inputs ({', '.join(input_names)}); pass a dict of arrays"
        )
    return {input_names[0]: np.asarray(x)}


def _check_input(name: str, x: np.ndarray, shape: tuple[int, int, int], dtype: type) -> None:
    if x.dtype != dtype:
        raise QuantizationError(f"input {name!r}: expected dtype {np.dtype(dtype)}, got {x.dtype}")
    if x.ndim != 4 or tuple(x.shape[1:]) != shape:
        raise QuantizationError(
            f"input {name!r}: expected shape (N, {shape[0]}, {shape[1]}, {shape[2]}) (NCHW), "
            f"got {tuple(x.shape)}"
        )


def _nchw(x: np.ndarray, layer: Layer | "QLayer") -> np.ndarray:
    """Give every tensor the layer's IR shape (fc outputs become N x Cout x 1 x 1)."""
    return x.reshape((x.shape[0],) + layer.shape.as_tuple())


def _collect_result(names: list[str], values: dict[str, np.ndarray], collect: bool) -> dict[str, np.ndarray]:
    return dict(values) if collect else {name: values[name] for name in names}


# -- float ---------------------------------------------------------------------------------------


def run_float(network: Network, x: Inputs, collect: bool = False) -> dict[str, np.ndarray]:
    """Run ``network`` in float32 on a batch (see the module docstring)."""
    inputs = _input_dict(network.inputs, x)
    values: dict[str, np.ndarray] = {}
    for layer in network.layers:
        if layer.op == "input":
            data = inputs[layer.name]
            _check_input(layer.name, data, layer.shape.as_tuple(), np.float32)
            values[layer.name] = data
            continue
        args = [values[name] for name in layer.inputs]
        try:
            out = _FLOAT_OPS[layer.op](layer, args)
        except KeyError:
            raise QuantizationError(f"layer {layer.name!r}: no float executor for op {layer.op!r}") from None
        values[layer.name] = _nchw(np.asarray(out, dtype=np.float32), layer)
    return _collect_result(network.outputs, values, collect)


def _pool_args(layer: Layer) -> tuple:
    a = layer.attrs
    return a["kernel"], a.get("stride", 1), a.get("pads", 0)


_FLOAT_OPS: dict[str, Callable[[Layer, list[np.ndarray]], np.ndarray]] = {
    "conv": lambda l, a: float_ops.conv2d(
        a[0], l.weight, l.bias, l.attrs.get("stride", 1), l.attrs.get("pads", 0),
        l.attrs.get("dilation", 1), l.attrs.get("groups", 1), l.activation,
    ),
    "fc": lambda l, a: float_ops.fully_connected(a[0], l.weight, l.bias, l.activation),
    "maxpool": lambda l, a: float_ops.maxpool(a[0], *_pool_args(l)),
    "channels": lambda l, a: a[0][:, list(l.attrs["index"])],
    "avgpool": lambda l, a: float_ops.avgpool(
        a[0], *_pool_args(l), bool(l.attrs.get("count_include_pad", False))
    ),
    "global_avgpool": lambda l, a: float_ops.global_avgpool(a[0]),
    "act": lambda l, a: float_ops.activation(a[0], l.activation),
    "add": lambda l, a: float_ops.add(a[0], a[1], l.activation),
    "mul": lambda l, a: float_ops.mul(a[0], a[1], l.activation),
    "concat": lambda l, a: float_ops.concat(a, axis=1),
    "lrn": lambda l, a: float_ops.lrn(
        a[0], int(l.attrs["size"]), float(l.attrs.get("alpha", 1e-4)),
        float(l.attrs.get("beta", 0.75)), float(l.attrs.get("bias", 1.0)),
    ),
    "upsample": lambda l, a: float_ops.upsample_nearest(a[0], l.attrs["scale"]),
    "softmax": lambda l, a: float_ops.softmax(a[0], axis=1),
    "yolo": lambda l, a: yolo_float(a[0], l.attrs),
    "region": lambda l, a: region_float(a[0], l.attrs),
}


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)


def yolo_float(x: np.ndarray, attrs: Mapping) -> np.ndarray:
    """Darknet's [yolo] layer: per anchor (of ``mask``), logistic on x, y, objectness and classes.

    Channels are grouped per anchor as (x, y, w, h, objectness, classes...), as Darknet lays them
    out; w and h stay raw (the box decoder exponentiates them with the anchors).
    """
    classes = int(attrs["classes"])
    n_anchor = len(attrs["mask"])
    return _per_anchor(x, n_anchor, 5 + classes, softmax_classes=False)


def region_float(x: np.ndarray, attrs: Mapping) -> np.ndarray:
    """Darknet's [region] layer (YOLOv2): logistic on x, y and objectness, softmax over classes."""
    classes, num, coords = int(attrs["classes"]), int(attrs["num"]), int(attrs.get("coords", 4))
    return _per_anchor(x, num, coords + 1 + classes, softmax_classes=True, coords=coords)


def _per_anchor(x: np.ndarray, n_anchor: int, per: int, softmax_classes: bool, coords: int = 4) -> np.ndarray:
    n, c, h, w = x.shape
    if c != n_anchor * per:
        raise QuantizationError(
            f"detection head expects {n_anchor} x {per} = {n_anchor * per} channels, got {c}"
        )
    v = x.reshape(n, n_anchor, per, h, w).astype(np.float32).copy()
    v[:, :, 0:2] = _sigmoid(v[:, :, 0:2])
    v[:, :, coords] = _sigmoid(v[:, :, coords])
    if softmax_classes:
        v[:, :, coords + 1 :] = float_ops.softmax(v[:, :, coords + 1 :], axis=2)
    else:
        v[:, :, coords + 1 :] = _sigmoid(v[:, :, coords + 1 :])
    return v.reshape(n, c, h, w)


# -- int8 ----------------------------------------------------------------------------------------


def run_int8(qnet: "QuantizedNetwork", x_int8: Inputs, collect: bool = False) -> dict[str, np.ndarray]:
    """Run a quantized network on int8 input(s) with the golden integer operations.

    Hardware layers give int8 tensors (dequantize with ``qnet.dequantize(name, q)``); software
    layers give float32.
    """
    inputs = _input_dict(qnet.inputs, x_int8)
    values: dict[str, np.ndarray] = {}
    for layer in qnet.layers:
        if layer.op == "input":
            data = inputs[layer.name]
            _check_input(layer.name, data, layer.shape.as_tuple(), np.int8)
            values[layer.name] = data
            continue
        srcs = [qnet[name] for name in layer.inputs]
        if layer.hardware:
            args = [_as_int8(values[s.name], s) for s in srcs]
            out = _INT_OPS[layer.op](layer, srcs, args)
        else:
            args = [qnet.dequantize(s.name, values[s.name]) for s in srcs]
            out = _FLOAT_OPS[layer.op](layer, args)  # type: ignore[arg-type]
        values[layer.name] = _nchw(out, layer)
    return _collect_result(qnet.outputs, values, collect)


def _as_int8(value: np.ndarray, producer: "QLayer") -> np.ndarray:
    """The int8 form of a producer's output (a software layer's float output is quantized)."""
    if value.dtype == np.int8:
        return value
    return ops.quantize_tensor(value, producer.scale, producer.zero_point)


def _per_channel(layer: "QLayer", name: str, ndim: int) -> np.ndarray:
    """A per-output-channel parameter shaped to broadcast against an (N, C, ...) accumulator."""
    return layer.params[name].astype(np.int64).reshape((-1,) + (1,) * (ndim - 2))


def _requantize(layer: "QLayer", acc: np.ndarray) -> np.ndarray:
    return ops.requantize(
        acc,
        _per_channel(layer, "mult", acc.ndim),
        _per_channel(layer, "shift", acc.ndim),
        layer.zero_point,
        layer.act_min,
        layer.act_max,
        _per_channel(layer, "mult_neg", acc.ndim),
    )


def _conv_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    a = layer.attrs
    acc = ops.conv2d(
        args[0], layer.params["weight"], layer.params["bias"], a.get("stride", 1), a.get("pads", 0),
        a.get("dilation", 1), a.get("groups", 1), srcs[0].zero_point,
    )
    return _requantize(layer, acc)


def _fc_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    acc = ops.fully_connected(args[0], layer.params["weight"], layer.params["bias"], srcs[0].zero_point)
    return _requantize(layer, acc)


def _act_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    if "act_table" in layer.params:  # a table activation (sigmoid, SiLU, ...): the output stage's lookup
        return ops.table_lookup(args[0], layer.params["act_table"])
    q = layer.q
    return ops.rescale(
        args[0], srcs[0].zero_point, q["mult"], q["shift"], layer.zero_point,
        layer.act_min, layer.act_max, q["mult_neg"],
    )


def _avgpool_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    a = layer.attrs
    if "mult" in layer.params:  # per-window divisors (count_include_pad=False over padding)
        mult, shift = layer.params["mult"], layer.params["shift"]
    else:
        mult, shift = layer.q["mult"], layer.q["shift"]
    return ops.avgpool(
        args[0], a["kernel"], a.get("stride", 1), a.get("pads", 0), bool(a.get("count_include_pad", False)),
        srcs[0].zero_point, mult, shift, layer.zero_point, layer.act_min, layer.act_max,
    )


def _global_avgpool_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    return ops.global_avgpool(
        args[0], srcs[0].zero_point, layer.q["mult"], layer.q["shift"], layer.zero_point,
        layer.act_min, layer.act_max,
    )


def _add_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    q = layer.q
    return ops.add(
        args[0], srcs[0].zero_point, q["ma"], args[1], srcs[1].zero_point, q["mb"], q["shift"],
        layer.zero_point, layer.act_min, layer.act_max,
    )


def _concat_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    parts = []
    for src, arg, rescale in zip(srcs, args, layer.q["rescale"]):
        if rescale is None:
            parts.append(arg)
        else:
            mult, shift = rescale
            parts.append(ops.rescale(arg, src.zero_point, mult, shift, layer.zero_point))
    return ops.concat(parts, axis=1)


def _lrn_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    return ops.lrn(
        args[0], int(layer.attrs["size"]), srcs[0].zero_point, layer.params["lrn_mult"],
        layer.params["lrn_shift"], layer.zero_point, layer.act_min, layer.act_max,
    )


_INT_OPS: dict[str, Callable[["QLayer", list, list[np.ndarray]], np.ndarray]] = {
    "conv": _conv_int8,
    "fc": _fc_int8,
    "act": _act_int8,
    "channels": lambda l, s, a: a[0][:, list(l.attrs["index"])],
    "maxpool": lambda l, s, a: ops.maxpool(a[0], l.attrs["kernel"], l.attrs.get("stride", 1), l.attrs.get("pads", 0)),
    "avgpool": _avgpool_int8,
    "global_avgpool": _global_avgpool_int8,
    "add": _add_int8,
    "mul": lambda l, s, a: ops.mul(a[0], s[0].zero_point, a[1], s[1].zero_point, l.q["mult"], l.q["shift"],
                                   l.zero_point, l.act_min, l.act_max),
    "concat": _concat_int8,
    "lrn": _lrn_int8,
    "upsample": lambda l, s, a: ops.upsample_nearest(a[0], l.attrs["scale"]),
    # Only when quantized for the softmax block (layer.hardware): the block's integer softmax.
    "softmax": lambda l, s, a: ops.softmax_int8(a[0], l.params["exp_table"], axis=1),
}


# -- transposed convolution ----------------------------------------------------------------------


def _convtranspose_args(layer: Layer | "QLayer") -> tuple:
    a = layer.attrs
    return (a.get("stride", 1), a.get("pads", 0), a.get("output_padding", 0), a.get("dilation", 1),
            a.get("groups", 1))


def _convtranspose_int8(layer: "QLayer", srcs: list, args: list[np.ndarray]) -> np.ndarray:
    acc = ops.conv_transpose2d(args[0], layer.params["weight"], layer.params["bias"], *_convtranspose_args(layer),
                               srcs[0].zero_point)
    return _requantize(layer, acc)


_FLOAT_OPS["convtranspose"] = lambda l, a: float_ops.conv_transpose2d(
    a[0], l.weight, l.bias, *_convtranspose_args(l), l.activation)
_INT_OPS["convtranspose"] = _convtranspose_int8
