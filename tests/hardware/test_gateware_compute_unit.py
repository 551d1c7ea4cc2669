"""The compute unit's sequencer: dependency tokens, FINISH, run-time errors, Verilog conversion."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog

from dlproc.hardware import isa
from dlproc.hardware.gateware.compute import ComputeUnit
from test_gateware_compute_harness import (
    OUT_FILL,
    conv_reference,
    random_buffers,
    run_program,
    small_hw,
)

HW = small_hw(c=2, inp_depth=128, wgt_depth=32, prm_depth=4, out_depth=32)
E = isa.ErrorCode


def _raw(insn: isa.Instruction, **overrides: int) -> int:
    """The encoding of ``insn`` with fields overwritten by values the encoder would refuse."""
    word = int.from_bytes(insn.encode(), "little")
    specs = {s.name: s for s in type(insn).field_specs()}
    for name, value in overrides.items():
        if name == "opcode":
            word = (word & ~0xF) | value
            continue
        spec = specs[name]
        mask = ((1 << spec.bits) - 1) << spec.offset
        word = (word & ~mask) | ((value << spec.offset) & mask)
    return word


def _conv(**kw) -> isa.Conv:
    args = dict(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=4, in_plane=16, out_h=2,
                out_w=2, kh=2, kw=2, cin_blocks=2)
    args.update(kw)
    return isa.Conv(**args)


def _buffers(seed: int = 0):
    return random_buffers(np.random.default_rng(seed), HW, scale_taps=8)


def test_tokens_pop_waits_and_push_follows_the_output() -> None:
    buf = _buffers()
    a = _conv(pop_prev=True, push_next=True)
    b = _conv(out_base=4, wgt_base=8, pop_next=True, push_prev=True, push_next=True)
    fin = isa.Finish(push_prev=True)
    res = run_program(HW, buf, [a, b, fin], give_tokens_at={40: (1, 0), 90: (0, 1)})
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out[0:4], conv_reference(buf, a))
    np.testing.assert_array_equal(res.out[4:8], conv_reference(buf, b))
    ev = res.events
    pops = [(c, n) for c, n, _ in ev if n.startswith("pop")]
    assert pops == [(41, "pop_prev"), (91, "pop_next")]  # consumed the cycle after they arrived
    writes_a = [c for c, n, addr in ev if n == "write" and addr < 4]
    writes_b = [c for c, n, addr in ev if n == "write" and 4 <= addr < 8]
    assert min(writes_a) > 41  # nothing executes before the token
    pushes_next = [c for c, n, _ in ev if n == "push_next"]
    pushes_prev = [c for c, n, _ in ev if n == "push_prev"]
    # A push comes with the last OUT word of its instruction (the write lands in that cycle).
    assert pushes_next == [max(writes_a), max(writes_b)]
    assert pushes_prev[0] == max(writes_b) and len(pushes_prev) == 2  # CONV b, then FINISH
    assert pushes_prev[1] > max(writes_b)
    assert res.tokens_left == (0, 0)
    assert res.stall_cycles >= 40 + (90 - max(writes_a))  # waited for both tokens


def test_without_tokens_nothing_happens() -> None:
    buf = _buffers()
    res = run_program(HW, buf, [_conv(pop_prev=True), isa.Finish()], max_cycles=300)
    assert not res.finished and res.error_code == 0
    assert (res.out == OUT_FILL).all()
    assert res.stall_cycles >= 290 and res.mac_cycles == 0


def test_finish_waits_for_the_last_drain_and_stops_fetching() -> None:
    buf = _buffers()
    a = _conv(out_h=3, out_w=3, in_w=4, in_plane=16, kh=2, kw=2)
    extra = _conv(out_base=16)
    res = run_program(HW, buf, [a, isa.Finish(), extra], max_cycles=2000)
    assert res.finished
    np.testing.assert_array_equal(res.out[0:9], conv_reference(buf, a))
    assert (res.out[16:] == OUT_FILL).all()  # nothing after FINISH ran
    last_write = max(c for c, n, _ in res.events if n == "write")
    assert res.cycles > last_write


@pytest.mark.parametrize(
    "insn, code",
    [
        (_conv(inp_base=120), E.SRAM_RANGE),  # INP beyond the buffer
        (_conv(wgt_base=30), E.SRAM_RANGE),  # 8 taps from word 30 of 32
        (_conv(prm_base=4), E.SRAM_RANGE),
        (_conv(out_h=3, out_w=6, in_w=8, in_plane=32), E.SRAM_RANGE),  # 18 pixels > ACC depth 16
        (_raw(_conv(), kh=0), E.ILLEGAL_FIELD),
        (_raw(_conv(), cin_blocks=0), E.ILLEGAL_FIELD),
        (_raw(_conv(), stride_x=0), E.ILLEGAL_FIELD),
        (_raw(_conv(), act_min=10, act_max=-10 & 0xFF), E.ILLEGAL_FIELD),
        (_raw(_conv(), opcode=0), E.ILLEGAL_OPCODE),
        (isa.Load(buf=0, sram_base=0, dram_addr=0), E.ILLEGAL_OPCODE),
        (isa.Pool(inp_base=120, out_base=0, prm_base=0, in_w=4, in_plane=16, out_h=2, out_w=2, kh=3,
                  kw=3), E.SRAM_RANGE),
        (isa.Pool(inp_base=0, out_base=0, prm_base=3, in_w=4, in_plane=16, out_h=1, out_w=1, kh=2,
                  kw=2, z_size=2, mode=isa.PoolMode.AVG), E.SRAM_RANGE),
        (_raw(isa.Pool(inp_base=0, out_base=0, prm_base=0, in_w=4, in_plane=16), z_size=0),
         E.ILLEGAL_FIELD),
    ],
)
def test_errors(insn, code) -> None:
    buf = _buffers()
    res = run_program(HW, buf, [insn, isa.Finish()], max_cycles=600)
    assert not res.finished
    assert res.error_code == code


def test_out_of_range_output_is_not_written() -> None:
    """A tile running past the end of OUT stops with SRAM_RANGE; the words it would have wrapped
    onto stay untouched, the ones inside the buffer are correct."""
    buf = _buffers()
    insn = _conv(out_base=30)  # 4 pixels into words 30, 31, (32), (33)
    res = run_program(HW, buf, [insn, isa.Finish()], max_cycles=600)
    assert res.error_code == E.SRAM_RANGE
    np.testing.assert_array_equal(res.out[30:32], conv_reference(buf, insn)[:2])
    assert (res.out[:30] == OUT_FILL).all()


@pytest.mark.parametrize("field, value", [("mult", 1 << 15), ("mult_neg", 1 << 15), ("shift", 47)])
def test_requant_parameters_outside_the_multiplier_are_refused(field: str, value: int) -> None:
    buf = _buffers()
    getattr(buf, field)[0, 1] = value
    res = run_program(HW, buf, [_conv(), isa.Finish()], max_cycles=600)
    assert res.error_code == E.ILLEGAL_FIELD
    assert (res.out == OUT_FILL).all()


def test_verilog_conversion_c4() -> None:
    hw = small_hw(c=4, inp_depth=1024, wgt_depth=128, prm_depth=16, out_depth=512)
    text = verilog.convert(ComputeUnit(hw), name="dlproc_compute", emit_src=False)
    assert "module dlproc_compute" in text
    for port in ("insn__payload", "inp__addr", "wgt__data", "out__en", "tok_c2s_push", "error_code"):
        assert port in text


@pytest.mark.slow
def test_verilog_conversion_c16() -> None:
    """C = 16 (the de10nano_int8 array) converts; 256 MAC products and 16 requantization lanes."""
    hw = small_hw(c=16, inp_depth=1024, wgt_depth=128, prm_depth=16, out_depth=128)
    text = verilog.convert(ComputeUnit(hw), name="dlproc_compute", emit_src=False)
    assert "module dlproc_compute" in text
    assert text.count("prod_15_15") >= 1 and "l15_lo1" in text
