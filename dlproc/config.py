"""The processor configuration: ``ProcessorConfig``, modelled on MATLAB's ``dlhdl.ProcessorConfig``.

A configuration consists of three processing modules (``conv``, ``fc`` and ``adder``, the last
also reachable under MATLAB's newer name ``custom``) and a set of top-level properties (target
board and clock, data type, external-memory width and the DDR model). Property names, value forms
and defaults follow ``dlhdl.ProcessorConfig`` wherever MATLAB has the property, so a MATLAB user
can carry a configuration over; docs/config.md lists every property and our additions.

Every value is validated when it is set, and a bad value raises :class:`dlproc.errors.ConfigError`
naming the module, the property, the value and what is allowed. A configuration can be saved to
and loaded from TOML, and it has a stable hash (sha256 over a canonical JSON form) that the
hardware carries in a register so that the runtime refuses programs compiled for another
configuration.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import tomli_w

from dlproc.errors import ConfigError

__all__ = [
    "ProcessorConfig",
    "PropertySpec",
    "BoardInfo",
    "BOARDS",
    "PRESETS",
    "MODULES",
    "MODULE_ALIASES",
    "TOP",
    "BufferShape",
    "toml_text",
]

# Bumped whenever the meaning of a stored property changes, so that old hashes never collide
# with configurations whose hardware would differ.
SCHEMA_VERSION = 1

#: The pseudo-module name of the top-level properties (``top.TargetFrequency`` on the CLI and the
#: ``[top]`` table in TOML files).
TOP = "top"


# --------------------------------------------------------------------------------------------
# Boards. ``Board`` (short name) and ``TargetPlatform`` (MATLAB-style long name) are one setting:
# setting either sets the other, and the synthesis properties are derived from it.
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BoardInfo:
    """What a board implies for the synthesis flow (read-only, derived properties)."""

    name: str
    platform: str
    synthesis_tool: str
    chip_family: str
    device: str


BOARDS: dict[str, BoardInfo] = {
    "de10-nano": BoardInfo(
        "de10-nano", "Terasic DE10-Nano SoC", "Intel Quartus Prime", "Cyclone V", "5CSEBA6U23I7"
    ),
    "arria10-soc": BoardInfo(
        "arria10-soc",
        "Intel Arria 10 SoC development kit",
        "Intel Quartus Prime",
        "Arria 10",
        "10AS066N3F40E2SG",
    ),
    "generic": BoardInfo("generic", "Generic Deep Learning Processor", "", "", ""),
}

_PLATFORM_TO_BOARD = {info.platform.lower(): name for name, info in BOARDS.items()}


# --------------------------------------------------------------------------------------------
# Value parsers. Each takes the raw value and returns the canonical form or raises ValueError
# with a text saying what is allowed; the caller adds module, property and value to the message.
# --------------------------------------------------------------------------------------------
_ON = {"on", "true", "1", "yes"}
_OFF = {"off", "false", "0", "no"}


def _parse_switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(int(value))
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"):
        return bool(value)  # numpy's boolean scalar, without importing numpy here
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _ON:
            return True
        if text in _OFF:
            return False
    raise ValueError("it is a switch: use 'on'/'off', True/False or 1/0")


def _parse_int(value: Any) -> int:
    """An integer given as int, integral float (MATLAB numbers are doubles) or a string."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if math.isfinite(value) and float(value).is_integer():
            return int(value)
        raise ValueError("it must be an integer")
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 0) if text.lower().startswith(("0x", "0b", "0o")) else int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            raise ValueError("it must be an integer") from None
        if math.isfinite(number) and number.is_integer():
            return int(number)
    raise ValueError("it must be an integer")


def _parse_real(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValueError("it must be a number") from None
    raise ValueError("it must be a number")


def _parse_vec3(value: Any) -> tuple[int, int, int]:
    """A MATLAB-style [H W C] vector: a list/tuple/array of 3 integers or a string such as
    '[32 32 16]', '32,32,16' or '32x32x16'."""
    items: Iterable[Any]
    if isinstance(value, str):
        text = value.strip().strip("[]()").strip()
        items = [part for part in re.split(r"[\s,;xX*]+", text) if part]
    elif hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        items = value.tolist()
        if not isinstance(items, list):
            items = [items]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise ValueError("it must be a 3-vector [H W C] of integers")
    items = list(items)
    if len(items) != 3:
        raise ValueError("it must be a 3-vector [H W C] of integers")
    try:
        h, w, c = (_parse_int(item) for item in items)
    except ValueError:
        raise ValueError("it must be a 3-vector [H W C] of integers") from None
    return (h, w, c)


# --------------------------------------------------------------------------------------------
# Property specifications.
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PropertySpec:
    """One property: its canonical name, kind, default, and a check on the canonical value.

    ``kind`` is one of ``switch`` (bool), ``int``, ``real``, ``vec3`` (tuple of 3 ints) or
    ``choice`` (str, matched case-insensitively against ``choices``). ``check`` returns an
    error text when the parsed value is not allowed, or None. ``allowed`` is the human-readable
    description used in messages and docs.
    """

    name: str
    kind: str
    default: Any
    allowed: str
    doc: str
    check: Callable[[Any], str | None] | None = None
    choices: tuple[Any, ...] = ()
    matlab: bool = True

    def parse(self, value: Any) -> Any:
        """Convert ``value`` to the canonical form, raising ValueError with the allowed values."""
        if self.kind == "switch":
            parsed: Any = _parse_switch(value)
        elif self.kind == "int":
            parsed = _parse_int(value)
            if self.choices and parsed not in self.choices:
                raise ValueError(f"allowed values are {self.allowed}")
        elif self.kind == "real":
            parsed = _parse_real(value)
        elif self.kind == "vec3":
            parsed = _parse_vec3(value)
        elif self.kind == "choice":
            parsed = self._parse_choice(value)
        else:  # pragma: no cover - a programming error in the tables below
            raise AssertionError(self.kind)
        if self.check is not None:
            problem = self.check(parsed)
            if problem:
                raise ValueError(problem)
        return parsed

    def _parse_choice(self, value: Any) -> str:
        if isinstance(value, str):
            for choice in self.choices:
                if value.strip().lower() == str(choice).lower():
                    return str(choice)
        raise ValueError(f"allowed values are {self.allowed}")


def _is_perfect_square_thread_number(n: int) -> str | None:
    root = math.isqrt(n) if n >= 0 else 0
    if root * root == n and 2 <= root <= 32:
        return None
    return (
        "a dlproc conv thread is one MAC, so ConvThreadNumber must be a perfect square C*C "
        "with C in 2..32 (4, 9, 16, 25, ..., 256, ..., 576, ..., 1024)"
    )


def _int_range(lo: int, hi: int | None) -> Callable[[int], str | None]:
    def check(n: int) -> str | None:
        if n < lo or (hi is not None and n > hi):
            return f"it must be an integer in [{lo}, {hi}]" if hi is not None else f"it must be an integer >= {lo}"
        return None

    return check


def _vec3_min(minimum: tuple[int, int, int], max_bytes: int) -> Callable[[tuple[int, int, int]], str | None]:
    def check(v: tuple[int, int, int]) -> str | None:
        if any(x < m for x, m in zip(v, minimum)):
            lo = " ".join(str(m) for m in minimum)
            return f"it must be a 3-vector [H W C] of integers, each at least [{lo}]"
        if v[0] * v[1] * v[2] > max_bytes:
            return f"H*W*C (bytes per buffer) must not exceed {max_bytes} (on-chip memory)"
        return None

    return check


def _frequency(mhz: float) -> str | None:
    if not math.isfinite(mhz) or mhz <= 0 or mhz > 1000:
        return "it must be a clock frequency in MHz, greater than 0 and at most 1000"
    return None


# The largest single on-chip buffer we accept (1 GiB): far beyond any FPGA, it only catches typos.
_MAX_BUFFER_BYTES = 1 << 30

_SWITCH = "'on' or 'off' (also True/False, 1/0)"

CONV_SPECS: tuple[PropertySpec, ...] = (
    PropertySpec("ModuleGeneration", "switch", True, _SWITCH,
                 "Generate the conv module (convolution, pooling, output stage)."),
    PropertySpec("LRNBlockGeneration", "switch", False, _SWITCH,
                 "Generate the cross-channel normalization (LRN) block, needed by AlexNet/GoogLeNet."),
    PropertySpec("SegmentationBlockGeneration", "switch", True, _SWITCH,
                 "Generate the segmentation block (nearest upsampling, unpooling)."),
    PropertySpec("ActivationTableGeneration", "switch", False, _SWITCH,
                 "dlproc addition: generate the output stage's 256-entry int8 activation table "
                 "(sigmoid, tanh, SiLU, HardSwish, GELU, ... fused into conv/fc/add; "
                 "fc.SigmoidBlockGeneration generates it too).", matlab=False),
    PropertySpec("DepthwiseBlockGeneration", "switch", True, _SWITCH,
                 "dlproc addition: generate the conv array's depthwise mode (a window of 3 x 8 input "
                 "words feeding the C x C array with the taps of C channels; needs C >= 3). Off: depthwise "
                 "layers run on the dense array at one multiplier in C, with a compile note.", matlab=False),
    PropertySpec("ConvThreadNumber", "int", 16, "a perfect square C*C with C in 2..32 (4, 9, 16, ..., 1024)",
                 "Number of int8 MACs of the conv array (C input x C output channels per cycle).",
                 check=_is_perfect_square_thread_number),
    PropertySpec("InputMemorySize", "vec3", (227, 227, 3),
                 "a 3-vector [H W C] of integers, at least [10 10 1]",
                 "Input (activation) buffer: H*W*C int8 bytes per buffer, double-buffered.",
                 check=_vec3_min((10, 10, 1), _MAX_BUFFER_BYTES)),
    PropertySpec("OutputMemorySize", "vec3", (227, 227, 3),
                 "a 3-vector [H W C] of integers, at least [10 10 1]",
                 "Output buffer: H*W*C int8 bytes per buffer, double-buffered.",
                 check=_vec3_min((10, 10, 1), _MAX_BUFFER_BYTES)),
    PropertySpec("FeatureSizeLimit", "int", 2048, "an integer in [10, 16384]",
                 "Largest channel count of a layer the processor accepts.",
                 check=_int_range(10, 16384)),
    PropertySpec("WeightMemorySize", "int", 65536, f"an integer in [1024, {_MAX_BUFFER_BYTES}]",
                 "dlproc addition: int8 weights the weight buffer holds per buffer (double-buffered).",
                 check=_int_range(1024, _MAX_BUFFER_BYTES), matlab=False),
    PropertySpec("ParameterMemorySize", "int", 1024, "an integer in [32, 1048576]",
                 "dlproc addition: output channels whose bias/requantization parameters the "
                 "parameter buffer holds per buffer (double-buffered).",
                 check=_int_range(32, 1 << 20), matlab=False),
)

FC_SPECS: tuple[PropertySpec, ...] = (
    PropertySpec("ModuleGeneration", "switch", True, _SWITCH, "Generate the fully connected module."),
    PropertySpec("SoftmaxBlockGeneration", "switch", False, _SWITCH,
                 "Generate the softmax block (otherwise softmax runs in software)."),
    PropertySpec("SigmoidBlockGeneration", "switch", False, _SWITCH,
                 "Generate the int8 sigmoid: the output stage's activation table (the same hardware that "
                 "conv.ActivationTableGeneration generates)."),
    PropertySpec("FCThreadNumber", "int", 4, "4, 8, 16, 32 or 64",
                 "Number of int8 MAC lanes of the fc module.", choices=(4, 8, 16, 32, 64)),
    PropertySpec("InputMemorySize", "int", 25088, f"an integer in [128, {_MAX_BUFFER_BYTES}]",
                 "Input vector buffer of the fc module, in int8 elements.",
                 check=_int_range(128, _MAX_BUFFER_BYTES)),
    PropertySpec("OutputMemorySize", "int", 4096, f"an integer in [128, {_MAX_BUFFER_BYTES}]",
                 "Output vector buffer of the fc module, in int8 elements.",
                 check=_int_range(128, _MAX_BUFFER_BYTES)),
)

ADDER_SPECS: tuple[PropertySpec, ...] = (
    PropertySpec("ModuleGeneration", "switch", True, _SWITCH,
                 "Generate the adder (element-wise) module, used by residual connections."),
    PropertySpec("Addition", "switch", True, _SWITCH,
                 "Element-wise addition of two rescaled int8 tensors."),
    PropertySpec("Multiplication", "switch", True, _SWITCH,
                 "Element-wise multiplication of two int8 tensors."),
    PropertySpec("InputMemorySize", "int", 40, "an integer in [4, 65536]",
                 "Input FIFO depth of the adder per operand, in words of C int8.",
                 check=_int_range(4, 65536)),
    PropertySpec("OutputMemorySize", "int", 40, "an integer in [4, 65536]",
                 "Output FIFO depth of the adder, in words of C int8.",
                 check=_int_range(4, 65536)),
)

MODULE_SPECS: dict[str, tuple[PropertySpec, ...]] = {"conv": CONV_SPECS, "fc": FC_SPECS, "adder": ADDER_SPECS}
#: Canonical module names, in display order.
MODULES: tuple[str, ...] = tuple(MODULE_SPECS)
#: Other names accepted for a module (MATLAB renamed ``adder`` to ``custom`` in R2022a).
MODULE_ALIASES: dict[str, str] = {"custom": "adder"}

_DATA_TYPES_REFUSED = {
    "single": "dlproc is an int8 processor; 'single' (float32) is MATLAB-only: quantize the network "
              "to int8 with `dlproc quantize` instead",
    "half": "dlproc is an int8 processor; 'half' is not supported",
    "int4": "dlproc is an int8 processor; 'int4' is not supported",
}

TOP_SPECS: tuple[PropertySpec, ...] = (
    PropertySpec("ProcessorDataType", "choice", "int8", "'int8' (the only data type of dlproc)",
                 "Data type of activations and weights.", choices=("int8",)),
    PropertySpec("MemoryDataWidth", "int", 128, "64, 128, 256 or 512",
                 "dlproc addition: data width of the external-memory Avalon-MM master, in bits.",
                 choices=(64, 128, 256, 512), matlab=False),
    PropertySpec("TargetPlatform", "choice", BOARDS["generic"].platform,
                 ", ".join(f"'{b.platform}'" for b in BOARDS.values()),
                 "Target board (long name); sets Board and the synthesis properties.",
                 choices=tuple(b.platform for b in BOARDS.values())),
    PropertySpec("Board", "choice", "generic", ", ".join(f"'{b}'" for b in BOARDS),
                 "dlproc addition: target board (short name); the same setting as TargetPlatform.",
                 choices=tuple(BOARDS), matlab=False),
    PropertySpec("TargetFrequency", "real", 200.0, "a number in (0, 1000] (MHz)",
                 "Processor clock frequency in MHz.", check=_frequency),
    PropertySpec("DDRBytesPerCycle", "int", 16, "an integer in [1, MemoryDataWidth/8]",
                 "dlproc addition: sustained external-memory bandwidth of the DDR model, in bytes "
                 "per processor clock cycle.", check=_int_range(1, 64), matlab=False),
    PropertySpec("DDRLatencyCycles", "int", 40, "an integer in [0, 4096]",
                 "dlproc addition: read latency of the DDR model (request to first data), in "
                 "processor clock cycles.", check=_int_range(0, 4096), matlab=False),
    PropertySpec("MemoryPorts", "int", 1, "1 or 2",
                 "dlproc addition: external-memory Avalon-MM masters. 1: one read/write master "
                 "shared by fetch, load and store. 2: a read-only master (fetch and load) and a "
                 "write-only master (store), each MemoryDataWidth wide and each with its own "
                 "DDRBytesPerCycle and DDRLatencyCycles.", choices=(1, 2), matlab=False),
)

#: Properties added after schema version 1 are hashed only when they differ from their default,
#: so every configuration that predates them keeps its hash (and its hardware, bit for bit).
_HASHED_UNLESS_DEFAULT: dict[str, Any] = {"MemoryPorts": 1}
_MODULE_HASHED_UNLESS_DEFAULT: dict[tuple[str, str], Any] = {("conv", "ActivationTableGeneration"): False,
                                                             ("conv", "DepthwiseBlockGeneration"): True}

#: Read-only top-level properties derived from the board (MATLAB: "taken from the platform").
DERIVED_TOP = ("SynthesisTool", "SynthesisToolChipFamily", "SynthesisToolDeviceName")

# Where each top-level property is shown in the MATLAB-like display.
_PROCESSOR_TOP_LEVEL = ("ProcessorDataType", "MemoryDataWidth", "MemoryPorts")
_SYSTEM_LEVEL = ("TargetPlatform", "Board", "TargetFrequency", "DDRBytesPerCycle", "DDRLatencyCycles") + DERIVED_TOP

# MATLAB properties that dlproc deliberately does not have, with the reason, so that a user
# coming from MATLAB gets an explanation instead of a bare "unknown property".
_NOT_SUPPORTED: dict[tuple[str, str], str] = {
    ("adder", "sigmoid"): "the int8 sigmoid is the activation table: use conv.ActivationTableGeneration or "
                          "fc.SigmoidBlockGeneration",
    ("adder", "resize2d"): "nearest upsampling is done by conv.SegmentationBlockGeneration",
    ("adder", "tanhlayer"): "tanh is a function of the activation table: use conv.ActivationTableGeneration",
    ("top", "runtimecontrol"): "dlproc is always controlled through its CSR registers",
    ("top", "runtimestatus"): "dlproc always reports status through its CSR registers",
    ("top", "inputdatainterface"): "dlproc always reads inputs from external memory",
    ("top", "outputdatainterface"): "dlproc always writes outputs to external memory",
    ("top", "referencedesign"): "the board flow (dlproc build) chooses the system design",
}


def _spec_table(specs: Iterable[PropertySpec]) -> dict[str, PropertySpec]:
    return {spec.name.lower(): spec for spec in specs}


_MODULE_TABLES = {module: _spec_table(specs) for module, specs in MODULE_SPECS.items()}
_TOP_TABLE = _spec_table(TOP_SPECS)


def _format_value(value: Any) -> str:
    """A value as MATLAB displays it: 'on'/'off', [H W C], numbers, quoted strings."""
    if isinstance(value, bool):
        return "'on'" if value else "'off'"
    if isinstance(value, tuple):
        return "[" + " ".join(str(v) for v in value) + "]"
    if isinstance(value, float):
        # Whole MHz print like MATLAB (150); anything else in full, never rounded.
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return f"'{value}'"
    return str(value)


def _format_raw(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def toml_text(data: dict[str, Any]) -> str:
    """TOML of to_dict() data. tomli-w puts every array element on its own line; the [H W C]
    memory sizes read better inline, so the (integer-only) arrays are folded onto one line."""
    text = tomli_w.dumps(data)
    return re.sub(
        r"\[\n((?:[ \t]+-?\d+,\n)+)\]",
        lambda m: "[" + ", ".join(item.strip().rstrip(",") for item in m.group(1).splitlines()) + "]",
        text,
    )


@dataclass(frozen=True)
class BufferShape:
    """Geometry of one on-chip buffer as this configuration sizes it (both halves together)."""

    depth: int
    width_bits: int

    @property
    def bytes(self) -> int:
        return self.depth * self.width_bits // 8


# --------------------------------------------------------------------------------------------
# ProcessorConfig
# --------------------------------------------------------------------------------------------
class ProcessorConfig:
    """A dlproc processor configuration (see the module docstring and docs/config.md)."""

    def __init__(self) -> None:
        self._modules: dict[str, dict[str, Any]] = {
            module: {spec.name: spec.default for spec in specs} for module, specs in MODULE_SPECS.items()
        }
        self._top: dict[str, Any] = {spec.name: spec.default for spec in TOP_SPECS if spec.name != "TargetPlatform"}

    # ---- name resolution --------------------------------------------------------------------
    @staticmethod
    def _module_name(module: str) -> str:
        if isinstance(module, str):
            key = module.strip().lower()
            key = MODULE_ALIASES.get(key, key)
            if key in MODULE_SPECS:
                return key
        valid = ", ".join(list(MODULES) + [f"{alias} (= {target})" for alias, target in MODULE_ALIASES.items()])
        raise ConfigError(f"unknown module {module!r}: valid modules are {valid}")

    @staticmethod
    def _lookup(module: str, table: dict[str, PropertySpec], prop: str) -> PropertySpec:
        key = prop.strip().lower() if isinstance(prop, str) else None
        if key is not None and key in table:
            return table[key]
        if key is not None and (module, key) in _NOT_SUPPORTED:
            raise ConfigError(
                f"{module}.{prop} is a MATLAB property that dlproc does not have: {_NOT_SUPPORTED[(module, key)]}"
            )
        valid = ", ".join(spec.name for spec in table.values())
        raise ConfigError(f"unknown property {prop!r} of module {module!r}: valid properties are {valid}")

    @staticmethod
    def _top_spec(prop: str) -> PropertySpec:
        key = prop.strip().lower() if isinstance(prop, str) else None
        for name in DERIVED_TOP:
            if key == name.lower():
                raise ConfigError(
                    f"top.{name} is read-only: it is derived from TargetPlatform/Board "
                    f"({', '.join(BOARDS)})"
                )
        return ProcessorConfig._lookup(TOP, _TOP_TABLE, prop)

    # ---- module properties --------------------------------------------------------------------
    def set_module_property(self, module: str, prop: str, value: Any) -> None:
        """Set a module property (names case-insensitive; 'custom' is the adder module)."""
        name = self._module_name(module)
        spec = self._lookup(name, _MODULE_TABLES[name], prop)
        self._modules[name][spec.name] = self._parse(name, spec, value)

    def get_module_property(self, module: str, prop: str) -> Any:
        """A module property: bool for switches, int, [H, W, C] list for memory sizes."""
        name = self._module_name(module)
        spec = self._lookup(name, _MODULE_TABLES[name], prop)
        return self._export(self._modules[name][spec.name])

    # ---- top-level properties -----------------------------------------------------------------
    def set_property(self, prop: str, value: Any) -> None:
        """Set a top-level property; TargetPlatform and Board set each other."""
        spec = self._top_spec(prop)
        if spec.name == "ProcessorDataType" and isinstance(value, str):
            reason = _DATA_TYPES_REFUSED.get(value.strip().lower())
            if reason:
                raise ConfigError(f"top.ProcessorDataType = {value!r} is not allowed: {reason}")
        if spec.name == "TargetPlatform" and isinstance(value, str) and value.strip().lower() in BOARDS:
            value = BOARDS[value.strip().lower()].platform  # short board names are accepted too
        parsed = self._parse(TOP, spec, value)
        if spec.name == "TargetPlatform":
            self._top["Board"] = _PLATFORM_TO_BOARD[parsed.lower()]
            return
        if spec.name == "DDRBytesPerCycle":
            self._check_ddr_width(parsed, self._top["MemoryDataWidth"], "DDRBytesPerCycle", parsed)
        if spec.name == "MemoryDataWidth":
            self._check_ddr_width(self._top["DDRBytesPerCycle"], parsed, "MemoryDataWidth", parsed)
        self._top[spec.name] = parsed

    def get_property(self, prop: str) -> Any:
        """A top-level property, including the read-only ones derived from the board."""
        key = prop.strip().lower() if isinstance(prop, str) else None
        info = BOARDS[self._top["Board"]]
        derived = {
            "synthesistool": info.synthesis_tool,
            "synthesistoolchipfamily": info.chip_family,
            "synthesistooldevicename": info.device,
            "targetplatform": info.platform,
        }
        if key in derived:
            return derived[key]
        spec = self._lookup(TOP, _TOP_TABLE, prop)
        return self._export(self._top[spec.name])

    @staticmethod
    def _check_ddr_width(bytes_per_cycle: int, width_bits: int, prop: str, value: Any) -> None:
        # The DDR model cannot deliver more per cycle than the memory bus carries; allowing it
        # would silently cap the bandwidth at the bus width.
        if bytes_per_cycle > width_bits // 8:
            raise ConfigError(
                f"top.{prop} = {value} is not allowed: DDRBytesPerCycle ({bytes_per_cycle}) must not "
                f"exceed MemoryDataWidth/8 ({width_bits} bits = {width_bits // 8} bytes per cycle)"
            )

    @staticmethod
    def _parse(module: str, spec: PropertySpec, value: Any) -> Any:
        try:
            return spec.parse(value)
        except ValueError as exc:
            raise ConfigError(
                f"{module}.{spec.name} = {_format_raw(value)} is not allowed: {exc}"
            ) from None

    @staticmethod
    def _export(value: Any) -> Any:
        return list(value) if isinstance(value, tuple) else value

    # ---- bulk update ----------------------------------------------------------------------------
    def update(self, assignments: Iterable[tuple[str, str, Any]]) -> None:
        """Apply ``(module, property, value)`` assignments atomically (module 'top' or '' for
        top-level). Cross-property rules are checked after all of them, so their order does not
        matter (e.g. lowering MemoryDataWidth together with DDRBytesPerCycle)."""
        trial = self.copy()
        deferred: dict[str, Any] = {}
        for module, prop, value in assignments:
            if module in ("", TOP) or (isinstance(module, str) and module.strip().lower() == TOP):
                spec = trial._top_spec(prop)
                if spec.name in ("MemoryDataWidth", "DDRBytesPerCycle"):
                    deferred[spec.name] = trial._parse(TOP, spec, value)
                    continue
                trial.set_property(prop, value)
            else:
                trial.set_module_property(module, prop, value)
        if deferred:
            width = deferred.get("MemoryDataWidth", trial._top["MemoryDataWidth"])
            bpc = deferred.get("DDRBytesPerCycle", trial._top["DDRBytesPerCycle"])
            culprit = "DDRBytesPerCycle" if "DDRBytesPerCycle" in deferred else "MemoryDataWidth"
            trial._check_ddr_width(bpc, width, culprit, deferred[culprit])
            trial._top["MemoryDataWidth"] = width
            trial._top["DDRBytesPerCycle"] = bpc
        self._modules, self._top = trial._modules, trial._top

    # ---- convenience accessors ------------------------------------------------------------------
    @property
    def conv_c(self) -> int:
        """C = sqrt(ConvThreadNumber): channels per conv word and side of the MAC array."""
        return math.isqrt(self._modules["conv"]["ConvThreadNumber"])

    @property
    def fc_threads(self) -> int:
        return self._modules["fc"]["FCThreadNumber"]

    @property
    def memory_data_width(self) -> int:
        """External-memory data width in bits (MemoryDataWidth)."""
        return self._top["MemoryDataWidth"]

    @property
    def memory_data_bytes(self) -> int:
        """B: external-memory data width in bytes."""
        return self._top["MemoryDataWidth"] // 8

    @property
    def ddr_bytes_per_cycle(self) -> int:
        return self._top["DDRBytesPerCycle"]

    @property
    def ddr_latency_cycles(self) -> int:
        return self._top["DDRLatencyCycles"]

    @property
    def memory_ports(self) -> int:
        """Avalon-MM memory masters (MemoryPorts): 1 shared, or 2 (fetch+load read, store write)."""
        return self._top["MemoryPorts"]

    @property
    def target_frequency_mhz(self) -> float:
        return self._top["TargetFrequency"]

    @property
    def board(self) -> str:
        """'de10-nano', 'arria10-soc' or 'generic'."""
        return self._top["Board"]

    @property
    def target_platform(self) -> str:
        return BOARDS[self._top["Board"]].platform

    def module_enabled(self, module: str) -> bool:
        """ModuleGeneration of a module."""
        return bool(self._modules[self._module_name(module)]["ModuleGeneration"])

    def buffer_bytes(self) -> dict[str, int]:
        """Bytes of ONE half (one buffer) of each double-buffered conv memory, as configured:
        INP and OUT = H*W*C of Input/OutputMemorySize, WGT = WeightMemorySize,
        PRM = 9 bytes per output channel times ParameterMemorySize."""
        conv = self._modules["conv"]
        return {
            "INP": math.prod(conv["InputMemorySize"]),
            "OUT": math.prod(conv["OutputMemorySize"]),
            "WGT": conv["WeightMemorySize"],
            "PRM": 9 * conv["ParameterMemorySize"],
        }

    def buffer_shapes(self) -> dict[str, BufferShape]:
        """Depth and word width of each conv buffer memory (both halves, as the contract's single
        memories that the compiler splits into two halves). Word widths: INP/OUT C bytes,
        WGT C*C bytes, PRM 9*C bytes. Depths round up, so a buffer holds at least what was asked."""
        c = self.conv_c
        half = self.buffer_bytes()
        words = {"INP": c, "OUT": c, "WGT": c * c, "PRM": 9 * c}
        return {
            name: BufferShape(depth=2 * -(-half[name] // word), width_bits=8 * word)
            for name, word in words.items()
        }

    # ---- copying, equality, hashing -------------------------------------------------------------
    def copy(self) -> "ProcessorConfig":
        other = ProcessorConfig.__new__(ProcessorConfig)
        other._modules = {module: dict(props) for module, props in self._modules.items()}
        other._top = dict(self._top)
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProcessorConfig):
            return NotImplemented
        return self._modules == other._modules and self._top == other._top

    def __hash__(self) -> int:
        return self.hash64

    def canonical_json(self) -> str:
        """The canonical form the hash covers: sorted keys, no whitespace, schema version."""
        payload: dict[str, Any] = {"schema": SCHEMA_VERSION, **self.to_dict()}
        for name, default in _HASHED_UNLESS_DEFAULT.items():
            if payload[TOP].get(name) == default:
                del payload[TOP][name]
        for (module, name), default in _MODULE_HASHED_UNLESS_DEFAULT.items():
            if payload[module].get(name) == default:
                del payload[module][name]
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def config_hash(self) -> str:
        """sha256 hex digest of the canonical form (stable across processes and runs)."""
        return hashlib.sha256(self.canonical_json().encode("ascii")).hexdigest()

    @property
    def hash64(self) -> int:
        """The first 64 bits of config_hash() as an unsigned int (the hardware's CONFIG_HASH)."""
        return int(self.config_hash()[:16], 16)

    # ---- dict / TOML ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain data: {'top': {...}, 'conv': {...}, 'fc': {...}, 'adder': {...}}.
        Switches are bools, memory sizes [H, W, C] lists, TargetFrequency a float; the board is
        given once, as Board (TargetPlatform is its long name and is derived)."""
        # TargetPlatform is not stored: it is the MATLAB long name of Board (same setting).
        top = {spec.name: self._export(self._top[spec.name]) for spec in TOP_SPECS if spec.name in self._top}
        result: dict[str, dict[str, Any]] = {TOP: top}
        for module, specs in MODULE_SPECS.items():
            result[module] = {spec.name: self._export(self._modules[module][spec.name]) for spec in specs}
        return result

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "configuration") -> "ProcessorConfig":
        """Build a configuration from ``to_dict()``-style data; properties not given keep their
        defaults. Unknown tables/keys and bad values raise ConfigError naming ``source``."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a table of modules, got {type(data).__name__}")
        cfg = cls()
        assignments: list[tuple[str, str, Any]] = []
        seen_modules: dict[str, str] = {}
        platform_given: dict[str, str] = {}
        for table, props in data.items():
            try:
                module = TOP if str(table).strip().lower() == TOP else cls._module_name(table)
            except ConfigError as exc:
                raise ConfigError(f"{source}: table [{table}]: {exc} (or 'top' for top-level properties)") from None
            if module in seen_modules:
                raise ConfigError(f"{source}: tables [{seen_modules[module]}] and [{table}] are the same module")
            seen_modules[module] = str(table)
            if not isinstance(props, dict):
                raise ConfigError(f"{source}: [{table}] must be a table of properties, got {_format_raw(props)}")
            for prop, value in props.items():
                key = f"{table}.{prop}"
                try:
                    if module == TOP:
                        spec = cls._top_spec(prop)
                        if spec.name in ("TargetPlatform", "Board"):
                            probe = cls()
                            probe.set_property(spec.name, value)
                            platform_given[spec.name] = probe.board
                    else:
                        cls._lookup(module, _MODULE_TABLES[module], prop)
                    assignments.append((module, prop, value))
                except ConfigError as exc:
                    raise ConfigError(f"{source}: key {key}: {exc}") from None
        if len(set(platform_given.values())) > 1:
            raise ConfigError(
                f"{source}: top.TargetPlatform ({BOARDS[platform_given['TargetPlatform']].platform!r}) and "
                f"top.Board ({platform_given['Board']!r}) disagree; they are one setting, give only one of them"
            )
        try:
            cfg.update(assignments)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        return cfg

    def save(self, path: str | Path) -> None:
        """Write the configuration as TOML (every property, so the file is self-describing)."""
        path = Path(path)
        data = self.to_dict()
        header = (
            "# dlproc processor configuration (see docs/config.md)\n"
            f"# config_hash = {self.config_hash()}\n"
        )
        path.write_text(header + toml_text(data), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "ProcessorConfig":
        """Read a TOML configuration written by save() or by hand (missing keys keep defaults)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{path}: configuration file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read configuration file: {exc}") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: malformed TOML: {exc}") from None
        return cls.from_dict(data, source=str(path))

    # ---- presets --------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> "ProcessorConfig":
        """A named preset ('de10nano_int8', 'arria10soc_int8'; see docs/config.md)."""
        key = name.strip().lower() if isinstance(name, str) else name
        if key not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}: available presets are {', '.join(PRESETS)}")
        return cls.from_dict(PRESETS[key], source=f"preset {key}")

    @staticmethod
    def presets() -> list[str]:
        return list(PRESETS)

    # ---- display --------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<ProcessorConfig board={self.board} C={self.conv_c} hash={self.config_hash()[:16]}>"

    def __str__(self) -> str:
        return self.display()

    def display(self) -> str:
        """A MATLAB-like object display: modules, then Processor Top Level and System Level
        Properties, names right-aligned."""
        width = 1 + max(
            len(name)
            for name in [s.name for specs in MODULE_SPECS.values() for s in specs]
            + list(_PROCESSOR_TOP_LEVEL + _SYSTEM_LEVEL)
        )
        lines: list[str] = []

        def heading(text: str) -> None:
            lines.append(f"{text:>{width + len(text) // 2}}")

        def row(name: str, value: Any) -> None:
            lines.append(f"{name:>{width}}: {_format_value(value)}")

        for module, specs in MODULE_SPECS.items():
            aliases = [alias for alias, target in MODULE_ALIASES.items() if target == module]
            suffix = f" (alias \"{aliases[0]}\")" if aliases else ""
            heading(f'Processing Module "{module}"{suffix}')
            for spec in specs:
                row(spec.name, self._modules[module][spec.name])
            lines.append("")
        heading("Processor Top Level Properties")
        for name in _PROCESSOR_TOP_LEVEL:
            row(name, self._top[name])
        lines.append("")
        heading("System Level Properties")
        for name in _SYSTEM_LEVEL:
            row(name, self.get_property(name))
        return "\n".join(lines)

    @staticmethod
    def property_specs() -> dict[str, tuple[PropertySpec, ...]]:
        """Every settable property per module ('top' for top level), in display order."""
        return {**MODULE_SPECS, TOP: TOP_SPECS}


# --------------------------------------------------------------------------------------------
# Presets (their reasoning, in particular the RAM arithmetic, is in docs/config.md).
# --------------------------------------------------------------------------------------------
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "de10nano_int8": {
        "top": {
            "Board": "de10-nano",
            "TargetFrequency": 150,
            "MemoryDataWidth": 128,
            "DDRBytesPerCycle": 16,
            "DDRLatencyCycles": 40,
        },
        "conv": {
            "ConvThreadNumber": 256,
            "InputMemorySize": [32, 32, 64],
            "OutputMemorySize": [32, 32, 16],
            # 16 output lanes x 3x3 kernel x 512 input channels: the largest layer of VGG-16,
            # ResNet, Darknet-53 and YOLOv3 (a CONV sums over all input channels at once).
            "WeightMemorySize": 73728,
            "ParameterMemorySize": 512,
            "FeatureSizeLimit": 2048,
            "LRNBlockGeneration": False,
            "SegmentationBlockGeneration": True,
            # Sigmoid, SiLU, HardSwish, ... (EfficientNet, MobileNet v3, YOLOv4's mish): 16 M10K.
            "ActivationTableGeneration": True,
        },
        "fc": {
            # 8 lanes, not the 16 the DDR port could feed: with 16 the FC engine's multipliers make
            # 115 DSP blocks (Yosys), more than the 5CSEBA6's 112; with 8 it is 112 of 112.
            "FCThreadNumber": 8,
            "InputMemorySize": 25088,
            "OutputMemorySize": 4096,
            "SoftmaxBlockGeneration": False,
        },
        "adder": {"InputMemorySize": 64, "OutputMemorySize": 64},
    },
    "arria10soc_int8": {
        "top": {
            "Board": "arria10-soc",
            "TargetFrequency": 150,
            # Two masters, each on its own 128-bit FPGA-to-SDRAM port (the board flow connects the
            # read master to F2SDRAM0 and the write master to F2SDRAM2): 16 bytes per cycle per
            # port, so stores no longer take bandwidth from loads (issue 7, docs/config.md).
            "MemoryDataWidth": 128,
            "MemoryPorts": 2,
            "DDRBytesPerCycle": 16,
            "DDRLatencyCycles": 40,
        },
        "conv": {
            "ConvThreadNumber": 576,
            "InputMemorySize": [64, 64, 96],
            "OutputMemorySize": [64, 64, 48],
            # 24 output lanes x 3x3 kernel x 1024 input channels (YOLOv2-tiny's last layers).
            "WeightMemorySize": 221184,
            "ParameterMemorySize": 1536,
            "FeatureSizeLimit": 2048,
            # MATLAB's int8 Arria 10 processor runs GoogLeNet's LRN layers in hardware.
            "LRNBlockGeneration": True,
            "SegmentationBlockGeneration": True,
            "ActivationTableGeneration": True,
        },
        "fc": {
            "FCThreadNumber": 32,
            # VGG-16's first FC reads 512 x 7 x 7 = 25,088 inputs, but the x buffer holds whole INP
            # words: 512 channels pad to 22 blocks of C = 24 lanes, 22 x 24 x 49 = 25,872 elements.
            "InputMemorySize": 25872,
            "OutputMemorySize": 4096,
            "SoftmaxBlockGeneration": False,
        },
        "adder": {"InputMemorySize": 128, "OutputMemorySize": 128},
    },
}
