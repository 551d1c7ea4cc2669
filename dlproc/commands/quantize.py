"""``dlproc quantize MODEL --calibration DATA -o OUT``: calibrate, quantize and validate a network."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dlproc.frontends import load_network
from dlproc.quant import METHODS, Quantizer
from dlproc.errors import QuantizationError
from dlproc.quant.data import LAYOUTS, load_data, resolve_model

DATA_HELP = (
    "a .npy file of float32 inputs (NCHW unless --layout NHWC), an image folder with one "
    "sub-folder per class, or a built-in data set: 'digits' (= digits:train) or 'digits:heldout'"
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "quantize",
        help="calibrate a network on sample data, quantize it to int8 (.dlq) and validate it",
        description="Run the float network on calibration data, print the ranges of every weight, "
        "bias and activation (MATLAB's calibrate table), write the int8 network to OUT (.dlq), and "
        "with --validate print the float and quantized metric (top-1 accuracy) and learnable "
        "memory. MODEL is an .onnx file, a Darknet .cfg, or a model shipped with dlproc "
        "(digits.onnx).",
    )
    parser.add_argument("model", metavar="MODEL", help="an .onnx or Darknet .cfg file, or a shipped model name")
    parser.add_argument("--calibration", metavar="DATA",
                        help=f"calibration data (float models only; a QDQ ONNX or int8 .tflite model is imported "
                        f"with its own scales): {DATA_HELP}")
    parser.add_argument("--method", choices=METHODS, default="minmax", help="activation range estimation (default minmax)")
    parser.add_argument("--percentile", type=float, default=99.99, help="percentile for --method percentile (default 99.99)")
    parser.add_argument("--validate", metavar="DATA", help=f"validation data: {DATA_HELP}")
    parser.add_argument("--labels", metavar="Y.npy", help="integer labels for a .npy --validate data set")
    parser.add_argument("--layout", choices=LAYOUTS, default="NCHW", help="layout of .npy data (default NCHW)")
    parser.add_argument("--weights", metavar="FILE", help="Darknet .weights file (default: MODEL with .weights)")
    parser.add_argument("--layer-errors", action="store_true", help="also print the per-layer quantization error on the validation (or calibration) data")
    parser.add_argument("--json", action="store_true", help="print the tables as one JSON object")
    parser.add_argument("-o", "--output", metavar="OUT", required=True, type=Path, help="the quantized network file (.dlq)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dlproc.frontends.filetype import FileKind, detect

    kind = detect(resolve_model(args.model))
    if kind.is_quantized_model:
        return _import_quantized(args, kind)
    if kind == FileKind.DLQ:
        raise QuantizationError(f"{args.model}: this is already {kind.value}; nothing to quantize")
    if not args.calibration:
        raise QuantizationError(f"{args.model}: {kind.value} needs --calibration DATA to be quantized "
                                "(only QDQ ONNX and int8 .tflite models import without calibration)")
    net = load_network(resolve_model(args.model), weights=args.weights)
    quantizer = Quantizer(net)
    # Load (and so check) all data before anything is computed or written.
    cal_data = load_data(args.calibration, quantizer.input_shape, layout=args.layout)
    val_data = None
    if args.validate:
        val_data = load_data(args.validate, quantizer.input_shape, layout=args.layout, labels=args.labels)
    elif args.labels:
        raise QuantizationError("--labels goes with --validate (calibration needs no labels)")
    calibration = quantizer.calibrate(cal_data, method=args.method, percentile=args.percentile)
    qnet = quantizer.quantize()
    validation = quantizer.validate(val_data) if val_data is not None else None
    errors = quantizer.layer_errors(val_data or cal_data) if args.layer_errors else None
    qnet.save(args.output)
    if args.json:
        doc = {"calibration": calibration.to_list(), "validation": validation.to_list() if validation else []}
        if errors is not None:
            doc["layer_errors"] = errors.to_list()
        doc["notes"] = qnet.meta.get("notes", [])
        doc["output"] = str(args.output)
        print(json.dumps(doc, indent=1))
    else:
        print(calibration)
        if validation is not None:
            print()
            print(validation)
        if errors is not None:
            print()
            print(errors)
        print()
        for note in qnet.meta.get("notes", []):
            print(f"note: {note}")
        print(f"wrote {args.output}")
    return 0


def _import_quantized(args: argparse.Namespace, kind) -> int:
    """A model that carries its own int8 quantization: import it as is, no calibration."""
    from dlproc.quant.imported import load_quantized_model

    if args.calibration or args.validate or args.layer_errors:
        raise QuantizationError(f"{args.model} is {kind.value}: it is imported with the file's scales; "
                                "--calibration, --validate and --layer-errors apply to float models only")
    qnet = load_quantized_model(resolve_model(args.model), "dlproc quantize")
    qnet.save(args.output)
    hw = sum(1 for layer in qnet if layer.hardware and layer.op != "input")
    if args.json:
        print(json.dumps({"imported": kind.name.lower(), "layers": len(qnet), "hardware_layers": hw,
                          "notes": qnet.meta.get("notes", []), "output": str(args.output)}, indent=1))
    else:
        print(f"imported {kind.value} with its own scales and zero points (no calibration): "
              f"{len(qnet)} layers, {hw} in int8 hardware")
        for note in qnet.meta.get("notes", []):
            print(f"note: {note}")
        print(f"wrote {args.output}")
    return 0
