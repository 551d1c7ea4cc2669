"""cocotb bench used by benchmarks/bench_sim_speed.py: clocks a layer program for a fixed number of
cycles with the Python Avalon memory model (fixed latency, no random stalls) and writes the speed.

Parameters come in ``DLPROC_SPEED_META`` (JSON: image file, addresses, cycles, mem_size) and the
figures go to the JSON file ``DLPROC_SPEED_OUT``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

from dlproc.sim.cocotb.common import mask, setup


@cocotb.test(timeout_time=1, timeout_unit="sec")
async def clock_layer_program(dut):
    meta = json.loads(os.environ["DLPROC_SPEED_META"])
    bench = await setup(dut, meta["mem_size"], wait_prob=0.0, latency=(meta.get("latency", 40),) * 2,
                        gap_prob=0.0, max_outstanding=8)
    image = Path(meta["image"]).read_bytes()
    bench.memory[meta["dram_base"]:meta["dram_base"] + len(image)] = image
    for name, value in (("INSN_BASE", meta["insn_base"]), ("INSN_COUNT", meta["insn_count"]),
                        ("DMA_BASE", meta["dma_base"]), ("DMA_LIMIT", min(meta["dma_limit"], 0xFFFFFFFF))):
        await bench.write(name, value)
    await bench.write("CTRL", mask("CTRL", "START") | mask("CTRL", "IRQ_EN"))
    cycles = int(meta["cycles"])
    w0, c0 = time.monotonic(), time.process_time()
    await ClockCycles(dut.clk, cycles)
    wall, cpu = time.monotonic() - w0, time.process_time() - c0
    assert bench.mem.errors == [], bench.mem.errors
    assert bench.mem.read_beats > 0
    Path(os.environ["DLPROC_SPEED_OUT"]).write_text(json.dumps(
        {"cycles": cycles, "wall_cps": cycles / wall, "cpu_cps": cycles / cpu, "read_beats": bench.mem.read_beats}))
