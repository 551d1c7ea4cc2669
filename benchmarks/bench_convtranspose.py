"""Benchmark: a transposed convolution (2x learned upsampling) in RTL simulation.

ConvTranspose 32 -> 16 channels, 4x4 kernel, stride 2, pads 1, on a 28x28 input (56x56 output), on
the ``de10nano_int8`` preset (segmentation block on). The layer runs as its layer program
(``layerprog.build_convtranspose_program``: four output-phase convolutions with 2x2 sub-kernels on
the conv engine, scattered STOREs) on the Verilated processor through ``NativeSim`` with the
configuration's DDR model; the output is checked bit for bit against the ISA-level simulator and
the golden model (``golden.ops.conv_transpose2d``).

For comparison it also runs the zero-insertion formulation of the same layer as an ordinary
convolution (the input with a zero-point pixel between every two pixels, padded by k-1-p = 2, the
flipped 4x4 kernel, stride 1) -- what a zero-insertion mode of the segmentation block would feed
the conv engine -- and checks that it gives the same output.

    python benchmarks/bench_convtranspose.py [--config de10nano|c4] [--json] [--skip-zero-insertion]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dlproc.config import ProcessorConfig
from dlproc.targets.golden import ops
from dlproc.targets.golden.windows import zero_insert
from dlproc.compiler.layerprog import ConvLayer, ConvTransposeLayer, build_conv_program, build_convtranspose_program
from dlproc.compiler.planners.convtranspose import convtranspose_phases
from dlproc.targets.isasim import run_on_isasim
from dlproc.hardware.numerics import requantize


def configs() -> dict[str, ProcessorConfig]:
    c4 = ProcessorConfig()
    c4.set_module_property("conv", "ConvThreadNumber", 16)
    return {"de10nano": ProcessorConfig.preset("de10nano_int8"), "c4": c4}


def layer(seed: int = 0) -> tuple[ConvTransposeLayer, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (32, 28, 28), dtype=np.int8)
    w = rng.integers(-128, 128, (16, 32, 4, 4), dtype=np.int8)
    bias = rng.integers(-50000, 50000, 16).astype(np.int32)
    mult = rng.integers(1 << 14, 1 << 15, 16)
    return ConvTransposeLayer(w, bias, mult, np.full(16, 21), zp_in=3, zp_out=-5, act_min=-5, stride=2, pads=1), x


def reference(lay: ConvTransposeLayer, x: np.ndarray) -> np.ndarray:
    acc = ops.conv_transpose2d(x[None], lay.weight, lay.bias, lay.stride, lay.pads, lay.output_padding,
                               lay.dilation, lay.groups, lay.zp_in)[0]
    return requantize(acc, lay.mult.reshape(-1, 1, 1), lay.shift.reshape(-1, 1, 1), lay.zp_out, lay.act_min,
                      lay.act_max)


def zero_insertion_conv(lay: ConvTransposeLayer, x: np.ndarray) -> tuple[ConvLayer, np.ndarray]:
    """The same layer as a stride-1 conv over the zero-inserted, padded input (k-1-p = 2 per side)."""
    xz = zero_insert(x[None], (2, 2), (2, 2, 2, 2), np.int8(lay.zp_in))[0]
    conv = ConvLayer(np.ascontiguousarray(lay.weight[:, :, ::-1, ::-1]), lay.bias, lay.mult, lay.shift,
                     zp_in=lay.zp_in, zp_out=lay.zp_out, act_min=lay.act_min, act_max=lay.act_max)
    return conv, np.ascontiguousarray(xz)


def run_rtl(cfg: ProcessorConfig, prog) -> tuple[np.ndarray, object, float, float]:
    from dlproc.sim.harness import NativeSim

    t0 = time.perf_counter()
    sim = NativeSim(cfg, ddr_size=max(64 << 20, -(-prog.dma_limit // 4096) * 4096))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out, res = sim.run_layer_program(prog, max_cycles=50_000_000)
    return out, res, time.perf_counter() - t0, build_s


def row_of(name: str, cfg: ProcessorConfig, kind: str, prog, ref: np.ndarray) -> dict:
    isa_out, _ = run_on_isasim(prog)
    out, res, wall, build_s = run_rtl(cfg, prog)
    threads = cfg.conv_c ** 2
    macs = prog.plan.macs
    return {
        "config": name, "kind": kind, "C": cfg.conv_c, "cycles": res.hw_cycles, "status": res.status,
        "error_code": res.error_code, "macs": macs, "utilization": macs / (res.hw_cycles * threads),
        "estimated_cycles": prog.plan.estimated_cycles, "ideal_cycles": -(-macs // threads),
        "dma_read_bytes": res.ddr.read_bytes, "dma_write_bytes": res.ddr.write_bytes,
        "dma_bus_busy_cycles": res.ddr.busy_cycles, "steps": prog.plan.steps, "instructions": prog.insn_count,
        "tile": prog.plan.tile, "sim_wall_s": wall, "build_s": build_s,
        "rtl_matches_isa": bool(np.array_equal(out, isa_out)), "matches_golden": bool(np.array_equal(isa_out, ref)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="de10nano", choices=["de10nano", "c4"])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--skip-zero-insertion", action="store_true")
    args = ap.parse_args()
    cfg = configs()[args.config]
    if not cfg.get_module_property("conv", "SegmentationBlockGeneration"):
        cfg.set_module_property("conv", "SegmentationBlockGeneration", True)
    lay, x = layer()
    ref = reference(lay, x)
    rows = [row_of(args.config, cfg, "convtranspose (4 phase convs)", build_convtranspose_program(cfg, lay, x), ref)]
    if not args.skip_zero_insertion:
        conv, xz = zero_insertion_conv(lay, x)
        rows.append(row_of(args.config, cfg, "zero-insertion conv (for comparison)", build_conv_program(cfg, conv, xz),
                           ref))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        phases = convtranspose_phases(lay, x.shape)
        subs = ", ".join(sorted({f"{ph.shape.kh}x{ph.shape.kw}" for ph in phases}))
        print(f"ConvTranspose 32->16, 4x4, stride 2, pad 1, 28x28 -> 56x56 on {args.config} (C = {cfg.conv_c}); "
              f"{len(phases)} phases, sub-kernels {subs}")
        for r in rows:
            print(f"  {r['kind']:38s} {r['cycles']:>9,} cycles  {r['macs']:>11,} MACs  util {r['utilization']:6.1%}  "
                  f"(ideal {r['ideal_cycles']:,}, estimate {r['estimated_cycles']:,})")
            print(f"  {'':38s} DMA read {r['dma_read_bytes']:,} B write {r['dma_write_bytes']:,} B, bus busy "
                  f"{r['dma_bus_busy_cycles']:,} cycles; {r['steps']} steps, {r['instructions']} instructions, "
                  f"tile {r['tile']}; RTL == ISA sim {r['rtl_matches_isa']}, == golden {r['matches_golden']}; "
                  f"sim {r['sim_wall_s']:.1f} s", flush=True)
        if len(rows) == 2:
            speedup = rows[1]["cycles"] / rows[0]["cycles"]
            print(f"  speed-up of the phase decomposition over zero insertion: {speedup:.2f}x")
    return 0 if all(r["rtl_matches_isa"] and r["matches_golden"] and r["error_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
