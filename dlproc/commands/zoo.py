"""``dlproc zoo list [--json]`` and ``dlproc zoo export NAME [--input-size H,W] [--seed S] -o FILE.onnx``.

The model zoo (:mod:`dlproc.models.zoo`): the classic CNNs as float ONNX models with random
weights at their published shapes. ``export`` also writes ``FILE_calibration.npy``, a batch of
random inputs to calibrate the quantizer with (``dlproc quantize FILE.onnx --calibration
FILE_calibration.npy``), since random weights have no data set of their own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from dlproc.errors import DlprocError

CALIBRATION_FRAMES = 8


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("zoo", help="list or export the model zoo (ResNets, VGG-16, AlexNet, MobileNets, ...)",
                                   description="The networks people deploy, as float ONNX models with random weights "
                                   "at their published shapes.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="the zoo's networks with their published parameters and MACs")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=run_list)
    exp = actions.add_parser("export", help="write one network as ONNX (and a calibration batch)")
    exp.add_argument("name", metavar="NAME")
    exp.add_argument("--input-size", metavar="H,W", help="input height and width (square; default: the published)")
    exp.add_argument("--seed", type=int, default=0, help="weights' seed (default 0)")
    exp.add_argument("-o", "--output", metavar="FILE.onnx", type=Path, required=True)
    exp.set_defaults(func=run_export)


def run_list(args: argparse.Namespace) -> int:
    from dlproc.models.zoo import ZOO

    if args.json:
        print(json.dumps([{"name": e.name, "description": e.description, "input_size": e.input_size,
                           "params": e.params, "macs": e.macs, "source": e.source} for e in ZOO.values()], indent=1))
        return 0
    print(f"{'name':<15}{'input':>9}{'params':>10}{'MACs':>10}  description (source of the figures)")
    for e in ZOO.values():
        print(f"{e.name:<15}{e.input_size:>5}x{e.input_size:<3}{e.params / 1e6:>8.2f} M{e.macs / 1e9:>8.3f} G  "
              f"{e.description} ({e.source})")
    return 0


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    parts = text.replace("x", ",").split(",")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or dims[0] != dims[1] or dims[0] < 1:
        raise DlprocError(f"--input-size {text!r}: give H,W with H = W (the zoo's networks are built square), "
                          "e.g. 224,224")
    return dims[0]


def run_export(args: argparse.Namespace) -> int:
    from dlproc.models.zoo import build_zoo_model, zoo_entry

    entry = zoo_entry(args.name)
    size = _size(args.input_size) or entry.input_size
    if args.output.suffix.lower() != ".onnx":
        raise DlprocError(f"-o {str(args.output)!r}: the zoo writes ONNX models, give a FILE.onnx")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    build_zoo_model(entry.name, size, args.seed, args.output)
    calib = args.output.with_name(f"{args.output.stem}_calibration.npy")
    rng = np.random.default_rng([args.seed, 1])
    np.save(calib, rng.uniform(-1.0, 1.0, (CALIBRATION_FRAMES, 3, size, size)).astype(np.float32))
    print(f"wrote {args.output} ({entry.description}, {size}x{size}) and {calib} ({CALIBRATION_FRAMES} random inputs)")
    return 0
