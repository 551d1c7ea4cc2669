"""The activation-table planner: the output stage's 256-entry table (``gateware/output_stage.py``,
filled by ``gateware/act_table.py``) for a conv, FC or add whose results go through it.

A layer with a table is emitted as two streams that the linker joins like two operations: the
table load (LOAD PRM / ACTTAB pairs, :func:`act_table_stream`) and the layer's own instructions
with ``act_table`` set on every CONV, ADD and FC (:func:`with_table_flag`). The weak join orders
the layer's PRM loads after the ACTTAB that reads the same words, exactly as between any two
operations; ACTTAB itself starts only when every earlier compute instruction has completed, so
the previous layer's results never see the new table.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dlproc.errors import CompileError
from dlproc.hardware import isa
from dlproc.hardware.geometry import Geometry
from dlproc.hardware.numerics import ACT_TABLE_SIZE, INT8_MAX, INT8_MIN
from dlproc.compiler.planners.packing import prm_word
from dlproc.compiler.planners.schedule import require_block, table_stream

__all__ = ["pack_act_table", "act_table_stream", "with_table_flag", "act_table_words"]

#: Instructions whose results the output stage can send through the table.
TABLED = (isa.Conv, isa.Add, isa.Fc)


def act_table_words(geom: Geometry) -> int:
    """PRM words of one table: C entries per word."""
    return -(-ACT_TABLE_SIZE // geom.c)


def pack_act_table(geom: Geometry, table: np.ndarray) -> bytes:
    """The table as PRM words: the bias field of lane l of word w = entry w*C + l (M, M_neg, S 0)."""
    t = np.asarray(table).reshape(-1)
    if t.shape != (ACT_TABLE_SIZE,) or t.min() < INT8_MIN or t.max() > INT8_MAX:
        raise CompileError(f"an activation table must hold {ACT_TABLE_SIZE} int8 entries, got shape {t.shape} "
                           f"with values {t.min()}..{t.max()}")
    c, words = geom.c, act_table_words(geom)
    padded = np.zeros(words * c, dtype=np.int64)
    padded[:ACT_TABLE_SIZE] = t
    zero = np.zeros(c, dtype=np.int64)
    return b"".join(prm_word(geom, padded[w * c:(w + 1) * c], zero, zero, zero) for w in range(words))


def act_table_stream(geom: Geometry, table_addr: int) -> list[isa.Instruction]:
    """LOAD PRM / ACTTAB pairs that put the whole table (at ``table_addr``) into the output stage."""
    require_block(geom, isa.Opcode.ACTTAB)
    return table_stream(geom, table_addr, act_table_words(geom), lambda base, n, push: isa.ActTab(
        prm_base=0, tab_base=base, count=n, pop_prev=True, push_prev=push))


def with_table_flag(insns: list[isa.Instruction]) -> list[isa.Instruction]:
    """The layer's instructions with ``act_table`` set on every CONV, ADD and FC; a layer with
    other result-writing instructions cannot use the table (the output stage would skip it)."""
    out = []
    for insn in insns:
        if isinstance(insn, TABLED):
            insn = dataclasses.replace(insn, act_table=1)
        elif isinstance(insn, (isa.Pool, isa.Upsample, isa.Lrn, isa.Softmax)):
            raise CompileError(f"internal error: a {type(insn).__name__.upper()} cannot apply the activation table")
        out.append(insn)
    return out
