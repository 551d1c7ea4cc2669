"""``dlproc quantize`` through dlproc.cli.main."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.targets.golden.run import run_int8
from dlproc.quant import QuantizedNetwork, Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_MODEL


@pytest.fixture(scope="module")
def heldout():
    return digits_dataset("heldout")


def test_quantize_digits_json(tmp_path, capsys):
    out = tmp_path / "digits.dlq"
    rc = main(["quantize", "digits.onnx", "--calibration", "digits", "--validate", "digits:heldout",
               "--json", "-o", str(out)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc) == ["calibration", "notes", "output", "validation"]
    assert doc["notes"] == []  # digits needs no raised weight scale; the quantizer notes only what it changed
    assert doc["calibration"][0] == {"Optimized Layer Name": "input", "Network Layer Name": "input",
                                     "Learnables / Activations": "Activations", "MinValue": 0.0, "MaxValue": 1.0}
    kinds = [(r["Optimized Layer Name"], r["Learnables / Activations"]) for r in doc["calibration"]]
    assert ("conv1", "Weights") in kinds and ("fc", "Bias") in kinds and ("softmax", "Activations") in kinds
    val = {r["Implementation"]: r for r in doc["validation"]}
    assert val["floating point"]["MetricValue"] >= 0.95
    assert abs(val["floating point"]["MetricValue"] - val["quantized"]["MetricValue"]) <= 0.01
    # The written file is the same network the Python API produces.
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    expect = q.quantize()
    loaded = QuantizedNetwork.load(out)
    x, _ = digits_dataset("heldout")
    xq = expect.quantize_input(x[:20])
    np.testing.assert_array_equal(run_int8(loaded, xq)["softmax"], run_int8(expect, xq)["softmax"])


def test_quantize_npy_nhwc_with_labels_and_tables(tmp_path, capsys, heldout):
    x, y = heldout
    cal = tmp_path / "cal.npy"
    np.save(cal, np.ascontiguousarray(x[:100].transpose(0, 2, 3, 1)))
    val = tmp_path / "val.npy"
    np.save(val, np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    labels = tmp_path / "y.npy"
    np.save(labels, y)
    rc = main(["quantize", str(DIGITS_MODEL), "--calibration", str(cal), "--method", "percentile",
               "--validate", str(val), "--labels", str(labels), "--layout", "NHWC", "--layer-errors",
               "-o", str(tmp_path / "d.dlq")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Calibration (percentile) of digits" in text
    assert "Optimized Layer Name" in text and "MinValue" in text
    assert "floating point" in text and "quantized" in text
    assert "SQNR (dB)" in text
    assert (tmp_path / "d.dlq").is_file()


def test_quantize_reports_bad_data(tmp_path, capsys):
    bad = tmp_path / "x.npy"
    np.save(bad, np.zeros((4, 1, 8, 8), np.float32))
    rc = main(["quantize", str(DIGITS_MODEL), "--calibration", str(bad), "-o", str(tmp_path / "o.dlq")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "dlproc quantize: error:" in err
    assert "expected shape (N, 1, 16, 16) in NCHW layout for the network input, got (4, 1, 8, 8)" in err
    assert not (tmp_path / "o.dlq").exists()
    rc = main(["quantize", str(DIGITS_MODEL), "--calibration", "digits", "--validate", str(bad),
               "-o", str(tmp_path / "o.dlq")])
    assert rc == 2
    assert "got (4, 1, 8, 8)" in capsys.readouterr().err
    assert not (tmp_path / "o.dlq").exists()  # bad validation data stops before anything is written
    rc = main(["quantize", str(DIGITS_MODEL), "--calibration", "digits", "--labels", str(bad),
               "-o", str(tmp_path / "o.dlq")])
    assert rc == 2
    assert "--labels goes with --validate" in capsys.readouterr().err
