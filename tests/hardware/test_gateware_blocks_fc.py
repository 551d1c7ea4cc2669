"""FC (fc module's FC engine) on the compute unit (Amaranth simulator, C = 4): random shapes and
data, bit-exact against the golden ``ops.fully_connected`` + ``requantize`` and the ISA-level
simulator; lane counts F = 4, 8, 16 (four, two and one slices per WGT word), C = 3 and C = 6;
throughput one slice per cycle; range and field errors; the engine absent."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.hardware.numerics import requantize
from test_gateware_compute_harness import OUT_FILL, isasim_machine, random_buffers, run_program, small_hw

C = 4


def _hw(lanes: int, fc_in: int = 96, fc_out: int = 64, c: int = C) -> isa.HardwareParams:
    return dataclasses.replace(small_hw(c=c, inp_depth=64, wgt_depth=96, prm_depth=24, out_depth=64),
                               fc=True, fc_lanes=lanes, fc_in_depth=fc_in, fc_out_max=fc_out)


def fc_reference(hw: isa.HardwareParams, buf, x: np.ndarray, insn: isa.Fc) -> np.ndarray:
    """OUT words of one FC from the golden model: weights gathered from the slice stream."""
    c = hw.c
    f, k_per = hw.fc_lanes, (c * c) // hw.fc_lanes
    s_per = -(-insn.n_in // f)
    stream = buf.wgt.reshape(hw.wgt_depth, c * c)[:, :k_per * f].reshape(-1, f)
    first = insn.wgt_base * k_per
    w = stream[first:first + insn.n_out * s_per].reshape(insn.n_out, s_per * f)[:, :insn.n_in]
    lo = insn.lane0
    blocks = -(-(lo + insn.n_out) // c)
    p = slice(insn.prm_base, insn.prm_base + blocks)
    bias = buf.bias[p].reshape(-1).astype(np.int64)
    acc = bias.copy()
    acc[lo:lo + insn.n_out] = ops.fully_connected(x[None, :insn.n_in], w.astype(np.int8), bias[lo:lo + insn.n_out])[0]
    out = requantize(acc, buf.mult[p].reshape(-1), buf.shift[p].reshape(-1), insn.zp_out, insn.act_min,
                     insn.act_max, buf.mult_neg[p].reshape(-1))
    return out.reshape(blocks, c)


def isasim_out(hw: isa.HardwareParams, buf, insns: list) -> np.ndarray:
    return isasim_machine(hw, buf, insns).out


# (C, F): K = C*C/F = 4, 2, 1 slices per WGT word; C = 3 wastes a byte per word (K = 1 of 9
# bytes); C = 6 > F = 4 copies each INP word in two chunks.
@pytest.mark.parametrize("c, lanes", [(4, 4), (4, 8), (4, 16), (3, 8), (6, 4)])
def test_fc_random_matches_golden_and_isasim(c, lanes):
    hw = _hw(lanes, c=c)
    C = c
    rng = np.random.default_rng(600 + lanes + 100 * c)
    buf = random_buffers(rng, hw, scale_taps=12)
    insns, refs, base = [], [], 0
    x, x_len = None, 0
    for t in range(3):
        n_in = int(rng.integers(1, 80))
        n_out = int(rng.integers(1, 11))
        inp_base = int(rng.integers(0, 64 - (n_in + C - 1) // C + 1))
        load_x = t == 0 or n_in > x_len
        if load_x:
            x_len = -(-n_in // C) * C
            x = buf.inp[inp_base:inp_base + x_len // C].reshape(-1)
        zp = int(rng.integers(-20, 21))
        insn = isa.Fc(inp_base=inp_base, wgt_base=int(rng.integers(0, 20)), prm_base=int(rng.integers(0, 20)),
                      out_base=base, n_in=n_in, n_out=n_out, load_x=int(load_x), zp_out=zp,
                      act_min=int(rng.choice([-128, zp])), act_max=127, push_next=True)
        insn.validate(hw)
        insns.append(insn)
        refs.append(fc_reference(hw, buf, x, insn))
        base += -(-n_out // C)
    res = run_program(hw, buf, insns + [isa.Finish()], max_cycles=20_000)
    assert res.finished and res.error_code == 0
    sim_out = isasim_out(hw, buf, insns + [isa.Finish()])
    for insn, ref in zip(insns, refs):
        words = slice(insn.out_base, insn.out_base + ref.shape[0])
        np.testing.assert_array_equal(res.out[words], ref, err_msg=str(insn))
        np.testing.assert_array_equal(sim_out[words], ref, err_msg=str(insn))
    assert (res.out[base:] == OUT_FILL).all()
    assert res.c2s_pushes == len(insns)


@pytest.mark.parametrize("tile", [1, 3])
def test_fc_sub_word_tiles_fill_words_together(tile):
    """Instructions of ``tile`` < C outputs each, starting at lane ``o0 % C`` (``Fc.lane0``), fill
    the OUT words of 10 outputs together, as the compiler issues a layer whose weights for C
    outputs do not fit a WGT half: every lane holds the value of the last instruction that wrote
    it, the lanes before an instruction's lane0 are left as they are, and the engine and the
    ISA-level simulator agree."""
    hw = _hw(8)
    buf = random_buffers(np.random.default_rng(640 + tile), hw, scale_taps=12)
    n_in, n_out = 37, 10
    x = buf.inp[:-(-n_in // C)].reshape(-1)
    expect = np.full((hw.out_depth, C), OUT_FILL, dtype=np.int8)
    insns = []
    for t, o0 in enumerate(range(0, n_out, tile)):
        insn = isa.Fc(inp_base=0, wgt_base=7 * t, prm_base=2 + o0 // C, out_base=o0 // C, n_in=n_in,
                      n_out=min(tile, n_out - o0), load_x=int(t == 0), lane0=o0 % C, push_next=True)
        insn.validate(hw)
        insns.append(insn)
        ref = fc_reference(hw, buf, x, insn)
        words = expect[insn.out_base:insn.out_base + ref.shape[0]].reshape(-1)
        words[insn.lane0:] = ref.reshape(-1)[insn.lane0:]
    res = run_program(hw, buf, insns + [isa.Finish()], max_cycles=20_000)
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out, expect)
    np.testing.assert_array_equal(isasim_out(hw, buf, insns + [isa.Finish()]), expect)
    assert res.c2s_pushes == len(insns)


def test_fc_lane0_keeps_the_lanes_before_it():
    """One instruction with lane0 = 2 writes lanes 2.. of its first word and leaves lanes 0, 1."""
    hw = _hw(8)
    buf = random_buffers(np.random.default_rng(650), hw, scale_taps=12)
    insn = isa.Fc(inp_base=0, wgt_base=0, prm_base=0, out_base=5, n_in=16, n_out=5, load_x=1, lane0=2)
    res = run_program(hw, buf, [insn, isa.Finish()], max_cycles=5_000)
    assert res.finished and res.error_code == 0
    ref = fc_reference(hw, buf, buf.inp[:4].reshape(-1), insn)
    assert (res.out[5][:2] == OUT_FILL).all()
    np.testing.assert_array_equal(res.out[5][2:], ref[0][2:])
    np.testing.assert_array_equal(res.out[6], ref[1])
    sim = isasim_out(hw, buf, [insn, isa.Finish()])
    np.testing.assert_array_equal(sim[5:7], res.out[5:7])


def test_fc_one_slice_per_cycle():
    """n_out * ceil(n_in / F) MAC cycles, and the instruction takes only a fixed overhead more."""
    hw = _hw(8)
    buf = random_buffers(np.random.default_rng(610), hw)
    insn = isa.Fc(n_in=64, n_out=12, wgt_base=0, load_x=0)
    res = run_program(hw, buf, [insn, isa.Finish()], max_cycles=5_000)
    assert res.finished
    # Output blocks leave the engine exactly 4 outputs * 8 slices apart: one slice per cycle.
    writes = [cyc for cyc, kind, _ in res.events if kind == "write"]
    assert np.diff(writes).tolist() == [4 * 8, 4 * 8]
    assert res.cycles <= 12 * 8 + 20, res.cycles
    # fc_mac_active (the FC_MAC_ACTIVE counter) is high once per slice; the conv array's is not.
    assert (res.fc_mac_cycles, res.mac_cycles) == (12 * 8, 0)


@pytest.mark.parametrize("insn, code", [
    (isa.Fc(n_in=97, n_out=1), isa.ErrorCode.SRAM_RANGE),  # beyond the x buffer
    (isa.Fc(n_in=8, n_out=65), isa.ErrorCode.ILLEGAL_FIELD),  # beyond fc.OutputMemorySize
    (isa.Fc(n_in=97, n_out=65), isa.ErrorCode.ILLEGAL_FIELD),  # both: the intake's field check first
    (isa.Fc(n_in=8, n_out=4, wgt_base=95, load_x=0), isa.ErrorCode.SRAM_RANGE),
    (isa.Fc(n_in=8, n_out=4, prm_base=24), isa.ErrorCode.SRAM_RANGE),
    (isa.Fc(n_in=8, n_out=4, out_base=64), isa.ErrorCode.SRAM_RANGE),
    (isa.Fc(n_in=8, n_out=4, inp_base=63, load_x=1), isa.ErrorCode.SRAM_RANGE),
    (isa.Fc(n_in=8, n_out=1, lane0=4), isa.ErrorCode.ILLEGAL_FIELD),  # lane0 is not a lane (C = 4)
    (isa.Fc(n_in=8, n_out=2, lane0=3, out_base=63), isa.ErrorCode.SRAM_RANGE),  # the second word is beyond OUT
])
def test_fc_errors(insn, code):
    hw = _hw(4)
    buf = random_buffers(np.random.default_rng(620), hw)
    res = run_program(hw, buf, [insn, isa.Finish()], max_cycles=2_000)
    assert not res.finished and res.error_code == code
    with pytest.raises(Exception):
        isasim_out(hw, buf, [insn, isa.Finish()])


def test_fc_absent_block():
    hw = dataclasses.replace(_hw(4), fc=False)
    res = run_program(hw, random_buffers(np.random.default_rng(621), hw), [isa.Fc(), isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.BLOCK_ABSENT


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(c=4, fc_lanes=16), dict(c=6, fc_lanes=4)])
def test_fc_verilog_lint_clean(kw):
    """The whole processor with the FC engine lints clean (C*C = F: no slice mux; C > F: chunked copy)."""
    from dlproc.hardware.gateware import generate_verilog, lint
    from test_gateware_core_support import small_hw as core_hw

    lint(generate_verilog(core_hw(fc=True, fc_in_depth=64, **kw)))
