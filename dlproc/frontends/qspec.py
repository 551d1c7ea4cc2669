"""What an already-quantized model says about its quantization: per-tensor scales and zero points, int weights.

The QDQ ONNX (:mod:`dlproc.frontends.qdq`) and TFLite (:mod:`dlproc.frontends.tflite`) importers
both reduce their file to the same two things:

* a float IR :class:`~dlproc.ir.Network` with the file's structure (weights dequantized), which
  ``dlproc stats`` and the estimator read like any float model, and
* a :class:`QuantSpec`: the file's scale and zero point of every layer output (already moved to
  dlproc's int8 domain) and, for conv/fc layers, the file's int8 weights (IR layout, zero point
  removed), per-output-channel weight scales and int32 biases.

:func:`dlproc.quant.imported.build_qnet` then makes the QuantizedNetwork the quantizer would make, except that nothing
is calibrated: every integer parameter is derived from the file's scales with the helpers of
docs/numerics.md (``requant_params``, ``add_params``, ...), so the golden model, compiler and RTL
run it unchanged. Where the file's arithmetic and dlproc's differ, docs/import.md says by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlproc.errors import ModelError

__all__ = ["TensorQ", "WeightQ", "QuantSpec", "to_int8_domain"]

# Ops whose output must keep the input's quantization (the processor only moves codes).


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
