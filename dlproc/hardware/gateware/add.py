"""The add engine (adder module): element-wise add of two differently scaled INP tensors.

Semantics (``dlproc.hardware.isa.Add``, ``dlproc.targets.golden.ops.add``), for word i < count and every lane::

    acc = (INP[inp_a + i] - za) * ma + (INP[inp_b + i] - zb) * mb     (exact: 9 x 15 bit products, 25-bit sum)
    OUT[out_base + i] = requantize(acc, 1, shift, zp_out, act_min, act_max)

The engine shares the compute unit's single INP read port, so it reads operand a and operand b
of a word in two consecutive cycles: one result word every two cycles. The sum goes through the
shared output stage with M = M_neg = 1 and S = shift, which is exactly the golden model's
rounding, zero point and clamp (ReLU fuses as act_min = zp_out).

Pipeline, counted from the cycle that reads a: 1 a arrives and ``a - za`` is registered, 2 b
arrives and ``b - zb`` is registered while the lane's multiplier forms ``(a - za) * ma``, 3 the
same multiplier forms ``(b - zb) * mb`` (one multiplier per lane: the DSP budget of the
DE10-Nano preset matters), 4 the sum is registered, 5 it is offered to the output stage. A new word starts every second cycle, so stages never collide.

The element-wise multiply (``mul``, generated with adder.Multiplication, ``hw.multiply``) is the
same pipeline: in stage 3 the lane's multiplier forms ``(b - zb) * (a - za)`` (its second operand
is the lane's ``a - za`` instead of ``mb``), stage 4 keeps that product alone, and the output stage
requantizes it with M = ``ma``. With ``b_repeat`` = r > 0 the b address advances after every r
words (one b word per channel block: a per-channel vector over the pixels, as squeeze-and-
excitation multiplies).

Run-time checks, all before the first read (so an illegal ADD writes nothing, like the ISA-level
simulator): count = 0, act_min > act_max or shift > MAX_SHIFT give ILLEGAL_FIELD (so do act_table
without the table and mul without the multiply), either operand or the result reaching beyond its
buffer gives SRAM_RANGE.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring

from dlproc.hardware import isa
from dlproc.hardware.numerics import MAX_SHIFT, MULT_BITS

from dlproc.hardware.gateware.engine import Engine, TAG_BITS, EngineCommand, table_refused
from dlproc.hardware.gateware.output_stage import REQUANT_LANE

__all__ = ["ADD_CMD_LAYOUT", "AddEngine"]

#: An ADD command: the instruction fields as ``dlproc.hardware.isa`` encodes them, plus the output tag.
ADD_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Add.field_specs()} | {"tag": unsigned(TAG_BITS)}
)

_PROD_BITS = 9 + MULT_BITS + 1  # signed 9-bit times unsigned MULT_BITS (or times signed 9 bits: mul)


class AddEngine(Engine):
    """Executes ADD commands. Ports as :class:`~dlproc.hardware.gateware.pool.PoolEngine` (no PRM port)."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        super().__init__(hw, {"cmd": ADD_CMD_LAYOUT}, ("inp",))

    def elaborate(self, platform) -> Module:
        m = Module()
        c, hw = self.c, self.hw
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        # Accept and check (registered, see engine.py): ILLEGAL_FIELD before SRAM_RANGE.
        m.submodules.command = command = EngineCommand(
            ADD_CMD_LAYOUT,
            illegal=lambda f: ((f.count == 0) | (f.act_min > f.act_max) | (f.shift > MAX_SHIFT)
                               | table_refused(hw, f) | (Const(0) if hw.multiply else f.mul)),
            ranges=[(lambda f: f.inp_a + f.count, hw.inp_depth),
                    (lambda f: f.inp_b + f.count, hw.inp_depth),
                    (lambda f: f.out_base + f.count, hw.out_depth)],
        )
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        a = command.fields
        width = isa.SRAM_ADDR_BITS + 2
        i = Signal(width)  # word index
        phase = Signal()  # 0: read operand a, 1: read operand b
        issue = Signal()
        last = i == a.count - 1
        s1, s2, s3, s4, s5 = (Signal(name=f"add_s{k}") for k in range(1, 6))
        # INP addresses as counters (inp_a + i, inp_b + i) and the one being read as a register,
        # so that no adder or multiplexer sits between the state and the INP address.
        addr, next_a, next_b = Signal(width), Signal(width), Signal(width)
        # Broadcast (b_repeat = r > 0): b's address advances after every r words of a.
        rep = Signal(isa.SRAM_ADDR_BITS + 1)
        b_step = (a.b_repeat == 0) | (rep == a.b_repeat - 1)

        with m.FSM(name="add") as fsm:
            with m.State("IDLE"):
                # The last word of the previous command still reads ``a`` (scalars, tag) in
                # stages 1 to 4, so a new command waits until it has left.
                m.d.comb += command.enable.eq(~error & ~s1 & ~s2 & ~s3 & ~s4 & ~s5)
                with m.If(command.take):
                    m.d.sync += [i.eq(0), phase.eq(0)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [addr.eq(a.inp_a), next_a.eq(a.inp_a + 1), next_b.eq(a.inp_b), rep.eq(0)]
                with m.If(command.fault):
                    m.d.sync += [error.eq(1), code.eq(command.code)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "SWEEP"
            with m.State("SWEEP"):
                m.d.comb += issue.eq(1)
                m.d.sync += phase.eq(~phase)
                with m.If(phase):
                    m.d.sync += [i.eq(i + 1), addr.eq(next_a), next_a.eq(next_a + 1)]
                    with m.If(last):
                        m.next = "IDLE"
                with m.Else():
                    m.d.sync += addr.eq(next_b)
                    with m.If(b_step):
                        m.d.sync += [next_b.eq(next_b + 1), rep.eq(0)]
                    with m.Else():
                        m.d.sync += rep.eq(rep + 1)

        # Address: a's word in phase 0, b's in phase 1.
        m.d.comb += [self.inp.addr.eq(addr), self.inp.en.eq(issue)]

        # Side band: stage 1 = a's data, 2 = b's data, 3 = both differences, 4 = products, 5 = sum.
        last1, last2, last3, last4, last5 = (Signal(name=f"add_last{k}") for k in range(1, 6))
        q1, q2, q3, q4, q5 = (Signal(self.out_bits, name=f"add_q{k}") for k in range(1, 6))
        m.d.sync += [
            s1.eq(issue & ~phase), last1.eq(last), q1.eq((a.out_base + i)[:self.out_bits]),
            s2.eq(s1), last2.eq(last1), q2.eq(q1),
            s3.eq(s2), last3.eq(last2), q3.eq(q2),
            s4.eq(s3), last4.eq(last3), q4.eq(q3),
            s5.eq(s4), last5.eq(last4), q5.eq(q4),
        ]
        # One multiplier per lane, shared by the two products: (a - za) * ma in stage 2,
        # (b - zb) * mb in stage 3. A word starts every second cycle, so the next word's first
        # product (its stage 2) falls into this word's stage 4, never colliding. The operands
        # are registers (x_op: a - za, then b - zb; m_op: ma, then mb) with nothing but wiring
        # in front of the DSP block: a multiplexer there made this the critical path.
        zsel = Signal(signed(8))  # zero point of the word arriving in the next cycle
        m.d.sync += zsel.eq(Mux(s1, a.zb, a.za))
        x_op = Signal(data.ArrayLayout(signed(9), c))
        if hw.multiply:
            # The multiply (``mul``) uses the same multiplier: b's product is (b - zb) * (a - za),
            # so the second operand is per lane, a - za (x_op in the cycle b arrives) instead of mb.
            m_op = Signal(data.ArrayLayout(signed(MULT_BITS + 1), c))
            for lane in range(c):
                m.d.sync += m_op[lane].eq(Mux(s2, Mux(a.mul, x_op[lane], a.mb), a.ma))
            lane_m = [m_op[lane] for lane in range(c)]
        else:
            m_op = Signal(unsigned(MULT_BITS))
            m.d.sync += m_op.eq(Mux(s2, a.mb, a.ma))
            lane_m = [m_op] * c
        prod = Signal(data.ArrayLayout(signed(_PROD_BITS), c))
        pa = Signal(data.ArrayLayout(signed(_PROD_BITS), c))
        acc = Signal(data.ArrayLayout(signed(32), c))
        # Each register loads only in the cycle its value is formed (prod: a's and b's product,
        # pa: a's, acc: the sum), so the datapath holds still while the engine is idle and
        # Verilator skips it then; the values that reach the output stage are the same.
        for lane in range(c):
            with m.If(s1 | s2):
                m.d.sync += x_op[lane].eq(self.inp.data[lane] - zsel)
            with m.If(s2 | s3):
                m.d.sync += prod[lane].eq(x_op[lane] * lane_m[lane])
            with m.If(s3):
                m.d.sync += pa[lane].eq(prod[lane])
            with m.If(s4):
                if hw.multiply:
                    m.d.sync += acc[lane].eq(Mux(a.mul, prod[lane], pa[lane] + prod[lane]))
                else:
                    m.d.sync += acc[lane].eq(pa[lane] + prod[lane])

        params = Signal(data.ArrayLayout(REQUANT_LANE, c))
        for lane in range(c):
            # The sum is requantized with M = 1, the product with M = ma.
            mult = Mux(a.mul, a.ma, 1) if hw.multiply else 1
            m.d.comb += [params[lane].mult.eq(mult), params[lane].mult_neg.eq(mult), params[lane].shift.eq(a.shift)]
        m.d.comb += [
            self.ost.valid.eq(s5),
            self.ost.acc.eq(acc),
            self.ost.params.eq(params),
            self.ost.zp_out.eq(a.zp_out),
            self.ost.act_min.eq(a.act_min),
            self.ost.act_max.eq(a.act_max),
            self.ost.addr.eq(q5),
            self.ost.tag.eq(Cat(last5, a.tag)),
            self.ost.table.eq(a.act_table),
        ]
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | s1 | s2 | s3 | s4 | s5)
        return m
