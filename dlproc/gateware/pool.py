"""The pool engine: max and average pooling (global average = a window over the whole plane).

Semantics (the contract's POOL, C lanes of one channel block per plane, planes z < z_size)::

    window(z, oy, ox) = INP[inp_base + z*in_plane + (oy*sy + ky)*in_w + ox*sx + kx], ky < kh, kx < kw
    MAX: OUT = clamp(max(window), act_min, act_max)
    AVG: s = sum(window) - kh*kw*zp_in (int32, wrapping);
         OUT = requantize(s, M, S, zp_out, act_min, act_max) with M, S of PRM word prm_base + z
    OUT[out_base + z*out_h*out_w + oy*out_w + ox]

The engine reads one INP word per cycle and folds it into C running lane values (max, or the
sum of ``x - zp_in``, which equals ``sum(x) - kh*kw*zp_in`` modulo 2**32 without a multiplier).
The last word of a window sends the lane values to the shared output stage; MAX goes through it
with the identity parameters (M = 1, S = 0, zp_out = 0), so the clamp is the output stage's and
both modes share one OUT write path. A window of kh*kw words therefore takes kh*kw cycles, and a
plane ``out_h*out_w*kh*kw`` cycles plus two (AVG: three, to read the PRM word) at its start. The
output address is a counter, since OUT planes are stored densely one after the other. The INP
addresses and loop counters are formed as in the conv engine (bounded addresses with a sticky
"beyond the buffer" bit, down counters with registered ``last`` flags) to keep them off the
critical path.

Run-time checks as in the conv engine: zero-sized fields and act_min > act_max give ILLEGAL_FIELD,
addresses beyond a buffer and tiles beyond the accumulator depth give SRAM_RANGE (the accumulator
limit is not needed by this engine, but the ISA-level simulator applies it to POOL, and both must
stop on the same programs).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc import isa
from dlproc.numerics import MAX_SHIFT, MULT_BITS

from .conv import TAG_BITS, _bounded, _bounded_add, _read_port, inp_word_layout
from .engine import EngineCommand
from .output_stage import REQUANT_LANE, _input_signature as _ostage_input_signature, prm_word_layout

__all__ = ["POOL_CMD_LAYOUT", "PoolEngine"]

#: A POOL command: the instruction fields as ``dlproc.isa`` encodes them, plus the output tag.
POOL_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Pool.field_specs()} | {"tag": unsigned(TAG_BITS)}
)


class PoolEngine(wiring.Component):
    """Executes POOL commands. Ports as :class:`~dlproc.gateware.conv.ConvEngine` (no WGT port)."""

    def __init__(self, hw: isa.HardwareParams, acc_depth: int) -> None:
        self.hw = hw
        self.c = hw.c
        self.acc_depth = acc_depth
        self.inp_bits = max(1, (hw.inp_depth - 1).bit_length())
        self.prm_bits = max(1, (hw.prm_depth - 1).bit_length())
        self.out_bits = max(1, (hw.out_depth - 1).bit_length())
        super().__init__({
            "cmd": In(stream.Signature(POOL_CMD_LAYOUT)),
            "inp": Out(_read_port(self.inp_bits, inp_word_layout(self.c))),
            "prm": Out(_read_port(self.prm_bits, prm_word_layout(self.c))),
            "ost": Out(_ostage_input_signature(self.c, self.out_bits, 1 + TAG_BITS)),
            "busy": Out(1),
            "error": Out(1),
            "error_code": Out(4),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        E = isa.ErrorCode
        errs: list = []
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        # Accept (registered, see engine.py); the field check is used in SETUP, the address
        # ranges are checked as the sweep forms the addresses.
        m.submodules.command = command = EngineCommand(
            POOL_CMD_LAYOUT,
            illegal=lambda f: ((f.in_w == 0) | (f.out_h == 0) | (f.out_w == 0) | (f.kh == 0) | (f.kw == 0)
                               | (f.stride_y == 0) | (f.stride_x == 0) | (f.z_size == 0)
                               | (f.act_min > f.act_max)),
        )
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        a = command.fields
        # INP addresses modulo 2**inp_bits plus a sticky "beyond" bit, as in the conv engine
        # (conv._bounded_add): short carry chains, exact range checks.
        kb = self.inp_bits
        bounded = data.StructLayout({"low": unsigned(kb), "beyond": 1})
        row_step = Signal(bounded)  # stride_y * in_w
        plane_base, orow_base, opix_base, krow_base, addr = (
            Signal(bounded, name=n) for n in ("plane_base", "orow_base", "opix_base", "krow_base", "inp_addr"))
        # The window, pixel and plane counters count down to 0, each with a registered ``last``
        # flag, so that the walk's multiplexers select on flip-flops rather than on 16-bit
        # compares with ``field - 1``; ``*_m1`` and ``*_one`` (field == 1) reload them.
        z, oy, ox = Signal(16, name="z_left"), Signal(16, name="oy_left"), Signal(16, name="ox_left")
        ky, kx = Signal(5, name="ky_left"), Signal(5, name="kx_left")
        last_z, last_oy, last_ox, last_ky, last_kx = (
            Signal(name=f"last_{n}") for n in ("z", "oy", "ox", "ky", "kx"))
        ow_m1, oh_m1 = Signal(16), Signal(16)
        kw_m1, kh_m1 = Signal(5), Signal(5)
        ow_one, oh_one, kw_one, kh_one = (Signal(name=f"{n}_one") for n in ("ow", "oh", "kw", "kh"))
        win_first = Signal()  # the next item starts a window (kx and ky at the window's origin)
        pix = Signal(33)  # pixel index within the plane, for the accumulator-depth check
        q = Signal(isa.SRAM_ADDR_BITS + 1)  # OUT address: one step at a time, so the check is exact
        prm_addr = Signal(isa.SRAM_ADDR_BITS + 1)
        params = Signal(data.ArrayLayout(REQUANT_LANE, c))
        is_avg = a.mode == isa.PoolMode.AVG

        win_last = last_kx & last_ky
        plane_last = win_last & last_ox & last_oy
        issue = Signal()
        s1_valid, s2_valid, s3_valid = Signal(), Signal(), Signal()
        prm_bad = Signal()

        # The read-port signature's ``en`` has init 1; drive it low unless a read is wanted, so
        # the compute unit's port muxes can tell which engine is reading.
        m.d.comb += self.prm.en.eq(0)
        with m.FSM(name="pool") as fsm:
            with m.State("IDLE"):
                # The last windows of the previous command still read ``a`` (mode, zero point,
                # tag) in stages 1 to 3, so a new command waits until they have left.
                m.d.comb += command.enable.eq(~error & ~s1_valid & ~s2_valid & ~s3_valid)
                with m.If(command.take):
                    m.next = "SETUP"
            with m.State("SETUP"):
                base = _bounded(a.inp_base, kb)
                m.d.sync += [
                    row_step.eq(_bounded(a.stride_y * a.in_w, kb)),
                    plane_base.eq(base), orow_base.eq(base), opix_base.eq(base),
                    krow_base.eq(base), addr.eq(base),
                    z.eq(a.z_size - 1), oy.eq(a.out_h - 1), ox.eq(a.out_w - 1),
                    ky.eq(a.kh - 1), kx.eq(a.kw - 1),
                    last_z.eq(a.z_size == 1), last_oy.eq(a.out_h == 1), last_ox.eq(a.out_w == 1),
                    last_ky.eq(a.kh == 1), last_kx.eq(a.kw == 1),
                    ow_m1.eq(a.out_w - 1), oh_m1.eq(a.out_h - 1), kw_m1.eq(a.kw - 1), kh_m1.eq(a.kh - 1),
                    ow_one.eq(a.out_w == 1), oh_one.eq(a.out_h == 1),
                    kw_one.eq(a.kw == 1), kh_one.eq(a.kh == 1),
                    win_first.eq(1), pix.eq(0),
                    q.eq(a.out_base), prm_addr.eq(a.prm_base),
                ]
                m.next = "PLANE_PRM"
            with m.State("PLANE_WAIT"):
                m.next = "PLANE_PRM"
            with m.State("PLANE_PRM"):
                # Entered two cycles after a plane's last issue: the new parameters become
                # visible three cycles later, after that plane's last window has left stage 3
                # (where the parameters go to the output stage), so no item sees the next
                # plane's parameters.
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
                m.d.comb += issue.eq(~error)
                with m.If(issue & plane_last):
                    with m.If(last_z):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "PLANE_WAIT"

        errs.append((fsm.ongoing("PRM_WAIT") & prm_bad, E.ILLEGAL_FIELD))
        in_setup = fsm.ongoing("SETUP")
        errs.insert(0, (in_setup & command.illegal, E.ILLEGAL_FIELD))
        errs.append((fsm.ongoing("PLANE_PRM") & is_avg & (prm_addr >= hw.prm_depth), E.SRAM_RANGE))
        errs.append((issue & (addr.beyond | (addr.low >= hw.inp_depth)), E.SRAM_RANGE))
        errs.append((issue & (pix >= self.acc_depth), E.SRAM_RANGE))
        out_oob = q >= hw.out_depth
        errs.append((issue & win_last & out_oob, E.SRAM_RANGE))

        # Window walk: kx, ky inside the window, then ox, oy, then the plane.
        def count_down(left: Signal, last: Signal) -> list:
            return [left.eq(left - 1), last.eq(left == 1)]

        def reload(left: Signal, last: Signal, m1: Signal, one: Signal) -> list:
            return [left.eq(m1), last.eq(one)]

        one_step = _bounded(Const(1, 1), kb)
        with m.If(issue):
            m.d.sync += win_first.eq(win_last)
            with m.If(~last_kx):
                m.d.sync += count_down(kx, last_kx) + [addr.eq(_bounded_add(addr, one_step))]
            with m.Elif(~last_ky):
                nxt = _bounded_add(krow_base, _bounded(a.in_w, kb))
                m.d.sync += reload(kx, last_kx, kw_m1, kw_one) + count_down(ky, last_ky)
                m.d.sync += [krow_base.eq(nxt), addr.eq(nxt)]
            with m.Else():
                m.d.sync += reload(kx, last_kx, kw_m1, kw_one) + reload(ky, last_ky, kh_m1, kh_one)
                m.d.sync += [q.eq(q + 1), pix.eq(pix + 1)]
                with m.If(~last_ox):
                    nxt = _bounded_add(opix_base, _bounded(a.stride_x, kb))
                    m.d.sync += count_down(ox, last_ox)
                    m.d.sync += [opix_base.eq(nxt), krow_base.eq(nxt), addr.eq(nxt)]
                with m.Elif(~last_oy):
                    nxt = _bounded_add(orow_base, row_step)
                    m.d.sync += reload(ox, last_ox, ow_m1, ow_one) + count_down(oy, last_oy)
                    m.d.sync += [orow_base.eq(nxt), opix_base.eq(nxt), krow_base.eq(nxt), addr.eq(nxt)]
                with m.Else():
                    nxt = _bounded_add(plane_base, _bounded(a.in_plane, kb))
                    m.d.sync += (reload(ox, last_ox, ow_m1, ow_one) + reload(oy, last_oy, oh_m1, oh_one)
                                 + count_down(z, last_z))
                    m.d.sync += [pix.eq(0), prm_addr.eq(prm_addr + 1),
                                 plane_base.eq(nxt), orow_base.eq(nxt), opix_base.eq(nxt),
                                 krow_base.eq(nxt), addr.eq(nxt)]
        m.d.comb += [self.inp.addr.eq(addr.low), self.inp.en.eq(issue)]

        # Pipeline: stage 1 = INP data arrives, stage 2 = word registered and folded.
        s0 = {"valid": issue, "first": win_first, "last": win_last, "final": plane_last & last_z,
              "oob": out_oob, "q": q[:self.out_bits]}
        s1 = {k: Signal(len(v), name=f"p1_{k}") for k, v in s0.items()}
        s2 = {k: Signal(len(v), name=f"p2_{k}") for k, v in s0.items()}
        m.d.sync += [s1[k].eq(s0[k]) for k in s0] + [s2[k].eq(s1[k]) for k in s0]
        m.d.comb += [s1_valid.eq(s1["valid"]), s2_valid.eq(s2["valid"])]
        # Stage 3 registers a finished window for the output stage, which keeps the fold's
        # adder out of the output stage's first (sign-select) stage.
        s3 = {"valid": s3_valid, "final": Signal(name="p3_final"), "q": Signal(self.out_bits, name="p3_q")}
        # Stage 1 -> 2: the word is registered as the value to fold, x - zp_in for AVG (9 bits),
        # so that stage 2 has a single adder (or comparator) in front of the running value.
        x2 = Signal(data.ArrayLayout(signed(9), c))
        for lane in range(c):
            x = self.inp.data[lane]
            m.d.sync += x2[lane].eq(Mux(is_avg, x - a.zp_in, x))

        run = Signal(data.ArrayLayout(signed(32), c))  # running max or sum per lane
        new = Signal(data.ArrayLayout(signed(32), c))
        for lane in range(c):
            val = x2[lane]
            folded = Mux(is_avg, run[lane] + val, Mux(val > run[lane], val, run[lane]))
            m.d.comb += new[lane].eq(Mux(s2["first"], val, folded))
        with m.If(s2["valid"]):
            m.d.sync += run.eq(new)

        m.d.sync += [
            s3["valid"].eq(s2["valid"] & s2["last"] & ~s2["oob"]),
            s3["final"].eq(s2["final"]),
            s3["q"].eq(s2["q"]),
        ]
        m.d.comb += [
            self.ost.valid.eq(s3["valid"]),
            self.ost.acc.eq(run),  # holds the window's result in stage 3
            self.ost.params.eq(params),
            self.ost.zp_out.eq(Mux(is_avg, a.zp_out, 0)),
            self.ost.act_min.eq(a.act_min),
            self.ost.act_max.eq(a.act_max),
            self.ost.addr.eq(s3["q"]),
            self.ost.tag.eq(Cat(s3["final"], a.tag)),
        ]
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | s1["valid"] | s2["valid"] | s3["valid"])

        with m.If(~error):
            for cond, value in reversed(errs):
                with m.If(cond):
                    m.d.sync += [error.eq(1), code.eq(int(value))]
        return m
