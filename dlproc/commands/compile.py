"""``dlproc compile MODEL --config F|--preset P [--calibration DATA] -o NET``: compile a network.

MODEL is a quantized network (``.dlq``) or a float model (ONNX, Darknet cfg, or a shipped model
name), which is first calibrated on ``--calibration`` data and quantized. The compile log lists
the layers tagged (HW Layer)/(SW Layer), a notice per SW layer, the layer groups and the external
memory map, as MATLAB's ``compile`` prints them; the compiled network goes to NET (``.dlnet``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dlproc.errors import CompileError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a quantized network for a processor configuration (.dlnet)",
        description="Partition the network into hardware and software layers, tile and schedule every "
        "hardware layer, plan the external memory and write the compiled network file. MODEL is a .dlq "
        "file (dlproc quantize) or a float model (.onnx, Darknet .cfg, shipped model name) that is "
        "quantized first with --calibration data.",
    )
    parser.add_argument("model", metavar="MODEL", help="a .dlq quantized network or a float model")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="F", type=Path, help="processor configuration file (TOML)")
    src.add_argument("--preset", metavar="P", help="processor configuration preset (de10nano_int8, arria10soc_int8)")
    parser.add_argument("--calibration", metavar="DATA",
                        help="calibration data for a float MODEL (.npy, image folder, 'digits')")
    parser.add_argument("--weights", metavar="FILE", help="Darknet .weights file of a float MODEL")
    parser.add_argument("--base", metavar="ADDR", default="0", help="DRAM base address of the buffers (default 0)")
    parser.add_argument("--no-fold", action="store_true", help="disable first-layer folding")
    parser.add_argument("--json", action="store_true", help="print the layer table and memory map as JSON")
    parser.add_argument("-o", "--output", metavar="NET", required=True, type=Path, help="compiled network (.dlnet)")
    parser.set_defaults(func=run)


def load_config(config: Path | None, preset: str | None) -> Any:
    from dlproc.config import ProcessorConfig

    return ProcessorConfig.load(config) if config is not None else ProcessorConfig.preset(preset)


def load_quantized(model: str, calibration: str | None, weights: str | None = None, config: Any = None) -> Any:
    """A QuantizedNetwork from a .dlq file, or a float model quantized on the calibration data."""
    from dlproc.quant import Quantizer
    from dlproc.quant.data import resolve_model

    from dlproc.frontends.filetype import detect
    from dlproc.quant.imported import QUANTIZED_KINDS, load_quantized_model

    kind = detect(resolve_model(model))  # by content: a .dlq saved as net.q is still a .dlq
    if kind in QUANTIZED_KINDS:
        if calibration:
            raise CompileError(f"--calibration is for float models; {model!r} is {kind.value}, already quantized")
        return load_quantized_model(resolve_model(model), "dlproc compile")
    if not kind.is_float_model:
        raise CompileError(f"{model!r}: this is {kind.value}; dlproc compile expects a quantized network (.dlq, "
                           "QDQ ONNX, int8 .tflite) or a float model (ONNX, Darknet .cfg)")
    if not calibration:
        raise CompileError(f"{model!r} is {kind.value}: give --calibration DATA to quantize it, or pass a .dlq file "
                           "from dlproc quantize")
    from dlproc.frontends import load_network

    # With the configuration, a softmax becomes the softmax block's int8 softmax when the block exists.
    quantizer = Quantizer(load_network(resolve_model(model), weights=weights), config=config)
    quantizer.calibrate(calibration)
    return quantizer.quantize()


def run(args: argparse.Namespace) -> int:
    from dlproc.compiler import compile_network, netfile

    config = load_config(args.config, args.preset)
    try:
        base = int(args.base, 0)
    except ValueError:
        raise CompileError(f"--base {args.base!r} is not an integer (e.g. 0x10000000)") from None
    qnet = load_quantized(args.model, args.calibration, args.weights, config)
    cn = compile_network(qnet, config, base=base, fold_input=not args.no_fold)
    netfile.save(cn, args.output)
    if args.json:
        print(json.dumps({
            "output": str(args.output),
            "layers": [{"name": l.name, "op": l.op, "hw": l.hw, "insn_first": l.insn_first,
                        "insn_count": l.insn_count, "note": l.note} for l in cn.layers],
            "notices": cn.notices, "groups": cn.groups, "memory_map": cn.memory_map.to_list(),
            "instructions": cn.insn_count}, indent=1))
    else:
        print(cn.report())
        print(f"\nwrote {args.output}")
    return 0
