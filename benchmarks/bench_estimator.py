"""Benchmark: the performance estimator against the RTL simulation.

Single layers (layer programs from ``dlproc.compiler.layerprog``) and whole networks (compiled with
``dlproc.compiler``, run through ``Workflow(target="sim")`` with the hardware profiler) run on the
Verilated processor (``dlproc.sim.harness.NativeSim``); the estimator times the same instruction
streams (``dlproc.estimate``). Prints estimated vs simulated cycles, the error, and checks the
targets of issue 7: per layer <= 5 %, per network <= 3 %.

    python benchmarks/bench_estimator.py [--config small|c8|de10nano] [--layers-only|--networks-only|--stream-only] [--no-lrn] [--json]

``small`` is the C = 4 test configuration (``tests/layerprog_cases.small_config``), ``c8`` the
default configuration with ConvThreadNumber 64, ``de10nano`` the preset (each needs its own
Verilator build, cached on disk). The single layers include DMA-bound max pools and, on the
same configuration with the LRN block (for ``small`` the RTL tests' ``blocks_config``; another
build), LRN layers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# The test folders (tests/ and its per-stage folders) hold the shared network builders.
sys.path[:0] = [str(ROOT / "tests")] + sorted(str(d) for d in (ROOT / "tests").iterdir() if d.is_dir() and d.name != "data")

from dlproc.config import ProcessorConfig  # noqa: E402
from dlproc.estimate import estimate_compiled, simulate_program  # noqa: E402
from dlproc.estimate.performance import synthetic_quantize  # noqa: E402
from dlproc.compiler.layerprog import ConvLayer, PoolLayer, build_conv_program, build_pool_program  # noqa: E402

LAYER_TOL, NET_TOL = 0.05, 0.03


def bench_stream_speed(cfg: ProcessorConfig, verbose: bool, runs: int = 5) -> dict:
    """CPU time of timing a GoogLeNet-sized stream (~12k instructions: one conv program's body
    repeated), the median of ``runs`` runs in this process. The estimator is meant to answer in
    well under a second for a whole network, so that ``dlproc explore`` can try hundreds of
    configurations."""
    from dlproc.hardware import isa

    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (30, 9, 13), dtype=np.int8)
    w = rng.integers(-128, 128, (30, 30, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, np.zeros(30, np.int32), np.full(30, 1000), np.full(30, 16), pads=1)
    body = build_conv_program(cfg, layer, x).instructions[:-1]
    prog = body * -(-12_000 // len(body)) + [isa.Finish()]
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        cycles = simulate_program(cfg, prog).cycles
        times.append(time.process_time() - t0)
    row = {"instructions": len(prog), "cycles": cycles, "cpu_seconds": float(np.median(times))}
    if verbose:
        print(f"stream of {len(prog):,} instructions ({cycles:,} cycles): median {row['cpu_seconds']:.3f} s CPU "
              f"over {runs} runs ({len(prog) / row['cpu_seconds']:,.0f} instructions/s)")
    return row


def configs() -> dict[str, ProcessorConfig]:
    from layerprog_cases import small_config

    c8 = ProcessorConfig()
    c8.set_module_property("conv", "ConvThreadNumber", 64)
    return {"small": small_config(4), "c8": c8, "de10nano": ProcessorConfig.preset("de10nano_int8")}


def _conv(ci: int, co: int, h: int, w: int, k: int, stride: int = 1, groups: int = 1, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (ci, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ci // groups, k, k), dtype=np.int8)
    layer = ConvLayer(wt, rng.integers(-999, 999, co).astype(np.int32), rng.integers(1, 1 << 15, co),
                      rng.integers(14, 20, co), stride=stride, pads=k // 2, groups=groups)
    return layer, x


def layer_programs(cfg: ProcessorConfig, scale: int) -> dict[str, object]:
    """Conv and pool layers of several shapes; ``scale`` multiplies the channel counts."""
    from layerprog_cases import random_conv, random_pool

    s = scale
    progs: dict[str, object] = {}
    for seed in range(4):
        layer, x = random_conv(np.random.default_rng(500 + seed), max_ch=10 * s, max_hw=12)
        progs[f"random conv #{seed}"] = build_conv_program(cfg, layer, x)
    shapes = {
        "conv 3x3": (8 * s, 8 * s, 16, 16, 3), "conv 1x1": (16 * s, 32 * s, 12, 12, 1),
        "conv 3x3 wide": (16 * s, 16 * s, 20, 20, 3), "conv 5x5": (4 * s, 8 * s, 20, 20, 5),
        "conv 3x3 s2": (8 * s, 16 * s, 21, 21, 3, 2), "conv 1x1 narrow": (32 * s, 8 * s, 10, 10, 1),
        "conv 7x7 s2 (RGB)": (3, 8 * s, 30, 30, 7, 2), "conv 3x3 odd": (30 * s, 30 * s, 9, 13, 3),
        "conv 3x3 depthwise": (8 * s, 8 * s, 12, 12, 3, 1, 8 * s),
    }
    for name, args in shapes.items():
        progs[f"{name} {args[0]}->{args[1]} {args[2]}x{args[3]}"] = build_conv_program(cfg, *_conv(*args))
    for kind in ("max", "avg", "global_avg"):
        layer, x = random_pool(np.random.default_rng(77), kind, max_ch=9 * s, max_hw=14)
        progs[f"pool {kind}"] = build_pool_program(cfg, layer, x)
    rng = np.random.default_rng(5)
    progs["maxpool 3x3 s2"] = build_pool_program(cfg, PoolLayer("max", 3, 2, 1),
                                                 rng.integers(-128, 128, (16 * s, 20, 20), dtype=np.int8))
    progs["maxpool 2x2 s2"] = build_pool_program(cfg, PoolLayer("max", 2, 2, 0),
                                                 rng.integers(-128, 128, (8 * s, 24, 24), dtype=np.int8))
    # DMA-bound pools (GoogLeNet's stride-1 and stride-2 max pools): the column-reusing engine is
    # faster than the loads and stores of its tiles, which share the bus.
    progs["maxpool 3x3 s1 (DMA-bound)"] = build_pool_program(
        cfg, PoolLayer("max", 3, 1, 1), rng.integers(-128, 128, (16 * s, 14, 14), dtype=np.int8))
    progs["maxpool 3x3 s2 28x28 (DMA-bound)"] = build_pool_program(
        cfg, PoolLayer("max", 3, 2, 1), rng.integers(-128, 128, (16 * s, 28, 28), dtype=np.int8))
    return progs


def lrn_config(cfg: ProcessorConfig) -> ProcessorConfig:
    """``cfg`` with the LRN block; for the C = 4 configuration the processor with every optional
    block that the RTL tests of those blocks build (``tests/sim_fixture.blocks_config``)."""
    if cfg.conv_c == 4:
        from sim_fixture import blocks_config

        return blocks_config()
    out = cfg.copy()
    out.set_module_property("conv", "LRNBlockGeneration", True)
    return out


def lrn_programs(cfg: ProcessorConfig, scale: int) -> dict[str, object]:
    """GoogLeNet-like LRN layers (size 5; DDR-bound: a word in and a word out per output word,
    the table load first)."""
    from dlproc.targets.golden import ops
    from dlproc.compiler.layerprog import LrnLayer, build_lrn_program

    params = ops.lrn_params(5, 1e-4, 0.75, 1.0, 0.05, 0.02)
    layer = LrnLayer(size=5, zp_in=-7, table_mult=params.mult, table_shift=params.shift, zp_out=3)
    rng = np.random.default_rng(9)
    progs = {}
    for ch, h, w in ((16 * scale, 28, 28), (64 * scale, 14, 14), (8 * scale, 12, 12)):
        x = rng.integers(-128, 128, (ch, h, w), dtype=np.int8)
        progs[f"LRN 5 {ch}x{h}x{w}"] = build_lrn_program(cfg, layer, x)
    return progs


def networks(scale: int) -> dict[str, object]:
    from test_quant_nets import RELU, NetBuilder, rand_b, rand_w

    s = scale
    rng = np.random.default_rng(1)
    b = NetBuilder("plain", (3, 24, 24))
    x = b.conv("c1", "input", rand_w(rng, 8 * s, 3, 3, 3), rand_b(rng, 8 * s), pads=(1, 1, 1, 1), act=RELU)
    x = b.pool("p1", x, "maxpool", 2, 2)
    x = b.conv("c2", x, rand_w(rng, 16 * s, 8 * s, 3, 3), rand_b(rng, 16 * s), pads=(1, 1, 1, 1), act=RELU)
    x = b.conv("c3", x, rand_w(rng, 8 * s, 16 * s, 1, 1), rand_b(rng, 8 * s), act=RELU)
    x = b.pool("p2", x, "maxpool", 2, 2)
    x = b.conv("c4", x, rand_w(rng, 16 * s, 8 * s, 3, 3), rand_b(rng, 16 * s), pads=(1, 1, 1, 1), act=RELU)
    x = b.gap("gap", x)
    b.fc("fc", x, rand_w(rng, 10, 16 * s), rand_b(rng, 10))
    plain = b.build(["fc"])

    rng = np.random.default_rng(2)
    b = NetBuilder("branchy", (8, 16, 16))
    x = b.conv("c1", "input", rand_w(rng, 16 * s, 8, 3, 3), rand_b(rng, 16 * s), pads=(1, 1, 1, 1), act=RELU)
    y = b.conv("b1", x, rand_w(rng, 8 * s, 16 * s, 1, 1), rand_b(rng, 8 * s), act=RELU)
    z = b.conv("b2", x, rand_w(rng, 8 * s, 16 * s, 3, 3), rand_b(rng, 8 * s), pads=(1, 1, 1, 1), act=RELU)
    c = b.concat("cat", [y, z])
    x = b.conv("c2", c, rand_w(rng, 16 * s, 16 * s, 3, 3), rand_b(rng, 16 * s), stride=2, pads=(1, 1, 1, 1), act=RELU)
    b.pool("p", x, "maxpool", 2, 2)
    branchy = b.build(["p"])

    from test_quant_nets import conv_pool_fc_net

    return {"plain": plain, "branchy": branchy, "cpf": conv_pool_fc_net(np.random.default_rng(3))}


def bench_layers(cfg: ProcessorConfig, scale: int, verbose: bool, progs: dict[str, object] | None = None) -> list[dict]:
    from dlproc.sim.harness import NativeSim

    rows = []
    progs = layer_programs(cfg, scale) if progs is None else progs
    size = max(p.dma_limit for p in progs.values())
    with NativeSim(cfg, ddr_size=max(1 << 20, -(-size // (1 << 20)) * (1 << 20))) as sim:
        for name, prog in progs.items():
            _, res = sim.run_layer_program(prog, max_cycles=50_000_000)
            t0 = time.process_time()
            est = simulate_program(cfg, prog.instructions, insn_base=prog.insn_base).cycles
            cpu = time.process_time() - t0
            err = est / res.hw_cycles - 1
            row = {"layer": name, "instructions": prog.insn_count, "rtl": res.hw_cycles, "estimate": est,
                   "error": err, "ok": res.error_code == 0 and abs(err) <= LAYER_TOL, "estimate_cpu_s": cpu}
            rows.append(row)
            if verbose:
                print(f"  {name:36s} {prog.insn_count:5d} insns  RTL {res.hw_cycles:>9,}  est {est:>9,}  "
                      f"{100 * err:+6.2f} %  {'ok' if row['ok'] else 'MISS'}", flush=True)
    return rows


def bench_networks(cfg: ProcessorConfig, scale: int, verbose: bool) -> list[dict]:
    from dlproc.compiler import compile_network
    from dlproc.targets.workflow import Workflow

    rows = []
    for name, net in networks(scale).items():
        cn = compile_network(synthetic_quantize(net), cfg)
        t0 = time.process_time()
        rep = estimate_compiled(cn, cfg)
        cpu = time.process_time() - t0
        wf = Workflow(cn, cfg, target="sim")
        wf.deploy()
        x = np.random.default_rng(0).standard_normal((1, *net[net.inputs[0]].shape.as_tuple())).astype(np.float32)
        _, prof = wf.predict(x, profile=True, display=False)
        wf.close()
        err = rep.cycles / prof.last_frame_cycles - 1
        layers = []
        for est, rtl in zip(rep.layers, prof.layers):
            e = est.cycles / rtl.cycles - 1
            layers.append({"layer": est.name, "type": est.type, "rtl": rtl.cycles, "estimate": est.cycles,
                           "error": e, "bound": est.bound, "utilization": est.utilization,
                           "ok": abs(e) <= LAYER_TOL})
        row = {"network": name, "instructions": cn.insn_count, "rtl": prof.last_frame_cycles, "estimate": rep.cycles,
               "error": err, "ok": abs(err) <= NET_TOL, "layers": layers, "estimate_cpu_s": cpu}
        rows.append(row)
        if verbose:
            print(f"  {name}: {cn.insn_count} insns  RTL {prof.last_frame_cycles:,}  est {rep.cycles:,}  "
                  f"{100 * err:+.2f} %  {'ok' if row['ok'] else 'MISS'} (target {100 * NET_TOL:.0f} %)", flush=True)
            for l in layers:
                print(f"      {l['layer']:10s} {l['type']:15s} RTL {l['rtl']:>8,}  est {l['estimate']:>8,}  "
                      f"{100 * l['error']:+6.2f} %  {l['bound']:8s} util {100 * l['utilization']:5.1f} %"
                      f"  {'ok' if l['ok'] else 'MISS'}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="small", choices=["small", "c8", "de10nano"])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--layers-only", action="store_true")
    group.add_argument("--networks-only", action="store_true")
    group.add_argument("--stream-only", action="store_true", help="only the estimator's own speed on a long stream")
    ap.add_argument("--no-lrn", action="store_true", help="skip the LRN layers (they need a build with the LRN block)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cfg = configs()[args.config]
    scale = max(1, cfg.conv_c // 4)
    verbose = not args.json
    out: dict[str, object] = {"config": args.config, "C": cfg.conv_c}
    out["stream"] = bench_stream_speed(cfg, verbose)
    if args.stream_only:
        if not verbose:
            print(json.dumps(out, indent=1))
        return 0
    if not args.networks_only:
        if verbose:
            print(f"Single layers (config {args.config}, C = {cfg.conv_c}; target |error| <= {100 * LAYER_TOL:.0f} %):")
        out["layers"] = bench_layers(cfg, scale, verbose)
        if not args.no_lrn:
            lcfg = lrn_config(cfg)
            if verbose:
                print("LRN layers (the configuration with the LRN block):")
            out["layers"] += bench_layers(lcfg, scale, verbose, lrn_programs(lcfg, scale))
    if not args.layers_only:
        if verbose:
            print(f"Networks (target |error| <= {100 * NET_TOL:.0f} % per network, {100 * LAYER_TOL:.0f} % per layer):")
        out["networks"] = bench_networks(cfg, scale, verbose)
    layer_errs = [abs(r["error"]) for r in out.get("layers", [])]
    net_errs = [abs(r["error"]) for r in out.get("networks", [])]
    net_layer_errs = [abs(l["error"]) for r in out.get("networks", []) for l in r["layers"]]
    if verbose:
        if layer_errs:
            print(f"single layers: max |error| {100 * max(layer_errs):.2f} %, mean {100 * np.mean(layer_errs):.2f} %, "
                  f"{sum(e <= LAYER_TOL for e in layer_errs)}/{len(layer_errs)} within {100 * LAYER_TOL:.0f} %")
        if net_errs:
            print(f"networks: max |error| {100 * max(net_errs):.2f} %, {sum(e <= NET_TOL for e in net_errs)}/"
                  f"{len(net_errs)} within {100 * NET_TOL:.0f} %; their layers: max |error| "
                  f"{100 * max(net_layer_errs):.2f} %, {sum(e <= LAYER_TOL for e in net_layer_errs)}/"
                  f"{len(net_layer_errs)} within {100 * LAYER_TOL:.0f} %")
    else:
        print(json.dumps(out, indent=1))
    ok = all(e <= LAYER_TOL for e in layer_errs + net_layer_errs) and all(e <= NET_TOL for e in net_errs)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
