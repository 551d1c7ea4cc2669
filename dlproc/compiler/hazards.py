"""Happens-before hazard checking of instruction streams.

The processor guarantees only this order between instructions (``docs/isa.md``, VTA semantics):

* each unit (load, compute, store) runs its instructions in program order, one after another;
* a pop waits for a push: the k-th pop of a counter (L2C, C2L, C2S, S2C) in its consumer's order
  takes the token of the k-th push in its producer's order, which is given when the pushing
  instruction has completed.

Everything else may overlap. :class:`Tracker` builds that partial order as vector clocks (one
component per unit: the position of the latest instruction of that unit that happens before, so
``a`` happens before ``b`` exactly when ``clock[b][unit(a)] >= pos(a)``), computes what every
instruction reads and writes -- INP/WGT/PRM/OUT words and DRAM beats (:func:`footprint`) -- and
reports every pair of conflicting accesses (read-after-write, write-after-read, write-after-write)
that the order does not separate. It works like a vector-clock race detector: instructions are
taken in a linearization of the order, and per buffer word and DRAM beat it keeps the last writer
and, per unit, the last reader since that write; checking a new access against those alone finds a
conflict whenever one exists (the older accesses are ordered before them, or were reported).

:func:`check_program` checks a whole stream: it also reports pops without a matching push (the
program deadlocks, also when fetch stalls on a full instruction queue), counters left non-zero at
the end, and counters that some execution would push beyond ``2**token_bits - 1``. The linker (:mod:`.program`) uses the
:class:`Tracker` incrementally to decide which tokens join two operations.

Compute-internal state (the LRN and softmax tables, the FC engine's x buffer) is written and read
by the compute unit only, in its program order, so it needs no checking. Instruction fetch reads
the instruction region, which no STORE may write (the compiler checks the regions).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from dlproc.hardware import isa
from dlproc.hardware.geometry import Geometry

__all__ = ["Hazard", "Tracker", "Unordered", "footprint", "check_program", "assert_no_hazards", "HazardError"]

UNITS = ("load", "compute", "store")
_U = {u: k for k, u in enumerate(UNITS)}
BUFFERS = ("INP", "WGT", "PRM", "OUT")

#: counter -> (flag on the producer, producer unit, flag on the consumer, consumer unit)
QUEUES = {
    "L2C": ("push_next", "load", "pop_prev", "compute"),
    "C2L": ("push_prev", "compute", "pop_next", "load"),
    "C2S": ("push_next", "compute", "pop_prev", "store"),
    "S2C": ("push_prev", "store", "pop_next", "compute"),
}


class HazardError(AssertionError):
    """A stream whose token order does not separate conflicting accesses (a compiler bug)."""


@dataclass(frozen=True)
class Hazard:
    """One problem of a stream. ``kind``: RAW/WAR/WAW (``first``/``second`` conflict on ``space``
    at ``where`` -- a buffer word or DRAM byte address -- and are unordered), ``deadlock``,
    ``unbalanced``, ``overflow``, ``chain`` (a broken partial-sum chain of CONVs) or ``drain`` (a read
    of words a to_inp CONV writes, with no wait_writes between)."""

    kind: str
    first: int
    second: int
    space: str = ""
    where: int = -1
    detail: str = ""

    def __str__(self) -> str:
        if self.kind in ("RAW", "WAR", "WAW"):
            return (f"{self.kind} on {self.space} {'byte' if self.space == 'DRAM' else 'word'} {self.where:#x}: "
                    f"instructions {self.first} and {self.second} are not ordered by the tokens")
        return f"{self.kind}: {self.detail}"


# --------------------------------------------------------------------------------------------
# Footprints
# --------------------------------------------------------------------------------------------
Access = tuple  # (space, lo, hi) for a buffer word range; ("DRAM", beats ndarray) for DRAM


def _dram_beats(insn: isa.Load | isa.Store, geom: Geometry, buf: str) -> np.ndarray:
    """The bus beats of a strided transfer (every element starts on a beat and takes pitch bytes)."""
    b = geom.bus_bytes
    pitch = geom.pitch(buf)
    z = np.arange(insn.z_size, dtype=np.int64)[:, None, None]
    y = np.arange(insn.y_size, dtype=np.int64)[None, :, None]
    x = np.arange(insn.x_size, dtype=np.int64)[None, None, :]
    first = (insn.dram_addr // b + (z * insn.z_stride + y * insn.y_stride + x) * (pitch // b)).reshape(-1)
    if pitch == b:
        return first
    return (first[:, None] + np.arange(pitch // b, dtype=np.int64)[None, :]).reshape(-1)


def _window_end(insn: isa.Conv | isa.Pool, planes: int, dil_y: int, dil_x: int) -> int:
    last_row = (insn.out_h - 1) * insn.stride_y + (insn.kh - 1) * dil_y
    last_col = (insn.out_w - 1) * insn.stride_x + (insn.kw - 1) * dil_x
    return insn.inp_base + (planes - 1) * insn.in_plane + last_row * insn.in_w + last_col + 1


def footprint(insn: isa.Instruction, geom: Geometry) -> tuple[list[Access], list[Access]]:
    """(reads, writes) of one instruction: ``(buffer, lo, hi)`` word ranges (bounding ranges of what
    the instruction touches) and ``("DRAM", beats)`` arrays of bus-beat indices."""
    c = geom.c
    if isinstance(insn, isa.Load):
        return [("DRAM", _dram_beats(insn, geom, insn.buf_name))], \
               [(insn.buf_name, insn.sram_base, insn.sram_base + insn.padded_words)]
    if isinstance(insn, isa.Store):
        n = insn.x_size * insn.y_size * insn.z_size
        return [("OUT", insn.sram_base, insn.sram_base + n)], [("DRAM", _dram_beats(insn, geom, "OUT"))]
    if isinstance(insn, isa.Conv):
        return [("INP", insn.inp_base, _window_end(insn, insn.cin_blocks, insn.dil_y, insn.dil_x)),
                ("WGT", insn.wgt_base, insn.wgt_base + insn.wgt_words()),
                ("PRM", insn.prm_base, insn.prm_base + 1)], \
               ([] if insn.acc_keep else [(insn.result_buffer(), insn.out_base, insn.out_base + insn.out_h * insn.out_w)])
    if isinstance(insn, isa.Pool):
        reads = [("INP", insn.inp_base, _window_end(insn, insn.z_size, 1, 1))]
        if insn.mode == isa.PoolMode.AVG:
            reads.append(("PRM", insn.prm_base, insn.prm_base + insn.z_size))
        return reads, [("OUT", insn.out_base, insn.out_base + insn.z_size * insn.out_h * insn.out_w)]
    if isinstance(insn, isa.Add):
        n = insn.count
        return [("INP", insn.inp_a, insn.inp_a + n), ("INP", insn.inp_b, insn.inp_b + n)], \
               [("OUT", insn.out_base, insn.out_base + n)]
    if isinstance(insn, isa.Upsample):
        last = insn.inp_base + (insn.z_size - 1) * insn.in_plane + ((insn.out_h - 1) // insn.scale_y) * insn.in_w \
            + (insn.out_w - 1) // insn.scale_x
        return [("INP", insn.inp_base, last + 1)], \
               [("OUT", insn.out_base, insn.out_base + insn.z_size * insn.out_h * insn.out_w)]
    if isinstance(insn, (isa.LrnTab, isa.SmxTab, isa.ActTab)):
        return [("PRM", insn.prm_base, insn.prm_base + insn.count)], []
    if isinstance(insn, (isa.Lrn, isa.Softmax)):
        end = insn.inp_base + (insn.cin_blocks - 1) * insn.in_plane + insn.n_pix
        return [("INP", insn.inp_base, end)], [("OUT", insn.out_base, insn.out_base + insn.cin_blocks * insn.n_pix)]
    if isinstance(insn, isa.Fc):
        f = geom.hw.fc_lanes
        blocks = -(-insn.n_out // c)
        n_words = -(-(insn.n_out * -(-insn.n_in // f)) // ((c * c) // f))
        reads = [("INP", insn.inp_base, insn.inp_base + -(-insn.n_in // c))] if insn.load_x else []
        reads += [("WGT", insn.wgt_base, insn.wgt_base + n_words), ("PRM", insn.prm_base, insn.prm_base + blocks)]
        return reads, [("OUT", insn.out_base, insn.out_base + blocks)]
    if isinstance(insn, (isa.Mark, isa.Finish)):
        return [], []
    raise TypeError(f"hazards.footprint: no footprint for {type(insn).__name__}")


# --------------------------------------------------------------------------------------------
# The incremental tracker
# --------------------------------------------------------------------------------------------
class Unordered(Exception):
    """Raised by :meth:`Tracker.append` when an access conflicts with an unordered earlier one."""

    def __init__(self, conflicts: list[Hazard]):
        super().__init__(str(conflicts[0]) if conflicts else "conflict")
        self.conflicts = conflicts


class _Shadow:
    """Per word (or DRAM beat) of one space: the last writer and, per unit, the last reader since."""

    def __init__(self, size: int, offset: int = 0):
        self.offset = offset
        self.last_w = np.full(size, -1, dtype=np.int32)  # instruction indices (-1: none)
        self.last_r = np.full((3, size), -1, dtype=np.int32)


class Tracker:
    """The partial order and the shadow memory of a stream built instruction by instruction.

    :meth:`append` takes instructions in a linearization of the order (every pop's matching push
    already appended; a stream in which every token's producer precedes its consumer qualifies)
    and raises :class:`Unordered` for a conflict, or adds it to the ``collect`` list.
    :meth:`checkpoint` / :meth:`rollback` undo appends and flag changes (the linker's trial joins).
    """

    def __init__(self, geom: Geometry, dram_beats: tuple[int, int] = (0, 0)):
        self.geom = geom
        self.insns: list[isa.Instruction] = []
        self.unit: list[int] = []
        self.pos: list[int] = []  #: 1-based position in the unit's order
        self.prog: list[int] = []  #: index in the program (the caller's numbering)
        self.clock: list[np.ndarray] = []
        self.by_unit: list[list[int]] = [[], [], []]  #: instruction indices per unit, in order
        self.pushes: dict[str, list[int]] = {q: [] for q in QUEUES}
        self.pops: dict[str, list[int]] = {q: [] for q in QUEUES}
        self.shadow = {b: _Shadow(geom.depth(b)) for b in BUFFERS}
        lo, hi = dram_beats
        self.shadow["DRAM"] = _Shadow(max(hi - lo, 0), lo)
        self._log: list[tuple] | None = None
        self._unit_arr = np.zeros(1024, dtype=np.int64)  #: numpy copies of unit/pos for vector lookups
        self._pos_arr = np.zeros(1024, dtype=np.int64)

    # -- order ----------------------------------------------------------------------------------
    def outstanding(self, q: str) -> int:
        return len(self.pushes[q]) - len(self.pops[q])

    def clock_of(self, insn: isa.Instruction) -> np.ndarray:
        """The vector clock ``insn`` would get if appended now (its pops' pushes must be appended)."""
        u = _U[insn.UNIT]
        clk = self.clock[self.by_unit[u][-1]].copy() if self.by_unit[u] else np.zeros(3, dtype=np.int64)
        for q, (_, _, pop_flag, cons) in QUEUES.items():
            if cons != insn.UNIT or not getattr(insn, pop_flag):
                continue
            k = len(self.pops[q])
            if k >= len(self.pushes[q]):
                raise Unordered([Hazard("deadlock", -1, len(self.insns), detail=(
                    f"instruction {len(self.insns)} ({insn.OPCODE.name}) pops {q} token {k} before its push "
                    "is in the stream"))])
            np.maximum(clk, self.clock[self.pushes[q][k]], out=clk)
        clk[u] = len(self.by_unit[u]) + 1
        return clk

    # -- accesses -------------------------------------------------------------------------------
    def _index(self, acc: Access) -> tuple[_Shadow, np.ndarray | slice, int]:
        if acc[0] == "DRAM":
            sh = self.shadow["DRAM"]
            idx = acc[1] - sh.offset
            if idx.size and (idx.min() < 0 or idx.max() >= sh.last_w.size):
                self._grow(int(acc[1].min()), int(acc[1].max()) + 1)
                sh = self.shadow["DRAM"]
                idx = acc[1] - sh.offset
            return sh, idx, self.geom.bus_bytes
        sh = self.shadow[acc[0]]
        return sh, slice(acc[1], acc[2]), 1

    def _grow(self, lo: int, hi: int) -> None:
        old = self.shadow["DRAM"]
        n_old = old.last_w.size
        new_lo = min(lo, old.offset) if n_old else lo
        new_hi = max(hi, old.offset + n_old) if n_old else hi
        new = _Shadow(new_hi - new_lo, new_lo)
        at = old.offset - new_lo
        new.last_w[at:at + n_old] = old.last_w
        new.last_r[:, at:at + n_old] = old.last_r
        self.shadow["DRAM"] = new
        if self._log is not None:
            self._log.append(("grow", old))

    def _unordered(self, ids: np.ndarray, clk: np.ndarray) -> np.ndarray:
        ids = np.unique(ids[ids >= 0])
        if not ids.size:
            return ids
        return ids[clk[self._unit_arr[ids]] < self._pos_arr[ids]]

    def conflicts(self, insn: isa.Instruction, clk: np.ndarray, fp: tuple | None = None) -> list[Hazard]:
        reads, writes = fp if fp is not None else footprint(insn, self.geom)
        me = len(self.insns)
        out = []
        for acc in reads:
            sh, idx, scale = self._index(acc)
            for a in self._unordered(sh.last_w[idx], clk):
                out.append(self._hazard("RAW", int(a), me, acc[0], sh, idx, sh.last_w, scale))
        for acc in writes:
            sh, idx, scale = self._index(acc)
            for a in self._unordered(sh.last_w[idx], clk):
                out.append(self._hazard("WAW", int(a), me, acc[0], sh, idx, sh.last_w, scale))
            for u in range(3):
                for a in self._unordered(sh.last_r[u][idx], clk):
                    out.append(self._hazard("WAR", int(a), me, acc[0], sh, idx, sh.last_r[u], scale))
        return out

    @staticmethod
    def _hazard(kind: str, a: int, b: int, space: str, sh: _Shadow, idx, arr: np.ndarray, scale: int) -> Hazard:
        sel = np.flatnonzero(arr[idx] == a)
        first = int(sel[0]) if sel.size else 0
        if isinstance(idx, slice):
            where = idx.start + first
        else:
            where = (int(idx[first]) + sh.offset) * scale
        return Hazard(kind, a, b, space, where)

    def _commit_access(self, acc: Access, me: int, u: int, write: bool) -> None:
        sh, idx, _ = self._index(acc)
        if self._log is not None:
            self._log.append(("shadow", sh, idx, sh.last_w[idx].copy(), sh.last_r[:, idx].copy()))
        if write:
            sh.last_w[idx] = me
            sh.last_r[:, idx] = -1
        else:
            sh.last_r[u, idx] = me

    # -- building -------------------------------------------------------------------------------
    def append(self, insn: isa.Instruction, *, collect: list[Hazard] | None = None,
               clk: np.ndarray | None = None, prog: int | None = None) -> int:
        """Append ``insn``; raise :class:`Unordered` on a conflict (or add it to ``collect``)."""
        clk = self.clock_of(insn) if clk is None else clk
        fp = footprint(insn, self.geom)
        bad = self.conflicts(insn, clk, fp)
        if bad:
            if collect is None:
                raise Unordered(bad)
            collect.extend(bad)
        me = len(self.insns)
        u = _U[insn.UNIT]
        for acc in fp[0]:
            self._commit_access(acc, me, u, False)
        for acc in fp[1]:
            self._commit_access(acc, me, u, True)
        for q, (push_flag, prod, pop_flag, cons) in QUEUES.items():
            if cons == insn.UNIT and getattr(insn, pop_flag):
                self.pops[q].append(me)
            if prod == insn.UNIT and getattr(insn, push_flag):
                self.pushes[q].append(me)
        self.insns.append(insn)
        self.unit.append(u)
        self.by_unit[u].append(me)
        self.pos.append(len(self.by_unit[u]))
        self.prog.append(me if prog is None else prog)
        self.clock.append(clk)
        if me >= self._unit_arr.size:
            self._unit_arr = np.concatenate([self._unit_arr, np.zeros_like(self._unit_arr)])
            self._pos_arr = np.concatenate([self._pos_arr, np.zeros_like(self._pos_arr)])
        self._unit_arr[me] = u
        self._pos_arr[me] = self.pos[me]
        if self._log is not None:
            self._log.append(("insn", insn, u))
        return me

    def set_flag(self, i: int, flag: str) -> None:
        """Set a push flag on appended instruction ``i``: it must be the newest push of its counter
        in its unit's order (so that it pairs with the next pop)."""
        insn = self.insns[i]
        q = next(q for q, (pf, prod, _, _) in QUEUES.items() if pf == flag and prod == insn.UNIT)
        if getattr(insn, flag) or (self.pushes[q] and self.pos[self.pushes[q][-1]] >= self.pos[i]):
            raise ValueError(f"instruction {i} cannot give the next {q} token")
        self.mark_flag(insn, flag)
        self.pushes[q].append(i)
        if self._log is not None:
            self._log.append(("push", q))

    def mark_flag(self, insn: isa.Instruction, flag: str) -> None:
        if self._log is not None:
            self._log.append(("flag", insn, flag, getattr(insn, flag)))
        setattr(insn, flag, True)

    def checkpoint(self) -> None:
        if self._log is not None:
            raise RuntimeError("Tracker: nested checkpoint")
        self._log = []

    def commit(self) -> None:
        self._log = None

    def rollback(self) -> None:
        log, self._log = self._log, None
        for entry in reversed(log or []):
            kind = entry[0]
            if kind == "shadow":
                _, sh, idx, w, r = entry
                sh.last_w[idx] = w
                sh.last_r[:, idx] = r
            elif kind == "grow":
                self.shadow["DRAM"] = entry[1]
            elif kind == "insn":
                _, insn, u = entry
                me = len(self.insns) - 1
                for q, (push_flag, prod, pop_flag, cons) in QUEUES.items():
                    if self.pops[q] and self.pops[q][-1] == me:
                        self.pops[q].pop()
                    if self.pushes[q] and self.pushes[q][-1] == me:
                        self.pushes[q].pop()
                self.insns.pop()
                self.unit.pop()
                self.by_unit[u].pop()
                self.pos.pop()
                self.prog.pop()
                self.clock.pop()
            elif kind == "push":
                self.pushes[entry[1]].pop()
            elif kind == "flag":
                _, insn, flag, old = entry
                setattr(insn, flag, old)


# --------------------------------------------------------------------------------------------
# Whole-program check
# --------------------------------------------------------------------------------------------
def _linearize(insns: list[isa.Instruction], queue_depth: int | None) -> tuple[list[int], list[Hazard]]:
    """A linearization of the order, from executing the stream with in-order fetch into
    ``queue_depth``-entry unit queues (``None``: unbounded) and every unit running whenever its
    head has its tokens; the deadlock found if that cannot run every instruction. Blocking is
    monotone (running an instruction never stops another), so this greedy execution finishes
    whenever any execution does."""
    queues: list[deque] = [deque(), deque(), deque()]
    pushed = {q: 0 for q in QUEUES}
    popped = {q: 0 for q in QUEUES}
    order: list[int] = []
    pc = 0

    def ready(insn: isa.Instruction) -> bool:
        return all(popped[q] < pushed[q] for q, (_, _, pf, cons) in QUEUES.items()
                   if cons == insn.UNIT and getattr(insn, pf))

    while True:
        progressed = False
        for u in range(3):
            while queues[u] and ready(insns[queues[u][0]]):
                i = queues[u].popleft()
                insn = insns[i]
                for q, (pf, prod, cf, cons) in QUEUES.items():
                    if cons == insn.UNIT and getattr(insn, cf):
                        popped[q] += 1
                    if prod == insn.UNIT and getattr(insn, pf):
                        pushed[q] += 1
                order.append(i)
                progressed = True
        while pc < len(insns):
            u = _U[insns[pc].UNIT]
            if queue_depth is not None and len(queues[u]) >= queue_depth:
                break
            queues[u].append(pc)
            pc += 1
            progressed = True
            if queues[u] and ready(insns[queues[u][0]]):
                break  # let the units run before fetching further (keeps the queues short)
        if not progressed:
            break
    problems = []
    if len(order) < len(insns):
        heads = [f"the {UNITS[u]} unit at instruction {queues[u][0]} ({insns[queues[u][0]].OPCODE.name})"
                 for u in range(3) if queues[u]]
        stall = f"; fetch is stalled at instruction {pc} (its queue is full)" if pc < len(insns) else ""
        problems.append(Hazard("deadlock", -1, queues[0][0] if queues[0] else pc, detail=(
            f"{len(insns) - len(order)} instructions never run: " + ", ".join(heads) + " waits for a token" + stall)))
    return order, problems


def check_program(geom: Geometry, insns: list[isa.Instruction], *, queue_depth: int | None = -1) -> list[Hazard]:
    """Every hazard of a complete stream (empty when it is correctly synchronised). The deadlock
    check fetches into ``queue_depth``-entry queues (default the configuration's
    ``HardwareParams.queue_depth``; ``None`` unbounded)."""
    depth = geom.hw.queue_depth if queue_depth == -1 else queue_depth
    order, problems = _linearize(insns, depth)
    if problems:
        return problems
    problems += _chain_problems(insns)
    problems += _drain_problems(insns, geom)
    # Token bookkeeping: balance, stream order of producers/consumers, worst-case counter values.
    push_list: dict[str, list[int]] = {q: [] for q in QUEUES}
    pop_list: dict[str, list[int]] = {q: [] for q in QUEUES}
    for i, insn in enumerate(insns):
        for q, (pf, prod, cf, cons) in QUEUES.items():
            if prod == insn.UNIT and getattr(insn, pf):
                push_list[q].append(i)
            if cons == insn.UNIT and getattr(insn, cf):
                pop_list[q].append(i)
    for q in QUEUES:
        if len(push_list[q]) != len(pop_list[q]):
            problems.append(Hazard("unbalanced", -1, -1, detail=(
                f"{len(push_list[q])} {q} pushes but {len(pop_list[q])} pops: the counter is not zero at FINISH")))
    # Replay in the linearization with a tracker that has room for every DRAM beat.
    lo, hi = None, None
    for insn in insns:
        if isinstance(insn, (isa.Load, isa.Store)):
            beats = footprint(insn, geom)[0 if isinstance(insn, isa.Load) else 1][0][1]
            if beats.size:
                lo = int(beats.min()) if lo is None else min(lo, int(beats.min()))
                hi = int(beats.max()) + 1 if hi is None else max(hi, int(beats.max()) + 1)
    tr = Tracker(geom, (lo or 0, hi or 0))
    index_of: list[int] = []
    for i in order:
        before = len(problems)
        tr.append(insns[i], collect=problems, prog=i)
        for k in range(before, len(problems)):  # tracker indices -> stream indices
            h = problems[k]
            problems[k] = Hazard(h.kind, index_of[h.first] if h.first >= 0 else h.first, i, h.space, h.where)
        index_of.append(i)
    # Worst-case counters: when the k-th push completes, at most the pops ordered before it are done.
    cap = (1 << geom.hw.token_bits) - 1
    pos_in_tracker = {i: t for t, i in enumerate(order)}
    for q, (_, prod, _, cons) in QUEUES.items():
        pops_pos = np.array([tr.pos[pos_in_tracker[c]] for c in pop_list[q]], dtype=np.int64)
        cu = _U[cons]
        worst = 0
        for k, p in enumerate(push_list[q]):
            done = int(np.searchsorted(pops_pos, tr.clock[pos_in_tracker[p]][cu], side="right"))
            worst = max(worst, k + 1 - done)
        if worst > cap:
            problems.append(Hazard("overflow", -1, -1, detail=(
                f"the {q} counter can reach {worst}, beyond {cap} ({geom.hw.token_bits}-bit counters)")))
    return problems


def _chain_problems(insns: list[isa.Instruction]) -> list[Hazard]:
    """Partial-sum chains: the compute unit runs its instructions in order and only CONVs touch
    the accumulator, so a CONV with acc_in must directly follow (among the CONVs) one with
    acc_keep of the same tile shape, and a held tile must be continued before anything else
    reuses the accumulator or the program finishes."""
    problems: list[Hazard] = []
    held: int | None = None
    for i, insn in enumerate(insns):
        if isinstance(insn, isa.Conv):
            if insn.acc_in:
                prev = insns[held] if held is not None else None
                if prev is None or (prev.out_h, prev.out_w) != (insn.out_h, insn.out_w):
                    problems.append(Hazard("chain", -1 if held is None else held, i, detail=(
                        f"CONV {i} continues partial sums (acc_in) but "
                        + ("no CONV before it holds any" if held is None else
                           f"CONV {held} holds a {prev.out_h}x{prev.out_w} tile, not {insn.out_h}x{insn.out_w}"))))
            elif held is not None:
                problems.append(Hazard("chain", held, i, detail=(
                    f"CONV {i} starts a new sum while CONV {held}'s partial sums (acc_keep) are held")))
            held = i if insn.acc_keep else None
        elif isinstance(insn, isa.Finish) and held is not None:
            problems.append(Hazard("chain", held, i, detail=f"FINISH while CONV {held}'s partial sums are held"))
    return problems


def _drain_problems(insns: list[isa.Instruction], geom: Geometry) -> list[Hazard]:
    """Results to INP: the conv engine's drain writes a to_inp CONV's words after later compute
    instructions may already read INP, so a compute instruction that reads words a to_inp CONV
    wrote needs a CONV with wait_writes at or after the writer and at or before itself."""
    problems: list[Hazard] = []
    if not any(isinstance(insn, isa.Conv) and insn.to_inp for insn in insns):
        return problems
    pending: list[tuple[int, int, int]] = []  # (writer, lo, hi) not yet waited for
    for i, insn in enumerate(insns):
        if isinstance(insn, isa.Conv) and insn.wait_writes:
            pending = []
        if getattr(insn, "UNIT", None) != "compute":
            continue
        reads, writes = footprint(insn, geom)
        for space, lo, hi in (r for r in reads if r[0] == "INP"):
            for w, wlo, whi in pending:
                if lo < whi and wlo < hi:
                    problems.append(Hazard("drain", w, i, detail=(
                        f"instruction {i} reads INP words [{max(lo, wlo)}, {min(hi, whi)}) that CONV {w} writes "
                        "with to_inp, with no CONV with wait_writes in between")))
                    break
        for space, lo, hi in writes:
            if space == "INP" and isinstance(insn, isa.Conv):
                pending.append((i, lo, hi))
    return problems


def assert_no_hazards(geom: Geometry, insns: list[isa.Instruction], what: str = "program") -> None:
    problems = check_program(geom, insns)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise HazardError(f"{what}: " + "; ".join(str(p) for p in problems[:5]) + more)
