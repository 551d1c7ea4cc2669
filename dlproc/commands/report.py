"""``dlproc report NET [--config F | --preset P] [--profile PROFILE.json] -o FILE.html``.

One self-contained HTML page with plots (and the plots as PNG files next to it) for a compiled
network on a configuration; see :mod:`dlproc.report`. NET is a ``.dlnet`` (its own configuration
is used unless one is given, which must be the one it was compiled for), or a ``.dlq``/``.onnx``/
Darknet ``.cfg`` network that is compiled here for the configuration. ``--profile`` is the JSON of
``dlproc predict ... --profile --json`` (the RTL's per-layer cycles), which adds the estimate
against RTL section.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dlproc.errors import DlprocError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="HTML report with plots: cycles by bound, MAC utilization, roofline, estimate vs RTL, resources",
        description="Write one self-contained HTML file (plots embedded, and also written as PNGs next to it) "
        "for a compiled network and a configuration: per-layer cycles stacked by what bounds them (compute, "
        "DDR, fixed cost), MAC utilization per layer, a roofline, the estimate against the RTL profile "
        "(--profile) and the resources against the device.",
    )
    parser.add_argument("network", metavar="NET", type=Path, help="a .dlnet (or a .dlq/.onnx/.cfg to compile)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="F", type=Path, help="processor configuration file (TOML)")
    src.add_argument("--preset", metavar="P", help="processor configuration preset")
    parser.add_argument("--profile", metavar="PROFILE.json", type=Path,
                        help="output of `dlproc predict ... --profile --json` (adds estimate vs RTL)")
    parser.add_argument("-o", "--output", metavar="FILE.html", required=True, type=Path, help="the report file")
    parser.set_defaults(func=run)


def load_compiled(path: Path, config: Any) -> Any:
    """A CompiledNetwork from a .dlnet, or any other network compiled here for ``config``."""
    from dlproc.compiler import netfile

    if not path.is_file():
        from dlproc.quant.data import resolve_model

        if not Path(resolve_model(path)).is_file():
            raise DlprocError(f"network file {str(path)!r} does not exist")
        path = Path(resolve_model(path))
    if path.suffix.lower() == ".dlnet":
        return netfile.load(path)
    if config is None:
        raise DlprocError(f"{str(path)!r} is not compiled (.dlnet): give --config F or --preset P to compile it")
    from dlproc.compiler import compile_network
    from dlproc.estimate.performance import load_for_estimate, synthetic_quantize
    from dlproc.ir import Network

    network = load_for_estimate(path, purpose="dlproc report")
    if isinstance(network, Network):
        network = synthetic_quantize(network)  # only shapes matter for the figures
    return compile_network(network, config)


def _load_profile(path: Path | None) -> Any:
    if path is None:
        return None
    if not path.is_file():
        raise DlprocError(f"profile file {str(path)!r} does not exist")
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DlprocError(f"profile file {str(path)!r} is not JSON (expected the output of `dlproc predict "
                          f"--profile --json`): {exc}") from None


def run(args: argparse.Namespace) -> int:
    from dlproc.report import write_report
    from dlproc.commands.compile import load_config

    config = load_config(args.config, args.preset) if (args.config or args.preset) else None
    cn = load_compiled(args.network, config)
    name = args.preset or (args.config.stem if args.config else "")
    path = write_report(args.output, cn, config, profile=_load_profile(args.profile), config_name=name)
    print(f"wrote {path}")
    return 0
