"""``DlprocTop``: the whole processor with exactly the contract's ports.

Ports (Verilog names after flattening):

* ``clk``, ``rst``: the Amaranth ``sync`` domain (synchronous, active-high reset).
* ``csr__address[CSR_ADDR_BITS]``, ``csr__read``, ``csr__write``, ``csr__writedata[32]``,
  ``csr__readdata[32]``: Avalon-MM slave, word addresses, read latency 1, no waitrequest.
* ``mem__address[32]``, ``mem__burstcount``, ``mem__read``, ``mem__write``, ``mem__writedata[W]``,
  ``mem__byteenable[W/8]``, ``mem__waitrequest``, ``mem__readdata[W]``, ``mem__readdatavalid``:
  Avalon-MM pipelined burst master, byte addresses.
* With ``MemoryPorts = 2`` (``hw.mem_ports``) the memory master is split in two: ``mem__*`` is
  read-only (``address``, ``burstcount``, ``read``, ``waitrequest``, ``readdata``,
  ``readdatavalid``; fetch and load) and ``mem1__*`` write-only (``address``, ``burstcount``,
  ``write``, ``writedata``, ``byteenable``, ``waitrequest``, and the write responses
  ``writeresponsevalid``, ``response[2]``; store), each ``W`` bits wide.
* ``irq``: level, high while (STATUS.DONE or STATUS.ERROR) and CTRL.IRQ_EN.

Structure::

    CSR --> control FSM --run--> fetch --+--> [queue|gate] --> load ----+--> INP/WGT/PRM
                                         +--> [queue|gate] --> compute -+--> OUT (reads INP/WGT/PRM)
                                         +--> [queue|gate] --> store  <-+-- OUT ; --> profile
    fetch, load, store <--> memory arbiter <--> mem (Avalon master)
                                            (MemoryPorts = 2: fetch, load --> mem; store --> mem1)

Control: START (while idle) pulses ``clear``, a synchronous reset of every datapath unit, so each
run begins from a clean state, then RUN. The run ends on DONE (FINISH reached and every unit
idle), on the first error of any unit, or on ABORT. In all three cases the control first
*drains*: the arbiter grants nothing new, finishes a write burst in progress (Avalon bursts cannot
be abandoned) and collects every outstanding read beat and (two masters) every outstanding write response; only
then is BUSY cleared, so the bus is quiet whenever the host sees the processor idle (with two
masters: both are quiet, and every write is visible to the host's reads).
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware import regmap
from dlproc.hardware.isa import ErrorCode, HardwareParams
from dlproc.hardware.gateware.avalon import CsrSignature, MemorySignature, ReadMemorySignature, WriteMemorySignature
from dlproc.hardware.gateware.buffers import Buffers
from dlproc.hardware.gateware.csr import CsrBlock
from dlproc.hardware.gateware.dma import LoadUnit, MemoryArbiter, StoreUnit
from dlproc.hardware.gateware.fetch import FetchUnit
from dlproc.hardware.gateware.profile import ProfileBuffer
from dlproc.hardware.gateware.tokens import InstructionQueue, TokenCounters, TokenGate

DEADLOCK_CYCLES = 16  #: the deadlock condition must hold this long (covers queue latencies)


def _make_compute(hw: HardwareParams) -> wiring.Component:
    """The compute unit (``dlproc.hardware.gateware.compute.ComputeUnit``, owned by the compute engineer).

    Its ports, as this top level uses them: ``insn`` (CONV/POOL/FINISH, ``INSN_LAYOUT`` stream),
    the token ports ``tok_l2c_valid/pop``, ``tok_s2c_valid/pop``, ``tok_c2l_push``,
    ``tok_c2s_push``, the memory ports ``inp``, ``wgt``, ``prm`` (read) and ``out`` (write) as
    the memories see them flipped, and ``busy``, ``stall``, ``finished``, ``error``,
    ``error_code``.
    """
    from dlproc.hardware.gateware.compute import ComputeUnit

    return ComputeUnit(hw)


def hardware_params(config_or_hw: Any) -> HardwareParams:
    if isinstance(config_or_hw, HardwareParams):
        return config_or_hw
    return HardwareParams.from_config(config_or_hw)


class DlprocTop(wiring.Component):
    """The processor. ``DlprocTop(config)`` takes a ProcessorConfig (or a HardwareParams)."""

    def __init__(self, config: Any):
        self.hw = hw = hardware_params(config)
        w, mb = hw.mem_data_width, hw.max_burst
        if hw.mem_ports == 1:
            masters = {"mem": Out(MemorySignature(w, mb))}
        else:
            masters = {"mem": Out(ReadMemorySignature(w, mb)), "mem1": Out(WriteMemorySignature(w, mb))}
        super().__init__({"csr": In(CsrSignature(regmap.CSR_ADDR_BITS)), **masters, "irq": Out(1)})
        # Sub-blocks are built here so that simulations can reach them (memories, status).
        self.csr_block = CsrBlock(hw)
        self.fetch = FetchUnit(hw)
        self.load_gate = TokenGate(hw)
        self.compute_queue = InstructionQueue(hw)
        self.store_gate = TokenGate(hw)
        self.tokens = TokenCounters(hw)
        self.load = LoadUnit(hw)
        self.store = StoreUnit(hw)
        self.compute = _make_compute(hw)
        self.arbiter = MemoryArbiter(hw)
        self.buffers = Buffers(hw)
        self.profile = ProfileBuffer(hw)

    def elaborate(self, platform):
        m = Module()
        csr = self.csr_block
        clear = Signal()
        # Datapath units restart from reset on every START; memories, CSRs and the arbiter
        # (which is idle whenever START is accepted) are not affected.
        datapath = {
            "fetch": self.fetch,
            "load_gate": self.load_gate,
            "compute_queue": self.compute_queue,
            "store_gate": self.store_gate,
            "tokens": self.tokens,
            "load": self.load,
            "store": self.store,
            "compute": self.compute,
        }
        for name, block in datapath.items():
            m.submodules[name] = ResetInserter(clear)(block)
        m.submodules.csr = csr
        m.submodules.arbiter = arb = self.arbiter
        m.submodules.buffers = bufs = self.buffers
        m.submodules.profile = prof = self.profile

        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        wiring.connect(m, wiring.flipped(self.mem), arb.bus)
        if self.hw.mem_ports == 2:
            wiring.connect(m, wiring.flipped(self.mem1), arb.wbus)
        wiring.connect(m, self.fetch.mem, arb.fetch)
        wiring.connect(m, self.load.mem, arb.load)
        wiring.connect(m, self.store.mem, arb.store)

        # Queues, gates and tokens: load <-> compute (l2c, c2l), compute <-> store (c2s, s2c).
        fetch = self.fetch
        comp = self.compute
        cq = self.compute_queue
        tok = self.tokens
        lg, sg = self.load_gate, self.store_gate
        wiring.connect(m, fetch.to_load, lg.enq)
        wiring.connect(m, fetch.to_compute, cq.enq)
        wiring.connect(m, fetch.to_store, sg.enq)
        wiring.connect(m, lg.insn, self.load.insn)
        wiring.connect(m, cq.deq, comp.insn)
        wiring.connect(m, sg.insn, self.store.insn)
        m.d.comb += [
            lg.done.eq(self.load.done),
            sg.done.eq(self.store.done),
            lg.next_avail.eq(tok.c2l_avail),
            tok.c2l_take.eq(lg.take_next),
            tok.l2c_give.eq(lg.give_next),
            comp.tok_l2c_valid.eq(tok.l2c_avail),
            tok.l2c_take.eq(comp.tok_l2c_pop),
            tok.c2l_give.eq(comp.tok_c2l_push),
            comp.tok_s2c_valid.eq(tok.s2c_avail),
            tok.s2c_take.eq(comp.tok_s2c_pop),
            tok.c2s_give.eq(comp.tok_c2s_push),
            sg.prev_avail.eq(tok.c2s_avail),
            tok.c2s_take.eq(sg.take_prev),
            tok.s2c_give.eq(sg.give_prev),
        ]

        # Buffers.
        # INP has one write port and two writers: the load unit and the results of a CONV with
        # to_inp. The compute unit's writes come from the output stage, which cannot wait, so
        # they win; the load unit holds its word for that cycle (``hold``: its beats wait in the
        # read-data FIFO, whose credits already cover them).
        cw, lw = comp.inp_w, self.load.inp_w
        m.d.comb += [
            bufs.inp_w.en.eq(cw.en | lw.en),
            bufs.inp_w.addr.eq(Mux(cw.en, cw.addr, lw.addr)),
            bufs.inp_w.data.eq(Mux(cw.en, cw.data, lw.data)),
            self.load.hold.eq(cw.en),
        ]
        wiring.connect(m, self.load.wgt_w, bufs.wgt_w)
        wiring.connect(m, self.load.prm_w, bufs.prm_w)
        wiring.connect(m, comp.inp, bufs.inp_r)
        wiring.connect(m, comp.wgt, bufs.wgt_r)
        wiring.connect(m, comp.prm, bufs.prm_r)
        wiring.connect(m, comp.out, bufs.out_w)
        wiring.connect(m, self.store.out_r, bufs.out_r)
        wiring.connect(m, self.store.prof_w, prof.w)
        m.d.comb += [prof.index.eq(csr.prof_index), csr.prof_data.eq(prof.data)]

        # Run-time registers go to the units as the host wrote them; the host must not change
        # them while BUSY (documented in docs/registers.md).
        for unit in (fetch, self.load, self.store):
            m.d.comb += [unit.win_base.eq(csr.dma_base), unit.win_limit.eq(csr.dma_limit)]
        m.d.comb += [fetch.insn_base.eq(csr.insn_base), fetch.insn_count.eq(csr.insn_count)]

        # ---- control ------------------------------------------------------------------------
        busy = Signal()
        done = Signal()
        error = Signal()
        error_code = Signal(8)
        err_insn = Signal(32)
        err_addr = Signal(32)
        cycles = Signal(64)
        # CYCLES counts in two 32-bit halves (timing: no 64-bit carry chain). The upper half
        # steps when the lower one wraps; ``cycles_lo_max`` (the lower half is all ones) is kept
        # as a register, so the value is exactly that of a 64-bit counter in every cycle.
        cycles_lo_max = Signal()

        def count_cycle():
            m.d.sync += [cycles[:32].eq(cycles[:32] + 1), cycles_lo_max.eq(cycles[:32] == 0xFFFF_FFFE)]
            with m.If(cycles_lo_max):
                m.d.sync += cycles[32:].eq(cycles[32:] + 1)

        halt = Signal()
        m.d.comb += [
            arb.halt.eq(halt),
            self.store.cycles.eq(cycles),
            csr.busy.eq(busy),
            csr.done.eq(done),
            csr.error.eq(error),
            csr.error_code.eq(error_code),
            csr.err_insn.eq(err_insn),
            csr.err_addr.eq(err_addr),
            csr.cycles.eq(cycles),
            csr.fetched.eq(fetch.fetched),
            csr.prof_count.eq(self.store.prof_count),
            self.irq.eq(csr.irq_en & (done | error)),
        ]

        # Error sources in priority order: (flag, code, instruction index, address).
        deadlock = Signal()
        sources = [
            (fetch.error, fetch.error_code, fetch.err_insn, fetch.err_addr),
            (self.load.error, self.load.error_code, lg.cur_index, self.load.err_addr),
            (comp.error, comp.error_code, cq.last_index, 0),
            (self.store.error, self.store.error_code, sg.cur_index, self.store.err_addr),
            (tok.overflow, ErrorCode.TOKEN_OVERFLOW, fetch.fetched, 0),
            (deadlock, ErrorCode.DEADLOCK, fetch.fetched, 0),
        ]
        any_error = Signal()
        m.d.comb += any_error.eq(sum((s[0] for s in sources), start=0) != 0)

        # Deadlock: no unit executes, at least one waits for a token, every other one is idle,
        # and the fetch unit cannot deliver anything new (finished, stopped or blocked on a full
        # queue). Held for DEADLOCK_CYCLES so queue latencies cannot fake it.
        compute_idle = ~comp.busy & ~comp.stall & (cq.empty | comp.finished)
        fetch_quiet = fetch.finished | fetch.blocked | (fetch.fetched == csr.insn_count)
        deadlock_now = (
            ~(lg.busy | comp.busy | sg.busy)
            & (lg.stall | comp.stall | sg.stall)
            & (lg.stall | lg.idle)
            & (comp.stall | compute_idle)
            & (sg.stall | sg.idle)
            & fetch_quiet
        )
        dl_count = Signal(range(DEADLOCK_CYCLES + 1))
        m.d.sync += dl_count.eq(0)
        with m.If(deadlock_now & busy):
            with m.If(dl_count == DEADLOCK_CYCLES):
                m.d.comb += deadlock.eq(1)
            with m.Else():
                m.d.sync += dl_count.eq(dl_count + 1)

        all_done = comp.finished & ~comp.busy & lg.idle & sg.idle

        perf_inputs = {
            "FETCH_BUSY": fetch.busy,
            "LOAD_BUSY": lg.busy,
            "LOAD_STALL": lg.stall,
            "COMPUTE_BUSY": comp.busy,
            "COMPUTE_STALL": comp.stall,
            "STORE_BUSY": sg.busy,
            "STORE_STALL": sg.stall,
            "MEM_RD_BEATS": arb.rd_beat,
            "MEM_WR_BEATS": arb.wr_beat,
            "MEM_WAIT": arb.bus_wait,
            "MAC_ACTIVE": comp.mac_active,
            "FC_MAC_ACTIVE": comp.fc_mac_active,
        }
        perf = {}
        for name, _ in regmap.PERF_COUNTERS:
            counter = Signal(32, name=f"perf_{name.lower()}")
            perf[name] = counter
            m.d.comb += getattr(csr, f"perf_{name.lower()}").eq(counter)
            with m.If(perf_inputs[name]):
                m.d.sync += counter.eq(counter + 1)

        stop_ok = Signal()  # the run being drained ended with DONE
        with m.FSM() as control:
            with m.State("IDLE"):
                with m.If(csr.start):
                    m.d.comb += clear.eq(1)
                    m.d.sync += [
                        done.eq(0),
                        error.eq(0),
                        error_code.eq(0),
                        err_insn.eq(0),
                        err_addr.eq(0),
                        cycles.eq(0),
                        cycles_lo_max.eq(0),
                        busy.eq(1),
                    ]
                    for counter in perf.values():
                        m.d.sync += counter.eq(0)
                    m.next = "RUN"
                with m.Elif(csr.ack):
                    m.d.sync += [done.eq(0), error.eq(0), error_code.eq(0)]
            with m.State("RUN"):
                m.d.comb += fetch.run.eq(1)
                count_cycle()
                with m.If(any_error):
                    with m.If(sources[0][0]):
                        self._latch(m, sources[0], error_code, err_insn, err_addr)
                    for source in sources[1:]:
                        with m.Elif(source[0]):
                            self._latch(m, source, error_code, err_insn, err_addr)
                    m.d.sync += stop_ok.eq(0)
                    m.next = "DRAIN"
                with m.Elif(csr.abort):
                    m.d.sync += [error_code.eq(ErrorCode.ABORTED), err_insn.eq(fetch.fetched), stop_ok.eq(0)]
                    m.next = "DRAIN"
                with m.Elif(all_done):
                    m.d.sync += stop_ok.eq(1)
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(arb.idle):
                    m.d.sync += [busy.eq(0), done.eq(stop_ok), error.eq(~stop_ok)]
                    m.next = "IDLE"
                with m.Else():
                    count_cycle()
        # Outside RUN the arbiter grants nothing: after an error or abort a unit may still offer
        # a burst, and the bus must stay quiet until the next START clears the datapath.
        m.d.comb += halt.eq(~control.ongoing("RUN"))
        return m

    @staticmethod
    def _latch(m, source, error_code, err_insn, err_addr) -> None:
        _, code, index, addr = source
        m.d.sync += [error_code.eq(code), err_insn.eq(index), err_addr.eq(addr)]
