"""`dlproc config show / set / presets` through dlproc.cli.main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlproc.cli import main
from dlproc.config import PRESETS, ProcessorConfig


def test_show_preset_lists_every_module_and_property(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--preset", "arria10soc_int8"]) == 0
    out = capsys.readouterr().out
    cfg = ProcessorConfig.preset("arria10soc_int8")
    for heading in ('Processing Module "conv"', 'Processing Module "fc"', 'Processing Module "adder"',
                    "Processor Top Level Properties", "System Level Properties"):
        assert heading in out
    for specs in ProcessorConfig.property_specs().values():
        for spec in specs:
            assert f"{spec.name}: " in out
    assert "ConvThreadNumber: 576" in out
    assert "DDRBytesPerCycle: 16" in out
    assert "SynthesisToolDeviceName: '10AS066N3F40E2SG'" in out
    assert f"config_hash: {cfg.config_hash()}" in out
    assert f"0x{cfg.hash64:016x}" in out


def test_show_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "ConvThreadNumber: 16" in out and ProcessorConfig().config_hash() in out


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--preset", "de10nano_int8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cfg = ProcessorConfig.preset("de10nano_int8")
    assert data["config_hash"] == cfg.config_hash()
    assert data["hash64"] == f"0x{cfg.hash64:016x}"
    assert data["conv"]["ConvThreadNumber"] == 256
    assert data["conv"]["InputMemorySize"] == [32, 32, 64]
    assert data["top"]["Board"] == "de10-nano"
    assert data["derived"]["TargetPlatform"] == "Terasic DE10-Nano SoC"
    assert data["derived"]["SynthesisToolChipFamily"] == "Cyclone V"
    rebuilt = ProcessorConfig.from_dict({k: data[k] for k in ("top", "conv", "fc", "adder")})
    assert rebuilt == cfg


def test_set_writes_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "my.toml"
    args = ["config", "set", "--preset", "de10nano_int8", "conv.LRNBlockGeneration=on",
            "top.TargetFrequency=200", "custom.Multiplication=off", "FC.fcthreadnumber=32",
            "conv.InputMemorySize=[16 16 32]", "MemoryDataWidth=64", "DDRBytesPerCycle=8", "-o", str(out_file)]
    assert main(args) == 0
    expected = ProcessorConfig.preset("de10nano_int8")
    expected.set_module_property("conv", "LRNBlockGeneration", True)
    expected.set_property("TargetFrequency", 200)
    expected.set_module_property("adder", "Multiplication", False)
    expected.set_module_property("fc", "FCThreadNumber", 32)
    expected.set_module_property("conv", "InputMemorySize", [16, 16, 32])
    expected.update([("top", "MemoryDataWidth", 64), ("top", "DDRBytesPerCycle", 8)])
    assert ProcessorConfig.load(out_file) == expected
    assert expected.config_hash() in capsys.readouterr().out

    # ... and --config starts from that file.
    again = tmp_path / "again.toml"
    assert main(["config", "set", "--config", str(out_file), "conv.ConvThreadNumber=64", "-o", str(again)]) == 0
    expected.set_module_property("conv", "ConvThreadNumber", 64)
    assert ProcessorConfig.load(again) == expected
    capsys.readouterr()
    assert main(["config", "show", "--config", str(again), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config_hash"] == expected.config_hash()


def test_set_without_output_prints_toml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["config", "set", "conv.ConvThreadNumber=9"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "printed.toml"
    path.write_text(text)
    expected = ProcessorConfig()
    expected.set_module_property("conv", "ConvThreadNumber", 9)
    assert ProcessorConfig.load(path) == expected


@pytest.mark.parametrize("assignment,fragment", [
    ("conv.ConvThreadNumber=50", "conv.ConvThreadNumber = '50' is not allowed: a dlproc conv thread is one MAC"),
    ("ConvThreadNumber=64", "write conv.ConvThreadNumber"),
    ("InputMemorySize=64", "conv.InputMemorySize or fc.InputMemorySize or adder.InputMemorySize"),
    ("pool.Size=3", "unknown module 'pool'"),
    ("conv.Size=3", "unknown property 'Size' of module 'conv'"),
    ("Frequency=3", "unknown property 'Frequency' of module 'top'"),
    ("TargetFrequency", "malformed"),
    ("top.ProcessorDataType=single", "dlproc is an int8 processor"),
    ("DDRBytesPerCycle=32", "must not exceed MemoryDataWidth/8"),
])
def test_set_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             assignment: str, fragment: str) -> None:
    out_file = tmp_path / "x.toml"
    assert main(["config", "set", assignment, "-o", str(out_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlproc config: error: ")
    assert fragment in err
    assert "Traceback" not in err
    assert not out_file.exists()


def test_unknown_preset_and_bad_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["config", "show", "--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'nope'" in err and all(name in err for name in PRESETS)
    bad = tmp_path / "bad.toml"
    bad.write_text("[conv]\nConvThreadNumber = = 3\n")
    assert main(["config", "show", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "malformed TOML" in err


def test_preset_and_config_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["config", "show", "--preset", "de10nano_int8", "--config", "x.toml"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_presets_listing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "presets"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(PRESETS)
    assert "ConvThreadNumber 256 (C=16)" in lines[0] and "5CSEBA6U23I7" in lines[0]
    assert "ConvThreadNumber 576 (C=24)" in lines[1] and "128-bit memory" in lines[1]


def test_config_without_action_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config"]) == 1
    assert "show" in capsys.readouterr().out
