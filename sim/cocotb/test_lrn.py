"""cocotb bench: ``dlproc.hardware.gateware.lrn.LrnEngine`` (LRNTAB, LRN) against ``dlproc.targets.golden.ops.lrn``.

The multiplier table is loaded through PRM with LRNTABs of random length and random (unaligned)
``tab_base``, the last one running past the table's end (its extra lanes must be dropped); later
cases either reload it from ``ops.lrn_params`` of a random layer or overwrite a random stretch with
random entries, so the bench's copy of the table tracks exactly what LRNTAB must have written
(such a case depends on the table left by the cases before it: to rerun it alone, start from the
last case whose log line says "full table").
Each case then runs several LRNs back to back (random gaps): random window sizes 1..16, channel
blocks (the window crosses several blocks), valid channel counts, pixels, zero points and clamps.
Lanes of valid channels must equal ``ops.lrn``; lanes beyond ``channels`` follow the ISA's formula
(their own d, squares of invalid channels counted as 0). Every OUT word is written once, one word
per cycle in sweep order (pixel outer, channel block inner), with the last-word and push flags on
each LRN's last word only. Parameters: ``DLPROC_BENCH_HW``, ``DLPROC_BENCH_SEED``,
``DLPROC_BENCH_CASES``.
"""

from __future__ import annotations


import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.hardware.numerics import LRN_TABLE_SIZE, lrn_index, requantize
from dlproc.sim.cocotb.benches import (BlockBench, check_period, check_writes, corrupt_one, expect_mismatch, pack_inp,
                                       pack_prm, push_tag)



async def _write_table(bench: BlockBench, rng: np.random.Generator, table: np.ndarray, start: int,
                       mult: np.ndarray, shift: np.ndarray) -> None:
    """LRNTABs writing entries start.. = (mult, shift), in PRM-sized chunks of random length.

    ``table`` (2, LRN_TABLE_SIZE) is the bench's copy, updated with what the hardware must hold."""
    hw, c = bench.hw, bench.hw.c
    pos, end = start, start + len(mult)
    while pos < end:
        words = min(int(rng.integers(1, hw.prm_depth + 1)), -(-(end - pos) // c))
        n = words * c
        m = np.zeros(n, dtype=np.int64)
        s = np.zeros(n, dtype=np.int64)
        take = min(n, end - pos)
        m[:take], s[:take] = mult[pos - start:pos - start + take], shift[pos - start:pos - start + take]
        if pos + n > end:  # lanes past the stretch: random values (dropped when past the table)
            m[take:] = rng.integers(0, 1 << 15, size=n - take)
            s[take:] = rng.integers(0, 47, size=n - take)
        prm_base = int(rng.integers(0, hw.prm_depth - words + 1))
        junk = rng.integers(-(1 << 31), 1 << 31, size=(words, c))  # bias and M_neg are ignored
        await bench.load("prm", prm_base, pack_prm(junk, m.reshape(words, c), junk & 0x7FFF, s.reshape(words, c)))
        await bench.run([isa.LrnTab(prm_base=prm_base, tab_base=pos, count=words)])
        kept = min(n, LRN_TABLE_SIZE - pos)
        table[0, pos:pos + kept], table[1, pos:pos + kept] = m[:kept], s[:kept]
        pos += n


def _reference(x_words: np.ndarray, insn: isa.Lrn, table: np.ndarray, c: int) -> np.ndarray:
    """Expected OUT words [cin_blocks*n_pix, C]: ops.lrn for valid channels, the ISA formula beyond."""
    nb, n, ch = insn.cin_blocks, insn.n_pix, insn.channels
    xs = x_words.reshape(nb, n, c).transpose(0, 2, 1).reshape(nb * c, n)  # (channel, pixel)
    y = np.empty((nb * c, n), dtype=np.int64)
    y[:ch] = ops.lrn(xs[None, :ch, None, :], insn.size, insn.zp_in, table[0], table[1], insn.zp_out,
                     insn.act_min, insn.act_max)[0, :, 0, :]
    if ch < nb * c:
        d = xs.astype(np.int64) - insn.zp_in
        sq = np.where(np.arange(nb * c)[:, None] < ch, d * d, 0)
        csum = np.concatenate([np.zeros((1, n), dtype=np.int64), np.cumsum(sq, axis=0)])
        lo, hi = (insn.size - 1) // 2, insn.size // 2
        k = np.arange(ch, nb * c)
        q = csum[np.minimum(k + hi + 1, nb * c)] - csum[np.maximum(k - lo, 0)]
        i = lrn_index(q)
        y[ch:] = requantize(d[ch:], table[0][i], table[1][i], insn.zp_out, insn.act_min, insn.act_max)
    return y.reshape(nb, c, n).transpose(0, 2, 1).reshape(nb * n, c)


async def _case(bench: BlockBench, case: int, table: np.ndarray, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    if case == 0 or rng.random() < 0.25:
        size = int(rng.integers(1, 17))
        p = ops.lrn_params(size, float(rng.uniform(1e-4, 1e-2)) * size, float(rng.uniform(0.5, 0.9)),
                           float(rng.uniform(1.0, 2.0)), float(rng.uniform(0.01, 0.2)), float(rng.uniform(0.01, 0.2)))
        # In two stretches, the first ending at the table's end with a random (odd or even)
        # length, so that with C > 1 its last word usually runs past the end.
        split = int(rng.integers(1, LRN_TABLE_SIZE))
        mult, shift = p.mult.astype(np.int64), p.shift.astype(np.int64)
        await _write_table(bench, rng, table, split, mult[split:], shift[split:])
        await _write_table(bench, rng, table, 0, mult[:split], shift[:split])
        what_tab = f"full table of lrn_params(size={size})"
    else:
        start = int(rng.integers(0, LRN_TABLE_SIZE))
        n = int(rng.integers(1, min(200, LRN_TABLE_SIZE - start) + 1))
        await _write_table(bench, rng, table, start, rng.integers(1, 1 << 15, size=n), rng.integers(10, 23, size=n))
        what_tab = f"table entries {start}..{start + n - 1} rewritten"
    inp = rng.integers(-128, 128, size=(hw.inp_depth, c)).astype(np.int8)
    await bench.load("inp", 0, pack_inp(inp))
    insns, expected, orders, last_words, out_next = [], {}, [], {}, 0
    for _ in range(int(rng.integers(1, 4))):
        nb = int(rng.integers(1, 9))
        n = int(rng.integers(1, max(2, min(20, (hw.out_depth - out_next) // nb)) + 1))
        if out_next + nb * n > hw.out_depth:
            break
        in_plane = n + int(rng.integers(0, 4))
        ch = int(rng.integers(1, nb * c + 1)) if rng.random() < 0.6 else nb * c
        zp_out = int(rng.integers(-20, 21))
        r = rng.random()
        lo_, hi_ = (zp_out, 127) if r < 0.25 else (-128, 127) if r < 0.8 else (
            int(rng.integers(-128, -20)), int(rng.integers(20, 128)))
        insn = isa.Lrn(inp_base=int(rng.integers(0, hw.inp_depth - (nb - 1) * in_plane - n + 1)), out_base=out_next,
                       in_plane=in_plane, n_pix=n, cin_blocks=nb, channels=ch, size=int(rng.integers(1, 17)),
                       zp_in=int(rng.integers(-60, 61)), zp_out=zp_out, act_min=lo_, act_max=hi_,
                       push_prev=bool(rng.random() < 0.5), push_next=bool(rng.random() < 0.5))
        rows = insn.inp_base + np.arange(nb)[:, None] * in_plane + np.arange(n)[None, :]
        ref = _reference(inp[rows.reshape(-1)], insn, table, c)
        for k in range(nb * n):
            expected[out_next + k] = ref[k]
        orders.append([out_next + cb * n + p for p in range(n) for cb in range(nb)])
        out_next += nb * n
        last_words[out_next - 1] = push_tag(insn)
        insns.append(insn)
    if corrupt:
        corrupt_one(expected, rng)
    await bench.run(insns)
    where = f"{bench.where(case)} ({what_tab})"
    writes = bench.take_writes()
    check_writes(writes, expected, f"{where}: {insns}", last_words)
    for insn, order in zip(insns, orders):
        check_period(writes, order, 1, f"{where}: {insn}")
    bench.dut._log.info(f"ok {where}: {len(insns)} LRNs, {len(expected)} words")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, np.zeros((2, LRN_TABLE_SIZE), dtype=np.int64), corrupt=True))


@cocotb.test(timeout_time=500, timeout_unit="ms")
async def random_lrn_match_golden_lrn(dut):
    bench = await BlockBench.start(dut)
    table = np.zeros((2, LRN_TABLE_SIZE), dtype=np.int64)  # the table memories start at zero
    for case in BlockBench.cases(30):
        await _case(bench, case, table)
