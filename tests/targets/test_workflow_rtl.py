"""Whole networks on the Verilated RTL (C = 4, one cached build shared with the other RTL tests):
the RTL's outputs must equal the ISA-level simulator's and the layer-level golden model's bit for
bit, and the profile must come from the hardware's MARK counters."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.targets.golden.run import run_int8
from dlproc.quant import Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_MODEL
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from test_compiler_random import quantize, random_network

pytestmark = pytest.mark.slow

CFG = small_config(4)


def run_rtl_and_golden(qnet, x):
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    golden = Workflow(qnet, CFG, target="golden")
    y_golden = golden.predict(x)
    rtl = Workflow(qnet, CFG, target="sim")
    try:
        y_rtl, prof = rtl.predict(x, profile=True, display=False)
    finally:
        rtl.close()
    for t in rtl.compiled.outputs:
        np.testing.assert_array_equal(rtl.last_hw_values[t.name], ref[t.name], err_msg=t.name)
        np.testing.assert_array_equal(rtl.last_hw_values[t.name], golden.last_hw_values[t.name])
    np.testing.assert_array_equal(y_rtl, y_golden)
    return rtl.compiled, prof


def test_digits_on_rtl_is_bit_exact_and_profiled():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    qnet = q.quantize()
    x, _ = digits_dataset("heldout")
    cn, prof = run_rtl_and_golden(qnet, x[:3])
    assert [l.name for l in prof.layers] == ["conv1", "pool1", "conv2", "pool2", "fc"]
    assert all(l.cycles > 0 for l in prof.layers)
    # Layer cycles are differences of the MARK values, so they add up to the last MARK, which the
    # FINISH drain follows by a few cycles only.
    total = sum(l.cycles for l in prof.layers)
    assert total <= prof.last_frame_cycles <= total + 64
    assert prof.frames == 3 and prof.total_cycles >= 3 * prof.last_frame_cycles - 64
    for l in prof.layers:
        if l.utilization is not None:
            assert 0 < l.utilization <= 1
    text = prof.table()
    assert "Deep Learning Processor Profiler Performance Results" in text and f"{CFG.target_frequency_mhz:g}MHz" in text


@pytest.mark.parametrize("seed", [3, 5])
def test_random_network_on_rtl_is_bit_exact(seed):
    rng = np.random.default_rng(1000 + seed)  # seeds with first-layer folding and a concat
    net = random_network(rng)
    qnet = quantize(net, rng)
    c, h, w = net[net.inputs[0]].shape.as_tuple()
    cn, prof = run_rtl_and_golden(qnet, rng.uniform(-1, 1, (2, c, h, w)).astype(np.float32))
    assert cn.input.transform is not None and any("concat" in n for n in cn.notes)
    assert len(prof.layers) == len(cn.profile)


def test_demo_json_on_the_small_configuration(tmp_path, capsys):
    import json

    from dlproc.cli import main

    path = tmp_path / "c4.toml"
    CFG.save(path)
    assert main(["demo", "--json", "--images", "12", "--config", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"accuracy", "cycles", "rtl_matches_golden"}
    assert set(doc["accuracy"]) == {"float", "int8", "rtl"}
    assert doc["rtl_matches_golden"] is True
    assert doc["accuracy"]["rtl"] == doc["accuracy"]["int8"] and doc["accuracy"]["float"] >= 0.8
    assert doc["cycles"] > 0


def test_cli_predict_on_sim_prints_the_hardware_profile(tmp_path, capsys):
    import json

    from dlproc.cli import main

    rng = np.random.default_rng(1003)
    net = random_network(rng)
    qnet = quantize(net, rng)
    dlq = qnet.save(tmp_path / "n.dlq")
    cfg_path = tmp_path / "c4.toml"
    CFG.save(cfg_path)
    dlnet = tmp_path / "n.dlnet"
    assert main(["compile", str(dlq), "--config", str(cfg_path), "-o", str(dlnet)]) == 0
    c, h, w = net[net.inputs[0]].shape.as_tuple()
    x = rng.uniform(-1, 1, (2, c, h, w)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    y_path = tmp_path / "y.npy"
    assert main(["predict", str(dlnet), "--input", str(tmp_path / "x.npy"), "--target", "sim", "--profile",
                 "--json", "-o", str(y_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["output"] == str(y_path)
    layers = doc["profile"]["layers"]
    assert all(isinstance(l["cycles"], int) and l["cycles"] > 0 for l in layers)
    assert sum(l["cycles"] for l in layers) <= doc["profile"]["total"]["cycles"]
    ref = run_int8(qnet, qnet.quantize_input(x))[qnet.outputs[0]]
    np.testing.assert_array_equal(np.load(y_path), qnet.dequantize(qnet.outputs[0], ref))
