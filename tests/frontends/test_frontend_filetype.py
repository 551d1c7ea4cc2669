"""File types by content, and the CLI on imported int8 models (quantize, compile, stats, estimate)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.errors import ModelError
from dlproc.frontends import load_network
from dlproc.frontends.filetype import FileKind, detect, expect
from dlproc.quant import QuantizedNetwork

import import_models as im

TFLITE = Path(__file__).resolve().parents[1] / "data" / "import" / "keras_int8.tflite"


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory) -> Path:
    rng = np.random.default_rng(1951)
    return im.quantize_qdq(im.resnet_block_net(rng), tmp_path_factory.mktemp("qdq") / "block.onnx", rng)


def test_detect_by_content(tmp_path, qdq_model):
    assert detect(qdq_model) == FileKind.ONNX_QDQ
    assert detect(qdq_model.with_suffix(".float.onnx")) == FileKind.ONNX_FLOAT
    assert detect(TFLITE) == FileKind.TFLITE
    # Names lie; content does not.
    renamed = tmp_path / "model.bin"
    shutil.copy(TFLITE, renamed)
    assert detect(renamed) == FileKind.TFLITE
    dlq = tmp_path / "net.q"
    im_q = __import__("dlproc.quant.imported", fromlist=["load_qdq"]).load_qdq(qdq_model)
    im_q.save(dlq)
    assert detect(dlq) == FileKind.DLQ
    np.save(tmp_path / "x.npy", np.zeros(3))
    assert detect(tmp_path / "x.npy") == FileKind.NPY
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert detect(tmp_path / "empty.onnx") == FileKind.EMPTY
    (tmp_path / "a.cfg").write_text("# tiny\n[net]\nwidth=8\n")
    assert detect(tmp_path / "a.cfg") == FileKind.DARKNET_CFG
    (tmp_path / "junk.onnx").write_bytes(b"\xff\xfe garbage \x00\x01" * 10)
    assert detect(tmp_path / "junk.onnx") == FileKind.UNKNOWN
    assert detect(tmp_path / "nope") == FileKind.MISSING


def test_expect_names_what_the_file_is(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(ModelError, match=r"this is a NumPy array file \(\.npy\); dlproc compile expects"):
        expect(tmp_path / "x.npy", (FileKind.DLQ,), "dlproc compile")


def test_dlq_under_another_name_compiles(tmp_path, qdq_model, capsys):
    out = tmp_path / "net.q"
    assert main(["quantize", str(qdq_model), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "imported a quantized (QDQ) ONNX model" in text and "no calibration" in text
    assert QuantizedNetwork.load(out).meta["imported_from"] == "onnx-qdq"
    assert main(["compile", str(out), "--preset", "de10nano_int8", "-o", str(tmp_path / "a.dlnet")]) == 0
    capsys.readouterr()
    # And a float model without calibration says it is a float model (not a .dlq).
    assert main(["compile", str(qdq_model.with_suffix(".float.onnx")), "--preset", "de10nano_int8",
                 "-o", str(tmp_path / "b.dlnet")]) != 0
    assert "is a float ONNX model" in capsys.readouterr().err


def test_wrong_file_type_for_compile(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros(3))
    assert main(["compile", str(tmp_path / "x.npy"), "--preset", "de10nano_int8", "-o", str(tmp_path / "c.dlnet")]) != 0
    err = capsys.readouterr().err
    assert "this is a NumPy array file (.npy)" in err and "Traceback" not in err


def test_cli_accepts_quantized_models_directly(tmp_path, qdq_model, capsys):
    for model in (qdq_model, TFLITE):
        assert main(["compile", str(model), "--preset", "de10nano_int8", "-o", str(tmp_path / "m.dlnet")]) == 0
        assert main(["stats", str(model), "--json"]) == 0
        capsys.readouterr()
        assert main(["estimate", str(model), "--preset", "de10nano_int8", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["layers"] and doc["total"]
    assert main(["quantize", str(TFLITE), "-o", str(tmp_path / "t.dlq")]) == 0
    assert "TensorFlow Lite" in capsys.readouterr().out


def test_quantize_refuses_calibration_for_a_quantized_model(tmp_path, qdq_model, capsys):
    assert main(["quantize", str(qdq_model), "--calibration", "digits", "-o", str(tmp_path / "x.dlq")]) != 0
    assert "imported with the file's scales" in capsys.readouterr().err


def test_malformed_onnx_is_a_clear_error(tmp_path, qdq_model, capsys):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(qdq_model.read_bytes()[:300])
    assert main(["compile", str(cut), "--preset", "de10nano_int8", "-o", str(tmp_path / "x.dlnet")]) != 0
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_stats_of_a_dlq_says_what_it_is(tmp_path, qdq_model):
    dlq = tmp_path / "net.dlq"
    __import__("dlproc.quant.imported", fromlist=["load_qdq"]).load_qdq(qdq_model).save(dlq)
    with pytest.raises(ModelError, match=r"this is a dlproc quantized network \(\.dlq\), not a network model"):
        load_network(dlq)
