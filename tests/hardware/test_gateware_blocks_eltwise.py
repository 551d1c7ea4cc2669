"""ADD (adder module) and UPSAMPLE (segmentation block) on the compute unit (Amaranth simulator,
C = 4): bit-exact against the golden ops on random data, mixed with CONV/POOL, and BLOCK_ABSENT
when the block was not generated."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from test_gateware_compute_harness import OUT_FILL, pool_reference, random_buffers, run_program, small_hw

HW = dataclasses.replace(small_hw(c=4, inp_depth=512, wgt_depth=16, prm_depth=8, out_depth=256),
                         adder=True, upsample=True)


def add_reference(inp: np.ndarray, insn: isa.Add) -> np.ndarray:
    xa = inp[insn.inp_a:insn.inp_a + insn.count]
    xb = inp[insn.inp_b:insn.inp_b + insn.count]
    return ops.add(xa, insn.za, insn.ma, xb, insn.zb, insn.mb, insn.shift, insn.zp_out, insn.act_min,
                   insn.act_max)


def upsample_reference(inp: np.ndarray, insn: isa.Upsample) -> np.ndarray:
    """The tile as an NCHW tensor (planes x lanes), upsampled by the golden op, back to OUT words."""
    in_h = -(-insn.out_h // insn.scale_y)
    in_w = -(-insn.out_w // insn.scale_x)
    planes = []
    for z in range(insn.z_size):
        base = insn.inp_base + z * insn.in_plane
        rows = [inp[base + y * insn.in_w:base + y * insn.in_w + in_w] for y in range(in_h)]
        x = np.stack(rows).transpose(2, 0, 1)[None]  # (1, C, in_h, in_w)
        y = ops.upsample_nearest(x, (insn.scale_y, insn.scale_x))[0, :, :insn.out_h, :insn.out_w]
        planes.append(y.transpose(1, 2, 0).reshape(-1, inp.shape[1]))
    return np.concatenate(planes)


def _random_add(rng: np.random.Generator, out_base: int) -> isa.Add:
    count = int(rng.integers(1, 20))
    zp_out = int(rng.integers(-20, 21))
    relu = rng.random() < 0.4
    return isa.Add(
        inp_a=int(rng.integers(0, HW.inp_depth - count + 1)), inp_b=int(rng.integers(0, HW.inp_depth - count + 1)),
        out_base=out_base, count=count, za=int(rng.integers(-128, 128)), zb=int(rng.integers(-128, 128)),
        ma=int(rng.integers(0, 2**15)), mb=int(rng.integers(0, 2**15)), shift=int(rng.integers(10, 19)),
        zp_out=zp_out, act_min=zp_out if relu else -128, act_max=127, push_next=bool(rng.random() < 0.5))


def _random_upsample(rng: np.random.Generator, out_base: int) -> isa.Upsample:
    sy, sx = (int(v) for v in rng.integers(1, 4, size=2))
    out_h, out_w = (int(v) for v in rng.integers(1, 7, size=2))
    z = int(rng.integers(1, 3))
    in_w = -(-out_w // sx) + int(rng.integers(0, 2))
    in_plane = -(-out_h // sy) * in_w + int(rng.integers(0, 3))
    span = z * in_plane + in_w
    return isa.Upsample(inp_base=int(rng.integers(0, HW.inp_depth - span)), out_base=out_base, in_w=in_w,
                        in_plane=in_plane, out_h=out_h, out_w=out_w, scale_y=sy, scale_x=sx, z_size=z,
                        push_next=bool(rng.random() < 0.5))


def test_add_and_upsample_random_mixed_with_pool() -> None:
    rng = np.random.default_rng(61)
    buf = random_buffers(rng, HW)
    insns, base = [], 0
    for k in range(9):
        if k % 3 == 0:
            insn = _random_add(rng, base)
            n = insn.count
        elif k % 3 == 1:
            insn = _random_upsample(rng, base)
            n = insn.z_size * insn.out_h * insn.out_w
        else:
            insn = isa.Pool(inp_base=int(rng.integers(0, 100)), out_base=base, in_w=3, in_plane=9, out_h=2,
                            out_w=2, kh=2, kw=2, z_size=1, mode=isa.PoolMode.MAX)
            n = 4
        insn.validate(HW)
        insns.append((insn, n))
        base += n
    res = run_program(HW, buf, [i for i, _ in insns] + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for insn, n in insns:
        if isinstance(insn, isa.Add):
            ref = add_reference(buf.inp, insn)
        elif isinstance(insn, isa.Upsample):
            ref = upsample_reference(buf.inp, insn)
        else:
            ref = pool_reference(buf, insn)
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + n], ref, err_msg=str(insn))
    assert (res.out[base:] == OUT_FILL).all()
    assert res.c2s_pushes == sum(i.push_next for i, _ in insns)


def test_add_throughput_two_cycles_per_word() -> None:
    rng = np.random.default_rng(62)
    buf = random_buffers(rng, HW)
    insn = isa.Add(inp_a=0, inp_b=200, out_base=0, count=200, za=3, zb=-7, ma=20000, mb=9000, shift=15)
    res = run_program(HW, buf, [insn, isa.Finish()])
    np.testing.assert_array_equal(res.out[:200], add_reference(buf.inp, insn))
    assert 400 <= res.cycles <= 400 + 20


@pytest.mark.parametrize("insn, code", [
    (isa.Add(inp_a=500, inp_b=0, out_base=0, count=20), isa.ErrorCode.SRAM_RANGE),
    (isa.Add(inp_a=0, inp_b=0, out_base=250, count=20), isa.ErrorCode.SRAM_RANGE),
    (isa.Upsample(inp_base=0, out_base=200, in_w=4, in_plane=16, out_h=8, out_w=8), isa.ErrorCode.SRAM_RANGE),
    (isa.Upsample(inp_base=500, out_base=0, in_w=4, in_plane=16, out_h=8, out_w=8, scale_y=2, scale_x=2),
     isa.ErrorCode.SRAM_RANGE),
])
def test_range_errors(insn, code) -> None:
    buf = random_buffers(np.random.default_rng(63), HW)
    res = run_program(HW, buf, [insn, isa.Finish()])
    assert not res.finished and res.error_code == code


@pytest.mark.parametrize("flags, insn", [
    ({"adder": False, "upsample": True}, isa.Add(count=4)),
    ({"adder": True, "upsample": False}, isa.Upsample(out_h=2, out_w=2)),
])
def test_absent_block(flags, insn) -> None:
    hw = dataclasses.replace(HW, **flags)
    buf = random_buffers(np.random.default_rng(64), hw)
    res = run_program(hw, buf, [insn, isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.BLOCK_ABSENT
    assert (res.out == OUT_FILL).all()
