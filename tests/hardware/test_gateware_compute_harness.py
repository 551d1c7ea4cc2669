"""Simulation harness for the compute unit (shared by the test_gateware_compute_* tests).

``run_program`` builds the :class:`~dlproc.hardware.gateware.compute.ComputeUnit` with real INP/WGT/PRM/OUT
memories (``amaranth.lib.memory``) initialized from NumPy arrays and simple token counters,
streams encoded instructions into it with Amaranth's simulator and returns OUT, the cycle count
and the token/status observations. ``conv_reference`` and ``pool_reference`` evaluate the
contract's CONV and POOL formulas directly in NumPy (independent of the gateware's loop order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Elaboratable, Module, Signal, unsigned
from amaranth.lib import memory
from amaranth.sim import Simulator

from dlproc.hardware import isa
from dlproc.hardware.gateware.compute import ComputeUnit
from dlproc.hardware.numerics import requantize


# ------------------------------------------------------------------------------------------------
# Memory images
@dataclass
class Buffers:
    """Contents of the on-chip buffers: inp [D, C] int8, wgt [D, C(co), C(ci)] int8, PRM fields."""

    inp: np.ndarray
    wgt: np.ndarray
    bias: np.ndarray  # [D, C] int32
    mult: np.ndarray  # [D, C] uint16
    mult_neg: np.ndarray  # [D, C] uint16
    shift: np.ndarray  # [D, C] uint8

    @property
    def c(self) -> int:
        return self.inp.shape[1]

    def inp_words(self) -> list[int]:
        return [_pack_bytes(row) for row in self.inp]

    def wgt_words(self) -> list[int]:
        return [_pack_bytes(w.reshape(-1)) for w in self.wgt]  # byte co*C + ci

    def prm_words(self) -> list[int]:
        words = []
        for k in range(self.bias.shape[0]):
            word = 0
            for lane in range(self.c):
                lane_bits = (int(self.bias[k, lane]) & 0xFFFFFFFF) | (int(self.mult[k, lane]) << 32) | (
                    int(self.mult_neg[k, lane]) << 48) | (int(self.shift[k, lane]) << 64)
                word |= lane_bits << (72 * lane)
            words.append(word)
        return words


def _pack_bytes(values: np.ndarray) -> int:
    return int.from_bytes(np.asarray(values, dtype=np.int8).tobytes(), "little")


def _unpack_out(word: int, c: int) -> np.ndarray:
    return np.frombuffer(int(word).to_bytes(c, "little"), dtype=np.int8).copy()


def random_buffers(rng: np.random.Generator, hw: isa.HardwareParams, scale_taps: int = 9) -> Buffers:
    """Random buffer contents; requantization scales chosen so outputs spread over int8."""
    c = hw.c
    inp = rng.integers(-128, 128, size=(hw.inp_depth, c)).astype(np.int8)
    wgt = rng.integers(-128, 128, size=(hw.wgt_depth, c, c)).astype(np.int8)
    bias = rng.integers(-(1 << 14), 1 << 14, size=(hw.prm_depth, c)).astype(np.int32)
    # |acc| is about 128*128/3 * sqrt(taps*C): aim M/2**S at roughly 64/|acc|.
    typical = 128 * 128 / 3 * np.sqrt(scale_taps * c)
    base_shift = int(np.clip(15 + np.round(np.log2(typical / 64)), 0, 46))
    shift = np.clip(base_shift + rng.integers(-2, 3, size=(hw.prm_depth, c)), 0, 46).astype(np.uint8)
    mult = rng.integers(1 << 13, 1 << 15, size=(hw.prm_depth, c)).astype(np.uint16)
    mult_neg = np.where(rng.random((hw.prm_depth, c)) < 0.3,
                        rng.integers(0, 1 << 15, size=(hw.prm_depth, c)), mult).astype(np.uint16)
    return Buffers(inp, wgt, bias, mult, mult_neg, shift)


# ------------------------------------------------------------------------------------------------
# NumPy references of the contract formulas
def conv_reference(buf: Buffers, insn: isa.Conv) -> np.ndarray:
    """OUT words [out_h*out_w, C] of one CONV, straight from the contract's formula."""
    return conv_chain_reference(buf, [insn])


def conv_chain_reference(buf: Buffers, chain: list[isa.Conv]) -> np.ndarray:
    """OUT words of a partial-sum chain (acc_keep ... acc_in): the bias of the first CONV's PRM
    word plus every CONV's sums, wrapped to int32 and requantized with the last one's parameters."""
    c = buf.c
    last = chain[-1]
    acc = np.zeros((last.out_h, last.out_w, c), dtype=np.int64)
    acc += buf.bias[chain[0].prm_base].astype(np.int64)
    for insn in chain:
        acc += _conv_sums(buf, insn)
    acc = ((acc + 2**31) % 2**32) - 2**31
    p = last.prm_base
    out = requantize(acc, buf.mult[p], buf.shift[p], last.zp_out, last.act_min, last.act_max,
                     buf.mult_neg[p])
    return out.reshape(-1, c)


def _conv_sums(buf: Buffers, insn: isa.Conv) -> np.ndarray:
    """The unwrapped sums over one CONV's taps, [out_h, out_w, C] int64 (no bias)."""
    c = buf.c
    acc = np.zeros((insn.out_h, insn.out_w, c), dtype=np.int64)
    for cb in range(insn.cin_blocks):
        for ky in range(insn.kh):
            for kx in range(insn.kw):
                w = buf.wgt[insn.wgt_base + (cb * insn.kh + ky) * insn.kw + kx].astype(np.int64)
                for oy in range(insn.out_h):
                    for ox in range(insn.out_w):
                        a = (insn.inp_base + cb * insn.in_plane
                             + (oy * insn.stride_y + ky * insn.dil_y) * insn.in_w
                             + ox * insn.stride_x + kx * insn.dil_x)
                        acc[oy, ox] += w @ buf.inp[a].astype(np.int64)  # [co][ci] x [ci]
    return acc


def pool_reference(buf: Buffers, insn: isa.Pool) -> np.ndarray:
    """OUT words [z_size*out_h*out_w, C] of one POOL."""
    c = buf.c
    res = []
    for z in range(insn.z_size):
        for oy in range(insn.out_h):
            for ox in range(insn.out_w):
                idx = [insn.inp_base + z * insn.in_plane + (oy * insn.stride_y + ky) * insn.in_w
                       + ox * insn.stride_x + kx for ky in range(insn.kh) for kx in range(insn.kw)]
                win = buf.inp[idx].astype(np.int64)
                if insn.mode == isa.PoolMode.MAX:
                    res.append(np.clip(win.max(axis=0), insn.act_min, insn.act_max).astype(np.int8))
                else:
                    s = win.sum(axis=0) - insn.kh * insn.kw * insn.zp_in
                    s = ((s + 2**31) % 2**32) - 2**31
                    p = insn.prm_base + z
                    res.append(requantize(s, buf.mult[p], buf.shift[p], insn.zp_out, insn.act_min,
                                          insn.act_max))
    return np.array(res, dtype=np.int8).reshape(-1, c)


# ------------------------------------------------------------------------------------------------
# The simulated bench
class _Bench(Elaboratable):
    def __init__(self, hw: isa.HardwareParams, buf: Buffers, acc_depth: int | None,
                 l2c_tokens: int, s2c_tokens: int) -> None:
        self.hw = hw
        self.dut = ComputeUnit(hw, acc_depth)
        c = hw.c
        self.inp_mem = memory.Memory(shape=unsigned(8 * c), depth=hw.inp_depth, init=buf.inp_words())
        self.wgt_mem = memory.Memory(shape=unsigned(8 * c * c), depth=hw.wgt_depth, init=buf.wgt_words())
        self.prm_mem = memory.Memory(shape=unsigned(72 * c), depth=hw.prm_depth, init=buf.prm_words())
        self.out_mem = memory.Memory(shape=unsigned(8 * c), depth=hw.out_depth,
                                     init=[0x5A5A5A5A5A5A5A5A5A5A5A5A5A5A5A5A & ((1 << (8 * c)) - 1)]
                                     * hw.out_depth)
        self.l2c = Signal(8, init=l2c_tokens)
        self.s2c = Signal(8, init=s2c_tokens)
        self.give_l2c = Signal()
        self.give_s2c = Signal()
        self.c2l_pushes = Signal(8)
        self.c2s_pushes = Signal(8)
        self.busy_cycles = Signal(32)
        self.stall_cycles = Signal(32)
        self.mac_cycles = Signal(32)
        self.fc_mac_cycles = Signal(32)

    def elaborate(self, platform) -> Module:
        m = Module()
        dut = self.dut
        m.submodules.dut = dut
        for name in ("inp_mem", "wgt_mem", "prm_mem", "out_mem"):
            m.submodules[name] = getattr(self, name)
        for mem, port in ((self.inp_mem, dut.inp), (self.wgt_mem, dut.wgt), (self.prm_mem, dut.prm)):
            rp = mem.read_port()
            m.d.comb += [rp.addr.eq(port.addr), rp.en.eq(port.en), port.data.eq(rp.data)]
        wp = self.out_mem.write_port(granularity=8)  # one enable per lane, as the OUT buffer
        m.d.comb += [wp.addr.eq(dut.out.addr), wp.en.eq(dut.out.en), wp.data.eq(dut.out.data)]
        iw = self.inp_mem.write_port()  # CONV.to_inp results (no load unit in this bench)
        m.d.comb += [iw.addr.eq(dut.inp_w.addr), iw.en.eq(dut.inp_w.en), iw.data.eq(dut.inp_w.data)]
        m.d.comb += [dut.tok_l2c_valid.eq(self.l2c != 0), dut.tok_s2c_valid.eq(self.s2c != 0)]
        m.d.sync += [
            self.l2c.eq(self.l2c + self.give_l2c - dut.tok_l2c_pop),
            self.s2c.eq(self.s2c + self.give_s2c - dut.tok_s2c_pop),
            self.c2l_pushes.eq(self.c2l_pushes + dut.tok_c2l_push),
            self.c2s_pushes.eq(self.c2s_pushes + dut.tok_c2s_push),
            self.busy_cycles.eq(self.busy_cycles + dut.busy),
            self.stall_cycles.eq(self.stall_cycles + dut.stall),
            self.mac_cycles.eq(self.mac_cycles + dut.mac_active),
            self.fc_mac_cycles.eq(self.fc_mac_cycles + dut.fc_mac_active),
        ]
        return m


@dataclass
class RunResult:
    out: np.ndarray  # [D_out, C] int8
    cycles: int  # from the first instruction offered to `finished` (or the error, or the limit)
    finished: bool
    error_code: int
    c2l_pushes: int
    c2s_pushes: int
    busy_cycles: int
    stall_cycles: int
    mac_cycles: int
    fc_mac_cycles: int = 0
    tokens_left: tuple[int, int] = (0, 0)
    inp: np.ndarray | None = None  # [D_inp, C] int8 at the end (CONV.to_inp writes it)
    events: list = field(default_factory=list)


def run_program(hw: isa.HardwareParams, buf: Buffers, insns: list, *, acc_depth: int | None = None,
                l2c_tokens: int = 0, s2c_tokens: int = 0, max_cycles: int = 50_000,
                give_tokens_at: dict[int, tuple[int, int]] | None = None) -> RunResult:
    """Run the instructions (isa objects or raw 256-bit ints) until FINISH, an error or the limit.

    ``give_tokens_at`` maps a cycle number to (l2c, s2c) tokens handed over in that cycle.
    """
    bench = _Bench(hw, buf, acc_depth, l2c_tokens, s2c_tokens)
    dut = bench.dut
    words = [w if isinstance(w, int) else int.from_bytes(w.encode(), "little") for w in insns]
    give = give_tokens_at or {}
    state: dict = {"events": []}

    async def testbench(ctx):
        cycle = 0
        queue = list(words)
        payload = dut.insn.payload.as_value()
        while cycle < max_cycles:
            if queue:
                ctx.set(dut.insn.valid, 1)
                ctx.set(payload, queue[0])
            else:
                ctx.set(dut.insn.valid, 0)
            l2c, s2c = give.get(cycle, (0, 0))
            ctx.set(bench.give_l2c, l2c)
            ctx.set(bench.give_s2c, s2c)
            took = queue and ctx.get(dut.insn.ready)
            if ctx.get(dut.finished) or ctx.get(dut.error):
                break
            if ctx.get(dut.out.en):
                state["events"].append((cycle, "write", int(ctx.get(dut.out.addr))))
            if ctx.get(dut.inp_w.en):
                state["events"].append((cycle, "inp_write", int(ctx.get(dut.inp_w.addr))))
            if ctx.get(dut.inp.en):
                state["events"].append((cycle, "inp_read", int(ctx.get(dut.inp.addr))))
            for port, name in ((dut.tok_c2l_push, "push_prev"), (dut.tok_c2s_push, "push_next"),
                               (dut.tok_l2c_pop, "pop_prev"), (dut.tok_s2c_pop, "pop_next")):
                if ctx.get(port):
                    state["events"].append((cycle, name, None))
            await ctx.tick()
            cycle += 1
            if took:
                queue.pop(0)
        # Let anything still in flight settle (an error stops the unit, writes may still land).
        ctx.set(dut.insn.valid, 0)
        await ctx.tick().repeat(12)
        state["cycles"] = cycle
        state["finished"] = bool(ctx.get(dut.finished))
        state["error_code"] = int(ctx.get(dut.error_code)) if ctx.get(dut.error) else 0
        state["out"] = np.array([_unpack_out(ctx.get(bench.out_mem.data[k]), hw.c)
                                 for k in range(hw.out_depth)])
        state["inp"] = np.array([_unpack_out(ctx.get(bench.inp_mem.data[k]), hw.c)
                                 for k in range(hw.inp_depth)])
        for name in ("c2l_pushes", "c2s_pushes", "busy_cycles", "stall_cycles", "mac_cycles", "fc_mac_cycles"):
            state[name] = int(ctx.get(getattr(bench, name)))
        state["tokens_left"] = (int(ctx.get(bench.l2c)), int(ctx.get(bench.s2c)))

    sim = Simulator(bench)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return RunResult(**state)


def small_hw(c: int = 4, inp_depth: int = 512, wgt_depth: int = 256, prm_depth: int = 8,
             out_depth: int = 256) -> isa.HardwareParams:
    return isa.HardwareParams(c=c, mem_data_width=64, inp_depth=inp_depth, wgt_depth=wgt_depth,
                              prm_depth=prm_depth, out_depth=out_depth)


OUT_FILL = np.frombuffer(bytes([0x5A]), dtype=np.int8)[0]


def isasim_machine(hw: isa.HardwareParams, buf: Buffers, insns: list):
    """The ISA simulator after running ``insns`` on these buffer contents (OUT filled with OUT_FILL)."""
    from dlproc.hardware.geometry import Geometry
    from dlproc.targets.isasim import Machine

    m = Machine(geometry=Geometry.from_hw(hw), dram_size=1 << 16)
    m.inp[:] = buf.inp
    m.wgt[:] = buf.wgt
    c = hw.c
    raw = np.zeros((hw.prm_depth, c), dtype=[("b", "<i4"), ("m", "<u2"), ("n", "<u2"), ("s", "u1")])
    raw["b"], raw["m"], raw["n"], raw["s"] = buf.bias, buf.mult, buf.mult_neg, buf.shift
    m.prm[:] = np.frombuffer(raw.tobytes(), dtype=np.uint8).reshape(hw.prm_depth, 9 * c)
    m.out[:] = OUT_FILL
    m.run(insns, insn_base=0x8000)
    return m
