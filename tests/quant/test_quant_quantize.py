"""quantize(): integer parameters, activation scales, and the .dlq file round trip."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from dlproc.errors import QuantizationError
from dlproc.targets.golden.run import run_int8
from dlproc.hardware.numerics import INT32_MAX, INT32_MIN
from dlproc.quant import FORMAT_VERSION, QuantizedNetwork, Quantizer, choose_qparams

from test_quant_nets import branch_net, conv_pool_fc_net


@pytest.fixture(scope="module")
def quantized():
    rng = np.random.default_rng(11)
    net = conv_pool_fc_net(rng)
    x = rng.standard_normal((32, 3, 12, 12)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    return net, q, q.quantize(), x


def test_choose_qparams():
    assert choose_qparams(0.0, 2.55) == (pytest.approx(0.01), -128)  # non-negative: all 256 codes
    assert choose_qparams(-1.0, 2.54) == (pytest.approx(0.02), 0)  # signed: symmetric
    assert choose_qparams(-2.54, 1.0) == (pytest.approx(0.02), 0)
    assert choose_qparams(0.0, 0.0) == (1.0, -128)


def test_weights_are_int8_per_channel_symmetric(quantized):
    net, _, qnet, _ = quantized
    for name in ("c1", "c2", "fc"):
        layer, ql = net[name], qnet[name]
        w_q, s_w = ql.params["weight"], ql.params["weight_scale"].astype(np.float64)
        assert w_q.dtype == np.int8 and w_q.shape == layer.weight.shape
        assert w_q.min() >= -127 and w_q.max() <= 127
        flat = np.abs(w_q.reshape(len(w_q), -1))
        assert np.all(flat.max(axis=1) == 127)  # every channel uses its full range
        peak = np.abs(layer.weight.reshape(len(w_q), -1)).max(axis=1)
        np.testing.assert_allclose(s_w, peak / 127.0, rtol=1e-6)
        shape = (-1,) + (1,) * (layer.weight.ndim - 1)
        err = np.abs(w_q * s_w.reshape(shape) - layer.weight)
        assert np.all(err <= s_w.reshape(shape) / 2 * (1 + 1e-5))


def test_bias_int32_and_requant_multipliers(quantized):
    net, _, qnet, _ = quantized
    for name in ("c1", "c2", "fc"):
        ql, src = qnet[name], qnet.producer(name)
        assert src.name == net[name].inputs[0]
        s_w = ql.params["weight_scale"].astype(np.float64)
        b_q = ql.params["bias"]
        assert b_q.dtype == np.int32
        np.testing.assert_array_equal(b_q, np.rint(net[name].bias / (src.scale * s_w)))
        real = src.scale * s_w / ql.scale
        m, s = ql.params["mult"].astype(np.float64), ql.params["shift"].astype(np.float64)
        assert np.all(ql.params["mult"] < 2**15) and np.all(ql.params["mult"] >= 2**14)
        assert np.all(np.abs(m / 2.0**s - real) <= real * 2.0**-15)
        # The folded bias is what the MAC array adds: the zero point's share of every sum removed.
        folded = ql.folded_bias(src.zero_point).astype(np.int64)
        w_sum = ql.params["weight"].astype(np.int64).reshape(len(b_q), -1).sum(axis=1)
        np.testing.assert_array_equal(folded, b_q.astype(np.int64) - src.zero_point * w_sum)
        assert folded.min() >= INT32_MIN and folded.max() <= INT32_MAX


def test_activation_params(quantized):
    net, q, qnet, x = quantized
    # Signed input: symmetric; c1 (ReLU): zero point -128; maxpool inherits; c2 (leaky): signed.
    assert qnet["input"].zero_point == 0
    assert qnet["input"].scale == pytest.approx(np.abs(x).max() / 127.0)
    lo, hi = q.calibration.range_of("c1")
    assert lo == 0.0 and qnet["c1"].zero_point == -128
    assert qnet["c1"].scale == pytest.approx(hi / 255.0)
    assert (qnet["p1"].scale, qnet["p1"].zero_point) == (qnet["c1"].scale, qnet["c1"].zero_point)
    assert qnet["c2"].zero_point == 0
    c2 = qnet["c2"]
    np.testing.assert_array_equal(c2.params["mult_neg"], np.floor(0.1 * c2.params["mult"] + 0.5))
    # avgpool 2x2 with count_include_pad: one multiplier for the divisor 4.
    p2 = qnet["p2"]
    assert p2.q["mult"] / 2.0 ** p2.q["shift"] == pytest.approx(qnet["c2"].scale / (4 * p2.scale), rel=2.0**-15)
    assert all(layer.hardware for layer in qnet)


def test_concat_shares_one_scale_with_its_producers():
    rng = np.random.default_rng(2)
    net = branch_net(rng)
    x = rng.random((16, 4, 8, 8)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize()
    cat = qnet["cat"]
    assert cat.q["rescale"] == [None, None, None]
    # The producers that own the inputs' scales (res, c_act, and g behind maxpool + upsample)
    # requantize straight to the concat's scale: the union of the group's calibrated ranges.
    members = ["cat", "res", "c_act", "g", "gp", "up"]
    assert {(qnet[m].scale, qnet[m].zero_point) for m in members} == {(cat.scale, cat.zero_point)}
    lo = min(q.calibration.range_of(m)[0] for m in ("cat", "res", "c_act", "g"))
    hi = max(q.calibration.range_of(m)[1] for m in ("cat", "res", "c_act", "g"))
    assert lo < 0 and cat.zero_point == 0 and cat.scale == pytest.approx(max(-lo, hi) / 127)
    # Layers outside the group keep their own scale.
    assert qnet["a"].scale != cat.scale


def test_branch_network_params():
    rng = np.random.default_rng(2)
    net = branch_net(rng)
    x = rng.random((16, 4, 8, 8)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize(share_concat_scales=False)
    res, a, b = qnet["res"], qnet["a"], qnet["bconv"]
    ma, mb, shift = res.q["ma"], res.q["mb"], res.q["shift"]
    assert ma / 2.0**shift == pytest.approx(a.scale / res.scale, rel=2.0**-14)
    assert mb / 2.0**shift == pytest.approx(b.scale / res.scale, rel=2.0**-14)
    assert res.act_min == res.zero_point  # fused ReLU clamps at real zero
    cat = qnet["cat"]
    assert any(r is not None for r in cat.q["rescale"])
    for src_name, rescale in zip(cat.inputs, cat.q["rescale"]):
        src = qnet[src_name]
        if rescale is None:
            assert (src.scale, src.zero_point) == (cat.scale, cat.zero_point)
        else:
            assert rescale[0] / 2.0 ** rescale[1] == pytest.approx(src.scale / cat.scale, rel=2.0**-15)
    act = qnet["c_act"]
    assert act.q["mult_neg"] == int(np.floor(0.1 * act.q["mult"] + 0.5))
    assert not qnet["prob"].hardware  # softmax stays float
    assert qnet["norm"].params["lrn_mult"].shape == qnet["norm"].params["lrn_shift"].shape


def test_quantize_before_calibrate_is_an_error():
    with pytest.raises(QuantizationError, match="calibrate"):
        Quantizer(conv_pool_fc_net(np.random.default_rng(0))).quantize()


def _assert_same(a: QuantizedNetwork, b: QuantizedNetwork) -> None:
    assert (a.name, a.inputs, a.outputs, a.source_format, a.meta) == (b.name, b.inputs, b.outputs, b.source_format, b.meta)
    assert len(a) == len(b)
    for la, lb in zip(a, b):
        for field in ("name", "op", "inputs", "shape", "scale", "zero_point", "hardware", "attrs", "q",
                      "act_min", "act_max", "origin", "tensor"):
            assert getattr(la, field) == getattr(lb, field), (la.name, field)
        assert sorted(la.params) == sorted(lb.params)
        for key in la.params:
            assert la.params[key].dtype == lb.params[key].dtype
            np.testing.assert_array_equal(la.params[key], lb.params[key])


@pytest.mark.parametrize("builder", [conv_pool_fc_net, branch_net])
def test_save_load_round_trip_is_bit_identical(tmp_path, builder):
    rng = np.random.default_rng(4)
    net = builder(rng)
    x = rng.random((8,) + net["input"].shape.as_tuple()).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize()
    path = qnet.save(tmp_path / "net.dlq")
    loaded = QuantizedNetwork.load(path)
    _assert_same(qnet, loaded)
    xq = qnet.quantize_input(x)
    out_a, out_b = run_int8(qnet, xq, collect=True), run_int8(loaded, xq, collect=True)
    for name in out_a:
        assert out_a[name].dtype == out_b[name].dtype
        np.testing.assert_array_equal(out_a[name], out_b[name])
    # Deterministic file bytes: saving the loaded network again gives the same file.
    again = loaded.save(tmp_path / "again.dlq")
    assert path.read_bytes() == again.read_bytes()


def test_other_format_version_is_rejected(tmp_path, quantized):
    _, _, qnet, _ = quantized
    path = qnet.save(tmp_path / "net.dlq")
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    header = json.loads(members["header.json"])
    header["format_version"] = FORMAT_VERSION + 1
    members["header.json"] = json.dumps(header).encode()
    old = tmp_path / "future.dlq"
    with zipfile.ZipFile(old, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(QuantizationError) as info:
        QuantizedNetwork.load(old)
    msg = str(info.value)
    assert f"format version {FORMAT_VERSION + 1}" in msg and f"format version {FORMAT_VERSION} only" in msg


def test_not_a_dlq_file(tmp_path):
    bad = tmp_path / "bad.dlq"
    bad.write_bytes(b"not a zip")
    with pytest.raises(QuantizationError, match="not a readable dlproc quantized network"):
        QuantizedNetwork.load(bad)
    with pytest.raises(QuantizationError, match="does not exist"):
        QuantizedNetwork.load(tmp_path / "missing.dlq")
    other = tmp_path / "other.dlq"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("header.json", json.dumps({"format": "something-else"}))
    with pytest.raises(QuantizationError, match="not a dlproc quantized network"):
        QuantizedNetwork.load(other)


def test_detection_head_stays_float_and_survives_the_file(tmp_path):
    """A yolo layer (nested tuple attributes) is software: float32 output computed from the
    dequantized int8 conv output, and its attributes round-trip through the .dlq header."""
    from dlproc.targets.golden.run import yolo_float

    from test_quant_nets import NetBuilder, rand_w

    rng = np.random.default_rng(8)
    b = NetBuilder("det", (3, 4, 4))
    b.conv("head", "input", rand_w(rng, 2 * 7, 3, 1, 1), None)
    attrs = {"anchors": [(10.0, 14.0), (23.0, 27.0)], "mask": [0, 1], "classes": 2,
             "options": {"mask": "0,1"}}
    b.add("yolo", "yolo", ["head"], b.shape("head"), attrs=attrs)
    net = b.build(["yolo"])
    x = rng.random((3, 3, 4, 4)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize()
    assert not qnet["yolo"].hardware
    loaded = QuantizedNetwork.load(qnet.save(tmp_path / "det.dlq"))
    assert loaded["yolo"].attrs == attrs
    out = run_int8(loaded, loaded.quantize_input(x), collect=True)
    assert out["yolo"].dtype == np.float32
    np.testing.assert_allclose(out["yolo"], yolo_float(loaded.dequantize("head", out["head"]), attrs), rtol=1e-6)


def test_avgpool_without_padding_count_and_concat_of_equal_scales():
    """count_include_pad=False over padding needs per-window multipliers; a concat whose inputs
    share one scale takes it and rescales nothing."""
    from dlproc.targets.golden.run import run_float

    from test_quant_nets import RELU, NetBuilder, rand_b, rand_w

    rng = np.random.default_rng(12)
    b = NetBuilder("pools", (2, 5, 5))
    b.conv("c", "input", rand_w(rng, 3, 2, 3, 3), rand_b(rng, 3), pads=(1, 1, 1, 1), act=RELU)
    b.pool("avg", "c", "avgpool", 3, 2, pads=(1, 1, 1, 1), count_include_pad=False)
    b.pool("m1", "c", "maxpool", 2, 1, pads=(0, 0, 1, 1))
    b.pool("m2", "c", "maxpool", 3, 1, pads=(1, 1, 1, 1))
    b.concat("cat", ["m1", "m2"])
    net = b.build(["avg", "cat"])
    x = rng.random((6, 2, 5, 5)).astype(np.float32)
    q = Quantizer(net)
    q.calibrate(x)
    qnet = q.quantize()
    avg = qnet["avg"]
    assert avg.params["mult"].shape == (3, 3) and avg.params["shift"].shape == (3, 3)
    # Corner windows average 4 real pixels, edges 6, the centre 9.
    real = avg.params["mult"] / 2.0 ** avg.params["shift"].astype(np.float64)
    counts = np.array([[4, 6, 4], [6, 9, 6], [4, 6, 4]])
    np.testing.assert_allclose(real, qnet["c"].scale / (avg.scale * counts), rtol=2.0**-14)
    cat = qnet["cat"]
    assert cat.q["rescale"] == [None, None]
    assert (cat.scale, cat.zero_point) == (qnet["c"].scale, qnet["c"].zero_point)
    ref = run_float(net, x)
    got = run_int8(qnet, qnet.quantize_input(x))
    for name in ("avg", "cat"):
        err = np.abs(qnet.dequantize(name, got[name]) - ref[name]).max()
        assert err <= 3 * qnet[name].scale
    # Max pooling in int8 is exact on the int8 conv output: equal codes, not just close.
    full = run_int8(qnet, qnet.quantize_input(x), collect=True)
    np.testing.assert_array_equal(full["cat"][:, :3], full["m1"])
