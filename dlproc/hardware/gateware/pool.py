"""The pool engine: max and average pooling (global average = a window over the whole plane).

Semantics (the contract's POOL, C lanes of one channel block per plane, planes z < z_size)::

    window(z, oy, ox) = INP[inp_base + z*in_plane + (oy*sy + ky)*in_w + ox*sx + kx], ky < kh, kx < kw
    MAX: OUT = clamp(max(window), act_min, act_max)
    AVG: s = sum(window) - kh*kw*zp_in (int32, wrapping);
         OUT = requantize(s, M, S, zp_out, act_min, act_max) with M, S of PRM word prm_base + z
    OUT[out_base + z*out_h*out_w + oy*out_w + ox]

Column reuse. Max and sum are associative and commutative, so a window's result is the fold of
its kw *column results*, each the fold of the kh words of one window column. Horizontally
adjacent windows of an output row share ``kw - stride_x`` columns, so the engine reads each
needed column of a row once. Two walks run concurrently within a plane:

* the **column walk** reads one INP word per cycle, column after column (kh words each, top to
  bottom): for the first output of a row its kw columns, for every further output only the
  ``min(stride_x, kw)`` columns it adds (skipping the ``stride_x - kw`` columns no window covers
  when kw < stride_x). The folded column (max, or the sum of ``x - zp_in``) is written to a
  64-entry column buffer at the column's index modulo 64;
* the **window walk** folds, one buffer word per cycle, the last kw columns written for each
  output in turn, and sends the result to the shared output stage. It waits for a column that is
  not written yet; the column walk waits rather than overwrite a column of the window being
  folded (at most 64 - kw columns ahead, kw <= 31).

So an output costs ``max(kh * min(stride_x, kw), kw)`` cycles in the steady state of a row (3
for a 3x3 stride-1 pool instead of 9, 6 at stride 2) and the first of a row ``kh * kw``; a
plane ends a few cycles after its last window's fold. Planes are processed one after the other
(the AVG parameters of PRM word ``prm_base + z`` are read between them, once the previous
plane's last window has left the engine). ``estimate.performance.pool_plane_cycles`` is the
timing model.

The words folded per window are exactly the contract's, only in a different order, so the
results are the same: max is exact; the AVG sum of ``x - zp_in`` equals
``sum(x) - kh*kw*zp_in`` and its magnitude is below ``31*31*255 < 2**18``, so the 19-bit window
sum (14-bit column sums) never wraps and equals the int32 of the contract. MAX goes through the
output stage with the identity parameters (M = 1, S = 0, zp_out = 0), so the clamp is the output
stage's and both modes share one OUT write path. The output address is a counter, since OUT
planes are stored densely one after the other.

Run-time checks as in the conv engine: zero-sized fields and act_min > act_max give ILLEGAL_FIELD,
addresses beyond a buffer and tiles beyond the accumulator depth give SRAM_RANGE (the accumulator
limit is not needed by this engine, but the ISA-level simulator applies it to POOL, and both must
stop on the same programs). The column walk reads every word of every window (once), so an INP
address beyond the buffer is found as before.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring

from dlproc.hardware import isa
from dlproc.hardware.numerics import MAX_SHIFT, MULT_BITS

from dlproc.hardware.gateware.engine import Engine, TAG_BITS, EngineCommand, as_bounded, bounded_add
from dlproc.hardware.gateware.output_stage import REQUANT_LANE

__all__ = ["COLUMN_BUFFER_DEPTH", "POOL_CMD_LAYOUT", "PoolEngine"]

#: A POOL command: the instruction fields as ``dlproc.hardware.isa`` encodes them, plus the output tag.
POOL_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Pool.field_specs()} | {"tag": unsigned(TAG_BITS)}
)

#: Column results kept: a window (kw <= 31 columns) plus at least 33 columns read ahead.
COLUMN_BUFFER_DEPTH = 64
_CI_BITS = 7  # column indices modulo 128: differences up to 64 stay unambiguous


def _sum_bits(terms: int) -> int:
    """Signed width of a sum of ``terms`` values x - zp_in, each in [-255, 255]."""
    return (terms * 255).bit_length() + 1


class PoolEngine(Engine):
    """Executes POOL commands. Ports as :class:`~dlproc.hardware.gateware.conv.ConvEngine` (no WGT port)."""

    def __init__(self, hw: isa.HardwareParams, acc_depth: int) -> None:
        self.acc_depth = acc_depth
        super().__init__(hw, {"cmd": POOL_CMD_LAYOUT}, ("inp", "prm"))

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        E = isa.ErrorCode
        errs: list = []
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        # Accept (registered, see engine.py); the field check is used in SETUP, the address
        # ranges are checked as the walks form the addresses.
        m.submodules.command = command = EngineCommand(
            POOL_CMD_LAYOUT,
            illegal=lambda f: ((f.in_w == 0) | (f.out_h == 0) | (f.out_w == 0) | (f.kh == 0) | (f.kw == 0)
                               | (f.stride_y == 0) | (f.stride_x == 0) | (f.z_size == 0)
                               | (f.act_min > f.act_max)),
        )
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        a = command.fields
        is_avg = a.mode == isa.PoolMode.AVG
        kmax_h = (1 << POOL_CMD_LAYOUT["kh"].shape.width) - 1
        kmax_w = (1 << POOL_CMD_LAYOUT["kw"].shape.width) - 1
        col_shape = signed(_sum_bits(kmax_h))  # 14 bits: a column of up to 31 words
        win_shape = signed(_sum_bits(kmax_h * kmax_w))  # 19 bits: never wraps (see above)
        m.submodules.colbuf = colbuf = memory.Memory(
            shape=data.ArrayLayout(col_shape, c), depth=COLUMN_BUFFER_DEPTH, init=[])
        cb_w = colbuf.write_port()
        cb_r = colbuf.read_port()  # synchronous, not transparent: a column is read after its write

        # Per command (SETUP): the row step and the column walk's skip over uncovered columns.
        # INP addresses are bounded (see conv.py's :func:`bounded_add` in engine.py): the buffer address bits
        # plus a sticky out-of-range bit, instead of the full width an encodable POOL can reach
        # (38 bits): exact range checks with a short carry chain.
        kb = self.inp_bits
        bounded = data.StructLayout({"low": unsigned(kb), "beyond": 1})
        row_step = Signal(bounded)  # stride_y * in_w
        n_new, n_new_m1 = Signal(5), Signal(5)  # min(stride_x, kw) (- 1): columns a further output adds
        skip = Signal(4)  # 1 + max(stride_x - kw, 0): to the next output's first new column
        back = Signal(_CI_BITS)  # min(stride_x, kw) - kw modulo 128: window start from its end
        plane_base = Signal(bounded)
        z = Signal(16)
        q = Signal(isa.SRAM_ADDR_BITS + 1)  # OUT address: one step at a time, so the check is exact
        prm_addr = Signal(isa.SRAM_ADDR_BITS + 1)
        params = Signal(data.ArrayLayout(REQUANT_LANE, c))
        prm_bad = Signal()
        last_z = z == a.z_size - 1

        # Column walk state (reset per plane).
        orow_base, cbase, addr = (Signal(bounded, name=n) for n in ("orow_base", "col_base", "inp_addr"))
        ky, j, ncols_m1 = Signal(5), Signal(5), Signal(5)
        ox, oy = Signal(16), Signal(16)
        pix = Signal(33)  # output pixel within the plane, for the accumulator-depth check
        ccol = Signal(_CI_BITS)  # index of the column being read
        rdone = Signal()
        # Window walk state (reset per plane).
        fk = Signal(5)
        fox, foy = Signal(16), Signal(16)
        fcol, fstart, fend = (Signal(_CI_BITS, name=n) for n in ("fold_col", "fold_start", "fold_end"))
        fdone = Signal()
        written = Signal(_CI_BITS)  # columns in the buffer so far

        rgo, fgo = Signal(), Signal()
        in_sweep = Signal()
        # Pipelines: column walk r1 (INP data) -> r2 (fold into the column) -> w3 (buffer write);
        # window walk f1 (buffer data) -> f2 (fold into the window) -> s3 (to the output stage).
        r1 = {k: Signal(w, name=f"r1_{k}") for k, w in (("valid", 1), ("first", 1), ("last", 1), ("col", 6))}
        r2 = {k: Signal(w, name=f"r2_{k}") for k, w in (("valid", 1), ("first", 1), ("last", 1), ("col", 6))}
        w3_en, w3_col = Signal(), Signal(6)
        ob = self.out_bits
        f_fields = (("valid", 1), ("first", 1), ("last", 1), ("final", 1), ("oob", 1), ("q", ob))
        f1 = {k: Signal(w, name=f"f1_{k}") for k, w in f_fields}
        f2 = {k: Signal(w, name=f"f2_{k}") for k, w in f_fields}
        s3_valid, s3_final, s3_q = Signal(), Signal(name="p3_final"), Signal(ob, name="p3_q")
        in_flight = r1["valid"] | r2["valid"] | w3_en | f1["valid"] | f2["valid"] | s3_valid

        # The read-port signature's ``en`` has init 1; drive it low unless a read is wanted, so
        # the compute unit's port muxes can tell which engine is reading.
        m.d.comb += self.prm.en.eq(0)
        with m.FSM(name="pool") as fsm:
            with m.State("IDLE"):
                m.d.comb += command.enable.eq(~error & ~in_flight)
                with m.If(command.take):
                    m.next = "SETUP"
            with m.State("SETUP"):
                new_cols = Mux(a.stride_x < a.kw, a.stride_x, a.kw)
                m.d.sync += [
                    row_step.eq(as_bounded(a.stride_y * a.in_w, kb)),
                    n_new.eq(new_cols), n_new_m1.eq(new_cols - 1),
                    skip.eq(Mux(a.stride_x > a.kw, a.stride_x - a.kw + 1, 1)),
                    back.eq(new_cols - a.kw),
                    plane_base.eq(as_bounded(a.inp_base, kb)), z.eq(0), q.eq(a.out_base), prm_addr.eq(a.prm_base),
                ]
                m.next = "PLANE_PRM"
            with m.State("PLANE_PRM"):
                # Entered when the previous plane's last window has left the engine, so no
                # window sees the next plane's parameters. Both walks restart here.
                m.d.sync += [
                    orow_base.eq(plane_base), cbase.eq(plane_base), addr.eq(plane_base),
                    ky.eq(0), j.eq(0), ncols_m1.eq(a.kw - 1), ox.eq(0), oy.eq(0), pix.eq(0),
                    ccol.eq(0), rdone.eq(0),
                    fk.eq(0), fox.eq(0), foy.eq(0), fcol.eq(0), fstart.eq(0), fend.eq(a.kw), fdone.eq(0),
                    written.eq(0),
                ]
                with m.If(is_avg):
                    m.d.comb += [self.prm.addr.eq(prm_addr), self.prm.en.eq(~error)]
                    m.next = "PRM_WAIT"
                with m.Else():
                    for lane in range(c):
                        m.d.sync += [params[lane].mult.eq(1), params[lane].mult_neg.eq(1),
                                     params[lane].shift.eq(0)]
                    m.next = "SWEEP"
            with m.State("PRM_WAIT"):
                ok = Const(1)
                for lane in range(c):
                    src = self.prm.data[lane]
                    ok = ok & ((src.mult >> MULT_BITS) == 0) & (src.shift <= MAX_SHIFT)
                    # The contract's AVG requantizes with M for both signs (no leaky slope).
                    m.d.sync += [params[lane].mult.eq(src.mult), params[lane].mult_neg.eq(src.mult),
                                 params[lane].shift.eq(src.shift)]
                m.d.comb += prm_bad.eq(~ok)
                m.next = "SWEEP"
            with m.State("SWEEP"):
                m.d.comb += in_sweep.eq(1)
                # fdone implies every column was written and folded: wait for the last window
                # to leave stage 3 (on an error the engine stays here, busy, as it stopped).
                with m.If(fdone & ~in_flight & ~error):
                    with m.If(last_z):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [z.eq(z + 1), plane_base.eq(bounded_add(plane_base, as_bounded(a.in_plane, kb))),
                                     prm_addr.eq(prm_addr + 1)]
                        m.next = "PLANE_PRM"

        # ---- column walk: ky inside a column, j over the columns an output adds, then ox, oy.
        # It may not overwrite the buffer entry of a column of the window being folded: ``room``
        # is registered (out of the address generator's enable path) from ccol - fstart < 63,
        # which still holds as < 64 in the next cycle (ccol grows by at most one per cycle).
        room = Signal()
        m.d.sync += room.eq((ccol - fstart)[:_CI_BITS] < COLUMN_BUFFER_DEPTH - 1)
        m.d.comb += rgo.eq(in_sweep & ~rdone & ~error & room)
        last_ky, last_j = ky == a.kh - 1, j == ncols_m1
        with m.If(rgo):
            with m.If(~last_ky):
                m.d.sync += [ky.eq(ky + 1), addr.eq(bounded_add(addr, as_bounded(a.in_w, kb)))]
            with m.Else():
                m.d.sync += [ky.eq(0), ccol.eq(ccol + 1)]
                with m.If(~last_j):
                    nxt = bounded_add(cbase, as_bounded(Const(1, 1), kb))
                    m.d.sync += [j.eq(j + 1), cbase.eq(nxt), addr.eq(nxt)]
                with m.Else():
                    m.d.sync += [j.eq(0), pix.eq(pix + 1)]
                    with m.If(ox != a.out_w - 1):
                        nxt = bounded_add(cbase, as_bounded(skip, kb))
                        m.d.sync += [ox.eq(ox + 1), ncols_m1.eq(n_new_m1), cbase.eq(nxt), addr.eq(nxt)]
                    with m.Elif(oy != a.out_h - 1):
                        nxt = bounded_add(orow_base, row_step)
                        m.d.sync += [ox.eq(0), oy.eq(oy + 1), ncols_m1.eq(a.kw - 1), orow_base.eq(nxt),
                                     cbase.eq(nxt), addr.eq(nxt)]
                    with m.Else():
                        m.d.sync += rdone.eq(1)
        m.d.comb += [self.inp.addr.eq(addr.low), self.inp.en.eq(rgo)]
        errs.append((rgo & (addr.beyond | (addr.low >= hw.inp_depth)), E.SRAM_RANGE))
        errs.append((rgo & (pix >= self.acc_depth), E.SRAM_RANGE))

        m.d.sync += [r1["valid"].eq(rgo), r1["first"].eq(ky == 0), r1["last"].eq(last_ky), r1["col"].eq(ccol[:6])]
        m.d.sync += [r2[k].eq(r1[k]) for k in r1]
        # r1 -> r2: the word is registered as the value to fold, x - zp_in for AVG (9 bits), so
        # that r2 has a single adder (or comparator) in front of the running column value.
        # The data registers of both walks load only with a valid item (their value matters only
        # then): otherwise they would follow the shared INP port and column buffer every cycle,
        # which costs simulation time while other engines run.
        x2 = Signal(data.ArrayLayout(signed(9), c))
        with m.If(r1["valid"]):
            for lane in range(c):
                x = self.inp.data[lane]
                m.d.sync += x2[lane].eq(Mux(is_avg, x - a.zp_in, x))
        col = Signal(data.ArrayLayout(col_shape, c))
        col_new = Signal(data.ArrayLayout(col_shape, c))
        for lane in range(c):
            val, run = x2[lane], col[lane]
            folded = Mux(is_avg, run + val, Mux(val > run, val, run))
            m.d.comb += col_new[lane].eq(Mux(r2["first"], val, folded))
        with m.If(r2["valid"]):
            m.d.sync += col.eq(col_new)
        # The buffer is written from ``col`` itself, which holds the complete column after its
        # last word, so col_new has a single use (evaluated only with a valid word).
        m.d.sync += w3_en.eq(r2["valid"] & r2["last"])
        with m.If(r2["valid"] & r2["last"]):
            m.d.sync += w3_col.eq(r2["col"])
        m.d.comb += [cb_w.addr.eq(w3_col), cb_w.data.eq(col), cb_w.en.eq(w3_en)]
        with m.If(w3_en):
            m.d.sync += written.eq(written + 1)

        # ---- window walk: fk over the window's kw columns, then fox, foy.
        m.d.comb += fgo.eq(in_sweep & ~fdone & ~error & (fcol != written))
        last_fk = fk == a.kw - 1
        last_fox, last_foy = fox == a.out_w - 1, foy == a.out_h - 1
        out_oob = q >= hw.out_depth
        with m.If(fgo):
            with m.If(~last_fk):
                m.d.sync += [fk.eq(fk + 1), fcol.eq(fcol + 1)]
            with m.Else():
                m.d.sync += [fk.eq(0), q.eq(q + 1)]
                with m.If(~last_fox):
                    m.d.sync += [fox.eq(fox + 1), fend.eq(fend + n_new), fstart.eq(fend + back), fcol.eq(fend + back)]
                with m.Elif(~last_foy):
                    m.d.sync += [fox.eq(0), foy.eq(foy + 1), fstart.eq(fend), fcol.eq(fend),
                                 fend.eq(fend + a.kw)]
                with m.Else():
                    m.d.sync += fdone.eq(1)
        m.d.comb += [cb_r.addr.eq(fcol[:6]), cb_r.en.eq(fgo)]
        errs.append((fgo & last_fk & out_oob, E.SRAM_RANGE))

        f0 = {"valid": fgo, "first": fk == 0, "last": last_fk, "final": last_fox & last_foy & last_z,
              "oob": out_oob, "q": q[:ob]}
        m.d.sync += [f1[k].eq(f0[k]) for k in f0] + [f2[k].eq(f1[k]) for k in f0]
        # f1 -> f2: the column word is registered, so that f2 has one adder (or comparator) in
        # front of the running window value, as in the column walk.
        cv2 = Signal(data.ArrayLayout(col_shape, c))
        with m.If(f1["valid"]):
            m.d.sync += cv2.eq(cb_r.data)
        win = Signal(data.ArrayLayout(win_shape, c))  # running max or sum per lane
        win_new = Signal(data.ArrayLayout(win_shape, c))
        for lane in range(c):
            val, run = cv2[lane], win[lane]
            folded = Mux(is_avg, run + val, Mux(val > run, val, run))
            m.d.comb += win_new[lane].eq(Mux(f2["first"], val, folded))
        with m.If(f2["valid"]):
            m.d.sync += win.eq(win_new)

        # Stage 3 registers a finished window for the output stage, which keeps the fold's
        # adder out of the output stage's first (sign-select) stage.
        m.d.sync += [
            s3_valid.eq(f2["valid"] & f2["last"] & ~f2["oob"]),
            s3_final.eq(f2["final"]),
            s3_q.eq(f2["q"]),
        ]
        acc = Signal(data.ArrayLayout(signed(32), c))
        for lane in range(c):
            m.d.comb += acc[lane].eq(win[lane])  # sign-extended; holds the result in stage 3
        m.d.comb += [
            self.ost.valid.eq(s3_valid),
            self.ost.acc.eq(acc),
            self.ost.params.eq(params),
            self.ost.zp_out.eq(Mux(is_avg, a.zp_out, 0)),
            self.ost.act_min.eq(a.act_min),
            self.ost.act_max.eq(a.act_max),
            self.ost.addr.eq(s3_q),
            self.ost.tag.eq(Cat(s3_final, a.tag)),
        ]
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | in_flight)

        errs.append((fsm.ongoing("PRM_WAIT") & prm_bad, E.ILLEGAL_FIELD))
        errs.insert(0, (fsm.ongoing("SETUP") & command.illegal, E.ILLEGAL_FIELD))
        errs.append((fsm.ongoing("PLANE_PRM") & is_avg & (prm_addr >= hw.prm_depth), E.SRAM_RANGE))
        with m.If(~error):
            for cond, value in reversed(errs):
                with m.If(cond):
                    m.d.sync += [error.eq(1), code.eq(int(value))]
        return m
