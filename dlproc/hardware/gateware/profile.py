"""The profile buffer: cycle counts latched by MARK instructions at layer boundaries.

``profile_depth`` entries of 64 bits. The store unit writes entry ``index`` when it executes
``MARK index`` (so after every earlier STORE has completed); the host selects an entry with
PROF_INDEX and reads PROF_DATA_LO/HI. The read port is asynchronous so that a read issued in the
cycle right after the PROF_INDEX write already returns the new entry (the CSR bus has a fixed
read latency of one cycle); the buffer is small enough for distributed RAM or registers.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware.isa import HardwareParams
from dlproc.hardware.gateware.dma import profile_addr_bits


class ProfileBuffer(wiring.Component):
    def __init__(self, hw: HardwareParams):
        self.hw = hw
        ab = profile_addr_bits(hw)
        super().__init__(
            {
                "w": Out(memory.WritePort.Signature(addr_width=ab, shape=64)),
                "index": In(16),
                "data": Out(64),
            }
        )
        self.mem = memory.Memory(shape=64, depth=hw.profile_depth, init=[])
        self._wp = self.mem.write_port()
        self._rp = self.mem.read_port(domain="comb")

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = self.mem
        ab = profile_addr_bits(self.hw)
        m.d.comb += [
            self._wp.addr.eq(self.w.addr),
            self._wp.data.eq(self.w.data),
            self._wp.en.eq(self.w.en),
            self._rp.addr.eq(self.index[:ab]),
            # An index beyond the buffer reads as zero rather than aliasing another entry.
            self.data.eq(Mux(self.index < self.hw.profile_depth, self._rp.data, 0)),
        ]
        return m
