"""Shared set-up of the cocotb benches on the processor top level (``dlproc_top``).

The pytest wrapper passes the configuration as JSON in ``DLPROC_BENCH_CONFIG`` (the bench runs in
the simulator's embedded Python, a separate process) and the random seed in ``DLPROC_BENCH_SEED``.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.avalon import AvalonMMMasterBFM

from dlproc.hardware import regmap
from dlproc.config import ProcessorConfig
from dlproc.sim.cocotb.avalon_mem import AvalonMemoryModel

CONFIG_ENV = "DLPROC_BENCH_CONFIG"
SEED_ENV = "DLPROC_BENCH_SEED"


def bench_config() -> ProcessorConfig:
    return ProcessorConfig.from_dict(json.loads(os.environ[CONFIG_ENV]), source=CONFIG_ENV)


def bench_seed() -> int:
    return int(os.environ.get(SEED_ENV, "1"))


def mask(register: str, name: str) -> int:
    return regmap.REG[register].field(name).mask


def get_field(value: int, register: str, name: str) -> int:
    f = regmap.REG[register].field(name)
    return (value & f.mask) >> f.lsb


@dataclass
class Bench:
    dut: object
    csr: AvalonMMMasterBFM
    mem: AvalonMemoryModel
    memory: bytearray
    rng: random.Random
    #: the write-only port of a MemoryPorts = 2 processor (``mem1__*``), over the same memory
    mem1: AvalonMemoryModel | None = None

    @property
    def ports(self) -> list[AvalonMemoryModel]:
        return [self.mem] + ([self.mem1] if self.mem1 is not None else [])

    @property
    def commands(self) -> list:
        """Every accepted command of every port (per port in order; ports one after the other)."""
        return [c for m in self.ports for c in m.commands]

    @property
    def errors(self) -> list[str]:
        return [e for m in self.ports for e in m.errors]

    def total(self, counter: str) -> int:
        """``read_beats``, ``write_beats`` or ``wait_cycles`` summed over the ports."""
        return sum(getattr(m, counter) for m in self.ports)

    async def write(self, name: str, value: int) -> None:
        await self.csr.write(regmap.offset(name), value & 0xFFFFFFFF)

    async def read(self, name: str) -> int:
        return await self.csr.read(regmap.offset(name))

    async def wait_irq(self, limit: int) -> int:
        """Clock until irq is high; fail after ``limit`` cycles (benches never hang)."""
        for n in range(limit):
            await RisingEdge(self.dut.clk)
            if int(self.dut.irq.value):
                return n
        raise AssertionError(f"no irq within {limit} cycles")

    async def run_program(self, insn_base: int, count: int, dma_base: int, dma_limit: int,
                          limit: int = 200_000) -> tuple[int, int]:
        """Start a program and wait for irq; return (STATUS, cycles waited)."""
        await self.write("CTRL", mask("CTRL", "ACK"))
        await self.write("INSN_BASE", insn_base)
        await self.write("INSN_COUNT", count)
        await self.write("DMA_BASE", dma_base)
        await self.write("DMA_LIMIT", min(dma_limit, 0xFFFFFFFF))
        await self.write("CTRL", mask("CTRL", "START") | mask("CTRL", "IRQ_EN"))
        cycles = await self.wait_irq(limit)
        return await self.read("STATUS"), cycles


async def setup(dut, mem_size: int, *, seed: int | None = None, **mem_kw) -> Bench:
    """Start the clock, the CSR master, the randomized memory model; reset the processor."""
    seed = bench_seed() if seed is None else seed
    rng = random.Random(seed)
    Clock(dut.clk, 10, unit="ns").start()
    csr = AvalonMMMasterBFM.from_prefix(dut, "csr_", dut.clk, dut.rst, read_response_latency=1)
    csr.start()
    memory = bytearray(mem_size)
    mem = AvalonMemoryModel(dut, "mem__", dut.clk, dut.rst, memory, rng=random.Random(seed + 1), **mem_kw)
    mem.start()
    mem1 = None
    if hasattr(dut, "mem1__address"):  # MemoryPorts = 2: a second model for the write master
        mem1 = AvalonMemoryModel(dut, "mem1__", dut.clk, dut.rst, memory, rng=random.Random(seed + 2), **mem_kw)
        mem1.start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return Bench(dut, csr, mem, memory, rng, mem1)
