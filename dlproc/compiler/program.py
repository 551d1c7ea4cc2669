"""Linking per-operation instruction lists into one network program.

Each operation's instructions come from layerprog (tiling, double buffering and its own token
schedule, which leaves every token counter at zero when the operation ends). The linker appends
them one operation after the other to a :class:`.hazards.Tracker`, which knows the order the
hardware guarantees (each unit in program order, a pop after its push) and every instruction's
buffer words and DRAM beats, and joins consecutive operations in one of two ways:

**Weak join** (tried first). Operation i+1's instructions are appended as they are; whenever one
conflicts with an earlier instruction it is not ordered after (a read of a word or beat an
unordered instruction writes, or a write of one it reads or writes), one token pair is added:

* a LOAD (overwriting INP/WGT/PRM words that operation i's computes still read, or reading DRAM
  that an earlier STORE writes) pops a C2L token pushed by the earliest compute instruction that
  follows every conflicting compute instruction and, through its own waits, every conflicting
  STORE -- typically one of operation i's last compute instructions, so operation i+1's first
  loads run while operation i computes its last tile and drains its stores;
* a compute instruction (overwriting OUT words that operation i's STOREs still read) pops an S2C
  token pushed by the earliest STORE at or after every conflicting one.

A pushing instruction must be the newest push of its counter and no token of that counter may be
outstanding, so the added pop pairs with exactly that push (VTA counters pair the k-th pop with the
k-th push) and operation i's own pairs are undisturbed; when the conflicting instruction cannot
take the pop itself (its counter has tokens of its own operation outstanding), the stream is
retried with the pop on the operation's first LOAD / compute instruction. Every added pair is
balanced and its producer precedes its consumer in the stream, so the counters end at zero and
the pair adds no deadlock at any queue depth (the compiler's final :func:`.hazards.check_program`
verifies the whole program at the configured depth). Instructions are appended in a
linearization of the order: one whose own pop has no push yet waits, with the rest of its unit,
until it has. The WAR side of DRAM reuse is ordered on its own: operation i+1's stores follow its
computes, which follow operation i's, which follow operation i's loads.

**Full barrier** (when a weak join cannot order some conflict -- typically operation i+1 reads what
operation i just stored): the last STORE so far also pushes an S2C token, a one-word max POOL (the
ISA has no NOP) pops it -- so it runs after every store has completed -- and pushes a C2L token
that the first LOAD of operation i+1 pops. Operation i+1 then loads nothing before operation i's
results are in DRAM; the pipeline drains.

Because the weak join reads the tokens off the actual accesses, it also follows data through
operations: operation i+2 may read operation i's output without a barrier once operation i+1's
waits have ordered those stores. :func:`.lower.schedule_ops` orders operations so that this is the
common case (an inception block needs at most one full barrier, before its first operation). The
liveness reuse of DRAM (:mod:`.memory`) needs no barrier either: every reuse is a conflict the
tracker orders or refuses. ``link(..., weak=False)`` gives the old all-barrier program.

A MARK follows the last STORE of each profile group (usually one layer); it latches once every
earlier store has completed. Where a profile group ends, the weak join also makes the next
operation's first compute instruction wait (S2C) for the group's last STORE: the next group's
loads still overlap the drain, but all of its compute falls between the two MARKs, so a profile
row's cycles (entry k - entry k-1) cover the group's MAC work and MACs / cycles stays a
utilization (it costs GoogLeNet about 5 k estimated cycles, 0.13 %). FINISH ends the stream.

**Buffer ping-pong.** Operations are planned as if they had the buffers to themselves, so two
consecutive ones would both use INP, OUT and PRM from word 0 and the next operation's first loads
(or first compute instructions) would have to wait for the previous one's last compute
instructions (or stores). :func:`_place_buffer` moves the next operation's whole use of INP, OUT or
PRM to the other end of the buffer when both fit side by side (an operation that fills a buffer,
e.g. one whose INP halves alternate over many tiles, stays); the weak join then needs no wait for
them. In GoogLeNet's 14x14 and 7x7 layers the next operation's input tile loads during the
previous operation's last CONVs instead of after them.

**Weight prefetch across a barrier.** The WGT LOADs that open operation i+1 (before its first
other LOAD, carrying no tokens) are moved in front of the barrier, to the end of operation i, when
they cannot disturb operation i: the load unit then runs them right after operation i's own loads
instead of after operation i's last store, so operation i+1's first CONV does not wait for its
weights. Only CONV and FC read WGT, so this is safe when operation i has no CONV (a pool, LRN, add,
upsample), or when the WGT words operation i+1 uses are disjoint from those operation i uses
(the tracker checks the moved LOADs against older operations' CONVs like any other instruction):
an operation's weights normally start at WGT word 0, so :func:`_place_weights` moves operation
i+1's whole WGT use (every WGT LOAD's ``sram_base`` and CONV's ``wgt_base``) to the other end of
the buffer when both fit side by side (ping-pong). Older operations' weights are free once their
CONVs are ordered before the moved LOADs -- after a barrier always; after a weak join the tracker
adds the wait if one is missing (or falls back to the barrier). The moved LOADs carry no tokens of
their own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry

from dlproc.compiler import hazards

__all__ = ["link", "LinkedProgram"]


@dataclass
class LinkedProgram:
    instructions: list[isa.Instruction]
    op_ranges: list[tuple[int, int]]  #: [first, end) instruction index of each operation (its barrier included)
    joins: list[str] = field(default_factory=list)  #: per boundary i -> i+1: "weak" or "full"


def link(geom: Geometry, op_insns: list[list[isa.Instruction]], mark_after: dict[int, int], *,
         weak: bool = True) -> LinkedProgram:
    """Chain operations; ``mark_after[i] = k`` puts MARK k after operation i's instructions.

    ``weak=False`` joins every boundary with the full barrier (as before weak joins existed)."""
    streams = []
    for i, insns in enumerate(op_insns):
        streams.append(list(insns) + ([isa.Mark(index=mark_after[i])] if i in mark_after else []))
    depth = geom.depth("WGT")
    prev = _wgt_range(streams[0], depth) if streams else None
    for i in range(1, len(streams)):
        prev = _place_weights(streams[i - 1], streams[i], prev, depth)
    for buf in ("INP", "OUT", "PRM"):
        prev = _buf_range(geom, streams[0], buf) if streams else None
        for i in range(1, len(streams)):
            prev = _place_buffer(geom, streams[i], buf, prev)
    tr = hazards.Tracker(geom, _dram_beat_range(geom, streams))
    out: list[isa.Instruction] = []
    starts, joins = [], []
    for i, stream in enumerate(streams):
        if i == 0:
            starts.append(0)
            _feed(tr, stream, 0, None)
        else:
            joins.append(_join(geom, tr, stream, out, weak, (i - 1) in mark_after))
            starts.append(len(out))
        out.extend(stream)
    ranges = [(a, starts[i + 1] if i + 1 < len(starts) else len(out)) for i, a in enumerate(starts)]
    out.append(isa.Finish())
    tr.append(out[-1], prog=len(out) - 1)
    return LinkedProgram(out, ranges, joins)


def _dram_beat_range(geom: Geometry, streams: list[list[isa.Instruction]]) -> tuple[int, int]:
    lo, hi = None, None
    for stream in streams:
        for insn in stream:
            if isinstance(insn, (isa.Load, isa.Store)):
                reads, writes = hazards.footprint(insn, geom)
                beats = (reads if isinstance(insn, isa.Load) else writes)[0][1]
                a, b = int(beats.min()), int(beats.max()) + 1
                lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    return (lo or 0, hi or 0)


def _feed(tr: hazards.Tracker, stream: list[isa.Instruction], base: int,
          demands: dict[int, dict[int, int]] | None) -> None:
    """Append ``stream`` (program indices from ``base``) in a linearization of the order: an
    instruction whose pop has no push yet (a planner may put a LOAD before the compute it waits
    for, e.g. with INP not double-buffered) waits, with the rest of its unit, until the push is
    appended. ``demands`` None: every instruction must be ordered already (after a barrier);
    otherwise conflicts are ordered by :func:`_append_ordered`."""
    pending: list[deque] = [deque(), deque(), deque()]
    units = ("load", "compute", "store")

    def ready(insn: isa.Instruction) -> bool:
        return all(len(tr.pops[q]) < len(tr.pushes[q]) for q, (_, _, pf, cons) in hazards.QUEUES.items()
                   if cons == insn.UNIT and getattr(insn, pf))

    def drain() -> None:
        progressed = True
        while progressed:
            progressed = False
            for u in range(3):
                while pending[u] and ready(pending[u][0][1]):
                    k, insn = pending[u].popleft()
                    if demands is None:
                        try:
                            tr.append(insn, prog=base + k)
                        except hazards.Unordered as exc:
                            raise AssertionError(f"program.link: a fully ordered instruction conflicts: {exc}") \
                                from None
                    else:
                        _append_ordered(tr, insn, base + k, stream, demands.get(id(insn)))
                    progressed = True

    for k, insn in enumerate(stream):
        pending[units.index(insn.UNIT)].append((k, insn))
        drain()
    if any(pending):
        raise AssertionError("program.link: an operation's own tokens deadlock (a pop without a push)")


class _Retry(Exception):
    """A conflict that an earlier instruction of the stream must take the token for."""

    def __init__(self, target: isa.Instruction, need: dict[int, int]):
        super().__init__("retry")
        self.target = target
        self.need = need


def _join(geom: Geometry, tr: hazards.Tracker, stream: list[isa.Instruction], out: list[isa.Instruction],
          weak: bool, group_end: bool) -> str:
    """Append the next operation's stream: with a weak join if every conflict it has with the
    program so far can be ordered by added token pairs (see the module docstring), else after a
    full barrier (appended to ``out``)."""
    if weak:
        demands: dict[int, dict[int, int]] = {}
        if group_end:  # keep the profile rows' compute inside their MARK intervals (module docstring)
            stores = [i for i in tr.by_unit[2] if isinstance(tr.insns[i], isa.Store)]
            first = next((i for i in stream if i.UNIT == "compute"), None)
            if stores and first is not None:
                demands[id(first)] = {0: 0, 1: 0, 2: tr.pos[stores[-1]]}
        for _ in range(8):
            tr.checkpoint()
            try:
                _feed(tr, stream, len(out), demands)
            except _Retry as r:
                tr.rollback()
                d = demands.setdefault(id(r.target), {0: 0, 1: 0, 2: 0})
                for u, p in r.need.items():
                    d[u] = max(d[u], p)
                continue
            except hazards.Unordered:
                tr.rollback()
            else:
                tr.commit()
                return "weak"
            break
    stores = [i for i in tr.by_unit[2] if isinstance(tr.insns[i], isa.Store)]
    first_load = next((insn for insn in stream if isinstance(insn, isa.Load)), None)
    if not stores or first_load is None or first_load.pop_next:
        raise CompileError("program.link: an operation must end with a STORE and start its loads without a C2L wait")
    tr.set_flag(stores[-1], "push_prev")
    out.append(isa.Pool(inp_base=0, out_base=geom.depth("OUT") - 1, in_w=1, in_plane=1, mode=isa.PoolMode.MAX,
                        pop_next=True, push_prev=True))
    _feed(tr, out[-1:], len(out) - 1, None)
    first_load.pop_next = True
    _feed(tr, stream, len(out), None)
    return "full"


def _append_ordered(tr: hazards.Tracker, insn: isa.Instruction, prog: int, stream: list[isa.Instruction],
                    demand: dict[int, int] | None) -> None:
    """Append ``insn`` (program index ``prog``); if it conflicts with earlier instructions it is not
    ordered after (or has a ``demand`` from an earlier attempt), add one token pair that orders it:
    a LOAD pops a C2L token from the earliest compute instruction that follows every conflicting
    compute (and every conflicting store, through its own waits); a compute instruction pops an S2C
    token from the earliest STORE at or after every conflicting store. The push must be the newest
    of its counter (so that it pairs with this pop), come before ``insn`` in the program, and no
    token of that counter may be outstanding; when this instruction cannot take the pop, the
    stream's first LOAD / compute instruction is asked to (``_Retry``). Raises
    ``hazards.Unordered`` when nothing can order it."""
    clk = tr.clock_of(insn)
    bad = tr.conflicts(insn, clk)
    if not bad and not demand:
        tr.append(insn, clk=clk, prog=prog)
        return
    units = {tr.unit[h.first] for h in bad}
    need = {u: max((tr.pos[h.first] for h in bad if tr.unit[h.first] == u), default=0) for u in (0, 1, 2)}
    for u, p in (demand or {}).items():
        need[u] = max(need[u], p)
    if isinstance(insn, isa.Load):
        if 0 in units:
            raise hazards.Unordered(bad)
        first = next(i for i in stream if isinstance(i, isa.Load))
        if insn.pop_next or tr.outstanding("C2L"):
            if first is insn:
                raise hazards.Unordered(bad)
            raise _Retry(first, need)
        src = _first_after(tr, 1, "C2L", need[1], lambda j: tr.clock[j][2] >= need[2] and tr.prog[j] < prog
                           and not tr.insns[j].push_prev)
    elif insn.UNIT == "compute" and units <= {2}:
        first = next(i for i in stream if i.UNIT == "compute")
        if insn.pop_next or tr.outstanding("S2C"):
            if first is insn:
                raise hazards.Unordered(bad)
            raise _Retry(first, need)
        src = _first_after(tr, 2, "S2C", need[2], lambda j: isinstance(tr.insns[j], isa.Store)
                           and tr.prog[j] < prog and not tr.insns[j].push_prev)
    else:
        raise hazards.Unordered(bad)
    if src is None:
        raise hazards.Unordered(bad)
    tr.set_flag(src, "push_prev")
    tr.mark_flag(insn, "pop_next")
    tr.append(insn, prog=prog)


def _first_after(tr: hazards.Tracker, unit: int, q: str, min_pos: int, ok) -> int | None:
    """The first appended instruction of ``unit`` at position >= ``min_pos``, after the newest push
    of ``q``, for which ``ok`` holds."""
    last = tr.pos[tr.pushes[q][-1]] if tr.pushes[q] else 0
    order = tr.by_unit[unit]
    for p in range(max(min_pos, last + 1, 1), len(order) + 1):
        if ok(order[p - 1]):
            return order[p - 1]
    return None


#: the fields that address each buffer, per instruction type (used fields only: a MAX pool's
#: ``prm_base`` and an FC's ``inp_base`` without ``load_x`` are ignored by the hardware)
_BUF_FIELDS = {
    "INP": {isa.Conv: ("inp_base",), isa.Pool: ("inp_base",), isa.Add: ("inp_a", "inp_b"),
            isa.Upsample: ("inp_base",), isa.Lrn: ("inp_base",), isa.Softmax: ("inp_base",)},
    "OUT": {isa.Store: ("sram_base",), isa.Conv: ("out_base",), isa.Pool: ("out_base",), isa.Add: ("out_base",),
            isa.Upsample: ("out_base",), isa.Lrn: ("out_base",), isa.Softmax: ("out_base",), isa.Fc: ("out_base",)},
    "PRM": {isa.Conv: ("prm_base",), isa.LrnTab: ("prm_base",), isa.SmxTab: ("prm_base",), isa.Fc: ("prm_base",),
            isa.ActTab: ("prm_base",)},
}


def _buf_fields(insn: isa.Instruction, buf: str) -> tuple[str, ...]:
    if isinstance(insn, isa.Load):
        return ("sram_base",) if insn.buf_name == buf else ()
    if isinstance(insn, isa.Pool) and buf == "PRM":
        return ("prm_base",) if insn.mode == isa.PoolMode.AVG else ()
    if isinstance(insn, isa.Fc) and buf == "INP":
        return ("inp_base",) if insn.load_x else ()
    if isinstance(insn, isa.Conv) and buf == "OUT" and insn.acc_keep:
        return ()  # holds its partial sums: writes no OUT word
    return _BUF_FIELDS[buf].get(type(insn), ())


def _buf_range(geom: Geometry, stream: list[isa.Instruction], buf: str) -> tuple[int, int] | None:
    """[lo, hi) of the ``buf`` words a stream reads or writes (None: it uses none)."""
    lo, hi = None, None
    for insn in stream:
        reads, writes = hazards.footprint(insn, geom)
        for acc in reads + writes:
            if acc[0] == buf:
                lo = acc[1] if lo is None else min(lo, acc[1])
                hi = acc[2] if hi is None else max(hi, acc[2])
    return None if lo is None else (lo, hi)


def _place_buffer(geom: Geometry, stream: list[isa.Instruction], buf: str,
                  prev_range: tuple[int, int] | None) -> tuple[int, int] | None:
    """Move the stream's whole use of INP, OUT or PRM to the bottom or the top of the buffer when
    that makes it disjoint from the previous operation's (``prev_range``), like the weights'
    ping-pong: the stream's first loads then do not overwrite words the previous operation's
    compute instructions still read, nor its compute instructions OUT words its stores still read,
    so the weak join needs no wait for them. Returns the stream's range."""
    rng = _buf_range(geom, stream, buf)
    if rng is None or prev_range is None:
        return rng
    lo, hi = rng
    a, b = prev_range
    if hi <= a or lo >= b:
        return rng
    size, depth = hi - lo, geom.depth(buf)
    for new_lo in (0, depth - size):
        if new_lo + size <= a or new_lo >= b:
            delta = new_lo - lo
            for insn in stream:
                for f in _buf_fields(insn, buf):
                    setattr(insn, f, getattr(insn, f) + delta)
            return (new_lo, new_lo + size)
    return rng


def _wgt_range(stream: list[isa.Instruction], depth: int) -> tuple[int, int] | None:
    """[lo, hi) of the WGT words a stream writes (LOAD) or reads (CONV); None if it uses none.

    An FC stream streams its weights through both WGT halves (the LOAD of tile k+1 overlaps the FC
    of tile k), so it counts as using the whole buffer: nothing is placed beside it and it is
    never relocated (its FC instructions' ``wgt_base`` stay where the planner put them)."""
    if any(isinstance(insn, isa.Fc) for insn in stream):
        return (0, depth)
    lo, hi = None, None
    for insn in stream:
        if isinstance(insn, isa.Load) and insn.buf == isa.Buf.WGT:
            a, b = insn.sram_base, insn.sram_base + insn.x_size * insn.y_size * insn.z_size
        elif isinstance(insn, isa.Conv):
            a, b = insn.wgt_base, insn.wgt_base + insn.wgt_words()
        else:
            continue
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
    return None if lo is None else (lo, hi)


def _relocate_weights(stream: list[isa.Instruction], delta: int) -> None:
    for insn in stream:
        if isinstance(insn, isa.Load) and insn.buf == isa.Buf.WGT:
            insn.sram_base += delta
        elif isinstance(insn, isa.Conv):
            insn.wgt_base += delta


def _place_weights(prev: list[isa.Instruction], nxt: list[isa.Instruction], prev_range: tuple[int, int] | None,
                   depth: int) -> tuple[int, int] | None:
    """Place ``nxt``'s WGT words beside ``prev``'s (``prev_range``) if they fit, and then move its
    opening WGT LOADs to the end of ``prev`` (see the module docstring). Returns ``nxt``'s range."""
    rng = _wgt_range(nxt, depth)
    if rng is None:
        return None
    if prev_range is not None:
        lo, hi = rng
        size = hi - lo
        a, b = prev_range
        for new_lo in (0, depth - size):  # keep it where it is, or move it to the top of the buffer
            if new_lo + size <= a or new_lo >= b:
                break
        else:
            return rng  # no room beside the previous operation's weights: no prefetch
        _relocate_weights(nxt, new_lo - lo)
        rng = (new_lo, new_lo + size)
    _prefetch_weights(prev, nxt)
    return rng


def _prefetch_weights(prev: list[isa.Instruction], nxt: list[isa.Instruction]) -> None:
    """Move the token-free WGT LOADs that open ``nxt`` to the end of ``prev`` (after its own loads)."""
    if not any(isinstance(insn, isa.Load) for insn in prev):
        return
    moved = []
    for insn in nxt:
        if not isinstance(insn, isa.Load):
            continue
        if insn.buf != isa.Buf.WGT or insn.pop_next or insn.push_next:
            break
        moved.append(insn)
    if not moved or len(moved) == sum(isinstance(insn, isa.Load) for insn in nxt):
        return  # the next operation must keep a LOAD to take the barrier's token
    ids = {id(insn) for insn in moved}
    nxt[:] = [insn for insn in nxt if id(insn) not in ids]
    prev.extend(moved)
