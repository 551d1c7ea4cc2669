"""The command intake every instruction engine shares: accept handshake, command register, checks.

Each engine (conv, pool, add, upsample, LRN, softmax, FC) starts an instruction the same way: while
it can take one, it accepts the command stream's payload into a register, and in the next cycle
it checks the fields before it reads anything (an illegal instruction writes nothing, like the
ISA-level simulator). :class:`EngineCommand` is that preamble, once.

It is **registered** so that the checks are off the engines' critical paths. The checks an engine
asks for are of two kinds:

* ``illegal``: a condition on the fields (a zero size, act_min > act_max, ...) giving
  ILLEGAL_FIELD. It is evaluated on the payload in the accept cycle and registered.
* ``ranges``: pairs ``(end, limit)``: the instruction reaches beyond a buffer when
  ``end(fields) > limit`` (for example ``inp_a + count > inp_depth``). The *sums* ``end`` are
  formed from the payload in the accept cycle and registered; the compares with the constant
  limits happen in the cycle after. A range check thus costs an adder in one cycle and a
  compare in the next instead of both in one (the ADD engine's ``inp_a + count > inp_depth``
  was the processor's critical path that way).

Both verdicts are valid from the cycle after the accept (the engine's check state) until the next
accept, with ILLEGAL_FIELD taking priority over SRAM_RANGE (``fault`` and ``code``). An engine
thus keeps exactly the cycle timing it had when it registered the payload and checked it in its
next state: the helper adds no cycle.
"""

from __future__ import annotations

from typing import Callable, Sequence

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware import isa

__all__ = ["EngineCommand", "RangeCheck"]

#: ``(end, limit)``: out of range when ``end(fields) > limit``; ``end`` maps the command's fields
#: (a ``data.View`` of its layout) to a Value formed without wrapping.
RangeCheck = tuple[Callable[[data.View], Value], int]


class EngineCommand(wiring.Component):
    """Accepts one command of ``layout`` at a time and checks it (see the module docstring).

    Ports:
      ``cmd``      the engine's command stream; ``ready`` = ``enable``;
      ``enable``   the engine can start a command now (idle, no error, pipeline free);
      ``take``     a command is accepted in this cycle (``cmd.valid & enable``);
      ``fields``   the accepted command, registered (held until the next accept);
      ``illegal``  ILLEGAL_FIELD verdict, ``out_of_range`` SRAM_RANGE verdict, both from the
                   cycle after ``take``;
      ``fault``    either verdict; ``code`` its :class:`dlproc.hardware.isa.ErrorCode` (ILLEGAL_FIELD first).
    """

    def __init__(self, layout: data.StructLayout, *,
                 illegal: Callable[[data.View], Value] | None = None,
                 ranges: Sequence[RangeCheck] = ()) -> None:
        self._layout = layout
        self._illegal = illegal
        self._ranges = list(ranges)
        super().__init__({
            "cmd": In(stream.Signature(layout)),
            "enable": In(1),
            "take": Out(1),
            "fields": Out(layout),
            "illegal": Out(1),
            "out_of_range": Out(1),
            "fault": Out(1),
            "code": Out(4),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        pay = self.cmd.payload
        take = self.cmd.valid & self.enable
        m.d.comb += [self.cmd.ready.eq(self.enable), self.take.eq(take)]

        illegal = Signal()
        beyond = []
        with m.If(take):
            m.d.sync += self.fields.eq(pay)
            if self._illegal is not None:
                m.d.sync += illegal.eq(self._illegal(pay))
        for k, (end, limit) in enumerate(self._ranges):
            value = Value.cast(end(pay))
            reg = Signal(value.shape(), name=f"end{k}")
            with m.If(take):
                m.d.sync += reg.eq(value)
            beyond.append(reg > limit)

        out_of_range = Signal()
        m.d.comb += [
            self.illegal.eq(illegal),
            out_of_range.eq(Cat(*beyond).any() if beyond else 0),
            self.out_of_range.eq(out_of_range),
            self.fault.eq(illegal | out_of_range),
            self.code.eq(Mux(illegal, isa.ErrorCode.ILLEGAL_FIELD, isa.ErrorCode.SRAM_RANGE)),
        ]
        return m
