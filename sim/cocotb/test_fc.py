"""cocotb bench: ``dlproc.hardware.gateware.fc.FcEngine`` against the golden ``ops.fully_connected`` + ``requantize``.

The DUT is :class:`FcBench`: the FC engine with its INP, WGT and PRM memories (random contents from the seed) and the
output stage, exactly as the compute unit connects them; the bench drives FC commands (random
n_in, n_out, first lanes, bases, zero points and clamps, load_x on the first and on larger inputs)
with random gaps, records every OUT write (data and the lanes it keeps) and compares it with the
reference computed from the same seed.
Parameters: ``DLPROC_BENCH_C``, ``DLPROC_BENCH_F`` (lanes), ``DLPROC_BENCH_SEED``.

    run_cocotb(bench_verilog(seed, c, f), "fc_bench", "dlproc.sim.cocotb.test_fc", ...)
"""

from __future__ import annotations

import dataclasses
import os
import random

import numpy as np
from amaranth.hdl import Module, unsigned
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.hardware.numerics import requantize
from dlproc.sim.cocotb.benches import pack_inp, pack_prm, pack_wgt, unpack_out

INP_DEPTH, WGT_DEPTH, PRM_DEPTH, OUT_DEPTH, X_DEPTH = 64, 96, 24, 64, 256
N_INSNS = 6


def bench_hw(c: int, f: int) -> isa.HardwareParams:
    return isa.HardwareParams(c=c, mem_data_width=64, inp_depth=INP_DEPTH, wgt_depth=WGT_DEPTH, prm_depth=PRM_DEPTH,
                              out_depth=OUT_DEPTH, fc=True, fc_lanes=f, fc_in_depth=X_DEPTH, fc_out_max=64)


@dataclasses.dataclass
class BenchData:
    inp: np.ndarray  # [INP_DEPTH, C] int8
    wgt: np.ndarray  # [WGT_DEPTH, C*C] int8 (byte co*C + ci)
    bias: np.ndarray  # [PRM_DEPTH, C]
    mult: np.ndarray
    mult_neg: np.ndarray
    shift: np.ndarray
    insns: list[isa.Fc]


def bench_data(seed: int, c: int, f: int) -> BenchData:
    """Memory contents and FC instructions, the same on the Verilog side and in the bench."""
    rng = np.random.default_rng(seed)
    hw = bench_hw(c, f)
    inp = rng.integers(-128, 128, (INP_DEPTH, c), dtype=np.int8)
    wgt = rng.integers(-128, 128, (WGT_DEPTH, c * c), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, (PRM_DEPTH, c)).astype(np.int64)
    mult = rng.integers(1 << 13, 1 << 15, (PRM_DEPTH, c)).astype(np.int64)
    mult_neg = np.where(rng.random((PRM_DEPTH, c)) < 0.3, rng.integers(0, 1 << 15, (PRM_DEPTH, c)), mult)
    shift = rng.integers(12, 17, (PRM_DEPTH, c)).astype(np.int64)
    insns, x_len, out = [], 0, 0
    for t in range(N_INSNS):
        n_in = int(rng.integers(1, min(X_DEPTH, INP_DEPTH * c) // 2))
        n_out = int(rng.integers(1, 3 * c + 1))
        # Half of the instructions start inside a word, as the sub-word tiles of a layer whose
        # weights for C outputs do not fit a WGT half.
        lane0 = int(rng.integers(1, c)) if c > 1 and rng.random() < 0.5 else 0
        load_x = t == 0 or n_in > x_len or bool(rng.random() < 0.3)
        if load_x:
            x_len = -(-n_in // c) * c
        per_word = (c * c) // f
        words = -(-(n_out * -(-n_in // f)) // per_word)
        blocks = -(-(lane0 + n_out) // c)
        zp = int(rng.integers(-20, 21))
        insn = isa.Fc(inp_base=int(rng.integers(0, INP_DEPTH - x_len // c + 1)) if load_x else 0,
                      wgt_base=int(rng.integers(0, WGT_DEPTH - words + 1)),
                      prm_base=int(rng.integers(0, PRM_DEPTH - blocks + 1)), out_base=out % (OUT_DEPTH - blocks),
                      n_in=n_in, n_out=n_out, load_x=int(load_x), zp_out=zp, act_min=int(rng.choice([-128, zp])),
                      act_max=127, lane0=lane0)
        insn.validate(hw)
        insns.append(insn)
        out += blocks
    return BenchData(inp, wgt, bias, mult, mult_neg, shift, insns)


def reference(d: BenchData, c: int, f: int) -> list[np.ndarray]:
    """OUT words [blocks, C] of every instruction (x buffer state carried between them); lanes
    before ``lane0`` in the first word are not written by the instruction and hold 0 here."""
    per_word = (c * c) // f
    stream_ = d.wgt[:, :per_word * f].reshape(-1, f)
    x = np.zeros(X_DEPTH, dtype=np.int8)
    res = []
    for insn in d.insns:
        if insn.load_x:
            k = -(-insn.n_in // c)
            x[:k * c] = d.inp[insn.inp_base:insn.inp_base + k].reshape(-1)[:X_DEPTH]
        s = -(-insn.n_in // f)
        first = insn.wgt_base * per_word
        w = stream_[first:first + insn.n_out * s].reshape(insn.n_out, s * f)[:, :insn.n_in]
        lo = insn.lane0
        blocks = -(-(lo + insn.n_out) // c)
        p = slice(insn.prm_base, insn.prm_base + blocks)
        bias = d.bias[p].reshape(-1)
        acc = bias.copy()
        acc[lo:lo + insn.n_out] = ops.fully_connected(x[None, :insn.n_in], w.astype(np.int8),
                                                      bias[lo:lo + insn.n_out])[0]
        y = requantize(acc, d.mult[p].reshape(-1), d.shift[p].reshape(-1), insn.zp_out, insn.act_min,
                       insn.act_max, d.mult_neg[p].reshape(-1))
        y[:lo] = 0
        res.append(y.reshape(blocks, c))
    return res


class FcBench(wiring.Component):
    """FcEngine + its memories + the output stage (the compute unit's wiring of one engine)."""

    def __init__(self, seed: int, c: int, f: int) -> None:
        from dlproc.hardware.gateware.fc import FC_CMD_LAYOUT

        self.hw = bench_hw(c, f)
        self.data = bench_data(seed, c, f)
        self.c = c
        super().__init__({
            "cmd": In(stream.Signature(FC_CMD_LAYOUT)),
            "out_en": Out(1),
            "out_addr": Out(range(OUT_DEPTH)),
            "out_data": Out(8 * c),
            "out_keep": Out(c),
            "out_last": Out(1),
            "busy": Out(1),
            "error": Out(1),
            "error_code": Out(4),
        })

    def elaborate(self, platform) -> Module:
        from dlproc.hardware.gateware.conv import TAG_BITS
        from dlproc.hardware.gateware.fc import FcEngine
        from dlproc.hardware.gateware.output_stage import OutputStage

        m = Module()
        c, d = self.c, self.data
        m.submodules.fc = eng = FcEngine(self.hw)
        m.submodules.ostage = ost = OutputStage(c, eng.out_bits, 1 + TAG_BITS)
        mems = {
            "inp": memory.Memory(shape=unsigned(8 * c), depth=INP_DEPTH, init=pack_inp(d.inp)),
            "wgt": memory.Memory(shape=unsigned(8 * c * c), depth=WGT_DEPTH, init=pack_wgt(d.wgt)),
            "prm": memory.Memory(shape=unsigned(72 * c), depth=PRM_DEPTH,
                                 init=pack_prm(d.bias, d.mult, d.mult_neg, d.shift)),
        }
        for name, mem in mems.items():
            m.submodules[name] = mem
            rp = mem.read_port()
            port = getattr(eng, name)
            m.d.comb += [rp.addr.eq(port.addr), rp.en.eq(port.en), port.data.eq(rp.data)]
        wiring.connect(m, wiring.flipped(self.cmd), eng.cmd)
        wiring.connect(m, eng.ost, ost.i)
        m.d.comb += [
            self.out_en.eq(ost.o.valid), self.out_addr.eq(ost.o.addr), self.out_data.eq(ost.o.data),
            self.out_keep.eq(ost.o.keep),
            self.out_last.eq(ost.o.tag[0]), self.busy.eq(eng.busy), self.error.eq(eng.error),
            self.error_code.eq(eng.error_code),
        ]
        return m


def bench_verilog(seed: int, c: int, f: int) -> str:
    from amaranth.back import verilog

    return verilog.convert(FcBench(seed, c, f), name="fc_bench", emit_src=False)


def _payload(insn: isa.Fc) -> int:
    from dlproc.hardware.gateware.fc import FC_CMD_LAYOUT

    word = 0
    for spec in isa.Fc.field_specs():
        fld = FC_CMD_LAYOUT[spec.name]
        word |= (int(getattr(insn, spec.name)) & ((1 << spec.bits) - 1)) << fld.offset
    return word


try:  # the cocotb part runs only inside the simulator
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
except ImportError:  # pragma: no cover - cocotb is a test dependency
    cocotb = None

if cocotb is not None:
    @cocotb.test(timeout_time=20, timeout_unit="ms")
    async def random_fc_commands_match_golden(dut):
        c = int(os.environ.get("DLPROC_BENCH_C", "4"))
        f = int(os.environ.get("DLPROC_BENCH_F", "8"))
        seed = int(os.environ.get("DLPROC_BENCH_SEED", "1"))
        rng = random.Random(seed)
        d = bench_data(seed, c, f)
        refs = reference(d, c, f)
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.cmd__valid.value = 0
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        writes: dict[int, tuple[int, int]] = {}  # OUT word -> (data, keep bits)
        lasts = 0

        async def monitor():
            nonlocal lasts
            while True:
                await RisingEdge(dut.clk)
                await ReadOnly()
                if int(dut.out_en.value):
                    writes[int(dut.out_addr.value)] = (int(dut.out_data.value), int(dut.out_keep.value))
                    lasts += int(dut.out_last.value)

        cocotb.start_soon(monitor())
        for insn in d.insns:
            await ClockCycles(dut.clk, rng.randint(0, 3))
            dut.cmd__payload.value = _payload(insn)
            dut.cmd__valid.value = 1
            while True:
                await RisingEdge(dut.clk)
                if int(dut.cmd__ready.value):
                    break
            dut.cmd__valid.value = 0
            # The next command may overwrite OUT words of this one: check them when it is done.
            for _ in range(20000):
                await RisingEdge(dut.clk)
                if not int(dut.busy.value):
                    break
            await ClockCycles(dut.clk, 8)  # the output stage's latency
            assert not int(dut.error.value), f"error {int(dut.error.value)} on {insn}"
            ref = refs.pop(0)
            for b in range(ref.shape[0]):
                word, keep = writes.pop(insn.out_base + b)
                kept = insn.lane0 if b == 0 else 0  # lanes 0 .. lane0-1 of the first word are left alone
                assert keep == (1 << kept) - 1, f"{insn}: word {b} keeps lanes {keep:#x}, expected {(1 << kept) - 1:#x}"
                got = unpack_out(word, c)
                assert (got[kept:] == ref[b][kept:]).all(), f"{insn}: word {b}: {got} != {ref[b]}"
            assert not writes, f"unexpected OUT writes {sorted(writes)}"
        assert lasts == len(d.insns)
