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

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware import isa
from dlproc.hardware.gateware.output_stage import input_signature as output_stage_input, out_word_layout, prm_word_layout

__all__ = ["TAG_BITS", "TAG_TO_INP", "result_addr_bits", "Engine", "table_refused", "EngineCommand", "RangeCheck", "inp_word_layout", "wgt_word_layout", "read_port", "as_bounded",
           "bounded_add", "buffer_addr_bits", "engine_signature"]

#: ``(end, limit)``: out of range when ``end(fields) > limit``; ``end`` maps the command's fields
#: (a ``data.View`` of its layout) to a Value formed without wrapping.
RangeCheck = tuple[Callable[[data.View], Value], int]


# --------------------------------------------------------------------------------------------
# What every engine shares: the command tag, the buffer words, read ports and bounded addresses

#: Bits of the opaque tag a command carries to its output-stage items (the compute unit puts the
#: push_prev/push_next flags there, so the tokens are given when the tile is written, and a CONV's
#: to_inp flag, which sends its words to INP instead of OUT).
TAG_BITS = 3
#: Tag bit (of the command's tag; bit TAG_TO_INP + 1 of an output-stage item's) of CONV.to_inp.
TAG_TO_INP = 2

def inp_word_layout(c: int) -> data.ArrayLayout:
    """An INP word: C int8 lanes (pixel x channel block), lane i = channel cb*C + i."""
    return out_word_layout(c)


def wgt_word_layout(c: int) -> data.ArrayLayout:
    """A WGT word: ``[co][ci]`` int8, byte co*C + ci."""
    return data.ArrayLayout(data.ArrayLayout(signed(8), c), c)


def as_bounded(value: Value, bits: int) -> Value:
    """``value`` as a bounded address ``Cat(low, beyond)``: its low ``bits`` bits and whether it
    is >= 2**bits."""
    value = Value.cast(value)
    if len(value) <= bits:
        return Cat(value, Const(0, bits - len(value)), Const(0))
    return Cat(value[:bits], value[bits:].any())


def bounded_add(base: data.View, step: Value) -> Value:
    """``base + step`` for bounded addresses (``step`` as :func:`as_bounded` forms it): the low bits
    wrap exactly as the full-width sum's would, and ``beyond`` is sticky, since the steps are
    non-negative a sum that left the buffer's power-of-two range never comes back. Range checks
    then see ``beyond | (low >= depth)``, the full-width compare, with a ``bits``-wide carry
    chain instead of the 38 bits that the largest address an encodable CONV forms needs."""
    bits = len(base.low)
    step = Value.cast(step)
    total = base.low + step[:bits]
    return Cat(total[:bits], base.beyond | step[bits] | total[bits])


def read_port(addr_bits: int, shape) -> wiring.Signature:
    """A synchronous read port seen from its user: ``addr``/``en`` out, ``data`` in (1 cycle)."""
    return memory.ReadPort.Signature(addr_width=addr_bits, shape=shape).flip()


def buffer_addr_bits(hw: isa.HardwareParams, buf: str) -> int:
    """Word-address bits of an on-chip buffer (``"inp"``, ``"wgt"``, ``"prm"`` or ``"out"``)."""
    return max(1, (getattr(hw, f"{buf}_depth") - 1).bit_length())


def result_addr_bits(hw: isa.HardwareParams) -> int:
    """Address bits of an output-stage item: an OUT word, or an INP word (CONV.to_inp)."""
    return max(buffer_addr_bits(hw, "out"), buffer_addr_bits(hw, "inp"))


_BUFFER_WORDS = {"inp": inp_word_layout, "wgt": wgt_word_layout, "prm": prm_word_layout}


def engine_signature(hw: isa.HardwareParams, commands: dict[str, data.Layout], reads: Sequence[str], *,
                     mac_active: bool = False) -> dict[str, wiring.Member]:
    """The ports every compute engine has, in one order: its command streams, read ports on the
    buffers it reads (``reads``, in INP/WGT/PRM order), items for the shared output stage, and
    ``busy`` (``mac_active`` for the engines whose multipliers the profile counts), ``error`` and
    ``error_code``. The compute unit connects every engine the same way because they share this."""
    ports: dict[str, wiring.Member] = {name: In(stream.Signature(layout)) for name, layout in commands.items()}
    for buf in reads:
        ports[buf] = Out(read_port(buffer_addr_bits(hw, buf), _BUFFER_WORDS[buf](hw.c)))
    ports["ost"] = Out(output_stage_input(hw.c, result_addr_bits(hw), 1 + TAG_BITS))
    ports["busy"] = Out(1)
    if mac_active:
        ports["mac_active"] = Out(1)
    ports["error"] = Out(1)
    ports["error_code"] = Out(4)
    return ports



def table_refused(hw: isa.HardwareParams, fields: data.View) -> Value:
    """ILLEGAL_FIELD term of an instruction with an ``act_table`` flag: set on a processor built
    without the activation table (whose output stage would ignore it and write the untabled result)."""
    return Const(0) if hw.act_table else fields.act_table


class Engine(wiring.Component):
    """Base of the compute engines: the ports of :func:`engine_signature`, the hardware
    parameters (``hw``, ``c``) and the address widths of the four buffers (``inp_bits``,
    ``wgt_bits``, ``prm_bits``, ``out_bits``) that every engine's ``elaborate`` works with."""

    def __init__(self, hw: isa.HardwareParams, commands: dict[str, data.Layout], reads: Sequence[str], *,
                 mac_active: bool = False, extra: dict[str, wiring.Member] | None = None) -> None:
        self.hw = hw
        self.c = hw.c
        self.inp_bits = buffer_addr_bits(hw, "inp")
        self.wgt_bits = buffer_addr_bits(hw, "wgt")
        self.prm_bits = buffer_addr_bits(hw, "prm")
        self.out_bits = buffer_addr_bits(hw, "out")
        self.res_bits = result_addr_bits(hw)  # an output-stage item's address (OUT, or INP for to_inp)
        super().__init__(engine_signature(hw, commands, reads, mac_active=mac_active) | (extra or {}))

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
