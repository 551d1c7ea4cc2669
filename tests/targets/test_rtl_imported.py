"""Imported int8 models (QDQ ONNX from ONNX Runtime's quantize_static, and the shipped Keras-made
int8 .tflite) on the Verilated RTL: the RTL must equal the golden model bit for bit.

Uses the C = 4 configuration with every optional block (``sim_fixture.blocks_config``) and the
runner of ``test_rtl_networks.py``, so it shares their Verilator build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlproc.quant.imported import load_qdq
from dlproc.quant.imported import load_tflite

import import_models as im
from test_rtl_networks import run_on_rtl

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data" / "import"


def test_qdq_resnet_block_on_rtl(tmp_path):
    rng = np.random.default_rng(1931)
    path = im.quantize_qdq(im.resnet_block_net(rng), tmp_path / "block.onnx", rng)
    qnet = load_qdq(path)
    cn, prof = run_on_rtl(qnet, rng.normal(0, 1, (2, 3, 8, 8)).astype(np.float32))
    assert any(l.op == "add" and l.hw for l in cn.layers)


def test_qdq_random_conv_uint8_on_rtl(tmp_path):
    rng = np.random.default_rng(1932)
    path = im.quantize_qdq(im.random_conv_net(rng), tmp_path / "conv.onnx", rng, uint8=True)
    run_on_rtl(load_qdq(path), rng.normal(0, 1, (2, 3, 16, 16)).astype(np.float32))


def test_tflite_keras_model_on_rtl():
    qnet = load_tflite(DATA / "keras_int8.tflite")
    x = np.random.default_rng(1933).normal(0, 1, (2, 3, 8, 8)).astype(np.float32)
    run_on_rtl(qnet, x)
