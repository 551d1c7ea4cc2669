"""Benchmark: a 3x3 depthwise layer (128 channels, 56x56, stride 1 and 2) alone in RTL on both presets.

    python benchmarks/bench_depthwise.py [--presets de10nano_int8,arria10soc_int8] [--strides 1,2] [--json]

Each layer runs as a layer program (``dlproc.compiler.layerprog``, the conv engine's depthwise
mode) on the Verilated preset through the native harness with the configuration's DDR model; its
output is checked bit for bit against the ISA-level simulator and the golden model. Printed per
layer: RTL cycles (start to done, DMA included), the bound max(MACs / C^2, DDR bytes / DDR bytes
per cycle) with DDR bytes = input + output + weights + parameters once each, the ratio to the
bound (issue 17's target: <= 1.15 at stride 1) and, with MemoryPorts 2 (reads and writes on a port
each), the ratio to the tighter per-port bound max(MACs / C^2, larger side / bytes per cycle), the estimator's cycles against the RTL, and the
plan (tile, strip height, links).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dlproc.compiler.layerprog import ConvLayer, build_conv_program
from dlproc.config import ProcessorConfig
from dlproc.estimate import simulate_program
from dlproc.hardware import isa
from dlproc.hardware.numerics import requantize
from dlproc.targets.golden import ops
from dlproc.targets.isasim import run_on_isasim

TARGET = 1.15
CHANNELS, SIDE = 128, 56


def depthwise_layer(stride: int, seed: int = 0) -> tuple[ConvLayer, np.ndarray]:
    """128 channels, 3x3, pad 1; the output is 56x56 (the input 56x56 at stride 1, 112x112 at 2)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (CHANNELS, SIDE * stride, SIDE * stride), dtype=np.int8)
    w = rng.integers(-128, 128, (CHANNELS, 1, 3, 3), dtype=np.int8)
    return ConvLayer(w, rng.integers(-20000, 20000, CHANNELS).astype(np.int32), rng.integers(1 << 14, 1 << 15, CHANNELS),
                     np.full(CHANNELS, 16), zp_in=2, zp_out=-3, act_min=-3, act_max=90, stride=stride, pads=1,
                     groups=CHANNELS), x


def reference(lay: ConvLayer, x: np.ndarray) -> np.ndarray:
    acc = ops.conv2d(x[None], lay.weight, lay.bias, lay.stride, lay.pads, lay.dilation, lay.groups, lay.zp_in)[0]
    return requantize(acc, lay.mult.reshape(-1, 1, 1), lay.shift.reshape(-1, 1, 1), lay.zp_out, lay.act_min,
                      lay.act_max)


def bound_cycles(cfg: ProcessorConfig, lay: ConvLayer, x: np.ndarray, out_shape: tuple[int, ...]) -> dict:
    """Compute and DDR times of the layer (module docstring)."""
    macs = int(np.prod(out_shape)) * 9
    ddr_bytes = x.size + int(np.prod(out_shape)) + lay.weight.size + CHANNELS * 9
    compute = -(-macs // cfg.conv_c ** 2)
    ddr = -(-ddr_bytes // cfg.ddr_bytes_per_cycle)
    # With MemoryPorts 2 reads and writes have a port each: the DDR time is the larger side.
    reads = ddr_bytes - int(np.prod(out_shape))
    per_port = -(-max(reads, ddr_bytes - reads) // cfg.ddr_bytes_per_cycle) if cfg.memory_ports == 2 else ddr
    return {"macs": macs, "ddr_bytes": ddr_bytes, "compute_cycles": compute, "ddr_cycles": ddr,
            "bound": max(compute, ddr), "port_bound": max(compute, per_port)}


def bench(preset: str, stride: int) -> dict:
    from dlproc.sim.harness import NativeSim

    cfg = ProcessorConfig.preset(preset)
    lay, x = depthwise_layer(stride)
    prog = build_conv_program(cfg, lay, x)
    ref = reference(lay, x)
    isa_out, _ = run_on_isasim(prog)
    est = simulate_program(cfg, prog.instructions, insn_base=prog.insn_base).cycles
    t0 = time.perf_counter()
    with NativeSim(cfg, ddr_size=max(64 << 20, -(-prog.dma_limit // 4096) * 4096)) as sim:
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out, res = sim.run_layer_program(prog, max_cycles=50_000_000)
        wall = time.perf_counter() - t0
    b = bound_cycles(cfg, lay, x, ref.shape)
    convs = [i for i in prog.instructions if isinstance(i, isa.Conv)]
    return {
        "preset": preset, "stride": stride, "C": cfg.conv_c, "cycles": res.hw_cycles, "error_code": res.error_code,
        **b, "ratio": res.hw_cycles / b["bound"], "port_ratio": res.hw_cycles / b["port_bound"], "target": TARGET if stride == 1 else None,
        "estimated_cycles": est, "estimate_vs_rtl": est / res.hw_cycles,
        "utilization": b["macs"] / (res.hw_cycles * cfg.conv_c ** 2),
        "dma_read_bytes": res.ddr.read_bytes, "dma_write_bytes": res.ddr.write_bytes,
        "plan": prog.plan.note, "tile": prog.plan.tile, "steps": prog.plan.steps, "convs": len(convs),
        "dw_rows": sorted({c.dw_rows for c in convs}),
        "rtl_matches_isa": bool(np.array_equal(out, isa_out)), "isa_matches_golden": bool(np.array_equal(isa_out, ref)),
        "sim_wall_s": wall, "build_s": build_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="de10nano_int8,arria10soc_int8")
    ap.add_argument("--strides", default="1,2")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for preset in args.presets.split(","):
        for stride in (int(s) for s in args.strides.split(",")):
            row = bench(preset, stride)
            rows.append(row)
            if args.json:
                continue
            verdict = "" if row["target"] is None else f" (target <= {row['target']:.2f}: {'PASS' if row['ratio'] <= row['target'] else 'MISS'})"
            print(f"{preset:16s} dw3x3 s{stride} {CHANNELS}ch -> {SIDE}x{SIDE}, C={row['C']}: {row['cycles']:>9,} RTL cycles "
                  f"= {row['ratio']:.3f}x bound {row['bound']:,}{verdict}; compute {row['compute_cycles']:,}, DDR "
                  f"{row['ddr_cycles']:,} ({row['ddr_bytes']:,} B); MAC utilization {row['utilization']:.1%}"
                  + (f"; {row['port_ratio']:.3f}x the per-port bound {row['port_bound']:,}"
                     if row["port_bound"] != row["bound"] else ""))
            print(f"{'':16s} estimate {row['estimated_cycles']:,} = {row['estimate_vs_rtl']:.3f}x RTL; DMA read "
                  f"{row['dma_read_bytes']:,} B, write {row['dma_write_bytes']:,} B; tile {row['tile']}, {row['steps']} steps, "
                  f"{row['convs']} CONVs, dw_rows {row['dw_rows']}; {row['plan']}")
            print(f"{'':16s} RTL == ISA sim: {row['rtl_matches_isa']}, ISA sim == golden: {row['isa_matches_golden']}; "
                  f"sim {row['sim_wall_s']:.1f} s, build/cache {row['build_s']:.0f} s", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["rtl_matches_isa"] and r["isa_matches_golden"] and r["error_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
