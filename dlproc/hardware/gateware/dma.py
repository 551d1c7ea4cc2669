"""Memory-side units: the burst planner, the memory-master arbiter, and the load and store units.

Every memory access of the processor goes through the Avalon-MM pipelined burst master(s) of
:class:`MemoryArbiter`: one shared by three clients (the fetch unit and the load unit read, the
store unit writes) or, with ``MemoryPorts = 2``, a read master for fetch and load and a write
master for store. Each client plans its own bursts with a :class:`BurstPlanner`, which splits the rows
of a strided 3-D transfer into bursts and checks each burst against the DMA window *before* it
can be requested, so an access outside [DMA_BASE, DMA_LIMIT) never appears on the bus.

Bursts never cross a ``max_burst * B``-byte boundary. Avalon-MM itself allows any burst, but
aligned bursts also never cross a 4 KiB page, which keeps them legal when Platform Designer
bridges the port to AXI (the HPS SDRAM ports) and lets the interconnect's burst adapters pass
them through unchanged.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from dlproc.hardware.isa import INSN_LAYOUT, LOAD_LAYOUT, STORE_LAYOUT, Buf, ErrorCode, HardwareParams, Opcode
from dlproc.hardware.gateware.avalon import (
    WRITE_RESPONSES_OUTSTANDING,
    MemorySignature,
    ReadClientSignature,
    ReadMemorySignature,
    Response,
    WriteClientSignature,
    WriteMemorySignature,
    burst_bits,
)
from dlproc.hardware.gateware.buffers import read_port_signature, write_port_signature

#: Width of the byte steps a planner accepts (``stride * pitch`` of a 32-bit element stride).
STEP_BITS = 64
#: DRAM byte addresses on the bus. Inside the planner every address is ADDR_BITS wide plus one
#: sticky "at or beyond 2**ADDR_BITS" bit: DMA_LIMIT is below 2**32, so such an address can only
#: ever be refused, and its low 32 bits (ERR_ADDR) are still exact. Strided sums therefore never
#: wrap into the window, without 64-bit adders in the burst loop.
ADDR_BITS = 32
#: SRAM address counters are one bit wider than the ISA fields, so that running past a buffer
#: of the largest encodable depth is still detected instead of wrapping.
SRAM_WADDR_BITS = 21


def burst_layout(hw: HardwareParams) -> data.StructLayout:
    return data.StructLayout({"addr": unsigned(32), "len": unsigned(burst_bits(hw.max_burst))})


def _step(addr, step, step_beyond=0):
    """``addr + step`` as ADDR_BITS bits plus the sticky beyond-2**32 bit (bit ADDR_BITS)."""
    total = addr[:ADDR_BITS] + step
    return Cat(total[:ADDR_BITS], total[ADDR_BITS] | addr[ADDR_BITS] | step_beyond)


def mul_const(value, factor: int):
    """``value * factor`` for a constant ``factor`` as shifts and a balanced tree of adders.

    Yosys maps a ``*`` by a constant that is not a power of two to a DSP multiplier whose
    delay, followed by the carry chain of the product, does not fit a 200 MHz cycle. Every
    pitch the processor uses has at most two bits set (``ceil(9*C/B)`` beats for PRM, powers of
    two otherwise), so this is normally one shift or one adder.
    """
    if factor < 0:
        raise ValueError(f"factor must be >= 0, got {factor}")
    terms = [value << bit for bit in range(factor.bit_length()) if factor >> bit & 1]
    if not terms:
        return Const(0, 1)
    while len(terms) > 1:
        pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(pairs) * 2 :]
    return terms[0]


class BurstPlanner(wiring.Component):
    """Splits a strided 3-D transfer into window-checked, aligned bursts.

    The transfer has ``z_count`` planes of ``y_count`` rows; each row is ``row_beats`` consecutive
    beats starting at ``base + z*z_step + y*y_step`` (bytes). A ``start`` pulse (while idle)
    latches the inputs. Each burst is offered on ``burst`` only after the window check: a burst
    that reaches past DMA_LIMIT is shortened to the beats below it, and a burst whose first beat
    is outside [DMA_BASE, DMA_LIMIT) is never offered; instead ``error`` rises (sticky) with
    ``err_addr`` = that beat's address. So everything inside the window is transferred, nothing
    outside is, and the error names the first byte address that was refused. ``misaligned``
    (sticky) is raised instead if ``base`` is not a multiple of B. ``busy`` is high until the
    last burst has been taken.

    Planning, checking and offering are separate register stages; in steady state a burst takes
    two cycles (check, offer), so with bursts of two or more beats the bus, not the planner, is
    the bottleneck. Each stage has at most one carry chain on any path (timing): PLAN computes
    the burst length and the window distances from ``cur``; CHECK computes every candidate for
    the next ``cur`` and ``left`` (burst fits, burst clipped at DMA_LIMIT, next row, next plane)
    in parallel with the window compare and only selects among them.
    """

    def __init__(self, hw: HardwareParams, row_bits: int = 24):
        self.hw = hw
        super().__init__(
            {
                "start": In(1),
                "base": In(ADDR_BITS),
                "row_beats": In(row_bits),
                "y_count": In(16),
                "z_count": In(16),
                "y_step": In(STEP_BITS),
                "z_step": In(STEP_BITS),
                "win_base": In(32),
                "win_limit": In(32),
                "burst": Out(stream.Signature(burst_layout(hw))),
                "busy": Out(1),
                "error": Out(1),
                "misaligned": Out(1),
                "err_addr": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        hw = self.hw
        lb = exact_log2(hw.bytes_per_beat)
        lm = exact_log2(hw.max_burst)
        bb = burst_bits(hw.max_burst)
        row_beats = Signal.like(self.row_beats)
        # ``y + 1 < y_count`` as ``y < y_count - 1`` (one carry chain): the counts minus one and
        # whether they are nonzero are latched at the start.
        y_lim = Signal(16)
        z_lim = Signal(16)
        y_nonzero = Signal()
        z_nonzero = Signal()
        # Steps as ADDR_BITS bits plus "the step alone reaches 2**ADDR_BITS".
        y_step = Signal(ADDR_BITS)
        z_step = Signal(ADDR_BITS)
        y_step_beyond = Signal()
        z_step_beyond = Signal()
        # Addresses: ADDR_BITS bits plus the sticky beyond-2**ADDR_BITS bit on top.
        plane = Signal(ADDR_BITS + 1)
        row = Signal(ADDR_BITS + 1)
        cur = Signal(ADDR_BITS + 1)
        left = Signal.like(self.row_beats)
        y = Signal(16)
        z = Signal(16)
        c_addr = Signal(ADDR_BITS + 1)
        c_len = Signal(bb)
        room = Signal(signed(ADDR_BITS + 1))  # DMA_LIMIT - burst start (negative: beyond the limit)
        below = Signal()  # burst start below DMA_BASE
        last = Signal()

        # Burst length: up to the next max_burst-aligned boundary, which is max_burst - k beats
        # away (k = beat address mod max_burst), or the rest of the row if that is shorter.
        # ``left < max_burst - k`` is evaluated as ``left + k < max_burst`` so that it needs a
        # single short carry chain.
        k = cur[lb : lb + lm]
        to_boundary = Signal(bb)
        m.d.comb += to_boundary.eq(hw.max_burst - k)
        short_sum = left[:bb] + k
        row_short = (left[bb:] == 0) & (short_sum[lm:] == 0)
        length = Mux(row_short, left[:bb], to_boundary)

        m.d.comb += [
            self.burst.payload.addr.eq(c_addr[:32]),
            self.burst.payload.len.eq(c_len),
        ]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [
                        row_beats.eq(self.row_beats),
                        y_lim.eq(self.y_count - 1),
                        z_lim.eq(self.z_count - 1),
                        y_nonzero.eq(self.y_count != 0),
                        z_nonzero.eq(self.z_count != 0),
                        y_step.eq(self.y_step[:ADDR_BITS]),
                        z_step.eq(self.z_step[:ADDR_BITS]),
                        y_step_beyond.eq(self.y_step[ADDR_BITS:] != 0),
                        z_step_beyond.eq(self.z_step[ADDR_BITS:] != 0),
                        plane.eq(self.base),
                        row.eq(self.base),
                        cur.eq(self.base),
                        left.eq(self.row_beats),
                        y.eq(0),
                        z.eq(0),
                        last.eq(0),
                    ]
                    m.d.comb += self.busy.eq(1)
                    if lb:
                        with m.If(self.base[:lb] != 0):
                            m.d.sync += [self.misaligned.eq(1), self.err_addr.eq(self.base[:32])]
                            m.next = "ERROR"
                        with m.Else():
                            m.next = "PLAN"
                    else:
                        m.next = "PLAN"
            plan = [
                c_addr.eq(cur),
                c_len.eq(length),
                room.eq(self.win_limit - cur[:ADDR_BITS]),
                below.eq(cur[:ADDR_BITS] < self.win_base),
            ]
            with m.State("PLAN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += plan
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                # Whole beats between the burst start and DMA_LIMIT (when the burst start is
                # inside the window). The burst is clipped to them, so everything inside the
                # window is transferred and the error names the first beat that is not. Only
                # room_beats < c_len <= max_burst can clip, so the clipped length is the low
                # bits of room_beats, and the burst fits if any higher bit is set.
                room_beats = room[lb:ADDR_BITS]
                room_lo = room_beats[:bb]
                fits = (room_beats[bb:] != 0) | (room_lo >= c_len)
                # A clipped burst is shorter than ``left`` (c_len <= left), so only a burst
                # that fits can end its row.
                row_end = fits & (left == c_len)
                with m.If(below | c_addr[ADDR_BITS] | room[-1] | (room_beats == 0)):
                    m.d.sync += [self.error.eq(1), self.err_addr.eq(c_addr[:32])]
                    m.next = "ERROR"
                with m.Else():
                    # Advance to the next burst while this one is offered.
                    with m.If(row_end):
                        m.d.sync += left.eq(row_beats)
                        with m.If(y_nonzero & (y < y_lim)):
                            next_row = _step(row, y_step, y_step_beyond)
                            m.d.sync += [y.eq(y + 1), row.eq(next_row), cur.eq(next_row)]
                        with m.Else():
                            next_plane = _step(plane, z_step, z_step_beyond)
                            m.d.sync += [
                                y.eq(0),
                                z.eq(z + 1),
                                plane.eq(next_plane),
                                row.eq(next_plane),
                                cur.eq(next_plane),
                            ]
                            with m.If(~(z_nonzero & (z < z_lim))):
                                m.d.sync += last.eq(1)
                    with m.Elif(fits):
                        m.d.sync += [cur.eq(_step(c_addr, c_len << lb)), left.eq(left - c_len)]
                    with m.Else():
                        m.d.sync += [
                            c_len.eq(room_lo),
                            cur.eq(_step(c_addr, room_lo << lb)),
                            left.eq(left - room_lo),
                        ]
                    m.next = "OFFER"
            with m.State("OFFER"):
                m.d.comb += [self.busy.eq(1), self.burst.valid.eq(1)]
                with m.If(self.burst.ready):
                    with m.If(last):
                        m.next = "IDLE"
                    with m.Else():
                        # ``cur`` already points at the next burst (advanced in CHECK), so plan
                        # it right away: two cycles per burst in steady state.
                        m.d.sync += plan
                        m.next = "CHECK"
            with m.State("ERROR"):
                m.d.comb += self.busy.eq(1)
        return m


class MemoryArbiter(wiring.Component):
    """The Avalon-MM burst master(s) of fetch (read), load (read) and store (write).

    With ``hw.mem_ports == 1`` there is one master, ``bus``, shared by all three clients. One
    command is in the command phase at a time; read commands may be issued while earlier read
    bursts still return data (up to ``outstanding`` bursts), and a small FIFO remembers which
    client each returning beat belongs to (Avalon returns read data in command order). A write
    burst is granted only when its client holds every beat, and it completes before the next
    command. Priority: fetch first (it feeds everything else and is rare), then load and store
    alternate.

    With ``hw.mem_ports == 2`` there are two independent masters: ``bus`` is read-only (fetch
    first, then load, with the same route FIFO) and ``wbus`` is write-only (store). Each has its
    own command phase, so a write burst never holds up a read command and vice versa. The write
    master takes Avalon write responses: a FIFO remembers the address of every granted burst
    (at most WRITE_RESPONSES_OUTSTANDING; no grant while it is full), and each
    ``writeresponsevalid`` retires the oldest one to the store client (``store.wresp``, with
    ``wresp_err`` for a non-OKAY ``response`` and ``wresp_addr``).

    ``halt`` stops new grants; a write burst in progress still completes, as Avalon requires.
    ``idle`` is high when no command is in progress on any master, no read data is outstanding
    and (two ports) no write response is outstanding. ``bus_wait`` is high in a cycle in which a
    command or write beat is held off by ``waitrequest`` (on either master: the MEM_WAIT counter
    counts such cycles once).
    """

    def __init__(self, hw: HardwareParams, outstanding: int = 16):
        self.hw = hw
        self.outstanding = outstanding
        w, mb = hw.mem_data_width, hw.max_burst
        if hw.mem_ports == 1:
            masters = {"bus": Out(MemorySignature(w, mb))}
        else:
            masters = {"bus": Out(ReadMemorySignature(w, mb)), "wbus": Out(WriteMemorySignature(w, mb))}
        super().__init__(
            {
                **masters,
                "fetch": In(ReadClientSignature(w, mb)),
                "load": In(ReadClientSignature(w, mb)),
                "store": In(WriteClientSignature(w, mb, responses=hw.mem_ports == 2)),
                "halt": In(1),
                "idle": Out(1),
                "rd_beat": Out(1),
                "wr_beat": Out(1),
                "bus_wait": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bb = burst_bits(self.hw.max_burst)
        route = fifo.SyncFIFO(width=1 + bb, depth=self.outstanding)
        m.submodules.route = route
        if self.hw.mem_ports == 1:
            self._shared_master(m, route, bb)
        else:
            self._split_masters(m, route, bb)
        return m

    def _shared_master(self, m: Module, route: fifo.SyncFIFO, bb: int) -> None:
        """One read/write master for all three clients."""
        addr = Signal(32)
        length = Signal(bb)
        client = Signal()  # 0 fetch, 1 load (for reads)
        beat = Signal(bb)  # write beats accepted in this burst
        prefer_store = Signal()

        bus = self.bus
        m.d.comb += [bus.address.eq(addr), bus.burstcount.eq(length)]

        with m.FSM() as fsm:
            with m.State("IDLE"):
                can_read = route.w_rdy & ~self.halt
                with m.If(can_read & self.fetch.req_valid):
                    m.d.comb += self.fetch.req_ready.eq(1)
                    m.d.sync += [addr.eq(self.fetch.req_addr), length.eq(self.fetch.req_len), client.eq(0)]
                    m.next = "READ"
                with m.Elif(~self.halt & self.store.req_valid & (prefer_store | ~self.load.req_valid)):
                    m.d.comb += self.store.req_ready.eq(1)
                    m.d.sync += [
                        addr.eq(self.store.req_addr),
                        length.eq(self.store.req_len),
                        beat.eq(0),
                        prefer_store.eq(0),
                    ]
                    m.next = "WRITE"
                with m.Elif(can_read & self.load.req_valid):
                    m.d.comb += self.load.req_ready.eq(1)
                    m.d.sync += [
                        addr.eq(self.load.req_addr),
                        length.eq(self.load.req_len),
                        client.eq(1),
                        prefer_store.eq(1),
                    ]
                    m.next = "READ"
            with m.State("READ"):
                self._read_command(m, bus, route, client, length, self.bus_wait)
            with m.State("WRITE"):
                self._write_beats(m, bus, beat, length, self.bus_wait)

        self._route_reads(m, bus, route)
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & ~route.r_rdy)

    def _split_masters(self, m: Module, route: fifo.SyncFIFO, bb: int) -> None:
        """A read-only master (fetch, load) and a write-only master (store), independent."""
        rbus, wbus = self.bus, self.wbus
        addr = Signal(32)
        length = Signal(bb)
        client = Signal()  # 0 fetch, 1 load
        m.d.comb += [rbus.address.eq(addr), rbus.burstcount.eq(length)]
        rd_wait = Signal()
        with m.FSM(name="read_fsm") as read_fsm:
            with m.State("IDLE"):
                can_read = route.w_rdy & ~self.halt
                with m.If(can_read & self.fetch.req_valid):
                    m.d.comb += self.fetch.req_ready.eq(1)
                    m.d.sync += [addr.eq(self.fetch.req_addr), length.eq(self.fetch.req_len), client.eq(0)]
                    m.next = "READ"
                with m.Elif(can_read & self.load.req_valid):
                    m.d.comb += self.load.req_ready.eq(1)
                    m.d.sync += [addr.eq(self.load.req_addr), length.eq(self.load.req_len), client.eq(1)]
                    m.next = "READ"
            with m.State("READ"):
                self._read_command(m, rbus, route, client, length, rd_wait)

        waddr = Signal(32)
        wlength = Signal(bb)
        beat = Signal(bb)  # write beats accepted in this burst
        m.d.comb += [wbus.address.eq(waddr), wbus.burstcount.eq(wlength)]
        # Bursts granted whose write response has not returned, oldest first (their addresses,
        # for ERR_ADDR). A burst enters at its grant, before its command is on the bus, so a
        # response always finds its entry; the slave answers bursts in command order.
        m.submodules.wresp_route = wresp = fifo.SyncFIFO(width=32, depth=WRITE_RESPONSES_OUTSTANDING)
        m.d.comb += [
            wresp.w_data.eq(self.store.req_addr),
            wresp.w_en.eq(self.store.req_ready),
            self.store.wresp_addr.eq(wresp.r_data),
            self.store.wresp.eq(wbus.writeresponsevalid & wresp.r_rdy),
            self.store.wresp_err.eq(wbus.response != Response.OKAY),
            wresp.r_en.eq(wbus.writeresponsevalid),
        ]
        wr_wait = Signal()
        with m.FSM(name="write_fsm") as write_fsm:
            with m.State("IDLE"):
                with m.If(~self.halt & self.store.req_valid & wresp.w_rdy):
                    m.d.comb += self.store.req_ready.eq(1)
                    m.d.sync += [waddr.eq(self.store.req_addr), wlength.eq(self.store.req_len), beat.eq(0)]
                    m.next = "WRITE"
            with m.State("WRITE"):
                self._write_beats(m, wbus, beat, wlength, wr_wait)

        self._route_reads(m, rbus, route)
        m.d.comb += [
            self.bus_wait.eq(rd_wait | wr_wait),
            # Idle also needs every write response back: BUSY must not fall (and the host must
            # not read the results) while a write may not yet be visible to other masters.
            self.idle.eq(read_fsm.ongoing("IDLE") & write_fsm.ongoing("IDLE") & ~route.r_rdy
                         & ~wresp.r_rdy),
        ]

    @staticmethod
    def _read_command(m: Module, bus, route: fifo.SyncFIFO, client, length, wait) -> None:
        """READ state: hold the command until accepted, then remember whose burst it is."""
        m.d.comb += bus.read.eq(1)
        with m.If(bus.waitrequest):
            m.d.comb += wait.eq(1)
        with m.Else():
            m.d.comb += [route.w_en.eq(1), route.w_data.eq(Cat(client, length))]
            m.next = "IDLE"

    def _write_beats(self, m: Module, bus, beat, length, wait) -> None:
        """WRITE state: pass the store client's beats to ``bus`` until the burst is complete."""
        # The client holds the whole burst, so wvalid stays high; gating write with it
        # anyway keeps the beat and its data together should that ever change.
        m.d.comb += [
            bus.write.eq(self.store.wvalid),
            bus.writedata.eq(self.store.wdata),
            bus.byteenable.eq(self.store.wbe),
        ]
        with m.If(self.store.wvalid):
            with m.If(bus.waitrequest):
                m.d.comb += wait.eq(1)
            with m.Else():
                m.d.comb += [self.store.wack.eq(1), self.wr_beat.eq(1)]
                m.d.sync += beat.eq(beat + 1)
                with m.If(beat + 1 == length):
                    m.next = "IDLE"

    def _route_reads(self, m: Module, bus, route: fifo.SyncFIFO) -> None:
        """Read data: route each beat to the client at the head of the route FIFO."""
        bb = burst_bits(self.hw.max_burst)
        head_client = route.r_data[0]
        head_len = route.r_data[1:]
        got = Signal(bb)
        m.d.comb += [
            self.fetch.rsp_data.eq(bus.readdata),
            self.load.rsp_data.eq(bus.readdata),
        ]
        with m.If(bus.readdatavalid & route.r_rdy):
            m.d.comb += [
                self.fetch.rsp_valid.eq(head_client == 0),
                self.load.rsp_valid.eq(head_client == 1),
                self.rd_beat.eq(1),
            ]
            with m.If(got + 1 == head_len):
                m.d.comb += route.r_en.eq(1)
                m.d.sync += got.eq(0)
            with m.Else():
                m.d.sync += got.eq(got + 1)


def granted_beats(m: Module, req_ready, req_len) -> Signal:
    """The length of the burst the arbiter granted in the previous cycle (0 if none).

    Clients count a granted burst against their credits through this register, one cycle late,
    so that no path runs from the arbiter's grant decision back into the credit counters. That
    is exact for every decision the counters feed: a :class:`BurstPlanner` never offers a burst
    in the cycle after one was granted (it is in CHECK or IDLE then), and in that cycle the
    client's FIFO still holds the burst's beats (write) or the planner cannot have failed yet
    (read), so no completion or error test can see the stale count.
    """
    granted = Signal.like(req_len)
    m.d.sync += granted.eq(Mux(req_ready, req_len, 0))
    return granted


def _latch_error(m: Module, unit: wiring.Component, code: ErrorCode, addr=None) -> None:
    """Record the unit's (first) error; the unit then stays in its ERROR state until cleared."""
    m.d.sync += [unit.error.eq(1), unit.error_code.eq(code)]
    if addr is not None:
        m.d.sync += unit.err_addr.eq(addr)


def planner_requests(planner: BurstPlanner, mem, may_request) -> list:
    """The planner's bursts offered to the unit's memory client while ``may_request`` (the unit
    has room for, or data of, the whole burst): the statements both units share."""
    return [
        mem.req_valid.eq(planner.burst.valid & may_request),
        mem.req_addr.eq(planner.burst.payload.addr),
        mem.req_len.eq(planner.burst.payload.len),
        planner.burst.ready.eq(mem.req_ready),
    ]


def planner_window(planner: BurstPlanner, unit: wiring.Component) -> list:
    """The DMA window (DMA_BASE, DMA_LIMIT) the unit's planner checks every burst against."""
    return [planner.win_base.eq(unit.win_base), planner.win_limit.eq(unit.win_limit)]


def planner_start(planner: BurstPlanner, dram_addr, row_beats, ins, y_step, z_step) -> list:
    """The START state's statements: one pulse hands the instruction's transfer to the planner."""
    return [
        planner.start.eq(1),
        planner.base.eq(dram_addr),
        planner.row_beats.eq(row_beats),
        planner.y_count.eq(ins.y_size),
        planner.z_count.eq(ins.z_size),
        planner.y_step.eq(y_step),
        planner.z_step.eq(z_step),
    ]


def final_states(m: Module, unit: wiring.Component) -> None:
    """DONE (one cycle of ``done``, then IDLE) and ERROR (held until the processor is reset)."""
    with m.State("DONE"):
        m.d.comb += unit.done.eq(1)
        m.next = "IDLE"
    with m.State("ERROR"):
        pass


class LoadUnit(wiring.Component):
    """Executes LOAD: strided DRAM reads into INP, WGT or PRM with padding inserted on the fly.

    Two halves run concurrently for one instruction. The burst planner requests the rows of the
    unpadded block (row ``(z, y)`` starts at ``dram_addr + (z*z_stride + y*y_stride) * pitch``)
    as long as the beat FIFO has room reserved for the whole burst (read data has no
    back-pressure on Avalon, so the credit counter guarantees the FIFO can never overflow). The
    writer walks the dense padded block in SRAM order, one word per cycle: padding positions get
    ``pad_value`` in every byte; data positions take ``elem_beats`` beats from the FIFO and keep
    the first ``elem_bytes`` bytes. Because DRAM rows and SRAM rows are visited in the same
    (z, y, x) order, the beats arrive exactly in the order the writer needs them.
    """

    def __init__(self, hw: HardwareParams):
        self.hw = hw
        w, mb = hw.mem_data_width, hw.max_burst
        super().__init__(
            {
                "insn": In(stream.Signature(INSN_LAYOUT)),
                "done": Out(1),
                "mem": Out(ReadClientSignature(w, mb)),
                "inp_w": In(write_port_signature(hw, "INP")),
                "wgt_w": In(write_port_signature(hw, "WGT")),
                "prm_w": In(write_port_signature(hw, "PRM")),
                # The INP write port is taken this cycle by the compute unit (CONV.to_inp):
                # write nothing, consume no beat, advance nothing.
                "hold": In(1),
                "win_base": In(32),
                "win_limit": In(32),
                "error": Out(1),
                "error_code": Out(8),
                "err_addr": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        hw = self.hw
        bufs = {Buf.INP: "INP", Buf.WGT: "WGT", Buf.PRM: "PRM"}
        ports = {Buf.INP: self.inp_w, Buf.WGT: self.wgt_w, Buf.PRM: self.prm_w}

        m.submodules.planner = planner = BurstPlanner(hw)
        m.submodules.beats = beats = fifo.SyncFIFOBuffered(width=hw.mem_data_width, depth=hw.read_credits)

        # Read credits: FIFO room not yet promised to a requested burst. A grant is counted one
        # cycle late (see ``granted_beats``), so the arbiter's decision has no path back into
        # this counter, and the check is a single compare.
        free = Signal(range(hw.read_credits + 1), init=hw.read_credits)
        granted = granted_beats(m, self.mem.req_ready, self.mem.req_len)
        credit_ok = free >= planner.burst.payload.len
        m.d.comb += [
            *planner_requests(planner, self.mem, credit_ok),
            beats.w_en.eq(self.mem.rsp_valid),
            beats.w_data.eq(self.mem.rsp_data),
            *planner_window(planner, self),
        ]
        m.d.sync += free.eq(free + beats.r_en - granted)

        ins = Signal(LOAD_LAYOUT)
        y_step = Signal(STEP_BITS)
        z_step = Signal(STEP_BITS)
        row_beats = Signal(24)
        hp = Signal(17)
        wp = Signal(17)
        y_hi = Signal(17)
        x_hi = Signal(17)
        waddr = Signal(SRAM_WADDR_BITS)
        xp = Signal(17)
        yp = Signal(17)
        zc = Signal(16)
        beat_idx = Signal(range(max(hw.elem_beats(b) for b in bufs.values()) + 1))
        max_beats = max(hw.elem_beats(b) for b in bufs.values())
        slots = [Signal(hw.mem_data_width, name=f"slot{i}") for i in range(max_beats - 1)]

        nb = Signal.like(beat_idx)  # beats per element of the selected buffer
        depth = Signal(SRAM_WADDR_BITS)
        with m.Switch(ins.buf):
            for code, name in bufs.items():
                with m.Case(code):
                    m.d.comb += [nb.eq(hw.elem_beats(name)), depth.eq(hw.depth(name))]

        is_pad = (yp < ins.pad_top) | (yp >= y_hi) | (xp < ins.pad_left) | (xp >= x_hi)
        we = Signal()
        for code, name in bufs.items():
            port = ports[code]
            n = hw.elem_beats(name)
            nbytes = hw.elem_bytes(name)
            assembled = Cat(*slots[: n - 1], beats.r_data)[: 8 * nbytes]
            pad_word = Cat(*([ins.pad_value] * nbytes))
            m.d.comb += [
                port.addr.eq(waddr),
                port.data.eq(Mux(is_pad, pad_word, assembled)),
                port.en.eq(we & (ins.buf == code)),
            ]

        last_x = xp + 1 == wp
        last_y = yp + 1 == hp
        last_z = zc + 1 == ins.z_size

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.insn.ready.eq(1)
                with m.If(self.insn.valid):
                    m.d.sync += ins.eq(self.insn.payload.load)
                    m.next = "SETUP"
            with m.State("SETUP"):
                bad = (ins.buf > Buf.PRM) | (ins.x_size == 0) | (ins.y_size == 0) | (ins.z_size == 0)
                with m.If(bad):
                    _latch_error(m, self, ErrorCode.ILLEGAL_FIELD)
                    m.next = "ERROR"
                with m.Else():
                    with m.Switch(ins.buf):
                        for code, name in bufs.items():
                            with m.Case(code):
                                pitch = hw.pitch(name)
                                m.d.sync += [
                                    y_step.eq(mul_const(ins.y_stride, pitch)),
                                    z_step.eq(mul_const(ins.z_stride, pitch)),
                                    row_beats.eq(mul_const(ins.x_size, hw.elem_beats(name))),
                                ]
                    m.d.sync += [
                        hp.eq(ins.y_size + ins.pad_top + ins.pad_bottom),
                        wp.eq(ins.x_size + ins.pad_left + ins.pad_right),
                        y_hi.eq(ins.pad_top + ins.y_size),
                        x_hi.eq(ins.pad_left + ins.x_size),
                        waddr.eq(ins.sram_base),
                        xp.eq(0),
                        yp.eq(0),
                        zc.eq(0),
                        beat_idx.eq(0),
                    ]
                    m.next = "START"
            with m.State("START"):
                m.d.comb += planner_start(planner, ins.dram_addr, row_beats, ins, y_step, z_step)
                m.next = "RUN"
            with m.State("RUN"):
                advance = Signal()
                with m.If(planner.error):
                    _latch_error(m, self, ErrorCode.DMA_LOAD, planner.err_addr)
                    m.next = "ERROR"
                with m.Elif(planner.misaligned):
                    _latch_error(m, self, ErrorCode.ILLEGAL_FIELD, planner.err_addr)
                    m.next = "ERROR"
                with m.Elif(waddr >= depth):
                    _latch_error(m, self, ErrorCode.SRAM_RANGE)
                    m.next = "ERROR"
                with m.Elif(self.hold & (ins.buf == Buf.INP)):
                    pass
                with m.Elif(is_pad):
                    m.d.comb += [we.eq(1), advance.eq(1)]
                with m.Elif(beats.r_rdy):
                    m.d.comb += beats.r_en.eq(1)
                    with m.If(beat_idx + 1 == nb):
                        m.d.comb += [we.eq(1), advance.eq(1)]
                        m.d.sync += beat_idx.eq(0)
                    with m.Else():
                        m.d.sync += beat_idx.eq(beat_idx + 1)
                        with m.Switch(beat_idx):
                            for i, slot in enumerate(slots):
                                with m.Case(i):
                                    m.d.sync += slot.eq(beats.r_data)
                with m.If(advance):
                    m.d.sync += [waddr.eq(waddr + 1), xp.eq(xp + 1)]
                    with m.If(last_x):
                        m.d.sync += [xp.eq(0), yp.eq(yp + 1)]
                        with m.If(last_y):
                            m.d.sync += [yp.eq(0), zc.eq(zc + 1)]
                            with m.If(last_z):
                                m.next = "DONE"
            final_states(m, self)
        return m


class StoreUnit(wiring.Component):
    """Executes STORE (strided writes from OUT to DRAM) and MARK (profile time stamps).

    STORE: a reader walks the OUT words densely, one word per ``elem_beats`` cycles, and turns
    each word into bus beats (the element's bytes first, the last beat partially enabled) in a
    beat FIFO. The burst planner walks the DRAM rows; a burst is requested only once the FIFO
    holds all of its beats, so the arbiter can stream it without gaps. With one memory master the
    instruction completes when the last beat has been accepted (the same master/slave pair keeps
    later reads in order). With two (``MemoryPorts = 2``) a later LOAD reads on the other master,
    which an accepted write is not ordered with, so the instruction completes only when the write
    response of every one of its bursts has returned; a non-OKAY response stops the unit with
    WRITE_RESPONSE and ERR_ADDR = that burst's first byte address.

    MARK: executes in order behind the STOREs before it, so when it starts every earlier store is
    complete; it writes the cycle counter into profile entry ``index``.
    """

    def __init__(self, hw: HardwareParams):
        self.hw = hw
        w, mb = hw.mem_data_width, hw.max_burst
        super().__init__(
            {
                "insn": In(stream.Signature(INSN_LAYOUT)),
                "done": Out(1),
                "mem": Out(WriteClientSignature(w, mb, responses=hw.mem_ports == 2)),
                "out_r": In(read_port_signature(hw, "OUT")),
                "win_base": In(32),
                "win_limit": In(32),
                "cycles": In(64),
                "prof_w": In(memory.WritePort.Signature(addr_width=profile_addr_bits(hw), shape=64)),
                "prof_count": Out(32),
                "error": Out(1),
                "error_code": Out(8),
                "err_addr": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        hw = self.hw
        w = hw.mem_data_width
        bpb = hw.bytes_per_beat
        nb = hw.elem_beats("OUT")
        fifo_depth = 2 * hw.max_burst

        m.submodules.planner = planner = BurstPlanner(hw)
        m.submodules.beats = beats = fifo.SyncFIFOBuffered(width=w + bpb, depth=fifo_depth)

        # Beats granted to the arbiter but not yet accepted by the memory (``pending``), and
        # beats in the FIFO not yet granted (``avail``, which is FIFO level - pending, kept as
        # its own counter so that the request check is a single compare). Grants are counted
        # one cycle late (see ``granted_beats``).
        pending = Signal(range(fifo_depth + 1))
        avail = Signal(range(fifo_depth + 1))
        granted = granted_beats(m, self.mem.req_ready, self.mem.req_len)
        m.d.comb += [
            *planner_requests(planner, self.mem, avail >= planner.burst.payload.len),
            self.mem.wvalid.eq(beats.r_rdy),
            self.mem.wdata.eq(beats.r_data[:w]),
            self.mem.wbe.eq(beats.r_data[w:]),
            beats.r_en.eq(self.mem.wack),
            *planner_window(planner, self),
        ]
        m.d.sync += [
            pending.eq(pending + granted - self.mem.wack),
            avail.eq(avail + beats.w_en - granted),
        ]
        # Two ports: bursts granted whose write response has not returned. The grant is counted
        # one cycle late like the beats; a response can only follow the burst's last beat, which
        # is accepted after that, so the counter never goes below zero and is exact whenever
        # ``pending`` is zero.
        if hw.mem_ports == 2:
            resp_pending = Signal(range(WRITE_RESPONSES_OUTSTANDING + 1))
            m.d.sync += resp_pending.eq(resp_pending + (granted != 0) - self.mem.wresp)
            responses_done = resp_pending == 0

        ins = Signal(STORE_LAYOUT)
        y_step = Signal(STEP_BITS)
        z_step = Signal(STEP_BITS)
        raddr = Signal(SRAM_WADDR_BITS)
        xc = Signal(16)
        yc = Signal(16)
        zc = Signal(16)
        reading = Signal()  # words remain to be read from OUT
        word_valid = Signal()  # out_r.data holds a word not yet turned into beats
        beat_idx = Signal(range(nb + 1))

        # Beat j of a word carries bytes j*B .. j*B+B-1 of the element; bytes beyond C are off.
        word_bits = Cat(self.out_r.data.as_value(), Const(0, nb * w - 8 * hw.c))
        beat_data = Signal(w)
        beat_be = Signal(bpb)
        with m.Switch(beat_idx):
            for j in range(nb):
                with m.Case(j):
                    valid_bytes = min(bpb, hw.c - j * bpb)
                    m.d.comb += [
                        beat_data.eq(word_bits[j * w : (j + 1) * w]),
                        beat_be.eq((1 << valid_bytes) - 1),
                    ]
        m.d.comb += [beats.w_data.eq(Cat(beat_data, beat_be)), self.out_r.addr.eq(raddr)]
        # A read port's ``en`` has init 1 (amaranth.lib.memory), so it must be driven low
        # explicitly: the word on ``out_r.data`` has to hold until all its beats are queued.
        m.d.comb += self.out_r.en.eq(0)

        mark_index = Signal(16)
        m.d.comb += [
            self.prof_w.addr.eq(mark_index),
            self.prof_w.data.eq(self.cycles),
        ]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.insn.ready.eq(1)
                with m.If(self.insn.valid):
                    m.d.sync += [ins.eq(self.insn.payload.store), mark_index.eq(self.insn.payload.mark.index)]
                    with m.If(self.insn.payload.header.opcode == Opcode.MARK):
                        m.next = "MARK"
                    with m.Else():
                        m.next = "SETUP"
            with m.State("MARK"):
                with m.If(mark_index >= hw.profile_depth):
                    _latch_error(m, self, ErrorCode.ILLEGAL_FIELD)
                    m.next = "ERROR"
                with m.Else():
                    m.d.comb += self.prof_w.en.eq(1)
                    m.d.sync += self.prof_count.eq(self.prof_count + 1)
                    m.next = "DONE"
            with m.State("SETUP"):
                with m.If((ins.x_size == 0) | (ins.y_size == 0) | (ins.z_size == 0)):
                    _latch_error(m, self, ErrorCode.ILLEGAL_FIELD)
                    m.next = "ERROR"
                with m.Else():
                    pitch = hw.pitch("OUT")
                    m.d.sync += [
                        y_step.eq(mul_const(ins.y_stride, pitch)),
                        z_step.eq(mul_const(ins.z_stride, pitch)),
                        raddr.eq(ins.sram_base),
                        xc.eq(0),
                        yc.eq(0),
                        zc.eq(0),
                        reading.eq(1),
                        word_valid.eq(0),
                        beat_idx.eq(0),
                    ]
                    m.next = "START"
            with m.State("START"):
                m.d.comb += planner_start(planner, ins.dram_addr, mul_const(ins.x_size, nb), ins, y_step, z_step)
                m.next = "RUN"
            with m.State("RUN"):
                # Turn the word on out_r.data into beats, one per cycle while the FIFO has room.
                word_consumed = Signal()
                with m.If(word_valid & beats.w_rdy):
                    m.d.comb += beats.w_en.eq(1)
                    with m.If(beat_idx + 1 == nb):
                        m.d.comb += word_consumed.eq(1)
                        m.d.sync += [beat_idx.eq(0), word_valid.eq(0)]
                    with m.Else():
                        m.d.sync += beat_idx.eq(beat_idx + 1)
                # Read the next word when the port's output is free (or freed this cycle).
                with m.If(reading & (~word_valid | word_consumed)):
                    with m.If(raddr >= hw.out_depth):
                        _latch_error(m, self, ErrorCode.SRAM_RANGE)
                        m.next = "ERROR"
                    with m.Else():
                        m.d.comb += self.out_r.en.eq(1)
                        m.d.sync += [raddr.eq(raddr + 1), word_valid.eq(1), xc.eq(xc + 1)]
                        with m.If(xc + 1 == ins.x_size):
                            m.d.sync += [xc.eq(0), yc.eq(yc + 1)]
                            with m.If(yc + 1 == ins.y_size):
                                m.d.sync += [yc.eq(0), zc.eq(zc + 1)]
                                with m.If(zc + 1 == ins.z_size):
                                    m.d.sync += reading.eq(0)
                finished = ~reading & ~word_valid & ~planner.busy & ~beats.r_rdy & (pending == 0)
                if hw.mem_ports == 2:
                    # An error response is checked first; it only arrives while RUN waits for
                    # this instruction's responses (or later, in ERROR, where it is dropped).
                    finished = finished & responses_done
                    with m.If(self.mem.wresp & self.mem.wresp_err):
                        _latch_error(m, self, ErrorCode.WRITE_RESPONSE, self.mem.wresp_addr)
                        m.next = "ERROR"
                    chain = m.Elif
                else:
                    chain = m.If
                with chain(planner.error):
                    _latch_error(m, self, ErrorCode.DMA_STORE, planner.err_addr)
                    m.next = "ERROR"
                with m.Elif(planner.misaligned):
                    _latch_error(m, self, ErrorCode.ILLEGAL_FIELD, planner.err_addr)
                    m.next = "ERROR"
                with m.Elif(finished):
                    m.next = "DONE"
            final_states(m, self)
        return m


def profile_addr_bits(hw: HardwareParams) -> int:
    return max(1, (hw.profile_depth - 1).bit_length())

