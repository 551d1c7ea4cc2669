"""Workflow and CLI: wrong inputs are refused before anything runs; compile and predict commands."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.errors import CompileError, DlprocError
from dlproc.targets.golden.run import run_int8
from dlproc.quant import digits_dataset
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from test_compiler_random import quantize, random_network


@pytest.fixture(scope="module")
def qnet():
    rng = np.random.default_rng(21)
    return quantize(random_network(rng, "wf"), rng)


def test_wrong_input_shape_is_refused_and_nothing_runs(qnet):
    wf = Workflow(qnet, small_config(4), target="golden")
    c, h, w = qnet[qnet.inputs[0]].shape.as_tuple()
    for bad in (np.zeros((2, c + 1, h, w), np.float32), np.zeros((c, h, w), np.float32),
                np.zeros((1, c, h, w + 1), np.float32)):
        with pytest.raises(CompileError, match=f"expects \\(N, {c}, {h}, {w}\\)|add the batch dimension"):
            wf.predict(bad)
    with pytest.raises(CompileError, match="NaN or Inf"):
        wf.predict(np.full((1, c, h, w), np.nan, np.float32))
    assert wf._machine is None  # never deployed


def test_bad_target_and_missing_config(qnet):
    with pytest.raises(DlprocError, match="target 'fpga' is not one of golden, sim"):
        Workflow(qnet, small_config(4), target="fpga")
    with pytest.raises(CompileError, match="needs a processor configuration"):
        Workflow(qnet, None)


def test_profile_on_golden_target_says_it_has_no_cycles(qnet):
    wf = Workflow(qnet, small_config(4), target="golden")
    c, h, w = qnet[qnet.inputs[0]].shape.as_tuple()
    x = np.random.default_rng(0).uniform(-1, 1, (2, c, h, w)).astype(np.float32)
    y, prof = wf.predict(x, profile=True, display=False)
    assert prof.last_frame_cycles is None and "has no cycle counts" in prof.table()
    assert prof.to_dict()["total"] == {"cycles": None}
    assert [l["name"] for l in prof.to_dict()["layers"]] == [p.layers[0] if len(p.layers) == 1 else
                                                             f"{p.layers[0]}>>{p.layers[-1]}"
                                                             for p in wf.compiled.profile]


def test_cli_compile_and_predict_digits(tmp_path, capsys):
    net = tmp_path / "digits.dlnet"
    assert main(["compile", "digits.onnx", "--preset", "de10nano_int8", "--calibration", "digits",
                 "-o", str(net)]) == 0
    out = capsys.readouterr().out
    assert "(HW Layer)" in out and "(SW Layer)" in out and '"EndOffset"' in out and "Notice:" in out
    x, _ = digits_dataset("heldout")
    np.save(tmp_path / "x.npy", x[:5])
    y_path = tmp_path / "y.npy"
    assert main(["predict", str(net), "--input", str(tmp_path / "x.npy"), "--target", "golden", "--json",
                 "-o", str(y_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"output": str(y_path)}
    y = np.load(y_path)
    assert y.shape == (5, 10, 1, 1)
    np.testing.assert_allclose(y.reshape(5, 10).sum(axis=1), 1.0, rtol=1e-5)
    assert main(["predict", str(net), "--input", str(tmp_path / "x.npy"), "--target", "golden", "--json",
                 "--profile", "-o", str(y_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"]["total"] == {"cycles": None}
    assert [l["name"] for l in doc["profile"]["layers"]] == ["conv1", "pool1", "conv2", "pool2", "fc"]


def test_cli_errors(tmp_path, capsys):
    assert main(["compile", "digits.onnx", "--preset", "de10nano_int8", "-o", str(tmp_path / "n.dlnet")]) == 2
    assert "give --calibration" in capsys.readouterr().err
    bad = tmp_path / "bad.dlnet"
    bad.write_bytes(b"garbage" * 20)
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 16, 16), np.float32))
    assert main(["predict", str(bad), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")]) == 2
    assert "not a dlproc compiled network" in capsys.readouterr().err


def test_cli_compile_from_dlq_json(qnet, tmp_path, capsys):
    dlq = qnet.save(tmp_path / "net.dlq")
    cfg = small_config(4)
    cfg_path = tmp_path / "c4.toml"
    cfg.save(cfg_path)
    out = tmp_path / "net.dlnet"
    assert main(["compile", str(dlq), "--config", str(cfg_path), "--json", "-o", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in doc["memory_map"]]
    assert names[:4] == ["InputDataOffset", "OutputResultOffset", "SchedulerDataOffset", "InstructionDataOffset"]
    assert names[-1] == "EndOffset"
    assert [l["name"] for l in doc["layers"]] == [l.name for l in qnet.layers]
    # The file runs on the golden target and matches the golden model.
    wf = Workflow(out, target="golden")
    c, h, w = qnet[qnet.inputs[0]].shape.as_tuple()
    x = np.random.default_rng(1).uniform(-1, 1, (2, c, h, w)).astype(np.float32)
    y = wf.predict(x)
    ref = run_int8(qnet, qnet.quantize_input(x))[qnet.outputs[0]]
    np.testing.assert_array_equal(y, qnet.dequantize(qnet.outputs[0], ref))
