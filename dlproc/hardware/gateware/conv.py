"""The conv engine: a C x C int8 MAC array executing CONV instructions, weight-stationary per tap.

Semantics (the contract's CONV, one output-channel block of C lanes)::

    acc[p][co] = bias[co] + sum_{cb, ky, kx, ci} WGT[wgt_base + (cb*kh + ky)*kw + kx][co][ci]
                 * INP[inp_base + cb*in_plane + (oy*sy + ky*dy)*in_w + ox*sx + kx*dx][ci]
    OUT[out_base + oy*out_w + ox] = requantize(acc[p], ...)      with p = oy*out_w + ox

Micro-architecture
------------------
* **Taps in WGT order.** The engine walks the taps t = (cb, ky, kx) in exactly the order of the
  WGT words, so the weight address is simply ``wgt_base + t``. For every tap it holds that one
  C x C weight word in registers (``w_cur``) and sweeps all output pixels of the tile, reading
  one INP word per cycle. The next tap's word is prefetched into ``w_next`` while the sweep runs,
  so consecutive taps follow each other without a bubble once a tile has >= 3 pixels.
* **Incremental addresses.** All INP addresses are formed by adding precomputed steps
  (``sx``, ``sy*in_w``, ``dx``, ``dy*in_w``, ``in_plane``) to registered bases; the only
  multiplications (``sy*in_w`` and ``dy*in_w``, 3 x 16 bits) happen once per instruction. The
  bases and steps are *bounded*: their low ``inp_bits`` bits (``log2`` of the INP depth) plus a
  sticky "beyond the buffer" bit, so the adders are 13 bits wide for 8192 words instead of the
  38 bits the largest encodable address needs, and the range check ``beyond | (low >= depth)``
  is still exact. The loop counters count down, each with a registered ``last`` flag, so the
  loop multiplexers select on flip-flops. (This was the processor's critical path: a 38-bit
  ``row_base + row_step`` followed by compare-driven multiplexers, 4.95-5.10 ns pre-route.)
* **Pipeline** (stage numbers = cycles after the INP read is issued): 1 INP data arrives,
  2 INP word registered, 3 C*C products registered, then a pairwise adder tree over the C input
  lanes registered every two levels, then the accumulate stage ``Ss``: the accumulator of pixel p
  was read from ACC one cycle earlier (or is the bias, on the first tap), the sum is added and
  written back in the same cycle (read-modify-write).
* **RMW hazard.** The ACC read of pixel p for tap t+1 is issued at least ``max(N, 3)`` cycles
  after the one for tap t (N = pixels per tile; taps are at least 3 cycles apart because of the
  weight prefetch), while the write for tap t follows its read by one cycle. So the write always
  lands before the next read of the same word, also for a 1 x 1 output tile, with no stall and
  no forwarding.
* **One ACC memory, drain overlapped.** After the last tap the tile is drained from ACC through
  the output stage into OUT, one pixel per cycle. The next tile's *first* tap does not read ACC
  (it starts from the bias), so it may sweep while the drain runs: it only waits until the drain
  has begun, after which the drain's read of pixel p always precedes the first tap's write of p
  (both advance one pixel per cycle and the write trails its issue by Ss cycles). Its later taps
  read ACC and wait until the drain has finished reading. This gives the overlap of a ping-pong
  accumulator with a single 1R1W memory (half the M10K blocks); with tiles of equal size no
  cycle is lost, since the drain of N pixels ends before the first tap of N pixels does. Two
  descriptor slots (bias, requantization parameters, OUT base, tag) alternate between commands.
* **Partial sums.** A reduction too big for one CONV (its weights do not fit WGT, or its input
  tile INP) is a chain of CONVs over slices of the input channel blocks: ``acc_keep`` leaves the
  tile's int32 sums in ACC: its drain is a single item that writes no lane of OUT and only
  carries the instruction's completion (its tokens) through the output stage, and the next CONV with ``acc_in`` starts every pixel from the held sum instead of the bias:
  its first tap reads ACC like a later tap, after the held tile's last write. The engine records
  that a tile is held and its ``out_h x out_w``; any CONV's set-up releases it, and an ``acc_in``
  without a held tile of its shape is ILLEGAL_FIELD. Since the sums are exact int32 (wrapping),
  the chain's result equals one CONV over all channel blocks, bit for bit.
* **Run-time checks.** Every INP/WGT/OUT address and the ACC pixel index are compared with the
  buffer depths as they are generated; the first violation stops the engine with SRAM_RANGE, a
  zero-sized field or act_min > act_max with ILLEGAL_FIELD. An OUT write with a bad address is
  suppressed, so an erroneous instruction never corrupts a valid OUT word.

Cycle counts, with T = cin_blocks*kh*kw taps, N = out_h*out_w pixels, Ss =
:func:`acc_pipeline_stages` (4 for C = 2..4, 5 for C = 5..16, 6 for C = 17..64),
L = output-stage latency (6):

* sweep of one tile: ``(T - 1)*max(N, 3) + N`` cycles in which the MAC array is busy except for
  the bubbles of taps shorter than 3 pixels;
* back-to-back CONVs: one tile every ``(T - 1)*max(N, 3) + N + Ss + 1`` cycles (the Ss + 1 cycles
  are the accept/set-up of the next command overlapped with the wait for the previous tile's
  last write and the start of its drain), plus ``N_prev - N`` when a multi-tap tile follows a
  larger tile (its second tap waits for the end of that drain);
* a CONV with ``acc_keep`` drains in one cycle; a CONV with ``acc_in`` starts its first tap at least
  ``Ss - 2`` cycles after the held tile's last issue (its last write must land first);
* a CONV followed by FINISH: ``(T - 1)*max(N, 3) + 2*N + Ss + L + 8`` cycles from the instruction
  being offered to ``finished`` (checked by the tests).
"""

from __future__ import annotations

import math

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, wiring

from dlproc.hardware import isa

from dlproc.hardware.gateware.engine import (TAG_BITS, Engine, EngineCommand, as_bounded, bounded_add,
                                             TAG_TO_INP, inp_word_layout, table_refused, wgt_word_layout)
from dlproc.hardware.gateware.output_stage import (
    REQUANT_LANE,
    requant_params_ok,
)

__all__ = [
    "CONV_CMD_LAYOUT",
    "ConvEngine",
    "acc_pipeline_stages",
]

#: A CONV command: the instruction fields exactly as ``dlproc.hardware.isa`` encodes them, plus the tag.
CONV_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Conv.field_specs()} | {"tag": unsigned(TAG_BITS)}
)


def small_mul(value: Value, factor: Value) -> Value:
    """``value * factor`` as shifted adds, one per bit of the (few-bit) ``factor``. Written out so
    that synthesis builds it from logic: a ``*`` would take a DSP block, and the DE10-Nano's
    processor uses all 112."""
    value, factor = Value.cast(value), Value.cast(factor)
    total = Const(0, 1)
    for k in range(len(factor)):
        total = total + Mux(factor[k], value << k, 0)
    return total


def dw_refused(hw: isa.HardwareParams, f: data.View) -> Value:
    """A depthwise CONV this processor cannot run (``isa.Conv._check_depthwise``): ILLEGAL_FIELD."""
    if hw.dw_kh < 1:
        return Const(1)
    # (dw_rows - 1) * stride_y + kh <= DW_COL as a table of the largest dw_rows per (stride_y,
    # kh < 4): a 5-input lookup and a 4-bit compare instead of a multiply-add chain on the command
    # path (kh > 3 is refused by kh > dw_kh anyway).
    limits = [0] * 32
    for kh in range(1, 4):
        for sy in range(1, 8):
            limits[kh << 3 | sy] = min(15, max(0, (isa.DW_COL - kh) // sy + 1))
    most = Array(Const(v, 4) for v in limits)[Cat(f.stride_y, f.kh[:2])]
    return ((f.cin_blocks != 1) | (f.kw > isa.DW_WINDOW_COLS) | (f.kh > hw.dw_kh) | (f.dil_y != 1) | (f.dil_x != 1)
            | ((f.kh == 1) & (f.kw == 1)) | (f.dw_rows == 0) | (f.dw_rows > most))


def acc_pipeline_stages(c: int) -> int:
    """The accumulate stage Ss: cycles from the INP read to the ACC write of the same pixel."""
    levels = math.ceil(math.log2(c)) if c > 1 else 0
    return 3 + math.ceil(levels / 2)


class ConvEngine(Engine):
    """Executes CONV commands; see the module docstring for the micro-architecture.

    Ports:
      ``cmd``   stream of :data:`CONV_CMD_LAYOUT` (accepted when the engine can start it);
      ``inp``, ``wgt``, ``prm``  read ports (address out, data in one cycle later);
      ``ost``   items for the shared :class:`~dlproc.hardware.gateware.output_stage.OutputStage`,
                ``tag`` = ``Cat(last, cmd.tag)``;
      ``busy``  a command is being set up or swept, or a tile is not yet drained;
      ``mac_active``  the MAC array consumed an INP word this cycle (for utilization counters);
      ``error``/``error_code``  sticky, an :class:`dlproc.hardware.isa.ErrorCode` value.
    """

    def __init__(self, hw: isa.HardwareParams, acc_depth: int) -> None:
        if acc_depth < 1:
            raise ValueError(f"acc_depth must be >= 1, got {acc_depth}")
        self.acc_depth = acc_depth
        self.acc_bits = max(1, (acc_depth - 1).bit_length())
        self.stage_acc = acc_pipeline_stages(hw.c)
        super().__init__(hw, {"cmd": CONV_CMD_LAYOUT}, ("inp", "wgt", "prm"), mac_active=True)

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        E = isa.ErrorCode

        # Errors: the first one wins and stops everything (the processor halts on it).
        err_pending = []  # (condition, code) in priority order, evaluated every cycle

        def raise_if(cond, code: E) -> None:
            err_pending.append((cond, code))

        error = Signal()
        m.d.comb += self.error.eq(error)

        # ---------------------------------------------------------------- accumulator memory
        # One ACC memory with one read and one write port (see the module docstring for how the
        # drain of a tile overlaps the first tap of the next without a second bank).
        acc_shape = data.ArrayLayout(signed(32), c)
        acc_mem = memory.Memory(shape=acc_shape, depth=self.acc_depth, init=[])
        m.submodules.acc = acc_mem
        acc_rp, acc_wp = acc_mem.read_port(), acc_mem.write_port()
        # Tile hand-over state: `wait_final` = the last pixel of the previous tile has been issued
        # but not yet written; `full` = that tile is complete in ACC and its drain has not begun;
        # `drain_reading` = the drain is reading ACC.
        wait_final = Signal()
        full = Signal()
        drain_reading = Signal()
        d_slot = Signal()  # descriptor slot of the tile being drained
        # Partial sums: a CONV with acc_keep leaves its tile in ACC (no drain) and records its
        # shape; the next CONV may continue it with acc_in. Any CONV's set-up releases it, so an
        # acc_in that does not directly follow a matching acc_keep is refused (ILLEGAL_FIELD)
        # instead of adding to whatever ACC holds.
        held = Signal()
        held_h, held_w = Signal(16), Signal(16)
        held_mode = Signal(5)  # Cat(dw, dw_rows): a depthwise tile's sums are in strip order
        v1, slot1 = Signal(), Signal()  # drain item one cycle after its ACC read

        # Two descriptor slots, alternating per command: the drain of one tile still needs its
        # output parameters while the next command's are loaded. A slot is always loaded (accept,
        # then the PRM word) before its tile uses it, so the slots need no reset (see x2 below).
        def desc(b: int) -> dict:
            return {
                "out_base": Signal(isa.SRAM_ADDR_BITS, name=f"d{b}_out_base", reset_less=True),
                "out_h_m1": Signal(16, name=f"d{b}_out_h_m1", reset_less=True),
                "out_w_m1": Signal(16, name=f"d{b}_out_w_m1", reset_less=True),
                "zp_out": Signal(signed(8), name=f"d{b}_zp", reset_less=True),
                "act_min": Signal(signed(8), name=f"d{b}_lo", reset_less=True),
                "act_max": Signal(signed(8), name=f"d{b}_hi", reset_less=True),
                "act_table": Signal(name=f"d{b}_table", reset_less=True),
                "acc_keep": Signal(name=f"d{b}_keep", reset_less=True),
                "dw": Signal(name=f"d{b}_dw", reset_less=True),
                "dw_rows": Signal(4, name=f"d{b}_dw_rows", reset_less=True),
                # Written by the depthwise walk when the tile's last evaluation issues: its strips
                # and the rows of the last one, so that the drain needs no 16-bit arithmetic.
                "dw_strips": Signal(16, name=f"d{b}_dw_strips", reset_less=True),
                "dw_last_rows": Signal(4, name=f"d{b}_dw_last_rows", reset_less=True),
                "tag": Signal(TAG_BITS, name=f"d{b}_tag", reset_less=True),
                "params": Signal(data.ArrayLayout(REQUANT_LANE, c), name=f"d{b}_params", reset_less=True),
                "bias": Signal(data.ArrayLayout(signed(32), c), name=f"d{b}_bias", reset_less=True),
            }

        descs = [desc(0), desc(1)]

        # ---------------------------------------------------------------- command / sweep FSM
        # Accept and check (registered, see engine.py); the verdicts are used in SETUP.
        m.submodules.command = command = EngineCommand(
            CONV_CMD_LAYOUT,
            illegal=lambda f: ((f.in_w == 0) | (f.out_h == 0) | (f.out_w == 0) | (f.kh == 0) | (f.kw == 0)
                               | (f.stride_y == 0) | (f.stride_x == 0) | (f.dil_y == 0) | (f.dil_x == 0)
                               | (f.cin_blocks == 0) | (f.act_min > f.act_max) | table_refused(hw, f)
                               | (f.dw & dw_refused(hw, f))),
            ranges=[(lambda f: f.prm_base, hw.prm_depth - 1)],
        )
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        a = command.fields  # the instruction being swept
        mode = Mux(a.dw, Cat(a.dw, a.dw_rows), 0)
        slot = Signal()  # descriptor slot of the command being set up / swept
        # INP addresses are kept modulo 2**inp_bits plus a sticky "beyond" bit (see
        # :func:`bounded_add` in engine.py): the exact address only matters while it is inside the buffer, and
        # a 13-bit adder is much shorter than the 38 bits an encodable CONV can reach.
        kb = self.inp_bits
        bounded = data.StructLayout({"low": unsigned(kb), "beyond": 1})
        # The output-pixel and tap counters count down to 0; each has a registered ``last`` flag
        # (the counter is at 0) so that the loop multiplexers select on flip-flops, not on
        # 16-bit compares. ``*_m1`` (= field - 1) and ``*_one`` (= field == 1) reload them.
        ow_m1, oh_m1 = Signal(16), Signal(16)
        kw_m1, kh_m1 = Signal(5), Signal(5)
        cb_m1 = Signal(16)
        ow_one, oh_one, kw_one, kh_one, cb_one = (Signal(name=f"{n}_one") for n in ("ow", "oh", "kw", "kh", "cb"))
        row_step = Signal(bounded)  # stride_y * in_w: next output row
        ky_step = Signal(bounded)  # dil_y * in_w: next kernel row
        cb_base, ky_base, tap_base, row_base, addr = (Signal(bounded, name=n) for n in (
            "cb_base", "ky_base", "tap_base", "row_base", "inp_addr"))
        ox, oy, cb = Signal(16, name="ox_left"), Signal(16, name="oy_left"), Signal(16, name="cb_left")
        kx, ky = Signal(5, name="kx_left"), Signal(5, name="ky_left")
        last_ox, last_oy, last_kx, last_ky, last_cb = (Signal(name=f"last_{n}") for n in ("ox", "oy", "kx", "ky", "cb"))
        p = Signal(self.acc_bits + 1)  # one spare bit so that p == acc_depth is seen, not wrapped
        first_tap = Signal()
        tap_start = Signal()
        prm_pend = Signal()

        # Weight prefetch state.
        w_next = Signal(wgt_word_layout(c))
        w_cur = Signal(wgt_word_layout(c))
        w_full = Signal()  # w_next holds the weight of the next tap to be swept
        w_pend = Signal()  # a WGT read was issued last cycle
        f_active = Signal()
        f_addr = Signal(isa.SRAM_ADDR_BITS + 1)  # +1 step at a time: the range check sees the first overflow
        f_kx, f_ky, f_cb = Signal(5), Signal(5), Signal(16)

        issue = Signal()
        dw_go = Signal()  # depthwise: the walk may read this cycle
        dw_started = Signal()
        dw_nstrips = Signal(16)  # strips of the depthwise tile begun so far
        dw_rs = Signal(4)  # output rows of the strip being read
        dw_eval = Signal()  # depthwise: an evaluation (one output pixel) enters the array this cycle
        dw_ev_final = Signal()  # ... and it is the tile's last
        last_pixel = last_ox & last_oy
        final = last_pixel & last_kx & last_ky & last_cb

        # The read-port signature's ``en`` has init 1; drive it low unless a read is wanted, so
        # the compute unit's port muxes can tell which engine is reading.
        m.d.comb += self.prm.en.eq(0)
        with m.FSM(name="sweep") as sweep_fsm:
            with m.State("IDLE"):
                # The command's descriptor slot may still serve the drain of the tile two
                # commands back (when the tile in between had a single tap).
                slot_busy = (drain_reading & (d_slot == slot)) | (v1 & (slot1 == slot))
                m.d.comb += command.enable.eq(~error & ~slot_busy)
                with m.If(command.take):
                    pay = self.cmd.payload
                    m.d.sync += [
                        f_active.eq(1),
                        f_addr.eq(pay.wgt_base),
                        f_kx.eq(0), f_ky.eq(0), f_cb.eq(0),
                    ]
                    for b in range(2):
                        with m.If(slot == b):
                            d = descs[b]
                            m.d.sync += [
                                d["out_base"].eq(pay.out_base),
                                d["out_h_m1"].eq(pay.out_h - 1),
                                d["out_w_m1"].eq(pay.out_w - 1),
                                d["zp_out"].eq(pay.zp_out),
                                d["act_min"].eq(pay.act_min),
                                d["act_max"].eq(pay.act_max),
                                d["act_table"].eq(pay.act_table),
                                d["acc_keep"].eq(pay.acc_keep),
                                d["dw"].eq(pay.dw),
                                d["dw_rows"].eq(pay.dw_rows),
                                d["tag"].eq(pay.tag),
                            ]
                    m.next = "SETUP"
            with m.State("SETUP"):
                m.d.comb += [self.prm.addr.eq(a.prm_base), self.prm.en.eq(1)]
                m.d.sync += [
                    prm_pend.eq(1),
                    ow_m1.eq(a.out_w - 1), oh_m1.eq(a.out_h - 1),
                    kw_m1.eq(a.kw - 1), kh_m1.eq(a.kh - 1), cb_m1.eq(a.cin_blocks - 1),
                    ow_one.eq(a.out_w == 1), oh_one.eq(a.out_h == 1),
                    kw_one.eq(a.kw == 1), kh_one.eq(a.kh == 1), cb_one.eq(a.cin_blocks == 1),
                    ox.eq(a.out_w - 1), oy.eq(a.out_h - 1),
                    kx.eq(a.kw - 1), ky.eq(a.kh - 1), cb.eq(a.cin_blocks - 1),
                    last_ox.eq(a.out_w == 1), last_oy.eq(a.out_h == 1),
                    last_kx.eq(a.kw == 1), last_ky.eq(a.kh == 1), last_cb.eq(a.cin_blocks == 1),
                    row_step.eq(as_bounded(a.stride_y * a.in_w, kb)),
                    ky_step.eq(as_bounded(a.dil_y * a.in_w, kb)),
                    cb_base.eq(as_bounded(a.inp_base, kb)), ky_base.eq(as_bounded(a.inp_base, kb)),
                    tap_base.eq(as_bounded(a.inp_base, kb)), row_base.eq(as_bounded(a.inp_base, kb)),
                    addr.eq(as_bounded(a.inp_base, kb)), p.eq(0),
                    first_tap.eq(1), tap_start.eq(1),
                ]
                m.next = "SWEEP"
            with m.State("SWEEP"):
                # A tap starts when its weight is in w_next. The first tap of a tile writes ACC
                # without reading it, so it may run while the previous tile drains, as soon as
                # that drain has begun (the drain reads pixel p before this tap writes it: both
                # advance one pixel per cycle and the write trails its issue by Ss cycles).
                # Later taps read ACC, so they wait until the drain has stopped reading.
                # A first tap with acc_in reads ACC too: it also waits for the held tile's last
                # write (wait_final) and for an older tile's drain to stop reading.
                tile_gate = Mux(first_tap & ~a.acc_in, ~wait_final & ~full, ~drain_reading & ~wait_final & ~full)
                m.d.comb += issue.eq(~error & ~a.dw & (~tap_start | (w_full & tile_gate)))
                # A depthwise tile starts reading only when its first evaluation could write ACC,
                # so that its evaluations never wait (their timing is then fixed by the reads).
                m.d.comb += dw_go.eq(~error & a.dw & (dw_started | (w_full & tile_gate)))
                with m.If(dw_eval & dw_ev_final):
                    for b in range(2):
                        with m.If(slot == b):
                            m.d.sync += [descs[b]["dw_strips"].eq(dw_nstrips), descs[b]["dw_last_rows"].eq(dw_rs)]
                with m.If((issue & final) | (dw_eval & dw_ev_final)):
                    m.d.sync += [slot.eq(~slot), wait_final.eq(1)]
                    with m.If(a.acc_keep):
                        m.d.sync += [held.eq(1), held_h.eq(a.out_h), held_w.eq(a.out_w), held_mode.eq(mode)]
                    m.next = "IDLE"

        in_setup = sweep_fsm.ongoing("SETUP")
        raise_if(in_setup & command.illegal, E.ILLEGAL_FIELD)
        raise_if(in_setup & command.out_of_range, E.SRAM_RANGE)
        raise_if(in_setup & a.acc_in & (~held | (held_h != a.out_h) | (held_w != a.out_w) | (held_mode != mode)),
                 E.ILLEGAL_FIELD)
        with m.If(in_setup):
            m.d.sync += held.eq(0)

        # The parameter word arrives the cycle after SETUP; capture it into the command's slot.
        prm_bad = Signal()
        raise_if(prm_pend & prm_bad, E.ILLEGAL_FIELD)
        with m.If(prm_pend):
            m.d.sync += prm_pend.eq(0)
            ok = Const(1)
            for lane in range(c):
                ok = ok & requant_params_ok(self.prm.data[lane])
            m.d.comb += prm_bad.eq(~ok)
            for b in range(2):
                with m.If(slot == b):
                    for lane in range(c):
                        src = self.prm.data[lane]
                        m.d.sync += [
                            descs[b]["bias"][lane].eq(src.bias),
                            descs[b]["params"][lane].mult.eq(src.mult),
                            descs[b]["params"][lane].mult_neg.eq(src.mult_neg),
                            descs[b]["params"][lane].shift.eq(src.shift),
                        ]

        # Sweep counters: every issued pixel advances (ox, oy) and, at the end of the tile,
        # the tap (kx, ky, cb); each base is the previous one plus a precomputed step.
        def count_down(left: Signal, last: Signal) -> list:
            return [left.eq(left - 1), last.eq(left == 1)]

        def reload(left: Signal, last: Signal, m1: Signal, one: Signal) -> list:
            return [left.eq(m1), last.eq(one)]

        stride_x = as_bounded(a.stride_x, kb)
        in_w_b = as_bounded(a.in_w, kb)
        dil_x = as_bounded(a.dil_x, kb)
        in_plane = as_bounded(a.in_plane, kb)
        with m.If(issue):
            with m.If(tap_start):
                m.d.sync += [tap_start.eq(0), w_full.eq(0)]
            with m.If(~last_ox):
                m.d.sync += count_down(ox, last_ox)
                m.d.sync += [addr.eq(bounded_add(addr, stride_x)), p.eq(p + 1)]
            with m.Elif(~last_oy):
                nxt = bounded_add(row_base, row_step)
                m.d.sync += reload(ox, last_ox, ow_m1, ow_one) + count_down(oy, last_oy)
                m.d.sync += [row_base.eq(nxt), addr.eq(nxt), p.eq(p + 1)]
            with m.Else():
                m.d.sync += reload(ox, last_ox, ow_m1, ow_one) + reload(oy, last_oy, oh_m1, oh_one)
                m.d.sync += [p.eq(0), tap_start.eq(1), first_tap.eq(0)]
                with m.If(~last_kx):
                    nxt = bounded_add(tap_base, dil_x)
                    m.d.sync += count_down(kx, last_kx)
                    m.d.sync += [tap_base.eq(nxt), row_base.eq(nxt), addr.eq(nxt)]
                with m.Elif(~last_ky):
                    nxt = bounded_add(ky_base, ky_step)
                    m.d.sync += reload(kx, last_kx, kw_m1, kw_one) + count_down(ky, last_ky)
                    m.d.sync += [ky_base.eq(nxt), tap_base.eq(nxt), row_base.eq(nxt), addr.eq(nxt)]
                with m.Elif(~last_cb):
                    nxt = bounded_add(cb_base, in_plane)
                    m.d.sync += (reload(kx, last_kx, kw_m1, kw_one) + reload(ky, last_ky, kh_m1, kh_one)
                                 + count_down(cb, last_cb))
                    m.d.sync += [cb_base.eq(nxt), ky_base.eq(nxt), tap_base.eq(nxt),
                                 row_base.eq(nxt), addr.eq(nxt)]
        raise_if(issue & (addr.beyond | (addr.low >= hw.inp_depth)), E.SRAM_RANGE)
        raise_if(issue & (p >= self.acc_depth), E.SRAM_RANGE)

        # ---------------------------------------------------------------- depthwise walk
        # CONV.dw (see "Depthwise" in the module docstring). The tile is walked in strips of
        # dw_rows output rows; for each strip every input column it needs is read top to bottom,
        # one INP word per cycle, into the loading column of a window of DW_WINDOW_COLS complete
        # columns of DW_COL words. A completed column shifts the window; when it completes an
        # output column, the strip's rows are evaluated one per cycle while the next column loads.
        # A processor without the depthwise mode (DepthwiseBlockGeneration off, or C < 3) has none
        # of this logic: its command check refuses every CONV with dw set.
        ncols, col_words = isa.DW_WINDOW_COLS, isa.DW_COL
        dw_kh = hw.dw_kh
        n_dw_taps = ncols * dw_kh
        dw_addr = Signal(bounded, name="dw_addr")
        dw_read = Signal()
        ev_first = Signal()
        xw = []
        if dw_kh >= 1:
            word = inp_word_layout(c)
            jb = max(1, (col_words - 1).bit_length())
            col_load = [Signal(word, name=f"dw_ld_{j}", reset_less=True) for j in range(col_words)]
            cols = [[Signal(word, name=f"dw_col{k}_{j}", reset_less=True) for j in range(col_words)]
                    for k in range(ncols)]
            dw_j, dw_jm1 = Signal(jb), Signal(jb)  # word of the column being read (counting up), the last one
            dw_ox = Signal(16)  # output columns of the strip left after the one being read
            # The next strip, precomputed from dw_left while a strip is read (a strip has at least
            # kh * kw >= 2 words, so two strip ends are at least two cycles apart): there is one
            # (dw_more), its rows (dw_nrows); this keeps the 16-bit compares off the strip-end path.
            dw_more, dw_nrows = Signal(), Signal(4)
            dw_due = Signal(3)  # columns until the next one that completes an output column
            dw_left = Signal(16)  # output rows from that strip's first row on
            dw_done = Signal()  # every INP word of the tile has been read
            dw_strip, dw_colb = Signal(bounded, name="dw_strip"), Signal(bounded, name="dw_colb")
            dw_strip_step = Signal(bounded)  # dw_rows * stride_y * in_w
            # The evaluation side: evaluations left for the column just completed, the window row of
            # the next one (r * stride_y), whether they are the tile's last, the ACC index.
            ev_left, ev_b = Signal(4), Signal(jb)
            ev_final = Signal()
            # The read issued last cycle: its word index, whether it completed a column, an output
            # column, the tile; the strip's rows.
            rd1_v, rd1_last, rd1_ev, rd1_final = Signal(), Signal(), Signal(), Signal()
            rd1_j, rd1_rs = Signal(jb), Signal(4)

            def strip_rows(rows: Value) -> Value:
                """INP words per column of a strip of ``rows`` output rows, minus 1."""
                return (small_mul((rows - 1)[:4], a.stride_y) + a.kh - 1)[:jb]

            # out_h < dw_rows without a 16-bit carry chain (this sits before strip_rows in SETUP)
            short = ~a.out_h[4:].any() & (a.out_h[:4] < a.dw_rows)
            first_rows = Mux(short, a.out_h[:4], a.dw_rows)
            with m.If(in_setup):
                m.d.sync += [
                    dw_started.eq(0), dw_done.eq(0), dw_j.eq(0), dw_rs.eq(first_rows), dw_jm1.eq(strip_rows(first_rows)),
                    dw_ox.eq(a.out_w - 1), dw_due.eq(a.kw - 1), dw_left.eq(a.out_h), dw_nstrips.eq(1),
                    dw_strip.eq(as_bounded(a.inp_base, kb)), dw_colb.eq(as_bounded(a.inp_base, kb)),
                    dw_addr.eq(as_bounded(a.inp_base, kb)),
                    ev_first.eq(1),
                ]
            # The strip step dw_rows * stride_y * in_w = dw_rows * row_step (row_step is set in SETUP);
            # the walk's first read is at least two cycles after SETUP (it waits for the weight word).
            step = as_bounded(small_mul(row_step.low, a.dw_rows), kb)
            with m.If(~dw_started):
                m.d.sync += dw_strip_step.eq(Cat(step[:kb], step[kb] | (row_step.beyond & (a.dw_rows != 0))))
            rows2 = Cat(Const(0, 1), a.dw_rows)  # 2 * dw_rows
            m.d.sync += [dw_more.eq(dw_left > a.dw_rows),
                         dw_nrows.eq(Mux(dw_left < rows2, (dw_left - a.dw_rows)[:4], a.dw_rows))]
            # The read that completes a column shifts the window the cycle after; the evaluations of
            # the previous column must be over by then (at most one left after this cycle).
            arriving_evals = rd1_v & rd1_last & rd1_ev
            shift_ok = Mux(arriving_evals, rd1_rs <= 1, ev_left <= 2)
            col_end = dw_j == dw_jm1
            m.d.comb += dw_read.eq(dw_go & ~dw_done & (~col_end | shift_ok))
            m.d.sync += rd1_v.eq(dw_read)
            with m.If(dw_read):
                m.d.sync += [dw_started.eq(1), rd1_j.eq(dw_j), rd1_last.eq(col_end), rd1_ev.eq(dw_due == 0),
                             rd1_rs.eq(dw_rs), rd1_final.eq(0)]
                with m.If(~col_end):
                    m.d.sync += [dw_j.eq(dw_j + 1), dw_addr.eq(bounded_add(dw_addr, in_w_b))]
                with m.Else():
                    # The column completes an output column when dw_due is 0; the strip ends with
                    # the eval column of its last output column.
                    m.d.sync += [dw_j.eq(0), dw_due.eq(Mux(dw_due == 0, a.stride_x - 1, dw_due - 1))]
                    with m.If((dw_due != 0) | (dw_ox != 0)):
                        nxt = bounded_add(dw_colb, Const(1, kb + 1))
                        m.d.sync += [dw_colb.eq(nxt), dw_addr.eq(nxt)]
                        with m.If(dw_due == 0):
                            m.d.sync += dw_ox.eq(dw_ox - 1)
                    with m.Elif(~dw_more):
                        m.d.sync += [dw_done.eq(1), rd1_final.eq(1)]
                    with m.Else():
                        nxt = bounded_add(dw_strip, dw_strip_step)
                        m.d.sync += [dw_left.eq(dw_left - a.dw_rows), dw_rs.eq(dw_nrows), dw_jm1.eq(strip_rows(dw_nrows)),
                                     dw_nstrips.eq(dw_nstrips + 1),
                                     dw_ox.eq(ow_m1), dw_due.eq(a.kw - 1),
                                     dw_strip.eq(nxt), dw_colb.eq(nxt), dw_addr.eq(nxt)]
            raise_if(dw_read & (dw_addr.beyond | (dw_addr.low >= hw.inp_depth)), E.SRAM_RANGE)

            # The word read last cycle: into the loading column, or, completing it, the window shifts.
            with m.If(rd1_v & ~rd1_last):
                for j in range(col_words):
                    with m.If(rd1_j == j):
                        m.d.sync += col_load[j].eq(self.inp.data)
            with m.If(rd1_v & rd1_last):
                for j in range(col_words):
                    m.d.sync += [cols[0][j].eq(Mux(rd1_j == j, self.inp.data, col_load[j])),
                                 cols[1][j].eq(cols[0][j]), cols[2][j].eq(cols[1][j])]

            # Evaluations: output row r of the strip takes window rows r*stride_y + ky. Array input
            # lane ci = 3*ky + j of output lane co is lane co of column j's word (j = 0 the oldest of
            # the three columns), so the C x C array's adder tree sums the taps of each channel.
            m.d.comb += [dw_eval.eq(~error & (ev_left != 0)), dw_ev_final.eq(ev_final & (ev_left == 1))]
            xw += [Signal(word, name=f"dw_x{t}", reset_less=True) for t in range(n_dw_taps)]
            with m.If(dw_eval):
                m.d.sync += [ev_left.eq(ev_left - 1), ev_b.eq(ev_b + a.stride_y), p.eq(p + 1), ev_first.eq(0)]
                for ky in range(dw_kh):
                    row = (ev_b + ky)[:jb]
                    for jpos in range(ncols):
                        col = cols[ncols - 1 - jpos]
                        pick = col[0]
                        for j in range(1, col_words):
                            pick = Mux(row == j, col[j], pick)
                        m.d.sync += xw[ky * ncols + jpos].eq(pick)
            with m.If(arriving_evals):
                m.d.sync += [ev_left.eq(rd1_rs), ev_b.eq(0), ev_final.eq(rd1_final)]
            raise_if(dw_eval & (p >= self.acc_depth), E.SRAM_RANGE)

        m.d.comb += [self.inp.addr.eq(Mux(a.dw, dw_addr.low, addr.low)), self.inp.en.eq(issue | dw_read),
                     self.mac_active.eq(issue | dw_eval)]

        # ---------------------------------------------------------------- weight prefetch
        f_issue = Signal()
        m.d.comb += f_issue.eq(f_active & ~w_full & ~w_pend & ~error)
        m.d.comb += [self.wgt.addr.eq(f_addr), self.wgt.en.eq(f_issue)]
        raise_if(f_issue & (f_addr >= hw.wgt_depth), E.SRAM_RANGE)
        with m.If(f_issue):
            m.d.sync += [w_pend.eq(1), f_addr.eq(f_addr + 1)]
            f_last_kx = (f_kx == a.kw - 1) | a.dw  # a depthwise CONV reads one WGT word
            f_last_ky = (f_ky == a.kh - 1) | a.dw
            f_last_cb = (f_cb == a.cin_blocks - 1) | a.dw
            with m.If(~f_last_kx):
                m.d.sync += f_kx.eq(f_kx + 1)
            with m.Elif(~f_last_ky):
                m.d.sync += [f_kx.eq(0), f_ky.eq(f_ky + 1)]
            with m.Elif(~f_last_cb):
                m.d.sync += [f_kx.eq(0), f_ky.eq(0), f_cb.eq(f_cb + 1)]
            with m.Else():
                m.d.sync += f_active.eq(0)
        with m.If(w_pend):
            m.d.sync += [w_pend.eq(0), w_next.eq(self.wgt.data), w_full.eq(1)]

        # ---------------------------------------------------------------- MAC pipeline
        ss = self.stage_acc
        side = [None]  # side[s] = dict of the item's side band in stage s (1 .. ss)
        s0 = {"valid": issue, "p": p[:self.acc_bits], "first": first_tap & ~a.acc_in, "final": final,
              "tap_start": tap_start, "slot": slot}
        prev = s0
        # A depthwise evaluation enters at stage 2, where its window words are registered (xw)
        # like the INP word of an ordinary issue; the two never meet: the walk's first evaluation
        # comes several cycles after the last ordinary issue of the tile before.
        dw_item = {"valid": 1, "p": p[:self.acc_bits], "first": ~a.acc_in, "final": dw_ev_final,
                   "tap_start": ev_first, "slot": slot}
        for s in range(1, ss + 1):
            # Only ``valid`` is reset: the other fields describe the stage's item.
            cur = {k: Signal(len(v), name=f"st{s}_{k}", reset_less=(k != "valid")) for k, v in s0.items()}
            if s == 2:
                m.d.sync += [cur[k].eq(Mux(dw_eval, dw_item[k], prev[k])) for k in cur]
            else:
                m.d.sync += [cur[k].eq(prev[k]) for k in cur]
            side.append(cur)
            prev = cur

        # Stage 1 -> 2: the INP word is registered; the weight of a new tap moves into w_cur in the
        # same edge, exactly when that tap's first pixel enters stage 2.
        # The MAC datapath registers (x2, products, adder tree) have no reset: a value in them only
        # matters together with its stage's ``valid`` bit, which is reset. Without the reset (and
        # the START ``clear``) they are plain D flip-flops, and Verilator evaluates each one as a
        # single assignment instead of a temporary plus two conditional clears per cycle.
        x2 = Signal(inp_word_layout(c), reset_less=True)
        m.d.sync += x2.eq(self.inp.data)
        with m.If(side[1]["valid"] & side[1]["tap_start"]):
            m.d.sync += w_cur.eq(w_next)
        # A depthwise tile takes its one weight word with its first evaluation; the bytes of taps
        # outside its kh x kw kernel (and of lanes ci >= 3 * dw_kh) become 0, because their
        # window words are whatever the window last held.
        dw_sel = Signal()  # the item in stage 2 is a depthwise evaluation
        with m.If(dw_eval):
            m.d.sync += dw_sel.eq(1)
        with m.Elif(side[1]["valid"]):
            m.d.sync += dw_sel.eq(0)
        with m.If(dw_eval & ev_first):
            m.d.sync += [tap_start.eq(0), w_full.eq(0)]
            for ci in range(c):
                ky, jpos = divmod(ci, ncols)
                used = (ky < a.kh) & (jpos >= ncols - a.kw) if ci < n_dw_taps else Const(0)
                for co in range(c):
                    m.d.sync += w_cur[co][ci].eq(Mux(used, w_next[co][ci], 0))

        # Stage 2 -> 3: C x C products, then the adder tree over ci, registered every two levels.
        #
        # For a power-of-two C the tree adds the products in offset binary: p + 2**15, which is
        # p with its sign bit inverted, as an unsigned number. The C offsets add up to
        # C * 2**15 = 2**(W-1) for the W = 16 + log2(C) bit sum, so inverting the sum's top bit
        # gives back the signed sum, exactly (the inversions sit in the adders' input LUTs). The
        # numbers and widths are those of the signed tree; the reason is the simulator:
        # Verilator sign-extends both operands of every signed add of unequal width with a
        # three-instruction sequence; unsigned adds extend for free (measured on de10nano_int8:
        # the native harness 5 % faster, docs/simulation.md "Speed").
        offset = c > 1 and (c & (c - 1)) == 0
        sums = []
        for co in range(c):
            vals = []
            for ci in range(c):
                pr = Signal(signed(16), name=f"prod_{co}_{ci}", reset_less=True)
                xin = Mux(dw_sel, xw[ci][co], x2[ci]) if ci < n_dw_taps else x2[ci]
                m.d.sync += pr.eq(xin * w_cur[co][ci])
                vals.append(pr.as_unsigned() ^ 0x8000 if offset else pr)
            level = 0
            while len(vals) > 1:
                nxt = []
                for k in range(0, len(vals) - 1, 2):
                    nxt.append(vals[k] + vals[k + 1])
                if len(vals) % 2:
                    nxt.append(vals[-1])
                vals = nxt
                level += 1
                if level % 2 == 0 or len(vals) == 1:
                    regs = []
                    shape = unsigned(16 + level) if offset else signed(16 + level)
                    for k, v in enumerate(vals):
                        r = Signal(shape, name=f"tree_{co}_l{level}_{k}", reset_less=True)
                        m.d.sync += r.eq(v)
                        regs.append(r)
                    vals = regs
            total = vals[0]
            sums.append(Cat(total[:-1], ~total[-1]).as_signed() if offset else total)

        # Stage ss-1: read the accumulator of the pixel; stage ss: add and write back.
        rd_item, wr_item = side[ss - 1], side[ss]
        drain_rd_addr = Signal(self.acc_bits)
        # The sweep only needs the read data for taps after the first, which never run while the
        # drain reads, so the drain simply takes the read port when it is reading.
        m.d.comb += [
            acc_rp.addr.eq(Mux(drain_reading, drain_rd_addr, rd_item["p"])),
            acc_wp.addr.eq(wr_item["p"]),
            acc_wp.en.eq(wr_item["valid"]),
        ]
        bias = Signal(acc_shape)
        m.d.comb += bias.eq(Mux(wr_item["slot"], Value.cast(descs[1]["bias"]), Value.cast(descs[0]["bias"])))
        new = Signal(acc_shape)
        for co in range(c):
            base = Mux(wr_item["first"], bias[co], acc_rp.data[co])
            m.d.comb += new[co].eq(base + sums[co])  # wraps to int32, as the contract requires
        m.d.comb += acc_wp.data.eq(new)
        with m.If(wr_item["valid"] & wr_item["final"]):
            m.d.sync += [wait_final.eq(0), full.eq(1)]

        # ---------------------------------------------------------------- drain
        # One pixel per cycle from ACC through the output stage into OUT.
        d_ox, d_oy = Signal(16), Signal(16)
        d_p = Signal(self.acc_bits)
        d_out = Signal(isa.SRAM_ADDR_BITS + 1)
        d_cbase = Signal(isa.SRAM_ADDR_BITS + 1)  # depthwise: OUT word of the strip's first row at column d_ox
        d_ow_m1 = Mux(d_slot, descs[1]["out_w_m1"], descs[0]["out_w_m1"])
        d_oh_m1 = Mux(d_slot, descs[1]["out_h_m1"], descs[0]["out_h_m1"])
        # A held tile (acc_keep) drains as a single item that writes no lane: it carries the
        # instruction's completion (its tag, so its pushes) through the output stage in order.
        d_keep = Mux(d_slot, descs[1]["acc_keep"], descs[0]["acc_keep"])
        # A depthwise tile is in ACC in strip order (per strip of dw_rows rows: per column, its
        # rows), so its drain walks OUT in that order: d_r the row in the strip, d_rs_m1 the
        # strip's rows - 1, d_left the output rows from the strip's first on.
        d_dw = Mux(d_slot, descs[1]["dw"], descs[0]["dw"])
        d_rows = Mux(d_slot, descs[1]["dw_rows"], descs[0]["dw_rows"])
        d_strips = Mux(d_slot, descs[1]["dw_strips"], descs[0]["dw_strips"])
        d_last_rows = Mux(d_slot, descs[1]["dw_last_rows"], descs[0]["dw_last_rows"])
        d_r, d_rs_m1 = Signal(4), Signal(4)
        d_sl = Signal(16)  # strips left, the current one included
        d_is_last = Signal()  # the current strip is the tile's last
        d_last_dw = (d_ox == d_ow_m1) & (d_r == d_rs_m1) & d_is_last
        d_last = Mux(d_dw, d_last_dw, (d_ox == d_ow_m1) & (d_oy == d_oh_m1)) | d_keep
        with m.If(~drain_reading & full & ~error):
            one = d_strips == 1
            m.d.sync += [
                drain_reading.eq(1), full.eq(0), d_ox.eq(0), d_oy.eq(0), d_p.eq(0), d_r.eq(0),
                d_rs_m1.eq(Mux(one, d_last_rows, d_rows) - 1), d_sl.eq(d_strips), d_is_last.eq(one),
                d_out.eq(Mux(d_slot, descs[1]["out_base"], descs[0]["out_base"])),
                d_cbase.eq(Mux(d_slot, descs[1]["out_base"], descs[0]["out_base"])),
            ]
        d_issue = Signal()
        m.d.comb += [d_issue.eq(drain_reading & ~error), drain_rd_addr.eq(d_p)]
        # A CONV with to_inp (tag bit TAG_TO_INP) writes INP, whose depth bounds its words instead;
        # both compares are against constants, side by side, so the flag adds one mux level.
        d_to_inp = Mux(d_slot, descs[1]["tag"][TAG_TO_INP], descs[0]["tag"][TAG_TO_INP])
        d_oob = Mux(d_to_inp, d_out >= hw.inp_depth, d_out >= hw.out_depth) & ~d_keep
        raise_if(d_issue & d_oob, E.SRAM_RANGE)
        # Item registered next to the ACC read data (one cycle later).
        last1, keep1 = Signal(), Signal()
        out1 = Signal(self.res_bits)
        m.d.sync += [v1.eq(d_issue & ~d_oob), last1.eq(d_last), slot1.eq(d_slot), out1.eq(d_out),
                     keep1.eq(d_keep)]
        d_ow = d_ow_m1 + 1
        with m.If(d_issue & ~d_dw):
            m.d.sync += [d_p.eq(d_p + 1), d_out.eq(d_out + 1)]
            with m.If(d_ox != d_ow_m1):
                m.d.sync += d_ox.eq(d_ox + 1)
            with m.Else():
                m.d.sync += [d_ox.eq(0), d_oy.eq(d_oy + 1)]
        with m.If(d_issue & d_dw):
            m.d.sync += d_p.eq(d_p + 1)
            with m.If(d_r != d_rs_m1):
                m.d.sync += [d_r.eq(d_r + 1), d_out.eq(d_out + d_ow)]
            with m.Elif(d_ox != d_ow_m1):
                m.d.sync += [d_r.eq(0), d_ox.eq(d_ox + 1), d_cbase.eq(d_cbase + 1), d_out.eq(d_cbase + 1)]
            with m.Else():
                # The next strip starts right after this strip's last pixel (a full strip has
                # dw_rows rows), i.e. at d_out + 1.
                two = d_sl == 2
                m.d.sync += [d_r.eq(0), d_ox.eq(0), d_sl.eq(d_sl - 1), d_is_last.eq(two),
                             d_rs_m1.eq(Mux(two, d_last_rows, d_rows) - 1),
                             d_cbase.eq(d_out + 1), d_out.eq(d_out + 1)]
        with m.If(d_issue & d_last):
            m.d.sync += [drain_reading.eq(0), d_slot.eq(~d_slot)]

        def pick(key: str):
            return Mux(slot1, Value.cast(descs[1][key]), Value.cast(descs[0][key]))

        m.d.comb += [
            self.ost.valid.eq(v1),
            self.ost.acc.eq(acc_rp.data),
            self.ost.params.eq(pick("params")),
            self.ost.zp_out.eq(pick("zp_out")),
            self.ost.act_min.eq(pick("act_min")),
            self.ost.act_max.eq(pick("act_max")),
            self.ost.addr.eq(out1),
            self.ost.tag.eq(Cat(last1, pick("tag"))),
            self.ost.table.eq(pick("act_table")),
            self.ost.keep.eq(Mux(keep1, (1 << c) - 1, 0)),
        ]

        # ---------------------------------------------------------------- status
        m.d.comb += self.busy.eq(
            ~sweep_fsm.ongoing("IDLE") | wait_final | full | drain_reading | v1)

        code = Signal(4)
        m.d.comb += self.error_code.eq(code)
        with m.If(~error):
            # Later entries of the chain have lower priority: iterate in reverse so the first
            # registered condition is the outermost (last-assigned, winning) one.
            for cond, value in reversed(err_pending):
                with m.If(cond):
                    m.d.sync += [error.eq(1), code.eq(int(value))]
        return m

