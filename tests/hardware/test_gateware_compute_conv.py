"""CONV on the compute unit (Amaranth simulator, C = 4 and C = 2): bit-exact against the contract
formula on random shapes, back-to-back tiles (ping-pong accumulators), 1 x 1 output tiles, cycle
counts (the MAC array must be ~100 % busy on a long sweep)."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.hardware.gateware.conv import acc_pipeline_stages
from dlproc.hardware.gateware.output_stage import LATENCY
from test_gateware_compute_harness import (
    OUT_FILL,
    conv_reference,
    random_buffers,
    run_program,
    small_hw,
)


def _random_conv(rng: np.random.Generator, hw: isa.HardwareParams, out_base: int,
                 tiny: bool = False) -> isa.Conv:
    kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
    sy, sx = (int(v) for v in rng.integers(1, 4, size=2))
    dy, dx = (int(v) for v in rng.integers(1, 3, size=2))
    cin_blocks = int(rng.integers(1, 4))
    out_h, out_w = (1, 1) if tiny else (int(v) for v in rng.integers(1, 5, size=2))
    in_w = (out_w - 1) * sx + (kw - 1) * dx + 1 + int(rng.integers(0, 3))
    in_h = (out_h - 1) * sy + (kh - 1) * dy + 1
    in_plane = in_h * in_w + int(rng.integers(0, 4))
    span = (cin_blocks - 1) * in_plane + (in_h - 1) * in_w + in_w
    taps = cin_blocks * kh * kw
    act_min, act_max = sorted(int(v) for v in rng.integers(-128, 128, size=2))
    if rng.random() < 0.5:
        act_min, act_max = -128, 127
    return isa.Conv(
        inp_base=int(rng.integers(0, hw.inp_depth - span + 1)),
        wgt_base=int(rng.integers(0, hw.wgt_depth - taps + 1)),
        prm_base=int(rng.integers(0, hw.prm_depth)),
        out_base=out_base, in_w=in_w, in_plane=in_plane, out_h=out_h, out_w=out_w,
        kh=kh, kw=kw, stride_y=sy, stride_x=sx, dil_y=dy, dil_x=dx, cin_blocks=cin_blocks,
        zp_out=int(rng.integers(-20, 21)), act_min=act_min, act_max=act_max,
        push_next=bool(rng.random() < 0.5), push_prev=bool(rng.random() < 0.5),
    )


def _check_program(hw: isa.HardwareParams, seed: int, n: int, tiny_every: int = 3) -> None:
    rng = np.random.default_rng(seed)
    buf = random_buffers(rng, hw, scale_taps=20)
    insns, base = [], 0
    for k in range(n):
        insn = _random_conv(rng, hw, base, tiny=(k % tiny_every == tiny_every - 1))
        insn.validate(hw)
        insns.append(insn)
        base += insn.out_h * insn.out_w
    res = run_program(hw, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for insn in insns:
        got = res.out[insn.out_base:insn.out_base + insn.out_h * insn.out_w]
        np.testing.assert_array_equal(got, conv_reference(buf, insn), err_msg=str(insn))
    assert (res.out[base:] == OUT_FILL).all()  # nothing written beyond the tiles
    assert res.c2l_pushes == sum(i.push_prev for i in insns)
    assert res.c2s_pushes == sum(i.push_next for i in insns)
    macs = sum(i.out_h * i.out_w * i.cin_blocks * i.kh * i.kw for i in insns)
    assert res.mac_cycles == macs


@pytest.mark.parametrize("seed", [1, 2])
def test_conv_random_shapes_c4(seed: int) -> None:
    hw = small_hw(c=4, inp_depth=2048, wgt_depth=256, prm_depth=8, out_depth=256)
    _check_program(hw, seed, n=7)


def test_conv_random_shapes_c2() -> None:
    hw = small_hw(c=2, inp_depth=2048, wgt_depth=256, prm_depth=8, out_depth=256)
    _check_program(hw, 7, n=8, tiny_every=2)


def test_conv_single_tap_single_pixel_back_to_back() -> None:
    """T = 1, N = 1 tiles back to back: the RMW, bank and descriptor hand-overs at their tightest."""
    hw = small_hw(c=4, inp_depth=64, wgt_depth=16, prm_depth=8, out_depth=32)
    rng = np.random.default_rng(5)
    buf = random_buffers(rng, hw, scale_taps=1)
    insns = [isa.Conv(inp_base=k, wgt_base=k % 16, prm_base=k % 8, out_base=k, in_w=1, in_plane=1,
                      zp_out=k - 6, push_next=True) for k in range(12)]
    res = run_program(hw, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for insn in insns:
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + 1], conv_reference(buf, insn))
    assert res.c2s_pushes == 12


def test_conv_full_int32_wrap() -> None:
    """Accumulators wrap modulo 2**32 like the contract says (bias near INT32_MAX)."""
    hw = small_hw(c=2, inp_depth=64, wgt_depth=64, prm_depth=2, out_depth=16)
    rng = np.random.default_rng(9)
    buf = random_buffers(rng, hw)
    buf.inp[:] = 127
    buf.wgt[:] = 127
    buf.bias[:] = 2**31 - 100
    buf.mult[:] = 1
    buf.mult_neg[:] = 1
    buf.shift[:] = 24  # keeps the wrapped (negative) values distinguishable from saturation
    insn = isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=4, in_plane=16, out_h=2,
                    out_w=2, kh=3, kw=3, cin_blocks=2)
    res = run_program(hw, buf, [insn, isa.Finish()])
    ref = conv_reference(buf, insn)
    assert (ref < 0).all()  # the reference did wrap
    np.testing.assert_array_equal(res.out[:4], ref)


def test_conv_cycles_long_sweep_is_fully_busy() -> None:
    """Two back-to-back 3 x 3 tiles of 8 x 8 pixels: the MAC array is busy in all but a constant
    number of cycles (the second tile's accumulation hides the first tile's drain)."""
    hw = small_hw(c=4, inp_depth=512, wgt_depth=64, prm_depth=2, out_depth=256)
    rng = np.random.default_rng(3)
    buf = random_buffers(rng, hw, scale_taps=18)
    insns = [isa.Conv(inp_base=0, wgt_base=18 * k, prm_base=k, out_base=64 * k, in_w=10, in_plane=100,
                      out_h=8, out_w=8, kh=3, kw=3, cin_blocks=2) for k in range(2)]
    res = run_program(hw, buf, insns + [isa.Finish()])
    assert res.finished
    for insn in insns:
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + 64], conv_reference(buf, insn))
    taps, n = 18, 64
    mac_cycles = 2 * taps * n
    assert res.mac_cycles == mac_cycles
    # Per CONV: 4 cycles of set-up; after the last one the pipeline (Ss), the drain of the last
    # tile (N pixels plus the ACC read) and the output stage; FINISH adds two sequencer cycles.
    overhead = 2 * 4 + acc_pipeline_stages(4) + 1 + n + LATENCY + 4
    assert res.cycles <= mac_cycles + overhead
    assert res.cycles <= mac_cycles * 1.05 + n + 20


def test_conv_short_tile_period() -> None:
    """A tap of a tile with N < 3 pixels takes 3 cycles (weight prefetch), N >= 3 takes N."""
    hw = small_hw(c=2, inp_depth=64, wgt_depth=64, prm_depth=2, out_depth=16)
    rng = np.random.default_rng(4)
    buf = random_buffers(rng, hw)
    cycles = {}
    for n in (1, 2, 3, 4):
        insn = isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=4, in_plane=3,
                        out_h=1, out_w=n, kh=1, kw=1, cin_blocks=20)
        insn.validate(hw)
        res = run_program(hw, buf, [insn, isa.Finish()])
        np.testing.assert_array_equal(res.out[:n], conv_reference(buf, insn))
        # Every tap but the last takes max(N, 3) cycles, the last one N; the drain takes N.
        cycles[n] = res.cycles - (19 * max(n, 3) + n) - n
    assert cycles[1] == cycles[2] == cycles[3] == cycles[4]


def test_conv_tile_hand_over_mixed_sizes() -> None:
    """Large and small tiles, single- and multi-tap, back to back: the drain of one tile overlaps
    the first tap of the next, later taps wait for the drain, descriptor slots are reused only
    when their drain is over."""
    hw = small_hw(c=2, inp_depth=256, wgt_depth=64, prm_depth=4, out_depth=128)
    rng = np.random.default_rng(11)
    buf = random_buffers(rng, hw, scale_taps=4)
    shapes = [  # (out_h, out_w, kh, kw, cin_blocks)
        (4, 4, 1, 2, 1), (1, 1, 1, 1, 1), (1, 4, 1, 1, 1), (1, 2, 3, 1, 1), (4, 4, 1, 1, 1),
        (1, 1, 1, 1, 1), (2, 2, 1, 1, 2), (1, 1, 1, 1, 1), (1, 1, 2, 2, 1), (3, 5, 1, 1, 1),
    ]
    insns, base = [], 0
    for k, (oh, ow, kh, kw, cb) in enumerate(shapes):
        insn = isa.Conv(inp_base=7 * k, wgt_base=3 * k, prm_base=k % 4, out_base=base, in_w=6,
                        in_plane=30, out_h=oh, out_w=ow, kh=kh, kw=kw, cin_blocks=cb, zp_out=k,
                        push_next=True)
        insn.validate(hw)
        insns.append(insn)
        base += oh * ow
    res = run_program(hw, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for insn in insns:
        n = insn.out_h * insn.out_w
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + n], conv_reference(buf, insn),
                                      err_msg=str(insn))
    assert res.c2s_pushes == len(insns)


def test_conv_cycle_formulas() -> None:
    """The cycle counts documented in dlproc.hardware.gateware.conv, exactly (C = 5: an odd adder tree
    with the same pipeline depth as C = 8)."""
    c = 5
    hw = small_hw(c=c, inp_depth=256, wgt_depth=16, prm_depth=2, out_depth=64)
    buf = random_buffers(np.random.default_rng(12), hw, scale_taps=4)
    ss = acc_pipeline_stages(c)
    assert ss == acc_pipeline_stages(8) == 5
    for taps, n in ((1, 1), (3, 2), (4, 8)):
        insn = isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=n, in_plane=n, out_h=1,
                        out_w=n, kh=1, kw=1, cin_blocks=taps)
        res = run_program(hw, buf, [insn, insn, isa.Finish()])
        np.testing.assert_array_equal(res.out[:n], conv_reference(buf, insn))
        sweep = (taps - 1) * max(n, 3) + n
        single = sweep + n + ss + LATENCY + 8  # one CONV then FINISH
        period = sweep + ss + 1  # each further back-to-back CONV
        assert res.cycles == single + period
        assert res.mac_cycles == 2 * taps * n
        first_tile_done = [cyc for cyc, kind, _ in res.events if kind == "write"][n - 1]
        assert first_tile_done == single - 2  # FINISH sees the last write two cycles later


def test_conv_layer_against_golden_conv2d() -> None:
    """A real layer laid out as the contract says (padded planes holding zp_in, WGT [co][ci] words
    in (cb, ky, kx) order, bias with -zp_in*sum(w) folded in) equals dlproc.targets.golden.ops.conv2d +
    requantize."""
    from dlproc.targets.golden.ops import conv2d, fold_zero_point
    from dlproc.hardware.numerics import requantize

    c, cin, h, w_, k, stride, pad, dil, zp_in = 4, 8, 7, 6, 3, 2, 1, 1, -5
    rng = np.random.default_rng(31)
    x = rng.integers(-128, 128, size=(1, cin, h, w_)).astype(np.int8)
    wt = rng.integers(-128, 128, size=(c, cin, k, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, size=c).astype(np.int32)
    acc = conv2d(x, wt, bias, stride=stride, pads=pad, dilation=dil, zp_in=zp_in)[0]  # (c, ho, wo)
    ho, wo = acc.shape[1:]

    hw = small_hw(c=c, inp_depth=256, wgt_depth=32, prm_depth=2, out_depth=64)
    buf = random_buffers(rng, hw)
    hp, wp = h + 2 * pad, w_ + 2 * pad
    cin_blocks = cin // c
    padded = np.full((cin, hp, wp), zp_in, dtype=np.int8)
    padded[:, pad:pad + h, pad:pad + w_] = x[0]
    # INP word (cb, y, x) = channels cb*C .. cb*C+C-1 of padded pixel (y, x).
    buf.inp[:cin_blocks * hp * wp] = padded.reshape(cin_blocks, c, hp, wp).transpose(0, 2, 3, 1).reshape(-1, c)
    # WGT word (cb, ky, kx) = [co][ci] = wt[co, cb*C + ci, ky, kx].
    taps = wt.reshape(c, cin_blocks, c, k, k).transpose(1, 3, 4, 0, 2).reshape(-1, c, c)
    buf.wgt[:len(taps)] = taps
    buf.bias[0] = fold_zero_point(bias, wt, zp_in)
    buf.mult[0] = [20000, 17000, 30000, 25000]
    buf.mult_neg[0] = buf.mult[0]
    buf.shift[0] = 26
    insn = isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=wp, in_plane=hp * wp, out_h=ho,
                    out_w=wo, kh=k, kw=k, stride_y=stride, stride_x=stride, dil_y=dil, dil_x=dil,
                    cin_blocks=cin_blocks, zp_out=3, act_min=3, act_max=127)  # fused ReLU
    insn.validate(hw)
    res = run_program(hw, buf, [insn, isa.Finish()])
    golden = requantize(acc, buf.mult[0][:, None, None], buf.shift[0][:, None, None], 3, 3, 127)
    got = res.out[:ho * wo].reshape(ho, wo, c).transpose(2, 0, 1)
    np.testing.assert_array_equal(got, golden)
    assert len(np.unique(got)) > 10 and (got < 127).all()  # outputs inside int8, not saturated
