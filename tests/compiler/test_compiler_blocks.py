"""The optional blocks in the network compiler: element-wise add (adder module), nearest upsample
(segmentation block) and LRN (LRN block) compiled for a C = 4 configuration and run on the ISA-level
simulator (golden target): every tensor the host reads back equals ``golden.run.run_int8`` bit for
bit. With a block switched off the compiler names the property to turn on."""

from __future__ import annotations


import numpy as np
import pytest

from dlproc.compiler import compile_network
from dlproc.errors import CompileError
from dlproc.targets.golden.run import run_int8
from dlproc.ir import Activation
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from test_compiler_random import check_golden
from test_quant_nets import NetBuilder, rand_b, rand_w
from networks import DARKNET
from block_networks import quantize_random, resnet_block, upsample_route


def _config(lrn: bool = False):
    cfg = small_config(4)
    if lrn:
        cfg.set_module_property("conv", "LRNBlockGeneration", True)
    return cfg


def test_resnet_basic_block_with_projection_matches_golden():
    rng = np.random.default_rng(11)
    net = resnet_block(rng)
    assert "add" in [l.op for l in net.layers]
    qnet = quantize_random(net, rng)
    add = next(l for l in qnet.layers if l.op == "add")
    x = rng.uniform(-1, 1, (2, 4, 8, 8)).astype(np.float32)
    cn = check_golden(qnet, _config(), x)
    entry = cn.layer(add.name)
    assert entry.hw and entry.insn_count > 0 and entry.profile_index >= 0
    # The fused ReLU is the clamp's lower bound at the output zero point.
    assert add.act_min == add.zero_point


def inception_lrn(rng):
    """GoogLeNet-like: conv, LRN, then parallel 1x1 / 3x3 / (3x3 maxpool -> 1x1) branches, concat."""
    b = NetBuilder("incep", (4, 8, 8))
    stem = b.conv("stem", "input", rand_w(rng, 8, 4, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1),
                  act=Activation("relu"))
    norm = b.lrn("norm", stem, size=5, alpha=0.5, beta=0.75, bias=1.0)
    b1 = b.conv("b1x1", norm, rand_w(rng, 4, 8, 1, 1), rand_b(rng, 4), act=Activation("relu"))
    r3 = b.conv("b3x3_reduce", norm, rand_w(rng, 4, 8, 1, 1), rand_b(rng, 4), act=Activation("relu"))
    b3 = b.conv("b3x3", r3, rand_w(rng, 8, 4, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1), act=Activation("relu"))
    p = b.pool("pool", norm, "maxpool", 3, 1, pads=(1, 1, 1, 1))
    bp = b.conv("pool_proj", p, rand_w(rng, 4, 8, 1, 1), rand_b(rng, 4), act=Activation("relu"))
    cat = b.concat("cat", [b1, b3, bp])
    norm2 = b.lrn("norm2", cat, size=3, alpha=1e-3, beta=0.75, bias=2.0)
    return b.build([norm2])


def test_inception_block_with_lrn_matches_golden():
    rng = np.random.default_rng(21)
    qnet = quantize_random(inception_lrn(rng), rng)
    x = rng.uniform(-1, 1, (2, 4, 8, 8)).astype(np.float32)
    cn = check_golden(qnet, _config(lrn=True), x)
    assert cn.layer("norm").hw and cn.layer("norm").insn_count > 0
    assert cn.layer("norm2").hw


def test_upsample_and_route_match_golden():
    rng = np.random.default_rng(31)
    qnet = quantize_random(upsample_route(rng), rng)
    x = rng.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    cn = check_golden(qnet, _config(), x)
    assert cn.layer("up").hw and cn.layer("up").insn_count > 0


def test_upsample_as_network_output_and_non_square_scale():
    rng = np.random.default_rng(41)
    b = NetBuilder("up2", (4, 5, 3))
    a = b.conv("a", "input", rand_w(rng, 6, 4, 1, 1), rand_b(rng, 6), act=Activation("relu"))
    b.upsample("up", a, 3)
    qnet = quantize_random(b.build(["up"]), rng)
    check_golden(qnet, _config(), rng.uniform(-1, 1, (1, 4, 5, 3)).astype(np.float32))


def test_residual_add_of_the_network_input_and_as_concat_input():
    rng = np.random.default_rng(51)
    b = NetBuilder("res", (4, 6, 6))
    a = b.conv("a", "input", rand_w(rng, 4, 4, 3, 3), rand_b(rng, 4), pads=(1, 1, 1, 1))
    s = b.eltwise_add("res", "input", a, act=Activation("relu"))
    c = b.conv("c", s, rand_w(rng, 4, 4, 1, 1), rand_b(rng, 4))
    s2 = b.eltwise_add("res2", c, s)
    cat = b.concat("cat", [s2, a])
    qnet = quantize_random(b.build([cat]), rng)
    check_golden(qnet, _config(), rng.uniform(-1, 1, (2, 4, 6, 6)).astype(np.float32))


def _blocks_net(op):
    rng = np.random.default_rng(61)
    b = NetBuilder(op, (4, 6, 6))
    a = b.conv("a", "input", rand_w(rng, 4, 4, 3, 3), rand_b(rng, 4), pads=(1, 1, 1, 1), act=Activation("relu"))
    if op == "add":
        c = b.conv("b", a, rand_w(rng, 4, 4, 1, 1), rand_b(rng, 4))
        out = b.eltwise_add("res", a, c)
    elif op == "upsample":
        out = b.upsample("up", a)
    else:
        out = b.lrn("norm", a)
    return quantize_random(b.build([out]), rng, 0.0, 1.0)


@pytest.mark.parametrize("op, module, prop", [("add", "adder", "ModuleGeneration"),
                                              ("upsample", "conv", "SegmentationBlockGeneration"),
                                              ("lrn", "conv", "LRNBlockGeneration")])
def test_block_switched_off_names_the_property(op, module, prop):
    qnet = _blocks_net(op)
    cfg = _config(lrn=True)
    cn = compile_network(qnet, cfg)
    assert all(entry.hw for entry in cn.layers if entry.op == op)
    cfg.set_module_property(module, prop, False)
    with pytest.raises(CompileError, match=f"\\({op}\\) needs .*turn on {module}.{prop}"):
        compile_network(qnet, cfg)


YOLOV3_TINY = DARKNET / "yolov3-tiny.cfg"


@pytest.mark.skipif(not YOLOV3_TINY.exists(), reason="yolov3-tiny.cfg not available")
def test_yolov3_tiny_route_upsample_matches_golden():
    """The darknet yolov3-tiny (64 x 64, random weights) on the de10nano preset: the tensors the host
    reads (the inputs of both yolo heads) equal run_int8 bit for bit; the upsample runs in hardware."""
    from dlproc.config import ProcessorConfig
    from dlproc.frontends import load_darknet

    rng = np.random.default_rng(71)
    net = load_darknet(str(YOLOV3_TINY), input_size=(64, 64))
    qnet = quantize_random(net, rng, 0.0, 1.0)
    wf = Workflow(qnet, ProcessorConfig.preset("de10nano_int8"), target="golden")
    cn = wf.compile()
    x = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    wf.predict(x)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    assert len(cn.outputs) == 2
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)
    assert [e.hw for e in cn.layers if e.op == "upsample"] == [True]
