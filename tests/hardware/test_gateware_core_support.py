"""Shared pieces of the core-gateware pysim tests (no tests here).

* :func:`small_hw`: a tiny configuration (C = 4, 64-bit memory, small buffers) that keeps the
  Amaranth simulator fast.
* :class:`AvalonMemory`: a Python model of an Avalon-MM pipelined burst slave answering the
  processor's memory master, with random waitrequest and random read latency. It checks the
  protocol (signals held under waitrequest, write bursts not interleaved) and logs every
  accepted command, so tests can assert that no transaction left the DMA window.
* :func:`run_program`: load a program and data into the model, configure the CSRs, START, and
  wait until BUSY drops; returns the CSR values and the simulator context for peeking memories.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from amaranth.sim import Simulator

from dlproc.hardware import regmap
from dlproc.hardware.gateware import DlprocTop
from dlproc.hardware.isa import HardwareParams

REG = regmap.REG


def small_hw(**overrides) -> HardwareParams:
    params = dict(
        c=4, mem_data_width=64, inp_depth=64, wgt_depth=16, prm_depth=4, out_depth=64,
        max_burst=4, queue_depth=3, profile_depth=4, read_credits=8, config_hash64=0x0123456789ABCDEF,
    )
    params.update(overrides)
    return HardwareParams(**params)


class ProtocolError(AssertionError):
    pass


@dataclass
class AvalonMemory:
    size: int
    seed: int = 1
    wait_prob: float = 0.3
    min_latency: int = 1
    max_latency: int = 5
    data: bytearray = field(init=False)
    commands: list = field(default_factory=list)  # (kind, addr, burstcount)
    write_beats: list = field(default_factory=list)  # (addr, data int, byteenable)

    def __post_init__(self):
        self.data = bytearray(self.size)
        self.rng = random.Random(self.seed)

    def load(self, addr: int, payload: bytes) -> None:
        self.data[addr : addr + len(payload)] = payload

    async def serve(self, ctx, bus, width_bits: int, stop=lambda: False) -> None:
        """Answer the master until ``stop()`` becomes true (checked only while the bus is idle)."""
        nbytes = width_bits // 8
        cycle = 0
        responses = []  # (due cycle, addr)
        burst = None  # (addr, count, index) of the write burst in progress
        held = None  # (signal values) of a command stalled by waitrequest
        while True:
            # Return read data (in order, at most one beat per cycle).
            if responses and responses[0][0] <= cycle:
                _, addr = responses.pop(0)
                ctx.set(bus.readdata, int.from_bytes(self.data[addr : addr + nbytes], "little"))
                ctx.set(bus.readdatavalid, 1)
            else:
                ctx.set(bus.readdatavalid, 0)
            wait = 1 if self.rng.random() < self.wait_prob else 0
            ctx.set(bus.waitrequest, wait)
            read, write = ctx.get(bus.read), ctx.get(bus.write)
            addr, count = ctx.get(bus.address), ctx.get(bus.burstcount)
            if read and write:
                raise ProtocolError("read and write asserted together")
            if read or write:
                now = (read, write, addr, count, ctx.get(bus.writedata) if write else 0,
                       ctx.get(bus.byteenable) if write else 0)
                if held is not None and held != now:
                    raise ProtocolError(f"master changed {held} to {now} under waitrequest")
                held = now if wait else None
            elif held is not None:
                raise ProtocolError(f"master dropped a command under waitrequest: {held}")
            if read and burst is not None:
                raise ProtocolError("read issued inside a write burst")
            if (read or write) and not wait:
                if read:
                    if not 1 <= count <= 2 ** (len(bus.burstcount) - 1):
                        raise ProtocolError(f"bad burstcount {count}")
                    self.commands.append(("read", addr, count))
                    due = max(cycle + self.rng.randint(self.min_latency, self.max_latency),
                              responses[-1][0] + 1 if responses else 0)
                    for i in range(count):
                        responses.append((due + i, addr + i * nbytes))
                else:
                    if burst is None:
                        self.commands.append(("write", addr, count))
                        burst = [addr, count, 0]
                    beat_addr = burst[0] + burst[2] * nbytes
                    wdata, be = ctx.get(bus.writedata), ctx.get(bus.byteenable)
                    self.write_beats.append((beat_addr, wdata, be))
                    raw = wdata.to_bytes(nbytes, "little")
                    for b in range(nbytes):
                        if be >> b & 1:
                            self.data[beat_addr + b] = raw[b]
                    burst[2] += 1
                    if burst[2] == burst[1]:
                        burst = None
            await ctx.tick()
            cycle += 1
            if stop() and not responses and burst is None and held is None:
                return

async def csr_write(ctx, dut, name: str, value: int) -> None:
    ctx.set(dut.csr.address, REG[name].offset)
    ctx.set(dut.csr.writedata, value)
    ctx.set(dut.csr.write, 1)
    await ctx.tick()
    ctx.set(dut.csr.write, 0)


async def csr_read(ctx, dut, name_or_offset) -> int:
    offset = REG[name_or_offset].offset if isinstance(name_or_offset, str) else name_or_offset
    ctx.set(dut.csr.address, offset)
    ctx.set(dut.csr.read, 1)
    await ctx.tick()
    ctx.set(dut.csr.read, 0)
    return ctx.get(dut.csr.readdata)


def ctrl(**bits) -> int:
    value = 0
    for name, bit in bits.items():
        value |= int(bit) << REG["CTRL"].field(name.upper()).lsb
    return value


def status_fields(status: int) -> dict:
    reg = REG["STATUS"]
    return {f.name.lower(): (status >> f.lsb) & ((1 << f.width) - 1) for f in reg.fields}


def _as_int(value) -> int:
    """A memory row as a plain unsigned int (layout-shaped rows come back as data.Const)."""
    return value.as_bits() if hasattr(value, "as_bits") else int(value)


@dataclass
class RunResult:
    status: dict
    regs: dict
    irq: int
    cycles_waited: int
    mem: AvalonMemory
    buffers: dict  # name -> list of word ints
    profile: list


@dataclass
class Case:
    """One program run: the program, the memory image and the CSR settings."""

    program: bytes
    mem_size: int = 4096
    insn_base: int = 0x100
    dma_base: int = 0
    dma_limit: int | None = None
    preload: dict | None = None
    out_init: dict | None = None
    max_cycles: int = 3000
    seed: int = 1
    wait_prob: float = 0.3
    abort_after: int | None = None
    insn_count: int | None = None
    latency: tuple[int, int] = (1, 5)  # read latency range of the memory model, in cycles


READ_REGS = ("ERR_INSN", "ERR_ADDR", "CYCLES_LO", "FETCHED", "PROF_COUNT")


def run_batch(hw: HardwareParams, cases: dict[str, Case]) -> dict[str, RunResult]:
    """Run every case, one after the other, on ONE :class:`DlprocTop` in one simulation.

    Building the simulator costs more than most runs, so tests share it; START clears the
    datapath between runs and the host zeroes the buffers and profile entries, so each case
    starts from the same state as on a fresh processor.
    """
    dut = DlprocTop(hw)
    holder = {"mem": AvalonMemory(16)}
    results: dict[str, RunResult] = {}

    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def memory(ctx):
        # The model is swapped between cases (the bus is quiet then), so serve whichever is current.
        while True:
            current = holder["mem"]
            await current.serve(ctx, dut.mem, hw.mem_data_width, stop=lambda: holder["mem"] is not current)

    async def host(ctx):
        for name, case in cases.items():
            mem = AvalonMemory(case.mem_size, seed=case.seed, wait_prob=case.wait_prob,
                               min_latency=case.latency[0], max_latency=case.latency[1])
            mem.load(case.insn_base, case.program)
            for addr, payload in (case.preload or {}).items():
                mem.load(addr, payload)
            holder["mem"] = mem
            for buf in ("INP", "WGT", "PRM", "OUT"):
                memory_ = dut.buffers.mem[buf]
                for i in range(hw.depth(buf)):
                    ctx.set(memory_.data[i], memory_.shape.from_bits((case.out_init or {}).get(i, 0) if buf == "OUT" else 0))
            for i in range(hw.profile_depth):
                ctx.set(dut.profile.mem.data[i], 0)
            results[name] = await _run_one(ctx, dut, hw, case, mem)

    sim.add_testbench(memory, background=True)
    sim.add_testbench(host)
    sim.run()
    return results


async def _run_one(ctx, dut, hw, case: Case, mem: AvalonMemory) -> RunResult:
    count = len(case.program) // 32 if case.insn_count is None else case.insn_count
    await csr_write(ctx, dut, "INSN_BASE", case.insn_base)
    await csr_write(ctx, dut, "INSN_COUNT", count)
    await csr_write(ctx, dut, "DMA_BASE", case.dma_base)
    await csr_write(ctx, dut, "DMA_LIMIT", case.mem_size if case.dma_limit is None else case.dma_limit)
    await csr_write(ctx, dut, "CTRL", ctrl(start=1, irq_en=1))
    waited = 0
    abort_pending = case.abort_after is not None
    while True:
        await ctx.tick().repeat(8)
        waited += 8
        if abort_pending and waited >= case.abort_after:
            await csr_write(ctx, dut, "CTRL", ctrl(abort=1, irq_en=1))
            abort_pending = False
        status = status_fields(await csr_read(ctx, dut, "STATUS"))
        if not status["busy"] or waited > case.max_cycles:
            break
    # Once BUSY is low the bus must stay quiet: no unit may start a transaction.
    accepted = len(mem.commands)
    await ctx.tick().repeat(32)
    if len(mem.commands) != accepted:
        raise ProtocolError(f"bus commands after BUSY dropped: {mem.commands[accepted:]}")
    irq = ctx.get(dut.irq)
    regs = {name: await csr_read(ctx, dut, name) for name in READ_REGS}
    regs["CYCLES_HI"] = await csr_read(ctx, dut, "CYCLES_HI")
    regs["PROF"] = []
    for index in range(hw.profile_depth):
        await csr_write(ctx, dut, "PROF_INDEX", index)
        lo = await csr_read(ctx, dut, "PROF_DATA_LO")
        regs["PROF"].append(lo | await csr_read(ctx, dut, "PROF_DATA_HI") << 32)
    buffers = {
        name: [_as_int(ctx.get(dut.buffers.mem[name].data[i])) for i in range(hw.depth(name))]
        for name in ("INP", "WGT", "PRM", "OUT")
    }
    profile = [ctx.get(dut.profile.mem.data[i]) for i in range(hw.profile_depth)]
    return RunResult(status, regs, irq, waited, mem, buffers, profile)


def run_program(hw: HardwareParams, program: bytes, **settings) -> RunResult:
    """Run one program on a fresh processor (see :class:`Case` for the settings)."""
    return run_batch(hw, {"case": Case(program, **settings)})["case"]
