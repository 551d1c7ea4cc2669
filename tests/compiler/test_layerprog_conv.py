"""Layer programs for random convolutions, run on the ISA simulator, compared bit-exactly with the
golden model (``golden.ops.conv2d`` + ``numerics.requantize``).

The configurations have deliberately small buffers so that the layers need several spatial tiles,
several output-block groups, streamed weights and column tiling; every program is also checked
for token discipline (balanced counters, and no deadlock even with one-entry command queues).
"""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.targets.isasim import SCHEDULES, Machine
from dlproc.compiler.layerprog import ConvLayer, build_conv_program
from dlproc.compiler.planners.conv import conv_shape
from dlproc.compiler.planners.conv_dw import depthwise_links
from dlproc.targets.isasim import run_on_isasim

from layerprog_cases import conv_reference, random_conv, random_depthwise, small_config

CONFIGS = {
    "c4": small_config(4),
    "c4-tiny": small_config(4, inp=(10, 10, 8), out=(10, 10, 1), wgt=2048, prm=32),
    "c3-64bit": small_config(3, inp=(12, 12, 4), out=(10, 10, 2), wgt=1024, prm=32, width=64),
}


def check(cfg, layer, x, **machine_kw):
    """Run the program with every schedule: the adversarial ones run loads (or stores) as early
    as the tokens allow, so a missing wait would change the result."""
    prog = build_conv_program(cfg, layer, x)
    ref = conv_reference(layer, x)
    for schedule in SCHEDULES:
        got, res = run_on_isasim(prog, schedule=schedule, **machine_kw)
        np.testing.assert_array_equal(got, ref)
        assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
        assert res.marks == [0]
    return prog, res


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("seed", range(12))
def test_random_conv_matches_golden(name, seed):
    rng = np.random.default_rng(1000 * seed + len(name))
    layer, x = random_conv(rng)
    try:
        check(CONFIGS[name], layer, x)
    except CompileError as exc:
        # Only a layer of which not even one input block of one output pixel fits may be refused
        # (anything larger runs as a partial-sum chain).
        assert "does not fit this configuration even as a partial-sum chain" in str(exc)
        geom = Geometry.from_config(CONFIGS[name])
        kh, kw = layer.weight.shape[2:]
        dy, dx = layer.dilation
        window = ((kh - 1) * dy + 1) * ((kw - 1) * dx + 1)
        assert kh * kw > geom.depth("WGT") or window > geom.depth("INP")


def test_multi_tile_layer_uses_several_tiles_groups_and_halos():
    cfg = CONFIGS["c4"]
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (10, 23, 19), dtype=np.int8)
    w = rng.integers(-128, 128, (13, 10, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-999, 999, 13).astype(np.int32), rng.integers(1, 1 << 15, 13),
                      rng.integers(14, 20, 13), zp_in=-7, zp_out=4, act_min=4, pads=(1, 1, 1, 1))
    prog, res = check(cfg, layer, x)
    assert prog.plan.steps > 4
    th, tw = prog.plan.tile
    assert th < 23  # spatially tiled
    # Every INP load pads with zp_in.
    assert all(i.pad_value == -7 for i in prog.instructions if isinstance(i, isa.Load) and i.buf == isa.Buf.INP)


def test_streamed_weights_and_strided_dilated_grouped():
    """Weights too large to stay resident: the plan streams them through the two WGT halves."""
    cfg = small_config(4, inp=(16, 16, 4), out=(10, 10, 4), wgt=1024, prm=32)
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (12, 17, 15), dtype=np.int8)
    w = rng.integers(-128, 128, (40, 6, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-999, 999, 40).astype(np.int32), rng.integers(1, 1 << 15, 40),
                      rng.integers(14, 20, 40), zp_in=3, stride=(2, 1), dilation=(1, 2), pads=(2, 1, 0, 2), groups=2)
    prog, _ = check(cfg, layer, x)
    assert prog.plan.weights == "streamed"


def test_depthwise_conv():
    cfg = CONFIGS["c4"]
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (9, 12, 12), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 1, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-99, 99, 9).astype(np.int32), rng.integers(1, 1 << 15, 9),
                      rng.integers(10, 16, 9), zp_in=1, pads=1, groups=9)
    check(cfg, layer, x)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("seed", range(8))
def test_random_depthwise_in_the_depthwise_mode(name, seed):
    """Random depthwise layers (kernels 2..5 per side, strides 1 and 2, pads, channel counts that
    are not multiples of C) run in the conv engine's depthwise mode, kernels larger than the window
    as partial-sum chains of links, bit-exact with the golden model on every schedule."""
    cfg = CONFIGS[name]
    geom = Geometry.from_config(cfg)
    layer, x = random_depthwise(np.random.default_rng(77 + 13 * seed + len(name)), geom.c)
    prog, _ = check(cfg, layer, x)
    convs = [i for i in prog.instructions if isinstance(i, isa.Conv)]
    if "one-tap links" in prog.plan.note:  # e.g. a 3x1 kernel where the window has one row
        assert not any(c.dw for c in convs)
        return
    assert convs and all(c.dw for c in convs)
    links = len(depthwise_links(geom, conv_shape(layer, x.shape)))
    assert sum(c.acc_keep for c in convs) == len(convs) // links * (links - 1)
    assert prog.plan.note.startswith("depthwise mode")


def test_depthwise_that_cannot_use_the_mode_says_why():
    """A depthwise multiplier > 1 and a dilated depthwise layer run on the dense array, bit-exact,
    and the plan says why."""
    cfg = CONFIGS["c4"]
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (6, 9, 9), dtype=np.int8)
    for co, dil, why in ((12, 1, "depthwise multiplier 2"), (6, 2, "dilation 2x2")):
        w = rng.integers(-128, 128, (co, 1, 3, 3), dtype=np.int8)
        layer = ConvLayer(w, rng.integers(-99, 99, co).astype(np.int32), rng.integers(1, 1 << 15, co),
                          rng.integers(10, 16, co), pads=1, dilation=dil, groups=6)
        prog, _ = check(cfg, layer, x)
        assert not any(i.dw for i in prog.instructions if isinstance(i, isa.Conv))
        assert why in prog.plan.note and "dense array" in prog.plan.note


def test_leaky_relu_multiplier_and_wrapping_bias():
    """M_neg differs from M, and the bias is near the int32 limits so accumulators wrap."""
    cfg = CONFIGS["c4"]
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (5, 6, 7), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 5, 2, 2), dtype=np.int8)
    bias = np.array([2**31 - 10, -(2**31) + 10, 0, 5, -5, 2**30], dtype=np.int32)
    mult = rng.integers(1, 1 << 15, 6)
    layer = ConvLayer(w, bias, mult, np.full(6, 30), mult_neg=mult // 10, zp_in=0, zp_out=0)
    check(cfg, layer, x)


def test_program_survives_one_entry_queues():
    """The stream puts every token producer before its consumer, so even queue depth 1 works."""
    cfg = CONFIGS["c4-tiny"]
    layer, x = random_conv(np.random.default_rng(42), max_ch=9, max_hw=14)
    layer.groups, layer.weight = 1, np.random.default_rng(1).integers(-128, 128, (7, x.shape[0], 3, 3)).astype(np.int8)
    layer.bias = np.zeros(7, np.int32)
    layer.mult, layer.shift, layer.mult_neg = np.full(7, 20000), np.full(7, 18), None
    layer.stride, layer.dilation, layer.pads = 1, 1, 1
    check(cfg, layer, x, queue_depth=1)


def test_overlap_loads_precede_compute_of_previous_step():
    """Double buffering: the INP load of tile t+1 is emitted before the CONVs of tile t and does
    not wait for them (it waits, if at all, for tile t-1)."""
    cfg = CONFIGS["c4"]
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (4, 30, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, np.zeros(4, np.int32), np.full(4, 1 << 14), np.full(4, 20), pads=1)
    prog = build_conv_program(cfg, layer, x)
    kinds = [type(i).__name__ for i in prog.instructions]
    first_conv = kinds.index("Conv")
    inp_loads = [k for k, i in enumerate(prog.instructions) if isinstance(i, isa.Load) and i.buf == isa.Buf.INP]
    assert len(inp_loads) >= 3
    assert inp_loads[1] < first_conv  # tile 1's input is requested before tile 0 computes
    assert not prog.instructions[inp_loads[1]].pop_next  # ...and waits for nothing
    assert prog.instructions[inp_loads[2]].pop_next  # tile 2 reuses tile 0's half: waits for it


def test_dram_base_and_window_are_honoured():
    cfg = CONFIGS["c4"]
    layer, x = random_conv(np.random.default_rng(77), max_ch=8, max_hw=10)
    prog = build_conv_program(cfg, layer, x, dram_base=0x10000)
    assert prog.dma_base == 0x10000 and prog.insn_base >= prog.dma_base and prog.dma_limit > prog.insn_base
    mach = Machine(cfg, dram_size=prog.dma_limit + 4096)
    mach.mem_write(prog.dram_base, prog.image)
    mach.run(None, insn_base=prog.insn_base, count=prog.insn_count, dma_base=prog.dma_base, dma_limit=prog.dma_limit)
    np.testing.assert_array_equal(prog.read_output(mach.dram), conv_reference(layer, x))


def test_bad_layers_are_refused_with_clear_errors():
    cfg = CONFIGS["c4"]
    x = np.zeros((4, 8, 8), np.int8)
    w = np.zeros((4, 4, 3, 3), np.int8)
    ok = dict(bias=np.zeros(4, np.int32), mult=np.ones(4, np.int64), shift=np.zeros(4, np.int64))
    with pytest.raises(CompileError, match="pads"):
        build_conv_program(cfg, ConvLayer(w, pads=16, **ok), x)
    with pytest.raises(CompileError, match="groups"):
        build_conv_program(cfg, ConvLayer(w, groups=3, **ok), x)
    with pytest.raises(CompileError, match="stride"):
        build_conv_program(cfg, ConvLayer(w, stride=8, **ok), x)
    with pytest.raises(CompileError, match="mult"):
        build_conv_program(cfg, ConvLayer(w, bias=ok["bias"], mult=np.full(4, 1 << 15), shift=ok["shift"]), x)
    with pytest.raises(CompileError, match="int8"):
        build_conv_program(cfg, ConvLayer(w, **ok), x.astype(np.int16))
    with pytest.raises(CompileError, match="does not fit this configuration even as a partial-sum chain: one "
                                           "input block's 289 taps need 289 WGT words"):
        huge = np.zeros((4, 4, 17, 17), np.int8)  # c4-tiny's WGT holds 256 words
        build_conv_program(CONFIGS["c4-tiny"], ConvLayer(huge, **ok), np.zeros((4, 20, 20), np.int8))


@pytest.mark.parametrize("name, shape, ci, co, k, stride, pads", [
    # WGT-bound: one output block needs 16 blocks x 49 taps = 784 words (c4 WGT is smaller), the input fits
    ("c4", (64, 8, 8), 64, 8, 7, 1, 0),
    # 3x3 over 30 input blocks: 270 words, more than WGT holds (256 and 228 words)
    ("c4-tiny", (120, 9, 9), 120, 6, 3, 1, 1),
    ("c3-64bit", (90, 7, 7), 90, 5, 3, 2, 1),
])
def test_reduction_split_into_partial_sum_chains(name, shape, ci, co, k, stride, pads):
    """A conv whose output block's weights or input do not fit runs as chains of CONVs passing
    their int32 sums on in the accumulator (acc_keep ... acc_in), bit-exact on every schedule."""
    cfg = CONFIGS[name]
    geom = Geometry.from_config(cfg)
    rng = np.random.default_rng(sum(shape) + co)
    w = rng.integers(-128, 128, (co, ci, k, k)).astype(np.int8)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    layer = ConvLayer(w, rng.integers(-5000, 5000, co).astype(np.int32),
                      rng.integers(1 << 13, 1 << 15, co), np.full(co, 19), zp_in=3, zp_out=-4,
                      stride=stride, pads=pads)
    assert -(-ci // geom.c) * k * k > geom.depth("WGT")  # would not fit without the split
    prog, _ = check(cfg, layer, x)
    assert prog.plan.chunks > 1
    convs = [i for i in prog.instructions if isinstance(i, isa.Conv)]
    assert [c.acc_in for c in convs[:prog.plan.chunks]] == [0] + [1] * (prog.plan.chunks - 1)
    assert [c.acc_keep for c in convs[:prog.plan.chunks]] == [1] * (prog.plan.chunks - 1) + [0]
    assert sum(c.cin_blocks for c in convs[:prog.plan.chunks]) == -(-ci // geom.c)
    assert sum(not c.acc_keep for c in convs) == sum(isinstance(i, isa.Store) for i in prog.instructions)


def test_two_layers_chained_with_a_barrier():
    """conv -> max pool in one program: the pool reads the conv's output from DRAM, so the
    barrier between them must order the conv's last STORE before the pool's first LOAD."""
    from dlproc.compiler.planners.packing import unpack_output
    from layerprog_cases import chained_conv_pool

    cfg = CONFIGS["c4"]
    case = chained_conv_pool(cfg)

    def run(prog, schedule, queue_depth="hw"):
        m = Machine(cfg, dram_size=case["window"][1], queue_depth=queue_depth, schedule=schedule)
        for addr, data in case["segments"]:
            m.mem_write(addr, data)
        res = m.run(prog, insn_base=case["insn_base"])
        return unpack_output(case["geom"], m.mem_read(case["out_addr"], case["out_bytes"]), case["out_shape"]), res

    for schedule, queue_depth in (("greedy", "hw"), ("greedy", 1), ("loads-first", "hw"),
                                  ("loads-first", None), ("stores-first", None)):
        out, res = run(case["program"], schedule, queue_depth)
        np.testing.assert_array_equal(out, case["expected"])
        assert res.marks == [0, 1]
        assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
    # Without the barrier the pool's loads overtake the conv's stores: the loads-first schedule
    # shows the race (so this test would catch a broken barrier).
    from dlproc.compiler.planners.schedule import emit_instructions
    steps_a, plan_a, steps_b, plan_b = case["steps"]
    racy = (emit_instructions(steps_a, plan_a, finish=False) + emit_instructions(steps_b, plan_b, mark_index=1))
    out, _ = run(racy, "loads-first", None)
    assert not np.array_equal(out, case["expected"])


@pytest.mark.parametrize("counter", ["L2C", "C2L", "C2S", "S2C"])
def test_every_token_is_needed(counter):
    """Remove one matching push/pop pair of a counter (the counters stay balanced): one of the
    adversarial schedules must then produce a wrong output. This shows that the builder's tokens
    are all needed and that the simulator's schedules catch a missing one."""
    import copy

    cfg = CONFIGS["c4"]
    rng = np.random.default_rng(13)
    x = rng.integers(-128, 128, (5, 60, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 5, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-999, 999, 9).astype(np.int32), rng.integers(1, 1 << 15, 9),
                      rng.integers(14, 18, 9), pads=1)
    prog = build_conv_program(cfg, layer, x)
    ref = conv_reference(layer, x)
    push_flag, pop_flag = {"L2C": ("push_next", "pop_prev"), "C2L": ("push_prev", "pop_next"),
                           "C2S": ("push_next", "pop_prev"), "S2C": ("push_prev", "pop_next")}[counter]
    producer, consumer = {"L2C": (isa.Load, (isa.Conv,)), "C2L": ((isa.Conv,), isa.Load),
                          "C2S": ((isa.Conv,), isa.Store), "S2C": (isa.Store, (isa.Conv,))}[counter]
    insns = copy.deepcopy(prog.instructions)
    pushes = [i for i in insns if isinstance(i, producer) and getattr(i, push_flag)]
    pops = [i for i in insns if isinstance(i, consumer) and getattr(i, pop_flag)]
    assert len(pushes) == len(pops) >= 3
    k = len(pops) // 2
    setattr(pushes[k], push_flag, False)
    setattr(pops[k], pop_flag, False)
    wrong = []
    for schedule in SCHEDULES:
        m = Machine(cfg, dram_size=prog.dma_limit + 4096, schedule=schedule, queue_depth=None)
        m.mem_write(prog.dram_base, prog.image)
        res = m.run(insns, insn_base=prog.insn_base, dma_base=prog.dma_base, dma_limit=prog.dma_limit)
        assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
        wrong.append(not np.array_equal(prog.read_output(m.dram), ref))
    assert any(wrong), f"removing one {counter} token went unnoticed by every schedule"
