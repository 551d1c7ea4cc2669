"""Calibration: the table's values against independent computations, and the three methods."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlproc.quant import Quantizer
from dlproc.quant.calibrate import (
    ENTROPY_BINS,
    PERCENTILE_BINS,
    RangeCollector,
    entropy_threshold,
)
from dlproc.ir import Layer, Network, Shape

from test_quant_nets import tiny_net


def hand_forward(net: Network, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tiny network computed with explicit loops (independent of the golden float ops)."""
    w1, b1 = net["conv"].weight, net["conv"].bias
    n = x.shape[0]
    xp = np.zeros((n, 1, 6, 6), np.float64)
    xp[:, :, 1:5, 1:5] = x
    conv = np.zeros((n, 2, 4, 4))
    for s in range(n):
        for co in range(2):
            for y in range(4):
                for xx in range(4):
                    total = float(b1[co])
                    for ky in range(3):
                        for kx in range(3):
                            total += float(w1[co, 0, ky, kx]) * xp[s, 0, y + ky, xx + kx]
                    conv[s, co, y, xx] = max(total, 0.0)
    w2, b2 = net["fc"].weight, net["fc"].bias
    fc = np.zeros((n, 3))
    for s in range(n):
        flat = conv[s].reshape(-1)  # C, H, W order
        for o in range(3):
            fc[s, o] = float(b2[o]) + sum(float(w2[o, i]) * flat[i] for i in range(32))
    return conv, fc


def test_calibration_table_matches_hand_computation():
    net = tiny_net()
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.0, 1.0, size=(5, 1, 4, 4)).astype(np.float32)
    table = Quantizer(net).calibrate(x)
    conv, fc = hand_forward(net, x)
    expected = [
        ("input", "input", "Activations", x.min(), x.max()),
        ("conv", "src_conv", "Weights", net["conv"].weight.min(), net["conv"].weight.max()),
        ("conv", "src_conv", "Bias", -0.2, 0.1),
        ("conv", "src_conv", "Activations", conv.min(), conv.max()),
        ("fc", "src_fc", "Weights", -3 / 8, 3 / 8),
        ("fc", "src_fc", "Bias", -0.5, 0.5),
        ("fc", "src_fc", "Activations", fc.min(), fc.max()),
    ]
    assert len(table) == len(expected)
    for row, (layer, source, kind, lo, hi) in zip(table, expected):
        assert (row.optimized_layer_name, row.network_layer_name, row.learnables_activations) == (layer, source, kind)
        assert row.min_value == pytest.approx(float(lo), rel=1e-5, abs=1e-6)
        assert row.max_value == pytest.approx(float(hi), rel=1e-5, abs=1e-6)
    assert table.range_of("conv") == (table[3].min_value, table[3].max_value)


def test_calibration_table_prints_and_serialises():
    table = Quantizer(tiny_net()).calibrate(np.ones((2, 1, 4, 4), np.float32))
    text = str(table)
    lines = text.splitlines()
    assert lines[1].split() == ["Optimized", "Layer", "Name", "Network", "Layer", "Name", "Learnables", "/",
                                "Activations", "MinValue", "MaxValue"]
    assert "src_conv" in text and "Weights" in text and "Bias" in text
    # Columns are aligned: every data line has the same length as the separator or shorter.
    assert all(len(line) <= len(lines[2]) for line in lines[3:])
    rows = json.loads(table.to_json())
    assert rows[0] == {"Optimized Layer Name": "input", "Network Layer Name": "input",
                       "Learnables / Activations": "Activations", "MinValue": 1.0, "MaxValue": 1.0}
    assert [r["Learnables / Activations"] for r in rows] == [
        "Activations", "Weights", "Bias", "Activations", "Weights", "Bias", "Activations"]


def test_calibration_is_independent_of_batching():
    """More samples than one forward batch: the ranges cover all of them."""
    net = tiny_net()
    x = np.zeros((150, 1, 4, 4), np.float32)
    x[137, 0, 2, 2] = 7.0  # in a later forward batch than the first
    x[3, 0, 0, 0] = -2.0
    table = Quantizer(net).calibrate(x)
    assert table.range_of("input") == (-2.0, 7.0)


def _input_only_network(shape=(1, 1, 1)) -> Network:
    net = Network("identity", [Layer("input", "input", [], Shape(*shape))], ["input"], ["input"])
    net.validate()
    return net


def test_percentile_on_a_known_distribution():
    values = np.linspace(-1.0, 1.0, 200001, dtype=np.float32)
    x = np.random.default_rng(0).permutation(values).reshape(-1, 1, 1, 1)
    table = Quantizer(_input_only_network()).calibrate(x, method="percentile", percentile=99.0)
    lo, hi = table.range_of("input")
    width = 2.0 / PERCENTILE_BINS
    assert hi == pytest.approx(0.98, abs=width)
    assert lo == pytest.approx(-0.98, abs=width)


def test_percentile_ignores_rare_outliers():
    x = np.concatenate([np.linspace(0, 1, 100000), [50.0]]).astype(np.float32).reshape(-1, 1, 1, 1)
    table = Quantizer(_input_only_network()).calibrate(x, method="percentile", percentile=99.9)
    lo, hi = table.range_of("input")
    width = 50.0 / PERCENTILE_BINS
    assert lo == pytest.approx(0.001, abs=width)
    assert hi == pytest.approx(0.999, abs=width)  # the outlier at 50 does not stretch the range


def test_entropy_clips_a_heavy_outlier_to_the_smallest_threshold():
    """|N(0,1)| plus one value of 1000: every bin of the Gaussian mass is among the first few of
    2048 over [0, 1000], so the KL minimum is the smallest candidate, 128 bins = 62.5."""
    rng = np.random.default_rng(0)
    x = np.abs(rng.standard_normal(200000)).astype(np.float32)
    x[0] = 1000.0
    table = Quantizer(_input_only_network()).calibrate(x.reshape(-1, 1, 1, 1), method="entropy")
    lo, hi = table.range_of("input")
    assert lo == pytest.approx(float(x.min()))
    assert hi == pytest.approx(128 * 1000.0 / ENTROPY_BINS)


def test_entropy_keeps_a_uniform_range_and_clips_a_gaussian_tail():
    rng = np.random.default_rng(1)
    uniform = rng.uniform(-4.0, 4.0, 100000)
    hist = np.histogram(np.abs(uniform), bins=ENTROPY_BINS, range=(0, 4.0))[0]
    assert entropy_threshold(hist, 4.0) == pytest.approx(4.0)  # clipping would only lose mass
    gauss = rng.standard_normal(400000)
    amax = float(np.abs(gauss).max())
    hist = np.histogram(np.abs(gauss), bins=ENTROPY_BINS, range=(0, amax))[0]
    t = entropy_threshold(hist, amax)
    assert 2.0 < t < 0.95 * amax  # the sparse tail is clipped, the bulk kept


def test_minmax_collector_and_histogram_pass_agree_on_constant_tensor():
    c = RangeCollector()
    c.update_minmax(np.full(10, 3.0))
    for method in ("percentile", "entropy"):
        c.start_histogram(method)
        c.update_histogram(np.full(10, 3.0), method)
        assert c.result(method, 99.0) == (3.0, 3.0)


def test_each_method_gives_ranges_inside_the_minmax_range():
    net = tiny_net()
    x = np.random.default_rng(5).standard_normal((40, 1, 4, 4)).astype(np.float32)
    q = Quantizer(net)
    full = {r.optimized_layer_name: (r.min_value, r.max_value)
            for r in q.calibrate(x) if r.learnables_activations == "Activations"}
    for method in ("percentile", "entropy"):
        table = q.calibrate(x, method=method, percentile=99.0)
        for row in table:
            if row.learnables_activations == "Activations":
                lo, hi = full[row.optimized_layer_name]
                assert lo <= row.min_value <= row.max_value <= hi
            else:  # learnables always report their exact range
                assert row.min_value == float(net[row.optimized_layer_name].params[
                    "weight" if row.learnables_activations == "Weights" else "bias"].min())
