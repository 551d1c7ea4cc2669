"""The CSR block: the Avalon-MM slave that decodes ``dlproc.hardware.regmap.REGISTERS``.

Reads have a fixed latency of one cycle (``readdata`` is registered from ``address`` in the cycle
``read`` is high) and there is no waitrequest, as the contract states. Every offset comes from
the register map, so the firmware header generated from the same table always matches.

The block holds only the host-writable state (CTRL.IRQ_EN, INSN_BASE, INSN_COUNT, DMA_BASE,
DMA_LIMIT, PROF_INDEX) and the 64-bit read shadows; status and counters are inputs from the core,
and CTRL.START/ABORT/ACK are one-cycle pulses to it, in the cycle after the write.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware import regmap
from dlproc.hardware.isa import ISA_VERSION, HardwareParams
from dlproc.hardware.gateware.avalon import CsrSignature


class CsrBlock(wiring.Component):
    def __init__(self, hw: HardwareParams):
        self.hw = hw
        members = {
            "bus": In(CsrSignature(regmap.CSR_ADDR_BITS)),
            # to the core
            "start": Out(1),
            "abort": Out(1),
            "ack": Out(1),
            "irq_en": Out(1),
            "insn_base": Out(32),
            "insn_count": Out(32),
            "dma_base": Out(32),
            "dma_limit": Out(32),
            "prof_index": Out(16),
            # from the core
            "busy": In(1),
            "done": In(1),
            "error": In(1),
            "error_code": In(8),
            "err_insn": In(32),
            "err_addr": In(32),
            "cycles": In(64),
            "fetched": In(32),
            "prof_count": In(32),
            "prof_data": In(64),
        }
        for name, _ in regmap.PERF_COUNTERS:
            members[f"perf_{name.lower()}"] = In(32)
        super().__init__(members)

    def _constants(self) -> dict[str, int]:
        hw = self.hw
        return {
            "ID": regmap.MAGIC,
            "VERSION": (regmap.VERSION_MAJOR << 16) | (regmap.VERSION_MINOR << 8) | ISA_VERSION,
            "CONFIG_HASH_LO": hw.config_hash64 & 0xFFFFFFFF,
            "CONFIG_HASH_HI": (hw.config_hash64 >> 32) & 0xFFFFFFFF,
            "HW_PARAMS": hw.c | (hw.bytes_per_beat << 8) | (hw.max_burst << 16) | (hw.queue_depth << 24),
            "HW_INP_DEPTH": hw.inp_depth,
            "HW_WGT_DEPTH": hw.wgt_depth,
            "HW_PRM_DEPTH": hw.prm_depth,
            "HW_OUT_DEPTH": hw.out_depth,
            "HW_PROFILE_DEPTH": hw.profile_depth,
        }

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        R = regmap.REG
        ctrl = R["CTRL"]

        cycles_hi = Signal(32)  # shadow latched by reading CYCLES_LO
        status = Signal(32)
        # START/ACK reach the core one cycle after the write (registered pulses, see below).
        # STATUS already shows their effect while they are pending, so a host that writes START
        # and reads STATUS in the very next transaction sees BUSY, never the previous DONE.
        pending = self.start | self.ack
        m.d.comb += status.eq(
            ((self.busy | self.start) << R["STATUS"].field("BUSY").lsb)
            | ((self.done & ~pending) << R["STATUS"].field("DONE").lsb)
            | ((self.error & ~pending) << R["STATUS"].field("ERROR").lsb)
            | (Mux(pending & ~self.busy, 0, self.error_code) << R["STATUS"].field("ERROR_CODE").lsb)
        )
        values = {name: value for name, value in self._constants().items()}
        values |= {
            "CTRL": self.irq_en << ctrl.field("IRQ_EN").lsb,
            "STATUS": status,
            "INSN_BASE": self.insn_base,
            "INSN_COUNT": self.insn_count,
            "DMA_BASE": self.dma_base,
            "DMA_LIMIT": self.dma_limit,
            "ERR_INSN": self.err_insn,
            "ERR_ADDR": self.err_addr,
            "CYCLES_LO": self.cycles[:32],
            "CYCLES_HI": cycles_hi,
            "FETCHED": self.fetched,
            "PROF_COUNT": self.prof_count,
            "PROF_INDEX": self.prof_index,
            "PROF_DATA_LO": self.prof_data[:32],
            "PROF_DATA_HI": self.prof_data[32:],
        }
        for name, _ in regmap.PERF_COUNTERS:
            values[name] = getattr(self, f"perf_{name.lower()}")
        missing = {r.name for r in regmap.REGISTERS} - values.keys()
        assert not missing, f"CSR block lacks registers {missing}"

        with m.If(bus.read):
            with m.Switch(bus.address):
                for reg in regmap.REGISTERS:
                    with m.Case(reg.offset):
                        m.d.sync += bus.readdata.eq(values[reg.name])
                with m.Default():
                    m.d.sync += bus.readdata.eq(0)
            with m.If(bus.address == R["CYCLES_LO"].offset):
                m.d.sync += cycles_hi.eq(self.cycles[32:])

        writable = {
            "INSN_BASE": self.insn_base,
            "INSN_COUNT": self.insn_count,
            "DMA_BASE": self.dma_base,
            "DMA_LIMIT": self.dma_limit,
            "PROF_INDEX": self.prof_index,
        }
        # The W1S pulses are registered (one cycle after the write) so that no path runs from
        # the bus inputs straight into the datapath's synchronous clear, which fans out to
        # every unit.
        m.d.sync += [self.start.eq(0), self.abort.eq(0), self.ack.eq(0)]
        with m.If(bus.write):
            with m.Switch(bus.address):
                for name, sig in writable.items():
                    with m.Case(R[name].offset):
                        m.d.sync += sig.eq(bus.writedata)
                with m.Case(ctrl.offset):
                    m.d.sync += [
                        self.irq_en.eq(bus.writedata[ctrl.field("IRQ_EN").lsb]),
                        self.start.eq(bus.writedata[ctrl.field("START").lsb]),
                        self.abort.eq(bus.writedata[ctrl.field("ABORT").lsb]),
                        self.ack.eq(bus.writedata[ctrl.field("ACK").lsb]),
                    ]
        return m
