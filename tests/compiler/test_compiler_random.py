"""Randomly generated small networks, compiled for a C = 4 configuration and run on the ISA-level
simulator through the Workflow: every tensor the host reads back must equal the layer-level golden
model (``golden.run.run_int8``) bit for bit, and so must the final (software) outputs."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.compiler import compile_network
from dlproc.targets.golden.run import run_int8
from dlproc.ir import Activation
from dlproc.quant import Quantizer
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from test_quant_nets import NetBuilder, rand_b, rand_w

CFG = small_config(4)
ACTS = [None, Activation("relu"), Activation("leaky", alpha=0.1), Activation("clip", lo=0.0, hi=2.0)]


def random_network(rng: np.random.Generator, name: str = "rand"):
    """A conv stack with random kernels, strides, paddings and activations, pools, sometimes a
    standalone activation or a concat of two branches, then (global pool and) FC, maybe softmax."""
    cin = int(rng.integers(1, 6))
    hw = int(rng.integers(8, 15))
    b = NetBuilder(name, (cin, hw, hw))
    src = "input"
    for i in range(int(rng.integers(1, 4))):
        s = b.shape(src)
        k = int(rng.integers(1, min(5, s.h) + 1))
        stride = int(rng.integers(1, 3))
        pads = tuple(int(rng.integers(0, k)) for _ in range(4))
        co = int(rng.integers(2, 11))
        src = b.conv(f"conv{i}", src, rand_w(rng, co, s.c, k, k), rand_b(rng, co), stride=stride, pads=pads,
                     act=ACTS[int(rng.integers(0, len(ACTS)))])
        s = b.shape(src)
        choice = rng.integers(0, 4)
        if choice == 1 and s.h >= 4:
            src = b.pool(f"pool{i}", src, "maxpool", 2, 2)
        elif choice == 2 and s.h >= 3:
            src = b.pool(f"pool{i}", src, "avgpool", 3, 1, pads=(1, 1, 1, 1), count_include_pad=True)
        elif choice == 3:
            src = b.act(f"act{i}", src, Activation("leaky", alpha=0.2))
    if rng.integers(0, 2):
        s = b.shape(src)
        left = b.conv("left", src, rand_w(rng, 4, s.c, 1, 1), rand_b(rng, 4), act=Activation("relu"))
        right = b.conv("right", src, rand_w(rng, 3, s.c, 3, 3), rand_b(rng, 3), pads=(1, 1, 1, 1))
        src = b.concat("cat", [left, right])
    s = b.shape(src)
    if s.h * s.w > 16 or rng.integers(0, 2):
        src = b.gap("gap", src)
        s = b.shape(src)
    n_out = int(rng.integers(2, 9))
    out = b.fc("fc", src, rand_w(rng, n_out, s.c * s.h * s.w), rand_b(rng, n_out))
    if rng.integers(0, 2):
        out = b.softmax("prob", out)
    return b.build([out])


def quantize(net, rng):
    q = Quantizer(net)
    c, h, w = q.input_shape
    q.calibrate(rng.uniform(-1, 1, (12, c, h, w)).astype(np.float32))
    return q.quantize()


def check_golden(qnet, config, x, **options):
    wf = Workflow(qnet, config, target="golden")
    cn = wf.compile(**options)
    y = wf.predict(x)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)
    # Outputs are float: the dequantized int8 tensor, or the float output of a software layer.
    np.testing.assert_array_equal(y, qnet.dequantize(qnet.outputs[0], ref[qnet.outputs[0]]))
    return cn


@pytest.mark.parametrize("seed", range(12))
def test_random_network_isasim_matches_golden(seed):
    rng = np.random.default_rng(1000 + seed)
    net = random_network(rng, f"rand{seed}")
    qnet = quantize(net, rng)
    c, h, w = net[net.inputs[0]].shape.as_tuple()
    x = rng.uniform(-1, 1, (3, c, h, w)).astype(np.float32)
    cn = check_golden(qnet, CFG, x)
    # Every HW layer has instructions except concats written in place; each is in one profile entry.
    for entry in cn.layers:
        if entry.hw and entry.op != "concat":
            assert entry.insn_count > 0 and entry.profile_index >= 0


@pytest.mark.parametrize("seed", range(4))
def test_random_network_without_folding_matches_golden(seed):
    rng = np.random.default_rng(2000 + seed)
    net = random_network(rng)
    qnet = quantize(net, rng)
    c, h, w = net[net.inputs[0]].shape.as_tuple()
    x = rng.uniform(-1, 1, (2, c, h, w)).astype(np.float32)
    cn = check_golden(qnet, CFG, x, fold_input=False)
    assert cn.input.transform is None


def test_concat_with_network_input_and_rescale_is_copied_into_slices():
    rng = np.random.default_rng(7)
    b = NetBuilder("catin", (4, 6, 6))
    a = b.conv("a", "input", rand_w(rng, 8, 4, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1), act=Activation("relu"))
    b.concat("cat", ["input", a])
    b.conv("post", "cat", rand_w(rng, 5, 12, 1, 1), rand_b(rng, 5))
    net = b.build(["post"])
    q = Quantizer(net)
    q.calibrate(rng.uniform(-1, 1, (8, 4, 6, 6)).astype(np.float32))
    qnet = q.quantize(share_concat_scales=False)
    cn = check_golden(qnet, CFG, rng.uniform(-1, 1, (2, 4, 6, 6)).astype(np.float32))
    assert any("copied into their slices" in n for n in cn.notes)


def test_liveness_reuses_dead_activation_regions():
    rng = np.random.default_rng(3)
    b = NetBuilder("chain", (4, 8, 8))
    src = "input"
    for i in range(5):
        src = b.conv(f"c{i}", src, rand_w(rng, 8, b.shape(src).c, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1),
                     act=Activation("relu"))
    b.fc("fc", src, rand_w(rng, 3, 8 * 8 * 8), rand_b(rng, 3))
    qnet = quantize(b.build(["fc"]), rng)
    cn = compile_network(qnet, CFG)
    tensor = 2 * 8 * 8 * 16  # two channel blocks of 8x8 pixels, 16-byte pitch
    # Five 8-channel tensors in a chain need only two live at a time (ping-pong).
    assert cn.memory_map["SchedulerDataOffset"].size == 2 * tensor
    check_golden(qnet, CFG, rng.uniform(-1, 1, (2, 4, 8, 8)).astype(np.float32))


def test_more_layers_than_profile_entries_share_entries():
    rng = np.random.default_rng(9)
    b = NetBuilder("deep", (4, 4, 4))
    src = "input"
    for i in range(70):
        src = b.conv(f"c{i}", src, rand_w(rng, 4, 4, 1, 1), rand_b(rng, 4), act=Activation("relu"))
    qnet = quantize(b.build([src]), rng)
    cn = check_golden(qnet, CFG, rng.uniform(-1, 1, (1, 4, 4, 4)).astype(np.float32))
    assert len(cn.profile) == 35 and all(len(p.layers) == 2 for p in cn.profile)
    assert [n for p in cn.profile for n in p.layers] == [f"c{i}" for i in range(70)]
    assert [l.profile_index for l in cn.layers[1:]] == [i // 2 for i in range(70)]


def test_avgpool_without_padding_in_the_divisor_matches_golden():
    rng = np.random.default_rng(17)
    b = NetBuilder("avgpad", (3, 9, 9))
    a = b.conv("a", "input", rand_w(rng, 6, 3, 3, 3), rand_b(rng, 6), pads=(1, 1, 1, 1), act=Activation("relu"))
    p = b.pool("p", a, "avgpool", 3, 2, pads=(1, 1, 1, 1), count_include_pad=False)
    b.fc("fc", p, rand_w(rng, 4, 6 * 5 * 5), rand_b(rng, 4))
    qnet = quantize(b.build(["fc"]), rng)
    assert "mult" in qnet["p"].params  # per-window divisors
    check_golden(qnet, CFG, rng.uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32))
