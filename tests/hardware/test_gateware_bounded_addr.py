"""The conv, pool and upsample engines' bounded INP addresses: the low log2(depth) bits plus a sticky
"beyond the buffer" bit. Addresses whose low bits wrap back into the buffer must still stop with
SRAM_RANGE (a plain narrow adder would read a wrong word instead), and an instruction that ends
exactly at the last INP word must run and be correct. INP depth 100 (not a power of two: 7 low
bits, so both ``beyond`` and ``low >= depth`` are exercised)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from test_gateware_compute_harness import conv_reference, pool_reference, random_buffers, run_program, small_hw

HW = dataclasses.replace(small_hw(c=2, inp_depth=100, wgt_depth=64, prm_depth=4, out_depth=64), upsample=True)
E = isa.ErrorCode


def _conv(**kw) -> isa.Conv:
    args = dict(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=4, in_plane=16, out_h=1,
                out_w=1, kh=1, kw=1, cin_blocks=1)
    return isa.Conv(**(args | kw))


def _pool(**kw) -> isa.Pool:
    args = dict(inp_base=0, out_base=0, prm_base=0, in_w=4, in_plane=16, out_h=1, out_w=1, kh=1, kw=1)
    return isa.Pool(**(args | kw))


@pytest.mark.parametrize("insn", [
    _conv(in_plane=128 + 3, cin_blocks=2),  # second channel block at 131: low bits 3
    _conv(in_w=64, stride_y=2, out_h=2),  # second row at 128: low bits 0
    _conv(in_w=128, kh=2),  # second kernel row at 128
    _conv(inp_base=(1 << 20) - 128),  # beyond from the start, low bits 0
    _conv(inp_base=99, out_w=2),  # word 100 = depth: fits in 7 bits, but >= depth
    _pool(in_plane=128 + 3, z_size=2),
    _pool(in_w=64, stride_y=2, out_h=2),
    _pool(in_w=128, kh=2),
    _pool(inp_base=99, kw=2),
    isa.Upsample(inp_base=0, out_base=0, in_w=4, in_plane=128 + 1, z_size=2),
    isa.Upsample(inp_base=0, out_base=0, in_w=128, in_plane=4, out_h=2),
    isa.Upsample(inp_base=99, out_base=0, in_w=4, in_plane=4, out_w=2),
], ids=lambda i: type(i).__name__)
def test_addresses_wrapping_into_the_buffer_stop(insn) -> None:
    buf = random_buffers(np.random.default_rng(0), HW, scale_taps=8)
    res = run_program(HW, buf, [insn, isa.Finish()], max_cycles=400)
    assert not res.finished and res.error_code == E.SRAM_RANGE


def test_last_inp_word_is_in_range() -> None:
    buf = random_buffers(np.random.default_rng(1), HW, scale_taps=8)
    conv = _conv(inp_base=99 - 2 - 4, in_w=4, out_w=2, kw=2, kh=2)  # reads up to word 99
    pool = _pool(inp_base=99 - 1 - 4, out_base=8, in_w=4, kh=2, kw=2)
    res = run_program(HW, buf, [conv, pool, isa.Finish()], max_cycles=400)
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out[0:2], conv_reference(buf, conv))
    np.testing.assert_array_equal(res.out[8:9], pool_reference(buf, pool))
