"""Already-quantized models into a :class:`~dlproc.quant.QuantizedNetwork`: ``.dlq``, QDQ ONNX, int8 TFLite.

The front ends (``dlproc.frontends.qdq``, ``dlproc.frontends.tflite``) read a file into the float IR
plus its quantization (:class:`~dlproc.frontends.qspec.QuantSpec`); this module turns the two into
the quantizer's int8 network with the file's scales, reusing the quantizer's parameter builders, so
no calibration runs. :func:`load_quantized_model` picks the reader by the file's content
(:mod:`dlproc.frontends.filetype`), not its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlproc.errors import ModelError, QuantizationError
from dlproc.frontends.filetype import FileKind, detect, expect
from dlproc.frontends.qspec import QuantSpec
from dlproc.hardware.numerics import INT8_MAX, INT8_MIN
from dlproc.ir import Layer, Network
from dlproc.targets.golden import ops

__all__ = ["QUANTIZED_KINDS", "load_quantized_model", "load_qdq", "load_tflite", "build_qnet"]

_PASSTHROUGH = ("maxpool", "upsample", "channels")
_SOFTWARE = ("softmax", "yolo", "region")

#: File kinds that hold an int8 network without calibration.
QUANTIZED_KINDS = (FileKind.DLQ, FileKind.ONNX_QDQ, FileKind.TFLITE)


def load_quantized_model(path: str | Path, purpose: str = "this command"):
    """The QuantizedNetwork in ``path`` (a .dlq, a QDQ ONNX or an int8 .tflite, by content)."""
    kind = expect(path, QUANTIZED_KINDS, purpose)
    if kind == FileKind.DLQ:
        from dlproc.quant.qnet import QuantizedNetwork
        return QuantizedNetwork.load(path)
    if kind == FileKind.ONNX_QDQ:
        return load_qdq(path)
    return load_tflite(path)


def kind_of(path: str | Path) -> FileKind:
    return detect(path)


def load_qdq(model: Any, input_size: tuple[int, int] | None = None):
    """Import a QDQ ONNX model into a :class:`~dlproc.quant.QuantizedNetwork` with the file's scales."""
    from dlproc.frontends.qdq import import_qdq

    net, spec = import_qdq(model, input_size)
    return build_qnet(net, spec, "onnx-qdq")


def load_tflite(path: str | Path):
    """Import a full-integer .tflite model into a QuantizedNetwork with the file's quantization."""
    from dlproc.frontends.tflite import import_tflite

    net, spec = import_tflite(path)
    return build_qnet(net, spec, "tflite", meta={"layout": "NHWC (converted to NCHW at import)"})


def build_qnet(net: Network, spec: QuantSpec, source_format: str, meta: dict[str, Any] | None = None):
    """The QuantizedNetwork of ``net`` with the file's quantization ``spec`` (see module docstring)."""
    from dlproc.quant.qnet import QLayer, QuantizedNetwork

    done: dict[str, QLayer] = {}
    for layer in net:
        try:
            done[layer.name] = _qlayer(net, spec, layer, [done[n] for n in layer.inputs], QLayer)
        except QuantizationError as exc:  # the golden helpers' messages lack the layer
            raise ModelError(f"{spec.source}: {_where(layer)}: {exc}") from None
    info = {"imported_from": source_format, "calibration_method": None, "notes": list(spec.notes)}
    info.update(meta or {})
    return QuantizedNetwork(
        name=net.name, layers=list(done.values()), inputs=list(net.inputs), outputs=list(net.outputs),
        source_format=source_format, source_path=net.source_path, meta=info,
    )


def _where(layer: Layer) -> str:
    main = layer.origin[0] if layer.origin else layer.name
    return f"layer {main!r} ({layer.op})"


def _qlayer(net: Network, spec: QuantSpec, layer: Layer, srcs: list, qlayer_cls: type):
    tq = spec.tensors.get(layer.name)
    if tq is None:
        raise ModelError(f"{spec.source}: {_where(layer)}: its output has no quantization in the file "
                         "(every tensor of an int8 model needs a scale and zero point)")
    if layer.op in _PASSTHROUGH and (tq.scale, tq.zero_point) != (srcs[0].scale, srcs[0].zero_point):
        raise ModelError(
            f"{spec.source}: {_where(layer)}: the file requantizes (scale {srcs[0].scale:g}, zero point "
            f"{srcs[0].zero_point}) -> ({tq.scale:g}, {tq.zero_point}) across a {layer.op}; the processor's "
            f"{layer.op} keeps its input's quantization")
    q = qlayer_cls(
        name=layer.name, op=layer.op, inputs=list(layer.inputs), shape=layer.shape, scale=float(tq.scale),
        zero_point=int(tq.zero_point), hardware=layer.op not in _SOFTWARE, attrs=dict(layer.attrs),
        origin=list(layer.origin), tensor=layer.tensor,
    )
    if layer.op in ("conv", "fc"):
        _conv_fc(spec, layer, q, srcs)
    elif layer.op == "convtranspose":
        raise ModelError(f"{spec.source}: {_where(layer)}: a quantized transposed convolution cannot be "
                         "imported yet (quantize the float model with dlproc quantize instead)")
    elif q.hardware and layer.op != "input":
        _other(net, layer, q, srcs)
    return q


def _conv_fc(spec: QuantSpec, layer: Layer, q, srcs: list) -> None:
    wq = spec.weights.get(layer.name)
    if wq is None:
        raise ModelError(f"{spec.source}: {_where(layer)}: its weight is not quantized in the file")
    s_in = srcs[0].scale
    s_w = np.asarray(wq.scale, dtype=np.float64)
    if wq.bias is not None:
        bias = np.asarray(wq.bias, dtype=np.int64)
    else:  # a float bias (or none): quantized at s_in * s_w as the quantizer does
        fb = layer.bias if layer.bias is not None else np.zeros(len(s_w), np.float32)
        bias = ops.quantize_bias(fb, s_in, s_w).astype(np.int64)
    rq = ops.requant_params(s_in, s_w, q.scale, q.zero_point, layer.activation)
    q.params.update(
        weight=np.ascontiguousarray(wq.weight, dtype=np.int8),
        weight_scale=s_w.astype(np.float32),
        bias=bias.astype(np.int32),
        mult=rq.mult.astype(np.int32),
        mult_neg=rq.mult_neg.astype(np.int32),
        shift=rq.shift.astype(np.int32),
    )
    q.act_min, q.act_max = rq.act_min, rq.act_max


def _other(net: Network, layer: Layer, q, srcs: list) -> None:
    """Every other hardware op: the quantizer's own parameter builders, given the file's scales
    (the formulas stay in one place)."""
    from dlproc.quant.quantizer import fill_hardware_params

    fill_hardware_params(net, layer, q, srcs)
    q.act_min = max(q.act_min, INT8_MIN)
    q.act_max = min(q.act_max, INT8_MAX)
