"""A lookup table held in C copies, one per lane, and the states of the instruction that fills it.

The LRN engine (multiplier table, ``LRNTAB``) and the softmax engine (exp table, ``SMXTAB``) look
a table up in every lane in the same cycle. A memory block has one read port, so the table is
held in C copies, and a write goes to all copies at once, one entry per cycle.

Both tables are filled the same way: for each of ``count`` PRM words, read the word (two cycles:
address, data), check every lane's fields (a bad lane stops the instruction with ILLEGAL_FIELD
before anything of that word is written), then write its C lanes to entries ``tab_base + w*C +
lane``, one per cycle; lanes that fall beyond the table's end are dropped, which lets the last
word be partly used. That is ``C + 2`` cycles per word, the figure the estimator uses
(``dlproc.estimate.engines``).

The functions below add the memories and the FSM states to the engine's own module (not as a
submodule), so an engine that uses them elaborates to the same netlist as one that writes them
out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from amaranth.hdl import Const, Module, Signal, Value
from amaranth.lib import data, memory

from dlproc.hardware import isa
from dlproc.hardware.gateware.engine import EngineCommand
from dlproc.hardware.gateware.output_stage import prm_word_layout

__all__ = ["LaneTables", "lane_tables", "table_command", "table_load_states"]


@dataclass(frozen=True)
class LaneTables:
    """The C copies of one table: a shared write port (enable, address, entry) and a read port
    per lane."""

    depth: int
    write_enable: Signal
    write_addr: Signal
    write_data: Signal
    reads: list[memory.ReadPort]


def lane_tables(m: Module, c: int, shape, depth: int, name: str) -> LaneTables:
    """Add ``c`` copies of a ``depth``-entry table of ``shape`` to ``m``, as submodules
    ``{name}0 .. {name}{c-1}``."""
    tab_we = Signal()
    tab_waddr = Signal((depth - 1).bit_length())
    tab_wdata = Signal(shape)
    reads = []
    for lane in range(c):
        mem = memory.Memory(shape=shape, depth=depth, init=[])
        m.submodules[f"{name}{lane}"] = mem
        wp = mem.write_port()
        rp = mem.read_port()
        m.d.comb += [wp.addr.eq(tab_waddr), wp.data.eq(tab_wdata), wp.en.eq(tab_we)]
        reads.append(rp)
    return LaneTables(depth, tab_we, tab_waddr, tab_wdata, reads)


def table_command(m: Module, layout: data.StructLayout, c: int, tables: LaneTables, prm_depth: int) -> EngineCommand:
    """The intake of the table instruction, added to ``m`` as ``tab_command``: a zero ``count`` is
    ILLEGAL_FIELD; PRM words beyond ``prm_depth`` or a first lane of the last word beyond the
    table are SRAM_RANGE."""
    m.submodules.tab_command = tab_command = EngineCommand(
        layout,
        illegal=lambda f: f.count == 0,
        ranges=[(lambda f: f.prm_base + f.count, prm_depth),
                (lambda f: f.tab_base + (f.count - 1) * c, tables.depth - 1)],
    )
    return tab_command


def table_load_states(m: Module, c: int, tables: LaneTables, tab_command, prm, *,
                      lane_ok: Callable[[data.View], Iterable[Value]],
                      entry_of: Callable[[Signal, data.View], Iterable],
                      fail: Callable[[int], None]) -> None:
    """Add the states TAB_CHECK, TAB_READ, TAB_WAIT and TAB_WRITE to the FSM being built in ``m``
    (call it inside ``with m.FSM()``; the engine enters TAB_CHECK when it takes a table command,
    and the states return to IDLE).

    ``tab_command`` is the engine's :class:`~dlproc.hardware.gateware.engine.EngineCommand` for the
    table instruction (fields ``prm_base``, ``tab_base``, ``count``), ``prm`` the engine's PRM
    read port. ``lane_ok(lane)`` gives the conditions under which one lane of a PRM word is a legal entry;
    ``entry_of(write_data, lane)`` gives the statements that turn it into the table's entry.
    """
    t = tab_command.fields
    w = Signal(16)
    lane_i = Signal(range(max(c, 2)))
    entry = Signal((tables.depth - 1).bit_length() + 1)
    prm_word = Signal(prm_word_layout(c))
    with m.State("TAB_CHECK"):
        with m.If(tab_command.fault):
            fail(tab_command.code)
            m.next = "IDLE"
        with m.Else():
            m.d.sync += [w.eq(0), entry.eq(t.tab_base)]
            m.next = "TAB_READ"
    with m.State("TAB_READ"):
        m.d.comb += [prm.addr.eq(t.prm_base + w), prm.en.eq(1)]
        m.next = "TAB_WAIT"
    with m.State("TAB_WAIT"):
        ok = Const(1)
        for lane in range(c):
            for term in lane_ok(prm.data[lane]):
                ok = ok & term
        m.d.sync += [prm_word.eq(prm.data), lane_i.eq(0)]
        with m.If(~ok):
            fail(isa.ErrorCode.ILLEGAL_FIELD)
            m.next = "IDLE"
        with m.Else():
            m.next = "TAB_WRITE"
    with m.State("TAB_WRITE"):
        src = prm_word[lane_i]
        m.d.comb += [tables.write_enable.eq(entry < tables.depth), tables.write_addr.eq(entry),
                     *entry_of(tables.write_data, src)]
        m.d.sync += [entry.eq(entry + 1), lane_i.eq(lane_i + 1)]
        with m.If(lane_i == c - 1):
            m.d.sync += w.eq(w + 1)
            with m.If(w == t.count - 1):
                m.next = "IDLE"
            with m.Else():
                m.next = "TAB_READ"
