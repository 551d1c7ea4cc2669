"""``dlproc build``: the buildProcessor script (configure, validate, estimate, generate, synthesize).

    dlproc build [--config F | --preset P] [--board de10-nano|arria10-soc]
                 [--set module.Property=value ...] [-o DIR] [--override-resource-check] [--no-synth]
                 [--quartus | --no-quartus]

See :mod:`dlproc.flow.build` for the steps and docs/boards.md for the board flows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlproc.config import PRESETS, ProcessorConfig
from dlproc.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build",
        help="generate the processor and a complete Quartus project for a board (buildProcessor)",
        description="Print and validate the configuration, check it fits the board's FPGA, generate the "
        "Verilog and the board project (Platform Designer system, pins, SDC, Quartus project, build script, "
        "Linux device tree) into DIR, write a resource report (estimator, plus Yosys on Cyclone V), and run "
        "Quartus when it is installed. See docs/boards.md.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="P", help=f"start from a preset ({', '.join(PRESETS)})")
    source.add_argument("--config", metavar="F", help="start from a TOML configuration file")
    parser.add_argument("--board", choices=("de10-nano", "arria10-soc"),
                        help="target board (default: the configuration's top.Board)")
    parser.add_argument("--set", dest="assignments", action="append", default=[], metavar="NAME=VALUE",
                        help="change a property, e.g. --set conv.ConvThreadNumber=64 --set TargetFrequency=120 "
                             "(repeatable; applied together)")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="output folder (default build/<preset name | config file stem | dlproc_<board>>/)")
    parser.add_argument("--override-resource-check", action="store_true",
                        help="build even if the estimate or the synthesis says the FPGA is too small")
    parser.add_argument("--no-synth", action="store_true", help="skip the open Yosys synthesis check")
    quartus = parser.add_mutually_exclusive_group()
    quartus.add_argument("--quartus", dest="run_quartus", action="store_const", const=True, default=None,
                         help="require Quartus and run the whole flow (default: run it when installed)")
    quartus.add_argument("--no-quartus", dest="run_quartus", action="store_const", const=False,
                         help="never run Quartus, stop after generation")
    parser.set_defaults(func=_build)


def _config(args: argparse.Namespace) -> ProcessorConfig:
    from dlproc.commands.config import parse_assignment

    if args.preset:
        cfg = ProcessorConfig.preset(args.preset)
    elif args.config:
        cfg = ProcessorConfig.load(args.config)
    else:
        cfg = ProcessorConfig()
    if args.assignments:
        cfg.update([parse_assignment(text) for text in args.assignments])
    return cfg


def _build(args: argparse.Namespace) -> int:
    from dlproc.flow.build import build_processor

    cfg = _config(args)
    if args.board is None and cfg.board == "generic":
        raise ConfigError("no board: give --board de10-nano or --board arria10-soc (or a preset / "
                          "configuration with top.Board set)")
    output = args.output
    if output is None:
        # build/<name>/: the preset's name, the configuration file's stem, or dlproc_<board>.
        board = args.board or cfg.board
        name = args.preset or (Path(args.config).stem if args.config else f"dlproc_{board.replace('-', '')}")
        output = Path("build") / name
    result = build_processor(cfg, board=args.board, output_dir=output,
                             override_resource_check=args.override_resource_check,
                             run_quartus=args.run_quartus, synthesize=not args.no_synth)
    print(f"### dlproc build: done ({result.output_dir})")
    return 0
