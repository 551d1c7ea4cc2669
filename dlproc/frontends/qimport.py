"""Build a :class:`~dlproc.quant.QuantizedNetwork` from a model that is already quantized.

The QDQ ONNX (:mod:`dlproc.frontends.qdq`) and TFLite (:mod:`dlproc.frontends.tflite`) importers
both reduce their file to the same two things:

* a float IR :class:`~dlproc.ir.Network` with the file's structure (weights dequantized), which
  ``dlproc stats`` and the estimator read like any float model, and
* a :class:`QuantSpec`: the file's scale and zero point of every layer output (already moved to
  dlproc's int8 domain) and, for conv/fc layers, the file's int8 weights (IR layout, zero point
  removed), per-output-channel weight scales and int32 biases.

:func:`build_qnet` then makes the QuantizedNetwork the quantizer would make, except that nothing
is calibrated: every integer parameter is derived from the file's scales with the helpers of
docs/numerics.md (``requant_params``, ``add_params``, ...), so the golden model, compiler and RTL
run it unchanged. Where the file's arithmetic and dlproc's differ, docs/import.md says by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelError, QuantizationError
from ..golden import ops
from ..ir import Layer, Network
from ..numerics import INT8_MAX, INT8_MIN

__all__ = ["TensorQ", "WeightQ", "QuantSpec", "build_qnet", "to_int8_domain"]

# Ops whose output must keep the input's quantization (the processor only moves codes).
_PASSTHROUGH = ("maxpool", "upsample")
_SOFTWARE = ("softmax", "yolo", "region")


@dataclass(frozen=True)
class TensorQ:
    """Per-tensor activation quantization in dlproc's int8 domain: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int


@dataclass
class WeightQ:
    """A conv/fc layer's integers as the file holds them, in IR layout.

    ``weight`` int8 (Cout, ...) with the weight zero point already subtracted, ``scale`` float64
    (Cout,), ``bias`` int32 (Cout,) at scale s_in * scale (or None: computed from the float bias).
    """

    weight: np.ndarray
    scale: np.ndarray
    bias: np.ndarray | None = None


@dataclass
class QuantSpec:
    """The file's quantization of every IR layer, keyed by IR layer name."""

    source: str
    tensors: dict[str, TensorQ] = field(default_factory=dict)
    weights: dict[str, WeightQ] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def to_int8_domain(zero_point: int, dtype: np.dtype | type, what: str) -> int:
    """The int8 zero point of an int8 or uint8 tensor.

    A uint8 code u and the int8 code u - 128 with zero point zp - 128 mean the same real value
    (scale * (u - zp)), so a uint8 tensor converts exactly by subtracting 128 from every code.
    """
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return int(zero_point) - 128
    if dtype == np.int8:
        return int(zero_point)
    raise ModelError(f"{what}: {dtype} quantization cannot be expressed; the processor computes int8 "
                     "(int8 or uint8 activations only)")


def build_qnet(net: Network, spec: QuantSpec, source_format: str, meta: dict[str, Any] | None = None):
    """The QuantizedNetwork of ``net`` with the file's quantization ``spec`` (see module docstring)."""
    from ..quant.qnet import QLayer, QuantizedNetwork

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
    """Every other hardware op: the quantizer's own parameter builders, given the file's scales.

    They need nothing of the quantizer but the float network (for input shapes), so a bare
    Quantizer object holding ``net`` stands in; the formulas stay in one place.
    """
    from ..quant.quantizer import _BUILDERS, Quantizer

    builder = _BUILDERS.get(layer.op)
    if builder is None:
        return
    host = Quantizer.__new__(Quantizer)
    host.network = net
    host.int8_softmax = False
    builder(host, layer, q, srcs)
    q.act_min = max(q.act_min, INT8_MIN)
    q.act_max = min(q.act_max, INT8_MAX)
