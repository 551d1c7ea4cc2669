"""The integer arithmetic that the hardware implements: the one definition of requantization.

``docs/numerics.md`` states these formulas in prose; the golden model (``dlproc.golden``) and the
gateware's output stage (``dlproc.gateware``) both follow this module, and the tests compare them
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
