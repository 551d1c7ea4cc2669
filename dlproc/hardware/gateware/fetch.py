"""The fetch unit: reads the program over the memory master and dispatches it to the unit queues.

On ``run`` it reads INSN_COUNT 256-bit instructions starting at INSN_BASE (a multiple of
max(32, B) bytes). The program is one contiguous row of beats for the burst planner, so every
burst is checked against the DMA window before it is requested. ``DMA_FETCH`` is raised when the
next instruction to dispatch lies outside the window (not merely when prefetching reaches it). Beats
are collected into instructions (32/B beats each, or B/32 instructions per beat on a bus wider
than 256 bits), and each instruction is dispatched by opcode:

========================  =====================
LOAD                      load queue
CONV, POOL, FINISH and    compute queue (the optional blocks' opcodes also when the
the optional blocks'      block is absent: the compute unit stops with ``BLOCK_ABSENT``)
STORE, MARK               store queue
anything else             ``ILLEGAL_OPCODE``
========================  =====================

A dependency flag the target unit has no neighbour for (load: ``*_prev``; store: ``*_next``) is
``ILLEGAL_FIELD``. After FINISH the unit stops requesting; dispatching the last instruction
without having seen FINISH is ``RAN_OFF_END``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware.isa import INSN_BITS, INSN_BYTES, INSN_LAYOUT, UNIT_OF_OPCODE, ErrorCode, HardwareParams, Opcode
from dlproc.hardware.gateware.avalon import ReadClientSignature
from dlproc.hardware.gateware.dma import BurstPlanner, granted_beats
from dlproc.hardware.gateware.tokens import QUEUE_ENTRY


class FetchUnit(wiring.Component):
    def __init__(self, hw: HardwareParams):
        self.hw = hw
        super().__init__(
            {
                "run": In(1),
                "insn_base": In(32),
                "insn_count": In(32),
                "win_base": In(32),
                "win_limit": In(32),
                "mem": Out(ReadClientSignature(hw.mem_data_width, hw.max_burst)),
                "to_load": Out(stream.Signature(QUEUE_ENTRY)),
                "to_compute": Out(stream.Signature(QUEUE_ENTRY)),
                "to_store": Out(stream.Signature(QUEUE_ENTRY)),
                "fetched": Out(32),  # instructions dispatched
                "busy": Out(1),  # fetching (started, not finished, no error)
                "finished": Out(1),  # FINISH dispatched
                "blocked": Out(1),  # an instruction waits for room in a full queue
                "error": Out(1),
                "error_code": Out(8),
                "err_addr": Out(32),
                "err_insn": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        hw = self.hw
        w = hw.mem_data_width
        bpb = hw.bytes_per_beat
        beats_per_insn = max(1, INSN_BYTES // bpb)
        insns_per_beat = max(1, bpb // INSN_BYTES)
        align = max(INSN_BYTES, bpb)
        credits = 2 * hw.max_burst

        m.submodules.planner = planner = BurstPlanner(hw, row_bits=40)
        m.submodules.beats = beats = fifo.SyncFIFOBuffered(width=w, depth=credits)

        started = Signal()
        finished = Signal()
        error = Signal()
        m.d.comb += [
            self.finished.eq(finished),
            self.error.eq(error),
            self.busy.eq(started & ~finished & ~error & (self.fetched != self.insn_count)),
            planner.win_base.eq(self.win_base),
            planner.win_limit.eq(self.win_limit),
            planner.y_count.eq(1),
            planner.z_count.eq(1),
            planner.base.eq(self.insn_base),
        ]
        if insns_per_beat > 1:
            total_beats = (self.insn_count + insns_per_beat - 1) // insns_per_beat
        else:
            total_beats = self.insn_count * beats_per_insn
        m.d.comb += planner.row_beats.eq(total_beats)

        def fail(code, addr=None):
            m.d.sync += [error.eq(1), self.error_code.eq(code), self.err_insn.eq(self.fetched)]
            if addr is not None:
                m.d.sync += self.err_addr.eq(addr)

        # Start: one pulse into the planner, after the checks that need no bus access.
        with m.If(self.run & ~started & ~error):
            m.d.sync += started.eq(1)
            with m.If(self.insn_count == 0):
                fail(ErrorCode.RAN_OFF_END)
            with m.Elif(self.insn_base % align != 0):
                fail(ErrorCode.ILLEGAL_FIELD, self.insn_base)
            with m.Else():
                m.d.comb += planner.start.eq(1)

        # Requests, limited by read credits (Avalon read data cannot be back-pressured): ``free``
        # is the FIFO room not yet promised to a requested burst; grants are counted one cycle
        # late (see ``dma.granted_beats``).
        free = Signal(range(credits + 1), init=credits)
        granted = granted_beats(m, self.mem.req_ready, self.mem.req_len)
        stop = finished | error
        m.d.comb += [
            self.mem.req_valid.eq(planner.burst.valid & ~stop & (free >= planner.burst.payload.len)),
            self.mem.req_addr.eq(planner.burst.payload.addr),
            self.mem.req_len.eq(planner.burst.payload.len),
            planner.burst.ready.eq(self.mem.req_ready),
            beats.w_en.eq(self.mem.rsp_valid),
            beats.w_data.eq(self.mem.rsp_data),
        ]
        m.d.sync += free.eq(free + beats.r_en - granted)

        # Assemble instructions into ``current`` (valid while ``have``).
        current = Signal(INSN_LAYOUT)
        have = Signal()
        take = Signal()  # ``current`` is dispatched this cycle
        if beats_per_insn > 1:
            slots = [Signal(w, name=f"slot{i}") for i in range(beats_per_insn - 1)]
            idx = Signal(range(beats_per_insn))
            with m.If(beats.r_rdy & (~have | take) & ~stop):
                m.d.comb += beats.r_en.eq(1)
                with m.If(idx == beats_per_insn - 1):
                    m.d.sync += [idx.eq(0), current.eq(Cat(*slots, beats.r_data)), have.eq(1)]
                with m.Else():
                    m.d.sync += idx.eq(idx + 1)
                    with m.Switch(idx):
                        for i, slot in enumerate(slots):
                            with m.Case(i):
                                m.d.sync += slot.eq(beats.r_data)
                    with m.If(take):
                        m.d.sync += have.eq(0)
            with m.Elif(take):
                m.d.sync += have.eq(0)
        else:
            beat = Signal(w)
            sub = Signal(range(insns_per_beat))
            beat_valid = Signal()
            m.d.comb += current.eq(beat.word_select(sub, INSN_BITS) if insns_per_beat > 1 else beat)
            m.d.comb += have.eq(beat_valid)
            last_sub = (sub == insns_per_beat - 1) if insns_per_beat > 1 else 1
            with m.If(take):
                m.d.sync += sub.eq(Mux(last_sub, 0, sub + 1))
            with m.If(beats.r_rdy & (~beat_valid | (take & last_sub)) & ~stop):
                m.d.comb += beats.r_en.eq(1)
                m.d.sync += [beat.eq(beats.r_data), beat_valid.eq(1)]
            with m.Elif(take & last_sub):
                m.d.sync += beat_valid.eq(0)

        # Dispatch. ``fetched_next`` always holds ``fetched + 1`` (a register, so the last-
        # instruction compare below has no carry chain in front of it).
        fetched_next = Signal(32, init=1)
        hdr = current.header
        entry = Signal(QUEUE_ENTRY)
        m.d.comb += [entry.insn.eq(current), entry.index.eq(self.fetched)]
        for q in (self.to_load, self.to_compute, self.to_store):
            m.d.comb += q.payload.eq(entry)
        target = Signal(3)  # one-hot: load, compute, store
        illegal_flags = Signal()
        with m.Switch(hdr.opcode):
            with m.Case(Opcode.LOAD):
                m.d.comb += [target.eq(0b001), illegal_flags.eq(hdr.pop_prev | hdr.push_prev)]
            # Every compute opcode goes to the compute unit, also an optional block's when the
            # block is absent: the compute unit then stops with BLOCK_ABSENT.
            with m.Case(*(op for op, unit in UNIT_OF_OPCODE.items() if unit == "compute")):
                m.d.comb += target.eq(0b010)
            with m.Case(Opcode.STORE, Opcode.MARK):
                m.d.comb += [target.eq(0b100), illegal_flags.eq(hdr.pop_next | hdr.push_next)]
        ready = Mux(target[0], self.to_load.ready, 0) | Mux(target[1], self.to_compute.ready, 0) \
            | Mux(target[2], self.to_store.ready, 0)

        with m.If(have & ~stop):
            with m.If(target == 0):
                fail(ErrorCode.ILLEGAL_OPCODE)
            with m.Elif(illegal_flags):
                fail(ErrorCode.ILLEGAL_FIELD)
            with m.Else():
                m.d.comb += [
                    self.to_load.valid.eq(target[0]),
                    self.to_compute.valid.eq(target[1]),
                    self.to_store.valid.eq(target[2]),
                    self.blocked.eq(~ready),
                ]
                with m.If(ready):
                    m.d.comb += take.eq(1)
                    m.d.sync += [self.fetched.eq(fetched_next), fetched_next.eq(fetched_next + 1)]
                    with m.If(hdr.opcode == Opcode.FINISH):
                        m.d.sync += finished.eq(1)
                    with m.Elif(fetched_next == self.insn_count):
                        m.d.sync += [
                            error.eq(1),
                            self.error_code.eq(ErrorCode.RAN_OFF_END),
                            self.err_insn.eq(fetched_next),
                        ]

        # The planner refused a burst outside the DMA window. That is an error only once the
        # program actually needs an instruction from it: everything before it has been fetched
        # (clipped bursts) and dispatched, and FINISH has not been seen. Prefetching beyond FINISH
        # therefore never turns a correct program into a DMA_FETCH error.
        with m.If(planner.error & ~stop & ~have & (free == credits)):
            fail(ErrorCode.DMA_FETCH, planner.err_addr)
        return m
