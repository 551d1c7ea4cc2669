"""The on-chip buffers INP, WGT, PRM and OUT, and the shapes of their words.

Each buffer is one ``amaranth.lib.memory.Memory`` with one write port and one synchronous read
port (a simple dual-port RAM, which every FPGA block RAM implements). Double buffering is a
convention of the compiler (it alternates between the two address halves, VTA style), not extra
hardware. The depths come from :class:`dlproc.hardware.isa.HardwareParams` (``config.buffer_shapes()``).

Who uses which port:

=======  ======================  ==========================
buffer   write port              read port
=======  ======================  ==========================
INP      load unit; compute unit  compute unit (conv, pool)
WGT      load unit               compute unit
PRM      load unit               compute unit
OUT      compute unit            store unit
=======  ======================  ==========================

INP's write port has two writers: the results of a CONV with ``to_inp`` (compute unit, first) and
the load unit, which waits a cycle when the compute unit writes (``DlprocTop`` muxes them).

Word layouts (the contract's byte layouts; byte ``k`` of a word is bits ``8k..8k+7``, which is
also byte ``k`` of the element in DRAM):

* INP, OUT: ``ArrayLayout(signed(8), C)``; lane ``i`` is channel ``cb*C + i``.
* WGT: ``ArrayLayout(ArrayLayout(signed(8), C), C)``; ``word[co][ci]`` is byte ``co*C + ci``.
* PRM: ``ArrayLayout(PRM_LANE, C)``; lane ``i`` occupies bytes ``9i..9i+8``: bias int32,
  M uint16, M_neg uint16, S uint8, all little endian.
"""

from __future__ import annotations

from amaranth.hdl import Module, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import Out
from amaranth.utils import ceil_log2

from dlproc.hardware.isa import HardwareParams

#: Requantization parameters of one output lane (72 bits = 9 bytes).
#: Field names match ``dlproc.hardware.gateware.output_stage.PRM_LANE`` so the layouts compare equal.
PRM_LANE = data.StructLayout(
    {"bias": signed(32), "mult": unsigned(16), "mult_neg": unsigned(16), "shift": unsigned(8)}
)

BUFFER_NAMES = ("INP", "WGT", "PRM", "OUT")


def inp_word(c: int) -> data.ArrayLayout:
    return data.ArrayLayout(signed(8), c)


def out_word(c: int) -> data.ArrayLayout:
    return data.ArrayLayout(signed(8), c)


def wgt_word(c: int) -> data.ArrayLayout:
    return data.ArrayLayout(data.ArrayLayout(signed(8), c), c)


def prm_word(c: int) -> data.ArrayLayout:
    return data.ArrayLayout(PRM_LANE, c)


def word_layout(hw: HardwareParams, buf: str) -> data.ArrayLayout:
    return {"INP": inp_word, "WGT": wgt_word, "PRM": prm_word, "OUT": out_word}[buf](hw.c)


def addr_bits(hw: HardwareParams, buf: str) -> int:
    """Address width of buffer ``buf``'s ports (at least 1 bit)."""
    return max(1, ceil_log2(hw.depth(buf)))


def read_port_signature(hw: HardwareParams, buf: str) -> wiring.Signature:
    """Signature of a read port of ``buf`` as the memory sees it (``en``, ``addr`` in; ``data`` out).

    A reader (the compute unit) declares ``In(read_port_signature(...))``; data appears the cycle
    after ``addr`` is presented with ``en`` high and holds while ``en`` is low.
    """
    return memory.ReadPort.Signature(addr_width=addr_bits(hw, buf), shape=word_layout(hw, buf))


def write_port_signature(hw: HardwareParams, buf: str) -> wiring.Signature:
    """Signature of a write port of ``buf`` as the memory sees it (a writer uses ``In(...)``)."""
    return memory.WritePort.Signature(addr_width=addr_bits(hw, buf), shape=word_layout(hw, buf),
                                      granularity=write_granularity(buf))


def write_granularity(buf: str) -> int | None:
    """OUT is written lane by lane (one enable bit per int8 lane): an FC instruction whose outputs
    start inside a word (``Fc.lane0``) must leave the word's other lanes as they are, so that the
    outputs of one C-lane word can come from several FC instructions when a layer's weights for C
    outputs do not fit a WGT half. The other buffers are written a whole word at a time."""
    return 1 if buf == "OUT" else None


class Buffers(wiring.Component):
    """The four buffer memories; ``<buf>_r``/``<buf>_w`` are their read and write ports."""

    def __init__(self, hw: HardwareParams):
        self.hw = hw
        members = {}
        for buf in BUFFER_NAMES:
            members[f"{buf.lower()}_r"] = Out(read_port_signature(hw, buf))
            members[f"{buf.lower()}_w"] = Out(write_port_signature(hw, buf))
        super().__init__(members)
        # The memories are created here (not in elaborate) so that simulations can peek and
        # poke them: ``buffers.mem["INP"].data[i]``.
        self.mem = {
            buf: memory.Memory(shape=word_layout(hw, buf), depth=hw.depth(buf), init=[])
            for buf in BUFFER_NAMES
        }
        self._ports = {buf: (mem.write_port(granularity=write_granularity(buf)), mem.read_port())
                       for buf, mem in self.mem.items()}

    def elaborate(self, platform):
        m = Module()
        for buf in BUFFER_NAMES:
            m.submodules[f"{buf.lower()}_mem"] = self.mem[buf]
            wp, rp = self._ports[buf]
            r = getattr(self, f"{buf.lower()}_r")
            w = getattr(self, f"{buf.lower()}_w")
            m.d.comb += [
                wp.addr.eq(w.addr),
                wp.data.eq(w.data),
                wp.en.eq(w.en),
                rp.addr.eq(r.addr),
                rp.en.eq(r.en),
                r.data.eq(rp.data),
            ]
        return m
