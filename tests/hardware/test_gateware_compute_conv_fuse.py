"""Results to INP (CONV.to_inp) and wait_writes (Amaranth simulator of the compute unit):
depthwise CONVs write their tiles into INP, a pointwise CONV with wait_writes reads them there --
the depthwise -> pointwise fusion without a DRAM round trip -- bit for bit as the ISA simulator,
which also refuses the read without wait_writes; the first fused read comes after the last INP
write; INP's depth (not OUT's) bounds a to_inp CONV's words."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.isasim import SramRangeError, WriteHazardError
from test_gateware_compute_harness import OUT_FILL, isasim_machine, random_buffers, run_program, small_hw

HW = small_hw(c=9, inp_depth=1024, wgt_depth=64, prm_depth=8, out_depth=128)


isasim = isasim_machine


def fused_pair(rng: np.random.Generator, blocks: int, fuse_at: int, wait: bool = True) -> list[isa.Instruction]:
    """Depthwise 3x3 CONVs over ``blocks`` channel blocks of one tile, results to INP at
    ``fuse_at`` (block-major planes), then pointwise CONVs over all blocks into OUT."""
    oh, ow = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    in_w, in_h = ow + 2, oh + 2
    plane = in_h * in_w + int(rng.integers(0, 3))
    px = oh * ow
    insns: list[isa.Instruction] = []
    for b in range(blocks):
        insns.append(isa.Conv(inp_base=b * plane, wgt_base=b, prm_base=b % HW.prm_depth, out_base=fuse_at + b * px,
                              in_w=in_w, in_plane=plane, out_h=oh, out_w=ow, kh=3, kw=3, zp_out=int(rng.integers(-9, 9)),
                              act_min=0, dw=1, dw_rows=int(rng.integers(1, 7)), to_inp=1))
    for ob in range(2):
        insns.append(isa.Conv(inp_base=fuse_at, wgt_base=16 + ob * blocks, prm_base=(5 + ob) % HW.prm_depth,
                              out_base=ob * px, in_w=ow, in_plane=px, out_h=oh, out_w=ow, kh=1, kw=1,
                              cin_blocks=blocks, wait_writes=int(wait and ob == 0), push_next=True))
    return insns


@pytest.mark.parametrize("seed", range(3))
def test_depthwise_results_to_inp_feed_a_pointwise_conv(seed: int) -> None:
    rng = np.random.default_rng(40 + seed)
    buf = random_buffers(rng, HW, scale_taps=9)
    fuse_at = 300 + 200 * seed  # beyond OUT's 128 words for seeds 1, 2: INP's depth bounds them
    insns = fused_pair(rng, 3, fuse_at)
    for insn in insns:
        insn.validate(HW)
    ref = isasim(HW, buf, insns + [isa.Finish()])
    res = run_program(HW, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out, ref.out)
    np.testing.assert_array_equal(res.inp, ref.inp)
    px = insns[0].out_h * insns[0].out_w
    assert not np.array_equal(res.inp[fuse_at:fuse_at + 3 * px], buf.inp[fuse_at:fuse_at + 3 * px])
    assert (res.out[2 * px:] == OUT_FILL).all()  # the depthwise results did not go to OUT
    # wait_writes: the pointwise CONV's first read of the fused words follows their last write.
    writes = [t for t, kind, a in res.events if kind == "inp_write"]
    reads = [t for t, kind, a in res.events if kind == "inp_read" and fuse_at <= a < fuse_at + 3 * px]
    assert len(writes) == 3 * px and reads and min(reads) > max(writes)


def test_reading_results_without_wait_writes_is_refused() -> None:
    rng = np.random.default_rng(7)
    buf = random_buffers(rng, HW, scale_taps=9)
    with pytest.raises(WriteHazardError, match="wait_writes"):
        isasim(HW, buf, fused_pair(rng, 2, 400, wait=False) + [isa.Finish()])


def test_results_beyond_inp_stop_with_sram_range() -> None:
    rng = np.random.default_rng(8)
    buf = random_buffers(rng, HW, scale_taps=9)
    bad = fused_pair(rng, 1, HW.inp_depth - 2)[:1]
    with pytest.raises(isa.InstructionError):
        bad[0].validate(HW)
    with pytest.raises(SramRangeError):
        isasim(HW, buf, bad + [isa.Finish()])
    res = run_program(HW, buf, bad + [isa.Finish()])
    assert res.error_code == isa.ErrorCode.SRAM_RANGE
    np.testing.assert_array_equal(res.inp[:HW.inp_depth - 2], buf.inp[:HW.inp_depth - 2])
