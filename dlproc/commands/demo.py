"""``dlproc demo [--json] [--images N]``: the README's main job, end to end on the digits example.

The shipped digits network (``dlproc/data/models/digits.onnx``) is calibrated on the training
split, quantized to int8 and validated, compiled for the ``de10nano_int8`` processor, and a batch
of held-out images runs in the cycle-accurate Verilator simulation of the generated RTL. The demo
prints the accuracy of the float network, of the int8 golden model and of the RTL on that batch,
whether the RTL's outputs equal the golden model's bit for bit, and the profiler table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from dlproc.errors import DlprocError

PRESET = "de10nano_int8"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="digits example: quantize, compile for de10nano_int8, run on the RTL simulation, profile",
        description="Calibrate, quantize and validate the shipped digits network, compile it for the "
        "de10nano_int8 processor and run held-out images on the cycle-accurate Verilator simulation of "
        "the generated RTL; print float / int8 golden / RTL accuracy and the profiler table. The first "
        "run builds the simulator (a few minutes); later runs reuse the build.",
    )
    parser.add_argument("--images", metavar="N", type=int, default=360,
                        help="held-out images to run (default: all 360)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--preset", metavar="P", default=PRESET, help=f"processor preset (default {PRESET})")
    src.add_argument("--config", metavar="F", help="processor configuration file instead of the preset")
    parser.add_argument("--json", action="store_true",
                        help="print only {accuracy: {float, int8, rtl}, cycles, rtl_matches_golden} as JSON")
    parser.set_defaults(func=run)


class _Log:
    """Timestamped lines on stderr (stdout stays clean for --json); the bars of the long steps
    come from :mod:`dlproc.progress`."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", file=sys.stderr, flush=True)


def _top1(scores: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.asarray(scores).reshape(len(labels), -1).argmax(axis=1) == labels))


def run(args: argparse.Namespace) -> int:
    from dlproc.config import ProcessorConfig
    from dlproc.targets.golden.run import run_float, run_int8
    from dlproc.quant import Quantizer, digits_dataset
    from dlproc.quant.data import DIGITS_HELDOUT, DIGITS_MODEL
    from dlproc.targets.workflow import Workflow

    if not 1 <= args.images <= DIGITS_HELDOUT:
        raise DlprocError(f"--images {args.images}: allowed 1..{DIGITS_HELDOUT} (the held-out digits)")
    p = _Log()
    p.say(f"loading {DIGITS_MODEL.name} and calibrating on the digits training split")
    quantizer = Quantizer(DIGITS_MODEL)
    quantizer.calibrate("digits")
    qnet = quantizer.quantize()
    validation = quantizer.validate("digits:heldout")
    config = ProcessorConfig.load(args.config) if args.config else ProcessorConfig.preset(args.preset)
    p.say(f"compiling for {args.config or args.preset}")
    wf = Workflow(qnet, config, target="sim")
    cn = wf.compile()
    x, y = digits_dataset("heldout", size=qnet[qnet.inputs[0]].shape.h)
    x, y = x[:args.images], y[:args.images]
    xq = qnet.quantize_input(x)
    golden = run_int8(qnet, xq, collect=True)
    out_name = qnet.outputs[0]
    acc_float = _top1(run_float(quantizer.network, x)[out_name], y)
    acc_int8 = _top1(golden[out_name], y)
    try:
        p.say("building the Verilated processor (cached after the first run)")
        wf.deploy()
        p.say(f"running {len(x)} images on the RTL")
        scores, prof = wf.predict(x, profile=True, display=False)
    finally:
        wf.close()
    acc_rtl = _top1(scores, y)
    matches = all(np.array_equal(wf.last_hw_values[t.name], golden[t.name]) for t in cn.outputs)
    matches = matches and np.array_equal(np.asarray(scores), np.asarray(golden[out_name]))
    if args.json:
        print(json.dumps({"accuracy": {"float": acc_float, "int8": acc_int8, "rtl": acc_rtl},
                          "cycles": prof.last_frame_cycles, "rtl_matches_golden": bool(matches)}))
        return 0
    print(validation)
    print()
    print(cn.report())
    print()
    print(f"Accuracy on {len(y)} held-out digits: float {acc_float:.2%}, int8 golden {acc_int8:.2%}, "
          f"RTL {acc_rtl:.2%}; RTL outputs {'equal' if matches else 'DIFFER FROM'} the golden model bit for bit")
    print()
    print(prof.table())
    p.say("done")
    return 0 if matches else 1
