"""Unit tests of the estimator's timeline model (no RTL): token waits, overlap between units,
DDR-bound against compute-bound programs, and the figures the model derives from the
configuration, each checked against cycles computed by hand from the gateware's documented
behaviour (``docs/estimator.md``)."""

from __future__ import annotations


import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.estimate import EstimateError, TimingParams, simulate_program
from dlproc.estimate.bursts import row_bursts, transfer_bursts
from dlproc.compiler.layerprog import ConvLayer, build_conv_program

from layerprog_cases import small_config

CFG = small_config(4)  # C = 4, 128-bit bus, 16 bytes/cycle, 40 cycles DDR latency
L, S, F = isa.Load, isa.Store, isa.Finish


def conv(h: int, w: int, k: int = 1, cb: int = 1, **kw) -> isa.Conv:
    return isa.Conv(in_w=w + k, in_plane=(h + k) * (w + k), out_h=h, out_w=w, kh=k, kw=k, cin_blocks=cb, **kw)


def cycles(prog, cfg=CFG) -> int:
    return simulate_program(cfg, prog).cycles


def test_timing_params_follow_the_configuration():
    tp = TimingParams.from_config(CFG)
    assert (tp.c, tp.bus_bytes, tp.ddr_latency, tp.ddr_rate) == (4, 16, 40, 1.0)
    assert tp.elem_beats == {"INP": 1, "WGT": 1, "PRM": 3, "OUT": 1}  # PRM word = 36 bytes
    assert tp.acc_stages == 4  # 3 + ceil(log2(4) / 2)
    half = small_config(4)
    half.set_property("DDRBytesPerCycle", 8)
    assert TimingParams.from_config(half).ddr_rate == 0.5


def test_bursts_split_at_aligned_boundaries():
    assert row_bursts(0, 16, 16) == (1, 16, 16)
    assert row_bursts(8, 24, 16) == (2, 8, 16)
    assert row_bursts(15, 18, 16) == (3, 1, 1)
    tp = TimingParams.from_config(CFG)
    # 3 rows of 24 beats at a stride of 24 beats: offsets 0, 8, 0 -> 2 bursts each.
    assert transfer_bursts(L(x_size=24, y_size=3, y_stride=24), 1, tp) == (6, 72)
    # PRM elements are 3 beats: 16 elements = 48 beats = 3 aligned bursts.
    assert transfer_bursts(L(buf=2, x_size=16), 3, tp) == (3, 48)


def test_load_streams_one_beat_per_cycle_and_halves_with_the_ddr_rate():
    # 64 vs 16 contiguous INP words: 48 more beats at 1 beat/cycle, or 96 at half the rate.
    assert cycles([L(x_size=64), F()]) - cycles([L(x_size=16), F()]) == 48
    half = small_config(4)
    half.set_property("DDRBytesPerCycle", 8)
    assert cycles([L(x_size=64), F()], half) - cycles([L(x_size=16), F()], half) == 96


def test_short_bursts_are_limited_by_outstanding_commands():
    # 1-beat rows: after the first 8 commands, each waits for the oldest to retire (it may be
    # issued 2 cycles before the retiring beat), i.e. (latency + 1 - 1) / 8 = 5 cycles per burst
    # instead of the planner's 3 (the RTL measures 160 cycles for these 32 bursts).
    tp = TimingParams.from_config(CFG)
    d = cycles([L(x_size=1, y_size=64, y_stride=2), F()]) - cycles([L(x_size=1, y_size=32, y_stride=2), F()])
    assert d == pytest.approx(32 * tp.ddr_latency / tp.outstanding, abs=2)


def test_token_wait_starts_the_consumer_after_the_producer():
    tl = simulate_program(CFG, [L(x_size=64, push_next=True), conv(4, 4, 3, pop_prev=True), F()])
    # The push is visible one cycle after the LOAD's done pulse; the sequencer then needs one
    # cycle from TOKENS to EXEC, and the engine accepts at once.
    assert tl.start[1] == tl.end[0] + 2
    alone = simulate_program(CFG, [conv(4, 4, 3), F()])
    assert tl.end[1] - tl.start[1] == alone.end[0] - alone.start[0]


def test_independent_units_overlap():
    load = cycles([L(x_size=64), F()])
    comp = cycles([conv(4, 4, 3), F()])
    both = cycles([L(x_size=64), conv(4, 4, 3), F()])
    assert both < load + comp - 100  # not serialised
    assert max(load, comp) <= both <= max(load, comp) + 4  # only the dispatch of one more instruction


def test_back_to_back_convs_follow_the_engine_period():
    # T taps of N pixels: T*max(N, 3) issue cycles plus the hand-over of Ss + 1 cycles.
    tp = TimingParams.from_config(CFG)
    for h, w, k, cb in ((4, 4, 3, 1), (8, 8, 3, 2), (10, 10, 1, 1)):
        one = cycles([conv(h, w, k, cb), F()])
        two = cycles([conv(h, w, k, cb)] * 2 + [F()])
        assert two - one == cb * k * k * max(h * w, 3) + tp.acc_stages + 1


def _pipeline(n_steps: int, load_words: int, conv_hw: int, k: int) -> list[isa.Instruction]:
    """Load -> conv -> store steps with double buffering tokens (as layerprog emits them)."""
    prog: list[isa.Instruction] = []
    for i in range(n_steps):
        prog.append(L(x_size=load_words, push_next=True, pop_next=i >= 2))
        prog.append(conv(conv_hw, conv_hw, k, pop_prev=True, push_prev=True, push_next=True))
        prog.append(S(x_size=conv_hw * conv_hw, pop_prev=True))
    # Two C2L tokens are never consumed by a LOAD: the counters need not end at zero here.
    return prog + [F()]


def test_ddr_bound_program_scales_with_bandwidth_and_compute_bound_does_not():
    half = small_config(4)
    half.set_property("DDRBytesPerCycle", 8)
    mem = _pipeline(6, 200, 2, 1)  # 200-beat loads feeding 4-pixel 1x1 convs
    comp = _pipeline(6, 16, 8, 3)  # 16-beat loads feeding 8x8 3x3 convs (576 cycles each)
    m_full, m_half = cycles(mem), cycles(mem, half)
    c_full, c_half = cycles(comp), cycles(comp, half)
    # Memory bound: 6 loads x 200 beats take 1200 more cycles at half the bandwidth (plus the
    # stores' 4 beats each).
    assert m_half - m_full == pytest.approx(6 * 200 + 6 * 4, rel=0.03)
    # Compute bound: only the first load and the last store see the bandwidth.
    assert c_half - c_full <= 16 + 64 + 8
    assert c_full >= 6 * 9 * 64


def test_bound_classification_and_marks():
    tl = simulate_program(CFG, _pipeline(6, 16, 8, 3)[:-1] + [isa.Mark(index=3), F()])
    assert 3 in tl.marks and tl.marks[3] <= tl.cycles
    work = tl.window(0, tl.cycles)
    assert work["compute"] == 6 * 9 * 64
    assert work["memory"] == 6 * 16 + 6 * 64


def test_deadlock_and_missing_finish_are_errors():
    with pytest.raises(EstimateError, match="deadlock"):
        simulate_program(CFG, [conv(2, 2, pop_prev=True), F()])
    with pytest.raises(EstimateError, match="FINISH"):
        simulate_program(CFG, [L(x_size=4)])


def test_encoded_program_gives_the_same_timeline():
    prog = _pipeline(3, 32, 4, 3)
    assert simulate_program(CFG, isa.encode_program(prog)).cycles == cycles(prog)


def test_long_streams_are_timed_in_steady_state():
    """A GoogLeNet-sized stream (~12k instructions: one conv program's body repeated) is timed in
    steady state: twice the repeats cost twice the cycles, up to the pipeline's fill and drain at
    the ends. How fast the estimator runs is a benchmark figure
    (``benchmarks/bench_estimator.py --stream-only``), not a timed test."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (30, 9, 13), dtype=np.int8)
    w = rng.integers(-128, 128, (30, 30, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, np.zeros(30, np.int32), np.full(30, 1000), np.full(30, 16), pads=1)
    body = build_conv_program(CFG, layer, x).instructions[:-1]  # without FINISH
    repeats = -(-6_000 // len(body))
    half = simulate_program(CFG, body * repeats + [F()]).cycles
    full = simulate_program(CFG, body * (2 * repeats) + [F()]).cycles
    one = simulate_program(CFG, body + [F()]).cycles
    assert len(body) * 2 * repeats >= 12_000
    assert half > 0
    # The second half overlaps its first loads with the first half's tail, so it may cost up to one
    # body's fill less than the first; it never costs more.
    assert 2 * half - one <= full <= 2 * half, (one, half, full)


def test_lrntab_costs_c_plus_2_cycles_per_prm_word():
    """LRNTAB reads a PRM word (2 cycles) and writes its C lanes into the table, one per cycle
    (gateware/lrn.py): C + 2 cycles per word (measured on the RTL: 162 + 6 (k - 1) cycles for a
    16-word PRM load and LRNTAB of k words at C = 4, see tests/test_estimate_rtl.py)."""
    from sim_fixture import blocks_config

    cfg = blocks_config()

    def prog(k: int) -> list[isa.Instruction]:
        return [L(buf=isa.Buf.PRM, x_size=16, push_next=True), isa.LrnTab(prm_base=0, tab_base=0, count=k, pop_prev=True),
                F()]

    assert cycles(prog(16), cfg) - cycles(prog(1), cfg) == 15 * (4 + 2)


def test_concurrent_loads_and_stores_never_exceed_the_bus():
    """A DDR-bound LRN layer with large tiles (GoogLeNet's pool1/norm1 on arria10soc_int8: each
    tile's STORE overlaps the next tiles' LOADs for most of its length) on one memory port
    takes at least its DMA beats at the DDR rate. (The arbiter alternates write and read bursts: the two transfers
    share the bus, they do not each get all of it; the estimate was 5 % below this bound.)"""
    from dlproc.config import ProcessorConfig
    from dlproc.targets.golden import ops
    from dlproc.compiler.layerprog import LrnLayer, build_lrn_program

    cfg = ProcessorConfig.preset("arria10soc_int8")
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    cfg.set_property("MemoryPorts", 1)  # the preset has two; loads and stores share one here
    params = ops.lrn_params(5, 1e-4, 0.75, 1.0, 0.05, 0.02)
    layer = LrnLayer(size=5, zp_in=-7, table_mult=params.mult, table_shift=params.shift, zp_out=3)
    prog = build_lrn_program(cfg, layer, np.zeros((64, 56, 56), dtype=np.int8))
    tl = simulate_program(cfg, prog.instructions, insn_base=prog.insn_base)
    beats = sum(tl.dma_beats)
    assert tl.cycles >= beats / tl.bus_rate
    # ... and the alternation loses bus cycles (the RTL: 42,142 cycles for 38,682 beats).
    assert tl.cycles >= 1.05 * beats / tl.bus_rate
