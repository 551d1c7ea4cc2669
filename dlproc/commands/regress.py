"""``dlproc regress --count N --seed S [--config F | --preset P] [--workers K | --address A]
[--results FILE.jsonl] [--resume] [--reproducers DIR] [--json]``: a differential campaign.

N random networks (:mod:`dlproc.regress.generator`, reproducible by seed and index), each
quantized, compiled and run on the golden model, the ISA simulator and the RTL, which must agree
bit for bit; spread over Ray workers (an embedded local cluster of K workers, or the cluster at
``--address``). ``--index I`` reruns case I of the campaign alone, here, without Ray: the command
a reproducer names. See :mod:`dlproc.regress.campaign`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from dlproc.config import PRESETS
from dlproc.errors import DlprocError
from dlproc.regress.generator import KINDS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "regress",
        help="differential campaign: random networks on RTL, ISA simulator and golden model (Ray)",
        description="Run N random networks (convs with random kernels, strides, pads, dilations and groups, "
        "pools, adds, concats, FC and the configuration's optional blocks), each on the RTL, the ISA "
        "simulator and the golden model, over Ray workers; every mismatch is saved as a reproducer.",
    )
    parser.add_argument("--count", type=int, default=100, help="networks in the campaign (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="campaign seed (network i comes from (seed, i))")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="F", type=Path, help="a TOML configuration file")
    src.add_argument("--preset", metavar="P", help=f"a configuration preset ({', '.join(PRESETS)}; "
                     "default de10nano_int8)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, help="workers of the embedded local cluster (default: the CPUs)")
    where.add_argument("--address", metavar="A", help="an existing Ray cluster (ray://HOST:PORT or HOST:PORT)")
    parser.add_argument("--results", metavar="FILE.jsonl", type=Path, help="stream every case's result here")
    parser.add_argument("--resume", action="store_true", help="skip the cases --results already holds")
    parser.add_argument("--reproducers", metavar="DIR", type=Path,
                        help="where failing cases are saved (default regress-failures/ next to --results, "
                             "else build/regress-failures)")
    parser.add_argument("--kind", choices=KINDS, default="full",
                        help="full: the layer mix (default); tiny: one-convolution networks, to measure the "
                        "engine's per-task cost")
    parser.add_argument("--index", type=int, help="run only case INDEX, here, without Ray (a reproducer's rerun)")
    parser.add_argument("--json", action="store_true",
                        help='print {"networks", "mismatches", "seconds", "workers", "failures"} as JSON')
    parser.set_defaults(func=run)


def _config(args: argparse.Namespace) -> Any:
    from dlproc.commands.compile import load_config

    return load_config(args.config, args.preset or (None if args.config else "de10nano_int8"))


def _rerun_command(args: argparse.Namespace, index: int) -> str:
    source = ["--config", str(args.config.resolve())] if args.config else ["--preset", args.preset or "de10nano_int8"]
    kind = ["--kind", args.kind] if args.kind != "full" else []
    return shlex.join(["dlproc", "regress", "--seed", str(args.seed), *source, *kind, "--index", str(index)])


def run(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.resume and args.results is None:
        raise DlprocError("--resume needs --results FILE.jsonl (the file it resumes)")
    if args.index is not None:
        return _run_one(args, config)
    from dlproc.regress.campaign import run_campaign

    reproducers = args.reproducers or ((args.results.parent / "regress-failures") if args.results
                                       else Path("build") / "regress-failures")
    summary = run_campaign(config, args.count, args.seed, workers=args.workers,
                           address=args.address, results=args.results, resume=args.resume,
                           reproducers=reproducers, rerun_command=lambda i: _rerun_command(args, i), kind=args.kind)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
    else:
        print(f"regress seed {args.seed}: {summary.networks} networks ({summary.skipped} from the results file), "
              f"{summary.mismatches} mismatches, {summary.errors} errors, {summary.seconds:.1f} s on "
              f"{summary.workers} workers{' (interrupted)' if summary.interrupted else ''}")
        for f in summary.failures:
            print(f"  case {f['index']}: {f['status']}: {f['detail'].splitlines()[0] if f['detail'] else ''}")
            if f.get("reproducer"):
                print(f"    saved in {f['reproducer']}; rerun: {f.get('rerun', '')}")
    if summary.interrupted:
        print("dlproc regress: interrupted; the finished cases are in the results file "
              "(--resume continues)" if args.results else "dlproc regress: interrupted", file=sys.stderr)
        return 130
    return 0 if summary.mismatches == 0 and summary.errors == 0 else 1


def _run_one(args: argparse.Namespace, config: Any) -> int:
    from dlproc.regress.case import run_case

    result = run_case(args.seed, args.index, config, kind=args.kind)
    rec = result.record()
    if args.json:
        print(json.dumps(rec, indent=1))
    else:
        print(f"case {args.index} of seed {args.seed}: {result.status} ({result.layers} layers: "
              f"{', '.join(result.ops)}; RTL {result.rtl_cycles} cycles, {result.seconds:.2f} s)")
        if result.detail:
            print(result.detail)
    return 0 if result.status == "ok" else 1
