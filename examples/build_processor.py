#!/usr/bin/env python3
"""The buildProcessor script: configure a processor, estimate a network on it, build it for a board.

MATLAB's Deep Learning HDL Toolbox flow, line for line::

    hPC = dlhdl.ProcessorConfig;                          cfg = dlproc.ProcessorConfig.preset(...)
    hPC.setModuleProperty('conv','LRNBlockGeneration','on')  cfg.set_module_property(...)
    hPC.estimatePerformance(net)                          dlproc.estimate(network, cfg)
    hPC.estimateResources                                 (printed by build_processor)
    dlhdl.buildProcessor(hPC)                             dlproc.build_processor(cfg, board=..., out=...)

Run it as is from the repository (after ``pip install -e .``)::

    python examples/build_processor.py                 # de10nano_int8 + LRN, digits network, build/x
    python examples/build_processor.py --no-synth      # skip the Yosys synthesis check (faster)

The output folder holds the Verilog, the Quartus project for the DE10-Nano and the resource
report; Quartus runs only when it is installed.
"""

from __future__ import annotations

import argparse
import sys

import dlproc
from dlproc.errors import DlprocError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="de10nano_int8", help="configuration preset to start from")
    parser.add_argument("--board", default="de10-nano", help="de10-nano or arria10-soc")
    parser.add_argument("--network", default="digits.onnx", help="network to estimate (ONNX, .cfg, .dlq)")
    parser.add_argument("--out", default="build/x", help="output folder")
    parser.add_argument("--no-synth", action="store_true", help="skip the open Yosys synthesis check")
    args = parser.parse_args(argv)
    try:
        cfg = dlproc.ProcessorConfig.preset(args.preset)
        cfg.set_module_property("conv", "LRNBlockGeneration", "on")
        print(dlproc.estimate(args.network, cfg))
        print()
        result = dlproc.build_processor(cfg, board=args.board, out=args.out, synthesize=not args.no_synth)
    except DlprocError as exc:
        print(f"build_processor.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"built {result.output_dir}: fits the device: {result.fits}")
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
