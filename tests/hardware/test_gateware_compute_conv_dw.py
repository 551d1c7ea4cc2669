"""Depthwise mode of the conv engine (CONV.dw, Amaranth simulator): random depthwise tiles
(kernel up to the processor's dw_kh x 3, strides 1..3, strips of 1..dw_rows rows, tiles whose
height is not a multiple of the strip) give the contract's result bit for bit, and the ISA
simulator's, mixed with ordinary CONVs and as partial-sum chains; a depthwise CONV the window
cannot hold stops the engine with ILLEGAL_FIELD in the RTL and in the ISA simulator."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.isasim import IllegalFieldError
from dlproc.hardware.numerics import requantize
from test_gateware_blocks_fc import isasim_out
from test_gateware_compute_harness import OUT_FILL, Buffers, conv_reference, random_buffers, run_program, small_hw


def dw_sums(buf: Buffers, insn: isa.Conv) -> np.ndarray:
    """[out_h, out_w, C] int64 sums of a depthwise CONV, written from the contract's formula:
    lane c of pixel (oy, ox) = sum over the taps of INP lane c times byte [c][3*ky + 3 - kw + kx]
    of the one WGT word."""
    c = buf.c
    acc = np.zeros((insn.out_h, insn.out_w, c), dtype=np.int64)
    word = buf.wgt[insn.wgt_base].astype(np.int64)
    for ky in range(insn.kh):
        for kx in range(insn.kw):
            w = word[:, 3 * ky + 3 - insn.kw + kx]
            for oy in range(insn.out_h):
                for ox in range(insn.out_w):
                    a = insn.inp_base + (oy * insn.stride_y + ky) * insn.in_w + ox * insn.stride_x + kx
                    acc[oy, ox] += w * buf.inp[a].astype(np.int64)
    return acc


def dw_reference(buf: Buffers, chain: list[isa.Conv]) -> np.ndarray:
    last, c = chain[-1], buf.c
    acc = buf.bias[chain[0].prm_base].astype(np.int64) + sum(dw_sums(buf, i) for i in chain)
    acc = ((acc + 2**31) % 2**32) - 2**31
    p = last.prm_base
    return requantize(acc, buf.mult[p], buf.shift[p], last.zp_out, last.act_min, last.act_max,
                      buf.mult_neg[p]).reshape(-1, c)


def random_dw(rng: np.random.Generator, hw: isa.HardwareParams, out_base: int, links: int = 1) -> list[isa.Conv]:
    kh = int(rng.integers(1, hw.dw_kh + 1))
    kw = int(rng.integers(2 if kh == 1 else 1, 4))
    sy, sx = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    rows = int(rng.integers(1, (isa.DW_COL - kh) // sy + 2))
    out_h, out_w = int(rng.integers(1, 8)), int(rng.integers(1, 6))
    in_w = (out_w - 1) * sx + kw + int(rng.integers(0, 2))
    in_h = (out_h - 1) * sy + kh
    zp, lo, hi = int(rng.integers(-20, 21)), *sorted(int(v) for v in rng.integers(-128, 128, size=2))
    chain = []
    for k in range(links):
        chain.append(isa.Conv(
            inp_base=int(rng.integers(0, hw.inp_depth - in_h * in_w + 1)), wgt_base=int(rng.integers(0, hw.wgt_depth)),
            prm_base=int(rng.integers(0, hw.prm_depth)), out_base=out_base if k == links - 1 else 0,
            in_w=in_w, in_plane=0, out_h=out_h, out_w=out_w, kh=kh, kw=kw, stride_y=sy, stride_x=sx,
            zp_out=zp, act_min=lo, act_max=hi, dw=1, dw_rows=rows,
            acc_in=int(k > 0), acc_keep=int(k < links - 1), push_next=k == links - 1))
    return chain


@pytest.mark.parametrize("c, seed", [(9, 1), (9, 2), (4, 3), (6, 4)])
def test_depthwise_tiles_equal_the_contract(c: int, seed: int) -> None:
    hw = small_hw(c=c, inp_depth=1024, wgt_depth=64, prm_depth=8, out_depth=512)
    rng = np.random.default_rng(seed)
    buf = random_buffers(rng, hw, scale_taps=9)
    chains, insns, base = [], [], 0
    for k in range(7):
        if k % 3 == 1:  # an ordinary CONV between depthwise tiles
            conv = isa.Conv(inp_base=int(rng.integers(0, 200)), wgt_base=int(rng.integers(0, 50)), prm_base=1,
                            out_base=base, in_w=4, in_plane=16, out_h=int(rng.integers(1, 4)), out_w=3, kh=2, kw=2,
                            cin_blocks=2, push_next=True)
            chains.append([conv])
        else:
            chains.append(random_dw(rng, hw, base, links=1 + (k % 3 == 2)))
        insns += chains[-1]
        base += chains[-1][-1].out_h * chains[-1][-1].out_w
    for insn in insns:
        insn.validate(hw)
    res = run_program(hw, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for chain in chains:
        last = chain[-1]
        got = res.out[last.out_base:last.out_base + last.out_h * last.out_w]
        want = dw_reference(buf, chain) if last.dw else conv_reference(buf, last)
        np.testing.assert_array_equal(got, want, err_msg=str(chain))
    assert (res.out[base:] == OUT_FILL).all()
    np.testing.assert_array_equal(isasim_out(hw, buf, insns + [isa.Finish()]), res.out)
    assert res.c2s_pushes == sum(i.push_next for i in insns)


def _timing(hw: isa.HardwareParams, ss: int):
    from dlproc.estimate.timing import TimingParams
    from dlproc.hardware.gateware.output_stage import LATENCY
    return TimingParams(c=hw.c, bus_bytes=8, clock_mhz=100.0, ddr_rate=1.0, ddr_latency=1, ddr_queue=8, max_burst=16,
                        read_credits=64, fetch_credits=32, queue_depth=4, outstanding=8, acc_stages=ss,
                        ostage_latency=LATENCY, acc_depth=256, elem_beats={})


@pytest.mark.parametrize("shape", [(6, 1, 2, 2, 2, 3, 2), (5, 3, 3, 3, 1, 1, 4), (3, 2, 1, 2, 1, 1, 2),
                                   (7, 3, 3, 3, 2, 2, 3), (1, 1, 2, 1, 1, 1, 1), (2, 2, 1, 3, 1, 1, 2)])
def test_depthwise_cycle_formulas(shape: tuple[int, ...]) -> None:
    """The walk's cycles (``costs.dw_walk``: strips, columns, the wait of a short strip's first
    column), one CONV then FINISH and the period of back-to-back tiles, exactly; the estimator's
    ConvTiming gives the same period."""
    from dlproc.estimate.engines import ConvTiming
    from dlproc.hardware.costs import dw_walk
    from dlproc.hardware.gateware.conv import acc_pipeline_stages
    from dlproc.hardware.gateware.output_stage import LATENCY

    oh, ow, kh, kw, sy, sx, rows = shape
    hw = small_hw(c=9, inp_depth=1024, wgt_depth=64, prm_depth=8, out_depth=512)
    buf = random_buffers(np.random.default_rng(1), hw, scale_taps=9)
    insn = isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=(ow - 1) * sx + kw, out_h=oh, out_w=ow,
                    kh=kh, kw=kw, stride_y=sy, stride_x=sx, dw=1, dw_rows=rows)
    insn.validate(hw)
    n, ss = oh * ow, acc_pipeline_stages(9)
    walk, last_rows = dw_walk(insn)
    one = run_program(hw, buf, [insn, isa.Finish()])
    two = run_program(hw, buf, [insn, insn, isa.Finish()])
    np.testing.assert_array_equal(one.out[:n], dw_reference(buf, [insn]))
    assert one.cycles == walk + last_rows + n + ss + LATENCY + 8
    assert two.cycles - one.cycles == walk + last_rows + ss + 1
    assert one.mac_cycles == n
    timing = ConvTiming(_timing(hw, ss))
    first, _ = timing.run(insn, 0.0)
    second, _ = timing.run(insn, timing.ready)
    assert second - first == walk + last_rows + ss + 1


def _bad_depthwise(hw: isa.HardwareParams) -> dict[str, isa.Conv]:
    ok = dict(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=8, out_h=2, out_w=2, kh=1, kw=3, dw=1, dw_rows=2)
    return {
        "two input blocks": isa.Conv(**ok | {"cin_blocks": 2, "in_plane": 32}),
        "kernel too wide": isa.Conv(**ok | {"kw": 4}),
        "kernel too tall": isa.Conv(**ok | {"kh": hw.dw_kh + 1}),
        "dilated": isa.Conv(**ok | {"dil_x": 2}),
        "one tap": isa.Conv(**ok | {"kw": 1}),
        "no rows": isa.Conv(**ok | {"dw_rows": 0}),
        "strip beyond the window": isa.Conv(**ok | {"dw_rows": isa.DW_COL + 1}),
    }


@pytest.mark.parametrize("case", sorted(_bad_depthwise(small_hw(c=4))))
def test_depthwise_the_window_cannot_hold_is_illegal(case: str) -> None:
    hw = small_hw(c=4, inp_depth=256, wgt_depth=16, prm_depth=2, out_depth=64)
    insns = [_bad_depthwise(hw)[case], isa.Finish()]
    buf = random_buffers(np.random.default_rng(1), hw)
    res = run_program(hw, buf, insns)
    assert not res.finished and res.error_code == isa.ErrorCode.ILLEGAL_FIELD
    assert (res.out == OUT_FILL).all()
    with pytest.raises(IllegalFieldError, match="depthwise"):
        isasim_out(hw, buf, insns)
    with pytest.raises(isa.InstructionError, match="depthwise"):
        insns[0].validate(hw)
