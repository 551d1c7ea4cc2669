"""ProcessorConfig: presets, dict/TOML round trips, malformed files and the configuration hash."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlproc.hardware import isa
from dlproc.config import PRESETS, ProcessorConfig
from dlproc.errors import ConfigError

# An alternative valid value for every settable property (module, property, value).
ALTERNATIVES = [
    ("conv", "ModuleGeneration", False),
    ("conv", "LRNBlockGeneration", True),
    ("conv", "SegmentationBlockGeneration", False),
    ("conv", "ActivationTableGeneration", True),
    ("conv", "DepthwiseBlockGeneration", False),
    ("conv", "ConvThreadNumber", 25),
    ("conv", "InputMemorySize", [228, 227, 3]),
    ("conv", "InputMemorySize", [227, 228, 3]),
    ("conv", "InputMemorySize", [227, 227, 4]),
    ("conv", "OutputMemorySize", [228, 227, 3]),
    ("conv", "OutputMemorySize", [227, 228, 3]),
    ("conv", "OutputMemorySize", [227, 227, 4]),
    ("conv", "FeatureSizeLimit", 2049),
    ("conv", "WeightMemorySize", 65537),
    ("conv", "ParameterMemorySize", 1025),
    ("fc", "ModuleGeneration", False),
    ("fc", "SoftmaxBlockGeneration", True),
    ("fc", "SigmoidBlockGeneration", True),
    ("fc", "FCThreadNumber", 8),
    ("fc", "InputMemorySize", 25089),
    ("fc", "OutputMemorySize", 4097),
    ("adder", "ModuleGeneration", False),
    ("adder", "Addition", False),
    ("adder", "Multiplication", False),
    ("adder", "InputMemorySize", 41),
    ("adder", "OutputMemorySize", 41),
    ("top", "MemoryDataWidth", 256),
    ("top", "Board", "de10-nano"),
    ("top", "TargetFrequency", 200.5),
    ("top", "DDRBytesPerCycle", 15),
    ("top", "DDRLatencyCycles", 41),
    ("top", "MemoryPorts", 2),
]


def _changed(module: str, prop: str, value: object) -> ProcessorConfig:
    cfg = ProcessorConfig()
    cfg.update([(module, prop, value)])
    return cfg


def test_alternatives_cover_every_settable_property() -> None:
    covered = {(module, prop) for module, prop, _ in ALTERNATIVES}
    for module, specs in ProcessorConfig.property_specs().items():
        for spec in specs:
            if spec.name in ("ProcessorDataType", "TargetPlatform"):
                continue  # one allowed value / the long name of Board (covered by Board)
            assert (module, spec.name) in covered, (module, spec.name)


# ---- presets ---------------------------------------------------------------------------------
def test_de10nano_preset_values() -> None:
    cfg = ProcessorConfig.preset("de10nano_int8")
    assert cfg.board == "de10-nano"
    assert cfg.get_property("TargetPlatform") == "Terasic DE10-Nano SoC"
    assert cfg.get_property("SynthesisToolDeviceName") == "5CSEBA6U23I7"
    assert cfg.get_module_property("conv", "ConvThreadNumber") == 256 and cfg.conv_c == 16
    assert cfg.get_module_property("fc", "FCThreadNumber") == 8
    assert cfg.target_frequency_mhz == 150.0
    assert cfg.memory_data_width == 128
    assert (cfg.ddr_bytes_per_cycle, cfg.ddr_latency_cycles) == (16, 40)
    assert cfg.get_property("ProcessorDataType") == "int8"


def test_arria10_preset_values() -> None:
    cfg = ProcessorConfig.preset("arria10soc_int8")
    assert cfg.board == "arria10-soc"
    assert cfg.get_property("SynthesisToolDeviceName") == "10AS066N3F40E2SG"
    assert cfg.get_module_property("conv", "ConvThreadNumber") == 576 and cfg.conv_c == 24
    assert cfg.target_frequency_mhz == 150.0
    assert cfg.memory_data_width == 128  # one 128-bit FPGA-to-SDRAM port (docs/boards.md)
    assert (cfg.ddr_bytes_per_cycle, cfg.ddr_latency_cycles) == (16, 40)
    assert cfg.get_module_property("conv", "LRNBlockGeneration") is True


def test_preset_names_are_case_insensitive_and_fresh() -> None:
    a = ProcessorConfig.preset("DE10NANO_INT8")
    a.set_module_property("conv", "ConvThreadNumber", 4)
    assert ProcessorConfig.preset("de10nano_int8").conv_c == 16  # presets are not shared objects


def test_unknown_preset_lists_presets() -> None:
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.preset("zcu102_int8")
    assert "'zcu102_int8'" in str(info.value)
    for name in PRESETS:
        assert name in str(info.value)
    assert ProcessorConfig.presets() == ["de10nano_int8", "arria10soc_int8"]


# Block RAM arithmetic of docs/config.md: word widths and depths of each on-chip memory, packed
# into the device's RAM blocks in the cheapest width/depth mode. ACC is budgeted at its worst
# case (one output channel block filling an OUT half), the FC engine's x buffer as F byte banks of
# ceil(fc.InputMemorySize / F) rows (single-buffered; the FC engine has no output memory: its
# results go through the shared output stage to OUT), the adder's three FIFOs at their depth.
M10K_MODES = [(8192, 1), (4096, 2), (2048, 5), (1024, 10), (512, 20), (256, 40)]
M20K_MODES = [(16384, 1), (8192, 2), (4096, 5), (2048, 10), (1024, 20), (512, 40)]


def _blocks(depth: int, width: int, modes: list[tuple[int, int]]) -> int:
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in modes)


def _ram_blocks(cfg: ProcessorConfig, modes: list[tuple[int, int]]) -> int:
    c = cfg.conv_c
    shapes = cfg.buffer_shapes()
    total = sum(_blocks(s.depth, s.width_bits, modes) for s in shapes.values())
    total += _blocks(shapes["OUT"].depth // 2, 32 * c, modes)  # ACC
    if cfg.module_enabled("fc"):
        sizes = isa.fc_sizes(cfg)
        f = sizes["fc_lanes"]
        total += f * _blocks(sizes["fc_in_depth"] // f, 8, modes)
    total += _blocks(3 * cfg.get_module_property("adder", "InputMemorySize"), 8 * c, modes)
    return total


@pytest.mark.parametrize("preset,modes,available,expected", [
    ("de10nano_int8", M10K_MODES, 553, 403),
    ("arria10soc_int8", M20K_MODES, 2131, 1088),
])
def test_preset_buffers_fit_the_device_ram(preset: str, modes: list, available: int, expected: int) -> None:
    cfg = ProcessorConfig.preset(preset)
    blocks = _ram_blocks(cfg, modes)
    assert blocks == expected  # the figure quoted in docs/config.md
    assert blocks <= 0.8 * available  # leaves room for FIFOs, bridges and optional blocks


def test_preset_weight_buffers_hold_the_largest_shipped_layers() -> None:
    # A CONV sums over all input channels, so one output channel block's weights must fit a half.
    de10 = ProcessorConfig.preset("de10nano_int8")
    assert de10.buffer_bytes()["WGT"] >= de10.conv_c * 3 * 3 * 512
    a10 = ProcessorConfig.preset("arria10soc_int8")
    assert a10.buffer_bytes()["WGT"] >= a10.conv_c * 3 * 3 * 1024


# ---- dict and TOML ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", *PRESETS])
def test_dict_round_trip(name: str) -> None:
    cfg = ProcessorConfig() if name == "default" else ProcessorConfig.preset(name)
    again = ProcessorConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.config_hash() == cfg.config_hash()
    json.dumps(cfg.to_dict())  # plain data


@pytest.mark.parametrize("name", ["default", *PRESETS])
def test_toml_round_trip(tmp_path: Path, name: str) -> None:
    cfg = ProcessorConfig() if name == "default" else ProcessorConfig.preset(name)
    cfg.set_module_property("conv", "InputMemorySize", [33, 31, 17])
    cfg.set_property("TargetFrequency", 123.25)
    path = tmp_path / "cfg.toml"
    cfg.save(path)
    loaded = ProcessorConfig.load(path)
    assert loaded == cfg
    assert loaded.config_hash() == cfg.config_hash()
    assert loaded.get_module_property("conv", "InputMemorySize") == [33, 31, 17]
    text = path.read_text()
    assert "InputMemorySize = [33, 31, 17]" in text
    assert f"config_hash = {cfg.config_hash()}" in text


def test_toml_by_hand_keeps_defaults_and_accepts_matlab_forms(tmp_path: Path) -> None:
    path = tmp_path / "hand.toml"
    path.write_text(
        '[top]\nTargetPlatform = "Terasic DE10-Nano SoC"\ntargetfrequency = 100\n'
        '[custom]\nMultiplication = "off"\n'
        '[conv]\nConvThreadNumber = "64"\nLRNBlockGeneration = "on"\nInputMemorySize = "[20 20 8]"\n'
    )
    cfg = ProcessorConfig.load(path)
    expected = ProcessorConfig()
    expected.set_property("Board", "de10-nano")
    expected.set_property("TargetFrequency", 100)
    expected.set_module_property("adder", "Multiplication", False)
    expected.set_module_property("conv", "ConvThreadNumber", 64)
    expected.set_module_property("conv", "LRNBlockGeneration", True)
    expected.set_module_property("conv", "InputMemorySize", [20, 20, 8])
    assert cfg == expected


@pytest.mark.parametrize("text,fragments", [
    ("[conv\nConvThreadNumber = 16\n", ["malformed TOML"]),
    ("[conv]\nConvThreadNumber = \n", ["malformed TOML", "line 2"]),
    ("[conv]\nThreads = 16\n", ["key conv.Threads", "unknown property 'Threads'", "ConvThreadNumber"]),
    ("[pool]\nModuleGeneration = true\n", ["table [pool]", "unknown module 'pool'", "conv, fc, adder"]),
    ("[top]\nFrequency = 100\n", ["key top.Frequency", "TargetFrequency"]),
    ("[conv]\nConvThreadNumber = 50\n", ["conv.ConvThreadNumber = 50 is not allowed", "perfect square"]),
    ("[fc]\nFCThreadNumber = 12\n", ["fc.FCThreadNumber = 12", "4, 8, 16, 32 or 64"]),
    ("conv = 3\n", ["[conv] must be a table"]),
    ("[adder]\nAddition = true\n[custom]\nAddition = false\n", ["[adder] and [custom] are the same module"]),
    ('[top]\nBoard = "de10-nano"\nTargetPlatform = "Intel Arria 10 SoC development kit"\n', ["disagree"]),
    ("[top]\nMemoryDataWidth = 64\n", ["DDRBytesPerCycle (16) must not exceed MemoryDataWidth/8"]),
    ("[top]\nSynthesisTool = 'x'\n", ["key top.SynthesisTool", "read-only"]),
])
def test_bad_toml_files_name_file_and_key(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.load(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_toml_consistent_board_and_platform_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "both.toml"
    path.write_text('[top]\nBoard = "arria10-soc"\nTargetPlatform = "Intel Arria 10 SoC development kit"\n')
    assert ProcessorConfig.load(path).board == "arria10-soc"


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        ProcessorConfig.load(tmp_path / "nope.toml")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=str(binary)):
        ProcessorConfig.load(binary)


def test_from_dict_rejects_non_tables() -> None:
    with pytest.raises(ConfigError, match="expected a table"):
        ProcessorConfig.from_dict([1, 2, 3])  # type: ignore[arg-type]


# ---- hash, equality, copy ---------------------------------------------------------------------
def test_equal_configs_have_equal_hashes() -> None:
    a = ProcessorConfig()
    b = ProcessorConfig()
    a.set_module_property("conv", "ConvThreadNumber", 64)
    b.set_module_property("CONV", "convthreadnumber", "64")  # other spelling, same value
    a.set_property("TargetFrequency", 150)
    b.set_property("TargetFrequency", "150.0")
    assert a == b and a.config_hash() == b.config_hash() and a.hash64 == b.hash64
    assert hash(a) == hash(b)


def test_hash_is_sha256_of_canonical_json() -> None:
    cfg = ProcessorConfig.preset("de10nano_int8")
    digest = hashlib.sha256(cfg.canonical_json().encode()).hexdigest()
    assert cfg.config_hash() == digest and len(digest) == 64
    assert cfg.hash64 == int(digest[:16], 16) and 0 <= cfg.hash64 < 2**64
    assert json.loads(cfg.canonical_json())["schema"] == 1


def test_every_single_property_change_changes_the_hash() -> None:
    base = ProcessorConfig()
    hashes = {base.config_hash()}
    for module, prop, value in ALTERNATIVES:
        cfg = _changed(module, prop, value)
        assert cfg != base, (module, prop)
        hashes.add(cfg.config_hash())
    assert len(hashes) == len(ALTERNATIVES) + 1  # all different from each other too


def test_hash64_differs_for_every_change() -> None:
    values = {ProcessorConfig().hash64} | {_changed(*alt).hash64 for alt in ALTERNATIVES}
    assert len(values) == len(ALTERNATIVES) + 1


def test_hash_is_identical_in_a_subprocess() -> None:
    code = (
        "from dlproc.config import ProcessorConfig as P\n"
        "for n in ['default', 'de10nano_int8', 'arria10soc_int8']:\n"
        "    c = P() if n == 'default' else P.preset(n)\n"
        "    print(c.config_hash(), c.hash64)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.split("\n")
    for line, cfg in zip(out, [ProcessorConfig(), *(ProcessorConfig.preset(n) for n in PRESETS)]):
        assert line == f"{cfg.config_hash()} {cfg.hash64}"


def test_copy_is_independent() -> None:
    a = ProcessorConfig.preset("arria10soc_int8")
    b = a.copy()
    assert a == b and a is not b
    b.set_module_property("conv", "InputMemorySize", [10, 10, 1])
    b.set_property("DDRLatencyCycles", 1)
    assert a.get_module_property("conv", "InputMemorySize") == [64, 64, 96]
    assert a.ddr_latency_cycles == 40 and a != b
    assert a.config_hash() != b.config_hash()


def test_not_equal_to_other_types() -> None:
    assert ProcessorConfig() != {"conv": {}}
    assert ProcessorConfig() != ProcessorConfig.preset("de10nano_int8")


@pytest.mark.parametrize("preset,modes", [("de10nano_int8", M10K_MODES), ("arria10soc_int8", M20K_MODES)])
def test_resource_estimator_counts_the_fc_x_buffer_like_the_gateware(preset: str, modes: list) -> None:
    """dlproc.estimate.resources' fc row: F single-buffered byte banks of ceil(InputMemorySize / F) rows
    (gateware/fc.py), no output memory, the same figure as the arithmetic above."""
    from dlproc.estimate.resources import estimate_resources

    cfg = ProcessorConfig.preset(preset)
    sizes = isa.fc_sizes(cfg)
    f = sizes["fc_lanes"]
    row = next(r for r in estimate_resources(cfg).rows if r.name == "fc")
    assert row.ram == f * _blocks(sizes["fc_in_depth"] // f, 8, modes) == 32
    assert row.ram_bits == sizes["fc_in_depth"] * 8
