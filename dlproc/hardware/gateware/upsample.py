"""The upsample engine (segmentation block): nearest-neighbour upsampling by integer factors.

Semantics (``dlproc.hardware.isa.Upsample``, ``dlproc.targets.golden.ops.upsample_nearest``)::

    OUT[out_base + (z*out_h + oy)*out_w + ox] = INP[inp_base + z*in_plane + (oy // sy)*in_w + ox // sx]

One INP word is read per output word (one word per cycle). The INP address is formed without a
divider: counters ``ry`` and ``rx`` (counting down from ``sy - 1`` and ``sx - 1``) say how often the
current input row and column are still to be repeated, and the input column (row) address
advances only when ``rx`` (``ry``) wraps. The INP addresses are bounded and the counters have
registered ``last`` flags, as in the conv engine, to keep the walk off the critical path. The
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

from amaranth.hdl import Cat, Const, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring

from dlproc.hardware import isa

from dlproc.hardware.gateware.engine import Engine, TAG_BITS, EngineCommand, as_bounded, bounded_add
from dlproc.hardware.gateware.output_stage import REQUANT_LANE

__all__ = ["UPSAMPLE_CMD_LAYOUT", "UpsampleEngine"]

UPSAMPLE_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Upsample.field_specs()} | {"tag": unsigned(TAG_BITS)}
)


class UpsampleEngine(Engine):
    """Executes UPSAMPLE commands. Ports as :class:`~dlproc.hardware.gateware.add.AddEngine`."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        super().__init__(hw, {"cmd": UPSAMPLE_CMD_LAYOUT}, ("inp",))

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
        # The OUT address is checked when it is issued and grows by 1 per step from a checked one,
        # so 22 bits can never wrap before a check fails. The INP addresses are bounded as in the
        # conv engine (engine.bounded_add: the buffer's address bits plus a sticky "beyond" bit).
        width = isa.SRAM_ADDR_BITS + 2
        kb = self.inp_bits
        bounded = data.StructLayout({"low": unsigned(kb), "beyond": 1})
        # Counters count down to 0 with a registered ``last`` flag each, so that the walk's
        # multiplexers select on flip-flops; ``*_m1`` and ``*_one`` (field == 1) reload them.
        z, oy, ox = Signal(16, name="z_left"), Signal(16, name="oy_left"), Signal(16, name="ox_left")
        ry, rx = Signal(4, name="ry_left"), Signal(4, name="rx_left")
        last_z, last_oy, last_ox, last_ry, last_rx = (
            Signal(name=f"last_{n}") for n in ("z", "oy", "ox", "ry", "rx"))
        ow_m1, oh_m1 = Signal(16), Signal(16)
        sx_m1, sy_m1 = Signal(4), Signal(4)
        ow_one, oh_one, sx_one, sy_one = (Signal(name=f"{n}_one") for n in ("ow", "oh", "sx", "sy"))
        plane_base, row_base, addr = (Signal(bounded, name=n) for n in ("plane_base", "row_base", "addr"))
        q = Signal(width)
        issue = Signal()
        final = last_ox & last_oy & last_z
        s1 = Signal()

        with m.FSM(name="upsample") as fsm:
            with m.State("IDLE"):
                m.d.comb += command.enable.eq(~error & ~s1)
                with m.If(command.take):
                    m.next = "SETUP"
            with m.State("SETUP"):
                base = as_bounded(a.inp_base, kb)
                m.d.sync += [
                    z.eq(a.z_size - 1), oy.eq(a.out_h - 1), ox.eq(a.out_w - 1),
                    ry.eq(a.scale_y - 1), rx.eq(a.scale_x - 1),
                    last_z.eq(a.z_size == 1), last_oy.eq(a.out_h == 1), last_ox.eq(a.out_w == 1),
                    last_ry.eq(a.scale_y == 1), last_rx.eq(a.scale_x == 1),
                    ow_m1.eq(a.out_w - 1), oh_m1.eq(a.out_h - 1),
                    sx_m1.eq(a.scale_x - 1), sy_m1.eq(a.scale_y - 1),
                    ow_one.eq(a.out_w == 1), oh_one.eq(a.out_h == 1),
                    sx_one.eq(a.scale_x == 1), sy_one.eq(a.scale_y == 1),
                    plane_base.eq(base), row_base.eq(base), addr.eq(base),
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
        def count_down(left: Signal, last: Signal) -> list:
            return [left.eq(left - 1), last.eq(left == 1)]

        def reload(left: Signal, last: Signal, m1: Signal, one: Signal) -> list:
            return [left.eq(m1), last.eq(one)]

        with m.If(issue):
            m.d.sync += q.eq(q + 1)
            with m.If(~last_ox):
                m.d.sync += count_down(ox, last_ox)
                with m.If(last_rx):
                    m.d.sync += reload(rx, last_rx, sx_m1, sx_one)
                    m.d.sync += addr.eq(bounded_add(addr, as_bounded(Const(1, 1), kb)))
                with m.Else():
                    m.d.sync += count_down(rx, last_rx)
            with m.Else():
                m.d.sync += reload(ox, last_ox, ow_m1, ow_one) + reload(rx, last_rx, sx_m1, sx_one)
                with m.If(~last_oy):
                    m.d.sync += count_down(oy, last_oy)
                    with m.If(last_ry):
                        nxt = bounded_add(row_base, as_bounded(a.in_w, kb))
                        m.d.sync += reload(ry, last_ry, sy_m1, sy_one) + [row_base.eq(nxt), addr.eq(nxt)]
                    with m.Else():
                        m.d.sync += count_down(ry, last_ry) + [addr.eq(row_base)]
                with m.Else():
                    nxt = bounded_add(plane_base, as_bounded(a.in_plane, kb))
                    m.d.sync += (reload(oy, last_oy, oh_m1, oh_one) + reload(ry, last_ry, sy_m1, sy_one)
                                 + count_down(z, last_z))
                    m.d.sync += [plane_base.eq(nxt), row_base.eq(nxt), addr.eq(nxt)]
        m.d.comb += [self.inp.addr.eq(addr.low), self.inp.en.eq(issue)]

        # Input words beyond INP: the sweep reads every input word the instruction names, so a
        # per-read check is exact. The ISA-level simulator checks the same bound up front; both
        # stop with SRAM_RANGE before the output that needs the word is written.
        oob = addr.beyond | (addr.low >= hw.inp_depth) | (q >= hw.out_depth)
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
