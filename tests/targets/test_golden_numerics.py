"""Rounding, saturation and wrap corner cases written out by hand, plus the worked examples of
docs/numerics.md (each number here appears in the document)."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.targets.golden import ops
from dlproc.ir import Activation
from dlproc.hardware.numerics import (
    LRN_TABLE_SIZE,
    lrn_bucket,
    lrn_index,
    quantize_multiplier,
    requantize,
    wrap_int32,
)


def rq(acc, m, s, zp=0, lo=-128, hi=127, mneg=None) -> list[int]:
    return requantize(np.array(acc, dtype=np.int64), m, s, zp, lo, hi, mneg).tolist()


def test_requantize_rounds_half_up():
    # acc / 2 with S = 1: +0.5 -> 1, +1.5 -> 2, -0.5 -> 0, -1.5 -> -1, -2.5 -> -2 (towards +inf).
    assert rq([1, 3, -1, -3, -5], 1, 1) == [1, 2, 0, -1, -2]
    # Not exactly half: -0.75 -> -1, +0.75 -> 1, -0.25 -> 0.
    assert rq([-3, 3, -1], 1, 2) == [-1, 1, 0]
    # M = 3, S = 2: 1 * 3 / 4 = 0.75 -> 1; -2 * 3 / 4 = -1.5 -> -1.
    assert rq([1, -2], 3, 2) == [1, -1]


def test_requantize_shift_zero_multiplier_zero_and_zero_point():
    assert rq([5, -7], 3, 0) == [15, -21]  # S = 0: no rounding term
    assert rq([123456, -99999], 0, 20, zp=-7) == [-7, -7]  # M = 0: only the zero point remains
    assert rq([10], 1, 0, zp=100) == [110]
    assert rq([100], 1, 0, zp=100) == [127]  # saturation after adding the zero point


def test_requantize_saturates_and_clamps_activations():
    assert rq([2**31 - 1, -(2**31)], 2**15 - 1, 0) == [127, -128]  # 47-bit products, no overflow
    assert rq([2**31 - 1, -(2**31)], 2**15 - 1, 46) == [1, -1]  # (2**46 - 2**31 + 2**45) >> 46 = 1
    # ReLU with zp_out = -128: act_min = -128; with zp_out = 5: everything below 5 clamps to 5.
    assert rq([-50, 20], 1, 0, zp=5, lo=5) == [5, 25]
    # ReLU6 at s_out = 6/255 with zp -128: act_max = -128 + 255 = 127.
    assert ops.activation_bounds(Activation("clip", lo=0.0, hi=6.0), 6 / 255, -128) == (-128, 127)
    assert ops.activation_bounds(Activation("clip", lo=0.0, hi=6.0), 0.1, 0) == (0, 60)
    assert ops.activation_bounds(Activation("relu"), 0.1, 3) == (3, 127)


def test_requantize_leaky_negative_path():
    # M = 16384, S = 15 (x 0.5), alpha = 0.1: M_neg = floor(0.1 * 16384 + 0.5) = 1638.
    p = ops.requant_params(1.0, np.array([0.5]), 1.0, 0, Activation("leaky", alpha=0.1))
    assert (p.mult.tolist(), p.shift.tolist(), p.mult_neg.tolist()) == ([16384], [15], [1638])
    # -100: (-100 * 1638 + 16384) >> 15 = -147416 >> 15 = -5 (-100 * 1638 / 2**15 = -4.9988); +100 -> 50.
    assert rq([-100, 100, -1], 16384, 15, mneg=1638) == [-5, 50, 0]


def test_quantize_multiplier_examples():
    assert quantize_multiplier(0.5) == (16384, 15)
    assert quantize_multiplier(1.0) == (16384, 14)
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(0.0123) == (25795, 21)  # 0.0123 * 2**21 = 25794.97
    with pytest.raises(ValueError):
        quantize_multiplier(2.0**15)


def test_int32_wrap():
    assert wrap_int32(np.array([2**31, -(2**31) - 1, 2**32 + 5, -1])).tolist() == [-(2**31), 2**31 - 1, 5, -1]
    # An accumulator that overflows wraps like the hardware's 32-bit adder.
    x = np.ones((1, 1, 1, 1), np.int8)
    w = np.full((1, 1, 1, 1), 100, np.int8)
    acc = ops.conv2d(x, w, np.array([2**31 - 50], np.int32))
    assert acc.item() == -(2**31) + 50  # 2**31 - 50 + 100 = 2**31 + 50


def test_zero_point_folding_example():
    # Worked example: w = [3, -2, 5], zp_in = -128, bias_q = 1000 -> 1000 + 128 * 6 = 1768.
    w = np.array([[3, -2, 5]], np.int8)
    assert ops.fold_zero_point(np.array([1000]), w, -128).tolist() == [1768]
    x = np.array([[-128, 0, 10]], np.int8)
    # Golden: 3*0 + -2*128 + 5*138 + 1000 = 1434; hardware: 3*-128 + -2*0 + 5*10 + 1768 = 1434.
    assert ops.fully_connected(x, w, np.array([1000], np.int32), -128).tolist() == [[1434]]
    assert int((x.astype(np.int64) * w).sum() + 1768) == 1434


def test_conv_worked_example():
    # s_in = 0.02, zp_in = -10, s_w = 0.004, s_out = 0.05, zp_out = 3: real multiplier 0.0016.
    mult, shift = quantize_multiplier(0.02 * 0.004 / 0.05)
    assert (mult, shift) == (26844, 24)
    # acc = 5000: 5000 * 26844 = 134220000; + 2**23 = 142608608; >> 24 = 8; + 3 = 11.
    assert rq([5000], mult, shift, zp=3) == [11]
    assert rq([-5000], mult, shift, zp=3) == [-5]  # -8.0003 -> -8 + 3


def test_avgpool_worked_example():
    # 3x3 average, s_in = s_out = 0.1, zp_in = zp_out = -5: multiplier 1/9 = (29127, 18).
    assert ops.pool_multiplier(0.1, 0.1, 9) == (29127, 18)
    x = np.full((1, 1, 3, 3), -5, np.int8)
    x[0, 0, 0, :] = [10, 20, 30]  # sum(x - zp) = 15 + 25 + 35 = 75; 75 / 9 = 8.33 -> 8
    assert ops.avgpool(x, 3, 1, 0, True, -5, 29127, 18, -5).item() == 3
    # Padding holds zp_in; with count_include_pad the divisor stays 9.
    y = ops.avgpool(x, 3, 1, 1, True, -5, 29127, 18, -5)
    assert y[0, 0, 0, 0].item() == -5 + 4  # window rows -1..1, cols -1..1: (15 + 25) / 9 = 4.44 -> 4
    m, s = ops.avgpool_multipliers(0.1, 0.1, (3, 3), 3, 1, 1, False)
    np.testing.assert_array_equal(m, [[16384, 21845, 16384], [21845, 29127, 21845], [16384, 21845, 16384]])
    z = ops.avgpool(x, 3, 1, 1, False, -5, m, s, -5)
    assert z[0, 0, 0, 0].item() == -5 + 10  # (15 + 25) / 4 = 10


def test_add_worked_example():
    # s_a = 0.05, s_b = 0.02, s_out = 0.06: ratios 0.8333, 0.3333 -> shift 15.
    assert ops.add_params(0.05, 0.02, 0.06) == (27307, 10923, 15)
    # xa = 40 (za = 0), xb = -30 (zb = 10): 40 * 27307 + (-40) * 10923 = 655360; (655360 + 16384) >> 15 = 20.
    y = ops.add(np.array([40], np.int8), 0, 27307, np.array([-30], np.int8), 10, 10923, 15, 2)
    assert y.tolist() == [22]  # real: 2.0 - 0.8 = 1.2 = 20 * 0.06, + zp 2


def test_rescale_example():
    # s_in 0.1 -> s_out 0.04 (x 2.5): (M, S) = (20480, 13); 7 - 1 = 6 codes -> 15, + zp 0.
    assert ops.rescale_params(0.1, 0.04) == (20480, 13)
    assert ops.rescale(np.array([7, -128], np.int8), 1, 20480, 13, 0).tolist() == [15, -128]


def test_maxpool_padding_never_wins_and_bad_pads():
    x = np.full((1, 1, 2, 2), -128, np.int8)
    assert ops.maxpool(x, 2, 1, 1).tolist() == np.full((1, 1, 3, 3), -128).tolist()
    with pytest.raises(ValueError, match="smaller than the kernel"):
        ops.maxpool(x, 2, 1, 2)


def test_lrn_index_examples():
    assert lrn_index(np.array([0, 255, 256, 257, 511, 512, 1023, 2**20 - 1])).tolist() == [
        0, 255, 256, 256, 383, 384, 511, LRN_TABLE_SIZE - 1]
    first, last = lrn_bucket(np.array([255, 256, 384, LRN_TABLE_SIZE - 1]))
    assert first.tolist() == [255, 256, 512, 2**20 - 2**12]
    assert last.tolist() == [255, 257, 515, 2**20 - 1]
    with pytest.raises(ValueError):
        lrn_index(np.array([2**20]))


def test_lrn_worked_example():
    # size 5, alpha 1e-4, beta 0.75, bias 1, s_in = 0.5, s_out = 0.25: f(q) = 2 * (1 + 5e-6 q) ** -0.75.
    p = ops.lrn_params(5, 1e-4, 0.75, 1.0, 0.5, 0.25)
    assert (int(p.mult[0]), int(p.shift[0])) == (16384, 13)  # f(0) = 2
    x = np.full((1, 5, 1, 1), 40, np.int8)  # zp_in 0: q = 3 * 1600 at the border, 5 * 1600 in the centre
    i = int(lrn_index(8000))
    assert i == 890  # bit_length(8000) = 13, e = 5, 8000 >> 5 = 250 -> (5 << 7) + 250
    assert [v.tolist() for v in lrn_bucket(i)] == [8000, 8031]
    assert (int(p.mult[i]), int(p.shift[i])) == (31816, 14)  # f(8015.5) = 1.94193 ~= 31816 / 2**14
    # Centre: (40 * 31816 + 2**13) >> 14 = 1280832 >> 14 = 78 (float: 77.68); border q = 4800: 79 (78.59).
    y = ops.lrn(x, 5, 0, p.mult, p.shift, 0)
    assert y[0, :, 0, 0].tolist() == [79, 78, 78, 78, 79]


def test_global_avgpool_worked_example():
    # 7x7, s_in = 0.1, s_out = 0.05, zp_in = zp_out = -128: 0.1 / (0.05 * 49) -> (21400, 19).
    assert ops.pool_multiplier(0.1, 0.05, 49) == (21400, 19)
    x = np.full((1, 1, 7, 7), -100, np.int8)
    x[0, 0, 0, 0] = 127  # s = 48 * 28 + 255 = 1599; real 65.27 -> 65
    assert ops.global_avgpool(x, -128, 21400, 19, -128).item() == -63


def test_clip_bounds_worked_example():
    assert ops.activation_bounds(Activation("clip", lo=0.0, hi=6.0), 0.05, -100) == (-100, 20)


def test_power_of_two_scaling_is_multiplier_one():
    # MATLAB-style scaling: acc * 2**-4 with round half up.
    assert rq([8, 24, -8, -24, 7], 1, 4) == [1, 2, 0, -1, 0]


def test_out_of_range_multipliers_are_quantization_errors():
    from dlproc.errors import QuantizationError

    with pytest.raises(QuantizationError, match="output channel 1"):
        ops.requant_params(1.0, np.array([1.0, 1e5]), 1.0)
    with pytest.raises(QuantizationError, match="rescale"):
        ops.rescale_params(1e5, 1.0)
    with pytest.raises(QuantizationError, match="LRN size"):
        ops.lrn_params(17, 1e-4, 0.75, 1.0, 1.0, 1.0)
    with pytest.raises(QuantizationError, match="leaky"):
        ops.requant_params(1.0, np.array([0.5]), 1.0, 0, Activation("leaky", alpha=2.5))
