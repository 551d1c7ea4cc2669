"""Verilog generation: Verilator -Wall lint of the whole processor, ports, and `dlproc generate`."""

from __future__ import annotations

import json
import re

import pytest

from dlproc.hardware import regmap
from dlproc.cli import main
from dlproc.config import ProcessorConfig
from dlproc.hardware.gateware import LINT_WAIVERS, generate_verilog, lint

from test_gateware_core_support import small_hw


def small_config() -> ProcessorConfig:
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", 16)
    cfg.set_property("DDRBytesPerCycle", 8)
    cfg.set_property("MemoryDataWidth", 64)
    cfg.set_module_property("conv", "InputMemorySize", [10, 10, 4])
    cfg.set_module_property("conv", "OutputMemorySize", [10, 10, 4])
    cfg.set_module_property("conv", "WeightMemorySize", 1024)
    cfg.set_module_property("conv", "ParameterMemorySize", 32)
    return cfg


@pytest.fixture(scope="module")
def small_verilog() -> str:
    return generate_verilog(small_hw())


def _ports(verilog: str) -> dict[str, tuple[str, int]]:
    top = verilog[verilog.index("module dlproc_top(") :]
    top = top[: top.index("endmodule")]
    ports = {}
    for direction, rng, name in re.findall(r"^\s*(input|output)\s+(?:wire|reg)?\s*(\[\d+:0\])?\s*\\?(\S+?)\s*;", top, re.M):
        width = int(rng[1:].split(":")[0]) + 1 if rng else 1
        ports[name] = (direction, width)
    return ports


def test_top_has_exactly_the_contract_ports(small_verilog):
    w = 64
    assert _ports(small_verilog) == {
        "clk": ("input", 1), "rst": ("input", 1),
        "csr__address": ("input", regmap.CSR_ADDR_BITS), "csr__read": ("input", 1),
        "csr__write": ("input", 1), "csr__writedata": ("input", 32), "csr__readdata": ("output", 32),
        "mem__address": ("output", 32), "mem__burstcount": ("output", 3), "mem__read": ("output", 1),
        "mem__write": ("output", 1), "mem__writedata": ("output", w), "mem__byteenable": ("output", w // 8),
        "mem__waitrequest": ("input", 1), "mem__readdata": ("input", w), "mem__readdatavalid": ("input", 1),
        "irq": ("output", 1),
    }


@pytest.mark.slow
def test_verilator_lint_is_clean_with_documented_waivers(small_verilog):
    report = lint(small_verilog)
    assert "%Warning" not in report and "%Error" not in report
    assert "Verilator" in report
    # Every waiver is documented in docs/architecture.md.
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    for name in LINT_WAIVERS:
        assert name in doc, name


@pytest.mark.slow
def test_verilator_lint_is_clean_with_every_optional_block():
    """The optional blocks' gateware (adder, upsample, LRN, softmax, FC with F = 4) at C = 4 lints
    clean with the same waivers: no CMPCONST/UNSIGNED constant compares, no other class."""
    hw = small_hw(adder=True, upsample=True, lrn=True, softmax=True, fc=True, fc_lanes=4, fc_in_depth=64,
                  fc_out_max=64)
    report = lint(generate_verilog(hw))
    assert "%Warning" not in report and "%Error" not in report


@pytest.mark.slow
def test_generate_command_writes_verilog_and_manifest(tmp_path, capsys):
    cfg = small_config()
    cfg.save(tmp_path / "cfg.toml")
    out = tmp_path / "out"
    assert main(["generate", "--config", str(tmp_path / "cfg.toml"), "-o", str(out)]) == 0
    verilog = (out / "dlproc_top.v").read_text()
    assert "module dlproc_top(" in verilog
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config_hash"] == cfg.config_hash()
    assert manifest["hardware"]["c"] == 4 and manifest["hardware"]["mem_data_width"] == 64
    assert manifest["ports"]["mem__writedata"] == 64
    assert ProcessorConfig.load(out / "config.toml") == cfg
    assert manifest["hardware"]["config_hash64"] == f"{cfg.hash64:016x}"


def test_generate_command_reports_missing_config(tmp_path, capsys):
    assert main(["generate", "--config", str(tmp_path / "nope.toml"), "-o", str(tmp_path)]) == 2
    assert "nope.toml does not exist" in capsys.readouterr().err


def test_unbuildable_configuration_is_a_clear_config_error():
    from dlproc.errors import ConfigError

    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", 4)
    cfg.set_module_property("conv", "InputMemorySize", [2048, 1024, 1])  # 2 Mi words of 2 bytes
    with pytest.raises(ConfigError, match=r"inp_depth = 2097152 words is outside the encodable range 1..1048576"):
        generate_verilog(cfg)


def test_verilog_keeps_xor_with_constants(small_verilog):
    # rtlil_to_verilog runs Yosys's proc without its trailing opt_expr, so the conv engine's
    # offset-binary adder tree stays `prod ^ 16'h8000` (one instruction in Verilator) instead of
    # `{~prod[15], prod[14:0]}` (five): docs/simulation.md "Speed".
    assert re.search(r"= prod_0_0 \^ 16'h8000;", small_verilog)
    assert not re.search(r"~ prod_0_0\[15\]", small_verilog)
