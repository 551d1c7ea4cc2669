"""LRNTAB and LRN (conv module's LRN block) on the compute unit (Amaranth simulator, C = 4):
bit-exact against the golden ``ops.lrn`` on random data, window sizes and channel counts (the
window crosses channel blocks), one output word per cycle, and the error paths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.hardware.numerics import LRN_TABLE_SIZE
from test_gateware_compute_harness import OUT_FILL, random_buffers, run_program, small_hw

C = 4
TAB_WORDS = LRN_TABLE_SIZE // C  # 448 PRM words hold the whole table
HW = dataclasses.replace(small_hw(c=C, inp_depth=256, wgt_depth=16, prm_depth=TAB_WORDS, out_depth=256), lrn=True)


def _buffers(seed: int):
    rng = np.random.default_rng(seed)
    buf = random_buffers(rng, HW)
    buf.mult[:] = rng.integers(1, 2**15, size=buf.mult.shape)
    buf.shift[:] = rng.integers(10, 22, size=buf.shift.shape)
    return rng, buf


def _table(buf) -> tuple[np.ndarray, np.ndarray]:
    return buf.mult[:TAB_WORDS].reshape(-1).astype(np.int64), buf.shift[:TAB_WORDS].reshape(-1).astype(np.int64)


def lrn_reference(buf, insn: isa.Lrn) -> np.ndarray:
    """Golden ops.lrn over the instruction's pixels; returns OUT words (lanes >= channels: -1 marker)."""
    nb, n = insn.cin_blocks, insn.n_pix
    rows = insn.inp_base + np.arange(nb)[:, None] * insn.in_plane + np.arange(n)[None, :]
    x = buf.inp[rows].transpose(0, 2, 1).reshape(nb * C, n)[:insn.channels]  # (channels, pixels)
    mult, shift = _table(buf)
    y = ops.lrn(x[None, :, None, :], insn.size, insn.zp_in, mult, shift, insn.zp_out, insn.act_min,
                insn.act_max)[0, :, 0, :]
    return y


def _check(res, insn, buf) -> None:
    nb, n = insn.cin_blocks, insn.n_pix
    got = res.out[insn.out_base:insn.out_base + nb * n].reshape(nb, n, C).transpose(0, 2, 1).reshape(nb * C, n)
    np.testing.assert_array_equal(got[:insn.channels], lrn_reference(buf, insn), err_msg=str(insn))


def test_lrn_random_sizes_and_channels():
    rng, buf = _buffers(71)
    tab = isa.LrnTab(prm_base=0, tab_base=0, count=TAB_WORDS)
    insns, base = [], 0
    for size, nb, ch in ((5, 3, 12), (1, 1, 3), (16, 4, 13), (3, 2, 8), (8, 5, 17)):
        n = int(rng.integers(1, 9))
        zp_out = int(rng.integers(-10, 11))
        insn = isa.Lrn(inp_base=int(rng.integers(0, 20)), out_base=base, in_plane=n + int(rng.integers(0, 3)),
                       n_pix=n, cin_blocks=nb, channels=ch, size=size, zp_in=int(rng.integers(-40, 41)),
                       zp_out=zp_out, act_min=-128 if size % 2 else zp_out, act_max=127, push_next=True)
        insn.validate(HW)
        insns.append(insn)
        base += nb * n
    res = run_program(HW, buf, [tab] + insns + [isa.Finish()], max_cycles=20_000)
    assert res.finished and res.error_code == 0
    for insn in insns:
        _check(res, insn, buf)
    assert (res.out[base:] == OUT_FILL).all()
    assert res.c2s_pushes == len(insns)


def test_lrn_one_word_per_cycle_and_table_load_time():
    rng, buf = _buffers(72)
    tab = isa.LrnTab(prm_base=0, tab_base=0, count=TAB_WORDS)
    r0 = run_program(HW, buf, [tab, isa.Finish()], max_cycles=20_000)
    assert r0.finished and r0.cycles <= TAB_WORDS * (C + 2) + 20
    lrn = isa.Lrn(inp_base=0, out_base=0, in_plane=60, n_pix=60, cin_blocks=4, channels=16, size=5, zp_in=3)
    r1 = run_program(HW, buf, [tab, lrn, isa.Finish()], max_cycles=20_000)
    _check(r1, lrn, buf)
    assert r1.cycles - r0.cycles <= 240 + 30  # 240 words, then the pipeline depth


@pytest.mark.parametrize("insn, code", [
    (isa.Lrn(inp_base=250, n_pix=4, in_plane=4, cin_blocks=2, channels=8), isa.ErrorCode.SRAM_RANGE),
    (isa.Lrn(out_base=250, n_pix=4, in_plane=4, cin_blocks=2, channels=8), isa.ErrorCode.SRAM_RANGE),
    (isa.LrnTab(prm_base=0, tab_base=1700, count=24), isa.ErrorCode.SRAM_RANGE),
    (isa.LrnTab(prm_base=0, tab_base=1789, count=2), isa.ErrorCode.SRAM_RANGE),
    (isa.LrnTab(prm_base=440, tab_base=0, count=10), isa.ErrorCode.SRAM_RANGE),
])
def test_lrn_range_errors(insn, code):
    _, buf = _buffers(73)
    res = run_program(HW, buf, [insn, isa.Finish()])
    assert not res.finished and res.error_code == code
    assert (res.out == OUT_FILL).all()


def test_lrntab_refuses_bad_parameters_and_absent_block():
    _, buf = _buffers(74)
    buf.shift[3, 2] = 47
    res = run_program(HW, buf, [isa.LrnTab(prm_base=0, count=8), isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.ILLEGAL_FIELD
    # The last word may run past the table's end: its extra lanes are dropped, no error.
    res = run_program(HW, buf, [isa.LrnTab(prm_base=0, tab_base=LRN_TABLE_SIZE - 2, count=1), isa.Finish()])
    assert res.finished and res.error_code == 0
    hw = dataclasses.replace(HW, lrn=False)
    res = run_program(hw, buf, [isa.Lrn(n_pix=1, channels=4), isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.BLOCK_ABSENT
