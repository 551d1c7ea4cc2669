"""``dlproc config``: show, change and list processor configurations.

    dlproc config show [--preset P | --config F] [--json]
    dlproc config set [--preset P | --config F] conv.LRNBlockGeneration=on TargetFrequency=200 ... [-o F]
    dlproc config presets

Assignments name a module property as ``module.Property=value`` (module ``conv``, ``fc``,
``adder`` or its alias ``custom``) and a top-level property as ``Property=value`` or
``top.Property=value``. Names are case-insensitive. All assignments are applied together, so
cross-property rules (DDRBytesPerCycle <= MemoryDataWidth/8) see the final values.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dlproc.config import MODULE_ALIASES, MODULES, PRESETS, TOP, ProcessorConfig, toml_text
from dlproc.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "config",
        help="show, change and list processor configurations (ProcessorConfig)",
        description="Show, change and list dlproc processor configurations (see docs/config.md).",
    )
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: _no_action(parser))

    show = actions.add_parser("show", help="list every module and property with its value, and the hash")
    _add_source(show)
    show.add_argument("--json", action="store_true", help="print JSON instead of the MATLAB-like display")
    show.set_defaults(func=_show)

    change = actions.add_parser(
        "set",
        help="change properties and write the configuration as TOML",
        description="Apply module.Property=value (or Property=value / top.Property=value for top-level "
        "properties) to the chosen configuration and write it as TOML.",
    )
    _add_source(change)
    change.add_argument("assignments", nargs="+", metavar="NAME=VALUE",
                        help="e.g. conv.LRNBlockGeneration=on conv.InputMemorySize=32,32,64 TargetFrequency=200")
    change.add_argument("-o", "--output", metavar="FILE",
                        help="TOML file to write (default: print the TOML to standard output)")
    change.set_defaults(func=_set)

    listing = actions.add_parser("presets", help="list the presets")
    listing.set_defaults(func=_presets)


def _no_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 1


def _add_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="P", help=f"start from a preset ({', '.join(PRESETS)})")
    source.add_argument("--config", metavar="F", help="start from a TOML configuration file")


def _source_config(args: argparse.Namespace) -> ProcessorConfig:
    if args.preset:
        return ProcessorConfig.preset(args.preset)
    if args.config:
        return ProcessorConfig.load(args.config)
    return ProcessorConfig()


def _show(args: argparse.Namespace) -> int:
    cfg = _source_config(args)
    if args.json:
        payload: dict[str, Any] = cfg.to_dict()
        payload["derived"] = {
            name: cfg.get_property(name)
            for name in ("TargetPlatform", "SynthesisTool", "SynthesisToolChipFamily", "SynthesisToolDeviceName")
        }
        payload["config_hash"] = cfg.config_hash()
        payload["hash64"] = f"0x{cfg.hash64:016x}"
        print(json.dumps(payload, indent=2))
    else:
        print(cfg.display())
        print()
        print(f"config_hash: {cfg.config_hash()}")
        print(f"hash64:      0x{cfg.hash64:016x}")
    return 0


def parse_assignment(text: str) -> tuple[str, str, str]:
    """Split 'module.Property=value', 'top.Property=value' or 'Property=value' (top level)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError(
            f"assignment {text!r} is malformed: write module.Property=value (modules "
            f"{', '.join(MODULES)}, {', '.join(MODULE_ALIASES)}) or Property=value / top.Property=value"
        )
    module, dot, prop = name.rpartition(".")
    if not dot:
        return _bare_name(name, value)
    return module, prop, value


def _bare_name(prop: str, value: str) -> tuple[str, str, str]:
    # A bare name is a top-level property. If it is not one but a module has it, say which
    # prefix to use rather than a bare "unknown property".
    top_names = {spec.name.lower() for spec in ProcessorConfig.property_specs()[TOP]}
    derived = {"synthesistool", "synthesistoolchipfamily", "synthesistooldevicename"}
    if prop.lower() in top_names or prop.lower() in derived:
        return TOP, prop, value
    owners = [
        module for module, specs in ProcessorConfig.property_specs().items()
        if module != TOP and prop.lower() in {spec.name.lower() for spec in specs}
    ]
    if owners:
        choices = " or ".join(f"{module}.{prop}" for module in owners)
        raise ConfigError(f"{prop!r} is a module property, not a top-level one: write {choices}")
    return TOP, prop, value  # let ProcessorConfig report the unknown name with the valid ones


def _set(args: argparse.Namespace) -> int:
    cfg = _source_config(args)
    cfg.update([parse_assignment(text) for text in args.assignments])
    if args.output:
        cfg.save(args.output)
        print(f"wrote {args.output} (config_hash {cfg.config_hash()})")
    else:
        sys.stdout.write(f"# config_hash = {cfg.config_hash()}\n" + toml_text(cfg.to_dict()))
    return 0


def _presets(args: argparse.Namespace) -> int:
    for name in PRESETS:
        cfg = ProcessorConfig.preset(name)
        print(
            f"{name:<18} {cfg.target_platform} ({cfg.get_property('SynthesisToolDeviceName')}), "
            f"ConvThreadNumber {cfg.get_module_property('conv', 'ConvThreadNumber')} (C={cfg.conv_c}), "
            f"FCThreadNumber {cfg.fc_threads}, {cfg.target_frequency_mhz:g} MHz, "
            f"{cfg.memory_data_width}-bit memory, DDR {cfg.ddr_bytes_per_cycle} B/cycle, "
            f"{cfg.ddr_latency_cycles} cycles latency"
        )
    return 0
