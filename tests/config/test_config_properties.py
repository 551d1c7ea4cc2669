"""ProcessorConfig properties: defaults, value forms, validation and error messages."""

from __future__ import annotations

import pytest

from dlproc.config import MODULES, ProcessorConfig
from dlproc.errors import ConfigError, DlprocError

# MATLAB defaults (dlhdl.ProcessorConfig) plus our additions.
EXPECTED_DEFAULTS = {
    "conv": {
        "ModuleGeneration": True,
        "LRNBlockGeneration": False,
        "SegmentationBlockGeneration": True,
        "ActivationTableGeneration": False,
        "DepthwiseBlockGeneration": True,
        "ConvThreadNumber": 16,
        "InputMemorySize": [227, 227, 3],
        "OutputMemorySize": [227, 227, 3],
        "FeatureSizeLimit": 2048,
        "WeightMemorySize": 65536,
        "ParameterMemorySize": 1024,
    },
    "fc": {
        "ModuleGeneration": True,
        "SoftmaxBlockGeneration": False,
        "SigmoidBlockGeneration": False,
        "FCThreadNumber": 4,
        "InputMemorySize": 25088,
        "OutputMemorySize": 4096,
    },
    "adder": {
        "ModuleGeneration": True,
        "Addition": True,
        "Multiplication": True,
        "InputMemorySize": 40,
        "OutputMemorySize": 40,
    },
    "top": {
        "ProcessorDataType": "int8",
        "MemoryDataWidth": 128,
        "Board": "generic",
        "TargetFrequency": 200.0,
        "DDRBytesPerCycle": 16,
        "DDRLatencyCycles": 40,
        "MemoryPorts": 1,
    },
}

# (module, property, value given, value read back)
GOOD = [
    ("conv", "ConvThreadNumber", 4, 4),
    ("conv", "ConvThreadNumber", 9, 9),
    ("conv", "ConvThreadNumber", "64", 64),
    ("conv", "ConvThreadNumber", 576.0, 576),
    ("conv", "ConvThreadNumber", 1024, 1024),
    ("conv", "InputMemorySize", [10, 10, 1], [10, 10, 1]),
    ("conv", "InputMemorySize", (32, 32, 64), [32, 32, 64]),
    ("conv", "InputMemorySize", "[32 32 64]", [32, 32, 64]),
    ("conv", "InputMemorySize", "32,32,64", [32, 32, 64]),
    ("conv", "OutputMemorySize", "16x16x32", [16, 16, 32]),
    ("conv", "OutputMemorySize", ["12", "11", "10"], [12, 11, 10]),
    ("conv", "FeatureSizeLimit", 10, 10),
    ("conv", "FeatureSizeLimit", "16384", 16384),
    ("conv", "WeightMemorySize", 1024, 1024),
    ("conv", "WeightMemorySize", "73728", 73728),
    ("conv", "ParameterMemorySize", 32, 32),
    ("conv", "ParameterMemorySize", 4096, 4096),
    ("fc", "FCThreadNumber", 8, 8),
    ("fc", "FCThreadNumber", "64", 64),
    ("fc", "InputMemorySize", 128, 128),
    ("fc", "OutputMemorySize", "1000", 1000),
    ("adder", "InputMemorySize", 4, 4),
    ("adder", "OutputMemorySize", 65536, 65536),
]

# (module, property, bad value, text the message must contain besides module.property and value)
BAD = [
    ("conv", "ConvThreadNumber", 50, "perfect square C*C with C in 2..32"),
    ("conv", "ConvThreadNumber", 1, "perfect square"),
    ("conv", "ConvThreadNumber", 1089, "perfect square"),  # 33*33
    ("conv", "ConvThreadNumber", 0, "perfect square"),
    ("conv", "ConvThreadNumber", -16, "perfect square"),
    ("conv", "ConvThreadNumber", 16.5, "integer"),
    ("conv", "ConvThreadNumber", "sixteen", "integer"),
    ("conv", "ConvThreadNumber", True, "boolean"),
    ("conv", "InputMemorySize", [9, 10, 1], "at least [10 10 1]"),
    ("conv", "InputMemorySize", [10, 10, 0], "at least [10 10 1]"),
    ("conv", "InputMemorySize", [10, 10], "3-vector"),
    ("conv", "InputMemorySize", 227, "3-vector"),
    ("conv", "InputMemorySize", "[a b c]", "3-vector"),
    ("conv", "InputMemorySize", [65536, 65536, 16], "must not exceed"),
    ("conv", "OutputMemorySize", [10, 5, 1], "at least [10 10 1]"),
    ("conv", "FeatureSizeLimit", 9, "[10, 16384]"),
    ("conv", "FeatureSizeLimit", 16385, "[10, 16384]"),
    ("conv", "WeightMemorySize", 1023, "[1024,"),
    ("conv", "ParameterMemorySize", 31, "[32,"),
    ("conv", "LRNBlockGeneration", "maybe", "'on'/'off'"),
    ("conv", "ModuleGeneration", 2, "'on'/'off'"),
    ("fc", "FCThreadNumber", 12, "4, 8, 16, 32 or 64"),
    ("fc", "FCThreadNumber", 128, "4, 8, 16, 32 or 64"),
    ("fc", "InputMemorySize", 127, "[128, "),
    ("fc", "OutputMemorySize", 0, "[128, "),
    ("fc", "SoftmaxBlockGeneration", "yes please", "'on'/'off'"),
    ("adder", "InputMemorySize", 3, "[4, 65536]"),
    ("adder", "OutputMemorySize", 70000, "[4, 65536]"),
    ("adder", "Addition", None, "'on'/'off'"),
]

TOP_GOOD = [
    ("TargetFrequency", 150, 150.0),
    ("TargetFrequency", "212.5", 212.5),
    ("TargetFrequency", 1000, 1000.0),
    ("ProcessorDataType", "INT8", "int8"),
    ("MemoryDataWidth", 256, 256),
    ("MemoryDataWidth", "512", 512),
    ("DDRBytesPerCycle", 1, 1),
    ("DDRBytesPerCycle", "16", 16),
    ("DDRLatencyCycles", 0, 0),
    ("DDRLatencyCycles", 4096, 4096),
    ("Board", "DE10-Nano", "de10-nano"),
    ("Board", "arria10-soc", "arria10-soc"),
]

TOP_BAD = [
    ("TargetFrequency", 0, "greater than 0"),
    ("TargetFrequency", -5, "greater than 0"),
    ("TargetFrequency", 1001, "at most 1000"),
    ("TargetFrequency", float("nan"), "MHz"),
    ("TargetFrequency", "fast", "number"),
    ("ProcessorDataType", "single", "int8 processor"),
    ("ProcessorDataType", "half", "int8 processor"),
    ("ProcessorDataType", "int16", "'int8'"),
    ("MemoryDataWidth", 32, "64, 128, 256 or 512"),
    ("MemoryDataWidth", 100, "64, 128, 256 or 512"),
    ("DDRBytesPerCycle", 0, "[1, 64]"),
    ("DDRBytesPerCycle", 17, "MemoryDataWidth/8"),
    ("DDRLatencyCycles", -1, "[0, 4096]"),
    ("DDRLatencyCycles", 5000, "[0, 4096]"),
    ("Board", "zcu102", "'de10-nano'"),
    ("TargetPlatform", "Xilinx Zynq UltraScale+ MPSoC ZCU102 Evaluation Kit", "'Terasic DE10-Nano SoC'"),
]


def _display(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def test_defaults_follow_matlab() -> None:
    cfg = ProcessorConfig()
    for module, props in EXPECTED_DEFAULTS.items():
        for prop, value in props.items():
            if module == "top":
                assert cfg.get_property(prop) == value, prop
            else:
                assert cfg.get_module_property(module, prop) == value, (module, prop)
    assert cfg.get_property("TargetPlatform") == "Generic Deep Learning Processor"
    assert cfg.conv_c == 4
    assert cfg.memory_data_width == 128
    assert cfg.target_frequency_mhz == 200.0
    assert cfg.board == "generic"


def test_every_property_has_a_known_default() -> None:
    # If a property is added, this test makes sure its default is recorded (and documented).
    specs = ProcessorConfig.property_specs()
    for module, module_specs in specs.items():
        assert {spec.name for spec in module_specs} - {"TargetPlatform"} == set(EXPECTED_DEFAULTS[module]), module


@pytest.mark.parametrize("module,prop,value,expected", GOOD)
def test_good_module_values(module: str, prop: str, value: object, expected: object) -> None:
    cfg = ProcessorConfig()
    cfg.set_module_property(module, prop, value)
    assert cfg.get_module_property(module, prop) == expected


@pytest.mark.parametrize("module,prop,value,allowed", BAD)
def test_bad_module_values_name_module_property_value_and_allowed(
    module: str, prop: str, value: object, allowed: str
) -> None:
    cfg = ProcessorConfig()
    before = cfg.to_dict()
    with pytest.raises(ConfigError) as info:
        cfg.set_module_property(module, prop, value)
    message = str(info.value)
    assert f"{module}.{prop} = {_display(value)} is not allowed" in message
    assert allowed in message
    assert cfg.to_dict() == before  # a refused value changes nothing


def test_conv_thread_message_matches_the_contract_example() -> None:
    with pytest.raises(ConfigError, match=r"conv\.ConvThreadNumber = 50 is not allowed: a dlproc conv thread is "
                                          r"one MAC, so ConvThreadNumber must be a perfect square C\*C with C in 2\.\.32"):
        ProcessorConfig().set_module_property("conv", "ConvThreadNumber", 50)


@pytest.mark.parametrize("c", range(2, 33))
def test_every_square_thread_number_is_allowed(c: int) -> None:
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", c * c)
    assert cfg.conv_c == c


def test_non_squares_are_refused() -> None:
    squares = {c * c for c in range(2, 33)}
    cfg = ProcessorConfig()
    for n in range(0, 1100):
        if n in squares:
            continue
        with pytest.raises(ConfigError):
            cfg.set_module_property("conv", "ConvThreadNumber", n)
    assert cfg.conv_c == 4


@pytest.mark.parametrize("prop,value,expected", TOP_GOOD)
def test_good_top_values(prop: str, value: object, expected: object) -> None:
    cfg = ProcessorConfig()
    cfg.set_property(prop, value)
    assert cfg.get_property(prop) == expected


@pytest.mark.parametrize("prop,value,allowed", TOP_BAD)
def test_bad_top_values(prop: str, value: object, allowed: str) -> None:
    cfg = ProcessorConfig()
    with pytest.raises(ConfigError) as info:
        cfg.set_property(prop, value)
    message = str(info.value)
    assert f"top.{prop} = " in message and "is not allowed" in message
    if not (isinstance(value, float) and value != value):  # NaN prints as 'nan'
        assert _display(value) in message
    assert allowed in message
    assert cfg == ProcessorConfig()


def test_single_data_type_is_explained() -> None:
    with pytest.raises(ConfigError) as info:
        ProcessorConfig().set_property("ProcessorDataType", "single")
    assert "top.ProcessorDataType = 'single' is not allowed" in str(info.value)
    assert "int8" in str(info.value) and "dlproc quantize" in str(info.value)


@pytest.mark.parametrize("text,expected", [("on", True), ("off", False), ("ON", True), ("Off", False),
                                           (True, True), (False, False), (1, True), (0, False),
                                           ("true", True), ("false", False), ("1", True), ("0", False)])
def test_switch_forms(text: object, expected: bool) -> None:
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "LRNBlockGeneration", text)
    assert cfg.get_module_property("conv", "LRNBlockGeneration") is expected


def test_names_are_case_insensitive() -> None:
    cfg = ProcessorConfig()
    cfg.set_module_property("CONV", "convthreadnumber", 64)
    cfg.set_module_property("Fc", "FCTHREADNUMBER", 32)
    cfg.set_property("targetfrequency", 123)
    cfg.set_property("MEMORYDATAWIDTH", 256)
    assert cfg.get_module_property("conv", "ConvThreadNumber") == 64
    assert cfg.get_module_property("cOnV", "CONVTHREADNUMBER") == 64
    assert cfg.get_module_property("fc", "fcthreadnumber") == 32
    assert cfg.get_property("TARGETFREQUENCY") == 123.0
    assert cfg.memory_data_width == 256


def test_custom_is_an_alias_of_adder() -> None:
    cfg = ProcessorConfig()
    cfg.set_module_property("custom", "Multiplication", "off")
    assert cfg.get_module_property("adder", "Multiplication") is False
    cfg.set_module_property("ADDER", "InputMemorySize", 80)
    assert cfg.get_module_property("Custom", "InputMemorySize") == 80
    cfg.set_module_property("custom", "ModuleGeneration", 0)
    assert not cfg.module_enabled("adder") and not cfg.module_enabled("custom")
    assert set(cfg.to_dict()) == {"top", "conv", "fc", "adder"}


def test_unknown_module_lists_valid_modules() -> None:
    with pytest.raises(ConfigError) as info:
        ProcessorConfig().set_module_property("pool", "ModuleGeneration", "on")
    message = str(info.value)
    assert "'pool'" in message
    for name in (*MODULES, "custom"):
        assert name in message


def test_unknown_property_lists_valid_properties() -> None:
    with pytest.raises(ConfigError) as info:
        ProcessorConfig().set_module_property("fc", "ThreadNumber", 8)
    message = str(info.value)
    assert "'ThreadNumber'" in message and "'fc'" in message
    for name in EXPECTED_DEFAULTS["fc"]:
        assert name in message
    with pytest.raises(ConfigError) as info:
        ProcessorConfig().get_property("Frequency")
    assert "TargetFrequency" in str(info.value) and "DDRLatencyCycles" in str(info.value)


def test_matlab_properties_without_dlproc_meaning_are_explained() -> None:
    with pytest.raises(ConfigError, match=r"adder\.Sigmoid .*fc\.SigmoidBlockGeneration"):
        ProcessorConfig().set_module_property("custom", "Sigmoid", "on")
    with pytest.raises(ConfigError, match="RunTimeControl is a MATLAB property that dlproc does not have"):
        ProcessorConfig().set_property("RunTimeControl", "port")


def test_derived_synthesis_properties_are_read_only() -> None:
    cfg = ProcessorConfig()
    with pytest.raises(ConfigError, match="top.SynthesisTool is read-only"):
        cfg.set_property("SynthesisTool", "Xilinx Vivado")
    cfg.set_property("Board", "de10-nano")
    assert cfg.get_property("SynthesisTool") == "Intel Quartus Prime"
    assert cfg.get_property("SynthesisToolChipFamily") == "Cyclone V"
    assert cfg.get_property("SynthesisToolDeviceName") == "5CSEBA6U23I7"


def test_board_and_target_platform_are_one_setting() -> None:
    cfg = ProcessorConfig()
    cfg.set_property("TargetPlatform", "Intel Arria 10 SoC development kit")
    assert cfg.board == "arria10-soc"
    assert cfg.get_property("Board") == "arria10-soc"
    assert cfg.get_property("SynthesisToolDeviceName") == "10AS066N3F40E2SG"
    cfg.set_property("Board", "de10-nano")
    assert cfg.get_property("TargetPlatform") == "Terasic DE10-Nano SoC"
    assert cfg.target_platform == "Terasic DE10-Nano SoC"
    cfg.set_property("TargetPlatform", "generic")  # short names are accepted as well
    assert cfg.board == "generic" and cfg.get_property("SynthesisTool") == ""


def test_ddr_bandwidth_cannot_exceed_bus_width() -> None:
    cfg = ProcessorConfig()
    with pytest.raises(ConfigError, match=r"MemoryDataWidth/8 \(128 bits = 16 bytes per cycle\)"):
        cfg.set_property("DDRBytesPerCycle", 32)
    with pytest.raises(ConfigError, match=r"top\.MemoryDataWidth = 64 is not allowed"):
        cfg.set_property("MemoryDataWidth", 64)  # 16 bytes/cycle do not fit a 64-bit bus
    # Together (in any order) the change is fine.
    cfg.update([("top", "DDRBytesPerCycle", 8), ("top", "MemoryDataWidth", 64)])
    assert (cfg.memory_data_width, cfg.ddr_bytes_per_cycle) == (64, 8)
    cfg.update([("", "MemoryDataWidth", 512), ("top", "DDRBytesPerCycle", 64)])
    assert (cfg.memory_data_width, cfg.ddr_bytes_per_cycle, cfg.memory_data_bytes) == (512, 64, 64)


def test_update_is_atomic() -> None:
    cfg = ProcessorConfig()
    with pytest.raises(ConfigError, match="FCThreadNumber"):
        cfg.update([("conv", "ConvThreadNumber", 64), ("fc", "FCThreadNumber", 3)])
    assert cfg == ProcessorConfig()


def test_get_returns_copies_of_vectors() -> None:
    cfg = ProcessorConfig()
    size = cfg.get_module_property("conv", "InputMemorySize")
    size[0] = 1
    assert cfg.get_module_property("conv", "InputMemorySize") == [227, 227, 3]


def test_module_enabled() -> None:
    cfg = ProcessorConfig()
    assert all(cfg.module_enabled(m) for m in MODULES)
    cfg.set_module_property("fc", "ModuleGeneration", "off")
    assert not cfg.module_enabled("fc") and cfg.module_enabled("conv")
    with pytest.raises(ConfigError, match="unknown module"):
        cfg.module_enabled("lrn")


def test_config_error_is_a_dlproc_error() -> None:
    assert issubclass(ConfigError, DlprocError)


def test_buffer_geometry() -> None:
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", 16)  # C = 4
    cfg.set_module_property("conv", "InputMemorySize", [10, 10, 8])  # 800 bytes per buffer
    cfg.set_module_property("conv", "OutputMemorySize", [10, 10, 3])  # 300 bytes
    cfg.set_module_property("conv", "WeightMemorySize", 1030)
    cfg.set_module_property("conv", "ParameterMemorySize", 33)
    assert cfg.buffer_bytes() == {"INP": 800, "OUT": 300, "WGT": 1030, "PRM": 297}
    shapes = cfg.buffer_shapes()
    assert (shapes["INP"].depth, shapes["INP"].width_bits) == (400, 32)  # 2 x 200 words of 4 bytes
    assert (shapes["OUT"].depth, shapes["OUT"].width_bits) == (150, 32)  # 2 x 75
    assert (shapes["WGT"].depth, shapes["WGT"].width_bits) == (130, 128)  # 2 x ceil(1030 / 16)
    assert (shapes["PRM"].depth, shapes["PRM"].width_bits) == (18, 288)  # 2 x ceil(33 / 4), 9*4 bytes
    assert shapes["INP"].bytes == 1600


def test_display_lists_everything_in_matlab_order() -> None:
    cfg = ProcessorConfig.preset("arria10soc_int8")
    text = str(cfg)
    order = ['Processing Module "conv"', 'Processing Module "fc"', 'Processing Module "adder"',
             "Processor Top Level Properties", "System Level Properties"]
    positions = [text.index(heading) for heading in order]
    assert positions == sorted(positions)
    assert "ConvThreadNumber: 576" in text
    assert "InputMemorySize: [64 64 96]" in text
    assert "LRNBlockGeneration: 'on'" in text
    assert "TargetPlatform: 'Intel Arria 10 SoC development kit'" in text
    assert "TargetFrequency: 150" in text
    for specs in ProcessorConfig.property_specs().values():
        for spec in specs:
            assert f"{spec.name}: " in text, spec.name


def test_numpy_values_are_accepted() -> None:
    np = pytest.importorskip("numpy")
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", np.int64(64))
    cfg.set_module_property("conv", "InputMemorySize", np.array([20, 21, 22]))
    cfg.set_module_property("conv", "LRNBlockGeneration", np.bool_(True))
    cfg.set_property("TargetFrequency", np.float64(125.5))
    assert cfg.get_module_property("conv", "ConvThreadNumber") == 64
    assert type(cfg.get_module_property("conv", "ConvThreadNumber")) is int
    assert cfg.get_module_property("conv", "InputMemorySize") == [20, 21, 22]
    assert all(type(v) is int for v in cfg.get_module_property("conv", "InputMemorySize"))
    assert cfg.get_module_property("conv", "LRNBlockGeneration") is True
    assert cfg.target_frequency_mhz == 125.5 and type(cfg.target_frequency_mhz) is float
