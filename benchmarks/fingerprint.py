"""Fingerprint of everything a refactoring must not change: generated Verilog, compiled programs,
estimated cycles.

    python benchmarks/fingerprint.py --save FILE.json     # record today's fingerprint
    python benchmarks/fingerprint.py --check FILE.json    # compare against a recorded one
    python benchmarks/fingerprint.py [--quick] [--json]   # print it

The fingerprint holds

* the SHA-256 of the generated Verilog for both presets and for the C = 4 configuration with every
  optional block (``tests/sim_fixture.blocks_config``, the RTL tests' processor);
* the SHA-256 of the compiled ``.dlnet`` for the digits network (``de10nano_int8``) and for
  GoogLeNet at 224x224 (``arria10soc_int8`` with the LRN block), with their estimated cycles;
* for every single-layer program of ``benchmarks/bench_estimator.py`` (conv, pool, LRN) and its
  networks, on its three configurations: the SHA-256 of the DRAM image (instructions, weights,
  parameters, input) and the estimator's cycles.

Same Verilog and same programs give the same RTL cycles (the simulation is deterministic), so a
matching fingerprint means every benchmark's cycle counts are unchanged. ``--quick`` leaves out
the preset Verilog and GoogLeNet (the two slow parts, about two minutes together).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
# The test folders (tests/ and its per-stage folders) hold the shared network builders.
sys.path[:0] = [str(ROOT / "tests")] + sorted(str(d) for d in (ROOT / "tests").iterdir() if d.is_dir() and d.name != "data")
sys.path.insert(0, str(ROOT / "benchmarks"))

from dlproc.compiler import compile_network  # noqa: E402
from dlproc.config import ProcessorConfig  # noqa: E402
from dlproc.estimate import estimate_compiled, simulate_program  # noqa: E402
from dlproc.estimate.performance import synthetic_quantize  # noqa: E402
from dlproc.hardware.gateware import generate_verilog  # noqa: E402
from dlproc.compiler.netfile import to_bytes  # noqa: E402


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def verilog_fingerprint(quick: bool) -> dict[str, str]:
    from sim_fixture import blocks_config

    configs = {"c4_blocks": blocks_config()}
    if not quick:
        configs["de10nano_int8"] = ProcessorConfig.preset("de10nano_int8")
        configs["arria10soc_int8"] = ProcessorConfig.preset("arria10soc_int8")
    return {name: sha(generate_verilog(cfg)) for name, cfg in configs.items()}


def compiled_fingerprint(cn: Any, cfg: ProcessorConfig) -> dict[str, Any]:
    rep = estimate_compiled(cn, cfg)
    return {"dlnet": sha(to_bytes(cn)), "cycles": rep.cycles, "layers": [l.cycles for l in rep.layers]}


def network_fingerprint(quick: bool) -> dict[str, Any]:
    from dlproc.quant import Quantizer
    from dlproc.frontends.onnx import load_onnx

    out = {}
    digits = load_onnx(ROOT / "dlproc" / "data" / "models" / "digits.onnx")
    q = Quantizer(digits)
    q.calibrate("digits")
    cfg = ProcessorConfig.preset("de10nano_int8")
    out["digits/de10nano_int8"] = compiled_fingerprint(compile_network(q.quantize(), cfg), cfg)
    if not quick:
        from bench_googlenet import config_for, quantized_googlenet

        _, qnet = quantized_googlenet(224)
        cfg = config_for("arria10soc_int8")
        out["googlenet224/arria10soc_int8"] = compiled_fingerprint(compile_network(qnet, cfg), cfg)
    return out


def program_fingerprint() -> dict[str, Any]:
    import bench_estimator as be

    out: dict[str, Any] = {}
    for cname, cfg in be.configs().items():
        scale = 1 if cfg.conv_c == 4 else 2
        progs = be.layer_programs(cfg, scale)
        lcfg = be.lrn_config(cfg)
        for name, prog in progs.items():
            out[f"{cname}/{name}"] = {"image": sha(prog.image), "insns": prog.insn_count,
                                      "cycles": simulate_program(cfg, prog.instructions).cycles}
        for name, prog in be.lrn_programs(lcfg, scale).items():
            out[f"{cname}/{name}"] = {"image": sha(prog.image), "insns": prog.insn_count,
                                      "cycles": simulate_program(lcfg, prog.instructions).cycles}
        for name, net in be.networks(scale).items():
            out[f"{cname}/net {name}"] = compiled_fingerprint(compile_network(synthetic_quantize(net), cfg), cfg)
    return out


def fingerprint(quick: bool) -> dict[str, Any]:
    return {"verilog": verilog_fingerprint(quick), "networks": network_fingerprint(quick),
            "programs": program_fingerprint()}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Entries present in both fingerprints whose values differ (a quick run checks a subset)."""
    diffs = []
    for part, entries in new.items():
        for key, value in entries.items():
            if key in old.get(part, {}) and old[part][key] != value:
                diffs.append(f"{part}/{key}: was {old[part][key]}, now {value}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", metavar="FILE")
    ap.add_argument("--check", metavar="FILE")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fp = fingerprint(args.quick)
    if args.save:
        Path(args.save).write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n")
    if args.json or not (args.save or args.check):
        print(json.dumps(fp, indent=1, sort_keys=True))
    if args.check:
        diffs = differences(json.loads(Path(args.check).read_text()), fp)
        checked = sum(len(v) for v in fp.values())
        for d in diffs:
            print("DIFFERS", d)
        print(f"{checked} entries checked, {len(diffs)} differ")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
