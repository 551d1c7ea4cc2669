"""POOL on the compute unit (Amaranth simulator, C = 4): max, average and global average pooling,
bit-exact against the contract formula, mixed with CONV in one program; the column-reuse paths
of the engine (strides 1..3, kw above, equal to and below the stride, kw = 1, several planes,
rows long enough to wrap the 64-entry column buffer) with their timing against the model."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.hardware.costs import pool_plane_cycles
from test_gateware_compute_harness import (
    OUT_FILL,
    conv_reference,
    pool_reference,
    random_buffers,
    run_program,
    small_hw,
)

HW = small_hw(c=4, inp_depth=1024, wgt_depth=64, prm_depth=8, out_depth=256)


def _random_pool(rng: np.random.Generator, out_base: int, mode: int) -> isa.Pool:
    kh, kw = (int(v) for v in rng.integers(1, 5, size=2))
    sy, sx = (int(v) for v in rng.integers(1, 4, size=2))
    out_h, out_w = (int(v) for v in rng.integers(1, 4, size=2))
    z_size = int(rng.integers(1, 4))
    in_w = (out_w - 1) * sx + kw + int(rng.integers(0, 2))
    in_h = (out_h - 1) * sy + kh
    in_plane = in_h * in_w + int(rng.integers(0, 3))
    span = (z_size - 1) * in_plane + in_h * in_w
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, size=2))
    if rng.random() < 0.4:
        lo, hi = -128, 127
    return isa.Pool(
        inp_base=int(rng.integers(0, HW.inp_depth - span + 1)), out_base=out_base,
        prm_base=int(rng.integers(0, HW.prm_depth - z_size + 1)), in_w=in_w, in_plane=in_plane,
        out_h=out_h, out_w=out_w, kh=kh, kw=kw, stride_y=sy, stride_x=sx, z_size=z_size, mode=mode,
        zp_in=int(rng.integers(-30, 31)), zp_out=int(rng.integers(-30, 31)), act_min=lo, act_max=hi,
        push_next=bool(rng.random() < 0.5),
    )


def _pool_buffers(rng: np.random.Generator):
    buf = random_buffers(rng, HW)
    # Average pooling scales: about 1/(window size), M/2**S with S around 18.
    buf.shift[:] = rng.integers(16, 21, size=buf.shift.shape)
    buf.mult[:] = (2.0 ** buf.shift.astype(np.float64) / rng.integers(1, 17, size=buf.mult.shape)).clip(
        1, 2**15 - 1).astype(np.uint16)
    return buf


def test_pool_max_and_avg_random() -> None:
    rng = np.random.default_rng(21)
    buf = _pool_buffers(rng)
    insns, base = [], 0
    for k in range(8):
        insn = _random_pool(rng, base, mode=k % 2)
        insn.validate(HW)
        insns.append(insn)
        base += insn.z_size * insn.out_h * insn.out_w
    res = run_program(HW, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for insn in insns:
        n = insn.z_size * insn.out_h * insn.out_w
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + n], pool_reference(buf, insn),
                                      err_msg=str(insn))
    assert (res.out[base:] == OUT_FILL).all()
    assert res.c2s_pushes == sum(i.push_next for i in insns)


def test_global_average_pool() -> None:
    """Global average pooling = AVG with the window over the whole 7 x 7 plane, 3 planes."""
    rng = np.random.default_rng(22)
    buf = _pool_buffers(rng)
    buf.mult[:] = round(2**20 / 49)
    buf.shift[:] = 20
    insn = isa.Pool(inp_base=5, out_base=7, prm_base=1, in_w=7, in_plane=49, out_h=1, out_w=1, kh=7,
                    kw=7, z_size=3, mode=isa.PoolMode.AVG, zp_in=-4, zp_out=3)
    res = run_program(HW, buf, [insn, isa.Finish()])
    ref = pool_reference(buf, insn)
    np.testing.assert_array_equal(res.out[7:10], ref)
    # The same value computed independently: mean of each lane with round half up.
    x = buf.inp[5:5 + 3 * 49].reshape(3, 49, 4).astype(np.int64)
    s = x.sum(axis=1) + 49 * 4
    exact = np.floor((s * round(2**20 / 49) + 2**19) / 2**20).astype(np.int64) + 3
    np.testing.assert_array_equal(res.out[7:10], np.clip(exact, -128, 127))
    # One window word per cycle: 3 planes x 49 cycles plus a few per plane and the pipeline.
    assert res.cycles <= 3 * (49 + 10) + 20
    writes = [t for t, kind, _ in res.events if kind == "write"]
    assert np.diff(writes).tolist() == [pool_plane_cycles(insn)] * 2


# (kh, kw, sy, sx, out_h, out_w, z_size): the column-reuse cases.
_REUSE_CASES = [
    (3, 3, 1, 1, 4, 5, 2),  # stride 1: one new column per output
    (3, 3, 2, 2, 3, 4, 2),  # stride 2, kw > stride
    (2, 3, 3, 3, 2, 4, 1),  # kw = stride: no column shared
    (3, 2, 1, 3, 3, 4, 2),  # kw < stride: skipped columns
    (3, 1, 2, 2, 3, 5, 1),  # kw = 1
    (1, 4, 1, 1, 2, 6, 3),  # kh = 1, kw > kh*stride: the window walk is the bottleneck
    (1, 1, 1, 1, 2, 3, 2),  # 1x1
    (2, 5, 1, 3, 2, 3, 1),  # stride 3, kw > stride
    (2, 2, 1, 1, 1, 70, 1),  # a row of 71 columns: the column buffer index wraps
    (1, 3, 1, 1, 1, 80, 2),  # the column walk runs 61 columns ahead and waits for buffer room
]


@pytest.mark.parametrize("mode", [isa.PoolMode.MAX, isa.PoolMode.AVG])
def test_pool_column_reuse(mode: isa.PoolMode) -> None:
    """Every reuse case bit-exact; each plane takes exactly ``pool_plane_cycles`` (the time
    between the last writes of consecutive planes), and fewer cycles than kh*kw per output."""
    rng = np.random.default_rng(24 + int(mode))
    hw = small_hw(c=4, inp_depth=1024, prm_depth=8, out_depth=512)
    buf = random_buffers(rng, hw)
    buf.shift[:] = 18
    buf.mult[:] = rng.integers(2**12, 2**15, size=buf.mult.shape)
    insns, base = [], 0
    for kh, kw, sy, sx, oh, ow, zs in _REUSE_CASES:
        in_w = (ow - 1) * sx + kw + 1
        in_plane = ((oh - 1) * sy + kh) * in_w + 1
        insn = isa.Pool(inp_base=int(rng.integers(0, 16)), out_base=base, prm_base=int(rng.integers(0, 8 - zs + 1)),
                        in_w=in_w, in_plane=in_plane, out_h=oh, out_w=ow, kh=kh, kw=kw, stride_y=sy, stride_x=sx,
                        z_size=zs, mode=mode, zp_in=int(rng.integers(-40, 41)), zp_out=int(rng.integers(-10, 11)))
        insn.validate(hw)
        insns.append(insn)
        base += zs * oh * ow
    for insn in insns:
        res = run_program(hw, buf, [insn, isa.Finish()])
        assert res.finished and res.error_code == 0, str(insn)
        n = insn.z_size * insn.out_h * insn.out_w
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + n], pool_reference(buf, insn),
                                      err_msg=str(insn))
        writes = [t for t, kind, _ in res.events if kind == "write"]
        assert len(writes) == n
        per_plane = insn.out_h * insn.out_w
        ends = writes[per_plane - 1::per_plane]
        assert np.diff(ends).tolist() == [pool_plane_cycles(insn)] * (insn.z_size - 1), str(insn)
        steady = max(insn.kh * min(insn.stride_x, insn.kw), insn.kw)  # cycles per further output of a row
        if steady < insn.kh * insn.kw and insn.out_w > 2:
            assert writes[per_plane - 1] - writes[0] < (per_plane - 1) * insn.kh * insn.kw, str(insn)


def test_pool_then_conv_then_pool() -> None:
    """The sequencer hands the shared INP port and output stage over between the engines."""
    rng = np.random.default_rng(23)
    buf = _pool_buffers(rng)
    p1 = isa.Pool(inp_base=0, out_base=0, prm_base=0, in_w=6, in_plane=36, out_h=3, out_w=3, kh=2,
                  kw=2, stride_y=2, stride_x=2, z_size=2, mode=isa.PoolMode.MAX, push_next=True)
    cv = isa.Conv(inp_base=100, wgt_base=3, prm_base=4, out_base=18, in_w=5, in_plane=25, out_h=3,
                  out_w=3, kh=3, kw=3, cin_blocks=1, push_next=True)
    p2 = isa.Pool(inp_base=200, out_base=27, prm_base=5, in_w=4, in_plane=16, out_h=2, out_w=2, kh=3,
                  kw=3, z_size=1, mode=isa.PoolMode.AVG, zp_in=7, push_next=True)
    cv2 = isa.Conv(inp_base=300, wgt_base=20, prm_base=6, out_base=31, in_w=3, in_plane=9, out_h=1,
                   out_w=1, kh=3, kw=3, cin_blocks=1, push_next=True)
    res = run_program(HW, buf, [p1, cv, p2, cv2, isa.Finish()])
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out[0:18], pool_reference(buf, p1))
    np.testing.assert_array_equal(res.out[18:27], conv_reference(buf, cv))
    np.testing.assert_array_equal(res.out[27:31], pool_reference(buf, p2))
    np.testing.assert_array_equal(res.out[31:32], conv_reference(buf, cv2))
    assert res.c2s_pushes == 4
