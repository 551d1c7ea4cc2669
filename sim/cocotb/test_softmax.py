"""cocotb bench: ``dlproc.hardware.gateware.softmax.SoftmaxEngine`` (SMXTAB, SOFTMAX) against
``dlproc.targets.golden.ops.softmax_int8``.

Every case reloads the exp table from ``ops.softmax_exp_table`` of a random input scale with
SMXTABs of random length and unaligned ``tab_base`` (the last word may run past entry 255, whose
extra lanes must be dropped), then runs several SOFTMAXs back to back (random gaps) over random
channel counts (lanes beyond ``channels`` must read -128), channel blocks, pixels and data, including
pixels whose channels are all equal. Every OUT word must be written once, bit-exact with the golden
model, with the last-word and push flags on each SOFTMAX's last word only.
Parameters: ``DLPROC_BENCH_HW``, ``DLPROC_BENCH_SEED``, ``DLPROC_BENCH_CASES``.
"""

from __future__ import annotations


import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.sim.cocotb.benches import (BlockBench, check_writes, corrupt_one, expect_mismatch, pack_inp, pack_prm,
                                       push_tag)

SIZE = isa.SOFTMAX_TABLE_SIZE


async def _load_table(bench: BlockBench, rng: np.random.Generator, exp: np.ndarray) -> None:
    """Load ``exp`` with SMXTABs of random length, from a random entry to 255, then from 0."""
    hw, c = bench.hw, bench.hw.c
    split = int(rng.integers(0, SIZE))
    for start, end in ((split, SIZE), (0, split)):
        pos = start
        while pos < end:
            words = min(int(rng.integers(1, hw.prm_depth + 1)), -(-(end - pos) // c))
            # Lanes past entry 255 get random values: the engine must drop them.
            vals = rng.integers(0, (1 << 20) + 1, size=words * c)
            inside = min(words * c, SIZE - pos)
            vals[:inside] = exp[pos:pos + inside]
            prm_base = int(rng.integers(0, hw.prm_depth - words + 1))
            junk = rng.integers(0, 1 << 15, size=(words, c))  # M, M_neg, S are ignored
            await bench.load("prm", prm_base, pack_prm(vals.reshape(words, c), junk, junk, junk % 47))
            await bench.run([isa.SmxTab(prm_base=prm_base, tab_base=pos, count=words)])
            pos += words * c


async def _case(bench: BlockBench, case: int, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    s_in = float(np.exp(rng.uniform(np.log(0.01), np.log(0.5))))
    exp = ops.softmax_exp_table(s_in).astype(np.int64)
    await _load_table(bench, rng, exp)
    inp = rng.integers(-128, 128, size=(hw.inp_depth, c)).astype(np.int8)
    if rng.random() < 0.3:
        inp[: hw.inp_depth // 4] = int(rng.integers(-128, 128))  # all-equal channels: uniform output
    await bench.load("inp", 0, pack_inp(inp))
    insns, expected, last_words, out_next = [], {}, {}, 0
    for _ in range(int(rng.integers(1, 4))):
        nb = int(rng.integers(1, 7))
        n = int(rng.integers(1, 6))
        in_plane = n + int(rng.integers(0, 3))
        ch = int(rng.integers(max(1, (nb - 1) * c + 1), nb * c + 1)) if rng.random() < 0.7 else int(
            rng.integers(1, nb * c + 1))
        insn = isa.Softmax(inp_base=int(rng.integers(0, hw.inp_depth - (nb - 1) * in_plane - n + 1)),
                           out_base=out_next, in_plane=in_plane, n_pix=n, cin_blocks=nb, channels=ch,
                           push_prev=bool(rng.random() < 0.5), push_next=bool(rng.random() < 0.5))
        rows = insn.inp_base + np.arange(nb)[:, None] * in_plane + np.arange(n)[None, :]
        xs = inp[rows].transpose(0, 2, 1).reshape(nb * c, n)  # (channel, pixel)
        y = np.full((nb * c, n), -128, dtype=np.int64)
        y[:ch] = ops.softmax_int8(xs[None, :ch, None, :], exp)[0, :, 0, :]
        words = y.reshape(nb, c, n).transpose(0, 2, 1).reshape(nb * n, c)
        for k in range(nb * n):
            expected[out_next + k] = words[k]
        out_next += nb * n
        last_words[out_next - 1] = push_tag(insn)
        insns.append(insn)
    if corrupt:
        corrupt_one(expected, rng)
    await bench.run(insns)
    where = f"{bench.where(case)} (s_in={s_in:.4f})"
    check_writes(bench.take_writes(), expected, f"{where}: {insns}", last_words)
    bench.dut._log.info(f"ok {where}: {len(insns)} SOFTMAXs, {len(expected)} words")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, corrupt=True))


@cocotb.test(timeout_time=500, timeout_unit="ms")
async def random_softmax_match_golden_softmax_int8(dut):
    bench = await BlockBench.start(dut)
    for case in BlockBench.cases(40):
        await _case(bench, case)
