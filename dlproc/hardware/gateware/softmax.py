"""The softmax engine (fc module's softmax block): integer softmax over the channels of a pixel.

Two instructions (``dlproc.hardware.isa.SmxTab``, ``dlproc.hardware.isa.Softmax``; numerics in ``docs/numerics.md``
section 10, golden model ``dlproc.targets.golden.ops.softmax_int8``):

* SMXTAB copies the bias fields of PRM words into the 256-entry exp table (21-bit entries, one
  entry per cycle). Every lane reads the table in the same cycle, so it is held in C copies.
* SOFTMAX processes one pixel at a time in four phases over its ``cin_blocks`` INP words
  (``INP[inp_base + cb*in_plane + p]``):

  1. MAX: one word per cycle, lane-wise running maximum (lanes of channels >= ``channels`` read
     as -128, which never wins), then the maximum over the lanes;
  2. SUM: one word per cycle, ``t = m - x`` (0..255), table read, ``e`` summed over the lanes and
     the words (32 bits; excluded lanes add 0);
  3. DIV: ``R = floor(2**52 / sum)`` by restoring division, one quotient bit per cycle (53);
  4. OUT: one word per cycle, ``e`` again, ``v = (e*R + 2**43) >> 44`` (0..256) per lane, sent to
     the shared output stage with M = 1, S = 0, zp_out = -128 and the clamp -128..127, which is
     ``clamp(v - 128)``; excluded lanes get v = 0, i.e. -128.

  So a pixel takes about ``3*cin_blocks + 78`` cycles (the division, three pipeline drains and
  the phase changes; a 1000-class FC output with C = 24: 42 blocks, ~204 cycles).

Run-time checks before any read: zero counts or ``channels`` outside 1..4095 give ILLEGAL_FIELD,
ranges beyond INP/OUT/PRM/table SRAM_RANGE, a PRM bias outside 0..2**20 ILLEGAL_FIELD.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring

from dlproc.hardware import isa
from dlproc.hardware.numerics import SOFTMAX_EXP_BITS, SOFTMAX_MAX_CHANNELS, SOFTMAX_OUT_SHIFT, SOFTMAX_RECIP_BITS

from dlproc.hardware.gateware.engine import Engine, TAG_BITS, EngineCommand
from dlproc.hardware.gateware.lane_table import lane_tables, table_command, table_load_states
from dlproc.hardware.gateware.output_stage import REQUANT_LANE

__all__ = ["SOFTMAX_CMD_LAYOUT", "SMXTAB_CMD_LAYOUT", "SoftmaxEngine"]

SOFTMAX_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Softmax.field_specs()} | {"tag": unsigned(TAG_BITS)})
SMXTAB_CMD_LAYOUT = data.StructLayout({spec.name: spec.shape for spec in isa.SmxTab.field_specs()})

_E_BITS = SOFTMAX_EXP_BITS + 1  # entries 0..2**20
_R_BITS = 33  # R <= 2**32
_SUM_BITS = 32


class SoftmaxEngine(Engine):
    """Executes SMXTAB (``tab_cmd``) and SOFTMAX (``cmd``) commands."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        super().__init__(hw, {"cmd": SOFTMAX_CMD_LAYOUT, "tab_cmd": SMXTAB_CMD_LAYOUT}, ("inp", "prm"))

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        E = isa.ErrorCode
        size = isa.SOFTMAX_TABLE_SIZE
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        def fail(value: int) -> None:
            m.d.sync += [error.eq(1), code.eq(value)]

        # ------------------------------------------------------------------ exp table copies
        table = lane_tables(m, c, unsigned(_E_BITS), size, "exp")
        tables = table.reads

        # Accept and check (registered, see engine.py). The instruction's fields are checked in
        # SETUP, its INP/OUT ranges in RANGE; the table load's fields and ranges in TAB_CHECK.
        # channels > SOFTMAX_MAX_CHANNELS is only checked when the field can hold such a value
        # (with today's 12-bit field and 4095 channels it cannot: a constant compare, which
        # Verilator's lint reports as CMPCONST).
        too_many = SOFTMAX_MAX_CHANNELS < (1 << SOFTMAX_CMD_LAYOUT["channels"].shape.width) - 1
        m.submodules.command = command = EngineCommand(
            SOFTMAX_CMD_LAYOUT,
            illegal=lambda f: ((f.n_pix == 0) | (f.cin_blocks == 0) | (f.channels == 0)
                               | ((f.channels > SOFTMAX_MAX_CHANNELS) if too_many else 0)),
            ranges=[(lambda f: f.inp_base + (f.cin_blocks - 1) * f.in_plane + f.n_pix, hw.inp_depth),
                    (lambda f: f.out_base + f.cin_blocks * f.n_pix, hw.out_depth)],
        )
        tab_command = table_command(m, SMXTAB_CMD_LAYOUT, c, table, hw.prm_depth)
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        wiring.connect(m, wiring.flipped(self.tab_cmd), tab_command.cmd)
        a = command.fields
        width = 40
        p = Signal(isa.SRAM_ADDR_BITS + 1)
        cb = Signal(16)
        pix_addr, addr = Signal(width), Signal(width)
        opix, oaddr = Signal(width), Signal(width)
        issue = Signal()
        last_cb, last_p = cb == a.cin_blocks - 1, p == a.n_pix - 1
        phase = Signal(2)  # of the issued word: 0 MAX, 1 SUM, 2 OUT
        # Data-path state.
        run_max = Signal(data.ArrayLayout(signed(8), c))
        mx = Signal(signed(8))
        total = Signal(_SUM_BITS + 1)
        recip = Signal(_R_BITS)
        rem = Signal(_SUM_BITS + 2)
        div_i = Signal(range(SOFTMAX_RECIP_BITS + 2))
        pipe_busy = Signal()

        m.d.comb += self.prm.en.eq(0)
        with m.FSM(name="softmax") as fsm:
            with m.State("IDLE"):
                m.d.comb += [command.enable.eq(~error & ~pipe_busy),
                             tab_command.enable.eq(~error & ~pipe_busy & ~self.cmd.valid)]
                with m.If(command.take):
                    m.next = "SETUP"
                with m.Elif(tab_command.take):
                    m.next = "TAB_CHECK"
            # ---- SOFTMAX
            with m.State("SETUP"):
                m.d.sync += [
                    p.eq(0), cb.eq(0), pix_addr.eq(a.inp_base), addr.eq(a.inp_base),
                    opix.eq(a.out_base), oaddr.eq(a.out_base),
                ]
                with m.If(command.illegal):
                    fail(E.ILLEGAL_FIELD)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "RANGE"
            with m.State("RANGE"):
                with m.If(command.out_of_range):
                    fail(E.SRAM_RANGE)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "PIXEL"
            with m.State("PIXEL"):
                m.d.sync += [total.eq(0), cb.eq(0), addr.eq(pix_addr), oaddr.eq(opix)]
                for lane in range(c):
                    m.d.sync += run_max[lane].eq(-128)
                m.next = "MAX"
            for name, ph, nxt in (("MAX", 0, "MAX_WAIT"), ("SUM", 1, "SUM_WAIT"), ("OUT", 2, "OUT_WAIT")):
                with m.State(name):
                    m.d.comb += [issue.eq(1), phase.eq(ph)]
                    with m.If(~last_cb):
                        m.d.sync += [cb.eq(cb + 1), addr.eq(addr + a.in_plane), oaddr.eq(oaddr + a.n_pix)]
                    with m.Else():
                        m.d.sync += [cb.eq(0), addr.eq(pix_addr), oaddr.eq(opix)]
                        m.next = nxt
            with m.State("MAX_WAIT"):
                with m.If(~pipe_busy):
                    m.next = "REDUCE"
            with m.State("REDUCE"):
                best = run_max[0]
                for lane in range(1, c):
                    best = Mux(run_max[lane] > best, run_max[lane], best)
                m.d.sync += mx.eq(best)
                m.next = "SUM"
            with m.State("SUM_WAIT"):
                with m.If(~pipe_busy):
                    m.d.sync += [rem.eq(0), recip.eq(0), div_i.eq(0)]
                    m.next = "DIV"
            with m.State("DIV"):
                # Restoring division of 2**52 by the sum, dividend bits from the top: bit 52 is 1.
                bit = div_i == 0
                r2 = Cat(bit, rem[:-1])
                ge = r2 >= total
                m.d.sync += [rem.eq(Mux(ge, r2 - total, r2)), recip.eq(Cat(ge, recip[:-1])), div_i.eq(div_i + 1)]
                with m.If(div_i == SOFTMAX_RECIP_BITS):
                    m.next = "OUT"
            with m.State("OUT_WAIT"):
                with m.If(~pipe_busy):
                    with m.If(last_p):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [p.eq(p + 1), pix_addr.eq(pix_addr + 1), opix.eq(opix + 1)]
                        m.next = "PIXEL"
            # ---- SMXTAB: a lane's bias is an exp entry, 0..2**SOFTMAX_EXP_BITS.
            table_load_states(m, c, table, tab_command, self.prm,
                              lane_ok=lambda src: [src.bias >= 0, src.bias <= (1 << SOFTMAX_EXP_BITS)],
                              entry_of=lambda entry, src: [entry.eq(src.bias)],
                              fail=fail)
        m.d.comb += [self.inp.addr.eq(addr), self.inp.en.eq(issue)]

        # ------------------------------------------------------------------ data path
        # Stage 1: the word arrives; lanes of real channels.
        meta = data.StructLayout({"valid": 1, "phase": 2, "last": 1, "oaddr": self.out_bits})
        m1 = Signal(meta)
        chan1 = Signal(32)
        m.d.sync += [m1.valid.eq(issue), m1.phase.eq(phase), m1.last.eq(last_cb & last_p),
                     m1.oaddr.eq(oaddr[:self.out_bits]), chan1.eq(cb * c)]
        ok = Signal(c)
        for lane in range(c):
            m.d.comb += ok[lane].eq(chan1 + lane < a.channels)
        # MAX phase: fold directly.
        with m.If(m1.valid & (m1.phase == 0)):
            for lane in range(c):
                x = self.inp.data[lane]
                m.d.sync += run_max[lane].eq(Mux(ok[lane] & (x > run_max[lane]), x, run_max[lane]))
        # SUM / OUT phases: t = m - x, table read (data in stage 2).
        m2 = Signal(meta)
        ok2 = Signal(c)
        m.d.sync += [m2.eq(m1), ok2.eq(ok)]
        for lane in range(c):
            tt = (mx - self.inp.data[lane])[:8]
            m.d.comb += [tables[lane].addr.eq(tt), tables[lane].en.eq(1)]
        e2 = Signal(data.ArrayLayout(unsigned(_E_BITS), c))
        for lane in range(c):
            m.d.comb += e2[lane].eq(Mux(ok2[lane], tables[lane].data, 0))
        # SUM: accumulate over lanes and words.
        lane_sum = Signal(_SUM_BITS + 1)
        m.d.comb += lane_sum.eq(sum((e2[lane] for lane in range(c)), start=0))
        s3 = Signal()
        sum3 = Signal(_SUM_BITS + 1)
        m.d.sync += [s3.eq(m2.valid & (m2.phase == 1)), sum3.eq(lane_sum)]
        with m.If(s3):
            m.d.sync += total.eq(total + sum3)
        # OUT: v = (e*R + 2**43) >> 44, two stages, then the output stage.
        m3 = Signal(meta)
        prod3 = Signal(data.ArrayLayout(unsigned(_E_BITS + _R_BITS), c))
        m.d.sync += m3.eq(m2)
        for lane in range(c):
            m.d.sync += prod3[lane].eq(e2[lane] * recip)
        m4 = Signal(meta)
        v4 = Signal(data.ArrayLayout(unsigned(10), c))
        m.d.sync += m4.eq(m3)
        for lane in range(c):
            m.d.sync += v4[lane].eq((prod3[lane] + (1 << (SOFTMAX_OUT_SHIFT - 1))) >> SOFTMAX_OUT_SHIFT)
        params = Signal(data.ArrayLayout(REQUANT_LANE, c))
        acc = Signal(data.ArrayLayout(signed(32), c))
        for lane in range(c):
            m.d.comb += [params[lane].mult.eq(1), params[lane].mult_neg.eq(1), params[lane].shift.eq(0),
                         acc[lane].eq(v4[lane])]
        m.d.comb += [
            self.ost.valid.eq(m4.valid & (m4.phase == 2)),
            self.ost.acc.eq(acc),
            self.ost.params.eq(params),
            self.ost.zp_out.eq(-128),
            self.ost.act_min.eq(-128),
            self.ost.act_max.eq(127),
            self.ost.addr.eq(m4.oaddr),
            self.ost.tag.eq(Cat(m4.last, a.tag)),
        ]
        m.d.comb += pipe_busy.eq(m1.valid | m2.valid | s3 | m3.valid | m4.valid)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | pipe_busy)
        return m
