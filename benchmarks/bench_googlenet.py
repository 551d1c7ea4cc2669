"""GoogLeNet (Inception v1, 224x224, two LRN layers) on the Arria 10 int8 processor: estimate and RTL.

    python benchmarks/bench_googlenet.py [--preset arria10soc_int8] [--estimate-only] [--size 224] [--json]

Builds GoogLeNet in code (``dlproc.models.googlenet_onnx``, random He-scaled weights), calibrates
and quantizes it on 4 random images, compiles it for the preset with ``conv.LRNBlockGeneration``
on, and prints

1. the estimate (``dlproc.estimate``) per layer: cycles and MAC utilization, and a summary by
   layer kind next to MATLAB's figures for its int8 Arria 10 processor (same 576 multipliers,
   150 MHz: 15.76 M cycles, 9.5 frames/s; 3x3 convs 73-82 %, 1x1 convs 7-8 %, the 7x7 first layer
   18 %; the design brief, section 8), plus the estimate at 16 B/cycle of DDR;
2. unless ``--estimate-only``: one frame on the Verilated processor (``Workflow(target="sim")``,
   ``dlproc.sim.harness.NativeSim``) with the hardware profiler, its output compared bit for bit
   with the layer-level golden model (``golden.run.run_int8``) and the ISA-level simulator
   (``Workflow(target="golden")``), and simulated against estimated cycles per profile entry.

Exit status 0 when the RTL is bit-exact and (if run) the network estimate is within 3 % of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from dlproc.compiler import compile_network
from dlproc.config import ProcessorConfig
from dlproc.estimate import estimate_compiled
from dlproc.estimate.report import layer_breakdown
from dlproc.frontends.onnx import load_onnx
from dlproc.targets.golden.run import run_int8
from dlproc.models import googlenet_onnx
from dlproc.quant import Quantizer

MATLAB_CYCLES = 15_760_000  #: MATLAB's int8 Arria 10 processor (design brief, section 8)
IDEAL_FOR = 576
TARGET = 3_900_000


def kind_of(layer) -> str:
    """Summary bucket of a compiled layer entry."""
    if layer.op == "conv":
        k = layer.attrs.get("kernel")
        k = int(k[0] if isinstance(k, (list, tuple)) else k) if k is not None else 0
        return "7x7 conv (first)" if "first-layer" in layer.note else f"{k}x{k} conv"
    return {"maxpool": "max pool", "avgpool": "avg pool", "lrn": "LRN", "fc": "FC"}.get(layer.op, layer.op)


def quantized_googlenet(size: int):
    net = load_onnx(googlenet_onnx(size=size))
    q = Quantizer(net)
    q.calibrate(np.random.default_rng(0).uniform(0, 1, (4, 3, size, size)).astype(np.float32))
    return net, q.quantize()


def config_for(preset: str, ddr_bytes: int | None = None) -> ProcessorConfig:
    cfg = ProcessorConfig.preset(preset)
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    if ddr_bytes is not None:
        cfg.set_property("DDRBytesPerCycle", ddr_bytes)
    return cfg


def summary(cn, rows) -> list[dict]:
    by: dict[str, list[int]] = {}
    for r in rows:
        k = kind_of(cn.layer(r["layer"]))
        acc = by.setdefault(k, [0, 0, 0])
        acc[0] += r["cycles"]
        acc[1] += r["macs"]
        acc[2] += 1
    return [{"kind": k, "layers": n, "cycles": cyc, "macs": macs,
             "utilization": macs / (cyc * cn.c * cn.c) if cyc else 0.0} for k, (cyc, macs, n) in by.items()]


MATLAB_UTIL = {"3x3 conv": "73-82 %", "1x1 conv": "7-8 %", "7x7 conv (first)": "18 %", "LRN": "1.26 M cycles (2 layers)"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="arria10soc_int8")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--estimate-only", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    say = (lambda *a, **k: None) if args.json else print

    t0 = time.monotonic()
    net, qnet = quantized_googlenet(args.size)
    cfg = config_for(args.preset)
    cn = compile_network(qnet, cfg)
    t1 = time.monotonic()
    rep = estimate_compiled(cn, cfg)
    rows = layer_breakdown(cn, rep.timeline)
    t2 = time.monotonic()
    macs = sum(l.macs for l in cn.layers if l.hw)
    ideal = macs / (cn.c * cn.c)
    say(f"GoogLeNet {args.size}x{args.size}: {macs / 1e9:.3f} G MACs, {cn.insn_count} instructions, "
        f"C = {cn.c} ({cn.c * cn.c} MACs/cycle), {cn.clock_mhz:.0f} MHz; import+quantize+compile {t1 - t0:.1f} s, "
        f"estimate {t2 - t1:.2f} s")
    say("\nEstimated per layer (each layer from the end of the previous one to its last instruction):")
    say(f"  {'layer':28s} {'op':8s} {'cycles':>9s} {'util':>6s}")
    for r in rows:
        say(f"  {r['layer']:28s} {r['op']:8s} {r['cycles']:>9,} {100 * r['utilization']:5.1f}%")
    summ = summary(cn, rows)
    say("\nSummary by layer kind (estimate)        dlproc util.   MATLAB int8 (576 mult., 150 MHz)")
    for s in summ:
        say(f"  {s['kind']:18s} {s['layers']:3d} layers {s['cycles']:>10,} cycles  {100 * s['utilization']:5.1f} %"
            f"       {MATLAB_UTIL.get(s['kind'], '')}")
    cfg16 = config_for(args.preset, 16)
    cn16 = compile_network(qnet, cfg16)
    rep16 = estimate_compiled(cn16, cfg16)
    say(f"\nEstimate: {rep.cycles:,} cycles = {rep.fps:.1f} frames/s at {cn.clock_mhz:.0f} MHz, MAC utilization "
        f"{100 * macs / (rep.cycles * cn.c * cn.c):.1f} % (ideal {ideal / 1e6:.2f} M cycles; target "
        f"{TARGET / 1e6:.1f} M: {'met' if rep.cycles <= TARGET else 'MISSED'}; MATLAB {MATLAB_CYCLES / 1e6:.2f} M, "
        f"{MATLAB_CYCLES / rep.cycles:.1f}x faster)")
    say(f"Estimate at DDRBytesPerCycle = 16: {rep16.cycles:,} cycles = {rep16.fps:.1f} frames/s")
    out = {"macs": macs, "instructions": cn.insn_count, "estimate": {"cycles": rep.cycles, "fps": rep.fps},
           "estimate_16B": {"cycles": rep16.cycles, "fps": rep16.fps}, "layers": rows, "summary": summ}
    ok = True
    if not args.estimate_only:
        from dlproc.targets.workflow import Workflow

        x = np.random.default_rng(1).uniform(0, 1, (1, 3, args.size, args.size)).astype(np.float32)
        ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
        golden = Workflow(cn, cfg, target="golden")
        golden.predict(x)
        sim = Workflow(cn, cfg, target="sim")
        t3 = time.monotonic()
        sim.deploy()
        t4 = time.monotonic()
        _, prof = sim.predict(x, profile=True, display=False)
        t5 = time.monotonic()
        exact = all(np.array_equal(sim.last_hw_values[t.name], ref[t.name])
                    and np.array_equal(golden.last_hw_values[t.name], ref[t.name]) for t in cn.outputs)
        sim.close()
        rtl = prof.last_frame_cycles
        err = rep.cycles / rtl - 1
        say(f"\nRTL (Verilated, NativeSim): build/load {t4 - t3:.0f} s, run {t5 - t4:.0f} s "
            f"({prof.total_cycles / (t5 - t4) / 1e3:.0f} kcycles/s)")
        say(f"RTL == ISA simulator == golden model (bit-exact, {', '.join(t.name for t in cn.outputs)}): {exact}")
        say(f"RTL {rtl:,} cycles = {cn.clock_mhz * 1e6 / rtl:.1f} frames/s; estimate {rep.cycles:,} "
            f"({100 * err:+.2f} %); MAC utilization {100 * macs / (rtl * cn.c * cn.c):.1f} %")
        say("\nPer profile entry: RTL vs estimate")
        perr = []
        for e, r in zip(rep.layers, prof.layers):
            pe = e.cycles / r.cycles - 1
            perr.append(abs(pe))
            say(f"  {e.name[:60]:60s} RTL {r.cycles:>9,} est {e.cycles:>9,} {100 * pe:+6.2f} %  "
                f"util {100 * (r.utilization or 0):5.1f} %")
        say(f"profile entries: max |error| {100 * max(perr):.2f} %, {sum(p <= 0.05 for p in perr)}/{len(perr)} "
            "within 5 %")
        out["rtl"] = {"cycles": rtl, "fps": cn.clock_mhz * 1e6 / rtl, "bit_exact": exact, "error": err,
                      "profile": [{"name": e.name, "rtl": r.cycles, "estimate": e.cycles}
                                  for e, r in zip(rep.layers, prof.layers)]}
        ok = exact and abs(err) <= 0.03
    if args.json:
        print(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
