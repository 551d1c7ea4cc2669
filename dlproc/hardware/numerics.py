"""The integer arithmetic that the hardware implements: the one definition of requantization.

``docs/numerics.md`` states these formulas in prose; the golden model (``dlproc.targets.golden``) and the
gateware's output stage (``dlproc.hardware.gateware``) both follow this module, and the tests compare them
bit for bit. Change a formula here and in the docs together, never in one place only.

Requantization maps an int32 accumulator to int8::

    m   = M_neg if acc < 0 else M             # M, M_neg: unsigned, 0 <= M < 2**MULT_BITS
    r   = (1 << (S - 1)) if S > 0 else 0      # S: 0 <= S <= MAX_SHIFT
    y   = ((acc * m + r) >> S) + zp_out       # >> is an arithmetic (flooring) shift
    out = clamp(y, act_min, act_max)          # act_min/act_max: int8 bounds, ReLU/clip included

so rounding is *round half up* (towards +infinity) and the result saturates to the activation's
int8 range. Leaky ReLU is ``M_neg = round(alpha * M)``; without it ``M_neg == M``. Power-of-two
scaling (the MATLAB FPGA scheme) is ``M = 1``. ``acc * m`` is exact in 47 bits, so the hardware
needs a 32 x 15 bit multiplier per output lane.

Two more pieces of hardware arithmetic live here for the same reason: ``wrap_int32`` (accumulators
wrap modulo 2**32) and ``lrn_index`` (the LRN block's table index of a square sum).
"""

from __future__ import annotations

import math

import numpy as np

MULT_BITS = 15  #: width of the unsigned requantization multiplier
MAX_SHIFT = 46  #: largest right shift (acc * M fits in 47 signed bits)
INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def requantize(
    acc: np.ndarray,
    mult: np.ndarray | int,
    shift: np.ndarray | int,
    zp_out: int = 0,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
    mult_neg: np.ndarray | int | None = None,
) -> np.ndarray:
    """Requantize int32 accumulators to int8 exactly as the hardware does.

    ``mult``, ``mult_neg`` and ``shift`` broadcast against ``acc`` (per-channel parameters are
    passed shaped ``(C, 1, 1)`` for a ``(C, H, W)`` accumulator).
    """
    acc64 = np.asarray(acc, dtype=np.int64)
    mult = np.asarray(mult, dtype=np.int64)
    mneg = mult if mult_neg is None else np.asarray(mult_neg, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    m = np.where(acc64 < 0, mneg, mult)
    rounding = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    y = ((acc64 * m + rounding) >> shift) + int(zp_out)
    return np.clip(y, act_min, act_max).astype(np.int8)


def quantize_multiplier(real: float, max_shift: int = MAX_SHIFT) -> tuple[int, int]:
    """Choose (M, S) with M / 2**S closest to ``real`` and M using all MULT_BITS where possible.

    ``real`` must be finite and >= 0. Zero gives (0, 0).
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantization scale must be finite and >= 0, got {real!r}")
    if real == 0.0:
        return 0, 0
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2**exponent, 0.5 <= mantissa < 1
    shift = MULT_BITS - exponent
    if shift > max_shift:  # too small to represent with full precision: lose mantissa bits
        mult = round(real * 2.0**max_shift)
        return (mult, max_shift) if mult > 0 else (0, 0)
    if shift < 0:
        raise ValueError(f"requantization scale {real!r} is too large (>= 2**{MULT_BITS})")
    mult = round(mantissa * 2**MULT_BITS)
    if mult == 2**MULT_BITS:  # rounding carried into the next power of two
        mult //= 2
        shift -= 1
    if shift < 0:
        raise ValueError(f"requantization scale {real!r} is too large (>= 2**{MULT_BITS})")
    return mult, shift


def wrap_int32(value: np.ndarray | int) -> np.ndarray:
    """Reduce integers modulo 2**32 into the int32 range, as the hardware's accumulators wrap."""
    v = np.asarray(value, dtype=np.int64)
    return (((v + 2**31) & (2**32 - 1)) - 2**31).astype(np.int32)


# -- LRN -------------------------------------------------------------------------------------------
# The LRN block squares the zero-point-corrected inputs of a channel window, sums them (q, an
# unsigned LRN_SUM_BITS-bit integer) and looks a multiplier up in a per-layer table indexed by a
# floating-point-like encoding of q: the LRN_MANT_BITS leading bits of q and their position. Entry i
# holds a pair (M_i, S_i) with M_i / 2**S_i ~= (s_in / s_out) * (bias + alpha / size * s_in**2 * q) ** -beta
# at the centre of the entry's q range; the output is requantize(x - zp_in, M_i, S_i, zp_out, act_min,
# act_max). docs/numerics.md section 9 specifies it and derives the accuracy.

LRN_SUM_BITS = 20  #: width of the square sum; 16 * 255**2 < 2**20, hence LRN_MAX_SIZE
LRN_MAX_SIZE = 16  #: largest LRN window (channels)
LRN_MANT_BITS = 8  #: leading bits of the square sum that select a table entry
LRN_TABLE_SIZE = (LRN_SUM_BITS - LRN_MANT_BITS + 2) << (LRN_MANT_BITS - 1)  #: 1792 entries


def lrn_index(q: np.ndarray | int) -> np.ndarray:
    """Table index of square sums ``q`` (0 <= q < 2**LRN_SUM_BITS).

    ``e = max(0, bit_length(q) - LRN_MANT_BITS)`` and ``index = (e << (LRN_MANT_BITS - 1)) + (q >> e)``:
    q itself below 2**LRN_MANT_BITS, then 2**(LRN_MANT_BITS-1) entries per octave.
    """
    q = np.asarray(q, dtype=np.int64)
    if q.size and (q.min() < 0 or q.max() >= 2**LRN_SUM_BITS):
        raise ValueError(f"LRN square sum out of range [0, 2**{LRN_SUM_BITS})")
    # bit_length via frexp is exact for integers below 2**53.
    bits = np.frexp(q.astype(np.float64))[1].astype(np.int64)
    e = np.maximum(bits - LRN_MANT_BITS, 0)
    return (e << (LRN_MANT_BITS - 1)) + (q >> e)


def lrn_bucket(index: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """The square sums (first, last) that share table entry ``index`` (inverse of lrn_index)."""
    index = np.asarray(index, dtype=np.int64)
    e = np.maximum((index >> (LRN_MANT_BITS - 1)) - 1, 0)
    mant = index - (e << (LRN_MANT_BITS - 1))
    first = mant << e
    last = ((mant + 1) << e) - 1
    return first, last


# -- integer softmax (a candidate for the optional softmax block; the host runs softmax in float) ----
SOFTMAX_EXP_BITS = 20  #: exp table entries are round(2**20 * exp(-s_in * t)), t = 0..255
SOFTMAX_MAX_CHANNELS = 4095  #: the exp sum (<= C * 2**20) must fit 32 bits unsigned
SOFTMAX_RECIP_BITS = 52  #: R = floor(2**52 / sum)
SOFTMAX_OUT_SHIFT = SOFTMAX_RECIP_BITS - 8  #: output scale 1/256, zero point -128

# Activation table (docs/numerics.md section 11): after the clamp, an output-stage item of an
# instruction with ``act_table`` set is replaced by entry (y + 128) of a 256-entry int8 table,
# which makes any unary function exact at int8 (the table is the function evaluated at the
# input scale and rounded to the output scale).
ACT_TABLE_SIZE = 256  #: entries, one per int8 input code y = -128..127 (entry y + 128)
