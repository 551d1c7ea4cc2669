"""Benchmark: 3x3 and 1x1 convolutions, 64 -> 64 channels, 56x56 output, in RTL simulation.

Runs each layer as a layer program (``dlproc.compiler.layerprog``) on the Verilated processor through the
native harness (``dlproc.sim.harness.NativeSim``) with the configuration's DDR model, checks the
output bit for bit against the ISA-level simulator and the golden model, and prints

    cycles (start to done, DMA included), MACs, utilization = MACs / (cycles x ConvThreadNumber),
    the planner's estimate, DMA bytes, and the simulation speed (cycles per wall-clock second).

Configurations: ConvThreadNumber 64 (C = 8) with the default DDR model and 128-bit memory, and the
``de10nano_int8`` preset. Targets (issue 4): >= 85 % for 3x3, >= 75 % for 1x1.

    python benchmarks/bench_conv_layers.py [--config c8|de10nano|all] [--layer 3x3|1x1|all] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dlproc.config import ProcessorConfig
from dlproc.targets.golden import ops
from dlproc.compiler.layerprog import ConvLayer, build_conv_program
from dlproc.targets.isasim import run_on_isasim
from dlproc.hardware.numerics import requantize

TARGETS = {"3x3": 0.85, "1x1": 0.75}


def configs() -> dict[str, ProcessorConfig]:
    c8 = ProcessorConfig()
    c8.set_module_property("conv", "ConvThreadNumber", 64)
    return {"c8": c8, "de10nano": ProcessorConfig.preset("de10nano_int8")}


def layer(k: int, seed: int = 0) -> tuple[ConvLayer, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (64, 56, 56), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, k, k), dtype=np.int8)
    bias = rng.integers(-50000, 50000, 64).astype(np.int32)
    mult = rng.integers(1 << 14, 1 << 15, 64)
    shift = np.full(64, 22 if k == 3 else 19)
    return ConvLayer(w, bias, mult, shift, zp_in=3, zp_out=-5, act_min=-5, pads=k // 2), x


def reference(lay: ConvLayer, x: np.ndarray) -> np.ndarray:
    acc = ops.conv2d(x[None], lay.weight, lay.bias, lay.stride, lay.pads, lay.dilation, lay.groups, lay.zp_in)[0]
    return requantize(acc, lay.mult.reshape(-1, 1, 1), lay.shift.reshape(-1, 1, 1), lay.zp_out, lay.act_min,
                      lay.act_max)


def bench(name: str, cfg: ProcessorConfig, k: int) -> dict:
    from dlproc.sim.harness import NativeSim

    lay, x = layer(k)
    prog = build_conv_program(cfg, lay, x)
    ref = reference(lay, x)
    isa_out, isa_res = run_on_isasim(prog)
    t0 = time.perf_counter()
    sim = NativeSim(cfg, ddr_size=max(64 << 20, -(-prog.dma_limit // 4096) * 4096))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out, res = sim.run_layer_program(prog, max_cycles=50_000_000)
    wall = time.perf_counter() - t0
    threads = cfg.conv_c ** 2
    macs = prog.plan.macs
    row = {
        "config": name, "layer": f"{k}x{k}", "C": cfg.conv_c, "cycles": res.hw_cycles, "run_cycles": res.cycles,
        "status": res.status, "error_code": res.error_code, "macs": macs,
        "utilization": macs / (res.hw_cycles * threads) if res.hw_cycles else 0.0,
        "estimated_cycles": prog.plan.estimated_cycles,
        "estimated_utilization": macs / (prog.plan.estimated_cycles * threads),
        "ideal_cycles": -(-macs // threads),
        "dma_read_bytes": res.ddr.read_bytes, "dma_write_bytes": res.ddr.write_bytes,
        "dma_bus_bytes": (res.ddr.read_beats + res.ddr.write_beats) * cfg.memory_data_bytes,
        "dma_bus_busy_cycles": res.ddr.busy_cycles, "planned_dma_bytes": prog.plan.dma_bytes,
        "isa_dma_bytes": isa_res.dma_read_bytes + isa_res.dma_write_bytes + isa_res.fetch_bytes,
        "sim_cycles_per_s": res.cycles / wall if wall else 0.0, "sim_wall_s": wall, "build_s": build_s,
        "tile": prog.plan.tile, "group": prog.plan.group, "order": prog.plan.order, "weights": prog.plan.weights,
        "steps": prog.plan.steps, "instructions": prog.insn_count,
        "rtl_matches_isa": bool(np.array_equal(out, isa_out)), "isa_matches_golden": bool(np.array_equal(isa_out, ref)),
        "target": TARGETS[f"{k}x{k}"],
    }
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="all", choices=["c8", "de10nano", "all"])
    ap.add_argument("--layer", default="all", choices=["3x3", "1x1", "all"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cfgs = configs()
    rows = []
    for name, cfg in cfgs.items():
        if args.config not in ("all", name):
            continue
        for k in (3, 1):
            if args.layer not in ("all", f"{k}x{k}"):
                continue
            row = bench(name, cfg, k)
            rows.append(row)
            if not args.json:
                ok = "PASS" if row["utilization"] >= row["target"] else "MISS"
                print(f"{name:9s} {row['layer']} C={row['C']:2d}: {row['cycles']:>9,} cycles  {row['macs']:>12,} MACs  "
                      f"util {row['utilization']:6.1%} (target {row['target']:.0%} {ok}; planner estimate "
                      f"{row['estimated_utilization']:.1%}, ideal {row['ideal_cycles']:,} cycles)")
                print(f"          DMA read {row['dma_read_bytes']:,} B, write {row['dma_write_bytes']:,} B (enabled); "
                      f"bus beats x B {row['dma_bus_bytes']:,} B (planned {row['planned_dma_bytes']:,} B), bus busy {row['dma_bus_busy_cycles']:,} cycles; "
                      f"tile {row['tile']} group {row['group']} {row['order']} weights {row['weights']}, "
                      f"{row['steps']} steps, {row['instructions']} instructions")
                print(f"          sim {row['sim_cycles_per_s'] / 1e6:.2f} M cycles/s ({row['sim_wall_s']:.1f} s run, "
                      f"{row['build_s']:.0f} s build/cache); status {row['status']:#x} code {row['error_code']}; "
                      f"RTL == ISA sim: {row['rtl_matches_isa']}, ISA sim == golden: {row['isa_matches_golden']}",
                      flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["rtl_matches_isa"] and r["isa_matches_golden"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
