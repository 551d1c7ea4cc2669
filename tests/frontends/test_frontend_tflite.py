"""TFLite int8 import.

Core (no TensorFlow, no interpreter): the shipped ``data/import/keras_int8.tflite`` (a small Keras
CNN converted by TFLiteConverter to full-integer int8, see ``import_models.keras_int8_tflite``) is
imported with the ``tflite`` parser and the golden model is compared with the LiteRT reference
kernels' outputs stored next to it (``keras_int8_ref.npz``, made by ``litert_outputs``).
With ``ai-edge-litert`` installed the interpreter runs live; with TensorFlow a fresh model is
converted and checked too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dlproc.errors import ModelError
from dlproc.frontends.tflite import load_tflite_float
from dlproc.quant.imported import load_tflite

import import_models as im

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
MODEL = DATA / "keras_int8.tflite"
HAS_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
HAS_TF = importlib.util.find_spec("tensorflow") is not None

# Measured on the shipped model (32 random int8 images; docs/import.md): per output, the least
# fraction of identical values and the largest difference in LSB against the reference kernels.
# The 16-channel conv output is the model's main feature map.
BOUNDS = {
    "StatefulPartitionedCall_1:0": (0.98, 1),   # conv (4x4x16), after 4 conv/add layers
    "StatefulPartitionedCall_1:1": (0.95, 1),   # global average pool (MEAN)
    "StatefulPartitionedCall_1:2": (0.85, 2),   # FULLY_CONNECTED logits (10): amplifies 1-LSB inputs
    "StatefulPartitionedCall_1:3": (0.90, 1),   # SOFTMAX (dlproc: float on the host, quantized)
}


def _reference() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    ref = np.load(DATA / "keras_int8_ref.npz")
    return ref["x"], {k.replace("_1_", "_1:", 1): ref[k] for k in ref.files if k != "x"}


def test_structure_nhwc_converted():
    net = load_tflite_float(MODEL)
    ops = [l.op for l in net]
    assert ops.count("conv") == 4 and "fc" in ops and "global_avgpool" in ops and "upsample" in ops
    dw = next(l for l in net if l.op == "conv" and l.attrs["groups"] > 1)
    assert dw.attrs["groups"] == 8 and dw.weight.shape == (8, 1, 3, 3)
    padded = next(l for l in net if l.op == "conv" and l.attrs["stride"] == (2, 2))
    assert padded.attrs["pads"] == (1, 1, 1, 1)  # the PAD folded into the conv
    assert net[net.inputs[0]].shape.as_tuple() == (3, 8, 8)


def test_golden_matches_stored_litert_reference():
    qnet = load_tflite(MODEL)
    x, ref = _reference()
    got = im.golden_tflite(qnet, x)
    for name, (least, max_lsb) in BOUNDS.items():
        agree = im.agreement(name, got[name], ref[name])
        print(agree)
        assert agree.max_lsb <= max_lsb and agree.identical >= least, agree


@pytest.mark.skipif(not HAS_LITERT, reason="ai-edge-litert (the LiteRT interpreter) is not installed")
def test_golden_matches_live_interpreter():
    qnet = load_tflite(MODEL)
    x = np.random.default_rng(1941).integers(-128, 128, (16, 8, 8, 3)).astype(np.int8)
    got = im.golden_tflite(qnet, x)
    for reference_kernels in (True, False):
        ref = im.litert_outputs(MODEL, x, reference_kernels)
        for name, (least, max_lsb) in BOUNDS.items():
            agree = im.agreement(name, got[name], ref[name])
            print("ref" if reference_kernels else "default", agree)
            assert agree.max_lsb <= max_lsb and agree.identical >= least - 0.03, agree


@pytest.mark.skipif(not HAS_LITERT, reason="ai-edge-litert (the LiteRT interpreter) is not installed")
def test_each_layer_matches_reference_kernels():
    """Each layer fed the interpreter's own int8 input (all tensors preserved): within 1 LSB and
    >= 99.5 % identical; the 15-bit multiplier (TFLite: 31 bits) is the main difference."""
    qnet = load_tflite(MODEL)
    x = np.random.default_rng(1943).integers(-128, 128, (32, 8, 8, 3)).astype(np.int8)
    rows = im.litert_per_layer(MODEL, qnet, x)
    assert len(rows) == sum(1 for l in qnet if l.hardware and l.op != "input")
    for row in rows:
        print(row)
        assert row.max_lsb <= 1 and row.identical >= 0.995, row


@pytest.mark.skipif(not (HAS_TF and HAS_LITERT), reason="TensorFlow (tflite-convert extra) and ai-edge-litert needed")
def test_fresh_keras_conversion(tmp_path):
    rng = np.random.default_rng(1942)
    path = im.keras_int8_tflite(tmp_path / "fresh.tflite", rng)
    qnet = load_tflite(path)
    x = rng.integers(-128, 128, (16, 8, 8, 3)).astype(np.int8)
    got = im.golden_tflite(qnet, x)
    ref = im.litert_outputs(path, x)
    agree = im.agreement("conv", got["StatefulPartitionedCall_1:0"], ref["StatefulPartitionedCall_1:0"])
    print(agree)
    assert agree.max_lsb <= 1 and agree.identical >= 0.97, agree


def test_truncated_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "cut.tflite"
    bad.write_bytes(MODEL.read_bytes()[:200])
    with pytest.raises(ModelError, match="not a readable TFLite model"):
        load_tflite(bad)


def test_not_tflite(tmp_path):
    bad = tmp_path / "x.tflite"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match="not a TFLite model"):
        load_tflite(bad)
