"""The ``dlproc`` command line.

Each subcommand lives in its own module under ``dlproc.commands`` and exposes
``register(subparsers)``, which adds an ``argparse`` sub-parser whose ``func`` default takes the
parsed arguments and returns an exit code. Errors derived from :class:`dlproc.errors.DlprocError`
are printed as one clear message (no traceback) and exit with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

from dlproc import progress
from dlproc.version import __version__
from dlproc.errors import DlprocError

# Subcommand modules in the order ``dlproc --help`` lists them.
COMMAND_MODULES = [
    "demo",
    "stats",
    "config",
    "quantize",
    "generate",
    "compile",
    "predict",
    "estimate",
    "build",
    "agent",
    "explore",
    "report",
    "regress",
    "zoo",
]


def _load_command_modules() -> list:
    modules = []
    for name in COMMAND_MODULES:
        qualified = f"{__package__}.commands.{name}"
        try:
            modules.append(importlib.import_module(qualified))
        except ModuleNotFoundError as exc:
            # A subcommand that is not written yet is simply absent; a missing dependency of a
            # written one is a real error and propagates.
            if exc.name != qualified:
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlproc",
        description="Generate, quantize for, compile for and simulate the dlproc int8 FPGA processor.",
    )
    parser.add_argument("--version", action="version", version=f"dlproc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _load_command_modules():
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    # A command's --json output is read by a program: no progress bars around it.
    bars = progress.quiet() if getattr(args, "json", False) else contextlib.nullcontext()
    try:
        with bars:
            return int(args.func(args) or 0)
    except DlprocError as exc:
        print(f"dlproc {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dlproc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
