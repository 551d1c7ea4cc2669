"""The output stage against dlproc.hardware.numerics.requantize, bit for bit (Amaranth simulator, C = 4)."""

from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator

from dlproc.hardware.gateware.output_stage import LATENCY, OutputStage
from dlproc.hardware.numerics import MAX_SHIFT, MULT_BITS, requantize

C = 4


def _run(items: list[dict]) -> list[tuple[int, int, list[int]]]:
    """Feed one item per cycle (with a gap every 7th cycle) and collect (addr, tag, data)."""
    dut = OutputStage(C, addr_bits=10, tag_bits=3)
    results: list[tuple[int, int, list[int]]] = []

    async def bench(ctx):
        pending = list(items)
        cycle = 0
        while pending or cycle < len(items) * 2 + LATENCY + 2:
            if pending and cycle % 7 != 6:
                it = pending.pop(0)
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.acc, it["acc"])
                ctx.set(dut.i.params, [
                    {"mult": mm, "mult_neg": mn, "shift": s}
                    for mm, mn, s in zip(it["mult"], it["mult_neg"], it["shift"])
                ])
                ctx.set(dut.i.zp_out, it["zp"])
                ctx.set(dut.i.act_min, it["lo"])
                ctx.set(dut.i.act_max, it["hi"])
                ctx.set(dut.i.addr, it["addr"])
                ctx.set(dut.i.tag, it["tag"])
            else:
                ctx.set(dut.i.valid, 0)
            await ctx.tick()
            cycle += 1
            if ctx.get(dut.o.valid):
                data = ctx.get(dut.o.data)
                results.append((ctx.get(dut.o.addr), ctx.get(dut.o.tag), [int(data[k]) for k in range(C)]))
            if not pending and len(results) == len(items):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results


def _expected(it: dict) -> list[int]:
    return [int(v) for v in requantize(np.array(it["acc"], dtype=np.int64), np.array(it["mult"]),
                                       np.array(it["shift"]), it["zp"], it["lo"], it["hi"],
                                       np.array(it["mult_neg"]))]


def _random_items(rng: np.random.Generator, n: int) -> list[dict]:
    items = []
    for k in range(n):
        lo, hi = sorted(int(v) for v in rng.integers(-128, 128, size=2))
        if k % 3 == 0:
            lo, hi = -128, 127
        shift = rng.integers(0, MAX_SHIFT + 1, size=C)
        # Accumulators scaled to the shift so that many results land inside int8 instead of
        # saturating; some lanes take full-range int32 values to exercise saturation.
        mag = np.minimum(2 ** 31 - 1, (1 << shift.astype(np.int64)) // (1 << 10) + 300)
        acc = rng.integers(-mag, mag + 1)
        wide = rng.random(C) < 0.2
        acc = np.where(wide, rng.integers(-(2**31), 2**31, size=C), acc)
        items.append({
            "acc": [int(v) for v in acc],
            "mult": [int(v) for v in rng.integers(0, 1 << MULT_BITS, size=C)],
            "mult_neg": [int(v) for v in rng.integers(0, 1 << MULT_BITS, size=C)],
            "shift": [int(v) for v in shift],
            "zp": int(rng.integers(-128, 128)), "lo": lo, "hi": hi,
            "addr": k % 1024, "tag": k % 8,
        })
    return items


def _corner_items() -> list[dict]:
    top = (1 << MULT_BITS) - 1
    rows = [
        # exactly .5 rounds up (towards +inf) for positive and negative values
        ([3, -3, 5, -5], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], 0),
        ([1, -1, 3, -3], [1, 1, 1, 1], [1, 1, 1, 1], [2, 1, 2, 1], 0),
        # S = 0: no rounding, product passes through
        ([100, -100, 127, -128], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], 0),
        # saturation at the int8 limits and with a zero point
        ([2**31 - 1, -(2**31), 1000, -1000], [top, top, 1, 1], [top, top, 1, 1], [0, 0, 0, 0], 5),
        ([2**31 - 1, -(2**31), 2**31 - 1, -(2**31)], [top, top, 1, 1], [top, top, 1, 1],
         [MAX_SHIFT, MAX_SHIFT, MAX_SHIFT, MAX_SHIFT], 0),
        # M_neg (leaky ReLU): negative accumulators use M_neg, zero and positive use M
        ([-1000, 1000, 0, -1], [1 << 14, 1 << 14, 7, 7], [1 << 10, 1 << 10, 9, 3 << 13],
         [15, 15, 0, 14], -3),
        # M = 0 and zero accumulators
        ([0, 12345, -12345, 0], [0, 0, 0, 5], [0, 0, 0, 5], [0, 3, 46, 0], 17),
    ]
    items = []
    for k, (acc, mult, mneg, shift, zp) in enumerate(rows):
        for lo, hi in ((-128, 127), (0, 127), (-20, 6), (10, -10)):
            items.append({"acc": acc, "mult": mult, "mult_neg": mneg, "shift": shift, "zp": zp,
                          "lo": lo, "hi": hi, "addr": k, "tag": 1})
    return items


def test_output_stage_matches_numerics_bit_exactly() -> None:
    rng = np.random.default_rng(1234)
    items = _corner_items() + _random_items(rng, 300)
    results = _run(items)
    assert len(results) == len(items)
    for it, (addr, tag, data) in zip(items, results):
        assert (addr, tag) == (it["addr"], it["tag"])
        assert data == _expected(it), it


def test_output_stage_latency_is_constant() -> None:
    """An item fed in cycle k leaves in cycle k + LATENCY (the engines rely on this)."""
    dut = OutputStage(C, addr_bits=4, tag_bits=1)
    seen: list[int] = []

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.acc, [7, -7, 0, 1])
        ctx.set(dut.i.params, [{"mult": 1, "mult_neg": 1, "shift": 0}] * C)
        ctx.set(dut.i.act_min, -128)
        ctx.set(dut.i.act_max, 127)
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for cycle in range(1, 10):
            if ctx.get(dut.o.valid):
                seen.append(cycle)
                assert [int(v) for v in ctx.get(dut.o.data)] == [7, -7, 0, 1]
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [LATENCY]
