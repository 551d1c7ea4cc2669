"""Simulation speed on the ``de10nano_int8`` preset: native harness vs cocotb vs Amaranth pysim.

All three run the same design (the processor generated for the preset) on the same workload, a
3x3 convolution layer program from ``dlproc.compiler.layerprog`` (LOAD/CONV/STORE with DMA), and report
simulated clock cycles per second, both per wall-clock second and per CPU second of the simulating
process (the machine is shared, so the CPU figure is the stable one):

* native: ``NativeSim`` (Verilator .so + C++ DDR model, no Python per cycle), whole program;
* cocotb: the cocotb 2.1 runner on Verilator with the Python Avalon memory model
  (``sim/cocotb/avalon_mem.py``, no random stalls), first ``--cocotb-cycles`` cycles of the program;
* pysim: Amaranth's own simulator with a Python memory responder, first ``--pysim-cycles`` cycles.

    python benchmarks/bench_sim_speed.py [--skip-cocotb] [--skip-pysim] [--channels 64 --size 28]
                                         [--config de10nano_int8|c4] [--repeats 3]

``--config c4`` runs the small C = 4, 64-bit test configuration (``tests/layerprog_cases.py``
``small_config(4, width=64)``) instead of the preset. Set ``DLPROC_NATIVE=1`` to build the native
harness with ``-march=native`` (not portable; on the current design no faster, see
docs/simulation.md "Speed"). The figures vary with the load on a shared machine; compare builds
by cycles per CPU second in interleaved runs, or by instructions per cycle under callgrind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# OpenBLAS (under numpy) otherwise keeps worker threads spinning after the workload is built,
# which costs CPU time on the two-core machine and inflates the per-CPU-second figures' denominator.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from dlproc.config import ProcessorConfig  # noqa: E402
from dlproc.compiler.layerprog import ConvLayer, build_conv_program  # noqa: E402

PRESET = "de10nano_int8"
CONFIGS = (PRESET, "c4")


def bench_config(name: str) -> ProcessorConfig:
    """The preset, or the C = 4 test configuration (same as ``small_config(4, width=64)`` in tests)."""
    if name == PRESET:
        return ProcessorConfig.preset(PRESET)
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", 16)
    cfg.set_module_property("conv", "InputMemorySize", [16, 16, 4])
    cfg.set_module_property("conv", "OutputMemorySize", [10, 10, 4])
    cfg.set_module_property("conv", "WeightMemorySize", 4096)
    cfg.set_module_property("conv", "ParameterMemorySize", 32)
    cfg.update([("top", "MemoryDataWidth", 64), ("top", "DDRBytesPerCycle", 8)])
    return cfg


def workload(cfg: ProcessorConfig, channels: int, size: int):
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (channels, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (channels, channels, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-999, 999, channels).astype(np.int32), np.full(channels, 1 << 12),
                      np.full(channels, 22), None, pads=1)
    return layer, x, build_conv_program(cfg, layer, x)


def bench_native(cfg: ProcessorConfig, prog, repeats: int = 3) -> dict:
    from dlproc.sim.harness import NativeSim

    t0 = time.monotonic()
    sim = NativeSim(cfg, ddr_size=max(64 << 20, prog.dma_limit + (1 << 20)))
    setup_s = time.monotonic() - t0
    sim.mem_write(prog.dram_base, prog.image)
    best = {"wall": 0.0, "cpu": 0.0}
    for _ in range(repeats):
        w0, c0 = time.monotonic(), time.process_time()
        res = sim.run_program(prog.insn_base, prog.insn_count, prog.dma_base, prog.dma_limit, max_cycles=50_000_000)
        wall, cpu = time.monotonic() - w0, time.process_time() - c0
        if not res.ok:
            raise SystemExit(f"native run failed: {res}")
        best["wall"] = max(best["wall"], res.cycles / wall)
        best["cpu"] = max(best["cpu"], res.cycles / cpu)
    return {"cycles": res.cycles, "wall_cps": best["wall"], "cpu_cps": best["cpu"],
            "build_s": sim.build.seconds, "build_cached": sim.build.cached, "setup_s": setup_s,
            "huge_text": sim.huge_text}


def bench_cocotb(cfg: ProcessorConfig, prog, cycles: int) -> dict:
    from dlproc.sim.cocotb import run_cocotb
    from dlproc.sim.harness import processor_verilog

    with tempfile.TemporaryDirectory(prefix="dlproc-bench-") as tmp:
        image = Path(tmp) / "image.bin"
        image.write_bytes(prog.image)
        meta = {"dram_base": prog.dram_base, "insn_base": prog.insn_base, "insn_count": prog.insn_count,
                "dma_base": prog.dma_base, "dma_limit": prog.dma_limit, "cycles": cycles,
                "image": str(image), "mem_size": prog.dma_limit + 4096, "latency": max(1, cfg.ddr_latency_cycles)}
        out = Path(tmp) / "speed.json"
        env = {"DLPROC_SPEED_META": json.dumps(meta), "DLPROC_SPEED_OUT": str(out)}
        t0 = time.monotonic()
        result = run_cocotb(processor_verilog(cfg), "dlproc_top", "dlproc.sim.cocotb.speed_bench", Path(tmp) / "run",
                            env, timeout_s=3600)
        total = time.monotonic() - t0
        figures = json.loads(out.read_text())
    figures.update(build_s=result.build.seconds, build_cached=result.build.cached, total_s=total)
    return figures


def bench_pysim(cfg: ProcessorConfig, prog, cycles: int) -> dict:
    from amaranth.sim import Simulator

    from dlproc.hardware import regmap
    from dlproc.hardware.gateware import DlprocTop

    t0 = time.monotonic()
    dut = DlprocTop(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    bus = cfg.memory_data_bytes
    mem = bytearray(prog.dma_limit + 4096)
    mem[prog.dram_base:prog.dram_base + len(prog.image)] = prog.image
    latency = cfg.ddr_latency_cycles
    timing = {}

    async def bench(ctx):
        async def csr_write(name, value):
            ctx.set(dut.csr.address, regmap.offset(name))
            ctx.set(dut.csr.writedata, value)
            ctx.set(dut.csr.write, 1)
            await ctx.tick()
            ctx.set(dut.csr.write, 0)

        for name, value in (("INSN_BASE", prog.insn_base), ("INSN_COUNT", prog.insn_count),
                            ("DMA_BASE", prog.dma_base), ("DMA_LIMIT", min(prog.dma_limit, 0xFFFFFFFF)),
                            ("CTRL", regmap.REG["CTRL"].field("START").mask | regmap.REG["CTRL"].field("IRQ_EN").mask)):
            await csr_write(name, value)
        pending: list[tuple[int, int]] = []   # (ready cycle, address) per beat
        wr_left, wr_addr = 0, 0
        w0, c0 = time.monotonic(), time.process_time()
        for n in range(cycles):
            ctx.set(dut.mem.waitrequest, 0)
            if pending and pending[0][0] <= n:
                _, addr = pending.pop(0)
                ctx.set(dut.mem.readdata, int.from_bytes(mem[addr:addr + bus], "little"))
                ctx.set(dut.mem.readdatavalid, 1)
            else:
                ctx.set(dut.mem.readdatavalid, 0)
            if ctx.get(dut.mem.read):
                addr, count = ctx.get(dut.mem.address), ctx.get(dut.mem.burstcount)
                start = max(n + latency, pending[-1][0] + 1 if pending else 0)
                pending.extend((start + i, addr + i * bus) for i in range(count))
            elif ctx.get(dut.mem.write):
                if wr_left == 0:
                    wr_addr, wr_left = ctx.get(dut.mem.address), ctx.get(dut.mem.burstcount)
                data, be = ctx.get(dut.mem.writedata), ctx.get(dut.mem.byteenable)
                raw = data.to_bytes(bus, "little")
                for lane in range(bus):
                    if (be >> lane) & 1:
                        mem[wr_addr + lane] = raw[lane]
                wr_addr += bus
                wr_left -= 1
            await ctx.tick()
        timing["wall"] = time.monotonic() - w0
        timing["cpu"] = time.process_time() - c0

    sim.add_testbench(bench)
    sim.run()
    return {"cycles": cycles, "wall_cps": cycles / timing["wall"], "cpu_cps": cycles / timing["cpu"],
            "elaborate_s": time.monotonic() - t0 - timing["wall"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--cocotb-cycles", type=int, default=20_000)
    ap.add_argument("--pysim-cycles", type=int, default=300)
    ap.add_argument("--skip-cocotb", action="store_true")
    ap.add_argument("--skip-pysim", action="store_true")
    ap.add_argument("--config", choices=CONFIGS, default=PRESET)
    ap.add_argument("--repeats", type=int, default=3, help="native runs of the program (the best is reported)")
    args = ap.parse_args(argv)

    cfg = bench_config(args.config)
    layer, x, prog = workload(cfg, args.channels, args.size)
    print(f"{args.config}: C={cfg.conv_c}, {cfg.memory_data_width}-bit memory, DDR {cfg.ddr_bytes_per_cycle} B/cycle, "
          f"latency {cfg.ddr_latency_cycles}; workload 3x3 conv {args.channels}->{args.channels} on "
          f"{args.size}x{args.size}, {prog.insn_count} instructions; DLPROC_NATIVE={os.environ.get('DLPROC_NATIVE', '0')}")
    rows = []
    native = bench_native(cfg, prog, args.repeats)
    rows.append(("native harness (Verilator .so + C++ DDR)", native))
    print(f"native: {native['cycles']} cycles, {native['wall_cps'] / 1e6:.3f} M cycles/s wall, "
          f"{native['cpu_cps'] / 1e6:.3f} M cycles/CPU-s (build {native['build_s']:.0f} s, "
          f"{'cached' if native['build_cached'] else 'fresh'})", flush=True)
    huge = native["huge_text"]
    print(f"native: model code on huge pages: {f'{huge.huge_kb} kB' if huge.huge_kb else 'no (' + huge.reason + ')'}",
          flush=True)
    if not args.skip_cocotb:
        cocotb_fig = bench_cocotb(cfg, prog, args.cocotb_cycles)
        rows.append(("cocotb 2.1 + Verilator (Python memory model)", cocotb_fig))
        print(f"cocotb: {cocotb_fig['cycles']} cycles, {cocotb_fig['wall_cps'] / 1e3:.1f} k cycles/s wall, "
              f"{cocotb_fig['cpu_cps'] / 1e3:.1f} k cycles/CPU-s (build {cocotb_fig['build_s']:.0f} s)", flush=True)
    if not args.skip_pysim:
        pysim = bench_pysim(cfg, prog, args.pysim_cycles)
        rows.append(("Amaranth pysim (Python memory responder)", pysim))
        print(f"pysim: {pysim['cycles']} cycles, {pysim['wall_cps']:.1f} cycles/s wall, "
              f"{pysim['cpu_cps']:.1f} cycles/CPU-s (elaboration {pysim['elaborate_s']:.1f} s)", flush=True)
    print("\n| simulator | cycles/s (wall) | cycles/CPU-s |\n|---|---|---|")
    for name, fig in rows:
        print(f"| {name} | {fig['wall_cps']:,.0f} | {fig['cpu_cps']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
