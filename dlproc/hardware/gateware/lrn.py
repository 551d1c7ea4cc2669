"""The LRN engine (conv module's LRN block): cross-channel local response normalization.

Two instructions (``dlproc.hardware.isa.LrnTab``, ``dlproc.hardware.isa.Lrn``; numerics in ``docs/numerics.md``
section 9, golden model ``dlproc.targets.golden.ops.lrn``):

* LRNTAB copies PRM words into the multiplier table: lane l of word w becomes entry
  ``tab_base + w*C + l`` (its M and S; lanes beyond the table's end are dropped). Every lane of the LRN data path looks the table up in the
  same cycle, so the table is held in C copies (one 1-read/1-write memory per lane, 1792 x 21
  bits each); an entry is written into all copies at once, one entry per cycle.
* LRN sweeps the pixels in order and, for each pixel, its channel blocks in order, one INP word
  per cycle. The channel window of a lane reaches ``(size-1)//2 <= 7`` channels down and
  ``size//2 <= 8`` up, i.e. into neighbouring channel blocks, so the squares flow through a
  *sliding window* of ``NW = LB + 1 + LA`` block entries (``LB = ceil(7/C)``, ``LA = ceil(8/C)``):
  the entry in the centre is normalized when the LA blocks above it have arrived. Each entry
  carries the pixel number modulo 16, and a neighbour belongs to the centre's window only if it
  has the same pixel tag (with NW <= 17 blocks a tag can repeat only 16 pixels away), so the sweep
  goes from one pixel to the next without flushing: **one output word per cycle** (n_pix *
  cin_blocks cycles per instruction plus the pipeline depth). Which of the 16 window taps
  (-7..8) count is a per-instruction mask from ``size``.

Per lane: ``d = x - zp_in`` (9 bits), ``d*d`` zeroed for channels >= ``channels`` (16 bits);
then for the centre entry two 8-tap partial sums, their sum q (20 bits), the table index
(``numerics.lrn_index``: a leading-one detector and a shift), the table read, and the shared
output stage with ``acc = d``, ``M = M_neg = M[i]``, ``S = S[i]``, ``zp_out`` and the clamp.

Run-time checks before any read (an illegal instruction writes nothing): a zero size/count or
``act_min > act_max`` gives ILLEGAL_FIELD; INP, OUT, PRM or table ranges exceeded SRAM_RANGE;
a PRM lane with M >= 2**15 or S > MAX_SHIFT gives ILLEGAL_FIELD when LRNTAB reaches it.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring

from dlproc.hardware import isa
from dlproc.hardware.numerics import LRN_MANT_BITS, LRN_MAX_SIZE, LRN_SUM_BITS, LRN_TABLE_SIZE, MAX_SHIFT, MULT_BITS

from dlproc.hardware.gateware.engine import Engine, TAG_BITS, EngineCommand
from dlproc.hardware.gateware.lane_table import lane_tables, table_command, table_load_states
from dlproc.hardware.gateware.output_stage import REQUANT_LANE

__all__ = ["LRN_CMD_LAYOUT", "LRNTAB_CMD_LAYOUT", "LrnEngine", "window_blocks"]

LRN_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Lrn.field_specs()} | {"tag": unsigned(TAG_BITS)})
LRNTAB_CMD_LAYOUT = data.StructLayout({spec.name: spec.shape for spec in isa.LrnTab.field_specs()})

TAP_LO = (LRN_MAX_SIZE - 1) // 2  #: 7: channels below the centre a window can reach
TAP_HI = LRN_MAX_SIZE // 2  #: 8: channels above
TABLE_ENTRY = data.StructLayout({"mult": unsigned(MULT_BITS), "shift": unsigned(6)})
_IDX_BITS = (LRN_TABLE_SIZE - 1).bit_length()


def window_blocks(c: int) -> tuple[int, int]:
    """(LB, LA): channel blocks below and above the centre block that a window can reach."""
    return -(-TAP_LO // c), -(-TAP_HI // c)


class LrnEngine(Engine):
    """Executes LRNTAB and LRN commands (``cmd`` for LRN, ``tab_cmd`` for LRNTAB)."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        super().__init__(hw, {"cmd": LRN_CMD_LAYOUT, "tab_cmd": LRNTAB_CMD_LAYOUT}, ("inp", "prm"))

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        E = isa.ErrorCode
        lb, la = window_blocks(c)
        nw = lb + 1 + la
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        def fail(value: int) -> None:
            m.d.sync += [error.eq(1), code.eq(value)]

        # ------------------------------------------------------------------ the table copies
        table = lane_tables(m, c, TABLE_ENTRY, LRN_TABLE_SIZE, "table")
        tables = table.reads

        # Accept and check (registered, see engine.py). The instruction's fields are checked in
        # SETUP, its INP/OUT ranges in RANGE; the table load's fields and ranges in TAB_CHECK.
        m.submodules.command = command = EngineCommand(
            LRN_CMD_LAYOUT,
            illegal=lambda f: ((f.size == 0) | (f.size > LRN_MAX_SIZE) | (f.n_pix == 0) | (f.cin_blocks == 0)
                               | (f.act_min > f.act_max)),
            ranges=[(lambda f: f.inp_base + (f.cin_blocks - 1) * f.in_plane + f.n_pix, hw.inp_depth),
                    (lambda f: f.out_base + f.cin_blocks * f.n_pix, hw.out_depth)],
        )
        tab_command = table_command(m, LRNTAB_CMD_LAYOUT, c, table, hw.prm_depth)
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        wiring.connect(m, wiring.flipped(self.tab_cmd), tab_command.cmd)
        a = command.fields
        width = 40
        # LRN sweep counters.
        p = Signal(isa.SRAM_ADDR_BITS + 1)
        cb = Signal(16)
        pix_addr, addr = Signal(width), Signal(width)  # inp_base + p, + cb*in_plane
        opix, oaddr = Signal(width), Signal(width)  # out_base + p, + cb*n_pix
        ptag = Signal(4)
        issue = Signal()
        last_cb, last_p = cb == a.cin_blocks - 1, p == a.n_pix - 1
        mask = Signal(TAP_LO + 1 + TAP_HI)  # tap t = -7..8 at bit t + 7
        pipe_busy = Signal()

        m.d.comb += self.prm.en.eq(0)
        with m.FSM(name="lrn") as fsm:
            with m.State("IDLE"):
                m.d.comb += [command.enable.eq(~error & ~pipe_busy),
                             tab_command.enable.eq(~error & ~pipe_busy & ~self.cmd.valid)]
                with m.If(command.take):
                    m.next = "SETUP"
                with m.Elif(tab_command.take):
                    m.next = "TAB_CHECK"
            # ---- LRN
            with m.State("SETUP"):
                h_lo = (a.size - 1) >> 1
                h_hi = a.size >> 1
                for k in range(-TAP_LO, TAP_HI + 1):
                    # The centre tap (k = 0) is always in the window: a constant, not h_hi >= 0
                    # (an always-true unsigned compare, Verilator's UNSIGNED warning).
                    bit = (h_lo >= -k) if k < 0 else (h_hi >= k) if k > 0 else Const(1)
                    m.d.sync += mask[k + TAP_LO].eq(bit)
                m.d.sync += [
                    p.eq(0), cb.eq(0), ptag.eq(0),
                    pix_addr.eq(a.inp_base), addr.eq(a.inp_base), opix.eq(a.out_base), oaddr.eq(a.out_base),
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
                    m.next = "SWEEP"
            with m.State("SWEEP"):
                m.d.comb += issue.eq(1)
                with m.If(~last_cb):
                    m.d.sync += [cb.eq(cb + 1), addr.eq(addr + a.in_plane), oaddr.eq(oaddr + a.n_pix)]
                with m.Else():
                    m.d.sync += [cb.eq(0), p.eq(p + 1), ptag.eq(ptag + 1),
                                 pix_addr.eq(pix_addr + 1), addr.eq(pix_addr + 1),
                                 opix.eq(opix + 1), oaddr.eq(opix + 1)]
                    with m.If(last_p):
                        m.next = "IDLE"
            # ---- LRNTAB: a lane is an entry if its M fits the multiplier and its S the shifter.
            table_load_states(m, c, table, tab_command, self.prm,
                              lane_ok=lambda src: [(src.mult >> MULT_BITS) == 0, src.shift <= MAX_SHIFT],
                              entry_of=lambda entry, src: [entry.mult.eq(src.mult), entry.shift.eq(src.shift)],
                              fail=fail)
        m.d.comb += [self.inp.addr.eq(addr), self.inp.en.eq(issue)]

        # ------------------------------------------------------------------ LRN data path
        # Stage 1: the INP word arrives; d = x - zp_in, and which lanes are real channels.
        meta_layout = data.StructLayout({"valid": 1, "ptag": 4, "last": 1, "oaddr": self.out_bits})
        meta1 = Signal(meta_layout)
        chan1 = Signal(32)  # channel number of lane 0
        m.d.sync += [
            meta1.valid.eq(issue), meta1.ptag.eq(ptag), meta1.last.eq(last_cb & last_p),
            meta1.oaddr.eq(oaddr[:self.out_bits]), chan1.eq(cb * c),
        ]
        d2 = Signal(data.ArrayLayout(signed(9), c))
        ok2 = Signal(c)
        meta2 = Signal(meta_layout)
        for lane in range(c):
            m.d.sync += [d2[lane].eq(self.inp.data[lane] - a.zp_in), ok2[lane].eq(chan1 + lane < a.channels)]
        m.d.sync += meta2.eq(meta1)
        # Stage 2 -> window: the squares (zero for lanes beyond the channels) enter entry 0.
        entry_layout = data.StructLayout({
            "meta": meta_layout,
            "d": data.ArrayLayout(signed(9), c),
            "sq": data.ArrayLayout(unsigned(16), c),
        })
        win = [Signal(entry_layout, name=f"win{k}") for k in range(nw)]
        for lane in range(c):
            m.d.sync += [win[0].d[lane].eq(d2[lane]),
                         win[0].sq[lane].eq(Mux(ok2[lane], (d2[lane] * d2[lane])[:16], 0))]
        m.d.sync += win[0].meta.eq(meta2)
        for k in range(1, nw):
            m.d.sync += win[k].eq(win[k - 1])
        centre = win[la]
        # Entry win[la - k] holds channel block (centre + k); it counts if it is the same pixel.
        same = {}
        for k in range(-lb, la + 1):
            e = win[la - k]
            same[k] = e.meta.valid & (e.meta.ptag == centre.meta.ptag)

        # Stage C1: two partial sums of the masked taps (-7..0 and 1..8) per lane.
        sum_bits = LRN_SUM_BITS
        c1 = Signal(meta_layout)
        d_c1 = Signal(data.ArrayLayout(signed(9), c))
        lo_c1 = Signal(data.ArrayLayout(unsigned(sum_bits), c))
        hi_c1 = Signal(data.ArrayLayout(unsigned(sum_bits), c))
        for lane in range(c):
            parts = {"lo": [], "hi": []}
            for tap in range(-TAP_LO, TAP_HI + 1):
                o = lane + tap
                k, j = o // c, o % c
                term = Mux(mask[tap + TAP_LO] & same[k], win[la - k].sq[j], 0)
                parts["lo" if tap <= 0 else "hi"].append(term)
            m.d.sync += [lo_c1[lane].eq(sum(parts["lo"])), hi_c1[lane].eq(sum(parts["hi"])),
                         d_c1[lane].eq(centre.d[lane])]
        m.d.sync += c1.eq(centre.meta)
        # Stage C2: q.
        c2 = Signal(meta_layout)
        d_c2 = Signal(data.ArrayLayout(signed(9), c))
        q_c2 = Signal(data.ArrayLayout(unsigned(sum_bits), c))
        for lane in range(c):
            m.d.sync += [q_c2[lane].eq(lo_c1[lane] + hi_c1[lane]), d_c2[lane].eq(d_c1[lane])]
        m.d.sync += c2.eq(c1)
        # Stage C3: table index = (e << 7) + (q >> e), e = max(0, bit_length(q) - 8).
        c3 = Signal(meta_layout)
        d_c3 = Signal(data.ArrayLayout(signed(9), c))
        idx_c3 = Signal(data.ArrayLayout(unsigned(_IDX_BITS), c))
        for lane in range(c):
            q = q_c2[lane]
            e = Signal(4, name=f"lrn_e{lane}")
            m.d.comb += e.eq(0)
            for bit in range(LRN_MANT_BITS, sum_bits):  # the highest set bit wins (last assignment)
                with m.If(q[bit]):
                    m.d.comb += e.eq(bit - LRN_MANT_BITS + 1)
            m.d.sync += [idx_c3[lane].eq((e << (LRN_MANT_BITS - 1)) + (q >> e)), d_c3[lane].eq(d_c2[lane])]
        m.d.sync += c3.eq(c2)
        # Stage C4: table read (data in C5).
        c4 = Signal(meta_layout)
        d_c4 = Signal(data.ArrayLayout(signed(9), c))
        for lane in range(c):
            m.d.comb += [tables[lane].addr.eq(idx_c3[lane]), tables[lane].en.eq(1)]
            m.d.sync += d_c4[lane].eq(d_c3[lane])
        m.d.sync += c4.eq(c3)
        # Stage C5: to the output stage.
        params = Signal(data.ArrayLayout(REQUANT_LANE, c))
        acc = Signal(data.ArrayLayout(signed(32), c))
        for lane in range(c):
            ent = tables[lane].data
            m.d.comb += [params[lane].mult.eq(ent.mult), params[lane].mult_neg.eq(ent.mult),
                         params[lane].shift.eq(ent.shift), acc[lane].eq(d_c4[lane])]
        m.d.comb += [
            self.ost.valid.eq(c4.valid),
            self.ost.acc.eq(acc),
            self.ost.params.eq(params),
            self.ost.zp_out.eq(a.zp_out),
            self.ost.act_min.eq(a.act_min),
            self.ost.act_max.eq(a.act_max),
            self.ost.addr.eq(c4.oaddr),
            self.ost.tag.eq(Cat(c4.last, a.tag)),
        ]
        in_flight = [meta1.valid, meta2.valid, c1.valid, c2.valid, c3.valid, c4.valid] + [e.meta.valid for e in win]
        m.d.comb += pipe_busy.eq(Cat(*in_flight).any())
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | pipe_busy)
        return m
