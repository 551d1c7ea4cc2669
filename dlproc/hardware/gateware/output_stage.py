"""Output stage: int32 accumulators of one output pixel (C lanes) -> int8, bit-exact with numerics.

The stage implements :func:`dlproc.hardware.numerics.requantize` lane by lane::

    m   = M_neg if acc < 0 else M
    r   = (1 << (S - 1)) if S > 0 else 0
    y   = ((acc * m + r) >> S) + zp_out          # arithmetic shift
    out = min(max(y, act_min), act_max)          # numpy.clip order

The bias is *not* added here: the conv engine initializes its accumulators with it, so the value
arriving here already is ``bias + sum(w * x)`` wrapped to int32.

With the activation table (``table=True``: conv.ActivationTableGeneration or
fc.SigmoidBlockGeneration) an item whose ``table`` bit is set leaves as ``TABLE[out + 128]``
instead of ``out`` (:func:`dlproc.targets.golden.ops.table_lookup`): the table is held in C copies of
256 x int8, one per lane, written all at once by the ACTTAB engine through ``tab_we``/``tab_addr``/
``tab_data``. The lookup takes no cycle of its own: the clamp of stage 5 is formed combinationally
and addresses the copies' synchronous read ports, whose data arrives together with the stage's
registered result. Without the table the ``table`` bit is ignored (the engines refuse it first).

It is a fixed-latency pipeline without back-pressure (:data:`LATENCY` cycles from ``i.valid`` to
``o.valid``). Every item carries its own requantization parameters, output address and a tag, so
items of different instructions (a conv drain followed immediately by the next one, or a pool
plane with new parameters) can follow each other cycle by cycle without draining the pipeline.

The PRM buffer word layout (:func:`prm_word_layout`) is defined here because this stage is its
main consumer: lane ``i`` occupies bytes ``9*i .. 9*i+8`` = bias int32 LE, M uint16, M_neg uint16,
S uint8, which is exactly the bit order of :data:`PRM_LANE` packed little-endian.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware.numerics import ACT_TABLE_SIZE, MAX_SHIFT, MULT_BITS

__all__ = [
    "PRM_LANE",
    "REQUANT_LANE",
    "LATENCY",
    "prm_word_layout",
    "out_word_layout",
    "OutputStage",
    "requant_params_ok",
]

#: One lane of a PRM word, in little-endian bit order (bias at bit 0, S at bits 64..71).
PRM_LANE = data.StructLayout({
    "bias": signed(32),
    "mult": unsigned(16),
    "mult_neg": unsigned(16),
    "shift": unsigned(8),
})

#: The per-lane requantization parameters an output-stage item carries.  M and M_neg are
#: MULT_BITS wide: a PRM word with a larger value (or S > MAX_SHIFT) is refused by the
#: instruction engines with ILLEGAL_FIELD before any of it reaches this stage (see
#: :func:`requant_params_ok`), exactly like the ISA-level simulator refuses it.
REQUANT_LANE = data.StructLayout({
    "mult": unsigned(MULT_BITS),
    "mult_neg": unsigned(MULT_BITS),
    "shift": unsigned(6),
})

#: Cycles from an item on ``i`` to the same item on ``o``.
LATENCY = 6

# Width of acc * m: a signed 32-bit value times an unsigned MULT_BITS value.
_PROD_BITS = 32 + MULT_BITS + 1
# (2*zp + 1) << S >> 1 for an int8 zp and S <= MAX_SHIFT.
_RZ_BITS = 9 + MAX_SHIFT
# acc * m + rz: one bit more than the wider operand.
_SUM_BITS = max(_PROD_BITS, _RZ_BITS) + 1


def prm_word_layout(c: int) -> data.ArrayLayout:
    """A PRM buffer word: C lanes of :data:`PRM_LANE` (9 bytes each)."""
    return data.ArrayLayout(PRM_LANE, c)


def out_word_layout(c: int) -> data.ArrayLayout:
    """An INP or OUT buffer word: C int8 lanes, lane i in byte i."""
    return data.ArrayLayout(signed(8), c)


def requant_params_ok(lane: data.View) -> Value:
    """True when a :data:`PRM_LANE` view holds parameters this stage executes exactly."""
    return ((lane.mult >> MULT_BITS) == 0) & ((lane.mult_neg >> MULT_BITS) == 0) & (
        lane.shift <= MAX_SHIFT)


def input_signature(c: int, addr_bits: int, tag_bits: int) -> wiring.Signature:
    return wiring.Signature({
        "valid": Out(1),
        "acc": Out(data.ArrayLayout(signed(32), c)),
        "params": Out(data.ArrayLayout(REQUANT_LANE, c)),
        "zp_out": Out(signed(8)),
        "act_min": Out(signed(8)),
        "act_max": Out(signed(8)),
        "addr": Out(addr_bits),
        "tag": Out(max(tag_bits, 1)),
        # Lanes of the OUT word that this item must not write (one bit per lane). Zero, the
        # value of an undriven port, writes the whole word: only the FC engine sets bits, for
        # the lanes of a word that belong to another FC instruction.
        "keep": Out(c),
        # Map the result through the activation table (the instruction's act_table flag).
        "table": Out(1),
    })


def output_signature(c: int, addr_bits: int, tag_bits: int) -> wiring.Signature:
    return wiring.Signature({
        "valid": Out(1),
        "data": Out(out_word_layout(c)),
        "addr": Out(addr_bits),
        "tag": Out(max(tag_bits, 1)),
        "keep": Out(c),
    })


class OutputStage(wiring.Component):
    """Pipelined requantization of C lanes per cycle.

    ``i`` (input, driven by the conv drain or the pool engine): ``valid``, ``acc`` (C x int32),
    ``params`` (C x :data:`REQUANT_LANE`), ``zp_out``, ``act_min``, ``act_max``, ``addr`` (OUT
    word address), ``tag`` (opaque bits returned with the result) and ``keep`` (lanes not to
    write). ``o`` (output, to the OUT write port): ``valid``, ``data`` (C x int8), ``addr``, ``tag``,
    ``keep``.
    """

    def __init__(self, c: int, addr_bits: int, tag_bits: int = 1, table: bool = False) -> None:
        self.c = c
        self.addr_bits = addr_bits
        self.tag_bits = max(tag_bits, 1)
        self.table = table
        ports = {
            "i": In(input_signature(c, addr_bits, tag_bits)),
            "o": Out(output_signature(c, addr_bits, tag_bits)),
        }
        if table:
            # The activation table's write port, shared by the C copies (driven by ACTTAB).
            ports |= {"tab_we": In(1), "tab_addr": In(range(ACT_TABLE_SIZE)), "tab_data": In(signed(8))}
        super().__init__(ports)

    def elaborate(self, platform) -> Module:
        m = Module()
        c = self.c

        # The side band (valid, address, tag and the per-instruction scalars) moves with the data
        # through every stage, so the stage never needs to be emptied between instructions.
        # Only ``valid`` is reset: every other register of the stage (side band and lanes) is
        # datapath whose value matters only next to a set ``valid`` bit. Reset-less registers are
        # plain D flip-flops, which Verilator evaluates as one assignment each instead of a
        # temporary plus the two conditional clears (reset, START) of every cycle.
        def side(stage: int) -> dict:
            return {
                "valid": Signal(name=f"s{stage}_valid"),
                "addr": Signal(self.addr_bits, name=f"s{stage}_addr", reset_less=True),
                "tag": Signal(self.tag_bits, name=f"s{stage}_tag", reset_less=True),
                "keep": Signal(c, name=f"s{stage}_keep", reset_less=True),
                "zp": Signal(signed(8), name=f"s{stage}_zp", reset_less=True),
                "lo": Signal(signed(8), name=f"s{stage}_lo", reset_less=True),
                "hi": Signal(signed(8), name=f"s{stage}_hi", reset_less=True),
                "lo_gt_hi": Signal(name=f"s{stage}_lo_gt_hi", reset_less=True),
                "table": Signal(name=f"s{stage}_table", reset_less=True),
            }

        sides = [side(s) for s in range(LATENCY)]
        # ``load[s]``: stage s takes a new item. Every data register loads only with an item, so
        # the stage holds still between items; Verilator then skips the whole requantization
        # datapath in the (many) cycles without one, e.g. while the conv engine sweeps a tile.
        load = [self.i.valid] + [sides[s]["valid"] for s in range(LATENCY - 1)]
        m.d.sync += [sides[s]["valid"].eq(load[s]) for s in range(LATENCY)]
        with m.If(load[0]):
            m.d.sync += [
                sides[0]["addr"].eq(self.i.addr),
                sides[0]["tag"].eq(self.i.tag),
                sides[0]["keep"].eq(self.i.keep),
                sides[0]["zp"].eq(self.i.zp_out),
                sides[0]["lo"].eq(self.i.act_min),
                sides[0]["hi"].eq(self.i.act_max),
                sides[0]["lo_gt_hi"].eq(self.i.act_min > self.i.act_max),
                sides[0]["table"].eq(self.i.table if self.table else 0),
            ]
        for s in range(1, LATENCY):
            with m.If(load[s]):
                m.d.sync += [sides[s][k].eq(sides[s - 1][k]) for k in sides[s] if k != "valid"]

        for lane in range(c):
            acc_in = self.i.acc[lane]
            par = self.i.params[lane]

            # Stage 0: register the accumulator and pick the multiplier by its sign.  Choosing
            # here keeps the sign test off the multiplier's input path.
            acc0 = Signal(signed(32), name=f"l{lane}_acc0", reset_less=True)
            mult0 = Signal(unsigned(MULT_BITS), name=f"l{lane}_mult0", reset_less=True)
            sh0 = Signal(6, name=f"l{lane}_sh0", reset_less=True)
            with m.If(load[0]):
                m.d.sync += [
                    acc0.eq(acc_in),
                    mult0.eq(Mux(acc_in < 0, par.mult_neg, par.mult)),
                    sh0.eq(par.shift),
                ]

            # Stage 1: the 32 x 15 bit product as two 16 x 15 bit halves, one 18 x 18 DSP each
            # (a single 32 x 15 multiplier maps to a 27 x 27 plus an 18 x 18 DSP whose partial
            # products are summed in a 48-bit carry chain, which limited Fmax to ~127 MHz).
            # Also the constant added before the shift: the rounding term 1 << (S - 1) and the
            # zero point zp << S together, ((2*zp + 1) << S) >> 1, which is exact because
            # floor((x + zp*2**S) / 2**S) = floor(x / 2**S) + zp; for S = 0 it is zp.  Folding
            # zp in here keeps a third adder out of the clamp stage.  It is formed as
            # ((2*zp + 1) << MAX_SHIFT) >> (MAX_SHIFT + 1 - S), arithmetic, which equals
            # ((2*zp + 1) << S) >> 1 for every S <= MAX_SHIFT (the only values that reach this
            # stage): a right shift keeps the _RZ_BITS width, while a variable left shift by a
            # 6-bit amount is 9 + 63 = 72 bits wide, which Verilator evaluates with multi-word
            # library calls (16 lanes x ~90 instructions per simulated cycle).
            lo1 = Signal(unsigned(16 + MULT_BITS), name=f"l{lane}_lo1", reset_less=True)
            hi1 = Signal(signed(16 + MULT_BITS + 1), name=f"l{lane}_hi1", reset_less=True)
            rz1 = Signal(signed(_RZ_BITS), name=f"l{lane}_rz1", reset_less=True)
            sh1 = Signal(6, name=f"l{lane}_sh1", reset_less=True)
            zp0 = sides[0]["zp"]
            with m.If(load[1]):
                m.d.sync += [
                    lo1.eq(acc0[:16] * mult0),
                    hi1.eq(acc0[16:].as_signed() * mult0),
                    rz1.eq(Cat(Const(1, 1), zp0).as_signed().shift_left(MAX_SHIFT)
                           >> (MAX_SHIFT + 1 - sh0)[:6]),
                    sh1.eq(sh0),
                ]

            # Stage 2: recombine the halves: acc * m = hi * 2**16 + lo, exact in 48 bits.
            prod2 = Signal(signed(_PROD_BITS), name=f"l{lane}_prod2", reset_less=True)
            rz2 = Signal(signed(_RZ_BITS), name=f"l{lane}_rz2", reset_less=True)
            sh2 = Signal(6, name=f"l{lane}_sh2", reset_less=True)
            with m.If(load[2]):
                m.d.sync += [prod2.eq((hi1 << 16) + lo1), rz2.eq(rz1), sh2.eq(sh1)]

            # Stage 3: add rounding and zero point (round half up = towards +infinity).
            sum3 = Signal(signed(_SUM_BITS), name=f"l{lane}_sum3", reset_less=True)
            sh3 = Signal(6, name=f"l{lane}_sh3", reset_less=True)
            with m.If(load[3]):
                m.d.sync += [sum3.eq(prod2 + rz2), sh3.eq(sh2)]

            # Stage 4: arithmetic right shift by S, then saturate to 10 bits: any value outside
            # -512..511 is clamped to an int8 bound in stage 5 anyway.  The overflow test looks
            # at the high bits directly (all equal to the sign or not) instead of comparing,
            # which keeps it out of a long carry chain.
            shifted = Signal(signed(_SUM_BITS), name=f"l{lane}_shifted")
            m.d.comb += shifted.eq(sum3 >> sh3)
            sign = shifted[-1]
            high = shifted[9:]
            pos_ovf = ~sign & high.any()
            neg_ovf = sign & ~high.all()
            sat4 = Signal(signed(10), name=f"l{lane}_sat4", reset_less=True)
            with m.If(load[4]):
                m.d.sync += sat4.eq(Mux(pos_ovf, 511, Mux(neg_ovf, -512, shifted[:10].as_signed())))

            # Stage 5: the activation clamp.  numpy.clip's order is min(max(y, lo), hi); with
            # both compares done in parallel that is: hi if lo > hi or y > hi, else lo if y < lo,
            # else y (lo > hi cannot reach here in practice: the engines refuse it).
            lo, hi = sides[LATENCY - 2]["lo"], sides[LATENCY - 2]["hi"]
            lo_gt_hi = sides[LATENCY - 2]["lo_gt_hi"]
            clamp5 = Signal(signed(8), name=f"l{lane}_clamp5")
            m.d.comb += clamp5.eq(Mux(lo_gt_hi | (sat4 > hi), hi, Mux(sat4 < lo, lo, sat4)))
            out5 = Signal(signed(8), name=f"l{lane}_out5", reset_less=True)
            with m.If(load[5]):
                m.d.sync += out5.eq(clamp5)
            if self.table:
                # Entry y + 128 of the lane's table copy: the two's complement code with its sign
                # bit inverted. The read port registers the address in the same cycle as out5.
                mem = memory.Memory(shape=signed(8), depth=ACT_TABLE_SIZE, init=[])
                m.submodules[f"act_table{lane}"] = mem
                wp = mem.write_port()
                rp = mem.read_port()
                m.d.comb += [
                    wp.addr.eq(self.tab_addr), wp.data.eq(self.tab_data), wp.en.eq(self.tab_we),
                    rp.addr.eq(Cat(clamp5[:7], ~clamp5[7])), rp.en.eq(load[5]),
                ]
                m.d.comb += self.o.data[lane].eq(Mux(sides[LATENCY - 1]["table"], rp.data, out5))
            else:
                m.d.comb += self.o.data[lane].eq(out5)

        last = sides[LATENCY - 1]
        m.d.comb += [
            self.o.valid.eq(last["valid"]),
            self.o.addr.eq(last["addr"]),
            self.o.tag.eq(last["tag"]),
            self.o.keep.eq(last["keep"]),
        ]
        return m

