"""What every planner produces and how it becomes instructions.

A planner turns a layer into *steps* (the loads one compute instruction needs, the instruction, and
where its result is stored) and a :class:`Plan` (buffer slots, loop order). :class:`Emitter` turns
steps into the token-synchronised instruction stream (double buffering, OUT ring), and
:func:`estimate_steps` is the small cost model the planners use to choose tile and group sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import channel_blocks

__all__ = [
    "PAD_MAX", "SIZE_MAX", "OUT_SLOTS_MAX", "StepLoad", "StepOp", "Step", "Plan", "Emitter",
    "emit_instructions", "chain_streams", "linear_loads", "estimate_steps", "steps_dma_bytes", "ConvAddrs",
    "ddr_model", "OP_OVERHEAD", "geometry_of", "require_block", "table_stream", "FcEmitter", "pixel_batch",
    "pixel_batch_steps",
]


PAD_MAX = 15  #: LOAD's pad fields are 4 bits


SIZE_MAX = 65535  #: LOAD/STORE x/y/z sizes and CONV out_h/out_w are 16 bits


OUT_SLOTS_MAX = 4  #: OUT ring length: more slack for the store unit than two halves give


@dataclass
class StepLoad:
    insn: isa.Load
    slot: tuple  #: buffer slot written; ("WGT", "res") style slots are never overwritten


@dataclass
class StepOp:
    compute: isa.Conv | isa.Pool
    #: None for a CONV that holds its partial sums (acc_keep) and for the FC tiles that share one
    #: STORE: such an op writes no OUT slot of the ring
    store: isa.Store | None
    cycles: int  #: estimated compute cycles


@dataclass
class Step:
    loads: list[StepLoad] = field(default_factory=list)
    ops: list[StepOp] = field(default_factory=list)
    reads: set = field(default_factory=set)  #: slots the ops read


@dataclass
class Plan:
    """How a layer was tiled (kept on the LayerProgram for docs, benchmarks and tests)."""

    kind: str
    tile: tuple[int, int]  #: output tile (th, tw)
    group: int  #: output blocks (conv) or channel blocks (pool) per step
    order: str  #: "tiles-outer" or "groups-outer"
    weights: str  #: "resident", "streamed" (two halves) or "none"
    steps: int
    out_slots: int
    estimated_cycles: int
    macs: int  #: true MACs of the layer (no padded lanes), for utilization
    dma_bytes: int  #: bytes the program moves on the bus (loads + stores)
    inp_slots: int = 2  #: 2 = INP double-buffered; 1 = the receptive field needs all of INP
    #: CONVs per output tile and block: > 1 when the reduction is split into a partial-sum chain
    #: (acc_keep ... acc_in) because one output block's weights or input do not fit the buffers
    chunks: int = 1
    #: how the layer runs when that is worth saying (the depthwise mode, or why a depthwise layer cannot use it)
    note: str = ""


#: Steps a step's loads may run ahead of the compute unit when no buffer reuse makes them wait
#: (a layer whose weights and inputs all fit, e.g. a 1x1 conv of 1280 output channels at 2x2 pixels):
#: each step's loads push an L2C token, and the counters are 8 bits (255), so after this many
#: steps a load waits for the compute of the step that many back anyway.
MAX_RUN_AHEAD = 64


def bounded_wait(steps: list, k: int, w: int) -> int:
    """Step ``k``'s load wait ``w`` (the last reader of a slot it overwrites, -1 for none),
    raised to step ``k - MAX_RUN_AHEAD`` when that is later and has compute to give the token."""
    ahead = k - MAX_RUN_AHEAD
    if ahead > w and steps[ahead].ops:
        return ahead
    return w


class Emitter:
    """Turns steps into an instruction stream with dependency tokens (see the module docstring)."""

    def __init__(self, steps: list[Step], out_slots: int):
        self.steps = steps
        self.out_slots = out_slots

    def tokens(self) -> None:
        steps = self.steps
        # Which step each step's loads must wait for: the last reader of any slot they overwrite.
        last_reader: dict[tuple, int] = {}
        waits: list[int] = []
        for k, st in enumerate(steps):
            w = -1
            for ld in st.loads:
                w = max(w, last_reader.get(ld.slot, -1))
            if w >= k:
                raise AssertionError("a load would wait for its own step")  # planner bug
            waits.append(bounded_wait(steps, k, w))
            for slot in st.reads:
                last_reader[slot] = k
        popped = -1
        c2l_push = set()
        for st in steps:  # assign every flag, so that emitting a schedule twice gives the same stream
            for ld in st.loads:
                ld.insn.pop_next = ld.insn.push_next = False
        for k, st in enumerate(steps):
            if st.loads:
                first, last = st.loads[0].insn, st.loads[-1].insn
                if waits[k] > popped:
                    first.pop_next = True
                    c2l_push.add(waits[k])
                    popped = waits[k]
                last.push_next = True
        # i counts the ops that write an OUT slot of the ring; an op without a STORE (a CONV that
        # holds its partial sums) neither waits for nor gives the store unit a token.
        n_ops = sum(op.store is not None for st in steps for op in st.ops)
        i = 0
        r = self.out_slots
        for k, st in enumerate(steps):
            for j, op in enumerate(st.ops):
                op.compute.pop_prev = bool(st.loads) and j == 0
                op.compute.push_prev = (j == len(st.ops) - 1) and k in c2l_push
                if op.store is None:
                    op.compute.pop_next = op.compute.push_next = False
                    continue
                op.compute.pop_next = i >= r
                op.compute.push_next = True
                op.store.pop_prev = True
                op.store.push_prev = i + r < n_ops
                i += 1

    def stream(self, mark_index: int | None, finish: bool = True) -> list[isa.Instruction]:
        """Program order: L0, then per step k: L(k+1), (CONV, STORE)*; MARK; FINISH."""
        self.tokens()
        out: list[isa.Instruction] = [ld.insn for ld in self.steps[0].loads] if self.steps else []
        for k, st in enumerate(self.steps):
            if k + 1 < len(self.steps):
                out.extend(ld.insn for ld in self.steps[k + 1].loads)
            for op in st.ops:
                out.append(op.compute)
                if op.store is not None:
                    out.append(op.store)
        if mark_index is not None:
            out.append(isa.Mark(index=mark_index))
        if finish:
            out.append(isa.Finish())
        return out


def emit_instructions(steps: list[Step], plan: Plan, *, mark_index: int | None = 0,
                      finish: bool = True) -> list[isa.Instruction]:
    """The instruction stream of a planned layer (``plan_conv`` / ``plan_pool``), tokens included.

    The token counters are balanced (all zero) at the end of the stream. Concatenating two layers'
    streams is *not* safe as is: the second layer's first loads neither wait for the first layer's
    last stores (its input) nor for its last CONVs (the INP halves); :func:`chain_streams` puts a
    barrier there, the compiler's linker (``dlproc.compiler.program``) only the tokens the second
    layer's accesses need (see docs/programs.md)."""
    emitter = FcEmitter if plan.kind == "fc" else Emitter  # FC: one STORE for the whole output
    return emitter(steps, plan.out_slots).stream(mark_index, finish)


def chain_streams(geom: Geometry, streams: list[list[isa.Instruction]]) -> list[isa.Instruction]:
    """Join per-layer streams (from :func:`emit_instructions` with ``finish=False``) into one
    program, with a barrier between consecutive layers, and append FINISH.

    The barrier is a one-word MAX POOL (the ISA has no NOP): it pops the S2C token that the
    previous layer's last STORE now pushes -- so every store of that layer, and therefore the
    next layer's input, is in DRAM -- and pushes a C2L token that the next layer's first LOAD
    pops. Its output word (the last OUT word) is overwritten before any STORE reads it."""
    out: list[isa.Instruction] = []
    for n, stream in enumerate(streams):
        stream = list(stream)
        if n > 0:
            first_load = next((i for i in stream if isinstance(i, isa.Load)), None)
            if first_load is None or first_load.pop_next:
                raise CompileError("chain_streams: a layer stream must start its loads without a C2L wait")
            first_load.pop_next = True
        if n + 1 < len(streams):
            last_store = next((i for i in reversed(stream) if isinstance(i, isa.Store)), None)
            if last_store is None or last_store.push_prev:
                raise CompileError("chain_streams: a layer stream must end with a STORE that gives no S2C token")
            last_store.push_prev = True
            stream.append(isa.Pool(inp_base=0, out_base=geom.depth("OUT") - 1, in_w=1, in_plane=1,
                                   mode=isa.PoolMode.MAX, pop_next=True, push_prev=True))
        out.extend(stream)
    out.append(isa.Finish())
    return out


def linear_loads(buf: int, sram_base: int, dram_addr: int, n: int, pitch: int) -> list[isa.Load]:
    """LOADs of n consecutive elements: rows of up to SIZE_MAX elements, then the remainder."""
    loads = []
    rows, rest = divmod(n, SIZE_MAX)
    if rows:
        loads.append(isa.Load(buf=buf, sram_base=sram_base, dram_addr=dram_addr, x_size=SIZE_MAX, y_size=rows,
                              y_stride=SIZE_MAX))
    if rest:
        loads.append(isa.Load(buf=buf, sram_base=sram_base + rows * SIZE_MAX,
                              dram_addr=dram_addr + rows * SIZE_MAX * pitch, x_size=rest))
    return loads


def estimate_steps(geom: Geometry, steps: list[Step], out_slots: int, bw: float, latency: int) -> int:
    """Cycles of the schedule under a simple model: LOAD/STORE cost latency + beats*B/bw, ops the
    estimated compute cycles, the units in order with the program's token waits (bus sharing
    between load and store is ignored). Used to choose among tilings, and printed by benchmarks."""
    pitch = {buf: geom.pitch(buf) / bw for buf in ("INP", "WGT", "PRM", "OUT")}
    names = {int(b): b.name for b in isa.Buf}

    def dma(insn: isa.Load | isa.Store, buf: str) -> float:
        return latency + insn.x_size * insn.y_size * insn.z_size * pitch[buf]

    last_reader: dict[tuple, int] = {}
    step_end: list[float] = []
    load_t = comp_t = store_t = 0.0
    store_done: list[float] = []
    i = 0
    for k, st in enumerate(steps):
        w = -1
        for ld in st.loads:
            w = max(w, last_reader.get(ld.slot, -1))
        start = max(load_t, step_end[w] if w >= 0 else 0.0)
        load_t = start + sum(dma(ld.insn, names[ld.insn.buf]) for ld in st.loads)
        t = max(comp_t, load_t if st.loads else 0.0)
        for op in st.ops:
            if op.store is None:  # holds its partial sums: no OUT slot, no STORE
                t += op.cycles
                continue
            if i >= out_slots:
                t = max(t, store_done[i - out_slots])
            t += op.cycles
            s0 = max(store_t, t)
            store_t = s0 + dma(op.store, "OUT")
            store_done.append(store_t)
            i += 1
        comp_t = t
        step_end.append(t)
        for slot in st.reads:
            last_reader[slot] = k
    return int(max(comp_t, store_t))


def steps_dma_bytes(geom: Geometry, steps: list[Step]) -> int:
    total = 0
    for st in steps:
        for ld in st.loads:
            total += ld.insn.x_size * ld.insn.y_size * ld.insn.z_size * geom.pitch(ld.insn.buf_name)
        for op in st.ops:
            if op.store is not None:
                total += op.store.x_size * op.store.y_size * op.store.z_size * geom.pitch("OUT")
    return total


@dataclass(frozen=True)
class ConvAddrs:
    """DRAM byte addresses a layer program reads and writes (all multiples of B); pools use
    ``inp``, ``prm`` (average pools) and ``out``."""

    inp: int
    wgt: int
    prm: int
    out: int


def ddr_model(config: Any, geom: Geometry) -> tuple[float, int]:
    bw = float(getattr(config, "ddr_bytes_per_cycle", geom.bus_bytes) or geom.bus_bytes) if config else geom.bus_bytes
    lat = int(getattr(config, "ddr_latency_cycles", 40) or 0) if config else 40
    return bw, lat


# Fixed cost of one CONV/POOL in the compute unit (decode, pipeline fill, requantize drain), only
# used by the cost model to prefer fewer, larger instructions.
OP_OVERHEAD = 16



def pixel_batch(geom: Geometry, what: str, shape: tuple[int, int, int]) -> tuple[int, int]:
    """(channel blocks, most pixels per batch) of a per-pixel channel operation (LRN, softmax):
    a batch's channel blocks must fit half of INP (the other half is loading) and half of OUT."""
    ch, h, w = shape
    nb = channel_blocks(ch, geom.c)
    half, out_cap = geom.depth("INP") // 2, geom.depth("OUT") // 2
    n = min(h * w, half // nb, out_cap // nb, SIZE_MAX)
    if n < 1:
        raise CompileError(f"{what} over {ch} channels: one pixel's {nb} channel blocks do not fit an INP half "
                           f"({half} words) and half of OUT ({out_cap} words)")
    return nb, n


def pixel_batch_steps(geom: Geometry, shape: tuple[int, int, int], addrs: ConvAddrs, nb: int, n: int,
                      op: Callable[[int, int, int], isa.Instruction],
                      cycles: Callable[[int], int]) -> tuple[list[Step], int]:
    """Steps of a per-pixel channel operation in batches of ``n`` pixels: LOAD the batch's channel
    blocks into an INP half (alternating, so the next batch loads while this one runs), run
    ``op(inp_base, out_base, pixels)`` into an OUT slot of the ring, STORE it. ``cycles(pixels)``
    is the operation's compute time for the cost model. Returns the steps and the ring length."""
    ch, h, w = shape
    half = geom.depth("INP") // 2
    out_words = n * nb
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // out_words)
    pin, po = geom.pitch("INP"), geom.pitch("OUT")
    steps = []
    for k, p0 in enumerate(range(0, h * w, n)):
        cnt = min(n, h * w - p0)
        slot = k % 2
        st = Step()
        st.loads.append(StepLoad(isa.Load(buf=isa.Buf.INP, sram_base=slot * half, dram_addr=addrs.inp + p0 * pin,
                                       x_size=cnt, z_size=nb, z_stride=h * w), ("INP", slot)))
        st.reads.add(("INP", slot))
        out_base = (k % out_slots) * out_words
        store = isa.Store(sram_base=out_base, dram_addr=addrs.out + p0 * po, x_size=cnt, z_size=nb, z_stride=h * w)
        st.ops.append(StepOp(op(slot * half, out_base, cnt), store, cycles(cnt) + OP_OVERHEAD))
        steps.append(st)
    return steps, out_slots

def geometry_of(config: Any) -> Geometry:
    return config if isinstance(config, Geometry) else Geometry.from_config(config)


def require_block(geom: Geometry, opcode: isa.Opcode) -> None:
    if not geom.hw.has_block(opcode):
        _, module, prop = isa.OPTIONAL_BLOCKS[opcode]
        raise CompileError(f"{opcode.name} needs a block this processor is generated without; "
                           f"turn on {module}.{prop}")


def table_stream(geom: Geometry, table_addr: int, words: int,
                  make: Callable[[int, int, bool], isa.Instruction]) -> list[isa.Instruction]:
    """LOAD PRM / table-copy pairs, one PRM-full at a time, serialised by tokens as in
    :func:`lrn_table_stream`; ``make(tab_base, count, push_prev)`` builds the copy instruction."""
    depth, pp = geom.depth("PRM"), geom.pitch("PRM")
    out: list[isa.Instruction] = []
    starts = list(range(0, words, depth))
    for k, w0 in enumerate(starts):
        n = min(depth, words - w0)
        loads = linear_loads(isa.Buf.PRM, 0, table_addr + w0 * pp, n, pp)
        loads[0].pop_next = k > 0
        loads[-1].push_next = True
        out.extend(loads)
        out.append(make(w0 * geom.c, n, k + 1 < len(starts)))
    return out


class FcEmitter(Emitter):
    """Tokens and order of an FC layer whose intermediate tiles have no STORE (``op.store`` None):
    the loads' C2L waits as for every layer; each FC pops L2C for its step's loads and never waits
    for a STORE (every tile writes its own OUT words); only the FC before the STORE pushes C2S."""

    def tokens(self) -> None:
        steps = self.steps
        last_reader: dict[tuple, int] = {}
        waits: list[int] = []
        for k, st in enumerate(steps):
            w = max((last_reader.get(ld.slot, -1) for ld in st.loads), default=-1)
            waits.append(bounded_wait(steps, k, w))
            for slot in st.reads:
                last_reader[slot] = k
        popped, c2l_push = -1, set()
        for k, st in enumerate(steps):
            for ld in st.loads:
                ld.insn.pop_next = ld.insn.push_next = False
            if st.loads:
                if waits[k] > popped:
                    st.loads[0].insn.pop_next = True
                    c2l_push.add(waits[k])
                    popped = waits[k]
                st.loads[-1].insn.push_next = True
        for k, st in enumerate(steps):
            for j, op in enumerate(st.ops):
                op.compute.pop_prev = bool(st.loads) and j == 0
                op.compute.pop_next = False
                op.compute.push_next = op.store is not None
                op.compute.push_prev = (j == len(st.ops) - 1) and k in c2l_push
                if op.store is not None:
                    op.store.pop_prev, op.store.push_prev = True, False

    def stream(self, mark_index: int | None, finish: bool = True) -> list[isa.Instruction]:
        if all(op.store is not None for st in self.steps for op in st.ops):
            # Every tile stores (the output does not fit OUT): the OUT ring is reused, so the
            # general tokens apply, STOREs giving S2C back to the FCs that overwrite their slot.
            # (Not ``super().stream``: it would call this class's ``tokens``.)
            return Emitter(self.steps, self.out_slots).stream(mark_index, finish)
        self.tokens()
        out: list[isa.Instruction] = [ld.insn for ld in self.steps[0].loads] if self.steps else []
        for k, st in enumerate(self.steps):
            if k + 1 < len(self.steps):
                out.extend(ld.insn for ld in self.steps[k + 1].loads)
            for op in st.ops:
                out.append(op.compute)
                if op.store is not None:
                    out.append(op.store)
        if mark_index is not None:
            out.append(isa.Mark(index=mark_index))
        if finish:
            out.append(isa.Finish())
        return out
