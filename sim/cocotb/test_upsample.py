"""cocotb bench: ``dlproc.hardware.gateware.upsample.UpsampleEngine`` against ``dlproc.targets.golden.ops.upsample_nearest``.

Each case is a random layer (channel blocks, input size, scale factors 1..4 and sometimes up to 15
per axis), laid out in INP with random gaps and garbage, split into random output tiles (origins
on multiples of the scale, sizes arbitrary, so tiles crop the repeated pixels) and channel-block
ranges, issued as UPSAMPLEs in random order with random gaps. Every OUT word must be written once,
bit-exact with the golden model, one word per cycle, with the last-word and push flags on each
instruction's last word only. Parameters: ``DLPROC_BENCH_HW``, ``DLPROC_BENCH_SEED``,
``DLPROC_BENCH_CASES``.
"""

from __future__ import annotations


import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.sim.cocotb.benches import (BlockBench, check_period, check_writes, corrupt_one, expect_mismatch, pack_inp,
                                       plane_words, push_tag)



async def _case(bench: BlockBench, case: int, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    blocks = int(rng.integers(1, 4))
    sy, sx = (int(v) for v in rng.integers(1, 5, size=2))
    if rng.random() < 0.15:
        sy, sx = int(rng.integers(5, 16)), 1
    while True:
        h, w = (int(v) for v in rng.integers(1, 7, size=2))
        if h * sy * w * sx * blocks <= hw.out_depth:
            break
    x = rng.integers(-128, 128, size=(1, blocks * c, h, w)).astype(np.int8)
    golden = ops.upsample_nearest(x, (sy, sx))[0]  # (ch, h*sy, w*sx)
    ho, wo = golden.shape[1:]
    in_w = w + int(rng.integers(0, 3))
    in_plane = h * in_w + int(rng.integers(0, 4))
    inp = plane_words(rng, x[0], c, in_w, in_plane)
    inp_base = int(rng.integers(0, hw.inp_depth - len(inp) + 1))
    await bench.load("inp", inp_base, pack_inp(inp))

    th = sy * int(rng.integers(1, h + 1)) - int(rng.integers(0, sy))  # tile rows, origins on multiples of sy
    tw = sx * int(rng.integers(1, w + 1)) - int(rng.integers(0, sx))
    sty, stx = -(-th // sy) * sy, -(-tw // sx) * sx  # tile pitch: next multiple of the scale
    zb = int(rng.integers(1, blocks + 1))
    jobs = [(z0, ty, tx) for z0 in range(0, blocks, zb) for ty in range(0, ho, sty) for tx in range(0, wo, stx)]
    insns, expected, last_words, out_next = [], {}, {}, 0
    for j in rng.permutation(len(jobs)):
        z0, ty, tx = jobs[j]
        nz, oh_, ow_ = min(zb, blocks - z0), min(th, ho - ty), min(tw, wo - tx)
        insn = isa.Upsample(inp_base=inp_base + z0 * in_plane + (ty // sy) * in_w + tx // sx, out_base=out_next,
                            in_w=in_w, in_plane=in_plane, out_h=oh_, out_w=ow_, scale_y=sy, scale_x=sx, z_size=nz,
                            push_prev=bool(rng.random() < 0.5), push_next=bool(rng.random() < 0.5))
        for z in range(nz):
            cb = z0 + z
            for oy in range(oh_):
                for ox in range(ow_):
                    expected[out_next + (z * oh_ + oy) * ow_ + ox] = golden[cb * c:(cb + 1) * c, ty + oy, tx + ox]
        out_next += nz * oh_ * ow_
        last_words[out_next - 1] = push_tag(insn)
        insns.append(insn)
    if corrupt:
        corrupt_one(expected, rng)
    await bench.run(insns)
    what = (f"{bench.where(case)}: blocks={blocks} in={h}x{w} scale={sy}x{sx} out={ho}x{wo} tile={th}x{tw}x{zb}")
    writes = bench.take_writes()
    check_writes(writes, expected, what, last_words)
    for insn in insns:
        words = insn.z_size * insn.out_h * insn.out_w
        check_period(writes, list(range(insn.out_base, insn.out_base + words)), 1, f"{what}: {insn}")
    bench.dut._log.info(f"ok {what}: {len(insns)} UPSAMPLEs, {len(expected)} words")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, corrupt=True))


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def random_layers_match_golden_upsample(dut):
    bench = await BlockBench.start(dut)
    for case in BlockBench.cases(60):
        await _case(bench, case)
