"""cocotb bench: ``dlproc.hardware.gateware.pool.PoolEngine`` against ``dlproc.targets.golden.ops`` maxpool, avgpool and
global_avgpool.

Each case is a random pooling layer -- mode (MAX, AVG with count_include_pad, global AVG), window,
stride, asymmetric padding (held in INP as LOAD inserts it: -128 for MAX, zp_in for AVG), zero
points, per-channel M/S (random M_neg in PRM, which AVG must ignore), fused clamps -- laid out in
INP with random gaps and garbage, split into random, unequal output tiles and channel-block ranges issued
as POOLs in random order with random gaps. Every OUT word must be written once, bit-exact with the
golden model, with the last-word and push flags on each POOL's last word only.
Parameters: ``DLPROC_BENCH_HW``, ``DLPROC_BENCH_SEED``, ``DLPROC_BENCH_CASES``.
"""

from __future__ import annotations


import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.sim.cocotb.benches import (BlockBench, check_writes, corrupt_one, expect_mismatch, pack_inp, pack_prm,
                                       plane_words, push_tag, random_cuts)

MODES = ("max", "avg", "global")


async def _case(bench: BlockBench, case: int, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    mode = MODES[case % 3] if case < 3 else str(rng.choice(MODES))
    blocks = int(rng.integers(1, 4))
    ch = blocks * c  # pooling is per channel: every lane is a channel
    if mode == "global":
        h, w = (int(v) for v in rng.integers(1, 9, size=2))
        kh, kw, sy, sx, pads = h, w, 1, 1, (0, 0, 0, 0)
    else:
        while True:
            kh, kw = (int(v) for v in rng.integers(1, 5, size=2))
            sy, sx = (int(v) for v in rng.integers(1, 4 if rng.random() < 0.9 else 8, size=2))
            pads = tuple(int(min(v, k - 1)) for v, k in zip(rng.integers(0, 3, size=4), (kh, kw, kh, kw)))
            h, w = (int(v) for v in rng.integers(1, 11, size=2))
            ho = (h + pads[0] + pads[2] - kh) // sy + 1
            wo = (w + pads[1] + pads[3] - kw) // sx + 1
            if ho >= 1 and wo >= 1 and ho * wo <= 40:
                break
    x = rng.integers(-128, 128, size=(1, ch, h, w)).astype(np.int8)
    zp_in, zp_out = int(rng.integers(-40, 41)), int(rng.integers(-40, 41))
    r = rng.random()
    lo_, hi_ = (zp_out, 127) if r < 0.25 else (-128, 127) if r < 0.8 else (
        int(rng.integers(-128, -20)), int(rng.integers(20, 128)))
    # Per-channel average multipliers from random output scales (M/2**S ~ s_in / (s_out * n)).
    pairs = [ops.pool_multiplier(1.0, float(rng.uniform(0.5, 2.0)), kh * kw) for _ in range(ch)]
    mult = np.array([m for m, _ in pairs], dtype=np.uint16)
    shift = np.array([s for _, s in pairs], dtype=np.uint8)
    per_ch = (mult.astype(np.int64)[:, None, None], shift.astype(np.int64)[:, None, None])
    if mode == "max":
        golden = np.clip(ops.maxpool(x, (kh, kw), (sy, sx), pads), lo_, hi_).astype(np.int8)
        pad_value = -128
    elif mode == "avg":
        golden = ops.avgpool(x, (kh, kw), (sy, sx), pads, True, zp_in, *per_ch, zp_out, lo_, hi_)
        pad_value = zp_in
    else:
        golden = ops.global_avgpool(x, zp_in, *per_ch, zp_out, lo_, hi_)
        pad_value = zp_in
    golden = golden[0]  # (ch, ho, wo)
    ho, wo = golden.shape[1:]

    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    in_w = wp + int(rng.integers(0, 3))
    in_plane = hp * in_w + int(rng.integers(0, 4))
    padded = np.full((ch, hp, wp), pad_value, dtype=np.int8)
    padded[:, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x[0]
    inp = plane_words(rng, padded, c, in_w, in_plane)
    inp_base = int(rng.integers(0, hw.inp_depth - len(inp) + 1))
    await bench.load("inp", inp_base, pack_inp(inp))
    # PRM word per plane (channel block); M_neg random: AVG uses M for both signs.
    prm_base = int(rng.integers(0, hw.prm_depth - blocks + 1))
    bias = rng.integers(-(1 << 20), 1 << 20, size=(blocks, c))
    mneg = rng.integers(0, 1 << 15, size=(blocks, c))
    await bench.load("prm", prm_base, pack_prm(bias, mult.reshape(blocks, c), mneg, shift.reshape(blocks, c)))

    # Random, unequal tiles over rows, columns and channel-block planes.
    rows, cols, planes = random_cuts(rng, ho), random_cuts(rng, wo), random_cuts(rng, blocks)
    jobs = [(z, r, cc) for z in planes for r in rows for cc in cols]
    insns, expected, last_words, out_next = [], {}, {}, 0
    for j in rng.permutation(len(jobs)):
        (z0, z1), (ty, y1), (tx, x1) = jobs[j]
        nz, oh_, ow_ = z1 - z0, y1 - ty, x1 - tx
        insn = isa.Pool(
            inp_base=inp_base + z0 * in_plane + ty * sy * in_w + tx * sx, out_base=out_next, prm_base=prm_base + z0,
            in_w=in_w, in_plane=in_plane, out_h=oh_, out_w=ow_, kh=kh, kw=kw, stride_y=sy, stride_x=sx,
            z_size=nz, mode=isa.PoolMode.MAX if mode == "max" else isa.PoolMode.AVG, zp_in=zp_in, zp_out=zp_out,
            act_min=lo_, act_max=hi_, push_prev=bool(rng.random() < 0.5), push_next=bool(rng.random() < 0.5))
        for z in range(nz):
            for oy in range(oh_):
                for ox in range(ow_):
                    cb = z0 + z
                    expected[out_next + (z * oh_ + oy) * ow_ + ox] = golden[cb * c:(cb + 1) * c, ty + oy, tx + ox]
        out_next += nz * oh_ * ow_
        last_words[out_next - 1] = push_tag(insn)
        insns.append(insn)
    if corrupt:
        corrupt_one(expected, rng)
    await bench.run(insns)
    what = (f"{bench.where(case)}: {mode} blocks={blocks} k={kh}x{kw} stride={sy},{sx} pads={pads} in={h}x{w} "
            f"out={ho}x{wo} tiles={len(rows)}x{len(cols)}x{len(planes)} zp_in={zp_in} zp_out={zp_out} "
            f"clamp={lo_}..{hi_}")
    check_writes(bench.take_writes(), expected, what, last_words)
    sat = float(np.mean((golden == lo_) | (golden == hi_)))
    bench.dut._log.info(f"ok {what}: {len(insns)} POOLs, {len(expected)} words, {sat:.0%} at a clamp bound")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, corrupt=True))


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def random_layers_match_golden_pool(dut):
    bench = await BlockBench.start(dut)
    for case in BlockBench.cases(80):
        await _case(bench, case)
