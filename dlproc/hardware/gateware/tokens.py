"""Instruction queues, dependency-token gates and token counters (VTA-style synchronisation).

Every execution unit (load, compute, store) sits behind a :class:`TokenGate`. The gate owns the
unit's instruction queue (filled by the fetch unit), and for the instruction at its head:

1. waits until every token the header pops (``pop_prev``/``pop_next``) is available, counting
   those cycles as *stall*;
2. consumes the tokens and hands the instruction to the unit (a stream handshake);
3. waits for the unit's ``done`` pulse, which a unit gives only once all the instruction's
   memory writes are complete, counting the cycles from 2 to 3 as *busy*;
4. gives the tokens the header pushes (``push_prev``/``push_next``).

So a unit executes one instruction at a time, in order, and units never need to know about
tokens. The load and store units sit behind gates. The compute unit handles its tokens itself
(so that it can wait for the next instruction's tokens while the previous tile drains) and gets
a plain :class:`InstructionQueue`.

:class:`TokenCounters` holds the four counters between neighbouring units (L2C: load to compute,
C2L, C2S, S2C). A give on a full counter is a program error (``TOKEN_OVERFLOW``).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware.isa import INSN_LAYOUT, HardwareParams

#: What the fetch unit puts into a queue: the instruction and its index in the program (for
#: ERR_INSN when the unit reports an error).
QUEUE_ENTRY = data.StructLayout({"insn": INSN_LAYOUT, "index": unsigned(32)})

TOKEN_QUEUES = ("l2c", "c2l", "c2s", "s2c")


class TokenGate(wiring.Component):
    """Instruction queue plus token handling in front of one unit.

    ``enq``: entries from the fetch unit. ``insn``: the instruction to the unit, which pulses
    ``done`` (no earlier than the cycle after the handshake) when it has completed it.
    ``*_avail``: the neighbour token counters are non-zero; ``take_*``/``give_*``: one-cycle pulses
    that decrement/increment them.
    """

    def __init__(self, hw: HardwareParams):
        self.hw = hw
        super().__init__(
            {
                "enq": In(stream.Signature(QUEUE_ENTRY)),
                "insn": Out(stream.Signature(INSN_LAYOUT)),
                "done": In(1),
                "prev_avail": In(1),
                "next_avail": In(1),
                "take_prev": Out(1),
                "take_next": Out(1),
                "give_prev": Out(1),
                "give_next": Out(1),
                "busy": Out(1),  # an instruction is with the unit
                "stall": Out(1),  # the head instruction waits for a token
                "idle": Out(1),  # queue empty and nothing executing
                "cur_index": Out(32),  # program index of the instruction with the unit
            }
        )

    def elaborate(self, platform):
        m = Module()
        queue = fifo.SyncFIFOBuffered(width=QUEUE_ENTRY.size, depth=self.hw.queue_depth)
        m.submodules.queue = queue
        m.d.comb += [
            queue.w_data.eq(self.enq.payload.as_value()),
            queue.w_en.eq(self.enq.valid),
            self.enq.ready.eq(queue.w_rdy),
        ]
        head = data.View(QUEUE_ENTRY, queue.r_data)
        hdr = head.insn.header

        current = Signal(QUEUE_ENTRY)
        m.d.comb += [self.insn.payload.eq(current.insn), self.cur_index.eq(current.index)]

        tokens_ok = (~hdr.pop_prev | self.prev_avail) & (~hdr.pop_next | self.next_avail)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.idle.eq(~queue.r_rdy)
                with m.If(queue.r_rdy):
                    with m.If(tokens_ok):
                        m.d.comb += [
                            queue.r_en.eq(1),
                            self.take_prev.eq(hdr.pop_prev),
                            self.take_next.eq(hdr.pop_next),
                        ]
                        m.d.sync += current.eq(head)
                        m.next = "ISSUE"
                    with m.Else():
                        m.d.comb += self.stall.eq(1)
            with m.State("ISSUE"):
                m.d.comb += [self.insn.valid.eq(1), self.busy.eq(1)]
                with m.If(self.insn.ready):
                    m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.done):
                    m.d.comb += [
                        self.give_prev.eq(current.insn.header.push_prev),
                        self.give_next.eq(current.insn.header.push_next),
                    ]
                    m.next = "IDLE"
        return m


class InstructionQueue(wiring.Component):
    """A plain instruction FIFO (for the compute unit, which handles its own tokens).

    ``last_index`` is the program index of the instruction most recently handed out, which the
    core reports in ERR_INSN when the compute unit signals an error.
    """

    def __init__(self, hw: HardwareParams):
        self.hw = hw
        super().__init__(
            {
                "enq": In(stream.Signature(QUEUE_ENTRY)),
                "deq": Out(stream.Signature(INSN_LAYOUT)),
                "empty": Out(1),
                "last_index": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        queue = fifo.SyncFIFOBuffered(width=QUEUE_ENTRY.size, depth=self.hw.queue_depth)
        m.submodules.queue = queue
        head = data.View(QUEUE_ENTRY, queue.r_data)
        m.d.comb += [
            queue.w_data.eq(self.enq.payload.as_value()),
            queue.w_en.eq(self.enq.valid),
            self.enq.ready.eq(queue.w_rdy),
            self.deq.payload.eq(head.insn),
            self.deq.valid.eq(queue.r_rdy),
            queue.r_en.eq(self.deq.ready),
            self.empty.eq(~queue.r_rdy),
        ]
        with m.If(self.deq.valid & self.deq.ready):
            m.d.sync += self.last_index.eq(head.index)
        return m


class TokenCounters(wiring.Component):
    """The four dependency-token counters; ``<q>_give``/``<q>_take`` change them by one."""

    def __init__(self, hw: HardwareParams):
        self.hw = hw
        members = {"overflow": Out(1)}
        for q in TOKEN_QUEUES:
            members[f"{q}_give"] = In(1)
            members[f"{q}_take"] = In(1)
            members[f"{q}_avail"] = Out(1)
            members[f"{q}_count"] = Out(hw.token_bits)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        full = (1 << self.hw.token_bits) - 1
        overflow = Signal()
        for q in TOKEN_QUEUES:
            count = getattr(self, f"{q}_count")
            give = getattr(self, f"{q}_give")
            take = getattr(self, f"{q}_take")
            m.d.comb += getattr(self, f"{q}_avail").eq(count != 0)
            with m.If(give & ~take):
                with m.If(count == full):
                    m.d.sync += overflow.eq(1)
                with m.Else():
                    m.d.sync += count.eq(count + 1)
            with m.Elif(take & ~give):
                m.d.sync += count.eq(count - 1)
        m.d.comb += self.overflow.eq(overflow)
        return m
