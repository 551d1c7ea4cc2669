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
