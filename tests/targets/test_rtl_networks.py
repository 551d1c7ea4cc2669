"""Whole networks with the optional blocks end to end on the Verilated RTL: a GoogLeNet-style
inception block with LRN (built with ``onnx.helper``), a ResNet basic block with a projection
shortcut (adder module) and the Darknet ``yolov3-tiny.cfg`` (random weights, 64 x 64 input) with its
route and upsample (segmentation block) layers.

Every network is compiled for one C = 4 configuration with every optional block and run through the
Workflow's ``sim`` target (``NativeSim``, cycle accurate) and its ``golden`` target (the ISA-level
simulator); the int8 tensors the host reads back must equal ``golden.run.run_int8`` bit for bit on
both, the final outputs must be identical, and the profile must come from the hardware: one entry
per layer that has instructions, every one with a positive cycle count. The configuration is
``sim_fixture.blocks_config()``, shared with ``test_rtl_blocks.py``, so all of them need one
Verilator build (cached by configuration hash).
"""

from __future__ import annotations


import numpy as np
import pytest
from onnx import helper

from dlproc.frontends import load_darknet, load_onnx
from dlproc.targets.golden.run import run_int8
from dlproc.targets.workflow import Workflow

from sim_fixture import blocks_config
from block_networks import onnx_model, quantize_random, resnet_block
from networks import DARKNET

pytestmark = pytest.mark.slow

CFG = blocks_config()
YOLOV3_TINY = DARKNET / "yolov3-tiny.cfg"


def run_on_rtl(qnet, x):
    """Run ``x`` on the RTL and on the ISA-level simulator; both must equal run_int8 bit for bit.

    Returns the compiled network and the RTL's profile of the last frame."""
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    golden = Workflow(qnet, CFG, target="golden")
    y_golden = golden.predict(x)
    rtl = Workflow(golden.compiled, CFG, target="sim")
    try:
        y_rtl, prof = rtl.predict(x, profile=True, display=False)
        cn = rtl.compiled
        for t in cn.outputs:
            np.testing.assert_array_equal(golden.last_hw_values[t.name], ref[t.name], err_msg=f"ISA sim: {t.name}")
            np.testing.assert_array_equal(rtl.last_hw_values[t.name], ref[t.name], err_msg=f"RTL: {t.name}")
        check_same_dram(cn, golden, rtl)
    finally:
        rtl.close()
    if isinstance(y_rtl, dict):
        assert y_rtl.keys() == y_golden.keys()
        for k in y_rtl:
            np.testing.assert_array_equal(y_rtl[k], y_golden[k], err_msg=k)
    else:
        np.testing.assert_array_equal(y_rtl, y_golden)
    check_profile(cn, prof, len(x))
    return cn, prof


def check_same_dram(cn, golden, rtl):
    """The RTL and the ISA-level simulator ran the same instruction stream on the same DRAM image, so
    after the last frame every byte must agree: the intermediate activations still live then, the
    weights and the instructions too. A difference names the memory region and its first byte."""
    mm = cn.memory_map
    size = mm.end
    # The targets' memories (Workflow keeps them in _machine; reading them is what a debugger does).
    a = np.frombuffer(golden._machine.mem_read(cn.base, size), np.uint8)
    b = np.frombuffer(rtl._machine.mem_read(cn.base, size), np.uint8)
    bad = np.flatnonzero(a != b)
    if bad.size:
        first = int(bad[0])
        region = max((r for r in mm.regions if r.offset <= first and r.name != "EndOffset"), key=lambda r: r.offset)
        raise AssertionError(f"{bad.size} DRAM bytes differ between the RTL and the ISA simulator; the first at "
                             f"{region.name}+{first - region.offset:#x} (ISA sim {a[first]}, RTL {b[first]})")


def check_profile(cn, prof, frames):
    """The profiler reports every layer that has instructions, in program order, each in a row of its
    own (these networks have fewer than the 64 profile entries) with a positive hardware cycle count."""
    # Program order is not network order: the compiler schedules independent layers (an inception
    # block's pool branch runs before its 3x3 and 5x5 convs).
    hw_layers = [e.name for e in sorted(cn.layers, key=lambda e: e.insn_first) if e.hw and e.insn_count > 0]
    assert [l.name for l in prof.layers] == hw_layers
    assert all(l.cycles > 0 for l in prof.layers), [(l.name, l.cycles) for l in prof.layers]
    # Layer cycles are differences of the MARK values; the FINISH drain follows the last MARK.
    total = sum(l.cycles for l in prof.layers)
    assert 0 < total <= prof.last_frame_cycles <= total + 64
    assert prof.frames == frames and prof.total_cycles >= frames * (prof.last_frame_cycles - 64)
    for l in prof.layers:
        if l.utilization is not None:
            assert 0 < l.utilization <= 1, (l.name, l.utilization)


def inception_lrn_onnx(rng):
    """GoogLeNet's stem tail and an inception (3a)-like block, channels scaled down: conv 3x3 + ReLU,
    max pool 3x3/2, LRN (size 5, GoogLeNet's alpha/beta/bias), then the four branches 1x1, 1x1 ->
    3x3, 1x1 -> 5x5 and max pool 3x3/1 -> 1x1, concatenated, and a second LRN on the concat."""
    conv = lambda name, i, **kw: [  # noqa: E731
        helper.make_node("Conv", [i, f"{name}_w", f"{name}_b"], [f"{name}_c"], name=name, **kw),
        helper.make_node("Relu", [f"{name}_c"], [name], name=f"{name}_relu")]
    shapes = {"stem": (8, 3, 3, 3), "b1": (8, 8, 1, 1), "b3r": (4, 8, 1, 1), "b3": (8, 4, 3, 3),
              "b5r": (4, 8, 1, 1), "b5": (4, 4, 5, 5), "bp": (4, 8, 1, 1)}
    inits = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:]))
        inits[f"{name}_w"] = rng.normal(0, 1.5 / np.sqrt(fan_in), shape)
        inits[f"{name}_b"] = rng.normal(0, 0.1, shape[0])
    nodes = [
        *conv("stem", "x", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["stem"], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("LRN", ["pool1"], ["norm1"], name="norm1", size=5, alpha=1e-4, beta=0.75, bias=1.0),
        *conv("b1", "norm1"),
        *conv("b3r", "norm1"),
        *conv("b3", "b3r", pads=[1, 1, 1, 1]),
        *conv("b5r", "norm1"),
        *conv("b5", "b5r", pads=[2, 2, 2, 2]),
        helper.make_node("MaxPool", ["norm1"], ["bpool"], name="bpool", kernel_shape=[3, 3], strides=[1, 1],
                         pads=[1, 1, 1, 1]),
        *conv("bp", "bpool"),
        helper.make_node("Concat", ["b1", "b3", "b5", "bp"], ["cat"], name="cat", axis=1),
        helper.make_node("LRN", ["cat"], ["y"], name="norm2", size=3, alpha=1e-3, beta=0.75, bias=2.0),
    ]
    return load_onnx(onnx_model(nodes, [1, 3, 16, 16], inits))


def test_inception_block_with_lrn_on_rtl():
    rng = np.random.default_rng(2101)
    qnet = quantize_random(inception_lrn_onnx(rng), rng, 0.0, 1.0)
    assert [l.op for l in qnet.layers].count("lrn") == 2
    cn, prof = run_on_rtl(qnet, rng.uniform(0, 1, (2, 3, 16, 16)).astype(np.float32))
    for name in ("norm1", "norm2"):
        assert cn.layer(name).hw and cn.layer(name).insn_count > 0
    assert "norm1" in [l.name for l in prof.layers]


def test_resnet_basic_block_with_projection_on_rtl():
    rng = np.random.default_rng(2201)
    qnet = quantize_random(resnet_block(rng), rng)
    add = next(l for l in qnet.layers if l.op == "add")
    cn, prof = run_on_rtl(qnet, rng.uniform(-1, 1, (2, 4, 8, 8)).astype(np.float32))
    assert cn.layer(add.name).hw and cn.layer(add.name).insn_count > 0
    assert add.name in [l.name for l in prof.layers]


@pytest.mark.skipif(not YOLOV3_TINY.exists(), reason="yolov3-tiny.cfg not available")
def test_yolov3_tiny_route_upsample_on_rtl():
    rng = np.random.default_rng(2301)
    net = load_darknet(str(YOLOV3_TINY), input_size=(64, 64))
    qnet = quantize_random(net, rng, 0.0, 1.0)
    cn, prof = run_on_rtl(qnet, rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32))
    assert len(cn.outputs) == 2  # the inputs of both yolo heads
    assert [e.hw for e in cn.layers if e.op == "upsample"] == [True]
    assert any(l.name.startswith("upsample") for l in prof.layers)
