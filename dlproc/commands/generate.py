"""``dlproc generate``: write the Verilog of one processor configuration and its manifest.

    dlproc generate --preset de10nano_int8 -o build/de10nano
    dlproc generate --config my.toml -o build/mine

writes ``DIR/dlproc_top.v`` and ``DIR/manifest.json`` (configuration hash, hardware parameters,
ports, register/ISA versions and the Verilog's sha256), plus ``DIR/config.toml``, the exact
configuration it was generated from.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

from dlproc.errors import ConfigError

VERILOG_NAME = "dlproc_top.v"
MANIFEST_NAME = "manifest.json"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="write the Verilog of a processor configuration",
        description="Generate the Verilog (top module dlproc_top) of a processor configuration.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="configuration file (TOML, see docs/config.md)")
    source.add_argument("--preset", help="a preset name, e.g. de10nano_int8 or arria10soc_int8")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output directory")
    parser.set_defaults(func=run)


def _load_config(args: argparse.Namespace):
    from dlproc.config import ProcessorConfig

    if args.preset:
        return ProcessorConfig.preset(args.preset)
    if not args.config.is_file():
        raise ConfigError(f"configuration file {args.config} does not exist")
    return ProcessorConfig.load(args.config)


def manifest(config, verilog: str) -> dict:
    """What a board flow or runtime needs to know about generated Verilog."""
    from dlproc.hardware import isa, regmap
    from dlproc.hardware.gateware import TOP_NAME, hardware_params
    from dlproc.hardware.gateware.avalon import burst_bits

    hw = hardware_params(config)
    w = hw.mem_data_width
    return {
        "top": TOP_NAME,
        "verilog": VERILOG_NAME,
        "verilog_sha256": hashlib.sha256(verilog.encode()).hexdigest(),
        "config_hash": config.config_hash(),
        "config_hash64": f"{config.hash64:016x}",
        "isa_version": isa.ISA_VERSION,
        "hw_version": f"{regmap.VERSION_MAJOR}.{regmap.VERSION_MINOR}",
        "hardware": dataclasses.asdict(hw) | {"config_hash64": f"{hw.config_hash64:016x}"},
        "ports": {
            "clk": 1,
            "rst": 1,
            "csr__address": regmap.CSR_ADDR_BITS,
            "csr__read": 1,
            "csr__write": 1,
            "csr__writedata": 32,
            "csr__readdata": 32,
            **_memory_ports(hw.mem_ports, w, burst_bits(hw.max_burst)),
            "irq": 1,
        },
    }


def _memory_ports(ports: int, w: int, bb: int) -> dict[str, int]:
    """The memory master port widths: one read/write ``mem``, or (MemoryPorts = 2) a read-only
    ``mem`` and a write-only ``mem1`` with its write responses."""
    read = {"mem__address": 32, "mem__burstcount": bb, "mem__read": 1}
    write = {"write": 1, "writedata": w, "byteenable": w // 8}
    response = {"mem__waitrequest": 1, "mem__readdata": w, "mem__readdatavalid": 1}
    if ports == 1:
        return {**read, **{f"mem__{k}": v for k, v in write.items()}, **response}
    return {**read, **response, "mem1__address": 32, "mem1__burstcount": bb,
            **{f"mem1__{k}": v for k, v in write.items()}, "mem1__waitrequest": 1,
            "mem1__writeresponsevalid": 1, "mem1__response": 2}


def run(args: argparse.Namespace) -> int:
    from dlproc.hardware.gateware import generate_verilog

    config = _load_config(args)
    verilog = generate_verilog(config)
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    (out / VERILOG_NAME).write_text(verilog)
    config.save(out / "config.toml")
    (out / MANIFEST_NAME).write_text(json.dumps(manifest(config, verilog), indent=2) + "\n")
    print(f"wrote {out / VERILOG_NAME} ({len(verilog.splitlines())} lines), config hash {config.config_hash()[:16]}")
    return 0
