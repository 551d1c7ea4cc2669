"""Linking per-operation instruction lists into one network program.

Each operation's instructions come from layerprog (tiling, double buffering and its own token
schedule, which leaves every token counter at zero when the operation ends). Operations are
joined by ``layerprog.chain_streams``, which puts a **barrier** between consecutive operations,
because operation i+1 reads what operation i stored and the decoupled load unit would otherwise
run ahead of the store unit: the last STORE of operation i also pushes an S2C token, a one-word
max POOL (the ISA has no NOP) pops it -- so it runs after every store of operation i has
completed -- and pushes a C2L token that the first LOAD of operation i+1 pops.

So operation i+1 loads nothing before operation i's results are in DRAM, and stores nothing
before operation i's loads are done (they precede operation i's last compute, which precedes the
barrier). That also makes liveness-based reuse of DRAM safe one operation after a tensor's last
reader. The cost is a pipeline drain at every operation boundary.

A MARK follows the last STORE of each profile group (usually one layer); FINISH ends the stream.

**Weight prefetch across a barrier.** The WGT LOADs that open operation i+1 (before its first
other LOAD, carrying no tokens) are moved in front of the barrier, to the end of operation i, when
they cannot disturb operation i: the load unit then runs them right after operation i's own loads
instead of after operation i's last store, so operation i+1's first CONV does not wait for its
weights. Only CONV and FC read WGT, so this is safe when operation i has no CONV (a pool, LRN, add,
upsample), or when the WGT words operation i+1 uses are disjoint from those operation i uses:
an operation's weights normally start at WGT word 0, so :func:`_place_weights` moves operation
i+1's whole WGT use (every WGT LOAD's ``sram_base`` and CONV's ``wgt_base``) to the other end of
the buffer when both fit side by side (ping-pong). Every CONV before operation i has completed
before operation i's first LOAD (the previous barrier), so older weights are free; the token
counts are unchanged (the moved LOADs pop and push nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlproc import isa, layerprog
from dlproc.isasim import Geometry

__all__ = ["link", "LinkedProgram"]


@dataclass
class LinkedProgram:
    instructions: list[isa.Instruction]
    op_ranges: list[tuple[int, int]]  #: [first, end) instruction index of each operation (its barrier included)


def link(geom: Geometry, op_insns: list[list[isa.Instruction]], mark_after: dict[int, int]) -> LinkedProgram:
    """Chain operations; ``mark_after[i] = k`` puts MARK k after operation i's instructions."""
    streams = []
    for i, insns in enumerate(op_insns):
        streams.append(list(insns) + ([isa.Mark(index=mark_after[i])] if i in mark_after else []))
    depth = geom.depth("WGT")
    prev = _wgt_range(streams[0], depth) if streams else None
    for i in range(1, len(streams)):
        prev = _place_weights(streams[i - 1], streams[i], prev, depth)
    out = layerprog.chain_streams(geom, streams)
    ranges = []
    at = 0
    for i, s in enumerate(streams):
        end = at + len(s) + (1 if i + 1 < len(streams) else 0)  # the barrier follows the stream
        ranges.append((at, end))
        at = end
    if at + 1 != len(out) or not isinstance(out[-1], isa.Finish):
        raise AssertionError("layerprog.chain_streams changed its layout (one barrier between streams, FINISH)")
    return LinkedProgram(out, ranges)


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
            a, b = insn.wgt_base, insn.wgt_base + insn.cin_blocks * insn.kh * insn.kw
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
