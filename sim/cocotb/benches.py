"""Block-level bench tops for the compute engines, and the cocotb driver that runs them.

:class:`EngineBench` is the device under test of the engine benches (``test_conv.py``,
``test_pool.py``, ``test_add.py``, ``test_upsample.py``, ``test_lrn.py``, ``test_softmax.py``). It
holds *one* engine with exactly the hardware around it that it has in the compute unit:

* the on-chip buffers it reads (INP, and WGT/PRM where the engine has those ports), each an
  ``amaranth.lib.memory.Memory`` with one synchronous read port like ``gateware.buffers.Buffers``,
  whose write ports are top-level ports (``inp_w__addr``/``__data``/``__en``, ...) so that the
  bench loads them word by word, one per cycle, as the load unit would;
* the shared :class:`~dlproc.hardware.gateware.output_stage.OutputStage`, whose OUT write port is exposed
  (``out__valid``/``__addr``/``__data``/``__tag``) for the bench's monitor;
* the instruction decode of the compute unit: the bench offers an encoded 256-bit instruction
  (``dlproc.hardware.isa`` encoders) on the ``insn`` stream, and the wrapper copies the instruction fields
  into the engine's command by name and the push flags into its tag, exactly as
  ``ComputeUnit`` does. ``insn.ready`` is the engine's own ``cmd.ready``.

The engines have no back-pressure on their output (the output stage is a fixed-latency pipeline
and OUT always accepts a write), so what the benches randomize on the interfaces is the command
side: random gaps between instructions, and instructions offered while the engine is still busy
(ready low), which must stall them, never lose or duplicate them.

The cocotb half (:class:`BlockBench`) starts the clock, resets, loads buffers, issues instructions
with random timing and records every OUT write with its cycle; :func:`check_writes` compares them
bit-exactly with the expected words the test computed with ``dlproc.targets.golden.ops``. Parameters come
from the environment: ``DLPROC_BENCH_HW`` (JSON of the :class:`~dlproc.hardware.isa.HardwareParams` fields
plus ``acc_depth``, written by :func:`bench_env`), ``DLPROC_BENCH_PREFIX`` (the bench's port prefix
in the top level, see :class:`EngineBenches`), ``DLPROC_BENCH_SEED``, ``DLPROC_BENCH_CASES``
and ``DLPROC_BENCH_FIRST_CASE`` (a case depends only on the seed and its number, so a failing case
reruns alone).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from dataclasses import dataclass, field

import cocotb
import numpy as np
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from dlproc.hardware import isa
from dlproc.hardware.gateware.add import AddEngine
from dlproc.hardware.gateware.buffers import word_layout, write_port_signature
from dlproc.hardware.gateware.conv import ConvEngine
from dlproc.hardware.gateware.engine import result_addr_bits
from dlproc.hardware.gateware.lrn import LrnEngine
from dlproc.hardware.gateware.output_stage import OutputStage, output_signature
from dlproc.hardware.gateware.pool import PoolEngine
from dlproc.hardware.gateware.softmax import SoftmaxEngine
from dlproc.hardware.gateware.upsample import UpsampleEngine

__all__ = [
    "ENGINES", "EngineBench", "EngineBenches", "engine_of", "bench_verilog", "benches_verilog", "bench_env", "hw_from_env",
    "BlockBench", "OutWrite", "pack_inp", "pack_wgt", "pack_prm", "plane_words", "random_cuts", "unpack_out",
    "insn_word", "check_writes", "check_period", "push_tag", "corrupt_one", "expect_mismatch", "MISMATCH",
    "HW_ENV", "SEED_ENV", "PREFIX_ENV", "CASES_ENV", "FIRST_CASE_ENV",
]

HW_ENV = "DLPROC_BENCH_HW"
SEED_ENV = "DLPROC_BENCH_SEED"
PREFIX_ENV = "DLPROC_BENCH_PREFIX"
CASES_ENV = "DLPROC_BENCH_CASES"
FIRST_CASE_ENV = "DLPROC_BENCH_FIRST_CASE"

# Engine kind -> (constructor taking (hw, acc_depth), {opcode: name of the engine's command stream}).
ENGINES: dict[str, tuple] = {
    "conv": (lambda hw, acc: ConvEngine(hw, acc), {isa.Opcode.CONV: "cmd"}),
    "pool": (lambda hw, acc: PoolEngine(hw, acc), {isa.Opcode.POOL: "cmd"}),
    "add": (lambda hw, acc: AddEngine(hw), {isa.Opcode.ADD: "cmd"}),
    "upsample": (lambda hw, acc: UpsampleEngine(hw), {isa.Opcode.UPSAMPLE: "cmd"}),
    "lrn": (lambda hw, acc: LrnEngine(hw), {isa.Opcode.LRN: "cmd", isa.Opcode.LRNTAB: "tab_cmd"}),
    "softmax": (lambda hw, acc: SoftmaxEngine(hw), {isa.Opcode.SOFTMAX: "cmd", isa.Opcode.SMXTAB: "tab_cmd"}),
}


# ================================================================================================
# Gateware: the bench top
# ================================================================================================
class EngineBench(wiring.Component):
    """One compute engine with its buffers and the output stage (see the module docstring).

    Ports: ``insn`` (stream of :data:`dlproc.hardware.isa.INSN_LAYOUT`), ``<buf>_w`` write ports of the
    buffers the engine reads, ``out`` (the output stage's OUT write: valid, addr, data, tag =
    ``Cat(last, push_prev, push_next)``), ``busy``, ``error``, ``error_code`` and, for the conv
    engine, ``mac_active``.
    """

    def __init__(self, kind: str, hw: isa.HardwareParams, acc_depth: int) -> None:
        if kind not in ENGINES:
            raise ValueError(f"unknown engine {kind!r}; allowed: {', '.join(ENGINES)}")
        self.kind, self.hw, self.acc_depth = kind, hw, acc_depth
        make, self.routes = ENGINES[kind]
        self.engine = make(hw, acc_depth)
        members = self.engine.signature.members
        self.buffers = [b for b in ("INP", "WGT", "PRM") if b.lower() in members]
        ports = {"insn": In(stream.Signature(isa.INSN_LAYOUT))}
        for buf in self.buffers:
            ports[f"{buf.lower()}_w"] = Out(write_port_signature(hw, buf))
        tag_bits = len(self.engine.ost.tag)
        ports["out"] = Out(output_signature(hw.c, result_addr_bits(hw), tag_bits))
        ports |= {"busy": Out(1), "error": Out(1), "error_code": Out(4)}
        if "mac_active" in members:
            ports["mac_active"] = Out(1)
        super().__init__(ports)

    def elaborate(self, platform) -> Module:
        m = Module()
        hw, eng = self.hw, self.engine
        m.submodules.engine = eng
        # Buffers: a simple dual-port RAM each, as in gateware.buffers (no read-during-write
        # transparency; the bench never writes a buffer while an instruction runs).
        for buf in self.buffers:
            mem = memory.Memory(shape=word_layout(hw, buf), depth=hw.depth(buf), init=[])
            m.submodules[f"{buf.lower()}_mem"] = mem
            wp, rp = mem.write_port(), mem.read_port()
            w, r = getattr(self, f"{buf.lower()}_w"), getattr(eng, buf.lower())
            m.d.comb += [wp.addr.eq(w.addr), wp.data.eq(w.data), wp.en.eq(w.en),
                         rp.addr.eq(r.addr), rp.en.eq(r.en), r.data.eq(rp.data)]

        # Output stage, as the compute unit instantiates it.
        m.submodules.ostage = ostage = OutputStage(hw.c, result_addr_bits(hw), len(eng.ost.tag))
        wiring.connect(m, eng.ost, ostage.i)
        wiring.connect(m, ostage.o, wiring.flipped(self.out))

        # Instruction decode, as in ComputeUnit: fields by name, tag = push_prev | push_next << 1.
        ir = self.insn.payload
        hdr = ir.header
        ready = Signal()
        for op, stream_name in self.routes.items():
            cmd = getattr(eng, stream_name)
            view = getattr(ir, op.name.lower())
            for spec in isa.INSTRUCTION_CLASSES[op].field_specs():
                m.d.comb += getattr(cmd.payload, spec.name).eq(getattr(view, spec.name))
            if "tag" in cmd.payload.shape().members:
                m.d.comb += cmd.payload.tag.eq(hdr.push_prev | (hdr.push_next << 1))
            sel = hdr.opcode == op
            m.d.comb += cmd.valid.eq(self.insn.valid & sel)
            with m.If(sel):
                m.d.comb += ready.eq(cmd.ready)
        m.d.comb += [
            self.insn.ready.eq(ready),
            self.busy.eq(eng.busy),
            self.error.eq(eng.error),
            self.error_code.eq(eng.error_code),
        ]
        if "mac_active" in self.signature.members:
            m.d.comb += self.mac_active.eq(eng.mac_active)
        return m


def engine_of(bench_name: str) -> str:
    """The engine kind of an :class:`EngineBenches` bench name (``conv_dw`` -> ``conv``)."""
    return bench_name.partition("_")[0]


class EngineBenches(wiring.Component):
    """Several :class:`EngineBench` side by side in one top level, sharing only clock and reset.

    The ports of the bench of engine ``kind`` are those of :class:`EngineBench` prefixed with
    ``<kind>__`` (``conv__insn__valid``, ``pool__out__data``, ...). This is only a way to get all
    engine benches out of *one* Verilator build: the C++ compile of the Verilator and VPI runtime
    (about 18 s of each build on the shared machine) is then paid once, not once per engine. The
    benches are independent; a test drives one of them and leaves the others idle.

    A bench's name is its engine's kind, or ``<kind>_<variant>`` for a second bench of the same
    engine with other hardware parameters (``conv_dw``: the conv engine at C = 9, whose depthwise
    window has three rows); its ports are then prefixed with ``<kind>_<variant>__``.
    """

    def __init__(self, specs: dict[str, tuple[isa.HardwareParams, int]]) -> None:
        self.benches = {name: EngineBench(engine_of(name), hw, acc) for name, (hw, acc) in specs.items()}
        super().__init__({name: Out(b.signature) for name, b in self.benches.items()})

    def elaborate(self, platform) -> Module:
        m = Module()
        for name, bench in self.benches.items():
            m.submodules[name] = bench
            wiring.connect(m, wiring.flipped(getattr(self, name)), bench)
        return m


def bench_verilog(kind: str, hw: isa.HardwareParams, acc_depth: int | None = None) -> tuple[str, str]:
    """(Verilog text, top-level name) of the bench of engine ``kind`` alone (port prefix "")."""
    acc = acc_depth if acc_depth is not None else max(1, hw.out_depth // 2)
    name = f"{kind}_bench"
    return verilog.convert(EngineBench(kind, hw, acc), name=name, emit_src=False), name


def benches_verilog(specs: dict[str, tuple[isa.HardwareParams, int]],
                    name: str = "engine_benches") -> tuple[str, str]:
    """(Verilog text, top-level name) of :class:`EngineBenches` (port prefix ``<kind>__``)."""
    return verilog.convert(EngineBenches(specs), name=name, emit_src=False), name


def bench_env(hw: isa.HardwareParams, acc_depth: int, seed: int, prefix: str = "", **extra: str) -> dict[str, str]:
    """The environment a bench module reads: hardware parameters as JSON, the seed, the port
    prefix of the engine's bench in the top level ("" alone, ``"<kind>__"`` in EngineBenches)."""
    return {HW_ENV: json.dumps(dataclasses.asdict(hw) | {"acc_depth": acc_depth}), SEED_ENV: str(seed),
            PREFIX_ENV: prefix, **{k: str(v) for k, v in extra.items()}}


def hw_from_env() -> tuple[isa.HardwareParams, int, int]:
    """(hardware parameters, acc_depth, seed) passed by :func:`bench_env`."""
    raw = json.loads(os.environ[HW_ENV])
    acc = int(raw.pop("acc_depth"))
    return isa.HardwareParams(**raw), acc, int(os.environ.get(SEED_ENV, "1"))


# ================================================================================================
# Word packing (the contract's byte layouts, see gateware/buffers.py)
# ================================================================================================
def pack_inp(words: np.ndarray) -> list[int]:
    """INP words [n, C] int8 -> ints (lane i = byte i)."""
    return [int.from_bytes(np.asarray(w, dtype=np.int8).tobytes(), "little") for w in words]


def pack_wgt(words: np.ndarray) -> list[int]:
    """WGT words [n, C(co), C(ci)] int8 -> ints (byte co*C + ci)."""
    return [int.from_bytes(np.asarray(w, dtype=np.int8).reshape(-1).tobytes(), "little") for w in words]


def pack_prm(bias: np.ndarray, mult: np.ndarray, mult_neg: np.ndarray, shift: np.ndarray) -> list[int]:
    """PRM words from per-lane fields [n, C] (bias int32, M, M_neg uint16, S uint8; 9 bytes a lane)."""
    rec = np.zeros(np.shape(bias), dtype=[("bias", "<i4"), ("m", "<u2"), ("mneg", "<u2"), ("s", "u1")])
    rec["bias"], rec["m"], rec["mneg"], rec["s"] = bias, mult, mult_neg, shift
    return [int.from_bytes(row.tobytes(), "little") for row in rec]


def plane_words(rng: np.random.Generator, planes: np.ndarray, c: int, in_w: int, in_plane: int) -> np.ndarray:
    """INP words [n_blocks*in_plane, C] holding ``planes`` (channels, rows, cols), channel ch in
    block ch // C, lane ch % C, pixel (y, x) at word ``block*in_plane + y*in_w + x``. The words
    between rows and planes get random garbage (an engine that reads them gives wrong results)."""
    ch, rows, cols = planes.shape
    blocks = -(-ch // c)
    if cols > in_w or rows * in_w > in_plane:
        raise ValueError(f"planes {rows}x{cols} do not fit in_w={in_w}, in_plane={in_plane}")
    words = rng.integers(-128, 128, size=(blocks * in_plane, c)).astype(np.int8)
    full = rng.integers(-128, 128, size=(blocks * c, rows, cols)).astype(np.int8)
    full[:ch] = planes
    for b in range(blocks):
        for y in range(rows):
            row = b * in_plane + y * in_w
            words[row:row + cols] = full[b * c:(b + 1) * c, y, :].T
    return words


def random_cuts(rng: np.random.Generator, n: int) -> list[tuple[int, int]]:
    """Split 0..n into random, unequal consecutive ranges [lo, hi) (tiles of a random tiling)."""
    inner = rng.choice(np.arange(1, n), size=int(rng.integers(0, n)), replace=False) if n > 1 else []
    edges = [0, *sorted(int(v) for v in inner), n]
    return list(zip(edges, edges[1:]))


def unpack_out(word: int, c: int) -> np.ndarray:
    return np.frombuffer(int(word).to_bytes(c, "little"), dtype=np.int8).copy()


def insn_word(insn: isa.Instruction) -> int:
    return int.from_bytes(insn.encode(), "little")


# ================================================================================================
# cocotb driver
# ================================================================================================
@dataclass(frozen=True)
class OutWrite:
    cycle: int
    addr: int
    data: np.ndarray
    tag: int


@dataclass
class BlockBench:
    """Drives an :class:`EngineBench` from cocotb. Create with :meth:`start`."""

    dut: object
    hw: isa.HardwareParams
    acc_depth: int
    seed: int
    rng: random.Random
    prefix: str = ""  # of the engine bench's ports in the top level
    cycle: int = 0
    writes: list[OutWrite] = field(default_factory=list)
    mac_cycles: int = 0
    gap_prob: float = 0.5

    @classmethod
    async def start(cls, dut) -> "BlockBench":
        hw, acc, seed = hw_from_env()
        bench = cls(dut, hw, acc, seed, random.Random(seed), os.environ.get(PREFIX_ENV, ""))
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        bench.sig("insn__valid").value = 0
        bench.sig("insn__payload").value = 0
        for buf in ("inp", "wgt", "prm"):
            if bench.has(f"{buf}_w__en"):
                bench.sig(f"{buf}_w__en").value = 0
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        cocotb.start_soon(bench._monitor())
        return bench

    def sig(self, name: str):
        """The top-level port ``name`` of this engine's bench."""
        return getattr(self.dut, self.prefix + name)

    def has(self, name: str) -> bool:
        return hasattr(self.dut, self.prefix + name)

    def begin_case(self, case: int) -> np.random.Generator:
        """Start random case ``case``: returns its NumPy generator (derived from the bench seed)
        and draws how often instructions are offered after an idle gap (never: strictly back to
        back, sometimes, mostly)."""
        rng = np.random.default_rng([self.seed, case])
        self.gap_prob = float(rng.choice([0.0, 0.3, 0.7]))
        self.rng = random.Random(self.seed * 1_000_003 + case)  # the gaps: a case replays alone
        return rng

    @staticmethod
    def cases(default: int) -> range:
        """The case numbers to run: ``DLPROC_BENCH_CASES`` cases (default ``default``) from
        ``DLPROC_BENCH_FIRST_CASE`` (default 0), so that a failing case can be rerun alone."""
        first = int(os.environ.get(FIRST_CASE_ENV, "0"))
        return range(first, first + int(os.environ.get(CASES_ENV, str(default))))

    def where(self, case: int) -> str:
        return f"seed {self.seed} ({SEED_ENV}), case {case} ({FIRST_CASE_ENV})"

    async def _monitor(self) -> None:
        c = self.hw.c
        valid, addr, data, tag = (self.sig(f"out__{n}") for n in ("valid", "addr", "data", "tag"))
        keep = self.sig("out__keep") if self.has("out__keep") else None
        mac = self.sig("mac_active") if self.has("mac_active") else None
        every_lane = (1 << c) - 1
        while True:
            await RisingEdge(self.dut.clk)
            # Values read right after an edge are those the DUT presented at that edge.
            self.cycle += 1
            # An item that keeps every lane writes nothing (a CONV holding its partial sums).
            if int(valid.value) and not (keep is not None and int(keep.value) == every_lane):
                self.writes.append(OutWrite(self.cycle, int(addr.value), unpack_out(int(data.value), c),
                                            int(tag.value)))
            if mac is not None and int(mac.value):
                self.mac_cycles += 1

    async def load(self, buf: str, base: int, words: list[int]) -> None:
        """Write ``words`` into buffer ``buf`` ("inp", "wgt", "prm") from word ``base``, one per cycle."""
        depth = self.hw.depth(buf.upper())
        if base < 0 or base + len(words) > depth:
            raise ValueError(f"{buf} words {base}..{base + len(words) - 1} outside depth {depth}")
        en, addr, data = (self.sig(f"{buf}_w__{n}") for n in ("en", "addr", "data"))
        for k, word in enumerate(words):
            en.value, addr.value, data.value = 1, base + k, word
            await RisingEdge(self.dut.clk)
        en.value = 0

    async def run(self, insns: list[isa.Instruction], *, limit: int = 200_000) -> None:
        """Offer the instructions in order with random gaps; return when all are accepted and the
        engine is idle again. Fails on an engine error or after ``limit`` cycles."""
        clk = self.dut.clk
        valid, payload, ready, busy = (self.sig(n) for n in ("insn__valid", "insn__payload", "insn__ready", "busy"))
        start = self.cycle
        for insn in insns:
            insn.validate(self.hw)
            while self.rng.random() < self.gap_prob:  # random idle gap before offering it
                valid.value = 0
                await RisingEdge(clk)
            valid.value = 1
            payload.value = insn_word(insn)
            while True:
                await RisingEdge(clk)
                self._check_error(start, limit)
                if int(ready.value):
                    break
            valid.value = 0
        # Wait for the engine to go idle; the output stage adds its fixed latency after that.
        idle = 0
        while idle < 12:
            await RisingEdge(clk)
            self._check_error(start, limit)
            idle = idle + 1 if not int(busy.value) else 0

    def _check_error(self, start: int, limit: int) -> None:
        if int(self.sig("error").value):
            code = int(self.sig("error_code").value)
            raise AssertionError(f"engine stopped with error code {code} ({isa.ErrorCode(code).name})")
        if self.cycle - start > limit:
            raise AssertionError(f"instructions not done within {limit} cycles")

    def take_writes(self) -> list[OutWrite]:
        got, self.writes = self.writes, []
        return got


def check_writes(writes: list[OutWrite], expected: dict[int, np.ndarray], where: str,
                 last_words: dict[int, int] | None = None) -> None:
    """Every OUT write goes to an expected address exactly once with the expected word (bit-exact).

    ``expected`` maps OUT address -> int8[C] word. ``last_words`` maps the OUT address of each
    instruction's last word to its tag bits (push_prev | push_next << 1): that write must carry
    ``last`` and those flags, every other write ``last`` = 0.
    """
    seen: dict[int, OutWrite] = {}
    for w in writes:
        assert w.addr in expected, (f"{where}: unexpected OUT write to word {w.addr} (cycle {w.cycle}): "
                                    f"{w.data.tolist()}")
        assert w.addr not in seen, f"{where}: OUT word {w.addr} written twice (cycles {seen[w.addr].cycle}, {w.cycle})"
        seen[w.addr] = w
    missing = sorted(set(expected) - set(seen))
    assert not missing, f"{where}: {len(missing)} OUT words never written, first {missing[:8]}"
    bad = [a for a in sorted(expected) if not np.array_equal(seen[a].data, expected[a])]
    if bad:
        lines = [f"  word {a}: expected {expected[a].tolist()}, got {seen[a].data.tolist()}" for a in bad[:8]]
        raise AssertionError(f"{where}: {len(bad)} of {len(expected)} OUT words {MISMATCH}\n"
                             + "\n".join(lines))
    if last_words is not None:
        for a, w in seen.items():
            if a in last_words:
                want = 1 | (last_words[a] << 1)
                assert w.tag == want, f"{where}: last word {a} has tag {w.tag:#b}, expected {want:#b}"
            else:
                assert w.tag & 1 == 0, f"{where}: word {a} carries the last flag but is not an instruction's last"


def push_tag(insn: isa.Instruction) -> int:
    return int(insn.push_prev) | (int(insn.push_next) << 1)


def check_period(writes: list[OutWrite], order: list[int], period: int, where: str) -> None:
    """One instruction's OUT words were written in the sweep ``order`` (list of addresses), exactly
    ``period`` cycles apart (the engine's documented throughput)."""
    want = set(order)
    mine = sorted((w for w in writes if w.addr in want), key=lambda w: w.cycle)
    addrs = [w.addr for w in mine]
    assert addrs == order, f"{where}: words written in the order {addrs[:12]}..., expected {order[:12]}..."
    gaps = {b.cycle - a.cycle for a, b in zip(mine, mine[1:])}
    assert gaps <= {period}, f"{where}: words written {sorted(gaps)} cycles apart, expected {period}"


MISMATCH = "differ from the golden model"


def corrupt_one(expected: dict[int, np.ndarray], rng: np.random.Generator) -> None:
    """Flip the low bit of one lane of one expected word (the bench must then fail)."""
    addr = sorted(expected)[int(rng.integers(0, len(expected)))]
    word = np.array(expected[addr], dtype=np.int64)
    word[int(rng.integers(0, len(word)))] ^= 1
    expected[addr] = word


async def expect_mismatch(case) -> None:
    """Await a case run with :func:`corrupt_one` applied; it must fail with the golden-model
    mismatch message (and nothing else)."""
    try:
        await case
    except AssertionError as exc:
        if MISMATCH in str(exc):
            return
        raise
    raise AssertionError("the bench accepted an OUT word that differs from the (corrupted) expected value")
