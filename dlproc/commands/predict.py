"""``dlproc predict NET --input X.npy --target golden|sim|board://HOST[:PORT] [--profile] [--json] -o Y.npy``.

Runs a compiled network on a float32 NCHW batch on the ISA-level simulator (``golden``), the
Verilated RTL (``sim``) or a board agent (``board://``, e.g. ``dlproc agent --sim``; the token comes
from ``--token`` or ``$DLPROC_AGENT_TOKEN``) and writes the float outputs. With ``--profile`` (``sim`` only has cycle
counts) the profiler table is printed, or with ``--json`` the profile of the last frame.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from dlproc.errors import DlprocError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="run a compiled network on a batch (ISA-level simulator or RTL simulation)",
        description="Quantize the float32 NCHW input batch, run the compiled network on the target, "
        "dequantize the outputs and run the software layers on the host; write the outputs to Y.npy "
        "(several outputs: an .npz archive keyed by output name).",
    )
    parser.add_argument("network", metavar="NET", type=Path, help="compiled network (.dlnet)")
    parser.add_argument("--input", metavar="X.npy", required=True, type=Path, help="float32 input batch, NCHW")
    parser.add_argument("--target", type=_target, default="golden",
                        help="golden: ISA-level simulator; sim: cycle-accurate Verilator RTL; "
                        "board://HOST[:PORT]: the board agent (default golden)")
    parser.add_argument("--token", help="board agent token (default: $DLPROC_AGENT_TOKEN)")
    parser.add_argument("--board", default="de10-nano", help="board the agent runs on (default de10-nano)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="F", type=Path, help="check the network against this configuration")
    src.add_argument("--preset", metavar="P", help="check the network against this preset")
    parser.add_argument("--profile", action="store_true", help="report per-layer cycles (last frame)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--report", metavar="FILE.html", type=Path,
                        help="with --profile: also write the HTML report (dlproc report) of the network and profile")
    parser.add_argument("--compare", choices=("golden",),
                        help="with --target sim: also run the golden model; on a mismatch name the first operation "
                        "whose output differs and its first differing elements (exit code 1)")
    parser.add_argument("--trace", metavar="FILE.fst", type=Path,
                        help="with --compare: write the FST waveform of the RTL up to the divergent operation")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="K",
                       help="spread the batch's frames over K local Ray workers (golden or sim target)")
    where.add_argument("--address", metavar="A", help="spread the batch's frames over the Ray cluster at A")
    parser.add_argument("-o", "--output", metavar="Y.npy", required=True, type=Path, help="output file")
    parser.set_defaults(func=run)


def _target(text: str) -> str:
    if text in ("golden", "sim") or text.startswith("board://"):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not golden, sim or board://HOST[:PORT]")


def run(args: argparse.Namespace) -> int:
    from dlproc.compiler import netfile
    from dlproc.targets.workflow import Workflow

    if args.compare or args.trace:
        return _compare(args)
    if args.report is not None and not args.profile:
        raise DlprocError("--report FILE.html needs --profile (the report compares the estimate with the profile)")
    if args.report is not None:
        from dlproc.report.html import check_report_path
        check_report_path(args.report)
    cn = netfile.load(args.network)
    config = None
    if args.config or args.preset:
        from dlproc.commands.compile import load_config
        config = load_config(args.config, args.preset)
    if not args.input.is_file():
        raise DlprocError(f"input file {str(args.input)!r} does not exist")
    try:
        x = np.load(args.input, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DlprocError(f"input file {str(args.input)!r} is not a readable .npy file: {exc}") from None
    token = args.token if args.token is not None else os.environ.get("DLPROC_AGENT_TOKEN")
    if args.target.startswith("board://") and not token:
        raise DlprocError("a board:// target needs the agent's token: give --token T or set DLPROC_AGENT_TOKEN")
    if (args.workers is not None or args.address) and args.target.startswith("board://"):
        raise DlprocError("--workers/--address spread frames over simulators; a board:// target runs them itself")
    wf = Workflow(cn, config, target=args.target, token=token, board=args.board, workers=args.workers,
                  address=args.address)
    try:
        result = wf.predict(x, profile=args.profile, display=args.profile and not args.json)
    finally:
        wf.close()
    y, prof = result if args.profile else (result, None)
    if isinstance(y, dict):
        np.savez(args.output, **y)
    else:
        np.save(args.output, y)
    if args.report is not None:
        from dlproc.report import write_report

        report = write_report(args.report, cn, wf.config, profile=prof)
        if not args.json:
            print(f"wrote {report}")
    if args.json:
        doc: dict[str, Any] = {"output": str(args.output)}
        if prof is not None:
            doc["profile"] = prof.to_dict()
        print(json.dumps(doc))
    elif not args.profile:
        print(f"wrote {args.output}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    """--compare golden: see dlproc.debug.compare."""
    from dlproc.compiler import netfile
    from dlproc.debug.compare import compare

    if args.trace is not None and not args.compare:
        raise DlprocError("--trace FILE.fst goes with --compare golden")
    if args.target != "sim":
        raise DlprocError(f"--compare golden compares the RTL with the golden model: it needs --target sim, "
                          f"not {args.target}")
    if args.trace is not None and args.trace.suffix.lower() != ".fst":
        raise DlprocError(f"--trace {str(args.trace)!r}: the waveform file must end in .fst")
    if args.profile or args.report:
        raise DlprocError("--compare runs without --profile/--report; profile in a separate predict")
    cn = netfile.load(args.network)
    if not args.input.is_file():
        raise DlprocError(f"input file {str(args.input)!r} does not exist")
    try:
        x = np.load(args.input, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DlprocError(f"input file {str(args.input)!r} is not a readable .npy file: {exc}") from None
    config = None
    if args.config or args.preset:
        from dlproc.commands.compile import load_config
        config = load_config(args.config, args.preset)
    result = compare(cn, x, config, trace=args.trace)
    y = result.outputs
    if isinstance(y, dict):
        np.savez(args.output, **y)
    else:
        np.save(args.output, y)
    print(result.format())
    print(f"wrote {args.output}")
    return 0 if result.equal else 1
