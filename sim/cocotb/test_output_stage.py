"""cocotb bench: ``dlproc.hardware.gateware.output_stage.OutputStage`` against ``dlproc.hardware.numerics.requantize``.

Constrained-random items (accumulators including the int32 extremes, M and M_neg over the whole
15-bit range, S over 0..46, random zero points and clamps, random valid gaps) stream in one per
cycle; every output must appear exactly LATENCY cycles later, in order, with its address and tag,
and be bit-exact. Parameters: ``DLPROC_BENCH_C`` lanes, ``DLPROC_BENCH_SEED``.

With the activation table (an ``OutputStage(..., table=True)`` DUT, ``DLPROC_BENCH_TABLE=1``) a
second test writes a random table through ``tab_we``/``tab_addr``/``tab_data``, then sends random
items with and without the ``table`` bit (and rewrites the table between bursts): an item with the
bit must leave as ``TABLE[requantize(...) + 128]`` (``golden.ops.table_lookup``), one without as
the requantized value, with the same latency.
"""

from __future__ import annotations

import os
import random

import numpy as np

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from dlproc.hardware.gateware.output_stage import LATENCY, REQUANT_LANE
from dlproc.hardware.numerics import MAX_SHIFT, MULT_BITS, requantize
from dlproc.targets.golden.ops import table_lookup

ADDR_BITS = 8


def pack_params(lanes: list[tuple[int, int, int]]) -> int:
    word = 0
    size = REQUANT_LANE.size
    for i, (mult, mult_neg, shift) in enumerate(lanes):
        lane = ((mult << REQUANT_LANE["mult"].offset) | (mult_neg << REQUANT_LANE["mult_neg"].offset)
                | (shift << REQUANT_LANE["shift"].offset))
        word |= lane << (i * size)
    return word


def random_acc(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.05:
        return rng.choice([-(2**31), 2**31 - 1, 0, -1])
    if r < 0.5:
        return rng.randint(-(2**31), 2**31 - 1)
    return rng.randint(-(2**20), 2**20)


async def _reset(dut) -> None:
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.i__valid.value = 0
    if TABLE:
        dut.tab_we.value = 0
        dut.i__table.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0


TABLE = os.environ.get("DLPROC_BENCH_TABLE", "0") == "1"


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def random_items_match_requantize(dut):
    await _stream(dut, table=None)


async def random_items_through_the_table(dut):
    rng = random.Random(int(os.environ.get("DLPROC_BENCH_SEED", "1")) + 100)
    await _reset(dut)
    for burst in range(3):
        table = [rng.randint(-128, 127) for _ in range(256)]
        for entry, value in enumerate(table):  # one entry per cycle, as the ACTTAB engine writes
            dut.tab_we.value, dut.tab_addr.value, dut.tab_data.value = 1, entry, value & 0xFF
            await RisingEdge(dut.clk)
        dut.tab_we.value = 0
        await _stream(dut, table=np.array(table, dtype=np.int8), seed_offset=burst, reset=False)


# Registered only for a DUT with the table (its ports do not exist otherwise).
if TABLE:
    random_items_through_the_table = cocotb.test(timeout_time=10, timeout_unit="ms")(random_items_through_the_table)


async def _stream(dut, table: np.ndarray | None, seed_offset: int = 0, reset: bool = True) -> None:
    c = int(os.environ.get("DLPROC_BENCH_C", "4"))
    rng = random.Random(int(os.environ.get("DLPROC_BENCH_SEED", "1")) + 1000 * seed_offset)
    if reset:
        await _reset(dut)
    expected: list[tuple[int, list[int], int, int]] = []   # (issue cycle, lanes, addr, tag)
    received = 0
    n_items = 400
    cycle = 0
    sent = 0
    while received < n_items and cycle < 20 * n_items:
        if sent < n_items and rng.random() < 0.8:
            acc = [random_acc(rng) for _ in range(c)]
            params = [(rng.randrange(0, 1 << MULT_BITS), rng.randrange(0, 1 << MULT_BITS),
                       rng.choice([0, 1, MAX_SHIFT, rng.randint(0, MAX_SHIFT)])) for _ in range(c)]
            zp = rng.randint(-128, 127)
            lo, hi = sorted((rng.randint(-128, 127), rng.randint(-128, 127)))
            if rng.random() < 0.5:
                lo, hi = -128, 127
            addr, tag = rng.randrange(1 << ADDR_BITS), rng.randrange(2)
            dut.i__valid.value = 1
            dut.i__acc.value = sum((a & 0xFFFFFFFF) << (32 * i) for i, a in enumerate(acc))
            dut.i__params.value = pack_params(params)
            dut.i__zp_out.value = zp & 0xFF
            dut.i__act_min.value = lo & 0xFF
            dut.i__act_max.value = hi & 0xFF
            dut.i__addr.value = addr
            dut.i__tag.value = tag
            ref = requantize(np.array(acc, dtype=np.int64), np.array([p[0] for p in params]),
                             np.array([p[2] for p in params]), zp, lo, hi, np.array([p[1] for p in params]))
            if table is not None:
                tabled = rng.random() < 0.7
                dut.i__table.value = int(tabled)
                if tabled:
                    ref = table_lookup(ref, table)
            expected.append((cycle, [int(v) for v in ref], addr, tag))
            sent += 1
        else:
            dut.i__valid.value = 0
        await RisingEdge(dut.clk)
        cycle += 1
        if int(dut.o__valid.value):
            issue, lanes, addr, tag = expected[received]
            word = int(dut.o__data.value)
            got = [((word >> (8 * i)) & 0xFF) - (256 if (word >> (8 * i)) & 0x80 else 0) for i in range(c)]
            assert got == lanes, f"item {received}: got {got}, requantize gives {lanes}"
            assert int(dut.o__addr.value) == addr and int(dut.o__tag.value) == tag, f"item {received} side band"
            # An item driven in loop cycle `issue` is sampled at the next edge; values read right after
            # an edge are the ones the DUT presented at that edge (before its register updates), so
            # a LATENCY-cycle pipeline shows the item LATENCY + 1 loop cycles after it was driven.
            assert cycle - issue - 1 == LATENCY, f"item {received}: latency {cycle - issue}, expected {LATENCY}"
            received += 1
    assert received == n_items, f"only {received} of {n_items} items came out"
