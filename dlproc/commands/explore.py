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
    parser.add_argument("--verify-rtl", type=int, metavar="K", default=0,
                        help="build and simulate the K fastest configurations that fit (in parallel on Ray): RTL "
                        "cycles beside the estimate, bit-exact against the golden model")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N", help="with --verify-rtl: local Ray workers (default: all cores)")
    where.add_argument("--address", metavar="A", help="with --verify-rtl: the Ray cluster at A")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dlproc.estimate.explore import explore, parse_sweep
    from dlproc.estimate.performance import load_for_estimate

    if (args.workers is not None or args.address) and not args.verify_rtl:
        raise ConfigError("--workers/--address go with --verify-rtl K (the estimates run on local processes, -j)")
    if args.verify_rtl < 0:
        raise ConfigError(f"--verify-rtl {args.verify_rtl}: the number of configurations to check, >= 0")
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
    checks = []
    if args.verify_rtl:
        from dlproc.cluster.verify import verify_best

        checks = verify_best(_quantized(network), result.points, args.verify_rtl, workers=args.workers,
                             address=args.address)
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
            "verified": [c.to_dict() for c in checks],
        }, indent=1))
        return _verdict(checks)
    print(result.table())
    if checks:
        print(_checks_table(checks))
    if plot:
        print(f"wrote {plot}")
    if report:
        print(f"wrote {report}")
    return _verdict(checks)


def _verdict(checks: list) -> int:
    """1 when an RTL check disagreed with the golden model or failed."""
    return 1 if any(c.error or c.bit_exact is False for c in checks) else 0


def _checks_table(checks: list) -> str:
    lines = ["", f"RTL check of the {len(checks)} fastest configurations that fit:",
             f"  {'configuration':<44}{'estimate':>12}{'RTL':>12}{'error':>9}  bit-exact"]
    for c in checks:
        label = ", ".join(f"{k}={v}" for k, v in c.assignments.items())
        if c.error:
            lines.append(f"  {label:<44}  failed: {c.error}")
            continue
        lines.append(f"  {label:<44}{c.estimate_cycles:>12,}{c.rtl_cycles:>12,}{100 * c.estimate_error:>+8.1f}%  "
                     f"{'yes' if c.bit_exact else 'NO'}")
    return "\n".join(lines)


def _quantized(network: Any) -> Any:
    """The network explore compiled (a float one quantized the same way, synthetic data)."""
    from dlproc.estimate.performance import synthetic_quantize
    from dlproc.ir import Network

    return synthetic_quantize(network) if isinstance(network, Network) else network
