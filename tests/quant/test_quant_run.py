"""Network executors: run_int8 against run_float, bit-exact integer semantics, and ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from dlproc.errors import QuantizationError
from dlproc.frontends import load_onnx
from dlproc.targets.golden.run import run_float, run_int8
from dlproc.hardware.numerics import requantize
from dlproc.quant import Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_MODEL

from test_quant_nets import branch_net, conv_pool_fc_net, tiny_net


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    noise = np.sum((ref.astype(np.float64) - got) ** 2)
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / noise)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("builder,signed,share", [(conv_pool_fc_net, True, True), (branch_net, False, False),
                                                  (branch_net, False, True)])
def test_int8_network_tracks_float_network(builder, signed, share, seed):
    """Every layer of the int8 network stays close to the float one: per-layer SQNR >= 25 dB, and
    the final output within 8 output steps (errors of a few steps accumulate over the layers).

    Sharing one scale across a concat costs resolution where a narrow or non-negative input joins
    a wide or signed one (branch_net's ReLU conv "g" joins a leaky-ReLU tensor: zero point 0, half
    the codes unused), so that configuration is held to 18 dB."""
    rng = np.random.default_rng(seed)
    net = builder(rng)
    shape = (48,) + net["input"].shape.as_tuple()
    x = (rng.standard_normal(shape) if signed else rng.random(shape)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize(share_concat_scales=share)
    ref = run_float(net, x, collect=True)
    got = run_int8(qnet, qnet.quantize_input(x), collect=True)
    assert list(ref) == list(got) == [layer.name for layer in net]
    min_sqnr = 18.0 if share and builder is branch_net else 25.0
    for name in ref:
        layer = qnet[name]
        value = got[name]
        assert value.dtype == (np.int8 if layer.hardware else np.float32)
        assert value.shape == ref[name].shape == (48,) + layer.shape.as_tuple()
        assert sqnr_db(ref[name], qnet.dequantize(name, value)) >= min_sqnr, name
    out = net.outputs[0]
    err = np.abs(qnet.dequantize(out, got[out]) - ref[out]).max()
    assert err <= 8 * qnet[out].scale


def test_int8_conv_and_fc_are_bit_exact_with_integer_formulas():
    """The tiny network's int8 outputs recomputed with explicit integer loops."""
    net = tiny_net()
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (3, 1, 4, 4)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize()
    xq = qnet.quantize_input(x)
    got = run_int8(qnet, xq, collect=True)
    conv, zin = qnet["conv"], qnet["input"].zero_point
    w, b = conv.params["weight"].astype(np.int64), conv.params["bias"].astype(np.int64)
    padded = np.full((3, 1, 6, 6), zin, np.int64)
    padded[:, :, 1:5, 1:5] = xq
    acc = np.zeros((3, 2, 4, 4), np.int64)
    for co in range(2):
        for y in range(4):
            for xx in range(4):
                win = padded[:, 0, y : y + 3, xx : xx + 3] - zin
                acc[:, co, y, xx] = (win * w[co, 0]).sum(axis=(1, 2)) + b[co]
    expect = requantize(acc, conv.params["mult"].reshape(-1, 1, 1), conv.params["shift"].reshape(-1, 1, 1),
                        conv.zero_point, conv.act_min, conv.act_max, conv.params["mult_neg"].reshape(-1, 1, 1))
    np.testing.assert_array_equal(got["conv"], expect)
    fc = qnet["fc"]
    flat = expect.reshape(3, -1).astype(np.int64) - conv.zero_point
    acc = flat @ fc.params["weight"].astype(np.int64).T + fc.params["bias"].astype(np.int64)
    expect_fc = requantize(acc, fc.params["mult"], fc.params["shift"], fc.zero_point, fc.act_min, fc.act_max,
                           fc.params["mult_neg"])
    np.testing.assert_array_equal(got["fc"].reshape(3, -1), expect_fc)


def test_run_float_matches_onnx_runtime_on_digits():
    net = load_onnx(DIGITS_MODEL)
    x, _ = digits_dataset("heldout")
    sess = ort.InferenceSession(str(DIGITS_MODEL), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"input": x})[0]
    got = run_float(net, x)["softmax"].reshape(ref.shape)
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_executors_check_their_input():
    net = tiny_net()
    with pytest.raises(QuantizationError, match="expected dtype float32, got float64"):
        run_float(net, np.zeros((1, 1, 4, 4)))
    with pytest.raises(QuantizationError, match=r"expected shape \(N, 1, 4, 4\) \(NCHW\), got \(1, 4, 4, 1\)"):
        run_float(net, np.zeros((1, 4, 4, 1), np.float32))
    q = Quantizer(net)
    q.calibrate(np.ones((1, 1, 4, 4), np.float32))
    qnet = q.quantize()
    with pytest.raises(QuantizationError, match="expected dtype int8, got float32"):
        run_int8(qnet, np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(QuantizationError, match="no data for network input"):
        run_int8(qnet, {"other": np.zeros((1, 1, 4, 4), np.int8)})


def test_validate_builtin_network_with_two_outputs():
    """Non-ONNX networks validate against run_float; a custom metric sees every output."""
    from test_quant_nets import NetBuilder, rand_w

    rng = np.random.default_rng(6)
    b = NetBuilder("two", (2, 6, 6))
    b.conv("c", "input", rand_w(rng, 4, 2, 3, 3), None, pads=(1, 1, 1, 1))
    b.gap("g", "c")
    b.fc("fc", "g", rand_w(rng, 3, 4))
    net = b.build(["fc", "c"])
    x = rng.standard_normal((10, 2, 6, 6)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    seen = []

    def metric(outputs, labels):
        seen.append([o.shape for o in outputs])
        return float(np.abs(outputs[1]).mean())

    table = q.validate(x, labels=np.zeros(10, np.int64), metric=metric)
    assert seen == [[(10, 3, 1, 1), (10, 4, 6, 6)]] * 2
    expect = float(np.abs(run_float(net, x)["c"]).mean())
    assert table.value("floating point") == pytest.approx(expect, rel=1e-6)
    assert table.value("quantized") == pytest.approx(expect, rel=0.05)
    top1 = q.validate(x, labels=np.zeros(10, np.int64))
    ref = float(np.mean(run_float(net, x)["fc"].reshape(10, -1).argmax(axis=1) == 0))
    assert top1.value("floating point") == ref


from hypothesis import given, settings, strategies as st  # noqa: E402


def _error_bound(qlayer, s_in: float, e_in: float, x_max: float, y_max: float) -> np.ndarray:
    """Worst-case |int8 - float| of a conv/fc output channel, from the scales alone.

    With x' = x + e (|e| <= e_in), w' = w + d (|d| <= s_w / 2) and the bias rounded to
    s_in * s_w / 2: |w'x' - wx| <= sum|w| * e_in + K * (x_max + e_in) * s_w / 2, plus the bias
    rounding, half an output step of requantization and the 2**-15 multiplier error.
    ReLU and saturation only shrink the error (the float value lies inside the calibrated range).
    """
    w = qlayer.params["weight"].astype(np.float64)
    s_w = qlayer.params["weight_scale"].astype(np.float64)
    w_real = np.abs(w.reshape(len(w), -1)) * s_w[:, None]
    k = w_real.shape[1]
    return (w_real.sum(axis=1) * e_in + k * (x_max + e_in) * s_w / 2 + s_in * s_w / 2
            + 0.5 * qlayer.scale + y_max * 2.0**-14)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    c_in=st.integers(1, 5), c_out=st.integers(1, 6), size=st.integers(5, 9), k=st.sampled_from([1, 2, 3]),
    stride=st.integers(1, 2), pad=st.integers(0, 1), relu=st.booleans(), signed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_conv_layers_stay_within_the_derived_error_bound(c_in, c_out, size, k, stride, pad, relu,
                                                                signed, seed):
    """One conv (random shape, stride, padding, activation) then fc: every output channel's
    error is within the bound derived from the input, weight and output scales."""
    from test_quant_nets import RELU, NetBuilder, rand_b, rand_w

    rng = np.random.default_rng(seed)
    b = NetBuilder("rand", (c_in, size, size))
    b.conv("c", "input", rand_w(rng, c_out, c_in, k, k), rand_b(rng, c_out), stride=stride,
           pads=(pad, pad, pad, pad), act=RELU if relu else None)
    b.fc("fc", "c", rand_w(rng, 3, c_out * b.shape("c").h * b.shape("c").w), rand_b(rng, 3))
    net = b.build(["fc"])
    shape = (8, c_in, size, size)
    x = (rng.standard_normal(shape) if signed else rng.random(shape)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize()
    ref = run_float(net, x, collect=True)
    got = run_int8(qnet, qnet.quantize_input(x), collect=True)
    e_in = qnet["input"].scale / 2  # rounding of the input (the range covers the data: no clamping)
    for name, src in (("c", "input"), ("fc", "c")):
        err = np.abs(qnet.dequantize(name, got[name]) - ref[name]).reshape(8, len(qnet[name].params["bias"]), -1)
        bound = _error_bound(qnet[name], qnet[src].scale, e_in, float(np.abs(ref[src]).max()),
                             float(np.abs(ref[name]).max()))
        assert np.all(err.max(axis=(0, 2)) <= bound * (1 + 1e-6) + 1e-7), name
        e_in = float(bound.max())  # the next layer reads this error (its int8 input is exact)
