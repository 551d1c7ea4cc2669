"""cocotb bench: ``dlproc.hardware.gateware.add.AddEngine`` against ``dlproc.targets.golden.ops.add``.

Each case runs several ADDs back to back (random gaps): random operand words anywhere in INP (they
may overlap), random zero points, multipliers (half of them from ``ops.add_params`` of random
scales, half uniform over 0..2**15-1), shifts, fused ReLU or clamps. Every OUT word must be
written once, bit-exact with the golden model, one word every two cycles (the engine's documented
throughput: both operands share the INP port), with the last-word and push flags on each ADD's
last word only. With the element-wise multiply (``hw.multiply``), a third of the instructions
multiply instead (``mul``: random ``b_repeat``, 0 for a dense b, else a broadcast b word per run
of words), against ``ops.mul``. Parameters: ``DLPROC_BENCH_HW``, ``DLPROC_BENCH_SEED``,
``DLPROC_BENCH_CASES``.
"""

from __future__ import annotations


import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.hardware.numerics import MULT_BITS
from dlproc.sim.cocotb.benches import (BlockBench, check_period, check_writes, corrupt_one, expect_mismatch, pack_inp,
                                       push_tag)



def _params(rng: np.random.Generator) -> tuple[int, int, int]:
    if rng.random() < 0.5:
        s_a, s_b = (float(v) for v in rng.uniform(0.01, 0.1, size=2))
        return ops.add_params(s_a, s_b, float(rng.uniform(0.01, 0.2)))
    ma, mb = (int(v) for v in rng.integers(0, 1 << MULT_BITS, size=2))
    # 255 * max(ma, mb) * 2 >> shift ~ 100: outputs spread over int8 without saturating all.
    shift = int(np.clip(np.round(np.log2(510 * max(ma, mb, 1) / 100)), 0, 46))
    return ma, mb, shift


async def _case(bench: BlockBench, case: int, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    inp = rng.integers(-128, 128, size=(hw.inp_depth, c)).astype(np.int8)
    await bench.load("inp", 0, pack_inp(inp))
    insns, expected, last_words, out_next = [], {}, {}, 0
    for _ in range(int(rng.integers(1, 6))):
        count = int(rng.integers(1, 41)) if rng.random() < 0.9 else 1
        ma, mb, shift = _params(rng)
        zp_out = int(rng.integers(-30, 31))
        r = rng.random()
        lo_, hi_ = (zp_out, 127) if r < 0.3 else (-128, 127) if r < 0.8 else (
            int(rng.integers(-128, -20)), int(rng.integers(20, 128)))
        mul = hw.multiply and rng.random() < 0.35
        repeat = int(rng.choice([0, 1, 2, 5, 16, 64])) if mul else 0
        if mul:
            ma, shift = ops.mul_params(*(float(v) for v in rng.uniform(0.01, 0.1, size=2)), float(rng.uniform(0.002, 0.05)))
            mb = 0
        insn = isa.Add(inp_a=int(rng.integers(0, hw.inp_depth - count + 1)),
                       inp_b=int(rng.integers(0, hw.inp_depth - count + 1)), out_base=out_next, count=count,
                       za=int(rng.integers(-128, 128)), zb=int(rng.integers(-128, 128)), ma=ma, mb=mb, shift=shift,
                       zp_out=zp_out, act_min=lo_, act_max=hi_, push_prev=bool(rng.random() < 0.5),
                       push_next=bool(rng.random() < 0.5), mul=int(mul), b_repeat=repeat)
        if mul:
            rows = insn.inp_b + (np.arange(count) if repeat == 0 else np.arange(count) // repeat)
            golden = ops.mul(inp[insn.inp_a:insn.inp_a + count], insn.za, inp[rows], insn.zb, ma, shift, zp_out,
                             lo_, hi_)
        else:
            golden = ops.add(inp[insn.inp_a:insn.inp_a + count], insn.za, ma, inp[insn.inp_b:insn.inp_b + count],
                             insn.zb, mb, shift, zp_out, lo_, hi_)
        for k in range(count):
            expected[out_next + k] = golden[k]
        out_next += count
        last_words[out_next - 1] = push_tag(insn)
        insns.append(insn)
    if corrupt:
        corrupt_one(expected, rng)
    await bench.run(insns)
    where = bench.where(case)
    writes = bench.take_writes()
    check_writes(writes, expected, f"{where}: {insns}", last_words)
    for insn in insns:
        check_period(writes, list(range(insn.out_base, insn.out_base + insn.count)), 2, f"{where}: {insn}")
    bench.dut._log.info(f"ok {where}: {len(insns)} ADDs, {len(expected)} words")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, corrupt=True))


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def random_adds_match_golden_add(dut):
    bench = await BlockBench.start(dut)
    for case in BlockBench.cases(50):
        await _case(bench, case)
