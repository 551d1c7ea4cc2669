"""The dlproc control/status register map: the one definition, as data.

The CSR gateware (``dlproc.hardware.gateware.csr``) decodes exactly these registers, and
``dlproc.flow.codegen`` generates ``firmware/include/dlproc_regs.h`` and ``docs/registers.md`` from
them, so firmware, documentation and hardware cannot drift apart.

The CSR port is an Avalon-MM slave with 32-bit data and *word* addresses (offset ``n`` is byte
``4 * n`` on a byte-addressed bridge), fixed read latency 1 and no waitrequest. Access types:

``RO``   read only; writes are ignored.
``RW``   read/write; reads return what was written (or the reset value).
``W1S``  write 1 to trigger an action; reads as 0 (CTRL.START, CTRL.ABORT, CTRL.ACK).

64-bit counters are read low word first: reading the ``*_LO`` word latches the high word into a
shadow that the ``*_HI`` word returns, so the pair is consistent while the counter runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CSR_ADDR_BITS = 6  #: word-address width of the CSR slave (64 registers)
MAGIC = 0x444C5052  #: "DLPR" in ASCII; ID register value
VERSION_MAJOR = 1
VERSION_MINOR = 0


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    access: str
    description: str
    reset: int = 0

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register. ``reset`` is ``None`` for values fixed by the configuration."""

    name: str
    offset: int
    access: str
    description: str
    fields: tuple[Field, ...] = field(default=())
    reset: int | None = 0

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}")


def _whole(name: str, offset: int, access: str, description: str, reset: int | None = 0) -> Register:
    """A register whose 32 bits are one value."""
    return Register(name, offset, access, description, (Field("VALUE", 0, 32, access, description),), reset)


#: Per-unit performance counters (32-bit, wrap, cleared by START): name -> what is counted.
PERF_COUNTERS: tuple[tuple[str, str], ...] = (
    ("FETCH_BUSY", "cycles the fetch unit had an instruction read outstanding or pending"),
    ("LOAD_BUSY", "cycles the load unit executed an instruction"),
    ("LOAD_STALL", "cycles the load unit waited for a dependency token"),
    ("COMPUTE_BUSY", "cycles the compute unit executed an instruction"),
    ("COMPUTE_STALL", "cycles the compute unit waited for a dependency token"),
    ("STORE_BUSY", "cycles the store unit executed an instruction"),
    ("STORE_STALL", "cycles the store unit waited for a dependency token"),
    ("MEM_RD_BEATS", "read data beats received (on the read master mem with MemoryPorts = 2)"),
    ("MEM_WR_BEATS", "write data beats accepted (on the write master mem1 with MemoryPorts = 2)"),
    ("MEM_WAIT", "cycles in which a memory master held a command or write beat under waitrequest (with "
                 "MemoryPorts = 2: either master, a cycle in which both waited counts once)"),
    ("MAC_ACTIVE", "cycles the C x C MAC array consumed an INP word (C*C MACs each; CONV and the conv-mapped layers)"),
    ("FC_MAC_ACTIVE", "cycles the FC engine's F lanes consumed a weight slice (F = fc_lanes MACs each)"),
)
PERF_BASE = 0x20

REGISTERS: tuple[Register, ...] = (
    _whole("ID", 0x00, "RO", "identity magic 0x444C5052 ('DLPR')", MAGIC),
    Register(
        "VERSION", 0x01, "RO", "hardware and instruction-set version",
        (
            Field("ISA", 0, 8, "RO", "instruction-set version (dlproc.hardware.isa.ISA_VERSION)"),
            Field("MINOR", 8, 8, "RO", "minor hardware version", VERSION_MINOR),
            Field("MAJOR", 16, 8, "RO", "major hardware version", VERSION_MAJOR),
        ),
        None,
    ),
    _whole("CONFIG_HASH_LO", 0x02, "RO", "configuration hash bits 31..0 (ProcessorConfig.hash64)", None),
    _whole("CONFIG_HASH_HI", 0x03, "RO", "configuration hash bits 63..32", None),
    Register(
        "HW_PARAMS", 0x04, "RO", "lane count and memory-bus width",
        (
            Field("C", 0, 8, "RO", "C = sqrt(ConvThreadNumber) lanes"),
            Field("MEM_BYTES", 8, 8, "RO", "B = memory data width in bytes"),
            Field("MAX_BURST", 16, 8, "RO", "longest memory burst in beats"),
            Field("QUEUE_DEPTH", 24, 8, "RO", "instruction-queue entries per unit"),
        ),
        None,
    ),
    _whole("HW_INP_DEPTH", 0x05, "RO", "INP buffer depth in words (C bytes each)", None),
    _whole("HW_WGT_DEPTH", 0x06, "RO", "WGT buffer depth in words (C*C bytes each)", None),
    _whole("HW_PRM_DEPTH", 0x07, "RO", "PRM buffer depth in words (9*C bytes each)", None),
    _whole("HW_OUT_DEPTH", 0x08, "RO", "OUT buffer depth in words (C bytes each)", None),
    _whole("HW_PROFILE_DEPTH", 0x09, "RO", "profile buffer entries", None),
    Register(
        "CTRL", 0x10, "RW", "control",
        (
            Field("START", 0, 1, "W1S", "start the program at INSN_BASE (ignored while busy); clears DONE/ERROR and the counters"),
            Field("ABORT", 1, 1, "W1S", "stop a running program (ERROR with code ABORTED)"),
            Field("IRQ_EN", 2, 1, "RW", "drive irq while DONE or ERROR is set"),
            Field("ACK", 3, 1, "W1S", "clear DONE, ERROR and ERROR_CODE (and so irq) when not busy"),
        ),
    ),
    Register(
        "STATUS", 0x11, "RO", "status",
        (
            Field("BUSY", 0, 1, "RO", "a program is running (or stopping after an error/abort)"),
            Field("DONE", 1, 1, "RO", "the last program reached FINISH with every unit idle"),
            Field("ERROR", 2, 1, "RO", "the last program stopped with an error"),
            Field("ERROR_CODE", 8, 8, "RO", "dlproc.hardware.isa.ErrorCode of that error"),
        ),
    ),
    _whole("INSN_BASE", 0x12, "RW", "byte address of the first instruction (multiple of the bus width)"),
    _whole("INSN_COUNT", 0x13, "RW", "number of instructions; reaching it without FINISH is RAN_OFF_END"),
    _whole("DMA_BASE", 0x14, "RW", "lowest byte address the processor may access"),
    _whole("DMA_LIMIT", 0x15, "RW", "first byte address above the window [DMA_BASE, DMA_LIMIT)"),
    _whole("ERR_INSN", 0x16, "RO", "program index of the instruction that caused the error (compute errors: the last instruction the compute unit accepted; DEADLOCK/TOKEN_OVERFLOW: instructions fetched)"),
    _whole("ERR_ADDR", 0x17, "RO", "DMA_* errors: address of the first beat outside the window (bursts are clipped at DMA_LIMIT, so all beats below it were transferred); misaligned DRAM address or INSN_BASE: that address"),
    _whole("CYCLES_LO", 0x18, "RO", "cycles since START, bits 31..0 (stops at DONE/ERROR); latches CYCLES_HI"),
    _whole("CYCLES_HI", 0x19, "RO", "cycles since START, bits 63..32 (as latched by reading CYCLES_LO)"),
    _whole("FETCHED", 0x1A, "RO", "instructions fetched since START"),
    *(
        _whole(name, PERF_BASE + i, "RO", description)
        for i, (name, description) in enumerate(PERF_COUNTERS)
    ),
    _whole("PROF_COUNT", 0x30, "RO", "MARK instructions executed since START"),
    Register(
        "PROF_INDEX", 0x31, "RW", "profile entry that PROF_DATA_LO/HI return",
        (Field("INDEX", 0, 16, "RW", "entry number (bits 31..16 read as zero)"),),
    ),
    _whole("PROF_DATA_LO", 0x32, "RO", "cycle count latched by MARK PROF_INDEX, bits 31..0"),
    _whole("PROF_DATA_HI", 0x33, "RO", "cycle count latched by MARK PROF_INDEX, bits 63..32"),
)

REG: dict[str, Register] = {r.name: r for r in REGISTERS}


def offset(name: str) -> int:
    """Word offset of register ``name``."""
    return REG[name].offset


def _check() -> None:
    seen: dict[int, str] = {}
    for reg in REGISTERS:
        if reg.offset >= 1 << CSR_ADDR_BITS:
            raise AssertionError(f"{reg.name} offset {reg.offset:#x} exceeds CSR_ADDR_BITS")
        if reg.offset in seen:
            raise AssertionError(f"{reg.name} and {seen[reg.offset]} share offset {reg.offset:#x}")
        seen[reg.offset] = reg.name
        used = 0
        for f in reg.fields:
            if f.mask & used or f.lsb + f.width > 32:
                raise AssertionError(f"{reg.name}.{f.name} overlaps or exceeds 32 bits")
            used |= f.mask


_check()
