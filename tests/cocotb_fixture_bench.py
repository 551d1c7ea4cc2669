"""cocotb bench for the port-contract fixture (tests/sim_fixture.py): proves the cocotb runner, the
cocotbext-avalon CSR master and the randomized Avalon memory model before the real processor exists.
"""

from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.avalon import AvalonMMMasterBFM

from dlproc.sim.cocotb.avalon_mem import AvalonMemoryModel

import sim_fixture as fx

MEM_SIZE = 1 << 16


async def setup(dut, seed: int, **mem_kw):
    Clock(dut.clk, 10, unit="ns").start()
    csr = AvalonMMMasterBFM.from_prefix(dut, "csr_", dut.clk, dut.rst, read_response_latency=1)
    csr.start()
    memory = bytearray(MEM_SIZE)
    mem = AvalonMemoryModel(dut, "mem__", dut.clk, dut.rst, memory, rng=random.Random(seed), **mem_kw)
    mem.start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return csr, mem, memory


async def wait_irq(dut, limit: int) -> int:
    for n in range(limit):
        await RisingEdge(dut.clk)
        if int(dut.irq.value):
            return n
    raise AssertionError(f"no irq within {limit} cycles")


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def csr_reset_values_and_readback(dut):
    csr, _, _ = await setup(dut, 1)
    # BENCH_BREAK lets the runner's own test check that a wrong expectation is reported as a failure.
    broken = int(os.environ.get("BENCH_BREAK", "0"))
    for reg, value in fx.RESET_VALUES.items():
        value ^= broken
        got = await csr.read(reg)
        assert got == value, f"register {reg}: reset value 0x{got:08x}, expected 0x{value:08x}"
    rng = random.Random(7)
    for _ in range(20):
        value = rng.getrandbits(32)
        await csr.write(fx.REG_SCRATCH, value)
        assert await csr.read(fx.REG_SCRATCH) == value


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def randomized_copies(dut):
    seed = int(os.environ.get("BENCH_SEED", "3"))
    rng = random.Random(seed)
    csr, mem, memory = await setup(dut, seed, wait_prob=0.4, latency=(1, 15), gap_prob=0.3)
    await csr.write(fx.REG_CTRL, fx.CTRL_IRQ_EN)
    for i in range(8):
        n = rng.randrange(1, 30) * 8
        src = rng.randrange(0, 0x4000 // 8) * 8
        dst = 0x8000 + rng.randrange(0, 0x4000 // 8) * 8
        data = bytes(rng.getrandbits(8) for _ in range(n))
        memory[src:src + n] = data
        burst = rng.randrange(1, 9)
        for reg, value in ((fx.REG_SRC, src), (fx.REG_DST, dst), (fx.REG_LEN, n), (fx.REG_BURST, burst)):
            await csr.write(reg, value)
        before = len(mem.commands)
        await csr.write(fx.REG_CTRL, fx.CTRL_IRQ_EN | fx.CTRL_START)
        await wait_irq(dut, 20_000)
        assert await csr.read(fx.REG_STATUS) == fx.STATUS_DONE
        await csr.write(fx.REG_STATUS, fx.STATUS_DONE)
        assert bytes(memory[dst:dst + n]) == data, f"copy {i} (n={n}, burst={burst})"
        cmds = mem.commands[before:]
        assert sum(c.burstcount for c in cmds if c.kind == "read") == n // 8
        assert all(c.burstcount <= burst for c in cmds)
    assert mem.errors == [], mem.errors
    assert mem.wait_cycles > 0, "waitrequest was never exercised"


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def dma_window_violation_issues_no_transaction(dut):
    csr, mem, _ = await setup(dut, 5)
    for reg, value in ((fx.REG_DMA_BASE, 0x1000), (fx.REG_DMA_LIMIT, 0x2000), (fx.REG_SRC, 0x800),
                       (fx.REG_DST, 0x1000), (fx.REG_LEN, 64), (fx.REG_CTRL, fx.CTRL_IRQ_EN | fx.CTRL_START)):
        await csr.write(reg, value)
    await wait_irq(dut, 1000)
    assert await csr.read(fx.REG_STATUS) == fx.STATUS_ERROR
    await ClockCycles(dut.clk, 50)
    assert mem.commands == []
