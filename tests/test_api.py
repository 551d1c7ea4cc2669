"""The scripting API (dlproc.api) in MATLAB's shape: the names resolve to the real implementation,
bad names and values are refused with messages that name them, and the results equal what the
underlying modules and the CLI compute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlproc
from dlproc.errors import ConfigError, DlprocError, ModelError

from layerprog_cases import small_config

REPO = Path(__file__).resolve().parents[1]


def test_api_names_are_the_existing_classes():
    from dlproc.config import ProcessorConfig
    from dlproc.targets.workflow import Workflow

    assert dlproc.ProcessorConfig is ProcessorConfig
    assert dlproc.Workflow is Workflow
    assert {"ProcessorConfig", "Workflow", "build_processor", "estimate", "quantize"} <= set(dir(dlproc))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dlproc.nope  # noqa: B018


def test_estimate_is_callable_and_still_the_package():
    import dlproc.estimate.explore  # importing a submodule must not replace the callable

    assert callable(dlproc.estimate)
    assert dlproc.estimate.PerformanceReport.__name__ == "PerformanceReport"
    assert dlproc.estimate.explore.explore is not None


def test_set_module_property_matlab_names_and_errors():
    cfg = dlproc.ProcessorConfig.preset("de10nano_int8")
    cfg.set_module_property("conv", "LRNBlockGeneration", "on")
    assert cfg.get_module_property("conv", "LRNBlockGeneration") is True
    with pytest.raises(ConfigError, match="unknown module 'cnv'"):
        cfg.set_module_property("cnv", "LRNBlockGeneration", "on")
    with pytest.raises(ConfigError, match="unknown property 'LRNBlock' of module 'conv'"):
        cfg.set_module_property("conv", "LRNBlock", "on")
    with pytest.raises(ConfigError, match="unknown preset 'de10'"):
        dlproc.ProcessorConfig.preset("de10")


def test_estimate_equals_the_cli_estimate(capsys):
    from dlproc.cli import main
    from dlproc.quant.data import DIGITS_MODEL

    report = dlproc.estimate("digits.onnx", "de10nano_int8")  # the API resolves shipped names
    assert main(["estimate", str(DIGITS_MODEL), "--preset", "de10nano_int8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert report.cycles == doc["total"]["cycles"] > 0
    assert [l.name for l in report.layers] == [l["name"] for l in doc["layers"]]
    assert report.fps == pytest.approx(report.clock_mhz * 1e6 / report.cycles)


def test_estimate_bad_inputs_name_them(tmp_path):
    with pytest.raises(ModelError, match="nope.onnx: no such file"):
        dlproc.estimate("nope.onnx", "de10nano_int8")
    with pytest.raises(ConfigError, match="'de10nano' is neither a preset"):
        dlproc.estimate("digits.onnx", "de10nano")
    with pytest.raises(ConfigError, match="not int"):
        dlproc.estimate("digits.onnx", 3)
    with pytest.raises(DlprocError, match="frames must be a positive integer, got 0"):
        dlproc.estimate("digits.onnx", "de10nano_int8", frames=0)


def test_build_processor_refuses_an_unknown_board(tmp_path):
    with pytest.raises(ConfigError, match="board 'de10nano' is not one of de10-nano, arria10-soc"):
        dlproc.build_processor("de10nano_int8", board="de10nano", out=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written before the check


def test_build_processor_generates_the_board_project(tmp_path):
    cfg = small_config(4)
    result = dlproc.build_processor(cfg, board="de10-nano", out=tmp_path / "x", synthesize=False, run_quartus=False,
                                    verbose=False)
    assert result.output_dir == tmp_path / "x" and result.fits
    assert (tmp_path / "x" / "ip/dlproc/dlproc_top.v").stat().st_size > 10_000
    assert result.resources.device.name == "5CSEBA6U23I7"


def test_quantize_and_workflow_on_the_golden_target():
    qnet = dlproc.quantize("digits.onnx", calibration="digits")
    cfg = small_config(4)
    hw = dlproc.Workflow(qnet, cfg, target="golden")
    cn = hw.compile()
    assert [l.name for l in cn.layers if l.hw][:2] == ["conv1", "pool1"]
    from dlproc.quant import digits_dataset

    x, labels = digits_dataset("heldout")
    y, prof = hw.predict(x[:20], profile=True, display=False)
    assert y.shape[0] == 20 and float(np.mean(y.reshape(20, -1).argmax(1) == labels[:20])) >= 0.8
    assert prof.target == "golden" and not prof.has_cycles
    with pytest.raises(DlprocError, match="method 'max' is not one of minmax"):
        dlproc.quantize("digits.onnx", calibration="digits", method="max")


def test_example_script_shows_its_usage():
    # The script itself builds the de10nano_int8 processor (minutes with synthesis); here only
    # that it is runnable as is: it imports and parses its arguments.
    out = subprocess.run([sys.executable, str(REPO / "examples/build_processor.py"), "--help"],
                         capture_output=True, text=True, check=True)
    assert "buildProcessor" in out.stdout and "--no-synth" in out.stdout


def test_example_script_runs_as_is(tmp_path):
    """The buildProcessor script end to end (without the Yosys check, which takes minutes): the
    estimate of the digits network, then the de10nano_int8 processor with the LRN block and its
    DE10-Nano project in the output folder."""
    out = subprocess.run([sys.executable, str(REPO / "examples/build_processor.py"), "--no-synth",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fits the device: True" in out.stdout
    assert "Total" in out.stdout or "total" in out.stdout  # the performance estimate's table
    project = tmp_path / "x"
    verilog = (project / "ip" / "dlproc" / "dlproc_top.v").read_text()
    assert "module dlproc_top" in verilog and "lrn" in verilog.lower()  # the LRN block is in the Verilog
    assert (project / "build.sh").exists() and any(project.glob("*.qsf"))
    saved = dlproc.ProcessorConfig.load(project / "dlproc_config.toml")
    assert saved.get_module_property("conv", "LRNBlockGeneration") is True
