"""The ACTTAB engine: fills the output stage's activation table from PRM words.

``dlproc.hardware.isa.ActTab``: the bias field of lane l of PRM word ``prm_base + w`` becomes
entry ``tab_base + w*C + l`` of the 256-entry int8 table; a bias outside -128..127 stops the
instruction with ILLEGAL_FIELD before anything of its word is written, entries beyond 255 are
dropped. The table itself lives in the shared
:class:`~dlproc.hardware.gateware.output_stage.OutputStage` (it is read by every engine's
results), so this engine owns only the write side: ``tab_we``/``tab_addr``/``tab_data``, one entry
per cycle, which the compute unit connects to the stage. It is the same fill sequence as LRNTAB
and SMXTAB (:mod:`.lane_table`), C + 2 cycles per PRM word.

The compute unit starts ACTTAB only when every earlier instruction has completed, and the next
instruction only when ACTTAB has finished, so no lookup ever sees a half-written table: the
table needs no second bank and no read/write arbitration.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from dlproc.hardware import isa
from dlproc.hardware.numerics import ACT_TABLE_SIZE, INT8_MAX, INT8_MIN

from dlproc.hardware.gateware.engine import Engine
from dlproc.hardware.gateware.lane_table import LaneTables, table_command, table_load_states

__all__ = ["ACTTAB_CMD_LAYOUT", "ActTableEngine"]

#: An ACTTAB command: the instruction's fields as ``dlproc.hardware.isa`` encodes them.
ACTTAB_CMD_LAYOUT = data.StructLayout({spec.name: spec.shape for spec in isa.ActTab.field_specs()})


class ActTableEngine(Engine):
    """Executes ACTTAB commands (``tab_cmd``); reads PRM, writes the output stage's table."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        super().__init__(hw, {"tab_cmd": ACTTAB_CMD_LAYOUT}, ("prm",), extra={
            "tab_we": Out(1),
            "tab_addr": Out(range(ACT_TABLE_SIZE)),
            "tab_data": Out(signed(8)),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        def fail(value: int) -> None:
            m.d.sync += [error.eq(1), code.eq(value)]

        # The table's write port seen as the lane tables of lane_table.py (no read ports here:
        # the output stage reads its copies).
        table = LaneTables(ACT_TABLE_SIZE, self.tab_we, self.tab_addr, self.tab_data, [])
        tab_command = table_command(m, ACTTAB_CMD_LAYOUT, c, table, hw.prm_depth)
        wiring.connect(m, wiring.flipped(self.tab_cmd), tab_command.cmd)

        m.d.comb += self.prm.en.eq(0)
        with m.FSM(name="acttab") as fsm:
            with m.State("IDLE"):
                m.d.comb += tab_command.enable.eq(~error)
                with m.If(tab_command.take):
                    m.next = "TAB_CHECK"
            table_load_states(m, c, table, tab_command, self.prm,
                              lane_ok=lambda src: [src.bias >= INT8_MIN, src.bias <= INT8_MAX],
                              entry_of=lambda entry, src: [entry.eq(src.bias[:8])],
                              fail=fail)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
