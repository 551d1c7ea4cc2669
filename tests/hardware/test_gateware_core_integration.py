"""End to end through DlprocTop: LOAD -> CONV/POOL -> STORE with tokens, bit-exact against NumPy.

This exercises the core's wiring to the compute unit (INP/WGT/PRM read ports, OUT write port,
the load<->compute and compute<->store tokens, FINISH/DONE) on the small configuration, with the
reference computed directly from the contract's formulas and dlproc.hardware.numerics.requantize.
"""

from __future__ import annotations

import numpy as np

from dlproc.hardware import isa
from dlproc.hardware.numerics import requantize

from test_gateware_core_support import Case, run_batch, small_hw

C = 4


def test_conv3x3_padded_tile_end_to_end():
    hw = small_hw()
    rng = np.random.default_rng(11)
    h = w = 4
    x = rng.integers(-128, 128, size=(C, h, w), dtype=np.int64)  # one channel block
    wt = rng.integers(-128, 128, size=(C, C, 3, 3), dtype=np.int64)  # [co][ci][ky][kx]
    bias = rng.integers(-5000, 5000, size=C)
    mult = rng.integers(1 << 13, 1 << 15, size=C)
    mult_neg = rng.integers(0, 1 << 15, size=C)
    shift = rng.integers(24, 28, size=C)  # keeps most results inside the clamp range
    zp_in, zp_out, act_min, act_max = 3, -2, -100, 120

    # DRAM images: INP elements (pixel, C channels) at pitch 8; WGT taps (C*C) at pitch 16;
    # PRM one element of 9*C bytes at pitch 40.
    inp = bytearray()
    for yy in range(h):
        for xx in range(w):
            inp += bytes((x[:, yy, xx] & 0xFF).tolist()) + bytes(hw.pitch("INP") - C)
    wgt = bytearray()
    for ky in range(3):
        for kx in range(3):
            tap = bytes((wt[co, ci, ky, kx] & 0xFF for co in range(C) for ci in range(C)))
            wgt += tap + bytes(hw.pitch("WGT") - C * C)
    prm = bytearray()
    for co in range(C):
        prm += int(bias[co]).to_bytes(4, "little", signed=True) + int(mult[co]).to_bytes(2, "little")
        prm += int(mult_neg[co]).to_bytes(2, "little") + int(shift[co]).to_bytes(1, "little")
    prm += bytes(hw.pitch("PRM") - len(prm))

    # The compiler folds -zp_in * sum(w) into the bias; padding inserts zp_in.
    bias_folded = bias - zp_in * wt.sum(axis=(1, 2, 3))
    prm_folded = bytearray(prm)
    for co in range(C):
        prm_folded[9 * co : 9 * co + 4] = int(bias_folded[co]).to_bytes(4, "little", signed=True)

    prog = isa.encode_program([
        isa.Load(buf=isa.Buf.INP, dram_addr=0x400, x_size=w, y_size=h, y_stride=w,
                 pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, pad_value=zp_in),
        isa.Load(buf=isa.Buf.WGT, dram_addr=0x600, x_size=9),
        isa.Load(buf=isa.Buf.PRM, dram_addr=0x700, x_size=1, push_next=True),
        isa.Conv(in_w=w + 2, in_plane=(h + 2) * (w + 2), out_h=h, out_w=w, kh=3, kw=3,
                 zp_out=zp_out, act_min=act_min, act_max=act_max, pop_prev=True, push_next=True),
        isa.Store(dram_addr=0x800, x_size=w * h, pop_prev=True),
        isa.Finish(),
    ])
    case = Case(prog, preload={0x400: bytes(inp), 0x600: bytes(wgt), 0x700: bytes(prm_folded)},
                max_cycles=4000, wait_prob=0.2)
    r = run_batch(hw, {"conv": case})["conv"]
    assert r.status == {"busy": 0, "done": 1, "error": 0, "error_code": 0}

    # Reference: acc = bias + sum w * (x_padded - zp_in) written as bias_folded + sum w * x_padded.
    xp = np.full((C, h + 2, w + 2), zp_in, dtype=np.int64)
    xp[:, 1:-1, 1:-1] = x
    acc = np.zeros((C, h, w), dtype=np.int64)
    for ky in range(3):
        for kx in range(3):
            acc += np.einsum("oc,chw->ohw", wt[:, :, ky, kx], xp[:, ky : ky + h, kx : kx + w])
    acc += bias_folded[:, None, None]
    acc = ((acc + 2**31) % 2**32) - 2**31
    expected = requantize(acc, mult[:, None, None], shift[:, None, None], zp_out, act_min, act_max,
                          mult_neg[:, None, None])
    got = np.zeros((C, h, w), dtype=np.int64)
    for p in range(h * w):
        off = 0x800 + p * hw.pitch("OUT")
        got[:, p // w, p % w] = np.frombuffer(bytes(r.mem.data[off : off + C]), dtype=np.int8)
    assert np.array_equal(got, expected.astype(np.int64))


def test_maxpool_two_planes_end_to_end():
    hw = small_hw()
    rng = np.random.default_rng(12)
    planes, h, w = 2, 4, 6
    x = rng.integers(-128, 128, size=(planes, C, h, w), dtype=np.int64)
    inp = bytearray()
    for z in range(planes):
        for yy in range(h):
            for xx in range(w):
                inp += bytes((x[z, :, yy, xx] & 0xFF).tolist()) + bytes(hw.pitch("INP") - C)
    prog = isa.encode_program([
        isa.Load(buf=isa.Buf.INP, dram_addr=0x400, x_size=w, y_size=h, z_size=planes, y_stride=w,
                 z_stride=w * h, push_next=True),
        isa.Pool(in_w=w, in_plane=w * h, out_h=2, out_w=3, kh=2, kw=2, stride_y=2, stride_x=2,
                 z_size=planes, mode=isa.PoolMode.MAX, pop_prev=True, push_next=True),
        isa.Store(dram_addr=0x800, x_size=3, y_size=2, z_size=planes, y_stride=3, z_stride=6,
                  pop_prev=True),
        isa.Finish(),
    ])
    r = run_batch(hw, {"pool": Case(prog, preload={0x400: bytes(inp)}, wait_prob=0.2)})["pool"]
    assert r.status == {"busy": 0, "done": 1, "error": 0, "error_code": 0}
    expected = x.reshape(planes, C, 2, 2, 3, 2).max(axis=(3, 5))
    got = np.zeros_like(expected)
    for z in range(planes):
        for p in range(6):
            off = 0x800 + (z * 6 + p) * hw.pitch("OUT")
            got[z, :, p // 3, p % 3] = np.frombuffer(bytes(r.mem.data[off : off + C]), dtype=np.int8)
    assert np.array_equal(got, expected)
