"""A compiled network with a ConvTranspose on the Verilated RTL (C = 4, segmentation on, the cached
build the other RTL tests share): bit-exact with ``run_int8`` and the ISA-level simulator."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.frontends import load_onnx

from test_convtranspose_network import quantize, segnet_like
from test_workflow_rtl import CFG, run_rtl_and_golden

pytestmark = pytest.mark.slow


def test_convtranspose_network_on_rtl_is_bit_exact():
    rng = np.random.default_rng(5)
    # Stride (2, 3), output_padding and dilation: 2 x 3 phases, one-element scattered STOREs.
    net = load_onnx(segnet_like(rng, strides=[2, 3], pads=[0, 1, 2, 0], output_padding=[1, 2], dilations=[1, 2]))
    qnet = quantize(net, rng)
    assert CFG.get_module_property("conv", "SegmentationBlockGeneration")
    cn, prof = run_rtl_and_golden(qnet, rng.uniform(-1, 1, (2, 4, 6, 5)).astype(np.float32))
    assert cn.layer("up").hw and any("6 phase conv(s)" in layer.note for layer in cn.layers if layer.name == "up")
    up = next(l for l in prof.layers if l.name == "up")
    assert up.cycles > 0
