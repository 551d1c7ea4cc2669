"""Each integer golden op against the float reference on dequantized inputs, on random shapes.

Every comparison states its bound in output LSBs. The integer result is y; the float reference,
mapped to output codes without rounding, is r = float_op(dequantized inputs) / s_out + zp_out. For
an op whose real multiplier is m and whose fixed-point multiplier is M / 2**S, the integer path
differs from r by at most

    0.5 (round half up)  +  |integer sum| * |M / 2**S - m|  (multiplier error)  +  float32 slack,

and clamping both to [act_min, act_max] only shrinks the difference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlproc.targets.golden import float_ops as F
from dlproc.targets.golden import ops
from dlproc.targets.golden.windows import as_pads, as_pair, window_counts
from dlproc.ir import Activation
from dlproc.hardware.numerics import LRN_MANT_BITS

SETTINGS = settings(max_examples=40, deadline=None)
FLOAT_SLACK = 1e-3  # float32 rounding of the reference, in output LSBs, for these small sizes

scales = st.floats(1e-3, 1.0, allow_nan=False, allow_infinity=False)
zps = st.integers(-128, 127)
seeds = st.integers(0, 2**31 - 1)


def rand_int8(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def codes(real: np.ndarray, s_out: float, zp_out: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    """The unrounded output code of a real value, clamped like the hardware's output."""
    return np.clip(np.asarray(real, np.float64) / s_out + zp_out, lo, hi)


def mult_error(mult, shift, real) -> np.ndarray:
    return np.abs(np.asarray(mult, np.float64) / 2.0 ** np.asarray(shift, np.float64) - real)


# -------------------------------------------------------------------------------------------------
# conv2d / fully_connected
# -------------------------------------------------------------------------------------------------


@SETTINGS
@given(
    n=st.integers(1, 2),
    cg=st.integers(1, 4),
    cog=st.integers(1, 3),
    groups=st.integers(1, 3),
    hw=st.tuples(st.integers(3, 9), st.integers(3, 9)),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dil=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    s_in=scales,
    zp_in=zps,
    zp_out=zps,
    act=st.sampled_from([None, Activation("relu"), Activation("leaky", alpha=0.1), Activation("clip", lo=0.0, hi=2.0)]),
    seed=seeds,
)
def test_conv2d_requantized_matches_float(n, cg, cog, groups, hw, k, stride, dil, pads, s_in, zp_in, zp_out, act, seed):
    h, w = hw
    if h + pads[0] + pads[2] < dil[0] * (k[0] - 1) + 1 or w + pads[1] + pads[3] < dil[1] * (k[1] - 1) + 1:
        return
    rng = np.random.default_rng(seed)
    c, co = cg * groups, cog * groups
    x = rand_int8(rng, (n, c, h, w))
    w_f = rng.standard_normal((co, cg, *k)).astype(np.float32) * rng.uniform(0.1, 2.0, (co, 1, 1, 1)).astype(np.float32)
    w_q, s_w = ops.quantize_weights(w_f)
    bias_q = ops.quantize_bias(rng.standard_normal(co) * 2.0, s_in, s_w)
    acc = ops.conv2d(x, w_q, bias_q, stride, pads, dil, groups, zp_in)
    assert acc.dtype == np.int32

    # The accumulator is exact: the float reference on integer-valued data has no rounding here
    # (K <= 36 terms of at most 128 * 255, far below float32's 2**24).
    exact = F.conv2d(x.astype(np.float64) - zp_in, w_q.astype(np.float64), bias_q.astype(np.float64), stride, pads, dil, groups)
    np.testing.assert_array_equal(acc, exact.astype(np.float64))

    # Requantized output vs the float conv on dequantized inputs, weights and bias.
    real_acc = F.conv2d(ops.dequantize(x, s_in, zp_in), ops.dequantize(w_q, s_w.reshape(-1, 1, 1, 1)),
                        bias_q * s_in * s_w, stride, pads, dil, groups, act)
    s_out = max(float(np.abs(real_acc).max()) / 100.0, 1e-6)
    rq = ops.requant_params(s_in, s_w, s_out, zp_out, act)
    y = rq.apply(acc)
    per_channel = (1, -1, 1, 1)
    real_mult = (s_in * s_w.astype(np.float64) / s_out).reshape(per_channel)
    negative = acc < 0
    m_used = np.where(negative, rq.mult_neg.reshape(per_channel), rq.mult.reshape(per_channel))
    alpha = act.alpha if act is not None and act.kind == "leaky" else 1.0
    m_real = np.where(negative, real_mult * alpha, real_mult)
    bound = 0.5 + np.abs(acc.astype(np.float64)) * mult_error(m_used, rq.shift.reshape(per_channel), m_real) + FLOAT_SLACK
    ref = codes(real_acc, s_out, zp_out, rq.act_min, rq.act_max)
    # Clip bounds are rounded to codes, so the clamp itself may differ by up to half an LSB.
    clamp_slack = 0.5 if act is not None and act.kind == "clip" else 0.0
    assert np.all(np.abs(y - ref) <= bound + clamp_slack)


def test_conv2d_equals_hardware_form_with_folded_bias_and_wrap():
    """Hardware: raw int8 MACs over zp_in-padded input plus fold_zero_point's bias, int32 wrapping."""
    rng = np.random.default_rng(7)
    x = rand_int8(rng, (1, 5, 6, 7))
    w = rand_int8(rng, (4, 5, 3, 3))
    zp_in = -37
    bias = np.array([2**31 - 10, -(2**31), 12345, -1], dtype=np.int32)  # forces wraps
    pads = (1, 2, 0, 1)
    golden = ops.conv2d(x, w, bias, 1, pads, 1, 1, zp_in)
    padded = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 0), (2, 1)), constant_values=zp_in)
    hw_bias = ops.fold_zero_point(bias, w, zp_in).astype(np.int64)
    ho, wo = golden.shape[2:]
    raw = np.zeros((1, 4, ho, wo), dtype=np.int64)  # |raw| < 9 * 5 * 128 * 128: no overflow
    for ky in range(3):
        for kx in range(3):
            patch = padded[:, :, ky : ky + ho, kx : kx + wo]
            raw += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx].astype(np.int64))
    total = [int(v) for v in (raw + hw_bias.reshape(1, 4, 1, 1)).ravel()]  # Python ints: exact
    hw = np.array([((v + 2**31) % 2**32) - 2**31 for v in total], dtype=np.int32).reshape(golden.shape)
    np.testing.assert_array_equal(golden, hw)
    assert golden.min() < -(2**30) and golden.max() > 2**30  # the wrap really happened in both


@SETTINGS
@given(
    cg=st.integers(1, 3),
    groups=st.integers(1, 3),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dil=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    zp_in=zps,
    seed=seeds,
)
def test_zero_point_folding_is_exact_for_any_geometry(cg, groups, k, stride, dil, pads, zp_in, seed):
    """conv(x, bias, pads, zp_in) == raw MACs over the zp_in-padded input + fold_zero_point(bias), always."""
    rng = np.random.default_rng(seed)
    x = rand_int8(rng, (1, cg * groups, 6, 6))
    w = rand_int8(rng, (2 * groups, cg, *k))
    bias = rng.integers(-(2**31), 2**31, 2 * groups).astype(np.int32)
    golden = ops.conv2d(x, w, bias, stride, pads, dil, groups, zp_in)
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=zp_in)
    hardware = ops.conv2d(xp, w, ops.fold_zero_point(bias, w, zp_in), stride, 0, dil, groups, 0)
    np.testing.assert_array_equal(golden, hardware)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_matmul_paths_agree(dtype):
    rng = np.random.default_rng(11)
    x = rand_int8(rng, (2, 6, 9, 9))
    w = rand_int8(rng, (8, 3, 3, 3))
    bias = rng.integers(-(2**20), 2**20, 8).astype(np.int32)
    ref = ops.conv2d(x, w, bias, 2, 1, 1, 2, 100, matmul_dtype=np.int64)
    np.testing.assert_array_equal(ops.conv2d(x, w, bias, 2, 1, 1, 2, 100, matmul_dtype=dtype), ref)
    np.testing.assert_array_equal(ops.conv2d(x, w, bias, 2, 1, 1, 2, 100), ref)


def test_float32_path_is_not_taken_beyond_its_exact_range():
    """K * 128 * 255 >= 2**24 must not use float32: a 1x1 conv over 1024 channels at full range."""
    x = np.full((1, 1024, 1, 1), -128, dtype=np.int8)
    w = np.full((1, 1024, 1, 1), -128, dtype=np.int8)
    acc = ops.conv2d(x, w, np.array([1], np.int32), zp_in=127)  # (-128 - 127) * -128 * 1024 + 1
    assert acc[0, 0, 0, 0] == 255 * 128 * 1024 + 1


@SETTINGS
@given(n=st.integers(1, 3), cin=st.integers(1, 40), co=st.integers(1, 10), zp_in=zps, seed=seeds)
def test_fully_connected_is_exact(n, cin, co, zp_in, seed):
    rng = np.random.default_rng(seed)
    x, w = rand_int8(rng, (n, cin)), rand_int8(rng, (co, cin))
    bias = rng.integers(-(2**31), 2**31, co).astype(np.int32)
    acc = ops.fully_connected(x, w, bias, zp_in)
    exact = (x.astype(np.int64) - zp_in) @ w.astype(np.int64).T + bias
    np.testing.assert_array_equal(acc, ((exact + 2**31) % 2**32 - 2**31).astype(np.int32))


# -------------------------------------------------------------------------------------------------
# pools
# -------------------------------------------------------------------------------------------------


@SETTINGS
@given(
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    hw=st.tuples(st.integers(3, 8), st.integers(3, 8)),
    s_in=scales,
    zp=zps,
    seed=seeds,
)
def test_maxpool_is_exactly_the_float_max(k, stride, pads, hw, s_in, zp, seed):
    pads = tuple(min(p, kk - 1) for p, kk in zip(pads, (k[0], k[1], k[0], k[1])))
    x = rand_int8(np.random.default_rng(seed), (2, 3, *hw))
    y = ops.maxpool(x, k, stride, pads)
    ref = F.maxpool(ops.dequantize(x, s_in, zp), k, stride, pads)
    # Dequantization is monotonic, so the max of codes is the code of the max: exact.
    np.testing.assert_array_equal(ops.dequantize(y, s_in, zp), ref)


@SETTINGS
@given(
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    hw=st.tuples(st.integers(3, 8), st.integers(3, 8)),
    include=st.booleans(),
    s_in=scales,
    out_ratio=st.floats(0.25, 4.0),
    zp_in=zps,
    zp_out=zps,
    seed=seeds,
)
def test_avgpool_matches_float(k, stride, pads, hw, include, s_in, out_ratio, zp_in, zp_out, seed):
    pads = tuple(min(p, kk - 1) for p, kk in zip(pads, (k[0], k[1], k[0], k[1])))
    x = rand_int8(np.random.default_rng(seed), (2, 3, *hw))
    s_out = s_in * out_ratio
    mult, shift = ops.avgpool_multipliers(s_in, s_out, hw, k, stride, pads, include)
    y = ops.avgpool(x, k, stride, pads, include, zp_in, mult, shift, zp_out)
    real = F.avgpool(ops.dequantize(x, s_in, zp_in), k, stride, pads, include)
    # The window sum s is exact; only the multiplier and the final rounding err.
    d = np.pad(x.astype(np.int64) - zp_in, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    s_abs = np.abs(d).max() * k[0] * k[1]
    n = k[0] * k[1] if include else window_counts(hw[0], hw[1], as_pair(k, "k"), as_pair(stride, "s"), as_pads(pads))
    bound = 0.5 + s_abs * mult_error(mult, shift, s_in / (s_out * np.asarray(n, np.float64))) + FLOAT_SLACK
    assert np.all(np.abs(y - codes(real, s_out, zp_out)) <= bound)


def test_avgpool_without_pad_counting_needs_per_window_multipliers():
    x = np.zeros((1, 1, 4, 4), np.int8)
    with pytest.raises(ValueError, match="per-window"):
        ops.avgpool(x, 3, 1, 1, False, 0, 16384, 15, 0)
    # Without padding every window is full and one multiplier is correct for both settings.
    m, s = ops.avgpool_multipliers(1.0, 1.0, (4, 4), 3, 1, 0, False)
    assert np.ndim(m) == 0
    np.testing.assert_array_equal(ops.avgpool(x + 9, 3, 1, 0, False, 0, m, s, 0), np.full((1, 1, 2, 2), 9))


@SETTINGS
@given(hw=st.tuples(st.integers(1, 9), st.integers(1, 9)), s_in=scales, out_ratio=st.floats(0.25, 4.0), zp_in=zps, zp_out=zps, seed=seeds)
def test_global_avgpool_matches_float(hw, s_in, out_ratio, zp_in, zp_out, seed):
    x = rand_int8(np.random.default_rng(seed), (2, 4, *hw))
    s_out = s_in * out_ratio
    n = hw[0] * hw[1]
    mult, shift = ops.pool_multiplier(s_in, s_out, n)
    y = ops.global_avgpool(x, zp_in, mult, shift, zp_out)
    assert y.shape == (2, 4, 1, 1)
    s = (x.astype(np.int64) - zp_in).sum(axis=(2, 3), keepdims=True)
    bound = 0.5 + np.abs(s) * mult_error(mult, shift, s_in / (s_out * n)) + FLOAT_SLACK
    real = F.global_avgpool(ops.dequantize(x, s_in, zp_in))
    assert np.all(np.abs(y - codes(real, s_out, zp_out)) <= bound)


# -------------------------------------------------------------------------------------------------
# add, rescale, concat, upsample, softmax
# -------------------------------------------------------------------------------------------------


@SETTINGS
@given(s_a=scales, s_b=scales, s_out=scales, za=zps, zb=zps, zo=zps, relu=st.booleans(), seed=seeds)
def test_add_matches_float(s_a, s_b, s_out, za, zb, zo, relu, seed):
    if max(s_a, s_b) / s_out >= 2**14:
        return
    rng = np.random.default_rng(seed)
    xa, xb = rand_int8(rng, (2, 3, 4, 4)), rand_int8(rng, (2, 3, 4, 4))
    ma, mb, shift = ops.add_params(s_a, s_b, s_out)
    act = Activation("relu") if relu else None
    lo, hi = ops.activation_bounds(act, s_out, zo)
    y = ops.add(xa, za, ma, xb, zb, mb, shift, zo, lo, hi)
    real = F.add(ops.dequantize(xa, s_a, za), ops.dequantize(xb, s_b, zb), act)
    da, db = np.abs(xa.astype(np.int64) - za), np.abs(xb.astype(np.int64) - zb)
    bound = 0.5 + da * mult_error(ma, shift, s_a / s_out) + db * mult_error(mb, shift, s_b / s_out) + FLOAT_SLACK
    assert np.all(np.abs(y - codes(real, s_out, zo, lo, hi)) <= bound)


@SETTINGS
@given(s_in=scales, out_ratio=st.floats(0.05, 20.0), zp_in=zps, zp_out=zps, seed=seeds)
def test_rescale_and_concat_match_float(s_in, out_ratio, zp_in, zp_out, seed):
    rng = np.random.default_rng(seed)
    a, b = rand_int8(rng, (1, 2, 3, 3)), rand_int8(rng, (1, 3, 3, 3))
    s_out = s_in * out_ratio
    mult, shift = ops.rescale_params(s_in, s_out)
    b_rescaled = ops.rescale(b, zp_in, mult, shift, zp_out)
    bound = 0.5 + np.abs(b.astype(np.int64) - zp_in) * mult_error(mult, shift, 1 / out_ratio) + FLOAT_SLACK
    assert np.all(np.abs(b_rescaled - codes(ops.dequantize(b, s_in, zp_in), s_out, zp_out)) <= bound)
    joined = ops.concat([a, b_rescaled])
    np.testing.assert_array_equal(joined[:, :2], a)
    np.testing.assert_array_equal(joined[:, 2:], b_rescaled)


def test_upsample_and_softmax():
    x = rand_int8(np.random.default_rng(3), (2, 3, 2, 3))
    up = ops.upsample_nearest(x, 2)
    assert up.dtype == np.int8 and up.shape == (2, 3, 4, 6)
    np.testing.assert_array_equal(up[:, :, 1::2, 1::2], x)
    np.testing.assert_array_equal(ops.dequantize(up, 0.1, 3), F.upsample_nearest(ops.dequantize(x, 0.1, 3), 2))
    p = ops.softmax(x, 0.05, -4)
    np.testing.assert_allclose(p, F.softmax(ops.dequantize(x, 0.05, -4)), rtol=1e-6)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)


# -------------------------------------------------------------------------------------------------
# LRN
# -------------------------------------------------------------------------------------------------


@SETTINGS
@given(
    size=st.integers(1, 9),
    alpha=st.floats(1e-5, 1.0),
    beta=st.floats(0.5, 1.0),
    bias=st.floats(0.5, 3.0),
    s_in=st.floats(0.01, 4.0),
    zp_in=st.integers(-20, 20),
    zp_out=st.integers(-20, 20),
    seed=seeds,
)
def test_lrn_matches_float_within_the_table_bound(size, alpha, beta, bias, s_in, zp_in, zp_out, seed):
    """Bound: 0.5 (rounding) + beta * 2**-LRN_MANT_BITS * |r - zp_out| (index: q is replaced by the
    centre of its bucket, relative error <= 2**-LRN_MANT_BITS) + 2**-14 * |r - zp_out| (15-bit entries)."""
    x = rand_int8(np.random.default_rng(seed), (2, 12, 3, 3))
    real = F.lrn(ops.dequantize(x, s_in, zp_in), size, alpha, beta, bias)
    s_out = max(float(np.abs(real).max()) / 120.0, 1e-6)
    p = ops.lrn_params(size, alpha, beta, bias, s_in, s_out)
    y = ops.lrn(x, size, zp_in, p.mult, p.shift, zp_out)
    r = np.asarray(real, np.float64) / s_out + zp_out
    mag = np.abs(r - zp_out)
    bound = 0.5 + mag * (beta * 2.0**-LRN_MANT_BITS * 1.01 + 2.0**-14) + FLOAT_SLACK
    assert np.all(np.abs(y - np.clip(r, -128, 127)) <= bound)


def test_lrn_accuracy_googlenet_like():
    """GoogLeNet's LRN (size 5, alpha 1e-4, beta 0.75, bias 1) on full-range data: within 1 LSB, mostly exact."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 64, 14, 14)).astype(np.int8)
    s_in, zp_in = 0.9, -128  # a ReLU output spanning 0 .. 230
    real = F.lrn(ops.dequantize(x, s_in, zp_in), 5, 1e-4, 0.75, 1.0)
    s_out, zp_out = float(real.max()) / 255.0, -128
    p = ops.lrn_params(5, 1e-4, 0.75, 1.0, s_in, s_out)
    y = ops.lrn(x, 5, zp_in, p.mult, p.shift, zp_out)
    ref = np.clip(np.floor(real / s_out + 0.5) + zp_out, -128, 127)
    diff = np.abs(y.astype(np.int64) - ref)
    assert diff.max() <= 1
    assert np.mean(diff == 0) > 0.9  # measured 93.5 %: the bucket error (<= 0.375 LSB here) moves near-ties


# -------------------------------------------------------------------------------------------------
# host-side quantization helpers
# -------------------------------------------------------------------------------------------------


def test_quantize_tensor_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0, 0.26], np.float32)
    np.testing.assert_array_equal(ops.quantize_tensor(x, 1.0, 0), [0, 2, 2, 0, -2, 127, -128, 0])
    np.testing.assert_array_equal(ops.quantize_tensor(np.array([0.0, 1.0]), 0.5, -3), [-3, -1])
    assert ops.dequantize(np.array([-3, -1], np.int8), 0.5, -3).tolist() == [0.0, 1.0]


def test_quantize_weights_and_bias():
    w = np.array([[1.27, -0.635, 0.0], [0.0, 0.0, 0.0], [-2.54, 1.0, 0.01]], np.float32)
    w_q, s = ops.quantize_weights(w)
    np.testing.assert_allclose(s, [0.01, 1.0, 0.02], rtol=1e-6)
    np.testing.assert_array_equal(w_q, [[127, -64, 0], [0, 0, 0], [-127, 50, 0]])  # -63.5 -> -64 (half to even)
    np.testing.assert_array_equal(ops.quantize_bias(np.array([0.5, 1.0, -0.3]), 0.5, s), [100, 2, -30])
    from dlproc.errors import QuantizationError

    with pytest.raises(QuantizationError, match="exceeds int32"):
        ops.quantize_bias(np.array([1e9]), 1e-3, np.array([1e-3]))
    with pytest.raises(QuantizationError, match="NaN"):
        ops.quantize_weights(np.array([[np.nan]]))


@SETTINGS
@given(c=st.integers(1, 1000), s_in=st.floats(0.005, 0.5), zp=zps, seed=seeds)
def test_softmax_int8_matches_float(c, s_in, zp, seed):
    """Bound: 0.5 (rounding) + 256 * (0.5 + C / 2) / 2**20 (each exp entry is off by <= 0.5 of 2**20,
    the sum by <= C/2) + 2**-20 (the reciprocal's floor)."""
    x = rand_int8(np.random.default_rng(seed), (2, c, 1, 1))
    y = ops.softmax_int8(x, ops.softmax_exp_table(s_in))
    ref = np.clip(F.softmax(ops.dequantize(x, s_in, zp)).astype(np.float64) * 256 - 128, -128, 127)
    bound = 0.5 + 256 * (0.5 + c / 2) / 2**20 + 2**-20 + FLOAT_SLACK
    assert np.all(np.abs(y - ref) <= bound)


def test_softmax_int8_worked_example():
    # s_in = ln(2) / 16: exp(-s t) halves every 16 codes. x = [10, -6, 10] -> e = [2**20, 2**19, 2**20].
    table = ops.softmax_exp_table(np.log(2) / 16)
    assert (int(table[0]), int(table[16]), int(table[255])) == (2**20, 2**19, 17)
    x = np.array([10, -6, 10], np.int8).reshape(1, 3, 1, 1)
    # sum = 2.5 * 2**20; R = floor(2**52 / sum) = 1717986918; p = 0.4, 0.2, 0.4 -> 102.4, 51.2 -> 102, 51.
    assert ops.softmax_int8(x, table).ravel().tolist() == [102 - 128, 51 - 128, 102 - 128]
