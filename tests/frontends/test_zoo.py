"""The model zoo (issue 18): every builder's totals against its published figures, its output
shapes, the CLI, and a reduced-size version of each network compiled for a C = 4 configuration
and run bit for bit on the RTL (small inputs keep CI within its time)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.errors import DlprocError
from dlproc.frontends.onnx import load_onnx
from dlproc.frontends.stats import network_stats
from dlproc.models.zoo import ZOO, zoo_entry

from sim_fixture import blocks_config


@pytest.mark.parametrize("name", list(ZOO))
def test_totals_match_the_published_figures(name):
    entry = ZOO[name]
    net = load_onnx(entry.build())
    stats = network_stats(net)
    assert stats.params == pytest.approx(entry.params, rel=0.01), name
    assert stats.macs == pytest.approx(entry.macs, rel=0.01), name
    outs = {tuple(net[o].shape.as_tuple()) for o in net.outputs}
    if name == "yolov3_tiny":
        assert outs == {(255, 13, 13), (255, 26, 26)}
    else:
        assert {o[0] for o in outs} == {1000}


def test_zoo_cli_lists_and_exports(tmp_path, capsys):
    assert main(["zoo", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == list(ZOO)
    out = tmp_path / "mnv2.onnx"
    assert main(["zoo", "export", "mobilenet-v2", "--input-size", "64,64", "-o", str(out)]) == 0
    calib = np.load(tmp_path / "mnv2_calibration.npy")
    assert calib.shape == (8, 3, 64, 64) and calib.dtype == np.float32
    assert tuple(load_onnx(out)["data"].shape.as_tuple()) == (3, 64, 64)
    capsys.readouterr()
    assert main(["zoo", "export", "resnet18", "--input-size", "64,48", "-o", str(out)]) == 2
    assert "H = W" in capsys.readouterr().err
    assert main(["zoo", "export", "lenet", "-o", str(out)]) == 2
    assert "no zoo network 'lenet'" in capsys.readouterr().err
    with pytest.raises(DlprocError, match="at least 67x67"):
        zoo_entry("alexnet").build(32)


#: Reduced inputs: the smallest each network takes, so that its RTL run stays within seconds.
SMALL = {"alexnet": 67, "yolov3_tiny": 64}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ZOO if n not in ("vgg16", "resnet50")])
def test_reduced_network_runs_bit_exact_on_rtl(name):
    """RTL = golden model at a small input on the C = 4 processor with every optional block.
    (VGG-16 compiles too, see test_big_reduced_networks_compile, ResNet-50 as well; their RTL runs
    take minutes at C = 4 and are left to benchmarks/bench_zoo.py.)"""
    from dlproc.estimate.performance import synthetic_quantize
    from dlproc.targets.golden.run import run_int8
    from dlproc.targets.workflow import Workflow

    cfg = blocks_config()
    qnet = synthetic_quantize(load_onnx(ZOO[name].build(SMALL.get(name, 32))))
    shape = qnet[qnet.inputs[0]].shape
    x = np.random.default_rng(0).uniform(-1, 1, (1, shape.c, shape.h, shape.w)).astype(np.float32)
    wf = Workflow(qnet, cfg, target="sim")
    try:
        wf.predict(x, display=False)
    finally:
        wf.close()
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    for t in wf.compiled.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=f"{name}: {t.name}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16"])
def test_big_reduced_networks_compile(name):
    from dlproc.compiler import compile_network
    from dlproc.estimate.performance import synthetic_quantize

    cn = compile_network(synthetic_quantize(load_onnx(ZOO[name].build(32))), blocks_config())
    assert cn.insn_count > 1000
