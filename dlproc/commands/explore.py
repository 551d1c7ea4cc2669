"""``dlproc explore MODEL --board B --sweep conv.ConvThreadNumber=64,256 ... [-j N] [-o plot.png]``.

Sweeps configuration properties (every combination of the ``--sweep`` values, applied to the
board's preset or to ``--config``/``--preset``), estimates frames/s with the performance
estimator and resources with the resource estimator, prints a table, writes a Pareto plot
(frames/s against DSP blocks and ALMs) and names the fastest configuration that fits the board.
Invalid combinations (a value the property does not allow, a network that does not compile) are
listed with the reason; the sweep goes on.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from dlproc.config import PRESETS, ProcessorConfig
from dlproc.errors import ConfigError

#: The preset each board starts from when no --config/--preset is given.
BOARD_PRESETS = {"de10-nano": "de10nano_int8", "arria10-soc": "arria10soc_int8"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explore",
        help="sweep processor properties, estimate frames/s and resources, pick the fastest that fits",
        description="Design-space exploration: evaluate every combination of the --sweep values in "
        "parallel (compile + performance estimate + resource estimate), print a table, write a Pareto "
        "plot and name the fastest configuration that fits the board.",
    )
    parser.add_argument("model", metavar="MODEL", help="an .onnx, Darknet .cfg or .dlq file")
    parser.add_argument("--board", required=True, choices=sorted(BOARD_PRESETS), help="the target board")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="P", help=f"base configuration preset ({', '.join(PRESETS)})")
    source.add_argument("--config", metavar="F", help="base configuration file (default: the board's preset)")
    parser.add_argument("--sweep", action="append", default=[], metavar="module.Property=v1,v2,...",
                        help="values of one property (repeatable); list values as 28x28x64 or [28,28,64]")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel workers (default: all cores)")
    parser.add_argument("-o", "--output", type=Path, default=Path("explore.png"), help="Pareto plot (PNG)")
    parser.add_argument("--json", action="store_true", help="print the points as JSON instead of the table")
    parser.add_argument("--report", metavar="FILE.html", type=Path,
                        help="also write an HTML report: the Pareto front against DSP/RAM/ALMs and the full report "
                        "of the fastest configuration that fits")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dlproc.estimate.explore import explore, parse_sweep
    from dlproc.estimate.performance import load_for_estimate

    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    if args.report is not None:
        from dlproc.report.html import check_report_path
        check_report_path(args.report)
    if not args.sweep:
        raise ConfigError("give at least one --sweep module.Property=v1,v2,... (e.g. conv.ConvThreadNumber=64,256)")
    if args.config:
        base = ProcessorConfig.load(args.config)
    else:
        base = ProcessorConfig.preset(args.preset or BOARD_PRESETS[args.board])
    sweeps: dict[str, list[str]] = {}
    for text in args.sweep:
        name, values = parse_sweep(text)
        sweeps[name] = values
    network = load_for_estimate(args.model, purpose="dlproc explore")
    result = explore(network, base, sweeps, device=args.board, jobs=args.jobs)
    plot = None
    if any(p.valid for p in result.points):
        plot = result.plot(args.output)
    report = None
    if args.report is not None:
        from dlproc.report import write_explore_report

        report = write_explore_report(args.report, result, _quantized(network))
    if args.json:
        best = result.best
        print(json.dumps({
            "device": result.device,
            "points": [{"assignments": p.assignments, "valid": p.valid, "reason": p.reason, "cycles": p.cycles,
                        "fps": p.fps, "dsp": p.dsp, "alms": p.alms, "ram": p.ram, "fits": p.fits}
                       for p in result.points],
            "best": best.assignments if best else None,
            "plot": str(plot) if plot else None,
            "report": str(report) if report else None,
        }, indent=1))
        return 0
    print(result.table())
    if plot:
        print(f"wrote {plot}")
    if report:
        print(f"wrote {report}")
    return 0


def _quantized(network: Any) -> Any:
    """The network explore compiled (a float one quantized the same way, synthetic data)."""
    from dlproc.estimate.performance import synthetic_quantize
    from dlproc.ir import Network

    return synthetic_quantize(network) if isinstance(network, Network) else network
