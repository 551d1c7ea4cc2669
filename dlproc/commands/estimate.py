"""``dlproc estimate MODEL --config F|--preset P [--json] [--resources]``: performance without RTL.

MODEL is a float ONNX model or a Darknet cfg (only the shapes matter: the network is quantized
with synthetic calibration data, int8 assumed), a quantized network (``.dlq``) or a compiled one
(``.dlnet``). The network is compiled for the configuration and its instruction stream is timed by
the cycle model (:mod:`dlproc.estimate.performance`); the table follows MATLAB's
``estimatePerformance`` layout. ``--resources`` appends the resource estimate
(:mod:`dlproc.estimate.resources`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dlproc.config import PRESETS, ProcessorConfig
from dlproc.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "estimate",
        help="estimate per-layer cycles, frames/s and MAC utilization of a network (no RTL)",
        description="Compile MODEL for the processor configuration and time its instruction stream with "
        "the cycle model of the processor (fetch, load, compute and store units, dependency tokens, DDR "
        "model). Prints MATLAB's estimatePerformance table with GOP/s, MAC utilization and what bounds "
        "each layer. MODEL: .onnx or Darknet .cfg (float; quantized with synthetic calibration data), "
        ".dlq (quantized) or .dlnet (compiled).",
    )
    parser.add_argument("model", metavar="MODEL", help="an .onnx, Darknet .cfg, .dlq or .dlnet file")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", metavar="P", help=f"a configuration preset ({', '.join(PRESETS)})")
    source.add_argument("--config", metavar="F", help="a TOML configuration file")
    parser.add_argument("--frames", type=int, default=1, help="FramesNum for Total Latency (default 1)")
    parser.add_argument("--input-size", metavar="HxW", help="override the input height and width (ONNX/Darknet)")
    parser.add_argument("--json", action="store_true",
                        help='print {"layers": [...], "total": {...}} instead of the table')
    parser.add_argument("--resources", action="store_true", help="also print the resource estimate")
    parser.set_defaults(func=run)


def _config(args: argparse.Namespace) -> ProcessorConfig:
    if args.preset:
        return ProcessorConfig.preset(args.preset)
    return ProcessorConfig.load(args.config)


def _input_size(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    h, sep, w = text.lower().partition("x")
    try:
        size = (int(h), int(w))
    except ValueError:
        size = (0, 0)
    if not sep or min(size) < 1:
        raise ConfigError(f"--input-size {text!r} is malformed: write HxW with positive integers, e.g. 224x224")
    return size


def run(args: argparse.Namespace) -> int:
    from dlproc.estimate.performance import EstimateError, estimate_performance, load_for_estimate

    if args.frames < 1:
        raise EstimateError(f"--frames must be >= 1, got {args.frames}")
    cfg = _config(args)
    network = load_for_estimate(args.model, input_size=_input_size(args.input_size))
    report = estimate_performance(cfg, network, frames=args.frames)
    resources = None
    if args.resources:
        from dlproc.estimate.resources import estimate_resources

        resources = estimate_resources(cfg, name=args.preset or args.config)
    if args.json:
        doc = report.to_json()
        if resources is not None:
            doc["resources"] = resources.to_dict()
        print(json.dumps(doc, indent=1))
        return 0
    print(report.table())
    if resources is not None:
        print()
        print(resources.format())
    return 0
