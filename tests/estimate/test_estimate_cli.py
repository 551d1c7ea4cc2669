"""``dlproc estimate`` and ``dlproc explore`` on a small Darknet cfg (shapes only: the parameters
are random with a fixed seed and the calibration data synthetic), and the estimate API on the
same network."""

from __future__ import annotations

import json

import pytest

from dlproc.cli import main
from dlproc.config import ProcessorConfig
from dlproc.estimate import estimate_performance
from dlproc.estimate.explore import parse_sweep
from dlproc.errors import ConfigError

CFG_TEXT = """
[net]
width=16
height=16
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[convolutional]
filters=10
size=1
stride=1
pad=1
activation=linear

[avgpool]

[softmax]
"""

# MACs of the HW layers: conv 3x3 3->8 at 16x16, 3x3 8->16 at 8x8, 1x1 16->10 at 8x8.
MACS = 16 * 16 * 8 * 3 * 9 + 8 * 8 * 16 * 8 * 9 + 8 * 8 * 10 * 16


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("net") / "tiny.cfg"
    path.write_text(CFG_TEXT)
    return path


def test_estimate_json_layout(model, capsys):
    assert main(["estimate", str(model), "--preset", "de10nano_int8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"layers", "total"}
    assert [l["name"] for l in doc["layers"]] == ["conv_0", "maxpool_1", "conv_2", "conv_3", "avgpool_4"]
    assert [l["type"] for l in doc["layers"]] == ["conv", "maxpool", "conv", "conv", "global_avgpool"]
    for layer in doc["layers"]:
        assert set(layer) == {"name", "type", "cycles", "utilization"}
        assert layer["cycles"] > 0 and 0.0 <= layer["utilization"] <= 1.0
    total = doc["total"]
    assert set(total) == {"cycles", "fps", "macs"}
    assert total["macs"] == MACS
    assert total["fps"] == pytest.approx(150e6 / total["cycles"], rel=1e-6)  # the preset's 150 MHz
    # Layers span from MARK to MARK: together they cover all but the program's head and tail.
    assert 0 < total["cycles"] - sum(l["cycles"] for l in doc["layers"]) < 200


def test_estimate_table_follows_matlab_layout(model, capsys):
    assert main(["estimate", str(model), "--preset", "de10nano_int8", "--frames", "3", "--resources"]) == 0
    out = capsys.readouterr().out
    assert "Deep Learning Processor Estimator Performance Results" in out
    for column in ("LastFrameLatency(cycles)", "LastFrameLatency(seconds)", "FramesNum", "Total Latency",
                   "Frames/s", "MAC util.", "Bound"):
        assert column in out
    network = next(line for line in out.splitlines() if line.startswith("Network"))
    cells = network.split()
    cycles = int(cells[1].replace(",", ""))
    assert cells[3] == "3" and int(cells[4].replace(",", "")) == 3 * cycles
    assert "The clock frequency of the DL processor is: 150MHz" in out
    assert "Deep Learning Processor Estimator Resource Results" in out


def test_estimate_api_matches_cli(model):
    rep = estimate_performance(ProcessorConfig.preset("de10nano_int8"), model)
    assert rep.macs == MACS
    assert rep.to_json()["total"]["cycles"] == rep.cycles
    assert {l.bound for l in rep.layers} <= {"compute", "memory", "control"}


def test_estimate_errors_exit_2(model, capsys):
    assert main(["estimate", str(model), "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert main(["estimate", str(model), "--preset", "de10nano_int8", "--input-size", "16by16"]) == 2
    assert "HxW" in capsys.readouterr().err


def test_parse_sweep():
    assert parse_sweep("conv.ConvThreadNumber=64,256") == ("conv.ConvThreadNumber", ["64", "256"])
    assert parse_sweep("conv.InputMemorySize=[28,28,64],56x56x64") == (
        "conv.InputMemorySize", ["[28,28,64]", "56x56x64"])
    with pytest.raises(ConfigError, match="malformed"):
        parse_sweep("ConvThreadNumber")


def test_explore_reports_invalid_values_and_picks_the_fastest_fit(model, tmp_path, capsys):
    png = tmp_path / "pareto.png"
    argv = ["explore", str(model), "--board", "de10-nano", "--sweep", "conv.ConvThreadNumber=64,65,256",
            "-j", "2", "-o", str(png), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    points = {p["assignments"]["conv.ConvThreadNumber"]: p for p in doc["points"]}
    assert not points["65"]["valid"] and "perfect square" in points["65"]["reason"]
    assert points["64"]["valid"] and points["256"]["valid"]
    assert points["256"]["fps"] > points["64"]["fps"] and points["256"]["dsp"] > points["64"]["dsp"]
    assert doc["best"] == {"conv.ConvThreadNumber": "256"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explore_table(model, tmp_path, capsys):
    argv = ["explore", str(model), "--board", "de10-nano", "--sweep", "conv.ConvThreadNumber=16,64", "-j", "1",
            "-o", str(tmp_path / "p.png")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Fastest configuration that fits: conv.ConvThreadNumber=64" in out
    assert "<- fastest that fits" in out


def _onnx_model(path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    b1 = numpy_helper.from_array(np.zeros(8, np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((5, 8)).astype(np.float32) * 0.3, "w2")
    b2 = numpy_helper.from_array(np.zeros(5, np.float32), "b2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p1"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w1, b1, w2, b2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)


def test_estimate_onnx_and_dlq_give_the_same_cycles(tmp_path, capsys):
    from dlproc.estimate.performance import load_for_estimate, synthetic_quantize

    onnx_path = tmp_path / "small.onnx"
    _onnx_model(onnx_path)
    assert main(["estimate", str(onnx_path), "--preset", "de10nano_int8", "--json"]) == 0
    from_onnx = json.loads(capsys.readouterr().out)
    assert from_onnx["total"]["macs"] == 12 * 12 * 8 * 27 + 5 * 8
    dlq = tmp_path / "small.dlq"
    synthetic_quantize(load_for_estimate(onnx_path)).save(dlq)
    assert main(["estimate", str(dlq), "--preset", "de10nano_int8", "--json"]) == 0
    from_dlq = json.loads(capsys.readouterr().out)
    assert from_dlq == from_onnx  # the cycles depend only on the shapes


def test_explore_marks_uncompilable_points_invalid(model):
    from dlproc.estimate.explore import explore
    from dlproc.estimate.performance import load_for_estimate

    result = explore(load_for_estimate(model), ProcessorConfig.preset("de10nano_int8"),
                     {"conv.InputMemorySize": ["10x10x1", "16x16x16"]}, jobs=1)
    small, ok = result.points
    assert not small.valid and small.reason.startswith("compile:") and "does not fit INP" in small.reason
    assert small.dsp > 0  # the resources were still estimated
    assert ok.valid and result.best is ok
    assert "invalid: compile:" in result.table()
