"""ACTTAB and the act_table flag (output stage's activation table) on the compute unit (Amaranth
simulator, C = 4): CONV, ADD and FC results through a random table, bit-exact with the contract's
formula and with the ISA-level simulator; a table reloaded between two instructions; the errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.hardware.numerics import ACT_TABLE_SIZE
from dlproc.targets.golden import ops
from test_gateware_blocks_eltwise import add_reference
from test_gateware_blocks_fc import isasim_out, fc_reference
from test_gateware_compute_harness import OUT_FILL, conv_reference, random_buffers, run_program, small_hw

C = 4
TAB_WORDS = ACT_TABLE_SIZE // C
HW = dataclasses.replace(small_hw(c=C, inp_depth=128, wgt_depth=96, prm_depth=2 * TAB_WORDS + 8, out_depth=128),
                         adder=True, fc=True, fc_lanes=4, fc_in_depth=96, fc_out_max=64, act_table=True)


def _buffers(seed: int):
    """Random buffers with two random tables in PRM words 0..63 and 64..127 (the bias fields)."""
    rng = np.random.default_rng(seed)
    buf = random_buffers(rng, HW)
    tables = [rng.integers(-128, 128, size=ACT_TABLE_SIZE) for _ in range(2)]
    for k, t in enumerate(tables):
        buf.bias[k * TAB_WORDS:(k + 1) * TAB_WORDS] = t.reshape(TAB_WORDS, C)
    return rng, buf, tables


def _through(table: np.ndarray, out: np.ndarray) -> np.ndarray:
    return ops.table_lookup(out, table.astype(np.int8))


def test_conv_add_fc_through_the_table_match_formula_and_isasim():
    rng, buf, (t0, t1) = _buffers(901)
    p = 2 * TAB_WORDS  # requantization parameters after the tables
    conv = isa.Conv(inp_base=0, wgt_base=0, prm_base=p, out_base=0, in_w=6, in_plane=36, out_h=4, out_w=4, kh=3,
                    kw=3, cin_blocks=2, zp_out=5, act_min=-100, act_max=120, act_table=1)
    plain = dataclasses.replace(conv, out_base=16, act_table=0)
    add = isa.Add(inp_a=3, inp_b=60, out_base=32, count=9, za=4, zb=-9, ma=21000, mb=13000, shift=15, zp_out=-3,
                  act_table=1)
    fc = isa.Fc(inp_base=72, wgt_base=20, prm_base=p + 1, out_base=48, n_in=24, n_out=7, load_x=1, zp_out=2,
                act_table=1)
    conv2 = dataclasses.replace(conv, out_base=64, zp_out=-7)  # after the second table load
    insns = [isa.ActTab(prm_base=0, count=TAB_WORDS), conv, plain, add, fc,
             isa.ActTab(prm_base=TAB_WORDS, count=TAB_WORDS), conv2, isa.Finish()]
    for insn in insns:
        insn.validate(HW)
    res = run_program(HW, buf, insns, max_cycles=40_000)
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out[0:16], _through(t0, conv_reference(buf, conv)))
    np.testing.assert_array_equal(res.out[16:32], conv_reference(buf, plain))
    np.testing.assert_array_equal(res.out[32:41], _through(t0, add_reference(buf.inp, add)))
    x = buf.inp[72:78].reshape(-1)
    np.testing.assert_array_equal(res.out[48:50], _through(t0, fc_reference(HW, buf, x, fc)))
    np.testing.assert_array_equal(res.out[64:80], _through(t1, conv_reference(buf, conv2)))
    assert (res.out[80:] == OUT_FILL).all()
    # The ISA-level simulator computes the same OUT, word for word.
    np.testing.assert_array_equal(isasim_out(HW, buf, insns), res.out)


def test_partial_table_load_keeps_the_other_entries():
    """ACTTAB with tab_base: only entries tab_base .. tab_base + count*C - 1 change."""
    _, buf, (t0, t1) = _buffers(902)
    conv = isa.Conv(inp_base=0, wgt_base=0, prm_base=2 * TAB_WORDS, out_base=0, in_w=8, in_plane=64, out_h=8,
                    out_w=8, cin_blocks=1, act_table=1)
    insns = [isa.ActTab(prm_base=0, count=TAB_WORDS), isa.ActTab(prm_base=TAB_WORDS, tab_base=128, count=8),
             conv, isa.Finish()]
    res = run_program(HW, buf, insns, max_cycles=20_000)
    assert res.finished and res.error_code == 0
    table = t0.copy()
    table[128:160] = t1[:32]
    np.testing.assert_array_equal(res.out[:64], _through(table, conv_reference(buf, conv)))
    np.testing.assert_array_equal(isasim_out(HW, buf, insns), res.out)


def test_acttab_cycles_are_the_estimators():
    """C + 2 cycles per PRM word plus the table-load setup (dlproc.estimate.engines.serial_work)."""
    from dlproc.estimate.engines import serial_work

    _, buf, _ = _buffers(903)
    base = run_program(HW, buf, [isa.Finish()]).cycles
    res = run_program(HW, buf, [isa.ActTab(prm_base=0, count=TAB_WORDS), isa.Finish()])
    assert res.finished
    work, writes = serial_work(isa.ActTab(prm_base=0, count=TAB_WORDS), C)
    assert not writes
    assert abs((res.cycles - base) - work) <= 2, (res.cycles - base, work)


@pytest.mark.parametrize("hw, insns, code", [
    # An entry that is not int8 (bias 200 in word 3): nothing of the word is written.
    (HW, "bad_entry", isa.ErrorCode.ILLEGAL_FIELD),
    (HW, [isa.ActTab(prm_base=HW.prm_depth - 2, count=4)], isa.ErrorCode.SRAM_RANGE),
    (HW, [isa.ActTab(prm_base=0, tab_base=253, count=2)], isa.ErrorCode.SRAM_RANGE),
    # Without the table: ACTTAB is an absent block's opcode, the flag an illegal field.
    (dataclasses.replace(HW, act_table=False), [isa.ActTab(prm_base=0, count=1)], isa.ErrorCode.BLOCK_ABSENT),
    (dataclasses.replace(HW, act_table=False), [isa.Conv(in_w=1, in_plane=1, act_table=1)],
     isa.ErrorCode.ILLEGAL_FIELD),
    (dataclasses.replace(HW, act_table=False), [isa.Add(count=2, act_table=1)], isa.ErrorCode.ILLEGAL_FIELD),
    (dataclasses.replace(HW, act_table=False), [isa.Fc(n_in=4, n_out=1, act_table=1)], isa.ErrorCode.ILLEGAL_FIELD),
])
def test_errors(hw, insns, code):
    _, buf, _ = _buffers(904)
    if insns == "bad_entry":
        buf.bias[3, 2] = 200
        insns = [isa.ActTab(prm_base=0, count=TAB_WORDS)]
    res = run_program(hw, buf, insns + [isa.Finish()], max_cycles=5_000)
    assert not res.finished and res.error_code == code
    assert (res.out == OUT_FILL).all()


def test_isa_refuses_the_flag_without_the_table():
    with pytest.raises(isa.InstructionError, match="no activation table"):
        isa.Conv(in_w=1, in_plane=1, act_table=1).validate(dataclasses.replace(HW, act_table=False))
    with pytest.raises(isa.InstructionError, match="beyond the activation table"):
        isa.ActTab(prm_base=0, tab_base=250, count=3).validate(HW)
