"""Compile errors: layers the configuration cannot run name the property to turn on; software layers
in front of hardware layers and unaligned concats are refused; SW notices say why."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.compiler import compile_network, partition
from dlproc.config import ProcessorConfig
from dlproc.errors import CompileError
from dlproc.ir import Activation
from dlproc.quant import Quantizer

from layerprog_cases import small_config
from test_quant_nets import NetBuilder, rand_b, rand_w

RNG = np.random.default_rng(5)


def _qnet(builder: NetBuilder, outputs: list[str], c: int = 4, hw: int = 6):
    q = Quantizer(builder.build(outputs))
    q.calibrate(RNG.uniform(0, 1, (6, c, hw, hw)).astype(np.float32))
    return q.quantize()


def _base() -> NetBuilder:
    b = NetBuilder("err", (4, 6, 6))
    b.conv("a", "input", rand_w(RNG, 4, 4, 3, 3), rand_b(RNG, 4), pads=(1, 1, 1, 1), act=Activation("relu"))
    return b


def test_lrn_names_the_property():
    b = _base()
    b.lrn("norm", "a")
    qnet = _qnet(b, ["norm"])
    # LRNBlockGeneration is off by default: the error names it; with it on the layer runs on the LRN block.
    with pytest.raises(CompileError, match="'norm' \\(lrn\\) needs the LRN block; turn on conv.LRNBlockGeneration"):
        compile_network(qnet, small_config(4))
    cfg = small_config(4)
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    assert compile_network(qnet, cfg).layer("norm").hw


def test_residual_add_without_the_adder_names_the_property():
    b = _base()
    b.conv("b", "a", rand_w(RNG, 4, 4, 1, 1), rand_b(RNG, 4))
    b.eltwise_add("res", "a", "b")
    qnet = _qnet(b, ["res"])
    cfg = small_config(4)
    assert compile_network(qnet, cfg).layer("res").hw  # the adder module is on: ADD instructions
    cfg.set_module_property("adder", "ModuleGeneration", False)
    with pytest.raises(CompileError, match="turn on adder.ModuleGeneration"):
        compile_network(qnet, cfg)


def test_upsample_names_the_segmentation_block():
    b = _base()
    b.upsample("up", "a")
    qnet = _qnet(b, ["up"])
    cfg = small_config(4)
    cfg.set_module_property("conv", "SegmentationBlockGeneration", False)
    with pytest.raises(CompileError, match="turn on conv.SegmentationBlockGeneration"):
        compile_network(qnet, cfg)


def test_software_layer_before_hardware_is_refused():
    b = _base()
    b.softmax("sm", "a")
    b.conv("after", "sm", rand_w(RNG, 4, 4, 1, 1), rand_b(RNG, 4))
    qnet = _qnet(b, ["after"])
    with pytest.raises(CompileError, match="consumes the output of software layer 'sm'"):
        compile_network(qnet, small_config(4))


def test_softmax_notice_when_block_is_on():
    b = _base()
    b.gap("g", "a")
    b.fc("fc", "g", rand_w(RNG, 3, 4), rand_b(RNG, 3))
    b.softmax("sm", "fc")
    qnet = _qnet(b, ["sm"])
    cfg = small_config(4)
    cfg.set_module_property("fc", "SoftmaxBlockGeneration", True)
    notices = [a.notice for a in partition(qnet, cfg) if not a.hw]
    # The block is there, but this network was quantized with a float softmax (no configuration).
    assert any("quantized without the softmax block" in n for n in notices)


def test_unaligned_concat_read_by_the_host_is_refused():
    # An unaligned concat inside the network gets padding channels (tests/test_googlenet.py); one
    # the host reads back cannot, as the host expects the dense tensor.
    b = _base()
    b.conv("odd", "input", rand_w(RNG, 3, 4, 1, 1), rand_b(RNG, 3))
    b.concat("cat", ["odd", "a"])
    qnet = _qnet(b, ["cat"])
    with pytest.raises(CompileError, match="'cat' \\(concat\\) is read by the host, but its inputs are not "
                                           "multiples of C = 4"):
        compile_network(qnet, small_config(4))


def test_conv_module_disabled():
    qnet = _qnet(_base(), ["a"])
    cfg = small_config(4)
    cfg.set_module_property("conv", "ModuleGeneration", False)
    with pytest.raises(CompileError, match="turn on conv.ModuleGeneration"):
        compile_network(qnet, cfg)


def test_fc_over_a_large_plane_is_refused():
    b = NetBuilder("bigfc", (1, 40, 40))
    b.fc("fc", "input", rand_w(RNG, 2, 1600), rand_b(RNG, 2))
    qnet = _qnet(b, ["fc"], c=1, hw=40)
    with pytest.raises(CompileError, match="reads a 40x40 plane"):
        compile_network(qnet, ProcessorConfig.preset("de10nano_int8"))
