"""The upsample engine (segmentation block): nearest-neighbour upsampling by integer factors.

Semantics (``dlproc.isa.Upsample``, ``dlproc.golden.ops.upsample_nearest``)::

    OUT[out_base + (z*out_h + oy)*out_w + ox] = INP[inp_base + z*in_plane + (oy // sy)*in_w + ox // sx]

One INP word is read per output word (one word per cycle). The INP address is formed without a
divider: counters ``ry < sy`` and ``rx < sx`` say how often the current input row and column have
been repeated, and the input column (row) address advances only when ``rx`` (``ry``) wraps. The
word goes through the shared output stage with the identity parameters (M = 1, S = 0, zp = 0,
clamp -128..127), so upsampling reuses the OUT write path and the completion tags of the other
engines and is exact.

Run-time checks: a zero size or scale gives ILLEGAL_FIELD before the first read; an input word
beyond INP or an output word beyond OUT gives SRAM_RANGE when the sweep reaches it (the exact
bounds need ``(out_h - 1) // scale_y`` and ``z_size * out_h * out_w``, and the sweep forms every
address anyway, so a per-word compare costs neither a divider nor multipliers), like the pool
engine's per-read check; the offending word is not written. The ISA-level simulator checks the same
bound before executing; both stop with the same code.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc import isa

from .conv import TAG_BITS, _read_port, inp_word_layout
from .engine import EngineCommand
from .output_stage import REQUANT_LANE, _input_signature as _ostage_input_signature

__all__ = ["UPSAMPLE_CMD_LAYOUT", "UpsampleEngine"]

UPSAMPLE_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Upsample.field_specs()} | {"tag": unsigned(TAG_BITS)}
)


class UpsampleEngine(wiring.Component):
    """Executes UPSAMPLE commands. Ports as :class:`~dlproc.gateware.add.AddEngine`."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        self.hw = hw
        self.c = hw.c
        self.inp_bits = max(1, (hw.inp_depth - 1).bit_length())
        self.out_bits = max(1, (hw.out_depth - 1).bit_length())
        super().__init__({
            "cmd": In(stream.Signature(UPSAMPLE_CMD_LAYOUT)),
            "inp": Out(_read_port(self.inp_bits, inp_word_layout(self.c))),
            "ost": Out(_ostage_input_signature(self.c, self.out_bits, 1 + TAG_BITS)),
            "busy": Out(1),
            "error": Out(1),
            "error_code": Out(4),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        E = isa.ErrorCode
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        # Accept (registered, see engine.py); the zero-size check is the only one before the sweep.
        m.submodules.command = command = EngineCommand(
            UPSAMPLE_CMD_LAYOUT,
            illegal=lambda f: ((f.out_h == 0) | (f.out_w == 0) | (f.z_size == 0) | (f.in_w == 0)
                               | (f.scale_y == 0) | (f.scale_x == 0)),
        )
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        a = command.fields
        # Every address is checked when it is issued and grows by less than 2**20 per step from a
        # checked one, so 22 bits can never wrap before a check fails (no multiplier needed).
        width = isa.SRAM_ADDR_BITS + 2
        z, oy, ox = Signal(16), Signal(16), Signal(16)
        ry, rx = Signal(4), Signal(4)
        plane_base, row_base, addr = Signal(width), Signal(width), Signal(width)
        q = Signal(width)
        issue = Signal()
        last_ox, last_oy, last_z = ox == a.out_w - 1, oy == a.out_h - 1, z == a.z_size - 1
        final = last_ox & last_oy & last_z
        s1 = Signal()

        with m.FSM(name="upsample") as fsm:
            with m.State("IDLE"):
                m.d.comb += command.enable.eq(~error & ~s1)
                with m.If(command.take):
                    m.next = "SETUP"
            with m.State("SETUP"):
                m.d.sync += [
                    z.eq(0), oy.eq(0), ox.eq(0), ry.eq(0), rx.eq(0),
                    plane_base.eq(a.inp_base), row_base.eq(a.inp_base), addr.eq(a.inp_base),
                    q.eq(a.out_base),
                ]
                with m.If(command.illegal):
                    m.d.sync += [error.eq(1), code.eq(E.ILLEGAL_FIELD)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "SWEEP"
            with m.State("SWEEP"):
                m.d.comb += issue.eq(~error)
                with m.If(issue & final):
                    m.next = "IDLE"

        # Walk: rx/ox, then ry/oy, then z.
        with m.If(issue):
            m.d.sync += q.eq(q + 1)
            with m.If(~last_ox):
                m.d.sync += ox.eq(ox + 1)
                with m.If(rx == a.scale_x - 1):
                    m.d.sync += [rx.eq(0), addr.eq(addr + 1)]
                with m.Else():
                    m.d.sync += rx.eq(rx + 1)
            with m.Else():
                m.d.sync += [ox.eq(0), rx.eq(0)]
                with m.If(~last_oy):
                    m.d.sync += oy.eq(oy + 1)
                    with m.If(ry == a.scale_y - 1):
                        m.d.sync += [ry.eq(0), row_base.eq(row_base + a.in_w), addr.eq(row_base + a.in_w)]
                    with m.Else():
                        m.d.sync += [ry.eq(ry + 1), addr.eq(row_base)]
                with m.Else():
                    nxt = plane_base + a.in_plane
                    m.d.sync += [oy.eq(0), ry.eq(0), z.eq(z + 1), plane_base.eq(nxt), row_base.eq(nxt),
                                 addr.eq(nxt)]
        m.d.comb += [self.inp.addr.eq(addr), self.inp.en.eq(issue)]

        # Input words beyond INP: the sweep reads every input word the instruction names, so a
        # per-read check is exact. The ISA-level simulator checks the same bound up front; both
        # stop with SRAM_RANGE before the output that needs the word is written.
        oob = (addr >= hw.inp_depth) | (q >= hw.out_depth)
        with m.If(issue & oob & ~error):
            m.d.sync += [error.eq(1), code.eq(E.SRAM_RANGE)]

        final1 = Signal()
        q1 = Signal(self.out_bits)
        m.d.sync += [s1.eq(issue & ~(oob | error)), final1.eq(final),
                     q1.eq(q[:self.out_bits])]
        acc = Signal(data.ArrayLayout(signed(32), c))
        params = Signal(data.ArrayLayout(REQUANT_LANE, c))
        for lane in range(c):
            m.d.comb += [
                acc[lane].eq(self.inp.data[lane].as_signed()),
                params[lane].mult.eq(1), params[lane].mult_neg.eq(1), params[lane].shift.eq(0),
            ]
        m.d.comb += [
            self.ost.valid.eq(s1),
            self.ost.acc.eq(acc),
            self.ost.params.eq(params),
            self.ost.zp_out.eq(0),
            self.ost.act_min.eq(-128),
            self.ost.act_max.eq(127),
            self.ost.addr.eq(q1),
            self.ost.tag.eq(Cat(final1, a.tag)),
        ]
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | s1)
        return m
