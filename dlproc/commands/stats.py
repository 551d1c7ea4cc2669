"""``dlproc stats MODEL``: the per-layer table of a network (parameters, activations, MACs)."""

from __future__ import annotations

import argparse
import json

from dlproc.errors import ModelError
from dlproc.frontends import load_network
from dlproc.frontends.stats import NetworkStats, network_stats


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "stats",
        help="per-layer parameters, activations and MACs of a network (ONNX or Darknet cfg)",
        description="Print a Darknet-style table of a network: output shape, parameters, activations "
        "and MACs per layer, and the totals (GOP = 2 x MACs / 1e9). MODEL is an .onnx file, a Darknet "
        ".cfg (a .weights file of the same name next to it is read), or the name of a network shipped "
        "with dlproc (e.g. tiny.cfg).",
    )
    parser.add_argument("model", metavar="MODEL", help="an .onnx or Darknet .cfg file, or a shipped network name")
    parser.add_argument("--weights", metavar="FILE", help="Darknet .weights file (default: MODEL with .weights, if present)")
    parser.add_argument("--input-size", metavar="H,W", type=_size, help="input height and width")
    parser.add_argument("--macs-per-cycle", metavar="N", type=int, help="MAC rate for ideal cycle counts")
    parser.add_argument("--clock-mhz", metavar="F", type=float, help="clock for frames per second (needs --macs-per-cycle)")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")
    parser.set_defaults(func=run)


def _size(text: str) -> tuple[int, int]:
    parts = text.replace("x", ",").split(",")
    try:
        h, w = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not H,W (two positive integers, e.g. 416,416)") from None
    if h < 1 or w < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: height and width must be positive")
    return h, w


def run(args: argparse.Namespace) -> int:
    if args.clock_mhz is not None and args.macs_per_cycle is None:
        raise ModelError("--clock-mhz needs --macs-per-cycle as well")
    net = load_network(args.model, input_size=args.input_size, weights=args.weights)
    stats = network_stats(net, args.macs_per_cycle, args.clock_mhz)
    if args.json:
        print(json.dumps(stats.to_dict(), indent=1))
    else:
        print(format_table(stats, net.meta))
    return 0


def format_table(stats: NetworkStats, meta: dict | None = None) -> str:
    with_cycles = stats.macs_per_cycle is not None
    header = f"{'layer':>5}  {'name':<24} {'type':<14} {'output (HxWxC)':>16} {'params':>11} {'activations':>12} {'MACs':>14} {'BFLOPs':>8}"
    if with_cycles:
        header += f" {'cycles':>13}"
    lines = [f"network {stats.name}", header]
    for row in stats.layers:
        c, h, w = row.shape
        line = (f"{row.index:>5}  {row.name[:24]:<24} {row.op:<14} {f'{h} x {w} x {c}':>16} {row.params:>11,} "
                f"{row.activations:>12,} {row.macs:>14,} {2 * row.macs / 1e9:>8.3f}")
        if with_cycles:
            line += f" {row.cycles:>13,}"
        lines.append(line)
    lines.append("-" * len(header))
    total = (f"{'total':>5}  {'':<24} {'':<14} {'':>16} {stats.params:>11,} {stats.activations:>12,} "
             f"{stats.macs:>14,} {stats.gop:>8.3f}")
    if with_cycles:
        total += f" {stats.cycles:>13,}"
    lines.append(total)
    lines.append(f"GOP per frame (2 x MACs / 1e9): {stats.gop:.3f}")
    if with_cycles:
        lines.append(f"ideal cycles at {stats.macs_per_cycle} MACs/cycle: {stats.cycles:,}")
    if stats.frames_per_second is not None:
        lines.append(f"ideal frames/s at {stats.clock_mhz:g} MHz: {stats.frames_per_second:.2f}")
    if meta and meta.get("random_weights"):
        lines.append(f"(no .weights given: parameters are random, seed {meta.get('random_seed')}; counts are exact)")
    return "\n".join(lines)
