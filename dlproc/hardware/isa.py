"""The dlproc instruction set: the one definition of the 256-bit instruction encoding.

Everything that produces or consumes instructions uses this module: the gateware decoders (through
the ``amaranth.lib.data`` layouts :data:`INSN_LAYOUT` and friends), the program builder, the
compiler and the ISA-level simulator (through the dataclasses :class:`Load`, :class:`Store`,
:class:`Conv`, :class:`Pool`, :class:`Mark`, :class:`Finish`, the optional blocks'
:class:`Add`, :class:`Upsample`, :class:`LrnTab`, :class:`Lrn`, :class:`SmxTab` and
:class:`Softmax`, the fc module's :class:`Fc`, and :func:`decode`), and
``dlproc.flow.codegen``, which writes ``firmware/include/dlproc_isa.h`` and ``docs/isa.md`` from the
same tables.

Encoding
--------
An instruction is 256 bits, stored little endian (bit ``i`` is bit ``i % 8`` of byte ``i // 8``).
Bits 0..7 are the common header: ``opcode`` (4 bits), then the dependency flags ``pop_prev``,
``pop_next``, ``push_prev``, ``push_next``. The fields of each opcode follow from bit 8 upwards in
the order :data:`FIELDS` lists them; the remaining bits are reserved, written as zero and
ignored by the hardware. Opcode 0 is deliberately illegal, so that fetching zeroed memory stops
the processor with ``ILLEGAL_OPCODE`` instead of doing something.

Field widths are *fixed* (not taken from a ProcessorConfig) so that one decoder, one C header and
one compiled-program format serve every configuration. They are chosen large enough for any
buildable configuration (SRAM word addresses have :data:`SRAM_ADDR_BITS` = 20 bits, i.e. up to 1 Mi
words per buffer). Where the configuration matters -- the buffer depths, the bus width that DRAM
addresses must be aligned to, the number of profile entries -- :meth:`Instruction.validate` checks
an instruction against a :class:`HardwareParams`, and the hardware checks the same conditions at
run time and stops with an :class:`ErrorCode` if they are violated.

Dependency tokens (VTA semantics)
---------------------------------
``prev``/``next`` name the neighbouring unit in the pipeline load -> compute -> store. ``pop_*``
waits until the neighbour has given a token and consumes it before the instruction executes;
``push_*`` gives the neighbour one token after the instruction has completed. The load unit has
no ``prev`` and the store unit no ``next``: those flags are illegal there (``ILLEGAL_FIELD``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from dlproc.errors import ConfigError, DlprocError
from dlproc.hardware.numerics import (ACT_TABLE_SIZE, LRN_MAX_SIZE, LRN_TABLE_SIZE, MAX_SHIFT, MULT_BITS,
                                      SOFTMAX_MAX_CHANNELS)

INSN_BITS = 256
INSN_BYTES = INSN_BITS // 8
OPCODE_BITS = 4
HEADER_BITS = 8
SRAM_ADDR_BITS = 20  #: width of every SRAM word-address field
DRAM_ADDR_BITS = 32  #: byte addresses on the memory master
ISA_VERSION = 1  #: bumped whenever the encoding changes; readable in the VERSION register


class InstructionError(DlprocError, ValueError):
    """An instruction field out of range, an unknown opcode, or a malformed instruction stream."""


class Opcode(enum.IntEnum):
    """Instruction opcodes (4 bits). Values not listed here are illegal."""

    LOAD = 1
    STORE = 2
    CONV = 3
    POOL = 4
    MARK = 5
    FINISH = 6
    ADD = 7  #: element-wise add of two INP tensors (adder module)
    UPSAMPLE = 8  #: nearest-neighbour upsample INP -> OUT (segmentation block)
    LRNTAB = 9  #: copy PRM words into the LRN multiplier table (LRN block)
    LRN = 10  #: cross-channel local response normalization INP -> OUT (LRN block)
    SMXTAB = 11  #: copy PRM words into the softmax exp table (softmax block)
    # 12 stays illegal: existing tests and programs use it as "an opcode that does not exist".
    SOFTMAX = 13  #: integer softmax over the channels of each pixel INP -> OUT (softmax block)
    FC = 14  #: fully connected layer tile: x buffer . WGT stream -> OUT (fc module)
    ACTTAB = 15  #: copy PRM words into the output stage's activation table (activation table)


class Buf(enum.IntEnum):
    """Destination buffer of a LOAD."""

    INP = 0
    WGT = 1
    PRM = 2


class PoolMode(enum.IntEnum):
    MAX = 0
    AVG = 1


class ErrorCode(enum.IntEnum):
    """Codes in STATUS.ERROR_CODE. When one is set the processor has stopped and raised irq."""

    NONE = 0
    ILLEGAL_OPCODE = 1  #: fetched an opcode that is not in :class:`Opcode`
    RAN_OFF_END = 2  #: fetched INSN_COUNT instructions without a FINISH
    DMA_FETCH = 3  #: an instruction fetch outside [DMA_BASE, DMA_LIMIT) (nothing was read)
    DMA_LOAD = 4  #: a LOAD burst outside the DMA window (that burst was not issued)
    DMA_STORE = 5  #: a STORE burst outside the DMA window (that burst was not issued)
    SRAM_RANGE = 6  #: an instruction addressed an on-chip buffer word beyond its depth
    DEADLOCK = 7  #: every unit with work is waiting for a token that nobody can give
    ABORTED = 8  #: CTRL.ABORT was written while the processor was busy
    ILLEGAL_FIELD = 9  #: zero size, bad buffer, misaligned DRAM address, dependency flag not allowed...
    TOKEN_OVERFLOW = 10  #: a token counter would exceed its capacity (unbalanced push/pop)
    COMPUTE = 11  #: the compute unit reported an error it has no more specific code for
    BLOCK_ABSENT = 12  #: a legal opcode whose optional block this processor was generated without
    WRITE_RESPONSE = 13  #: a STORE burst got a SLVERR/DECODEERROR write response (ERR_ADDR: its address; 2 ports)


# --------------------------------------------------------------------------------------------
# Hardware parameters that instructions are validated against

#: Opcodes executed by an optional block: (HardwareParams flag, module, property that turns it on).
OPTIONAL_BLOCKS: dict[Opcode, tuple[str, str, str]] = {
    Opcode.ADD: ("adder", "adder", "ModuleGeneration"),
    Opcode.UPSAMPLE: ("upsample", "conv", "SegmentationBlockGeneration"),
    Opcode.LRNTAB: ("lrn", "conv", "LRNBlockGeneration"),
    Opcode.LRN: ("lrn", "conv", "LRNBlockGeneration"),
    Opcode.SMXTAB: ("softmax", "fc", "SoftmaxBlockGeneration"),
    Opcode.SOFTMAX: ("softmax", "fc", "SoftmaxBlockGeneration"),
    Opcode.FC: ("fc", "fc", "ModuleGeneration"),
    # fc.SigmoidBlockGeneration (MATLAB's name for the int8 sigmoid) generates the same table:
    # see block_switches.
    Opcode.ACTTAB: ("act_table", "conv", "ActivationTableGeneration"),
}


def block_switches(config: Any) -> dict[str, bool]:
    """The optional-block flags of :class:`HardwareParams` from a ProcessorConfig's switches."""
    flags = {}
    for flag, module, prop in OPTIONAL_BLOCKS.values():
        on = bool(config.module_enabled(module))
        if prop != "ModuleGeneration":
            on = on and bool(config.get_module_property(module, prop))
        flags[flag] = flags.get(flag, False) or on
    # The int8 sigmoid of MATLAB's fc module is one function of the activation table, so its
    # switch generates the table as well (the table serves every engine's output).
    if config.module_enabled("fc") and config.get_module_property("fc", "SigmoidBlockGeneration"):
        flags["act_table"] = True
    # The multiply is a mode of the add engine (its multipliers form a * b instead of a * ma).
    flags["multiply"] = flags["adder"] and bool(config.get_module_property("adder", "Multiplication"))
    return flags


def fc_sizes(config: Any) -> dict[str, int]:
    """The FC engine's sizes in :class:`HardwareParams` from the fc module's properties.

    F = FCThreadNumber, limited to C*C (the engine reads one WGT word of C*C bytes per cycle at
    most, so more lanes could never be fed); the x buffer holds fc.InputMemorySize elements
    rounded up to whole F-byte rows; fc.OutputMemorySize bounds the outputs of one FC instruction.
    """
    c = int(config.conv_c)
    lanes = min(int(config.get_module_property("fc", "FCThreadNumber")), c * c)
    lanes = 1 << (lanes.bit_length() - 1)  # C*C need not be a power of two
    n_in = int(config.get_module_property("fc", "InputMemorySize"))
    return {"fc_lanes": lanes, "fc_in_depth": -(-n_in // lanes) * lanes,
            "fc_out_max": min(65535, int(config.get_module_property("fc", "OutputMemorySize")))}


#: Depthwise window (CONV.dw): columns of INP words it holds (the widest kernel one CONV covers)
DW_WINDOW_COLS = 3
#: ... and words per column (a strip of dw_rows output rows reads (dw_rows - 1) * stride_y + kh rows)
DW_COL = 8


@dataclass(frozen=True)
class HardwareParams:
    """The sizes of one generated processor that the ISA and the gateware depend on.

    Build it with :meth:`from_config`; every gateware block takes one. ``c`` is the number of
    lanes (C = sqrt(ConvThreadNumber)); ``mem_data_width`` is the memory master's data width in
    bits; the ``*_depth`` fields are buffer depths in words (see ``docs/architecture.md`` for how
    they follow from the configuration's memory sizes).
    """

    c: int
    mem_data_width: int
    inp_depth: int
    wgt_depth: int
    prm_depth: int
    out_depth: int
    max_burst: int = 16  #: longest Avalon burst in beats (a power of two)
    queue_depth: int = 4  #: instruction-queue entries per unit
    profile_depth: int = 64  #: profile buffer entries (MARK index range)
    token_bits: int = 8  #: width of each dependency-token counter
    read_credits: int = 64  #: beats of read data the load unit can buffer (>= 2 bursts)
    config_hash64: int = 0
    #: Optional blocks (see ``docs/architecture.md``). A block that is off is not generated at all;
    #: its opcode then stops the processor with ``BLOCK_ABSENT``. Constructed directly, the
    #: parameters describe the core processor (no optional block); :meth:`from_config` takes the
    #: switches from the configuration.
    adder: bool = False  #: ADD (adder/custom ModuleGeneration)
    upsample: bool = False  #: UPSAMPLE (conv SegmentationBlockGeneration)
    lrn: bool = False  #: LRNTAB and LRN (conv LRNBlockGeneration)
    softmax: bool = False  #: SMXTAB and SOFTMAX (fc SoftmaxBlockGeneration)
    fc: bool = False  #: FC (fc ModuleGeneration): the FC engine
    #: ACTTAB and the ``act_table`` flag of CONV/ADD/FC (conv ActivationTableGeneration or fc
    #: SigmoidBlockGeneration): the output stage's 256-entry activation table
    act_table: bool = False
    #: ADD.mul: the adder's element-wise multiply (adder ModuleGeneration and Multiplication)
    multiply: bool = False
    #: FC engine sizes (used only when ``fc``): MAC lanes F (FCThreadNumber, at most C*C because
    #: the engine takes its F weight bytes per cycle from one WGT word), x-buffer elements
    #: (fc.InputMemorySize rounded up to F) and outputs per FC instruction (fc.OutputMemorySize).
    fc_lanes: int = 4
    fc_in_depth: int = 128
    fc_out_max: int = 128
    #: Avalon-MM memory masters (top.MemoryPorts): 1 shared by fetch, load and store; 2 a
    #: read-only one (fetch, load) and a write-only one (store).
    mem_ports: int = 1
    #: The conv engine's depthwise mode (CONV.dw, conv DepthwiseBlockGeneration): a window of
    #: DW_WINDOW_COLS x DW_COL INP words feeds the C x C array with up to 3 * dw_kh taps of C
    #: channels, so a depthwise layer runs C channels per output pixel and cycle instead of one.
    #: Needs C >= 3 (one kernel row of three taps).
    depthwise: bool = True

    @property
    def dw_kh(self) -> int:
        """Kernel rows one depthwise CONV covers: the array's C input lanes hold 3 taps per row."""
        return min(DW_WINDOW_COLS, self.c // DW_WINDOW_COLS) if self.depthwise else 0

    def __post_init__(self) -> None:
        if self.c < 1:
            raise InstructionError(f"lane count C must be >= 1, got {self.c}")
        if self.mem_data_width < 8 or self.mem_data_width & (self.mem_data_width - 1):
            raise InstructionError(
                f"memory data width must be a power of two >= 8 bits, got {self.mem_data_width}"
            )
        if self.max_burst < 1 or self.max_burst & (self.max_burst - 1):
            raise InstructionError(f"max_burst must be a power of two >= 1, got {self.max_burst}")
        for name in ("inp_depth", "wgt_depth", "prm_depth", "out_depth"):
            depth = getattr(self, name)
            if not 1 <= depth <= 2**SRAM_ADDR_BITS:
                raise InstructionError(
                    f"{name} = {depth} words is outside the encodable range 1..{2**SRAM_ADDR_BITS}"
                )
        if self.fc and (self.fc_lanes < 1 or self.fc_lanes & (self.fc_lanes - 1) or self.fc_lanes > self.c * self.c):
            raise InstructionError(
                f"fc_lanes = {self.fc_lanes} must be a power of two in 1..C*C = {self.c * self.c}")
        if self.fc and (self.fc_in_depth < 1 or self.fc_in_depth % self.fc_lanes):
            raise InstructionError(
                f"fc_in_depth = {self.fc_in_depth} must be a positive multiple of fc_lanes = {self.fc_lanes}")
        if not 1 <= self.fc_out_max <= 65535:
            raise InstructionError(f"fc_out_max = {self.fc_out_max} is outside 1..65535")
        if self.mem_ports not in (1, 2):
            raise InstructionError(f"mem_ports = {self.mem_ports} must be 1 or 2")
        if self.read_credits < 2 * self.max_burst:
            raise InstructionError(
                f"read_credits ({self.read_credits}) must hold two bursts of {self.max_burst} beats"
            )

    @classmethod
    def from_config(cls, config: Any) -> "HardwareParams":
        """Derive the parameters from a :class:`dlproc.config.ProcessorConfig`.

        The buffer depths are ``config.buffer_shapes()`` (both halves of each double-buffered
        memory: INP/OUT from Input/OutputMemorySize, WGT from WeightMemorySize, PRM from
        ParameterMemorySize, each rounded up to whole words).
        """
        shapes = config.buffer_shapes()
        try:
            return cls(
                c=int(config.conv_c),
                mem_data_width=int(config.memory_data_width),
                inp_depth=shapes["INP"].depth,
                wgt_depth=shapes["WGT"].depth,
                prm_depth=shapes["PRM"].depth,
                out_depth=shapes["OUT"].depth,
                config_hash64=int(config.hash64),
                mem_ports=int(getattr(config, "memory_ports", 1)),
                depthwise=bool(config.module_enabled("conv")
                               and config.get_module_property("conv", "DepthwiseBlockGeneration")),
                **block_switches(config),
                **fc_sizes(config),
            )
        except InstructionError as exc:
            raise ConfigError(f"the gateware cannot be built for this configuration: {exc}") from None

    def has_block(self, opcode: "Opcode") -> bool:
        """Whether this processor executes ``opcode`` (False only for an absent optional block)."""
        flag = OPTIONAL_BLOCKS.get(Opcode(opcode))
        return True if flag is None else bool(getattr(self, flag[0]))

    @property
    def bytes_per_beat(self) -> int:
        """B: bytes per memory-bus beat."""
        return self.mem_data_width // 8

    def elem_bytes(self, buf: str) -> int:
        """Bytes of one word of buffer ``buf`` ("INP", "WGT", "PRM" or "OUT")."""
        return {"INP": self.c, "WGT": self.c * self.c, "PRM": 9 * self.c, "OUT": self.c}[buf]

    def elem_beats(self, buf: str) -> int:
        """Bus beats that one element of ``buf`` occupies in DRAM (ceil(elem_bytes / B))."""
        return -(-self.elem_bytes(buf) // self.bytes_per_beat)

    def pitch(self, buf: str) -> int:
        """DRAM bytes per element of ``buf``: every element starts on a bus beat."""
        return self.elem_beats(buf) * self.bytes_per_beat

    def depth(self, buf: str) -> int:
        return {
            "INP": self.inp_depth,
            "WGT": self.wgt_depth,
            "PRM": self.prm_depth,
            "OUT": self.out_depth,
        }[buf]


# --------------------------------------------------------------------------------------------
# The instruction table
#
# Every instruction's fields are declared once, as data: :data:`FIELDS` maps each opcode to its
# fields in bit order (from bit 8 up). The dataclasses below take their fields from it, and so do
# encoding, decoding, range checks, the ``amaranth.lib.data`` layouts, the C header and
# ``docs/isa.md``. Fields that several instructions share with the same meaning (a DRAM block, a
# pooling window, the output clamp) are written once as groups.


@dataclass(frozen=True)
class Field:
    """One instruction field: width, signedness, allowed range, default and meaning."""

    name: str
    bits: int
    lo: int
    hi: int
    signed: bool = False
    default: int = 0
    doc: str = ""


def _f(name: str, bits: int, lo: int | None = None, hi: int | None = None, *, signed_: bool = False,
       doc: str = "", default: int = 0) -> Field:
    """A field; the range defaults to everything ``bits`` bits can hold."""
    if lo is None:
        lo = -(1 << (bits - 1)) if signed_ else 0
    if hi is None:
        hi = (1 << (bits - 1)) - 1 if signed_ else (1 << bits) - 1
    return Field(name, bits, lo, hi, signed_, default, doc)


def _int8(name: str, doc: str, default: int = 0) -> Field:
    return _f(name, 8, signed_=True, doc=doc, default=default)


def _size(name: str, doc: str) -> Field:
    """A 16-bit count of at least 1 (rows, columns, planes, blocks)."""
    return _f(name, 16, 1, doc=doc, default=1)


def _sram(name: str, doc: str) -> Field:
    return _f(name, SRAM_ADDR_BITS, doc=doc)


@dataclass(frozen=True)
class FieldSpec:
    """Where one field lives in the 256-bit word (derived from :data:`FIELDS`)."""

    name: str
    offset: int
    bits: int
    signed: bool
    lo: int
    hi: int
    doc: str

    @property
    def shape(self):
        return signed(self.bits) if self.signed else unsigned(self.bits)


def _clamp(relu_note: bool = True) -> tuple[Field, ...]:
    """The output stage's zero point and clamp, shared by every instruction that requantizes."""
    return (_int8("zp_out", "output zero point"),
            _int8("act_min", "lower clamp (ReLU: zp_out)" if relu_note else "lower clamp", -128),
            _int8("act_max", "upper clamp", 127))


def _dram_block(x_doc: str) -> tuple[Field, ...]:
    """A strided 3-D block of DRAM elements (LOAD and STORE)."""
    return (_f("dram_addr", DRAM_ADDR_BITS, doc="byte address of element (0,0,0); a multiple of B"),
            _size("x_size", x_doc), _size("y_size", "rows per plane"), _size("z_size", "planes"),
            _f("y_stride", 32, doc="elements between row starts in DRAM"),
            _f("z_stride", 32, doc="elements between plane starts in DRAM"))


def _window(what: str) -> tuple[Field, ...]:
    """Output size, window and stride of a sliding-window instruction (CONV and POOL)."""
    return (_size("out_h", "output rows"), _size("out_w", "output columns"),
            _f("kh", 5, 1, doc=f"{what} rows 1..31", default=1), _f("kw", 5, 1, doc=f"{what} columns 1..31", default=1),
            _f("stride_y", 3, 1, doc="1..7", default=1), _f("stride_x", 3, 1, doc="1..7", default=1))


def _table_load(tab_bits: int, tab_hi: int, tab_doc: str) -> tuple[Field, ...]:
    """PRM words copied into an engine's lookup table (LRNTAB and SMXTAB)."""
    return (_sram("prm_base", "first PRM word"), _f("tab_base", tab_bits, 0, tab_hi, doc=tab_doc),
            _size("count", "PRM words copied"))


def _act_table_flag() -> Field:
    """The flag that sends an instruction's results through the activation table (after the clamp)."""
    return _f("act_table", 1, doc="1: output = activation table entry (clamped result + 128); needs the table")


def _pixels() -> tuple[Field, ...]:
    """Channel-block planes of dense pixels in INP and OUT (LRN and SOFTMAX)."""
    return (_sram("inp_base", "INP word of pixel 0 of channel block 0"),
            _sram("out_base", "OUT word of pixel 0 of channel block 0"),
            _sram("in_plane", "INP words per channel block"),
            _f("n_pix", SRAM_ADDR_BITS, 1, doc="pixels (dense in INP and OUT)", default=1),
            _size("cin_blocks", "channel blocks of every pixel"))


#: Every instruction's fields in bit order, from bit 8 (after the header) upwards.
FIELDS: dict[Opcode, tuple[Field, ...]] = {
    Opcode.LOAD: (
        _f("buf", 2, 0, 2, doc="destination buffer: 0 INP, 1 WGT, 2 PRM"),
        _sram("sram_base", "first destination word"),
        *_dram_block("elements per row (1..65535)"),
        _f("pad_top", 4, doc="padding rows above"), _f("pad_bottom", 4, doc="padding rows below"),
        _f("pad_left", 4, doc="padding columns left"), _f("pad_right", 4, doc="padding columns right"),
        _int8("pad_value", "int8 written into every byte of a padding word"),
    ),
    Opcode.STORE: (_sram("sram_base", "first OUT word"), *_dram_block("elements per row")),
    Opcode.CONV: (
        _sram("inp_base", "INP word of input pixel (0,0) of channel block 0"),
        _sram("wgt_base", "first WGT word"),
        _sram("prm_base", "PRM word with the C lanes' bias/M/M_neg/S"),
        _sram("out_base", "OUT word of output pixel (0,0)"),
        _size("in_w", "INP words per input row"), _sram("in_plane", "INP words per input channel block"),
        *_window("kernel"),
        _f("dil_y", 3, 1, doc="1..7", default=1), _f("dil_x", 3, 1, doc="1..7", default=1),
        _size("cin_blocks", "input channel blocks accumulated"),
        *_clamp(),
        _act_table_flag(),
        _f("acc_in", 1, doc="1: continue the partial sums held in ACC (from a CONV with acc_keep, same out_h x out_w) "
                            "instead of starting from the bias"),
        _f("acc_keep", 1, doc="1: hold the sums in ACC for the next CONV (acc_in) instead of writing OUT"),
        _f("dw", 1, doc="1: depthwise (lane c of the output reads lane c of the input only; one WGT word holds "
                        "the taps, see \"Depthwise\"); needs cin_blocks = 1, kw <= 3, kh <= the processor's dw_kh, "
                        "dilation 1"),
        _f("dw_rows", 4, doc="depthwise: output rows evaluated per strip (1..15; (dw_rows - 1) * stride_y + kh "
                             "<= DW_COL)"),
        _f("to_inp", 1, doc="1: write the results to INP (words out_base + oy*out_w + ox) instead of OUT, for a "
                            "later CONV to read (layer fusion, see \"Results to INP\")"),
        _f("wait_writes", 1, doc="1: start only when every earlier CONV's results are written (a CONV that reads "
                                 "INP words an earlier to_inp CONV writes)"),
    ),
    Opcode.POOL: (
        _sram("inp_base", "INP word of pixel (0,0) of plane 0"),
        _sram("out_base", "OUT word of pixel (0,0) of plane 0"),
        _sram("prm_base", "PRM word of plane 0 (AVG only)"),
        _size("in_w", "INP words per input row"), _sram("in_plane", "INP words per plane"),
        *_window("window"),
        _size("z_size", "channel-block planes"),
        _f("mode", 1, doc="0 MAX, 1 AVG"),
        _int8("zp_in", "input zero point (AVG)"),
        _int8("zp_out", "output zero point (AVG)"), *_clamp(relu_note=False)[1:],
    ),
    Opcode.MARK: (_f("index", 16, doc="profile entry 0..profile_depth-1"),),
    Opcode.FINISH: (),
    Opcode.ADD: (
        _sram("inp_a", "INP word of element 0 of operand a"),
        _sram("inp_b", "INP word of element 0 of operand b"),
        _sram("out_base", "OUT word of element 0 of the result"),
        _f("count", SRAM_ADDR_BITS + 1, 1, doc="words (pixels x channel blocks) added", default=1),
        _int8("za", "zero point of a"), _int8("zb", "zero point of b"),
        _f("ma", MULT_BITS, doc="multiplier of a (< 2**15)"), _f("mb", MULT_BITS, doc="multiplier of b (< 2**15)"),
        _f("shift", 6, 0, MAX_SHIFT, doc=f"common right shift 0..{MAX_SHIFT}"),
        *_clamp(),
        _act_table_flag(),
        _f("mul", 1, doc="1: multiply (a - za) * (b - zb) with multiplier ma instead of adding (adder.Multiplication)"),
        _f("b_repeat", SRAM_ADDR_BITS + 1, doc="0: b is dense; r > 0: word i reads b word inp_b + i // r (broadcast)"),
    ),
    Opcode.UPSAMPLE: (
        _sram("inp_base", "INP word of input pixel (0,0) of plane 0"),
        _sram("out_base", "OUT word of output pixel (0,0) of plane 0"),
        _size("in_w", "INP words per input row"), _sram("in_plane", "INP words per input plane"),
        _size("out_h", "output rows"), _size("out_w", "output columns"),
        _f("scale_y", 4, 1, doc="row repeat 1..15", default=1), _f("scale_x", 4, 1, doc="column repeat 1..15", default=1),
        _size("z_size", "planes"),
    ),
    Opcode.LRNTAB: _table_load(11, LRN_TABLE_SIZE - 1, f"first table entry 0..{LRN_TABLE_SIZE - 1}"),
    Opcode.LRN: (
        *_pixels(),
        _f("channels", 16, doc="valid channels (squares of channels >= channels count as 0)"),
        _f("size", 5, 1, LRN_MAX_SIZE, doc=f"window 1..{LRN_MAX_SIZE} channels", default=1),
        _int8("zp_in", "input zero point"),
        *_clamp(relu_note=False),
    ),
    Opcode.SMXTAB: _table_load(8, 255, "first table entry 0..255"),
    Opcode.SOFTMAX: (
        *_pixels(),
        _f("channels", 12, 1, SOFTMAX_MAX_CHANNELS, doc=f"channels 1..{SOFTMAX_MAX_CHANNELS}", default=1),
    ),
    Opcode.FC: (
        _sram("inp_base", "INP word of x element 0 (load_x)"),
        _sram("wgt_base", "WGT word of the first weight slice"),
        _sram("prm_base", "PRM word of outputs 0..C-1"),
        _sram("out_base", "OUT word of outputs 0..C-1"),
        _f("n_in", 24, 1, doc="inputs (x elements) per output", default=1),
        _size("n_out", "outputs of this tile (<= fc.OutputMemorySize)"),
        _f("load_x", 1, doc="1: copy x from INP into the x buffer first"),
        *_clamp(),
        _f("lane0", 6, doc="lane of output 0 in its PRM/OUT word (0..C-1); lanes before it are kept"),
        _act_table_flag(),
    ),
    Opcode.ACTTAB: _table_load(8, ACT_TABLE_SIZE - 1, f"first table entry 0..{ACT_TABLE_SIZE - 1}"),
}


def _instruction(opcode: Opcode, unit: str, forbidden: tuple[str, ...] = ()) -> Any:
    """Make an :class:`Instruction` subclass a dataclass whose fields are ``FIELDS[opcode]``.

    The fields become keyword-only dataclass fields in table order (the bit order), each carrying
    its :class:`Field` as metadata, so constructing, comparing and printing an instruction work as
    for a hand-written dataclass."""
    def make(cls: type) -> type:
        cls.OPCODE = opcode
        cls.UNIT = unit
        cls.FORBIDDEN_FLAGS = forbidden
        annotations = dict(cls.__dict__.get("__annotations__", {}))
        for f in FIELDS[opcode]:
            annotations[f.name] = "int"
            setattr(cls, f.name, field(default=f.default, metadata={"field": f}))
        cls.__annotations__ = annotations
        return dataclass(kw_only=True)(cls)
    return make


def _flag(doc: str) -> Any:
    return field(default=False, metadata={"bits": 1, "signed": False, "range": (0, 1), "doc": doc})


@dataclass(kw_only=True)
class Instruction:
    """Base of all instructions: the dependency flags of the common header.

    Subclasses are made by :func:`_instruction` from their row of :data:`FIELDS` (the row's order
    is the bit order); they add only the checks that depend on the configuration.
    """

    OPCODE: ClassVar[Opcode]
    UNIT: ClassVar[str]

    pop_prev: bool = _flag("wait for and consume a token from the previous unit")
    pop_next: bool = _flag("wait for and consume a token from the next unit")
    push_prev: bool = _flag("give the previous unit a token when done")
    push_next: bool = _flag("give the next unit a token when done")

    # -- layout ------------------------------------------------------------------------------
    @classmethod
    def field_specs(cls) -> list[FieldSpec]:
        """Opcode-specific fields (header excluded) with their bit offsets, from :data:`FIELDS`."""
        specs = []
        offset = HEADER_BITS
        for f in FIELDS[cls.OPCODE]:
            specs.append(FieldSpec(f.name, offset, f.bits, f.signed, f.lo, f.hi, f.doc))
            offset += f.bits
        if offset > INSN_BITS:
            raise AssertionError(f"{cls.__name__} needs {offset} bits, more than {INSN_BITS}")
        return specs

    @classmethod
    def layout(cls) -> data.FlexibleLayout:
        """The ``amaranth.lib.data`` layout of this opcode's view of the 256-bit word."""
        fields = {"header": data.Field(HEADER_LAYOUT, 0)}
        for spec in cls.field_specs():
            fields[spec.name] = data.Field(spec.shape, spec.offset)
        return data.FlexibleLayout(INSN_BITS, fields)

    # -- checks ------------------------------------------------------------------------------
    def check_fields(self) -> None:
        """Raise :class:`InstructionError` naming the first field outside its allowed range."""
        name = type(self).__name__.upper()
        for flag in _HEADER_FLAGS:
            value = getattr(self, flag)
            if not isinstance(value, (bool, int)) or int(value) not in (0, 1):
                raise InstructionError(f"{name}.{flag} = {value!r}: allowed values are 0/1 or bool")
            if int(value) and flag in self.FORBIDDEN_FLAGS:
                raise InstructionError(
                    f"{name}.{flag} is set, but the {self.UNIT} unit has no such neighbour; "
                    f"allowed flags: {', '.join(f for f in _HEADER_FLAGS if f not in self.FORBIDDEN_FLAGS)}"
                )
        for spec in self.field_specs():
            value = getattr(self, spec.name)
            if isinstance(value, bool) or not isinstance(value, int):
                try:
                    value = int(value)
                except (TypeError, ValueError):
                    raise InstructionError(
                        f"{name}.{spec.name} = {value!r} is not an integer"
                    ) from None
            if not spec.lo <= value <= spec.hi:
                raise InstructionError(
                    f"{name}.{spec.name} = {value} is out of range; allowed {spec.lo}..{spec.hi}"
                )
        self._check_cross_fields()

    FORBIDDEN_FLAGS: ClassVar[tuple[str, ...]] = ()

    def _check_cross_fields(self) -> None:
        pass

    def validate(self, hw: HardwareParams) -> None:
        """Check the fields and everything that depends on the configuration ``hw``.

        These are exactly the conditions the hardware checks at run time (so a program that
        validates never stops with ``SRAM_RANGE`` or ``ILLEGAL_FIELD``).
        """
        self.check_fields()
        self._check_hw(hw)
        if getattr(self, "act_table", 0) and not hw.act_table:
            raise InstructionError(
                f"{type(self).__name__.upper()}.act_table is set, but this processor has no activation table "
                "(conv.ActivationTableGeneration or fc.SigmoidBlockGeneration 'on' generates it)")

    def _check_hw(self, hw: HardwareParams) -> None:
        pass

    def _check_sram(self, hw: HardwareParams, buf: str, what: str, base: int, words: int) -> None:
        depth = hw.depth(buf)
        if base + words > depth:
            raise InstructionError(
                f"{type(self).__name__.upper()}.{what}: words {base}..{base + words - 1} exceed the "
                f"{buf} buffer (depth {depth} words, allowed 0..{depth - 1})"
            )

    # -- encoding ----------------------------------------------------------------------------
    def encode(self) -> bytes:
        """The 32-byte little-endian encoding (fields are range-checked first)."""
        self.check_fields()
        word = int(self.OPCODE)
        for bit, flag in enumerate(_HEADER_FLAGS):
            word |= int(getattr(self, flag)) << (OPCODE_BITS + bit)
        for spec in self.field_specs():
            value = int(getattr(self, spec.name)) & ((1 << spec.bits) - 1)
            word |= value << spec.offset
        return word.to_bytes(INSN_BYTES, "little")

    @classmethod
    def _from_word(cls, word: int) -> "Instruction":
        kwargs: dict[str, Any] = {}
        for bit, flag in enumerate(_HEADER_FLAGS):
            kwargs[flag] = bool((word >> (OPCODE_BITS + bit)) & 1)
        for spec in cls.field_specs():
            value = (word >> spec.offset) & ((1 << spec.bits) - 1)
            if spec.signed and value >> (spec.bits - 1):
                value -= 1 << spec.bits
            kwargs[spec.name] = value
        return cls(**kwargs)


_HEADER_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")

HEADER_LAYOUT = data.StructLayout(
    {
        "opcode": unsigned(OPCODE_BITS),
        "pop_prev": unsigned(1),
        "pop_next": unsigned(1),
        "push_prev": unsigned(1),
        "push_next": unsigned(1),
    }
)


@_instruction(Opcode.LOAD, "load", ("pop_prev", "push_prev"))
class Load(Instruction):
    """Strided 3-D read from DRAM into INP, WGT or PRM with padding inserted on the fly.

    Element (z, y, x) is read from ``dram_addr + (z*z_stride + y*y_stride + x) * pitch`` and
    written to word ``sram_base + (z*Hp + y + pad_top)*Wp + x + pad_left`` with
    ``Hp = y_size + pad_top + pad_bottom`` and ``Wp = x_size + pad_left + pad_right``; the
    padding words of that dense Hp x Wp block per plane get ``pad_value`` in every byte.
    """

    @property
    def buf_name(self) -> str:
        return Buf(self.buf).name

    @property
    def padded_words(self) -> int:
        hp = self.y_size + self.pad_top + self.pad_bottom
        wp = self.x_size + self.pad_left + self.pad_right
        return self.z_size * hp * wp

    def _check_hw(self, hw: HardwareParams) -> None:
        if self.dram_addr % hw.bytes_per_beat:
            raise InstructionError(
                f"LOAD.dram_addr = {self.dram_addr:#x} is not a multiple of the bus width "
                f"({hw.bytes_per_beat} bytes)"
            )
        self._check_sram(hw, self.buf_name, "sram_base", self.sram_base, self.padded_words)


@_instruction(Opcode.STORE, "store", ("pop_next", "push_next"))
class Store(Instruction):
    """Strided 3-D write of densely stored OUT words to DRAM (C valid bytes per element)."""

    def _check_hw(self, hw: HardwareParams) -> None:
        if self.dram_addr % hw.bytes_per_beat:
            raise InstructionError(
                f"STORE.dram_addr = {self.dram_addr:#x} is not a multiple of the bus width "
                f"({hw.bytes_per_beat} bytes)"
            )
        words = self.x_size * self.y_size * self.z_size
        self._check_sram(hw, "OUT", "sram_base", self.sram_base, words)


def _check_act(insn: Instruction) -> None:
    if insn.act_min > insn.act_max:  # type: ignore[attr-defined]
        raise InstructionError(
            f"{type(insn).__name__.upper()}.act_min = {insn.act_min} > act_max = {insn.act_max}; "  # type: ignore[attr-defined]
            "allowed act_min <= act_max"
        )


@_instruction(Opcode.CONV, "compute")
class Conv(Instruction):
    """One output-channel block of a convolution (see "Semantics" in ``docs/isa.md``)."""

    def _check_cross_fields(self) -> None:
        _check_act(self)

    def _check_hw(self, hw: HardwareParams) -> None:
        last_row = (self.out_h - 1) * self.stride_y + (self.kh - 1) * self.dil_y
        last_col = (self.out_w - 1) * self.stride_x + (self.kw - 1) * self.dil_x
        last_inp = (
            self.inp_base + (self.cin_blocks - 1) * self.in_plane + last_row * self.in_w + last_col
        )
        if self.dw:
            self._check_depthwise(hw)
        self._check_sram(hw, "INP", "inp_base", self.inp_base, last_inp - self.inp_base + 1)
        self._check_sram(hw, "WGT", "wgt_base", self.wgt_base, self.wgt_words())
        self._check_sram(hw, "PRM", "prm_base", self.prm_base, 1)
        self._check_sram(hw, self.result_buffer(), "out_base", self.out_base, self.out_h * self.out_w)

    def result_buffer(self) -> str:
        """The buffer the CONV's results go to: "INP" (to_inp) or "OUT"."""
        return "INP" if self.to_inp else "OUT"

    def wgt_words(self) -> int:
        """WGT words the CONV reads: one per tap, or one in depthwise mode."""
        return 1 if self.dw else self.cin_blocks * self.kh * self.kw

    def dw_strip_rows(self) -> int:
        """Depthwise: INP rows of a full strip, (dw_rows - 1) * stride_y + kh."""
        return (self.dw_rows - 1) * self.stride_y + self.kh

    def _check_depthwise(self, hw: HardwareParams) -> None:
        if not hw.depthwise or hw.dw_kh < 1:
            raise InstructionError("CONV.dw is set, but this processor has no depthwise mode (conv "
                                   "DepthwiseBlockGeneration 'on' and C >= 3 generate it)")
        problems = []
        if self.cin_blocks != 1:
            problems.append(f"cin_blocks = {self.cin_blocks} (must be 1)")
        if self.kw > DW_WINDOW_COLS or self.kh > hw.dw_kh:
            problems.append(f"kernel {self.kh}x{self.kw} (at most {hw.dw_kh}x{DW_WINDOW_COLS} on this processor)")
        if self.kh * self.kw < 2:
            problems.append("a 1x1 kernel (at least two taps; a 1x1 depthwise conv is an ordinary one-tap CONV)")
        if (self.dil_y, self.dil_x) != (1, 1):
            problems.append(f"dilation {self.dil_y}x{self.dil_x} (must be 1)")
        if self.dw_rows < 1 or self.dw_strip_rows() > DW_COL:
            problems.append(f"dw_rows = {self.dw_rows} (1 .. (DW_COL - kh) / stride_y + 1 with DW_COL = {DW_COL})")
        if problems:
            raise InstructionError("depthwise CONV: " + "; ".join(problems))


@_instruction(Opcode.POOL, "compute")
class Pool(Instruction):
    """Max or average pooling of ``z_size`` channel-block planes (see "Semantics" in ``docs/isa.md``)."""

    def _check_cross_fields(self) -> None:
        _check_act(self)

    def _check_hw(self, hw: HardwareParams) -> None:
        last_row = (self.out_h - 1) * self.stride_y + self.kh - 1
        last_col = (self.out_w - 1) * self.stride_x + self.kw - 1
        last_inp = self.inp_base + (self.z_size - 1) * self.in_plane + last_row * self.in_w + last_col
        self._check_sram(hw, "INP", "inp_base", self.inp_base, last_inp - self.inp_base + 1)
        self._check_sram(hw, "OUT", "out_base", self.out_base, self.z_size * self.out_h * self.out_w)
        if self.mode == PoolMode.AVG:
            self._check_sram(hw, "PRM", "prm_base", self.prm_base, self.z_size)


@_instruction(Opcode.ADD, "compute")
class Add(Instruction):
    """Element-wise add (or multiply) of two INP tensors of ``count`` words (adder module).

    For every word i < count and lane l, with ``j = i`` (``b_repeat`` 0) or ``j = i // b_repeat``
    (broadcast: one b word for ``b_repeat`` consecutive a words, e.g. a per-channel vector over
    the pixels of a channel block)::

        a = INP[inp_a + i][l] - za;  b = INP[inp_b + j][l] - zb
        acc = a * ma + b * mb                          (exact, 25 bits; mul = 0)
        OUT[out_base + i][l] = requantize(acc, 1, shift, zp_out, act_min, act_max)
        acc = a * b                                    (exact, 17 bits; mul = 1)
        OUT[out_base + i][l] = requantize(acc, ma, shift, zp_out, act_min, act_max)

    (``dlproc.targets.golden.ops.add`` and ``ops.mul``). ``mul`` needs adder.Multiplication.
    Operand b must lie within INP as if it were dense (``inp_b + count <= inp_depth``).
    """

    def _check_cross_fields(self) -> None:
        _check_act(self)

    def b_words(self) -> int:
        """INP words of operand b the instruction reads."""
        return self.count if self.b_repeat == 0 else -(-self.count // self.b_repeat)

    def _check_hw(self, hw: HardwareParams) -> None:
        if self.mul and not hw.multiply:
            raise InstructionError("ADD.mul is set, but this processor has no element-wise multiply "
                                   "(adder.Multiplication 'on' generates it)")
        self._check_sram(hw, "INP", "inp_a", self.inp_a, self.count)
        # b's range is checked as if b were dense (inp_b + count), whatever b_repeat: the engine
        # checks sums of fields before it reads, and a broadcast b never reaches further.
        self._check_sram(hw, "INP", "inp_b", self.inp_b, self.count)
        self._check_sram(hw, "OUT", "out_base", self.out_base, self.count)


@_instruction(Opcode.UPSAMPLE, "compute")
class Upsample(Instruction):
    """Nearest-neighbour upsample of ``z_size`` INP planes into dense OUT planes (segmentation block).

    For z < z_size, oy < out_h, ox < out_w::

        OUT[out_base + (z*out_h + oy)*out_w + ox] =
            INP[inp_base + z*in_plane + (oy // scale_y)*in_w + ox // scale_x]

    (``dlproc.targets.golden.ops.upsample_nearest`` for a tile whose origin is a multiple of the scale).
    """

    def _check_hw(self, hw: HardwareParams) -> None:
        last = (self.inp_base + (self.z_size - 1) * self.in_plane
                + ((self.out_h - 1) // self.scale_y) * self.in_w + (self.out_w - 1) // self.scale_x)
        self._check_sram(hw, "INP", "inp_base", self.inp_base, last - self.inp_base + 1)
        self._check_sram(hw, "OUT", "out_base", self.out_base, self.z_size * self.out_h * self.out_w)


@_instruction(Opcode.LRNTAB, "compute")
class LrnTab(Instruction):
    """Load ``count`` PRM words into the LRN block's multiplier table (LRN block).

    Lane l of PRM word ``prm_base + w`` becomes table entry ``tab_base + w*C + l``: its M and S
    (bias and M_neg are ignored). The table has ``numerics.LRN_TABLE_SIZE`` entries and keeps its
    contents until it is overwritten (it is per-layer data, loaded before the layer's LRNs).
    Lanes of the last word that fall beyond the table are ignored (1792 is not a multiple of
    every C), so only the first entry of every word must lie inside the table.
    """

    def _check_hw(self, hw: HardwareParams) -> None:
        self._check_sram(hw, "PRM", "prm_base", self.prm_base, self.count)
        if self.tab_base + (self.count - 1) * hw.c >= LRN_TABLE_SIZE:
            raise InstructionError(
                f"LRNTAB: word {self.count - 1} starts at entry {self.tab_base + (self.count - 1) * hw.c}, beyond "
                f"the LRN table (allowed 0..{LRN_TABLE_SIZE - 1})")


@_instruction(Opcode.LRN, "compute")
class Lrn(Instruction):
    """Cross-channel LRN of ``n_pix`` pixels x ``cin_blocks`` channel blocks (LRN block).

    With ``d[c] = INP[inp_base + (c // C)*in_plane + p][c % C] - zp_in`` for channel c of pixel p,
    squares of channels ``c >= channels`` counted as 0, ``q[c] = sum of d[i]**2`` over ONNX's window
    ``i in [c - (size-1)//2, c + size//2]`` (clipped to the channel blocks of the pixel) and
    ``i = numerics.lrn_index(q[c])``::

        OUT[out_base + (c // C)*n_pix + p][c % C] = requantize(d[c], M[i], S[i], zp_out, act_min, act_max)

    with (M, S) the LRN table entry i (``dlproc.targets.golden.ops.lrn``).
    """

    def _check_cross_fields(self) -> None:
        _check_act(self)

    def _check_hw(self, hw: HardwareParams) -> None:
        last = self.inp_base + (self.cin_blocks - 1) * self.in_plane + self.n_pix - 1
        self._check_sram(hw, "INP", "inp_base", self.inp_base, last - self.inp_base + 1)
        self._check_sram(hw, "OUT", "out_base", self.out_base, self.cin_blocks * self.n_pix)


SOFTMAX_TABLE_SIZE = 256  #: exp table entries, t = max - x = 0..255


@_instruction(Opcode.SMXTAB, "compute")
class SmxTab(Instruction):
    """Load ``count`` PRM words into the softmax block's exp table (softmax block).

    The bias field of lane l of PRM word ``prm_base + w`` becomes entry ``tab_base + w*C + l`` (it
    must be in 0..2**20, ``numerics.SOFTMAX_EXP_BITS``); lanes beyond entry 255 are ignored.
    """

    def _check_hw(self, hw: HardwareParams) -> None:
        self._check_sram(hw, "PRM", "prm_base", self.prm_base, self.count)
        if self.tab_base + (self.count - 1) * hw.c >= SOFTMAX_TABLE_SIZE:
            raise InstructionError(
                f"SMXTAB: word {self.count - 1} starts at entry {self.tab_base + (self.count - 1) * hw.c}, beyond "
                f"the exp table (allowed 0..{SOFTMAX_TABLE_SIZE - 1})")


@_instruction(Opcode.SOFTMAX, "compute")
class Softmax(Instruction):
    """Integer softmax over the ``channels`` channels of each of ``n_pix`` pixels (softmax block).

    With ``x[c] = INP[inp_base + (c // C)*in_plane + p][c % C]`` for c < channels: ``m = max x``,
    ``e[c] = EXP[m - x[c]]``, ``R = floor(2**52 / sum e)`` and
    ``OUT[out_base + (c // C)*n_pix + p][c % C] = clamp(((e[c]*R + 2**43) >> 44) - 128, -128, 127)``
    (``dlproc.targets.golden.ops.softmax_int8``); lanes of channels >= ``channels`` get -128.
    """

    def _check_hw(self, hw: HardwareParams) -> None:
        last = self.inp_base + (self.cin_blocks - 1) * self.in_plane + self.n_pix - 1
        self._check_sram(hw, "INP", "inp_base", self.inp_base, last - self.inp_base + 1)
        self._check_sram(hw, "OUT", "out_base", self.out_base, self.cin_blocks * self.n_pix)


@_instruction(Opcode.FC, "compute")
class Fc(Instruction):
    """One tile of a fully connected layer: ``n_out`` outputs over ``n_in`` inputs (fc module).

    With F = ``hw.fc_lanes``, K = C*C // F weight slices per WGT word and S = ceil(n_in / F)
    slices per output:

    * ``load_x``: first copy ``ceil(n_in / C)`` INP words into the x buffer,
      ``X[k*C + l] = INP[inp_base + k][l]`` (elements beyond the x buffer are dropped); without it
      the x buffer keeps what the previous FC loaded (the tiles of one layer share x).
    * slice ``s`` (F int8 weights) is bytes ``(s % K)*F .. (s % K)*F + F-1`` of WGT word
      ``wgt_base + s // K`` (byte ``co*C + ci`` of the ``[co][ci]`` word); output o uses slices
      ``o*S .. o*S + S-1``; lane l of its slice j multiplies ``X[j*F + l]`` (only j*F + l < n_in)::

          acc[o] = bias[o] + sum_{i < n_in} W(o, i) * X[i]            (int32, wrapping)

      with ``bias``/M/M_neg/S of lane ``p % C`` of PRM word ``prm_base + p // C``, p = lane0 + o;
    * ``OUT[out_base + p // C][p % C] = requantize(acc[o], M, S, zp_out, act_min, act_max, M_neg)``;
      lanes of the last OUT word beyond n_out get ``requantize(bias)`` of their lane, and lanes
      ``0 .. lane0-1`` of the first word are not written. With ``lane0`` a layer whose weights
      for C outputs do not fit a WGT half runs as several FC instructions per C-lane word, each
      over fewer outputs, which together write the word.

    ``dlproc.targets.golden.ops.fully_connected`` is the same computation on whole vectors.
    """

    def _check_cross_fields(self) -> None:
        _check_act(self)

    def slices_per_output(self, hw: HardwareParams) -> int:
        return -(-self.n_in // hw.fc_lanes)

    def wgt_words(self, hw: HardwareParams) -> int:
        """WGT words the tile's weight stream occupies."""
        per_word = (hw.c * hw.c) // hw.fc_lanes
        return -(-(self.n_out * self.slices_per_output(hw)) // per_word)

    def _check_hw(self, hw: HardwareParams) -> None:
        if self.n_out > hw.fc_out_max:
            raise InstructionError(f"FC.n_out = {self.n_out} exceeds fc.OutputMemorySize (allowed 1..{hw.fc_out_max})")
        if self.n_in > hw.fc_in_depth:
            raise InstructionError(
                f"FC.n_in = {self.n_in} exceeds the x buffer (fc.InputMemorySize, allowed 1..{hw.fc_in_depth})")
        if self.load_x:
            self._check_sram(hw, "INP", "inp_base", self.inp_base, -(-self.n_in // hw.c))
        self._check_sram(hw, "WGT", "wgt_base", self.wgt_base, self.wgt_words(hw))
        if self.lane0 >= hw.c:
            raise InstructionError(f"FC.lane0 = {self.lane0} is not a lane (allowed 0..{hw.c - 1})")
        blocks = -(-(self.lane0 + self.n_out) // hw.c)
        self._check_sram(hw, "PRM", "prm_base", self.prm_base, blocks)
        self._check_sram(hw, "OUT", "out_base", self.out_base, blocks)


@_instruction(Opcode.ACTTAB, "compute")
class ActTab(Instruction):
    """Load ``count`` PRM words into the output stage's activation table (activation table).

    The bias field of lane l of PRM word ``prm_base + w`` becomes entry ``tab_base + w*C + l``; it
    must be an int8 value (-128..127), the output code for the clamped result ``entry - 128``.
    Lanes beyond entry 255 are ignored. Every CONV, ADD and FC with ``act_table`` set maps its
    results through the table, which keeps its contents until it is overwritten; ACTTAB starts
    when every earlier instruction has completed, so a table never changes under a running one.
    """

    def _check_hw(self, hw: HardwareParams) -> None:
        self._check_sram(hw, "PRM", "prm_base", self.prm_base, self.count)
        if self.tab_base + (self.count - 1) * hw.c >= ACT_TABLE_SIZE:
            raise InstructionError(
                f"ACTTAB: word {self.count - 1} starts at entry {self.tab_base + (self.count - 1) * hw.c}, beyond "
                f"the activation table (allowed 0..{ACT_TABLE_SIZE - 1})")


@_instruction(Opcode.MARK, "store", ("pop_next", "push_next"))
class Mark(Instruction):
    """Latch the cycle counter into profile entry ``index`` once all earlier stores completed."""

    def _check_hw(self, hw: HardwareParams) -> None:
        if self.index >= hw.profile_depth:
            raise InstructionError(
                f"MARK.index = {self.index} is out of range; allowed 0..{hw.profile_depth - 1}"
            )


@_instruction(Opcode.FINISH, "compute")
class Finish(Instruction):
    """End of program: DONE is set when the compute unit reaches it and every unit is idle."""


INSTRUCTION_CLASSES: dict[Opcode, type[Instruction]] = {
    cls.OPCODE: cls for cls in (Load, Store, Conv, Pool, Mark, Finish, Add, Upsample, LrnTab, Lrn, SmxTab, Softmax,
                                      Fc, ActTab)
}

#: Which unit's queue the fetch unit dispatches each opcode to.
UNIT_OF_OPCODE: dict[Opcode, str] = {op: cls.UNIT for op, cls in INSTRUCTION_CLASSES.items()}

#: The whole 256-bit instruction as seen by the gateware: ``insn.header.opcode``,
#: ``insn.load.x_size``, ``insn.conv.kh``, ... (every member covers all 256 bits).
INSN_LAYOUT = data.UnionLayout(
    {"header": HEADER_LAYOUT, "raw": unsigned(INSN_BITS)}
    | {op.name.lower(): cls.layout() for op, cls in INSTRUCTION_CLASSES.items()}
)
#: The two DMA units' views of the word (the engines take their command layouts from ``field_specs``).
LOAD_LAYOUT = Load.layout()
STORE_LAYOUT = Store.layout()


def decode(raw: bytes) -> Instruction:
    """Decode one 32-byte instruction; an unknown opcode raises :class:`InstructionError`."""
    if len(raw) != INSN_BYTES:
        raise InstructionError(f"an instruction is {INSN_BYTES} bytes, got {len(raw)}")
    word = int.from_bytes(raw, "little")
    code = word & ((1 << OPCODE_BITS) - 1)
    try:
        cls = INSTRUCTION_CLASSES[Opcode(code)]
    except ValueError:
        allowed = ", ".join(f"{op.value} {op.name}" for op in Opcode)
        raise InstructionError(f"opcode {code} is illegal; allowed: {allowed}") from None
    return cls._from_word(word)


def encode_program(insns: Iterable[Instruction]) -> bytes:
    """Concatenate the encodings of ``insns`` (what INSN_BASE points to)."""
    return b"".join(insn.encode() for insn in insns)


def decode_program(raw: bytes) -> list[Instruction]:
    if len(raw) % INSN_BYTES:
        raise InstructionError(
            f"a program is a multiple of {INSN_BYTES} bytes, got {len(raw)} bytes"
        )
    return [decode(raw[i : i + INSN_BYTES]) for i in range(0, len(raw), INSN_BYTES)]
