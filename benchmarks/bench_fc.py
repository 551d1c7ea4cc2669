"""Benchmark: a batch-1 fully connected layer 1024 -> 1000 on the FC engine, in RTL simulation.

Runs the layer as a layer program (``dlproc.compiler.layerprog.build_fc_program``) on the Verilated processor
(``dlproc.sim.harness.NativeSim``, the preset's DDR model), checks the output bit for bit against the
ISA-level simulator and the golden model, and prints

    cycles (START to DONE: x load, every weight tile's LOAD, FC and STORE), the memory-bound minimum
    = weight bytes / DDRBytesPerCycle of the preset, their ratio, and the planner's estimate.

A batch-1 FC uses every weight once, so it cannot be faster than the DDR delivers the weights; the
FC engine consumes F = FCThreadNumber >= DDRBytesPerCycle weight bytes per cycle, and the loads of
tile k+1 overlap the FC of tile k, so the ratio measures how close the schedule gets to the memory.

    python benchmarks/bench_fc.py [--preset arria10soc_int8|de10nano_int8|all] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dlproc.config import ProcessorConfig
from dlproc.targets.golden import ops
from dlproc.compiler.layerprog import FcLayer, build_fc_program
from dlproc.targets.isasim import run_on_isasim
from dlproc.hardware.numerics import requantize

PRESETS = ("arria10soc_int8", "de10nano_int8")
N_IN, N_OUT = 1024, 1000


def layer(seed: int = 0) -> tuple[FcLayer, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (N_IN, 1, 1), dtype=np.int8)
    w = rng.integers(-128, 128, (N_OUT, N_IN), dtype=np.int8)
    bias = rng.integers(-(1 << 20), 1 << 20, N_OUT).astype(np.int32)
    mult, shift = rng.integers(1 << 13, 1 << 15, N_OUT), rng.integers(26, 30, N_OUT)
    return FcLayer(w, bias, mult, shift, None, zp_in=-3, zp_out=-128, act_min=-128, act_max=127), x


def run(preset: str) -> dict:
    from dlproc.sim.harness import NativeSim

    cfg = ProcessorConfig.preset(preset)
    fc, x = layer()
    prog = build_fc_program(cfg, fc, x)
    ref = requantize(ops.fully_connected(x.reshape(1, -1), fc.weight, fc.bias, fc.zp_in)[0], fc.mult, fc.shift,
                     fc.zp_out, fc.act_min, fc.act_max)
    isa_out, _ = run_on_isasim(prog)
    assert (isa_out.reshape(-1) == ref).all(), "ISA simulator differs from the golden model"
    t0 = time.time()
    with NativeSim(cfg, ddr_size=1 << 22) as sim:
        built = time.time()
        out, res = sim.run_layer_program(prog, max_cycles=5_000_000)
        ran = time.time()
    assert res.error_code == 0, f"error code {res.error_code}"
    assert (out.reshape(-1) == ref).all(), "RTL differs from the golden model"
    weight_bytes = N_IN * N_OUT
    bound = weight_bytes / cfg.ddr_bytes_per_cycle
    return {
        "preset": preset, "fc_lanes": cfg.get_module_property("fc", "FCThreadNumber"),
        "ddr_bytes_per_cycle": cfg.ddr_bytes_per_cycle, "cycles": res.hw_cycles, "memory_bound": bound,
        "ratio": res.hw_cycles / bound, "estimate": prog.plan.estimated_cycles, "tiles": prog.plan.steps,
        "dma_bytes": prog.plan.dma_bytes, "build_s": round(built - t0, 1), "sim_s": round(ran - built, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="all", choices=(*PRESETS, "all"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run(p) for p in (PRESETS if args.preset == "all" else (args.preset,))]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(f"{r['preset']}: FC {N_IN} -> {N_OUT}, FCThreadNumber {r['fc_lanes']}, "
              f"DDR {r['ddr_bytes_per_cycle']} B/cycle, {r['tiles']} tiles")
        print(f"  RTL cycles          {r['cycles']:9d}")
        print(f"  memory-bound min    {r['memory_bound']:9.0f}  (weight bytes {N_IN * N_OUT} / "
              f"{r['ddr_bytes_per_cycle']} B/cycle)")
        print(f"  ratio               {r['ratio']:9.3f}")
        print(f"  planner estimate    {r['estimate']:9d}")
        print(f"  (build {r['build_s']} s, simulation {r['sim_s']} s)")


if __name__ == "__main__":
    main()
