"""ISA-level functional simulator of the dlproc processor (the Workflow's ``golden`` target).

It executes the same instruction stream as the hardware, with the contract's semantics
(``/work/team/contract.md`` and ``docs/isa.md``), in NumPy: a DRAM byte array, the INP/WGT/PRM/OUT
on-chip buffers with their exact word shapes, and the four units (fetch, load, compute, store)
joined by the four dependency-token counters.

The simulator is *functional*: it has no notion of cycles. It still has to agree with the hardware
on everything a program can observe, which includes the failure modes. Deadlock and token
overflow depend on how the units interleave, so the simulator models the units as separate
in-order queues of the hardware's depth and lets any unit whose head instruction has its tokens
run; a program whose token discipline
deadlocks in hardware deadlocks here too (no unit can run and the program has not finished), and
is reported as :class:`DeadlockError` with the same error code. Errors map one to one onto the
hardware's STATUS error codes (``dlproc.hardware.isa``), so a test can compare the two.

Why a scheduler rather than executing in program order: a program that executes correctly in
program order may still deadlock in the decoupled hardware (for example a LOAD that pops a token the
compute unit gives only after a later CONV that itself waits for that LOAD, with queues too short
to reach it), and a program with a missing wait may race in hardware (a LOAD overwriting a buffer
half the CONV still reads). The first is detected exactly. The second depends on timing; the
adversarial schedules (``Machine(schedule="loads-first" | "stores-first")``) run one side of every
token as early as the tokens allow, so a missing wait changes the result there, which is how the
tests prove the program builder's token discipline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import SimulationError
from dlproc.hardware.geometry import Geometry
from dlproc.hardware.numerics import (ACT_TABLE_SIZE, LRN_TABLE_SIZE, MAX_SHIFT, MULT_BITS, SOFTMAX_EXP_BITS, SOFTMAX_OUT_SHIFT,
                             SOFTMAX_RECIP_BITS, lrn_index, requantize, wrap_int32)

__all__ = [
    "Machine",
    "RunResult",
    "IsaSimError",
    "IllegalOpcodeError",
    "WriteHazardError",
    "RanOffEndError",
    "DmaWindowError",
    "SramRangeError",
    "DeadlockError",
    "IllegalFieldError",
    "DmaFetchError",
    "DmaLoadError",
    "DmaStoreError",
    "TokenOverflowError",
    "BlockAbsentError",
    "ERROR_CLASSES",
    "UNITS",
    "SCHEDULES",
    "run_on_isasim",
]

INSN_BYTES = isa.INSN_BYTES

#: The units of the processor, in the order the fetch unit dispatches to them.
UNITS = ("load", "compute", "store")
#: Orders in which ready units run (see :class:`Machine`).
SCHEDULES = ("greedy", "loads-first", "stores-first")


# --------------------------------------------------------------------------------------------
# Errors. Each carries the hardware STATUS error code so that RTL and ISA runs compare directly.
# --------------------------------------------------------------------------------------------
class IsaSimError(SimulationError):
    """A program error the processor would report in STATUS (``code`` is the hardware's code)."""

    code: isa.ErrorCode = isa.ErrorCode.NONE

    def __init__(self, message: str, *, insn_index: int | None = None):
        self.insn_index = insn_index
        where = f"instruction {insn_index}: " if insn_index is not None else ""
        super().__init__(f"{where}{message} (STATUS error code {self.code.name} = {int(self.code)})")


class IllegalOpcodeError(IsaSimError):
    code = isa.ErrorCode.ILLEGAL_OPCODE


class RanOffEndError(IsaSimError):
    code = isa.ErrorCode.RAN_OFF_END


class DmaWindowError(IsaSimError):
    """Base of the three DMA window errors (fetch, load, store have their own codes)."""


class DmaFetchError(DmaWindowError):
    code = isa.ErrorCode.DMA_FETCH


class DmaLoadError(DmaWindowError):
    code = isa.ErrorCode.DMA_LOAD


class DmaStoreError(DmaWindowError):
    code = isa.ErrorCode.DMA_STORE


class SramRangeError(IsaSimError):
    code = isa.ErrorCode.SRAM_RANGE


class DeadlockError(IsaSimError):
    code = isa.ErrorCode.DEADLOCK


class IllegalFieldError(IsaSimError):
    """A field the hardware cannot execute: zero size, misaligned DRAM address, forbidden
    dependency flag, out-of-range requantization parameter, MARK index beyond the profile buffer."""

    code = isa.ErrorCode.ILLEGAL_FIELD


class TokenOverflowError(IsaSimError):
    code = isa.ErrorCode.TOKEN_OVERFLOW


class WriteHazardError(SimulationError):
    """A program reads INP words that an earlier CONV with ``to_inp`` writes, with no CONV with
    ``wait_writes`` in between: on the processor the read may see the words before or after the
    conv engine's drain writes them. Not a STATUS error (the hardware cannot see it); a bug of the
    program, which the compiler's hazard checker refuses too."""

    def __init__(self, message: str, *, insn_index: int | None = None):
        self.insn_index = insn_index
        super().__init__(f"instruction {insn_index}: {message}" if insn_index is not None else message)


class BlockAbsentError(IsaSimError):
    """An optional block's instruction on a processor generated without that block."""

    code = isa.ErrorCode.BLOCK_ABSENT


#: Error class of each hardware code, for comparing an RTL run's STATUS with the simulator.
ERROR_CLASSES: dict[isa.ErrorCode, type[IsaSimError]] = {
    cls.code: cls
    for cls in (IllegalOpcodeError, RanOffEndError, DmaFetchError, DmaLoadError, DmaStoreError,
                SramRangeError, DeadlockError, IllegalFieldError, TokenOverflowError, BlockAbsentError)
}


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    """What one run did: instruction counts per unit, MARK indices in completion order, DMA traffic
    (bytes on the bus in whole beats, as the hardware moves them) and the token counters left."""

    executed: dict[str, int] = field(default_factory=lambda: {u: 0 for u in UNITS})
    marks: list[int] = field(default_factory=list)
    dma_read_bytes: int = 0
    dma_write_bytes: int = 0
    fetch_bytes: int = 0
    mac_ops: int = 0  #: MACs the array performs (C*C per CONV tap and pixel, padded lanes included)
    tokens_left: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Machine
# --------------------------------------------------------------------------------------------
# The token counters between neighbouring units. Load's "next" neighbour is compute, compute's
# "prev" is load and its "next" is store, store's "prev" is compute (VTA naming).
_POP = {  # unit -> {header flag: counter it consumes}
    "load": {"pop_next": "C2L"},
    "compute": {"pop_prev": "L2C", "pop_next": "S2C"},
    "store": {"pop_prev": "C2S"},
}
_PUSH = {  # unit -> {header flag: counter it increments}
    "load": {"push_next": "L2C"},
    "compute": {"push_prev": "C2L", "push_next": "C2S"},
    "store": {"push_prev": "S2C"},
}


class Machine:
    """The processor state of one configuration plus a DRAM of ``dram_size`` bytes.

    Each unit's command queue holds ``hw.queue_depth`` instructions, as in the hardware: the fetch
    unit stalls when the target queue is full, which is how a program whose token producers come
    *after* their consumers in the stream deadlocks. ``queue_depth=None`` models unbounded queues.

    ``schedule`` picks which ready unit runs first. Results of a correctly synchronised program
    do not depend on it; a program with a missing token does, which is how the tests find races:

    * ``"greedy"``: units run as soon as they can, fetch refills them -- close to program order;
    * ``"loads-first"``: fetch runs ahead as far as the queues allow, then one instruction at a
      time of the first ready unit in the order load, compute, store. A LOAD overwrites a buffer
      half or reads DRAM as early as its tokens permit, a CONV overwrites an OUT slot before
      pending STOREs drained it: this exposes missing C2L and S2C waits and loads that overtake
      the stores producing their data;
    * ``"stores-first"``: the same with the order store, compute, load, exposing missing C2S and
      L2C waits (a STORE or CONV reading a buffer before it was written).
    """

    def __init__(self, config: Any = None, *, geometry: Geometry | None = None, dram_size: int = 1 << 24,
                 queue_depth: int | None | str = "hw", schedule: str = "greedy"):
        if geometry is None:
            if config is None:
                raise SimulationError("Machine needs a ProcessorConfig or a Geometry")
            geometry = Geometry.from_config(config)
        self.geom = geometry
        self.hw = geometry.hw
        self.config = config
        self.queue_depth = self.hw.queue_depth if queue_depth == "hw" else queue_depth
        if schedule not in SCHEDULES:
            raise SimulationError(f"schedule {schedule!r}: allowed {', '.join(SCHEDULES)}")
        self.schedule = schedule
        c = self.hw.c
        self.dram = np.zeros(dram_size, dtype=np.uint8)
        # Buffers in the word shapes of the contract; CONV/POOL reinterpret PRM bytes per lane.
        self.inp = np.zeros((self.hw.inp_depth, c), dtype=np.int8)
        self.wgt = np.zeros((self.hw.wgt_depth, c, c), dtype=np.int8)  # [word][co][ci]
        self.prm = np.zeros((self.hw.prm_depth, 9 * c), dtype=np.uint8)
        self.out = np.zeros((self.hw.out_depth, c), dtype=np.int8)
        # INP words written by a CONV with to_inp since the last CONV with wait_writes: reading one
        # before that wait is a race on the processor (WriteHazardError).
        self.inp_pending = np.zeros(self.hw.inp_depth, dtype=bool)
        self.any_pending = False  # inp_pending.any(), kept so reads need not scan it
        # The LRN block's multiplier table (LRNTAB writes it; its reset contents are zero).
        self.lrn_mult = np.zeros(LRN_TABLE_SIZE, dtype=np.int64)
        self.lrn_shift = np.zeros(LRN_TABLE_SIZE, dtype=np.int64)
        self.smx_exp = np.zeros(isa.SOFTMAX_TABLE_SIZE, dtype=np.int64)  # the softmax block's exp table
        # The output stage's activation table (ACTTAB writes it; entry y + 128 for the clamped y).
        self.act_table = np.zeros(ACT_TABLE_SIZE, dtype=np.int8)
        # The FC engine's x buffer (FC with load_x writes it; FC tiles of one layer share it).
        self.fcx = np.zeros(self.hw.fc_in_depth, dtype=np.int8)
        # The conv engine's accumulators held by a CONV with acc_keep (int32 per pixel and lane,
        # with the tile's (out_h, out_w)); None when no partial sum is held. Any CONV releases them.
        self.acc_held: tuple[tuple[int, int], np.ndarray] | None = None

    # ---- DRAM access by the host (no window checks: this is not the processor) ------------------
    def mem_write(self, addr: int, data: bytes | bytearray | np.ndarray) -> None:
        buf = np.frombuffer(bytes(data), dtype=np.uint8)
        if addr < 0 or addr + buf.size > self.dram.size:
            raise SimulationError(
                f"host write [{addr:#x}, {addr + buf.size:#x}) outside the simulated DRAM of {self.dram.size:#x} bytes")
        self.dram[addr:addr + buf.size] = buf

    def mem_read(self, addr: int, n: int) -> bytes:
        if addr < 0 or addr + n > self.dram.size:
            raise SimulationError(
                f"host read [{addr:#x}, {addr + n:#x}) outside the simulated DRAM of {self.dram.size:#x} bytes")
        return self.dram[addr:addr + n].tobytes()

    # ---- running a program ----------------------------------------------------------------------
    def run(self, program: bytes | Sequence[isa.Instruction] | None = None, *, insn_base: int,
            count: int | None = None, dma_base: int = 0, dma_limit: int | None = None) -> RunResult:
        """Write ``program`` (instruction bytes, or ``dlproc.hardware.isa`` instruction objects) to DRAM at
        ``insn_base`` (``None``: it is already there), then run ``count`` instructions (default:
        all of ``program``) with the DMA window [dma_base, dma_limit) (default: all of DRAM).

        Raises an :class:`IsaSimError` subclass for every condition that stops the hardware with an
        error code. On return FINISH has executed and every unit has drained its queue.
        """
        if program is not None:
            data = bytes(program) if isinstance(program, (bytes, bytearray)) else isa.encode_program(program)
            if len(data) % INSN_BYTES:
                raise SimulationError(f"program length {len(data)} is not a multiple of {INSN_BYTES} bytes")
            self.mem_write(insn_base, data)
            if count is None:
                count = len(data) // INSN_BYTES
        if count is None:
            raise SimulationError("run(): give the program or the instruction count")
        if dma_limit is None:
            dma_limit = self.dram.size
        self.acc_held = None  # START resets the engines' state (the buffers keep their contents)
        return _Run(self, insn_base, count, dma_base, dma_limit).execute()

    def execute_alone(self, insn: isa.Instruction, *, dma_base: int = 0, dma_limit: int | None = None) -> None:
        """Apply one instruction to the state (buffers, tables, DRAM) as its unit would, without
        the fetch, the queues or the tokens: what a check of an instruction's own reads and
        writes needs (the compiler's hazard footprints are tested this way). The checks of
        :meth:`run` apply and raise the same errors."""
        if isinstance(insn, (isa.Mark, isa.Finish)):
            raise SimulationError(f"{insn.OPCODE.name} has no effect of its own to apply; use run()")
        run = _Run(self, 0, 0, dma_base, self.dram.size if dma_limit is None else dma_limit)
        getattr(run, f"_exec_{insn.OPCODE.name.lower()}")(insn, 0)


class _Run:
    """One execution: the fetch pointer, the unit queues and the token counters."""

    def __init__(self, m: Machine, insn_base: int, count: int, dma_base: int, dma_limit: int):
        self.m = m
        self.hw = m.hw
        self.insn_base = insn_base
        self.count = count
        self.window = (dma_base, dma_limit)
        self.pc = 0
        self.fetch_done = False
        self.finished = False
        self.queues: dict[str, list[tuple[int, isa.Instruction]]] = {u: [] for u in UNITS}
        self.heads = {u: 0 for u in UNITS}
        self.tokens = {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
        self.token_max = (1 << self.hw.token_bits) - 1
        self.result = RunResult()

    # ---- scheduling -----------------------------------------------------------------------------
    def execute(self) -> RunResult:
        if self.m.schedule != "greedy":
            order = UNITS if self.m.schedule == "loads-first" else UNITS[::-1]
            return self._execute_adversarial(order)
        while True:
            progressed = False
            # Units run before fetch refills them: it keeps the queues short, which only matters
            # for finite queues, and it never hides a deadlock (a unit that can run is not stuck).
            for unit in UNITS:
                while self._can_run(unit):
                    self._step(unit)
                    progressed = True
            if self.finished and all(self._pending(u) == 0 for u in UNITS):
                self.result.tokens_left = dict(self.tokens)
                return self.result
            if not self.fetch_done and self._fetch_one():
                progressed = True
            if not progressed:
                self._deadlock()

    def _execute_adversarial(self, order: tuple[str, ...]) -> RunResult:
        while True:
            if self.finished and all(self._pending(u) == 0 for u in UNITS):
                self.result.tokens_left = dict(self.tokens)
                return self.result
            if not self.fetch_done and self._fetch_one():
                continue
            for unit in order:
                if self._can_run(unit):
                    self._step(unit)
                    break
            else:
                self._deadlock()

    def _pending(self, unit: str) -> int:
        return len(self.queues[unit]) - self.heads[unit]

    def _can_run(self, unit: str) -> bool:
        if self._pending(unit) == 0:
            return False
        _, insn = self.queues[unit][self.heads[unit]]
        return all(self.tokens[ctr] > 0 for flag, ctr in _POP[unit].items() if getattr(insn, flag))

    def _deadlock(self) -> None:
        waiting = []
        for unit in UNITS:
            if self._pending(unit):
                index, insn = self.queues[unit][self.heads[unit]]
                needs = [ctr for flag, ctr in _POP[unit].items() if getattr(insn, flag) and self.tokens[ctr] == 0]
                waiting.append(f"the {unit} unit at instruction {index} ({insn.OPCODE.name}) waits for a "
                               f"{'/'.join(needs)} token")
        state = "; ".join(waiting) if waiting else "no unit has work"
        fetch = "fetch has reached FINISH" if self.fetch_done else \
            f"fetch is stalled at instruction {self.pc} (its unit's queue is full)"
        raise DeadlockError(f"every unit with work waits on a dependency token: {state}; {fetch}; "
                            f"token counters {self.tokens}")

    def _fetch_one(self) -> bool:
        """Fetch and dispatch the next instruction; False when the target queue is full."""
        if self.pc >= self.count:
            raise RanOffEndError(f"program ran off its end: INSN_COUNT = {self.count} instructions fetched "
                                 "without a FINISH", insn_index=self.pc)
        addr = self.insn_base + self.pc * INSN_BYTES
        self._check_window(addr, INSN_BYTES, "instruction fetch", self.pc, DmaFetchError)
        raw = self.m.dram[addr:addr + INSN_BYTES].tobytes()
        try:
            insn = isa.decode(raw)
        except isa.InstructionError as exc:
            raise IllegalOpcodeError(str(exc), insn_index=self.pc) from None
        unit = insn.UNIT
        depth = self.m.queue_depth
        if depth is not None and self._pending(unit) >= depth:
            return False
        self.queues[unit].append((self.pc, insn))
        self.result.fetch_bytes += INSN_BYTES
        self.pc += 1
        if insn.OPCODE == isa.Opcode.FINISH:
            self.fetch_done = True
        return True

    def _step(self, unit: str) -> None:
        index, insn = self.queues[unit][self.heads[unit]]
        # An absent optional block is refused before anything else, as the compute unit does
        # (it does not look at the fields of an instruction it cannot execute).
        if not self.hw.has_block(insn.OPCODE):
            _, module, prop = isa.OPTIONAL_BLOCKS[insn.OPCODE]
            raise BlockAbsentError(
                f"{insn.OPCODE.name} needs a block this processor was generated without; "
                f"turn on {module}.{prop}", insn_index=index)
        # Field checks first: the hardware refuses an instruction it cannot execute before it
        # touches a token, a buffer or the bus.
        try:
            insn.check_fields()
        except isa.InstructionError as exc:
            raise IllegalFieldError(str(exc), insn_index=index) from None
        for flag, ctr in _POP[unit].items():
            if getattr(insn, flag):
                self.tokens[ctr] -= 1
        getattr(self, f"_exec_{insn.OPCODE.name.lower()}")(insn, index)
        # Tokens are given only after the instruction completed (all its writes done).
        for flag, ctr in _PUSH[unit].items():
            if getattr(insn, flag):
                if self.tokens[ctr] >= self.token_max:
                    raise TokenOverflowError(
                        f"{insn.OPCODE.name} pushes a {ctr} token but the counter is at its capacity "
                        f"{self.token_max} ({self.hw.token_bits} bits)", insn_index=index)
                self.tokens[ctr] += 1
        self.heads[unit] += 1
        self.result.executed[unit] += 1

    # ---- checks -----------------------------------------------------------------------------------
    def _check_window(self, addr: int, nbytes: int, what: str, index: int, error: type[IsaSimError]) -> None:
        lo, hi = self.window
        if addr < lo or addr + nbytes > hi:
            raise error(f"{what} touches [{addr:#x}, {addr + nbytes:#x}) outside the DMA window "
                        f"[{lo:#x}, {hi:#x})", insn_index=index)
        if addr + nbytes > self.m.dram.size:
            raise SimulationError(
                f"instruction {index}: {what} touches [{addr:#x}, {addr + nbytes:#x}) beyond the simulated "
                f"DRAM of {self.m.dram.size:#x} bytes (enlarge Machine(dram_size=...))")

    @staticmethod
    def _check_sram(buf: str, lo: int, n_words: int, depth: int, what: str, index: int) -> None:
        if lo < 0 or lo + n_words > depth:
            raise SramRangeError(
                f"{what} uses {buf} words {lo}..{lo + n_words - 1} but {buf} has {depth} words (0..{depth - 1})",
                insn_index=index)

    def _check_aligned(self, insn: isa.Instruction, index: int) -> None:
        if insn.dram_addr % self.hw.bytes_per_beat:
            raise IllegalFieldError(
                f"{insn.OPCODE.name}.dram_addr = {insn.dram_addr:#x} is not a multiple of the bus width "
                f"({self.hw.bytes_per_beat} bytes)", insn_index=index)

    def _element_addresses(self, insn: isa.Instruction, pitch: int) -> np.ndarray:
        z = np.arange(insn.z_size, dtype=np.int64)[:, None, None]
        y = np.arange(insn.y_size, dtype=np.int64)[None, :, None]
        x = np.arange(insn.x_size, dtype=np.int64)[None, None, :]
        return insn.dram_addr + (z * insn.z_stride + y * insn.y_stride + x) * pitch

    def _check_dma_extent(self, insn: isa.Instruction, pitch: int, what: str, index: int,
                          error: type[IsaSimError]) -> int:
        """Check the whole transfer against the window before moving a byte. Strides are unsigned,
        so the first and the last element bound the transfer. Returns the bytes on the bus.

        The hardware checks burst by burst and issues the bursts before the offending one; the
        error code is the same, and no program may rely on the partial transfer."""
        last = insn.dram_addr + ((insn.z_size - 1) * insn.z_stride + (insn.y_size - 1) * insn.y_stride
                                 + insn.x_size - 1) * pitch
        self._check_window(insn.dram_addr, pitch, what, index, error)
        self._check_window(last, pitch, what, index, error)
        return insn.x_size * insn.y_size * insn.z_size * pitch

    # ---- LOAD -------------------------------------------------------------------------------------
    def _exec_load(self, insn: isa.Load, index: int) -> None:
        hw = self.hw
        buf = insn.buf_name
        elem, pitch = hw.elem_bytes(buf), hw.pitch(buf)
        pt, pb, pl, pr = insn.pad_top, insn.pad_bottom, insn.pad_left, insn.pad_right
        hp, wp = insn.y_size + pt + pb, insn.x_size + pl + pr
        self._check_aligned(insn, index)
        n_words = insn.padded_words
        self._check_sram(buf, insn.sram_base, n_words, hw.depth(buf), f"LOAD {buf}", index)
        self.result.dma_read_bytes += self._check_dma_extent(insn, pitch, f"LOAD {buf}", index, DmaLoadError)
        addrs = self._element_addresses(insn, pitch)
        data = self.m.dram[addrs[..., None] + np.arange(elem)]  # (z, y, x, elem) bytes
        base = insn.sram_base
        if buf == "INP":
            block = np.full((insn.z_size, hp, wp, hw.c), insn.pad_value, dtype=np.int8)
            block[:, pt:pt + insn.y_size, pl:pl + insn.x_size] = data.view(np.int8)
            self.m.inp[base:base + n_words] = block.reshape(-1, hw.c)
        else:
            # WGT and PRM words have no padding semantics: the dense Hp x Wp block is written with
            # pad_value bytes where the pads are, exactly as for INP (the LOAD unit is shared).
            block = np.full((insn.z_size, hp, wp, elem), np.uint8(insn.pad_value & 0xFF), dtype=np.uint8)
            block[:, pt:pt + insn.y_size, pl:pl + insn.x_size] = data
            if buf == "WGT":
                self.m.wgt[base:base + n_words] = block.view(np.int8).reshape(-1, hw.c, hw.c)
            else:
                self.m.prm[base:base + n_words] = block.reshape(-1, 9 * hw.c)

    # ---- STORE ------------------------------------------------------------------------------------
    def _exec_store(self, insn: isa.Store, index: int) -> None:
        hw = self.hw
        pitch = hw.pitch("OUT")
        self._check_aligned(insn, index)
        n_words = insn.x_size * insn.y_size * insn.z_size
        self._check_sram("OUT", insn.sram_base, n_words, hw.out_depth, "STORE", index)
        self.result.dma_write_bytes += self._check_dma_extent(insn, pitch, "STORE", index, DmaStoreError)
        words = self.m.out[insn.sram_base:insn.sram_base + n_words].view(np.uint8)
        addrs = self._element_addresses(insn, pitch).reshape(-1)
        # Only the C valid bytes are enabled; the rest of each beat keeps its DRAM contents.
        self.m.dram[addrs[:, None] + np.arange(hw.c)] = words

    # ---- CONV / POOL ------------------------------------------------------------------------------
    def _params(self, word: int, what: str, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        raw = self.m.prm[word].reshape(self.hw.c, 9)
        bias = raw[:, 0:4].copy().view("<i4").reshape(-1).astype(np.int64)
        mult = raw[:, 4:6].copy().view("<u2").reshape(-1).astype(np.int64)
        mneg = raw[:, 6:8].copy().view("<u2").reshape(-1).astype(np.int64)
        shift = raw[:, 8].astype(np.int64)
        if what in ("SMXTAB", "ACTTAB"):
            return bias, mult, mneg, shift  # only the bias field is used (checked by the caller)
        if what in ("POOL", "LRNTAB"):
            # LRNTAB copies M and S only.
            # AVG uses neither the bias nor M_neg (the average of int8 values has no leaky
            # slope): the pool engine feeds M for both signs, so M_neg is not checked either.
            mneg = mult
        # The output stage has a MULT_BITS-bit multiplier and shifts by at most MAX_SHIFT; a PRM
        # word outside that cannot be executed exactly, so it is refused rather than truncated.
        if (mult >> MULT_BITS).any() or (mneg >> MULT_BITS).any() or (shift > MAX_SHIFT).any():
            raise IllegalFieldError(
                f"{what}: PRM word {word} has M or M_neg >= 2**{MULT_BITS} or S > {MAX_SHIFT}", insn_index=index)
        return bias, mult, mneg, shift

    def _check_tile(self, insn: isa.Conv | isa.Pool, index: int) -> None:
        if insn.out_h * insn.out_w > self.m.geom.acc_depth:
            raise SramRangeError(
                f"{insn.OPCODE.name} output tile {insn.out_h}x{insn.out_w} = {insn.out_h * insn.out_w} pixels "
                f"exceeds the accumulator depth {self.m.geom.acc_depth}", insn_index=index)

    @staticmethod
    def _pixel_offsets(insn: isa.Conv | isa.Pool) -> np.ndarray:
        """INP word offset of tap (0, 0) of every output pixel, row-major."""
        oy = np.arange(insn.out_h, dtype=np.int64)[:, None] * insn.stride_y * insn.in_w
        ox = np.arange(insn.out_w, dtype=np.int64)[None, :] * insn.stride_x
        return (oy + ox).reshape(-1)

    @staticmethod
    def _last_input_word(insn: isa.Conv | isa.Pool, planes: int, dil_y: int, dil_x: int) -> int:
        last_row = (insn.out_h - 1) * insn.stride_y + (insn.kh - 1) * dil_y
        last_col = (insn.out_w - 1) * insn.stride_x + (insn.kw - 1) * dil_x
        return insn.inp_base + (planes - 1) * insn.in_plane + last_row * insn.in_w + last_col

    def _check_depthwise(self, insn: isa.Conv, index: int) -> None:
        try:
            insn._check_depthwise(self.hw)
        except isa.InstructionError as exc:
            raise IllegalFieldError(str(exc), insn_index=index) from None

    def _exec_conv(self, insn: isa.Conv, index: int) -> None:
        hw, c = self.hw, self.hw.c
        self._check_table_flag(insn, index)
        self._check_tile(insn, index)
        last = self._last_input_word(insn, insn.cin_blocks, insn.dil_y, insn.dil_x)
        self._check_sram("INP", insn.inp_base, last - insn.inp_base + 1, hw.inp_depth, "CONV input", index)
        n_taps = insn.cin_blocks * insn.kh * insn.kw
        if insn.dw:
            self._check_depthwise(insn, index)
        if insn.wait_writes and self.m.any_pending:
            self.m.inp_pending[:] = False
            self.m.any_pending = False
        self._check_sram("WGT", insn.wgt_base, insn.wgt_words(), hw.wgt_depth, "CONV weights", index)
        self._check_sram("PRM", insn.prm_base, 1, hw.prm_depth, "CONV parameters", index)
        pixels = insn.out_h * insn.out_w
        held, self.m.acc_held = self.m.acc_held, None
        # The engine keeps a depthwise tile's sums in strip order, so a continuation must also
        # agree in dw and dw_rows.
        shape = (insn.out_h, insn.out_w, insn.dw, insn.dw_rows if insn.dw else 0)
        if insn.acc_in and (held is None or held[0] != shape):
            what = "no partial sums are held" if held is None else \
                f"the held partial sums are of a {held[0][0]}x{held[0][1]} tile (dw {held[0][2]}, dw_rows {held[0][3]})"
            raise IllegalFieldError(
                f"CONV.acc_in = 1 for a {insn.out_h}x{insn.out_w} tile (dw {shape[2]}, dw_rows {shape[3]}), but "
                f"{what} (acc_in continues the sums of the CONV just before, which must have acc_keep = 1, the same "
                "out_h x out_w and the same dw / dw_rows)",
                insn_index=index)
        if not insn.acc_keep:  # a held tile is never drained, so its result words are not checked
            buf = insn.result_buffer()
            self._check_sram(buf, insn.out_base, pixels, hw.depth(buf), "CONV output", index)
        bias, mult, mneg, shift = self._params(insn.prm_base, "CONV", index)

        # Gather every tap of every pixel as X[p, (cb, ky, kx), ci] -- the WGT word order -- and
        # do one matmul with W[(cb, ky, kx), ci, co]. float64 is exact: each product is below
        # 2**14 in magnitude, so sums stay below 2**53 for any reduction the fields can express.
        ky = np.arange(insn.kh, dtype=np.int64)[:, None] * insn.dil_y * insn.in_w
        kx = np.arange(insn.kw, dtype=np.int64)[None, :] * insn.dil_x
        cb = np.arange(insn.cin_blocks, dtype=np.int64)[:, None, None] * insn.in_plane
        taps = (cb + (ky + kx)[None]).reshape(-1)
        idx = insn.inp_base + self._pixel_offsets(insn)[:, None] + taps[None, :]
        self._check_written(idx, "CONV", index)
        start = held[1] if insn.acc_in else bias[None, :]
        if insn.dw:
            # Lane c of every pixel: sum over the taps of INP lane c times the tap's byte of lane c
            # in the one WGT word, [c][3*ky + (3 - kw) + kx] (docs/isa.md, "Depthwise").
            x = self.m.inp[idx].astype(np.int64)  # (pixels, taps, c)
            word = self.m.wgt[insn.wgt_base].astype(np.int64)  # [c][position]
            pos = (3 * np.arange(insn.kh)[:, None] + (isa.DW_WINDOW_COLS - insn.kw) + np.arange(insn.kw)[None, :])
            w = word[:, pos.reshape(-1)].T  # (taps, c)
            acc = wrap_int32((x * w[None]).sum(axis=1) + start)
            self.result.mac_ops += pixels * n_taps * c
        else:
            x = self.m.inp[idx].reshape(pixels, n_taps * c).astype(np.float64)
            w = self.m.wgt[insn.wgt_base:insn.wgt_base + n_taps].transpose(0, 2, 1).reshape(n_taps * c, c)
            acc = wrap_int32((x @ w.astype(np.float64)).astype(np.int64) + start)
            self.result.mac_ops += pixels * n_taps * c * c
        if insn.acc_keep:
            self.m.acc_held = (shape, acc)
            return
        out = requantize(acc, mult[None, :], shift[None, :], insn.zp_out, insn.act_min, insn.act_max,
                         mneg[None, :])
        if insn.to_inp:
            self.m.inp[insn.out_base:insn.out_base + pixels] = self._tabled(insn, out)
            self.m.inp_pending[insn.out_base:insn.out_base + pixels] = True
            self.m.any_pending = True
        else:
            self.m.out[insn.out_base:insn.out_base + pixels] = self._tabled(insn, out)

    def _check_written(self, words: np.ndarray, what: str, index: int) -> None:
        """Refuse a read of INP words whose to_inp writes no wait_writes has waited for."""
        if not self.m.any_pending:  # the usual case: no CONV writes INP
            return
        pending = self.m.inp_pending[np.asarray(words).reshape(-1)]
        if pending.any():
            first = int(np.asarray(words).reshape(-1)[int(np.argmax(pending))])
            raise WriteHazardError(
                f"{what} reads INP word {first}, which an earlier CONV with to_inp writes, and no CONV with "
                "wait_writes = 1 waited for that write (set wait_writes on the first CONV that reads it)",
                insn_index=index)

    def _exec_pool(self, insn: isa.Pool, index: int) -> None:
        hw = self.hw
        self._check_tile(insn, index)
        avg = insn.mode == isa.PoolMode.AVG
        pixels = insn.out_h * insn.out_w
        last = self._last_input_word(insn, insn.z_size, 1, 1)
        self._check_sram("INP", insn.inp_base, last - insn.inp_base + 1, hw.inp_depth, "POOL input", index)
        self._check_sram("OUT", insn.out_base, insn.z_size * pixels, hw.out_depth, "POOL output", index)
        if avg:
            self._check_sram("PRM", insn.prm_base, insn.z_size, hw.prm_depth, "POOL parameters", index)
        taps = (np.arange(insn.kh, dtype=np.int64)[:, None] * insn.in_w
                + np.arange(insn.kw, dtype=np.int64)[None, :]).reshape(-1)
        offsets = self._pixel_offsets(insn)[:, None] + taps[None, :]
        self._check_written(insn.inp_base + np.arange(last - insn.inp_base + 1), "POOL", index)
        for z in range(insn.z_size):
            win = self.m.inp[insn.inp_base + z * insn.in_plane + offsets]  # (pixels, taps, C)
            if avg:
                _, mult, _, shift = self._params(insn.prm_base + z, "POOL", index)
                s = wrap_int32(win.astype(np.int64).sum(axis=1) - insn.kh * insn.kw * insn.zp_in)
                res = requantize(s, mult[None, :], shift[None, :], insn.zp_out, insn.act_min, insn.act_max)
            else:
                res = np.clip(win.max(axis=1), insn.act_min, insn.act_max).astype(np.int8)
            o = insn.out_base + z * pixels
            self.m.out[o:o + pixels] = res

    # ---- ADD / UPSAMPLE (optional blocks) ---------------------------------------------------------
    def _exec_add(self, insn: isa.Add, index: int) -> None:
        hw = self.hw
        n = insn.count
        self._check_table_flag(insn, index)
        if insn.mul and not hw.multiply:
            raise IllegalFieldError("ADD.mul is set, but this processor has no element-wise multiply",
                                    insn_index=index)
        self._check_sram("INP", insn.inp_a, n, hw.inp_depth, "ADD operand a", index)
        self._check_sram("INP", insn.inp_b, n, hw.inp_depth, "ADD operand b", index)
        self._check_sram("OUT", insn.out_base, n, hw.out_depth, "ADD output", index)
        xa = self.m.inp[insn.inp_a:insn.inp_a + n].astype(np.int64) - insn.za
        rows = np.arange(n) if insn.b_repeat == 0 else np.arange(n) // insn.b_repeat
        self._check_written(np.r_[insn.inp_a:insn.inp_a + n, insn.inp_b + rows], "ADD", index)
        xb = self.m.inp[insn.inp_b + rows].astype(np.int64) - insn.zb
        if insn.mul:
            out = requantize(xa * xb, insn.ma, insn.shift, insn.zp_out, insn.act_min, insn.act_max)
        else:
            out = requantize(xa * insn.ma + xb * insn.mb, 1, insn.shift, insn.zp_out, insn.act_min, insn.act_max)
        self.m.out[insn.out_base:insn.out_base + n] = self._tabled(insn, out)

    def _exec_upsample(self, insn: isa.Upsample, index: int) -> None:
        hw = self.hw
        oy = np.arange(insn.out_h, dtype=np.int64)[:, None] // insn.scale_y
        ox = np.arange(insn.out_w, dtype=np.int64)[None, :] // insn.scale_x
        offsets = (oy * insn.in_w + ox).reshape(-1)
        last = insn.inp_base + (insn.z_size - 1) * insn.in_plane + int(offsets[-1])
        self._check_sram("INP", insn.inp_base, last - insn.inp_base + 1, hw.inp_depth, "UPSAMPLE input", index)
        pixels = insn.out_h * insn.out_w
        self._check_sram("OUT", insn.out_base, insn.z_size * pixels, hw.out_depth, "UPSAMPLE output", index)
        for z in range(insn.z_size):
            o = insn.out_base + z * pixels
            self.m.out[o:o + pixels] = self.m.inp[insn.inp_base + z * insn.in_plane + offsets]

    def _exec_lrntab(self, insn: isa.LrnTab, index: int) -> None:
        hw, c = self.hw, self.hw.c
        self._check_sram("PRM", insn.prm_base, insn.count, hw.prm_depth, "LRNTAB parameters", index)
        if insn.tab_base + (insn.count - 1) * c >= LRN_TABLE_SIZE:
            raise SramRangeError(f"LRNTAB word {insn.count - 1} starts at LRN table entry "
                                 f"{insn.tab_base + (insn.count - 1) * c}, but the table has {LRN_TABLE_SIZE} entries",
                                 insn_index=index)
        n = min(insn.count * c, LRN_TABLE_SIZE - insn.tab_base)  # lanes beyond the table are dropped
        mult, shift = [], []
        for w in range(insn.count):
            _, m, _, sh = self._params(insn.prm_base + w, "LRNTAB", index)
            mult.append(m)
            shift.append(sh)
        self.m.lrn_mult[insn.tab_base:insn.tab_base + n] = np.concatenate(mult)[:n]
        self.m.lrn_shift[insn.tab_base:insn.tab_base + n] = np.concatenate(shift)[:n]

    def _exec_lrn(self, insn: isa.Lrn, index: int) -> None:
        hw, c = self.hw, self.hw.c
        last = insn.inp_base + (insn.cin_blocks - 1) * insn.in_plane + insn.n_pix - 1
        self._check_sram("INP", insn.inp_base, last - insn.inp_base + 1, hw.inp_depth, "LRN input", index)
        self._check_sram("OUT", insn.out_base, insn.cin_blocks * insn.n_pix, hw.out_depth, "LRN output", index)
        nb, n = insn.cin_blocks, insn.n_pix
        rows = insn.inp_base + np.arange(nb, dtype=np.int64)[:, None] * insn.in_plane + np.arange(n)[None, :]
        x = self.m.inp[rows]  # (nb, n, C)
        d = x.astype(np.int64).transpose(1, 0, 2).reshape(n, nb * c) - insn.zp_in  # (pixel, channel)
        sq = np.where(np.arange(nb * c)[None, :] < insn.channels, d * d, 0)
        lo, hi = (insn.size - 1) // 2, insn.size // 2
        csum = np.concatenate([np.zeros((n, 1), dtype=np.int64), np.cumsum(sq, axis=1)], axis=1)
        ch = np.arange(nb * c)
        top = np.minimum(ch + hi + 1, nb * c)
        bot = np.maximum(ch - lo, 0)
        q = csum[:, top] - csum[:, bot]
        i = lrn_index(q)
        y = requantize(d, self.m.lrn_mult[i], self.m.lrn_shift[i], insn.zp_out, insn.act_min, insn.act_max)
        out = y.reshape(n, nb, c).transpose(1, 0, 2).reshape(nb * n, c)
        self.m.out[insn.out_base:insn.out_base + nb * n] = out

    def _exec_smxtab(self, insn: isa.SmxTab, index: int) -> None:
        hw, c = self.hw, self.hw.c
        size = isa.SOFTMAX_TABLE_SIZE
        self._check_sram("PRM", insn.prm_base, insn.count, hw.prm_depth, "SMXTAB parameters", index)
        if insn.tab_base + (insn.count - 1) * c >= size:
            raise SramRangeError(f"SMXTAB word {insn.count - 1} starts at exp table entry "
                                 f"{insn.tab_base + (insn.count - 1) * c}, but the table has {size} entries",
                                 insn_index=index)
        vals = np.concatenate([self._params(insn.prm_base + w, "SMXTAB", index)[0] for w in range(insn.count)])
        if (vals < 0).any() or (vals > 2**SOFTMAX_EXP_BITS).any():
            raise IllegalFieldError(f"SMXTAB: an exp table value (PRM bias) is outside 0..2**{SOFTMAX_EXP_BITS}",
                                    insn_index=index)
        n = min(insn.count * c, size - insn.tab_base)
        self.m.smx_exp[insn.tab_base:insn.tab_base + n] = vals[:n]

    def _exec_acttab(self, insn: isa.ActTab, index: int) -> None:
        hw, c = self.hw, self.hw.c
        size = ACT_TABLE_SIZE
        self._check_sram("PRM", insn.prm_base, insn.count, hw.prm_depth, "ACTTAB parameters", index)
        if insn.tab_base + (insn.count - 1) * c >= size:
            raise SramRangeError(f"ACTTAB word {insn.count - 1} starts at activation table entry "
                                 f"{insn.tab_base + (insn.count - 1) * c}, but the table has {size} entries",
                                 insn_index=index)
        vals = np.concatenate([self._params(insn.prm_base + w, "ACTTAB", index)[0] for w in range(insn.count)])
        if (vals < -128).any() or (vals > 127).any():
            raise IllegalFieldError("ACTTAB: an activation table entry (PRM bias) is outside -128..127",
                                    insn_index=index)
        n = min(insn.count * c, size - insn.tab_base)
        self.m.act_table[insn.tab_base:insn.tab_base + n] = vals[:n]

    def _check_table_flag(self, insn: isa.Instruction, index: int) -> None:
        # The engines refuse act_table on a processor without the table (ILLEGAL_FIELD at accept,
        # before anything is written), so does the simulator.
        if insn.act_table and not self.hw.act_table:  # type: ignore[attr-defined]
            raise IllegalFieldError(f"{insn.OPCODE.name}.act_table is set, but this processor has no activation "
                                    "table", insn_index=index)

    def _tabled(self, insn: isa.Instruction, out: np.ndarray) -> np.ndarray:
        """The output stage's last step: results of an instruction with act_table through the table."""
        if not insn.act_table:  # type: ignore[attr-defined]
            return out
        return self.m.act_table[out.astype(np.int64) + 128]

    def _exec_softmax(self, insn: isa.Softmax, index: int) -> None:
        hw, c = self.hw, self.hw.c
        last = insn.inp_base + (insn.cin_blocks - 1) * insn.in_plane + insn.n_pix - 1
        self._check_sram("INP", insn.inp_base, last - insn.inp_base + 1, hw.inp_depth, "SOFTMAX input", index)
        self._check_sram("OUT", insn.out_base, insn.cin_blocks * insn.n_pix, hw.out_depth, "SOFTMAX output", index)
        nb, n = insn.cin_blocks, insn.n_pix
        rows = insn.inp_base + np.arange(nb, dtype=np.int64)[:, None] * insn.in_plane + np.arange(n)[None, :]
        x = self.m.inp[rows].astype(np.int64).transpose(1, 0, 2).reshape(n, nb * c)  # (pixel, channel)
        valid = np.arange(nb * c)[None, :] < insn.channels
        mx = np.where(valid, x, -128).max(axis=1, keepdims=True)
        e = np.where(valid, self.m.smx_exp[np.clip(mx - x, 0, 255)], 0)
        recip = (np.int64(1) << SOFTMAX_RECIP_BITS) // e.sum(axis=1, keepdims=True)
        y = ((e * recip + (np.int64(1) << (SOFTMAX_OUT_SHIFT - 1))) >> SOFTMAX_OUT_SHIFT) - 128
        y = np.clip(y, -128, 127).astype(np.int8)
        self.m.out[insn.out_base:insn.out_base + nb * n] = y.reshape(n, nb, c).transpose(1, 0, 2).reshape(nb * n, c)

    # ---- FC (fc module) -----------------------------------------------------------------------------
    def _exec_fc(self, insn: isa.Fc, index: int) -> None:
        """``isa.Fc``: optional x copy, then one dot product of S weight slices per output."""
        hw, c = self.hw, self.hw.c
        f = hw.fc_lanes
        per_word = (c * c) // f
        if insn.n_out > hw.fc_out_max:
            raise IllegalFieldError(f"FC.n_out = {insn.n_out} exceeds fc.OutputMemorySize ({hw.fc_out_max})",
                                    insn_index=index)
        if insn.n_in > hw.fc_in_depth:
            raise SramRangeError(f"FC.n_in = {insn.n_in} exceeds the x buffer of {hw.fc_in_depth} elements "
                                 "(fc.InputMemorySize)", insn_index=index)
        if insn.lane0 >= c:
            raise IllegalFieldError(f"FC.lane0 = {insn.lane0} is not a lane (allowed 0..{c - 1})", insn_index=index)
        s_per = -(-insn.n_in // f)
        lo = insn.lane0  # outputs start at this lane of the first word; the lanes before it are kept
        blocks = -(-(lo + insn.n_out) // c)
        n_words = -(-(insn.n_out * s_per) // per_word)
        if insn.load_x:
            self._check_sram("INP", insn.inp_base, -(-insn.n_in // c), hw.inp_depth, "FC input", index)
        self._check_sram("WGT", insn.wgt_base, n_words, hw.wgt_depth, "FC weights", index)
        self._check_sram("PRM", insn.prm_base, blocks, hw.prm_depth, "FC parameters", index)
        self._check_sram("OUT", insn.out_base, blocks, hw.out_depth, "FC output", index)
        params = [self._params(insn.prm_base + b, "FC", index) for b in range(blocks)]
        if insn.load_x:
            k = -(-insn.n_in // c)
            xs = self.m.inp[insn.inp_base:insn.inp_base + k].reshape(-1)
            n = min(xs.size, hw.fc_in_depth)
            self.m.fcx[:n] = xs[:n]
        # The weight stream: WGT words as bytes, K slices of F bytes each (the tail of a word unused).
        words = self.m.wgt[insn.wgt_base:insn.wgt_base + n_words].reshape(n_words, c * c)
        slices = words[:, :per_word * f].reshape(n_words * per_word, f)[:insn.n_out * s_per]
        w = slices.reshape(insn.n_out, s_per * f)[:, :insn.n_in].astype(np.int64)
        x = self.m.fcx[:insn.n_in].astype(np.int64)
        bias = np.concatenate([p[0] for p in params])
        mult = np.concatenate([p[1] for p in params])
        mneg = np.concatenate([p[2] for p in params])
        shift = np.concatenate([p[3] for p in params])
        acc = bias.copy()
        acc[lo:lo + insn.n_out] = wrap_int32(w @ x + bias[lo:lo + insn.n_out])
        out = self._tabled(insn, requantize(acc, mult, shift, insn.zp_out, insn.act_min, insn.act_max, mneg))
        self.m.out[insn.out_base:insn.out_base + blocks].reshape(-1)[lo:] = out[lo:]
        self.result.mac_ops += insn.n_out * s_per * f

    # ---- MARK / FINISH ----------------------------------------------------------------------------
    def _exec_mark(self, insn: isa.Mark, index: int) -> None:
        if insn.index >= self.hw.profile_depth:
            raise IllegalFieldError(f"MARK.index = {insn.index} is out of range; allowed "
                                    f"0..{self.hw.profile_depth - 1}", insn_index=index)
        self.result.marks.append(insn.index)

    def _exec_finish(self, insn: isa.Finish, index: int) -> None:
        self.finished = True


# --------------------------------------------------------------------------------------------
# Single-layer programs
# --------------------------------------------------------------------------------------------
def run_on_isasim(prog: Any, machine: Machine | None = None, **machine_kw: Any) -> tuple[np.ndarray, RunResult]:
    """Run a single-layer program (``dlproc.compiler.layerprog.LayerProgram``) on the ISA simulator;
    returns the decoded output and the run's statistics."""
    if machine is None:
        size = -(-(prog.dma_limit + 64) // 4096) * 4096  # DRAM rounded up to whole 4 KiB pages
        machine = Machine(geometry=prog.geometry, dram_size=size, **machine_kw)
    machine.mem_write(prog.dram_base, prog.image)
    res = machine.run(None, insn_base=prog.insn_base, count=prog.insn_count, dma_base=prog.dma_base,
                      dma_limit=prog.dma_limit)
    return prog.read_output(machine.dram[prog.output_addr:prog.output_addr + prog.output_bytes],
                            base=prog.output_addr), res
