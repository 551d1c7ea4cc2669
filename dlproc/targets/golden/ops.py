"""The bit-exact integer golden model: every hardware operation as written in docs/numerics.md.

Tensors are batched NCHW NumPy arrays: int8 activations, int8 weights, int32 biases and
accumulators. Arithmetic is done in int64 (or in floating point where that is provably exact, see
:func:`_exact_matmul`) and wrapped to int32 wherever the hardware's 32-bit registers wrap. The
requantization itself is :func:`dlproc.hardware.numerics.requantize`, shared with the gateware's tests.

The module has two halves: the operations (conv2d ... softmax) that the hardware executes, and the
host-side helpers that turn float scales into the integer parameters those operations take
(quantize_tensor, quantize_weights, requant_params, add_params, lrn_params, ...). The quantizer calls
both; the compiler packs the parameters into the processor's PRM words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dlproc.errors import QuantizationError
from dlproc.ir import TABLE_KINDS, Activation
from dlproc.hardware.numerics import (
    ACT_TABLE_SIZE,
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    INT32_MIN,
    LRN_MAX_SIZE,
    LRN_TABLE_SIZE,
    MAX_SHIFT,
    MULT_BITS,
    SOFTMAX_EXP_BITS,
    SOFTMAX_MAX_CHANNELS,
    SOFTMAX_OUT_SHIFT,
    SOFTMAX_RECIP_BITS,
    lrn_bucket,
    lrn_index,
    quantize_multiplier,
    requantize,
    wrap_int32,
)
from dlproc.targets.golden import float_ops
from dlproc.targets.golden.windows import (
    as_pads,
    as_pair,
    check_conv_shapes,
    check_nchw,
    convtranspose_geometry,
    im2col,
    output_size,
    pad_nchw,
    reduce_taps,
    window_counts,
    windows,
    zero_insert,
)

__all__ = [
    # operations
    "conv2d",
    "fully_connected",
    "requantize",
    "maxpool",
    "avgpool",
    "global_avgpool",
    "add",
    "mul",
    "rescale",
    "concat",
    "lrn",
    "upsample_nearest",
    "softmax",
    "softmax_int8",
    "table_lookup",
    # host-side helpers
    "quantize_tensor",
    "dequantize",
    "quantize_weights",
    "quantize_bias",
    "fold_zero_point",
    "activation_bounds",
    "RequantParams",
    "requant_params",
    "rescale_params",
    "pool_multiplier",
    "avgpool_multipliers",
    "add_params",
    "mul_params",
    "LrnParams",
    "lrn_params",
    "softmax_exp_table",
    "activation_table",
]

MULT_LIMIT = 1 << MULT_BITS  # multipliers are unsigned MULT_BITS-bit integers: 0 <= M < MULT_LIMIT


# =================================================================================================
# Host-side quantization helpers
# =================================================================================================


def quantize_tensor(x: np.ndarray, scale: float, zp: int = 0) -> np.ndarray:
    """Quantize float values to int8: ``clamp(rint(x / scale) + zp, -128, 127)``.

    ``rint`` rounds half to even, as ONNX QuantizeLinear does, so a host that quantizes its input
    with ONNX Runtime gets the same bytes. (Only the host rounds this way; every hardware rounding is
    round half up, see requantize.)
    """
    if not (math.isfinite(scale) and scale > 0):
        raise QuantizationError(f"quantization scale must be finite and > 0, got {scale!r}")
    x = np.asarray(x, dtype=np.float32)
    if not np.all(np.isfinite(x)):
        raise QuantizationError("cannot quantize a tensor that contains NaN or Inf")
    q = np.rint(x.astype(np.float64) / scale) + int(zp)
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize(x: np.ndarray, scale: float | np.ndarray, zp: int | np.ndarray = 0) -> np.ndarray:
    """The real value of int8 codes: ``(x - zp) * scale`` as float32 (scale/zp may broadcast)."""
    return ((np.asarray(x, dtype=np.float64) - zp) * scale).astype(np.float32)


def quantize_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8 weights: ``scale[co] = max|w[co]| / 127``, zero point 0.

    Returns ``(w_q, scale)``, w_q = clamp(rint(w / scale[co]), -127, 127) (half to even). A channel whose
    weights are all zero gets scale 1.0 (any scale represents it exactly; 1.0 keeps the
    requantization multiplier in range). Works for conv (Co, Ci, kh, kw) and fc (Co, Ci) weights.
    """
    w = np.asarray(w, dtype=np.float32)
    if not np.all(np.isfinite(w)):
        raise QuantizationError("weights contain NaN or Inf")
    peak = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
    scale = np.where(peak > 0, peak / 127.0, 1.0)
    shape = (-1,) + (1,) * (w.ndim - 1)
    w_q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return w_q, scale.astype(np.float32)


#: A bias whose quantized value would pass this is moved into range by raising its channel's weight
#: scale (:func:`bias_safe_weight_scale`): 2**30 leaves room in int32 for the input zero point's
#: fold (``fold_zero_point``) and for the accumulation.
BIAS_LIMIT = 2 ** 30


def bias_safe_weight_scale(bias: np.ndarray, s_in: float, s_w: np.ndarray) -> np.ndarray:
    """Per-channel weight scales no smaller than ``|bias| / (s_in * BIAS_LIMIT)``: a channel whose
    weights are tiny next to its bias (a pruned or dead channel, the last layer of a network
    trained with weight decay) would otherwise need a quantized bias beyond int32. Raising the
    scale keeps the bias exact to 1/BIAS_LIMIT of the channel's range and costs the channel's
    weights only precision they did not have (they round to a few codes either way)."""
    # (1 + 1e-6): the scales are stored as float32, whose rounding must not push a bias past the limit.
    need = np.abs(np.asarray(bias, dtype=np.float64)) / (float(s_in) * BIAS_LIMIT) * (1 + 1e-6)
    return np.maximum(np.asarray(s_w, dtype=np.float64), need).astype(np.float32)


def quantize_weights_with_scale(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 weights ``clamp(rint(w / scale[co]), -127, 127)`` for given per-channel scales."""
    w = np.asarray(w, dtype=np.float32)
    shape = (-1,) + (1,) * (w.ndim - 1)
    return np.clip(np.rint(w / np.asarray(scale, dtype=np.float64).reshape(shape)), -127, 127).astype(np.int8)


def quantize_bias(bias: np.ndarray, s_in: float, s_w: np.ndarray) -> np.ndarray:
    """int32 bias ``rint(bias[co] / (s_in * s_w[co]))``; a value outside int32 is an error, not clamped."""
    bias = np.asarray(bias, dtype=np.float64)
    if not np.all(np.isfinite(bias)):
        raise QuantizationError("bias contains NaN or Inf")
    q = np.rint(bias / (float(s_in) * np.asarray(s_w, dtype=np.float64)))
    bad = np.flatnonzero((q < INT32_MIN) | (q > INT32_MAX))
    if bad.size:
        raise QuantizationError(
            f"quantized bias of output channel(s) {bad.tolist()[:8]} exceeds int32 "
            f"(bias / (s_in * s_w) = {q[bad[0]]:.3g}); the channel's weight scale is too small"
        )
    return q.astype(np.int32)


def fold_zero_point(bias_q: np.ndarray, w_q: np.ndarray, zp_in: int) -> np.ndarray:
    """The bias the hardware loads: ``wrap32(bias_q[co] - zp_in * sum(w_q[co]))``.

    The MAC array multiplies raw int8 inputs (padding holds zp_in), so the input zero point's
    contribution is removed through the bias. Modulo 2**32 this equals :func:`conv2d` exactly.
    """
    w_sum = np.asarray(w_q, dtype=np.int64).reshape(len(w_q), -1).sum(axis=1)
    return wrap_int32(np.asarray(bias_q, dtype=np.int64) - int(zp_in) * w_sum)


def _multiplier(real: float, what: str) -> tuple[int, int]:
    """quantize_multiplier with a user-facing error that names the layer parameter at fault."""
    try:
        return quantize_multiplier(real)
    except ValueError as exc:
        raise QuantizationError(f"{what}: {exc}") from None


def _round_half_up(v: float) -> int:
    return int(math.floor(v + 0.5))


def activation_bounds(act: Activation | None, s_out: float, zp_out: int) -> tuple[int, int]:
    """int8 clamp (act_min, act_max) of an activation at the output's scale and zero point.

    ReLU clamps at zp_out (real 0); clip(lo, hi) at zp_out + rint(lo / s_out) and zp_out + rint(hi / s_out);
    leaky ReLU and no activation at the int8 range. Everything is also clamped to [-128, 127].
    """
    def clamp8(v: float) -> int:
        return int(min(max(v, INT8_MIN), INT8_MAX))

    if act is None or act.kind == "leaky":
        return INT8_MIN, INT8_MAX
    if act.kind == "relu":
        return clamp8(zp_out), INT8_MAX
    return clamp8(zp_out + np.rint(act.lo / s_out)), clamp8(zp_out + np.rint(act.hi / s_out))


@dataclass(frozen=True)
class RequantParams:
    """Per-output-channel requantization of a conv/fc layer, in the PRM word's terms."""

    mult: np.ndarray  #: int64 (Co,), 0 <= M < 2**15
    shift: np.ndarray  #: int64 (Co,), 0 <= S <= 46
    mult_neg: np.ndarray  #: int64 (Co,), M for acc < 0 (== mult unless leaky ReLU)
    zp_out: int
    act_min: int
    act_max: int

    def apply(self, acc: np.ndarray) -> np.ndarray:
        """requantize an accumulator (N, Co, ...) with these per-channel parameters."""
        shape = (-1,) + (1,) * (np.ndim(acc) - 2)
        return requantize(
            acc,
            self.mult.reshape(shape),
            self.shift.reshape(shape),
            self.zp_out,
            self.act_min,
            self.act_max,
            self.mult_neg.reshape(shape),
        )


def requant_params(
    s_in: float, s_w: np.ndarray, s_out: float, zp_out: int = 0, act: Activation | None = None
) -> RequantParams:
    """Multipliers of a conv/fc output stage: ``M[co] / 2**S[co] ~= s_in * s_w[co] / s_out``.

    Leaky ReLU sets ``M_neg[co] = floor(alpha * M[co] + 0.5)`` (0 <= alpha, and M_neg must stay below
    2**15); ReLU and clip become act_min/act_max (:func:`activation_bounds`).
    """
    s_w = np.atleast_1d(np.asarray(s_w, dtype=np.float64))
    pairs = [
        _multiplier(float(s_in) * float(s) / float(s_out), f"output channel {co} (s_in * s_w / s_out)")
        for co, s in enumerate(s_w)
    ]
    mult = np.array([m for m, _ in pairs], dtype=np.int64)
    shift = np.array([s for _, s in pairs], dtype=np.int64)
    if act is not None and act.kind == "leaky":
        if not (0.0 <= act.alpha):
            raise QuantizationError(f"leaky ReLU slope must be >= 0 for the hardware, got {act.alpha}")
        mult_neg = np.array([_round_half_up(act.alpha * float(m)) for m in mult], dtype=np.int64)
        if mult_neg.max(initial=0) >= MULT_LIMIT:
            raise QuantizationError(
                f"leaky ReLU slope {act.alpha} makes the negative multiplier exceed {MULT_BITS} bits"
            )
    else:
        mult_neg = mult.copy()
    act_min, act_max = activation_bounds(act, s_out, zp_out)
    return RequantParams(mult, shift, mult_neg, int(zp_out), act_min, act_max)


def rescale_params(s_in: float, s_out: float) -> tuple[int, int]:
    """(M, S) with M / 2**S ~= s_in / s_out, for :func:`rescale` (concat inputs, standalone act layers)."""
    return _multiplier(float(s_in) / float(s_out), "rescale s_in / s_out")


def pool_multiplier(s_in: float, s_out: float, n: int) -> tuple[int, int]:
    """(M, S) of an average over ``n`` pixels: M / 2**S ~= s_in / (s_out * n)."""
    if n < 1:
        raise ValueError(f"pool window must cover >= 1 pixel, got {n}")
    return _multiplier(float(s_in) / (float(s_out) * n), f"average of {n} pixels s_in / (s_out * n)")


def avgpool_multipliers(
    s_in: float,
    s_out: float,
    in_hw: tuple[int, int],
    kernel: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    pads: int | Sequence[int] = 0,
    count_include_pad: bool = True,
) -> tuple[int | np.ndarray, int | np.ndarray]:
    """Multiplier(s) for :func:`avgpool`.

    With ``count_include_pad`` (or when every window is full) one (M, S) pair for the divisor kh*kw,
    which the hardware POOL instruction supports. Otherwise int64 arrays (Ho, Wo) of per-window
    pairs for the divisor "real pixels under the window": the golden model computes that, the
    hardware POOL instruction cannot (it has one multiplier per channel block).
    """
    kernel, stride, pads = as_pair(kernel, "kernel"), as_pair(stride, "stride"), as_pads(pads)
    counts = window_counts(in_hw[0], in_hw[1], kernel, stride, pads)
    full = kernel[0] * kernel[1]
    if count_include_pad or np.all(counts == full):
        return pool_multiplier(s_in, s_out, full)
    table = {int(n): pool_multiplier(s_in, s_out, int(n)) for n in np.unique(counts)}
    mult = np.vectorize(lambda n: table[int(n)][0], otypes=[np.int64])(counts)
    shift = np.vectorize(lambda n: table[int(n)][1], otypes=[np.int64])(counts)
    return mult, shift


def add_params(s_a: float, s_b: float, s_out: float) -> tuple[int, int, int]:
    """(M_a, M_b, S) for :func:`add`: M_a / 2**S ~= s_a / s_out and M_b / 2**S ~= s_b / s_out.

    S is the largest shift for which the larger multiplier still fits MULT_BITS (the smaller one
    gets the same shift, so both products share one rounding shifter).
    """
    r_a, r_b = float(s_a) / float(s_out), float(s_b) / float(s_out)
    _, shift = _multiplier(max(r_a, r_b), "add input scale / output scale")
    m_a, m_b = _round_half_up(r_a * 2.0**shift), _round_half_up(r_b * 2.0**shift)
    while max(m_a, m_b) >= MULT_LIMIT:  # cannot happen after quantize_multiplier; kept as a guard
        shift -= 1
        m_a, m_b = _round_half_up(r_a * 2.0**shift), _round_half_up(r_b * 2.0**shift)
    return m_a, m_b, shift


def mul_params(s_a: float, s_b: float, s_out: float) -> tuple[int, int]:
    """(M, S) for :func:`mul`: M / 2**S ~= s_a * s_b / s_out."""
    return _multiplier(float(s_a) * float(s_b) / float(s_out), "mul input scales / output scale")


@dataclass(frozen=True)
class LrnParams:
    """Fixed-point constants of one LRN layer: a table of (multiplier, shift) pairs."""

    mult: np.ndarray  #: uint16 (LRN_TABLE_SIZE,), each < 2**15, indexed by numerics.lrn_index(q)
    shift: np.ndarray  #: uint8 (LRN_TABLE_SIZE,), each <= 46


def lrn_params(size: int, alpha: float, beta: float, bias: float, s_in: float, s_out: float) -> LrnParams:
    """Tabulate ``f(q) = (s_in / s_out) * (bias + alpha / size * s_in**2 * q) ** -beta`` for :func:`lrn`.

    Entry i is ``quantize_multiplier(f(q_c))`` where q_c is the centre of the square sums sharing
    index i (``(first + last) / 2``; exact below 2**LRN_MANT_BITS). Each entry has its own shift, so
    every entry keeps 15 significant bits however far f falls over the table.
    """
    if not 1 <= size <= LRN_MAX_SIZE:
        raise QuantizationError(f"LRN size must be in 1..{LRN_MAX_SIZE} for the hardware, got {size}")
    if not (bias > 0 and alpha >= 0 and math.isfinite(beta) and s_in > 0 and s_out > 0):
        raise QuantizationError(
            f"LRN needs bias > 0, alpha >= 0 and positive scales, got bias={bias}, alpha={alpha}"
        )
    first, last = lrn_bucket(np.arange(LRN_TABLE_SIZE))
    q_c = (first + last) / 2.0
    f = (s_in / s_out) * (bias + alpha / size * s_in**2 * q_c) ** (-beta)
    pairs = [_multiplier(float(v), "LRN multiplier s_in / s_out * (bias + ...)**-beta") for v in f]
    mult = np.array([m for m, _ in pairs], dtype=np.uint16)
    shift = np.array([sh for _, sh in pairs], dtype=np.uint8)
    return LrnParams(mult, shift)


def softmax_exp_table(s_in: float) -> np.ndarray:
    """The exp table of :func:`softmax_int8`: ``floor(2**20 * exp(-s_in * t) + 1/2)`` for t = 0..255 (uint32)."""
    if not (math.isfinite(s_in) and s_in > 0):
        raise QuantizationError(f"softmax input scale must be finite and > 0, got {s_in!r}")
    t = np.arange(256, dtype=np.float64)
    return np.floor(2.0**SOFTMAX_EXP_BITS * np.exp(-float(s_in) * t) + 0.5).astype(np.uint32)


# =================================================================================================
# Operations
# =================================================================================================

# Products in the MAC array are int8 weight x (x - zp_in), |w| <= 128 and |x - zp| <= 255. A matmul
# of K such products, in any summation order, only ever forms partial sums of subsets of them, each
# bounded by K * max|w| * max|x - zp|. Integers below 2**24 (float32) and 2**53 (float64) are exact,
# and so is every sum or product (and fused multiply-add) of such integers whose result stays below
# that bound. So BLAS float matmul is bit-exact when the bound holds; the code checks the actual
# maxima and falls back to int64 (slower, never wrong) beyond 2**53. With full-range operands float32
# covers K <= 514 (2**24 / (128 * 255)); float64 covers every realistic layer (K = 4608 for a 3x3x512
# conv: 4608 * 128 * 255 ~ 1.5e8 < 2**53), so int64 is only a safety net.
_EXACT_LIMITS = ((np.float32, 2**24), (np.float64, 2**53))


def activation_table(act: Activation, s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """The 256-entry int8 table of a unary activation from input (s_in, zp_in) to output (s_out, zp_out).

    Entry i is the output code of input code ``i - 128``: the float function at the real input
    ``(i - 128 - zp_in) * s_in``, quantized as :func:`quantize_tensor` does (round half to even,
    clamp to int8), so the table is the function rounded, exactly.
    """
    if act is None or not act.needs_table:
        kind = None if act is None else act.kind
        raise QuantizationError(f"activation {kind!r} is not a table activation (allowed: {', '.join(TABLE_KINDS)}); "
                                "ReLU, leaky ReLU and clip are the requantization's clamp and negative multiplier")
    for what, scale in (("input", s_in), ("output", s_out)):
        if not (math.isfinite(scale) and scale > 0):
            raise QuantizationError(f"activation table: {what} scale must be finite and > 0, got {scale!r}")
    x = (np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.float64) - int(zp_in)) * float(s_in)
    y = act.apply(x)
    if not np.all(np.isfinite(y)):
        raise QuantizationError(f"activation {act.kind!r} is not finite on the input range "
                                f"[{x[0]:.4g}, {x[-1]:.4g}]")
    q = np.rint(y / float(s_out)) + int(zp_out)
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def _exact_matmul(a: np.ndarray, b: np.ndarray, dtype: type | None = None) -> np.ndarray:
    """Integer matmul ``a @ b`` (int arrays) computed exactly, returned as int64.

    ``dtype`` forces the arithmetic type (tests use it to compare the paths); by default the
    fastest type that is provably exact for these operands.
    """
    if dtype is None:
        dtype = _matmul_dtype(a.shape[-1], int(np.abs(a).max(initial=0)), int(np.abs(b).max(initial=0)))
    out = np.matmul(a.astype(dtype, copy=False), b.astype(dtype, copy=False))
    return out.astype(np.int64, copy=False)  # exact integers in float convert exactly


def _matmul_dtype(k: int, peak_a: int, peak_b: int) -> type:
    """The fastest arithmetic in which a K-term integer dot product with these peaks is exact."""
    bound = k * peak_a * peak_b
    for candidate, limit in _EXACT_LIMITS:
        if bound < limit:
            return candidate
    return np.int64


def _centered(x: np.ndarray, zp: int) -> np.ndarray:
    """x - zp as int16 (range -255..255), checking that x is int8 and zp an int8 value."""
    x = np.asarray(x)
    if x.dtype != np.int8:
        raise TypeError(f"expected an int8 tensor, got {x.dtype}")
    if not INT8_MIN <= int(zp) <= INT8_MAX:
        raise ValueError(f"zero point must be in [-128, 127], got {zp}")
    return x.astype(np.int16) - np.int16(zp)


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    stride: int | Sequence[int] = 1,
    pads: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    zp_in: int = 0,
    *,
    matmul_dtype: type | None = None,
) -> np.ndarray:
    """int32 accumulators of a convolution: ``acc = bias + sum w * (x - zp_in)``, wrapped to int32.

    x int8 (N, C, H, W); w int8 (Co, C/groups, kh, kw); bias int32 (Co,) or None (zeros), the
    *unfolded* bias (:func:`fold_zero_point` gives the one the hardware loads). Padding holds zp_in,
    i.e. contributes 0 after the subtraction. ``matmul_dtype`` forces the matmul arithmetic
    (np.float32, np.float64 or np.int64; default: fastest exact one).
    """
    x, w = np.asarray(x), np.asarray(w)
    check_conv_shapes(x, w, groups)
    if w.dtype != np.int8:
        raise TypeError(f"conv weight must be int8, got {w.dtype}")
    stride, dilation, pads = as_pair(stride, "stride"), as_pair(dilation, "dilation"), as_pads(pads)
    kernel = (w.shape[2], w.shape[3])
    n, _, h, wd = x.shape
    ho, wo = output_size(h, wd, kernel, stride, pads, dilation)
    d = pad_nchw(_centered(x, zp_in), pads, 0)
    co = w.shape[0]
    k = w[0].size
    # Choose the matmul arithmetic first so that im2col writes its columns in that type directly.
    peak_w = int(np.abs(w.astype(np.int16)).max(initial=0))
    dtype = matmul_dtype or _matmul_dtype(k, int(np.abs(d).max(initial=0)), peak_w)
    cols = im2col(windows(d, kernel, stride, dilation, (ho, wo)), groups, dtype)
    wmat = w.astype(dtype).reshape(groups, co // groups, -1).transpose(0, 2, 1)  # (g, K, Co/g)
    acc = _exact_matmul(cols, wmat, dtype)  # (N, g, Ho*Wo, Co/g)
    acc = acc.transpose(0, 1, 3, 2).reshape(n, co, ho, wo)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64).reshape(1, co, 1, 1)
    return wrap_int32(acc)


def fully_connected(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, zp_in: int = 0, *, matmul_dtype: type | None = None
) -> np.ndarray:
    """int32 accumulators ``bias + w @ (x - zp_in)`` wrapped to int32.

    x int8 (N, Cin), or NCHW flattened in C, H, W order; w int8 (Co, Cin); bias int32 (Co,) or None.
    """
    x, w = np.asarray(x), np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2:
        raise TypeError(f"fc weight must be int8 (Co, Cin), got {w.dtype} {w.shape}")
    d = _centered(x, zp_in).reshape(x.shape[0], -1)
    if d.shape[1] != w.shape[1]:
        raise ValueError(f"fc input has {d.shape[1]} features, weight expects {w.shape[1]}")
    acc = _exact_matmul(d, w.astype(np.int16).T, matmul_dtype)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return wrap_int32(acc)


def maxpool(
    x: np.ndarray, kernel: int | Sequence[int], stride: int | Sequence[int] = 1, pads: int | Sequence[int] = 0
) -> np.ndarray:
    """Max over each window. Padding never wins: it is -128, and pads < kernel guarantees every
    window holds a real pixel (>= -128), so the result equals a max over real pixels only."""
    x = np.asarray(x)
    check_nchw(x)
    if x.dtype != np.int8:
        raise TypeError(f"expected an int8 tensor, got {x.dtype}")
    kernel, stride, pads = as_pair(kernel, "kernel"), as_pair(stride, "stride"), as_pads(pads)
    if max(pads[0], pads[2]) >= kernel[0] or max(pads[1], pads[3]) >= kernel[1]:
        raise ValueError(f"max pool pads {pads} must be smaller than the kernel {kernel}")
    ho, wo = output_size(x.shape[2], x.shape[3], kernel, stride, pads)
    return reduce_taps(windows(pad_nchw(x, pads, INT8_MIN), kernel, stride, (1, 1), (ho, wo)), np.maximum)


def avgpool(
    x: np.ndarray,
    kernel: int | Sequence[int],
    stride: int | Sequence[int],
    pads: int | Sequence[int],
    count_include_pad: bool,
    zp_in: int,
    mult: int | np.ndarray,
    shift: int | np.ndarray,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
) -> np.ndarray:
    """Average pool: ``s = wrap32(sum over the zp_in-padded window of x - kh*kw*zp_in)``, then
    ``requantize(s, mult, shift, zp_out, act_min, act_max)``.

    ``mult``/``shift`` are scalars (one divisor, kh*kw, as the hardware POOL instruction does) or
    arrays broadcasting to (Ho, Wo) (per-window divisors, from :func:`avgpool_multipliers`).
    ``count_include_pad=False`` with windows that cover padding requires the per-window arrays; a
    scalar multiplier there is rejected rather than silently averaging over the wrong count.
    """
    x = np.asarray(x)
    check_nchw(x)
    kernel, stride, pads = as_pair(kernel, "kernel"), as_pair(stride, "stride"), as_pads(pads)
    ho, wo = output_size(x.shape[2], x.shape[3], kernel, stride, pads)
    if not count_include_pad and np.ndim(mult) == 0:
        counts = window_counts(x.shape[2], x.shape[3], kernel, stride, pads)
        if np.any(counts != kernel[0] * kernel[1]):
            raise ValueError(
                "avgpool with count_include_pad=False over padding needs per-window multipliers "
                "(use avgpool_multipliers); the hardware POOL instruction supports only one divisor"
            )
    d = pad_nchw(_centered(x, zp_in), pads, 0)
    s = reduce_taps(windows(d, kernel, stride, (1, 1), (ho, wo)), np.add, np.int64)
    return requantize(wrap_int32(s), mult, shift, zp_out, act_min, act_max)


def global_avgpool(
    x: np.ndarray,
    zp_in: int,
    mult: int,
    shift: int,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
) -> np.ndarray:
    """Average over the whole plane: ``requantize(wrap32(sum(x) - H*W*zp_in), M, S, ...)``.

    Returns shape (N, C, 1, 1); M / 2**S ~= s_in / (s_out * H * W) (:func:`pool_multiplier`).
    """
    x = np.asarray(x)
    check_nchw(x)
    s = _centered(x, zp_in).sum(axis=(2, 3), keepdims=True, dtype=np.int64)
    return requantize(wrap_int32(s), mult, shift, zp_out, act_min, act_max)


def add(
    xa: np.ndarray,
    za: int,
    ma: int,
    xb: np.ndarray,
    zb: int,
    mb: int,
    shift: int,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
) -> np.ndarray:
    """Element-wise add of two differently scaled int8 tensors:
    ``acc = (xa - za) * ma + (xb - zb) * mb`` (|acc| < 2**24, no wrap), then
    ``clamp(((acc + 2**(S-1)) >> S) + zp_out, act_min, act_max)`` = requantize(acc, 1, S, ...)."""
    xa, xb = np.asarray(xa), np.asarray(xb)
    if xa.shape != xb.shape:
        raise ValueError(f"add operands differ in shape: {xa.shape} and {xb.shape}")
    _check_adder_scalars(shift, ma=ma, mb=mb)
    acc = _centered(xa, za).astype(np.int64) * int(ma) + _centered(xb, zb).astype(np.int64) * int(mb)
    return requantize(acc, 1, int(shift), zp_out, act_min, act_max)


def _check_adder_scalars(shift: int, **multipliers: int) -> None:
    """The adder's multipliers fit MULT_BITS and its common shift is at most MAX_SHIFT (ADD's fields)."""
    for name, m in multipliers.items():
        if not 0 <= int(m) < MULT_LIMIT:
            raise ValueError(f"{name} must be in [0, 2**{MULT_BITS}), got {m}")
    if not 0 <= int(shift) <= MAX_SHIFT:
        raise ValueError(f"shift must be in [0, {MAX_SHIFT}], got {shift}")


def mul(
    xa: np.ndarray,
    za: int,
    xb: np.ndarray,
    zb: int,
    mult: int,
    shift: int,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
) -> np.ndarray:
    """Element-wise multiply of two int8 tensors: ``acc = (xa - za) * (xb - zb)`` (|acc| <= 2**16,
    exact), then ``requantize(acc, M, S, zp_out, act_min, act_max)`` (the adder's ``mul`` mode).

    ``xb`` may broadcast against ``xa`` with NumPy's rules along the channel axis: an (N, C, 1, 1)
    vector scales every pixel of its channel (squeeze-and-excitation)."""
    xa, xb = np.asarray(xa), np.asarray(xb)
    try:
        shape = np.broadcast_shapes(xa.shape, xb.shape)
    except ValueError:
        raise ValueError(f"mul operands do not broadcast: {xa.shape} and {xb.shape}") from None
    if shape != xa.shape:
        raise ValueError(f"mul: operand b {xb.shape} must broadcast to operand a {xa.shape}")
    _check_adder_scalars(shift, mult=mult)
    acc = _centered(xa, za).astype(np.int64) * _centered(xb, zb).astype(np.int64)
    return requantize(acc, int(mult), int(shift), zp_out, act_min, act_max)


def rescale(
    x: np.ndarray,
    zp_in: int,
    mult: int,
    shift: int,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
    mult_neg: int | None = None,
) -> np.ndarray:
    """Move an int8 tensor to another scale: ``requantize(x - zp_in, M, S, zp_out, act_min, act_max, M_neg)``.

    Used for concat inputs of another scale and for standalone activation layers (ReLU/clip via
    act_min/act_max, leaky ReLU via mult_neg).
    """
    return requantize(_centered(x, zp_in), mult, shift, zp_out, act_min, act_max, mult_neg)


def table_lookup(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The activation table applied to int8 codes: ``table[x + 128]`` (docs/numerics.md section 11)."""
    table = np.asarray(table)
    if table.shape != (ACT_TABLE_SIZE,):
        raise ValueError(f"an activation table has {ACT_TABLE_SIZE} entries, got shape {table.shape}")
    if table.min() < INT8_MIN or table.max() > INT8_MAX:
        raise ValueError("activation table entries must be int8 (-128..127)")
    return table.astype(np.int8)[np.asarray(x).astype(np.int16) + 128]


def concat(xs: Sequence[np.ndarray], axis: int = 1) -> np.ndarray:
    """Concatenate int8 tensors that already share one scale and zero point (rescale the others first)."""
    if not xs:
        raise ValueError("concat needs at least one input")
    arrays = [np.asarray(x) for x in xs]
    if any(a.dtype != np.int8 for a in arrays):
        raise TypeError("concat inputs must be int8")
    return np.concatenate(arrays, axis=axis)


def lrn(
    x: np.ndarray,
    size: int,
    zp_in: int,
    table_mult: np.ndarray,
    table_shift: np.ndarray,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
) -> np.ndarray:
    """Fixed-point cross-channel LRN (docs/numerics.md):

    d = x - zp_in; q[c] = sum of d[i]**2 over ONNX's channel window of c (< 2**20);
    i = lrn_index(q); y = requantize(d, table_mult[i], table_shift[i], zp_out, act_min, act_max).
    ``table_mult``/``table_shift`` are :func:`lrn_params`' ``mult`` and ``shift``.
    """
    x = np.asarray(x)
    check_nchw(x)
    if not 1 <= size <= LRN_MAX_SIZE:
        raise ValueError(f"LRN size must be in 1..{LRN_MAX_SIZE}, got {size}")
    table_mult = np.asarray(table_mult, dtype=np.int64)
    table_shift = np.asarray(table_shift, dtype=np.int64)
    if table_mult.shape != (LRN_TABLE_SIZE,) or table_shift.shape != (LRN_TABLE_SIZE,):
        raise ValueError(f"LRN tables must hold {LRN_TABLE_SIZE} entries each")
    mult_ok = 0 <= table_mult.min() and table_mult.max() < MULT_LIMIT
    if not (mult_ok and 0 <= table_shift.min() and table_shift.max() <= MAX_SHIFT):
        raise ValueError(f"LRN multipliers must be in [0, 2**{MULT_BITS}) and shifts in [0, {MAX_SHIFT}]")
    d = _centered(x, zp_in)
    q = float_ops.channel_window_sum(d.astype(np.int64) ** 2, size)
    index = lrn_index(q)
    return requantize(d, table_mult[index], table_shift[index], zp_out, act_min, act_max)


def upsample_nearest(x: np.ndarray, scale: int | Sequence[int]) -> np.ndarray:
    """Nearest-neighbour upsampling by integer factors: each pixel repeated sy x sx times (no arithmetic)."""
    x = np.asarray(x)
    check_nchw(x)
    sy, sx = as_pair(scale, "scale")
    return np.repeat(np.repeat(x, sy, axis=2), sx, axis=3)


def softmax(x: np.ndarray, scale: float, zp: int, axis: int = 1) -> np.ndarray:
    """Softmax runs on the host in float: float_ops.softmax of the dequantized input (float32 out)."""
    return float_ops.softmax(dequantize(x, scale, zp), axis=axis)


def softmax_int8(x: np.ndarray, exp_table: np.ndarray, axis: int = 1) -> np.ndarray:
    """Integer softmax (docs/numerics.md section 10), output int8 with scale 1/256 and zero point -128.

    t = max(x) - x (0..255); e = exp_table[t]; sum = sum(e) (< 2**32); R = floor(2**52 / sum);
    y = clamp(((e * R + 2**43) >> 44) - 128, -128, 127). The zero point of x cancels in t.
    """
    x = np.asarray(x)
    if x.dtype != np.int8:
        raise TypeError(f"expected an int8 tensor, got {x.dtype}")
    if x.shape[axis] > SOFTMAX_MAX_CHANNELS:
        raise ValueError(f"integer softmax supports at most {SOFTMAX_MAX_CHANNELS} channels, got {x.shape[axis]}")
    table = np.asarray(exp_table, dtype=np.int64)
    if table.shape != (256,) or table.min() < 0 or table.max() > 2**SOFTMAX_EXP_BITS:
        raise ValueError(f"softmax exp table must hold 256 entries in [0, 2**{SOFTMAX_EXP_BITS}]")
    x16 = x.astype(np.int16)
    e = table[x16.max(axis=axis, keepdims=True) - x16]
    total = e.sum(axis=axis, keepdims=True)  # >= table[0] > 0: the maximum contributes exp(0)
    recip = (np.int64(1) << SOFTMAX_RECIP_BITS) // total
    y = ((e * recip + (np.int64(1) << (SOFTMAX_OUT_SHIFT - 1))) >> SOFTMAX_OUT_SHIFT) - 128
    return np.clip(y, INT8_MIN, INT8_MAX).astype(np.int8)


# -- transposed convolution ----------------------------------------------------------------------
__all__ += ["conv_transpose2d"]


def conv_transpose2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    stride: int | Sequence[int] = 1,
    pads: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    zp_in: int = 0,
    *,
    matmul_dtype: type | None = None,
) -> np.ndarray:
    """int32 accumulators of a transposed convolution (ONNX ConvTranspose), wrapped to int32.

    x int8 (N, C, H, W); w int8 (Co, C/groups, kh, kw) in the IR's layout (see
    :func:`dlproc.targets.golden.float_ops.conv_transpose2d`); bias int32 (Co,), unfolded. The inserted
    zeros and the padding hold zp_in, so they contribute 0 after the subtraction, exactly like
    the real zeros of the float definition: ``acc = bias + sum w * (x - zp_in)`` over the taps
    that land on each output.
    """
    x, w = np.asarray(x), np.asarray(w)
    check_conv_shapes(x, w, groups)
    stride, dilation, pads = as_pair(stride, "stride"), as_pair(dilation, "dilation"), as_pads(pads)
    kernel = (w.shape[2], w.shape[3])
    (ho, wo), eq = convtranspose_geometry(x.shape[2], x.shape[3], kernel, stride, pads,
                                          float_ops.output_padding_pair(output_padding), dilation)
    _centered(x, zp_in)  # dtype and zero-point checks before zp_in fills the inserted pixels
    acc = conv2d(zero_insert(x, stride, eq, np.int8(zp_in)), w[:, :, ::-1, ::-1], bias, 1, 0, dilation, groups,
                 zp_in, matmul_dtype=matmul_dtype)
    assert acc.shape[2:] == (ho, wo)
    return acc
