"""Layer-program builder: one conv or pool layer -> a complete, runnable dlproc program.

The optional blocks have builders too (``build_add_program``, ``build_upsample_program``,
``build_lrn_program``, ``build_softmax_program`` with their ``plan_*`` and table-stream helpers;
``docs/programs.md``, "Optional-block layers"), and so has the FC engine (``build_fc_program``,
``plan_fc``).
Transposed convolutions are sub-pixel phases of ordinary convolutions with scattered STOREs
(``build_convtranspose_program``, ``plan_convtranspose``; ``docs/programs.md``, "Transposed
convolution").

Given a processor configuration, one layer's integer parameters and an int8 input tensor, the
builder produces everything the processor needs in DRAM -- the input, weight and parameter images
in the contract's layout, the instruction stream -- plus where the output lands and how to decode
it. Tests and benchmarks use it to exercise the hardware (and the ISA-level simulator) before the
network compiler exists; the compiler reuses :func:`plan_conv` / :func:`plan_pool`, which only
need DRAM addresses.

How a layer becomes a program (``docs/programs.md`` has the full story):

* **Layout.** A tensor (C, H, W) is stored as channel blocks of C lanes: element (cb, y, x) is one
  buffer word (C int8 lanes) at ``base + ((cb*H + y)*W + x) * pitch``, ``pitch`` = the word size
  rounded up to bus beats. Weights are stored per output block in the order CONV reads them
  (input block, ky, kx), one C x C word each; parameters are one PRM word per output block.
* **Tiling.** The output is cut into tiles of th x tw pixels (one CONV computes one output block
  of one tile, so a tile must fit the accumulator and an OUT slot); the input tile is the output
  tile's receptive field, halo included. Output blocks are grouped so that a group's weights fit
  a WGT slot. A small cost model (:func:`_estimate`) picks the tile size, the group size and the
  loop order (tiles outer: input loaded once, weights once per tile unless resident; groups outer:
  weights loaded once, input once per group).
* **Padding** is inserted by LOAD's pad fields where a tile touches the border, with
  ``pad_value = zp_in`` for conv and average pool and -128 for max pool.
* **Double buffering and tokens.** INP and (streamed) WGT/PRM alternate between the two halves of
  their buffer, OUT between up to four slots. Every step's loads wait (C2L) exactly for the step
  that last read the slot they overwrite, every CONV waits (L2C) for its step's loads and (S2C)
  for the STORE that drained its OUT slot, every STORE waits (C2S) for its CONV. The stream is
  emitted with every token producer before its consumer, so it cannot deadlock for any queue
  depth, and the loads of step k+1 come before the CONVs of step k so that they overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.estimate.performance import pool_plane_cycles
from dlproc.targets.isasim import Geometry, Machine, RunResult

__all__ = [
    "ConvLayer",
    "PoolLayer",
    "LayerProgram",
    "Region",
    "Plan",
    "build_layer_program",
    "build_conv_program",
    "build_pool_program",
    "plan_conv",
    "plan_pool",
    "emit_instructions",
    "chain_streams",
    "ConvAddrs",
    "pack_input",
    "unpack_output",
    "pack_conv_weights",
    "pack_conv_params",
    "run_on_isasim",
    "AddLayer",
    "UpsampleLayer",
    "plan_add",
    "plan_upsample",
    "build_add_program",
    "build_upsample_program",
    "LrnLayer",
    "plan_lrn",
    "pack_lrn_table",
    "lrn_table_stream",
    "lrn_table_cycles",
    "build_lrn_program",
    "SoftmaxLayer",
    "plan_softmax",
    "build_softmax_program",
    "pack_softmax_table",
    "softmax_table_stream",
    "FcLayer",
    "plan_fc",
    "pack_fc_weights",
    "pack_fc_params",
    "fc_weight_matrix",
    "fc_out_shape",
    "build_fc_program",
]

PAD_MAX = 15  #: LOAD's pad fields are 4 bits
SIZE_MAX = 65535  #: LOAD/STORE x/y/z sizes and CONV out_h/out_w are 16 bits
OUT_SLOTS_MAX = 4  #: OUT ring length: more slack for the store unit than two halves give


# --------------------------------------------------------------------------------------------
# Layer descriptions (integer parameters, as the quantizer produces them)
# --------------------------------------------------------------------------------------------
def _pair(v: int | Sequence[int], name: str) -> tuple[int, int]:
    t = (int(v), int(v)) if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < 1:
        raise CompileError(f"{name} must be a positive int or (y, x) pair, got {v!r}")
    return t  # type: ignore[return-value]


def _pads(v: int | Sequence[int]) -> tuple[int, int, int, int]:
    t = (int(v),) * 4 if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) == 2:
        t = (t[0], t[1], t[0], t[1])
    if len(t) != 4 or min(t) < 0:
        raise CompileError(f"pads must be (top, left, bottom, right) >= 0, got {v!r}")
    return t  # type: ignore[return-value]


@dataclass
class ConvLayer:
    """A quantized convolution. ``bias`` is the *unfolded* int32 bias (as ``golden.ops.conv2d``
    takes it); the builder folds ``-zp_in * sum(w)`` into it, because the MAC array never
    subtracts the input zero point. ``mult``/``shift``/``mult_neg`` are per output channel."""

    weight: np.ndarray  #: int8 (Co, Ci/groups, kh, kw)
    bias: np.ndarray  #: int32 (Co,)
    mult: np.ndarray  #: (Co,) M, 0 <= M < 2**15
    shift: np.ndarray  #: (Co,) S, 0 <= S <= 46
    mult_neg: np.ndarray | None = None  #: (Co,) M for negative accumulators (leaky ReLU); None = mult
    zp_in: int = 0
    zp_out: int = 0
    act_min: int = -128
    act_max: int = 127
    stride: int | tuple[int, int] = 1
    pads: int | tuple[int, ...] = 0  #: (top, left, bottom, right)
    dilation: int | tuple[int, int] = 1
    groups: int = 1


@dataclass
class PoolLayer:
    """A quantized pool: ``kind`` is "max", "avg" or "global_avg". Average pools take one
    (mult, shift) for the divisor kh*kw, or -- for ``count_include_pad=False`` over padding -- the
    per-window (Ho, Wo) arrays of ``golden.ops.avgpool_multipliers`` (one POOL per rectangle of
    equal divisor then)."""

    kind: str
    kernel: int | tuple[int, int] = 1
    stride: int | tuple[int, int] = 1
    pads: int | tuple[int, ...] = 0
    zp_in: int = 0
    zp_out: int = 0
    mult: int | np.ndarray = 1
    shift: int | np.ndarray = 0
    act_min: int = -128
    act_max: int = 127
    count_include_pad: bool = True


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Region:
    """A named DRAM region (absolute byte address)."""

    name: str
    addr: int
    size: int


@dataclass
class LayerProgram:
    """A runnable single-layer program: write ``image`` to DRAM at ``dram_base``, start the
    processor with INSN_BASE/INSN_COUNT/DMA_BASE/DMA_LIMIT, then decode the output region."""

    geometry: Geometry
    image: bytes  #: DRAM contents of [dram_base, dma_limit), instructions included
    dram_base: int
    insn_base: int
    insn_count: int
    dma_base: int
    dma_limit: int
    regions: dict[str, Region]
    output_shape: tuple[int, int, int]  #: (Co, Ho, Wo)
    instructions: list[isa.Instruction]
    plan: "Plan"

    @property
    def output_addr(self) -> int:
        return self.regions["output"].addr

    @property
    def output_bytes(self) -> int:
        return self.regions["output"].size

    @property
    def program_bytes(self) -> bytes:
        return isa.encode_program(self.instructions)

    def read_output(self, dram: bytes | bytearray | np.ndarray, base: int = 0) -> np.ndarray:
        """Decode the int8 (Co, Ho, Wo) output from DRAM bytes whose byte 0 is address ``base``
        (pass ``base=output_addr`` with just the output region, 0 with the whole DRAM)."""
        data = np.frombuffer(bytes(dram), dtype=np.uint8) if not isinstance(dram, np.ndarray) else dram
        lo = self.output_addr - base
        if lo < 0 or lo + self.output_bytes > data.size:
            raise CompileError(
                f"read_output: the output region [{self.output_addr:#x}, {self.output_addr + self.output_bytes:#x}) "
                f"is not inside the {data.size} bytes given from address {base:#x}")
        return unpack_output(self.geometry, data[lo:lo + self.output_bytes], self.output_shape)


# --------------------------------------------------------------------------------------------
# DRAM packing
# --------------------------------------------------------------------------------------------
def _blocks(n: int, c: int) -> int:
    return -(-n // c)


def pack_input(geom: Geometry, x: np.ndarray) -> bytes:
    """int8 (C, H, W) -> channel-block layout; lanes beyond C and the beat tail are zero."""
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 3:
        raise CompileError(f"layer input must be an int8 (C, H, W) array, got {x.dtype} {x.shape}")
    c = geom.c
    ch, h, w = x.shape
    nb = _blocks(ch, c)
    pitch = geom.pitch("INP")
    arr = np.zeros((nb, h, w, pitch), dtype=np.uint8)
    padded = np.zeros((nb * c, h, w), dtype=np.int8)
    padded[:ch] = x
    arr[..., :c] = padded.reshape(nb, c, h, w).transpose(0, 2, 3, 1).view(np.uint8)
    return arr.tobytes()


def unpack_output(geom: Geometry, data: np.ndarray | bytes, shape: tuple[int, int, int]) -> np.ndarray:
    """Inverse of :func:`pack_input` for an OUT-layout tensor of ``shape`` (C, H, W)."""
    c = geom.c
    ch, h, w = shape
    nb = _blocks(ch, c)
    pitch = geom.pitch("OUT")
    arr = np.frombuffer(bytes(data), dtype=np.uint8)[: nb * h * w * pitch].reshape(nb, h, w, pitch)
    lanes = arr[..., :c].view(np.int8)  # (nb, h, w, c)
    return np.ascontiguousarray(lanes.transpose(0, 3, 1, 2).reshape(nb * c, h, w)[:ch])


@dataclass(frozen=True)
class _ConvShape:
    ci: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dil: tuple[int, int]
    groups: int
    ho: int
    wo: int


def _conv_shape(layer: ConvLayer, in_shape: tuple[int, int, int]) -> _ConvShape:
    w = np.asarray(layer.weight)
    if w.dtype != np.int8 or w.ndim != 4:
        raise CompileError(f"conv weight must be int8 (Co, Ci/groups, kh, kw), got {w.dtype} {w.shape}")
    ci, h, wd = in_shape
    co, cig, kh, kw = w.shape
    g = int(layer.groups)
    if g < 1 or ci % g or co % g or cig != ci // g:
        raise CompileError(f"conv groups={g} does not fit input channels {ci}, output channels {co} and "
                           f"weight shape {w.shape} (need Ci and Co divisible by groups, weight dim 1 = Ci/groups)")
    stride, dil, pads = _pair(layer.stride, "stride"), _pair(layer.dilation, "dilation"), _pads(layer.pads)
    if not (1 <= kh <= 31 and 1 <= kw <= 31):
        raise CompileError(f"conv kernel {kh}x{kw}: the CONV instruction allows 1..31 per side")
    if max(stride) > 7 or max(dil) > 7:
        raise CompileError(f"conv stride {stride} / dilation {dil}: the CONV instruction allows 1..7")
    if max(pads) > PAD_MAX:
        raise CompileError(f"conv pads {pads}: LOAD inserts at most {PAD_MAX} padding rows/columns per side")
    ho = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // stride[0] + 1
    wo = (wd + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) // stride[1] + 1
    if ho < 1 or wo < 1:
        raise CompileError(f"conv kernel {kh}x{kw} (dilation {dil}) does not fit the padded input {h}x{wd} "
                           f"with pads {pads}")
    return _ConvShape(ci, h, wd, co, kh, kw, stride, pads, dil, g, ho, wo)


def _ob_input_blocks(s: _ConvShape, c: int) -> list[tuple[int, int]]:
    """For each output block: the range [lo, hi) of input blocks its channels' groups read.

    Grouped convolutions are mapped onto the dense C x C array by zeroing the weights between
    different groups; an output block straddling groups reads the union of their input blocks."""
    cig, cog = s.ci // s.groups, s.co // s.groups
    ranges = []
    for ob in range(_blocks(s.co, c)):
        co_lo, co_hi = ob * c, min(s.co, ob * c + c) - 1
        g_lo, g_hi = co_lo // cog, co_hi // cog
        ranges.append((g_lo * cig // c, _blocks((g_hi + 1) * cig, c)))
    return ranges


def pack_conv_weights(geom: Geometry, layer: ConvLayer, s: _ConvShape) -> tuple[bytes, list[int]]:
    """Weight image: per output block, words (cb, ky, kx) of C x C [co][ci]; returns the image and
    each block's first word (in words, relative to the image)."""
    c = geom.c
    w = np.asarray(layer.weight)
    cig, cog = s.ci // s.groups, s.co // s.groups
    ranges = _ob_input_blocks(s, c)
    pitch = geom.pitch("WGT")
    starts, chunks = [], []
    total = 0
    for ob, (lo, hi) in enumerate(ranges):
        nb = hi - lo
        words = np.zeros((nb, s.kh, s.kw, c, c), dtype=np.int8)  # [cb][ky][kx][co][ci]
        for lane in range(c):
            co = ob * c + lane
            if co >= s.co:
                break
            g = co // cog
            ci_lo = g * cig
            # Input channels of this output channel's group, placed at their block/lane.
            for k in range(cig):
                ci = ci_lo + k
                cb, ci_lane = divmod(ci, c)
                words[cb - lo, :, :, lane, ci_lane] = w[co, k]
        starts.append(total)
        total += nb * s.kh * s.kw
        buf = np.zeros((nb * s.kh * s.kw, pitch), dtype=np.uint8)
        buf[:, : c * c] = words.reshape(-1, c * c).view(np.uint8)
        chunks.append(buf.tobytes())
    return b"".join(chunks), starts


def _prm_word(geom: Geometry, bias: np.ndarray, mult: np.ndarray, mneg: np.ndarray, shift: np.ndarray) -> bytes:
    """One PRM word: per lane bias int32 LE, M uint16, M_neg uint16, S uint8 (9 bytes per lane)."""
    c = geom.c
    rec = np.zeros(c, dtype=[("bias", "<i4"), ("m", "<u2"), ("mneg", "<u2"), ("s", "u1")])
    n = len(bias)
    rec["bias"][:n], rec["m"][:n], rec["mneg"][:n], rec["s"][:n] = bias, mult, mneg, shift
    out = np.zeros(geom.pitch("PRM"), dtype=np.uint8)
    out[: 9 * c] = np.frombuffer(rec.tobytes(), dtype=np.uint8)
    return out.tobytes()


def _check_requant(mult: np.ndarray, mneg: np.ndarray, shift: np.ndarray, what: str) -> None:
    from dlproc.hardware.numerics import MAX_SHIFT, MULT_BITS
    for name, arr, hi in (("mult", mult, (1 << MULT_BITS) - 1), ("mult_neg", mneg, (1 << MULT_BITS) - 1),
                          ("shift", shift, MAX_SHIFT)):
        if (arr < 0).any() or (arr > hi).any():
            raise CompileError(f"{what}: {name} must be in 0..{hi}, got range {arr.min()}..{arr.max()}")


def _pack_weighted_params(geom: Geometry, layer: Any, co: int, what: str) -> bytes:
    """PRM image of a weighted layer (conv or fc: ``weight`` with output channels first, ``bias``,
    ``mult``/``shift``/``mult_neg``, ``zp_in``): one word per block of C outputs with the bias with
    ``-zp_in * sum(w)`` folded in and the requantization parameters."""
    from dlproc.targets.golden.ops import fold_zero_point
    c = geom.c
    bias = np.asarray(layer.bias, dtype=np.int64).reshape(-1)
    mult = np.broadcast_to(np.asarray(layer.mult, dtype=np.int64), (co,))
    shift = np.broadcast_to(np.asarray(layer.shift, dtype=np.int64), (co,))
    mneg = mult if layer.mult_neg is None else np.broadcast_to(np.asarray(layer.mult_neg, dtype=np.int64), (co,))
    if bias.shape != (co,):
        raise CompileError(f"{what} bias must have shape ({co},), got {bias.shape}")
    _check_requant(mult, mneg, shift, f"{what} requantization")
    folded = fold_zero_point(bias, np.asarray(layer.weight), int(layer.zp_in)).astype(np.int64)
    words = []
    for ob in range(_blocks(co, c)):
        sl = slice(ob * c, min(co, ob * c + c))
        words.append(_prm_word(geom, folded[sl], mult[sl], mneg[sl], shift[sl]))
    return b"".join(words)


def pack_conv_params(geom: Geometry, layer: ConvLayer, s: _ConvShape) -> bytes:
    """PRM image: one word per output block with the folded bias and the requantization params."""
    return _pack_weighted_params(geom, layer, s.co, "conv")


# --------------------------------------------------------------------------------------------
# Schedules: steps of (loads, compute ops) with explicit buffer slots
# --------------------------------------------------------------------------------------------
@dataclass
class _Load:
    insn: isa.Load
    slot: tuple  #: buffer slot written; ("WGT", "res") style slots are never overwritten


@dataclass
class _Op:
    compute: isa.Conv | isa.Pool
    store: isa.Store
    cycles: int  #: estimated compute cycles


@dataclass
class _Step:
    loads: list[_Load] = field(default_factory=list)
    ops: list[_Op] = field(default_factory=list)
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


class _Emitter:
    """Turns steps into an instruction stream with dependency tokens (see the module docstring)."""

    def __init__(self, steps: list[_Step], out_slots: int):
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
            waits.append(w)
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
        n_ops = sum(len(st.ops) for st in steps)
        i = 0
        r = self.out_slots
        for k, st in enumerate(steps):
            for j, op in enumerate(st.ops):
                op.compute.pop_prev = bool(st.loads) and j == 0
                op.compute.pop_next = i >= r
                op.compute.push_next = True
                op.compute.push_prev = (j == len(st.ops) - 1) and k in c2l_push
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
                out.append(op.store)
        if mark_index is not None:
            out.append(isa.Mark(index=mark_index))
        if finish:
            out.append(isa.Finish())
        return out


def emit_instructions(steps: list[_Step], plan: Plan, *, mark_index: int | None = 0,
                      finish: bool = True) -> list[isa.Instruction]:
    """The instruction stream of a planned layer (``plan_conv`` / ``plan_pool``), tokens included.

    The token counters are balanced (all zero) at the end of the stream. Concatenating two layers'
    streams is *not* safe as is: the second layer's first loads neither wait for the first layer's
    last stores (its input) nor for its last CONVs (the INP halves); :func:`chain_streams` puts a
    barrier there, the compiler's linker (``dlproc.compiler.program``) only the tokens the second
    layer's accesses need (see docs/programs.md)."""
    emitter = _FcEmitter if plan.kind == "fc" else _Emitter  # FC: one STORE for the whole output
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


def _linear_loads(buf: int, sram_base: int, dram_addr: int, n: int, pitch: int) -> list[isa.Load]:
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


def _estimate(geom: Geometry, steps: list[_Step], out_slots: int, bw: float, latency: int) -> int:
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


def _dma_bytes(geom: Geometry, steps: list[_Step]) -> int:
    total = 0
    for st in steps:
        for ld in st.loads:
            total += ld.insn.x_size * ld.insn.y_size * ld.insn.z_size * geom.pitch(ld.insn.buf_name)
        for op in st.ops:
            total += op.store.x_size * op.store.y_size * op.store.z_size * geom.pitch("OUT")
    return total


# --------------------------------------------------------------------------------------------
# Spatial tiles
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Tile:
    r0: int
    th: int
    c0: int
    tw: int
    # input window in unpadded input coordinates and the pads LOAD inserts
    y0: int
    ny: int
    x0: int
    nx: int
    pt: int
    pb: int
    pl: int
    pr: int

    @property
    def hp(self) -> int:
        return self.ny + self.pt + self.pb

    @property
    def wp(self) -> int:
        return self.nx + self.pl + self.pr


def _axis_window(o0: int, n: int, stride: int, k: int, dil: int, pad: int, size: int) -> tuple[int, int, int, int]:
    """Input rows [lo, lo+count) and pads (before, after) for outputs o0..o0+n-1 along one axis."""
    first = o0 * stride - pad
    last = (o0 + n - 1) * stride + (k - 1) * dil - pad
    lo, hi = max(first, 0), min(last, size - 1)
    return lo, hi - lo + 1, lo - first, last - hi


def _tiles(ho: int, wo: int, th: int, tw: int, k: tuple[int, int], stride: tuple[int, int], dil: tuple[int, int],
           pads: tuple[int, int, int, int], h: int, w: int) -> list[_Tile]:
    tiles = []
    for r0 in range(0, ho, th):
        n_r = min(th, ho - r0)
        y0, ny, pt, pb = _axis_window(r0, n_r, stride[0], k[0], dil[0], pads[0], h)
        for c0 in range(0, wo, tw):
            n_c = min(tw, wo - c0)
            x0, nx, pl, pr = _axis_window(c0, n_c, stride[1], k[1], dil[1], pads[1], w)
            if ny < 1 or nx < 1:
                raise CompileError(
                    f"output tile at ({r0}, {c0}) reads only padding (pads {pads} are too large for the "
                    f"{h}x{w} input); LOAD cannot produce an all-padding block")
            tiles.append(_Tile(r0, n_r, c0, n_c, y0, ny, x0, nx, pt, pb, pl, pr))
    return tiles


def _extent(n: int, stride: int, k: int, dil: int) -> int:
    return (n - 1) * stride + (k - 1) * dil + 1


def _group_sizes(n: int) -> list[int]:
    """Blocks per step to try: n, n/2, n/4, ... 1 (rounded up). Halving keeps the search short
    (the planner's time matters for big networks) while covering all-at-once, one-at-a-time and
    the balanced splits in between."""
    sizes, k = set(), 1
    while True:
        sizes.add(-(-n // k))
        if k >= n:
            break
        k *= 2
    return sorted(sizes, reverse=True)


def _tile_candidates(ho: int, wo: int, fits: Callable[[int, int], bool]) -> list[tuple[int, int]]:
    """(th, tw) candidates: full-width row bands first (contiguous DMA, fewest halos), then column
    splits; for each width the tallest band that fits and a few shorter ones (more, smaller steps
    overlap better at the start and end of the layer)."""
    cands = []
    for parts in range(1, wo + 1):
        tw = -(-wo // parts)
        if parts > 1 and tw == -(-wo // (parts - 1)):
            continue
        th_max = 0
        lo, hi = 1, ho
        while lo <= hi:  # largest th with fits(th, tw); fits is monotonic in th
            mid = (lo + hi) // 2
            if fits(mid, tw):
                th_max, lo = mid, mid + 1
            else:
                hi = mid - 1
        if th_max == 0:
            continue
        n_min = -(-ho // th_max)
        ths = {th_max}
        for n in (n_min + 1, n_min + 2, 2 * n_min, 4 * n_min, 8 * n_min):
            if n <= ho:
                ths.add(-(-ho // n))
        cands.extend((th, tw) for th in sorted(ths, reverse=True))
        if len(cands) >= 12:
            break
    return cands


# --------------------------------------------------------------------------------------------
# Conv planning
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvAddrs:
    """DRAM byte addresses a layer program reads and writes (all multiples of B); pools use
    ``inp``, ``prm`` (average pools) and ``out``."""

    inp: int
    wgt: int
    prm: int
    out: int


def _conv_macs(s: _ConvShape) -> int:
    return s.ho * s.wo * s.co * (s.ci // s.groups) * s.kh * s.kw


def _ddr_model(config: Any, geom: Geometry) -> tuple[float, int]:
    bw = float(getattr(config, "ddr_bytes_per_cycle", geom.bus_bytes) or geom.bus_bytes) if config else geom.bus_bytes
    lat = int(getattr(config, "ddr_latency_cycles", 40) or 0) if config else 40
    return bw, lat


# Fixed cost of one CONV/POOL in the compute unit (decode, pipeline fill, requantize drain), only
# used by the cost model to prefer fewer, larger instructions.
_OP_OVERHEAD = 16


def plan_conv(geom: Geometry, layer: ConvLayer, in_shape: tuple[int, int, int], addrs: ConvAddrs,
              config: Any = None) -> tuple[list[_Step], Plan]:
    """Tile a conv layer; returns its steps (instructions without tokens) and the plan summary."""
    return _plan_conv_shape(geom, layer, _conv_shape(layer, in_shape), addrs, config)


def _plan_conv_shape(geom: Geometry, layer: ConvLayer, s: _ConvShape, addrs: ConvAddrs,
                     config: Any = None) -> tuple[list[_Step], Plan]:
    """:func:`plan_conv` for a checked shape (the transposed conv's phases build theirs directly)."""
    c = geom.c
    ranges = _ob_input_blocks(s, c)
    n_ob = len(ranges)
    taps = s.kh * s.kw
    ob_words = [(hi - lo) * taps for lo, hi in ranges]
    wgt_start = list(np.cumsum([0] + ob_words[:-1]))
    total_words = sum(ob_words)
    resident = total_words <= geom.depth("WGT") and n_ob <= geom.depth("PRM")
    bw, lat = _ddr_model(config, geom)
    best: tuple[int, list[_Step], Plan] | None = None
    group_sizes = _group_sizes(n_ob)
    # Two INP slots (double buffering) whenever any tiling fits them; one slot (no overlap of
    # input loads with compute, but correct) only for layers whose receptive field is too big.
    # The array cannot beat one tap of one pixel per cycle: once a candidate is within 0.5 % of
    # that bound the search stops (the planner's time matters for big networks).
    bound = s.ho * s.wo * sum(ob_words) * 1.005
    for inp_slots in (2, 1):
        for g in group_sizes:
            if best is not None and best[0] <= bound:
                break
            for cand in _conv_candidates(geom, s, ranges, ob_words, resident, g, inp_slots):
                if best is not None and best[0] <= bound:
                    break
                groups, g_ranges, wmode, wslots, order, th, tw = cand
                steps = _conv_steps(geom, layer, s, addrs, ranges, wgt_start, groups, g_ranges, wmode, wslots,
                                    order, th, tw, inp_slots)
                out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // (th * tw))
                est = _estimate(geom, steps, out_slots, bw, lat)
                if best is None or est < best[0]:
                    plan = Plan("conv", (th, tw), g, order, wmode, len(steps), out_slots, est, _conv_macs(s),
                                _dma_bytes(geom, steps), inp_slots)
                    best = (est, steps, plan)
        if best is not None:
            break
    if best is None:
        raise CompileError(
            f"conv {s.ci}->{s.co} {s.kh}x{s.kw} does not fit this configuration: one output block needs "
            f"{max(ob_words)} WGT words (WGT has {geom.depth('WGT')}) and at least "
            f"{max(hi - lo for lo, hi in ranges) * _extent(1, 1, s.kh, s.dil[0]) * _extent(1, 1, s.kw, s.dil[1])} "
            f"INP words for one output pixel (INP has {geom.depth('INP')}); "
            "raise WeightMemorySize / InputMemorySize")
    return best[1], best[2]


def _conv_candidates(geom: Geometry, s: _ConvShape, ranges: list[tuple[int, int]], ob_words: list[int],
                     resident: bool, g: int, inp_slots: int):
    """Feasible (groups, group input ranges, weight mode, weight slots, order, th, tw) for group size g."""
    n_ob = len(ranges)
    groups = [list(range(i, min(n_ob, i + g))) for i in range(0, n_ob, g)]
    g_words = [sum(ob_words[o] for o in grp) for grp in groups]
    if resident:
        wmode, wslots = "resident", 1
    elif max(g_words) <= geom.depth("WGT") // 2 and g <= geom.depth("PRM") // 2:
        wmode, wslots = "streamed", 2
    elif max(g_words) <= geom.depth("WGT") and g <= geom.depth("PRM"):
        wmode, wslots = "streamed", 1  # weight loads cannot overlap compute, but it runs
    else:
        return
    g_ranges = [(min(ranges[o][0] for o in grp), max(ranges[o][1] for o in grp)) for grp in groups]
    nblk = max(hi - lo for lo, hi in g_ranges)

    def fits(th: int, tw: int) -> bool:
        px = th * tw
        in_w = _extent(tw, s.stride[1], s.kw, s.dil[1])
        in_words = nblk * _extent(th, s.stride[0], s.kh, s.dil[0]) * in_w
        return (px <= geom.acc_depth and px <= geom.depth("OUT") and in_words <= geom.depth("INP") // inp_slots
                and in_w <= SIZE_MAX)

    cands = _tile_candidates(s.ho, s.wo, fits)
    for order in ("tiles-outer", "groups-outer"):
        # With resident weights "groups outer" only reloads the input more often.
        if order == "groups-outer" and (len(groups) == 1 or wmode == "resident"):
            continue
        for th, tw in cands:
            yield groups, g_ranges, wmode, wslots, order, th, tw


def _conv_steps(geom: Geometry, layer: ConvLayer, s: _ConvShape, addrs: ConvAddrs, ranges: list[tuple[int, int]],
                wgt_start: list[int], groups: list[list[int]], g_ranges: list[tuple[int, int]], wmode: str,
                wslots: int, order: str, th: int, tw: int, inp_slots: int) -> list[_Step]:
    pin, pw, pp, po = geom.pitch("INP"), geom.pitch("WGT"), geom.pitch("PRM"), geom.pitch("OUT")
    tiles = _tiles(s.ho, s.wo, th, tw, (s.kh, s.kw), s.stride, s.dil, s.pads, s.h, s.w)
    taps = s.kh * s.kw
    inp_half = geom.depth("INP") // inp_slots
    wgt_half = geom.depth("WGT") // wslots
    prm_half = geom.depth("PRM") // wslots
    px_max = th * tw
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // px_max)
    zp_in = int(layer.zp_in)
    if order == "tiles-outer":
        pairs = [(t, j) for t in range(len(tiles)) for j in range(len(groups))]
    else:
        pairs = [(t, j) for j in range(len(groups)) for t in range(len(tiles))]
    steps: list[_Step] = []
    cur_inp: tuple[int, tuple[int, int]] | None = None
    inp_loads = 0
    inp_slot = 0
    cur_wgt: int | None = None
    wgt_loads = 0
    wgt_slot = 0
    resident_loaded: set[int] = set()
    op_index = 0
    for t, j in pairs:
        tile = tiles[t]
        st = _Step()
        lo, hi = g_ranges[j]
        # ---- weights and parameters of group j ----
        if wmode == "resident":
            if j not in resident_loaded:
                resident_loaded.add(j)
                o0, n = groups[j][0], len(groups[j])
                words = sum((ranges[o][1] - ranges[o][0]) * taps for o in groups[j])
                for ld in _linear_loads(isa.Buf.WGT, wgt_start[o0], addrs.wgt + wgt_start[o0] * pw, words, pw):
                    st.loads.append(_Load(ld, ("WGT", "res", j)))
                for ld in _linear_loads(isa.Buf.PRM, o0, addrs.prm + o0 * pp, n, pp):
                    st.loads.append(_Load(ld, ("PRM", "res", j)))
            wbase = {o: wgt_start[o] for o in groups[j]}
            pbase = {o: o for o in groups[j]}
            wslot_id = ("WGT", "res", j)
        else:
            if cur_wgt != j:
                cur_wgt = j
                wgt_slot = wgt_loads % wslots
                wgt_loads += 1
                o0, n = groups[j][0], len(groups[j])
                words = sum((ranges[o][1] - ranges[o][0]) * taps for o in groups[j])
                for ld in _linear_loads(isa.Buf.WGT, wgt_slot * wgt_half, addrs.wgt + wgt_start[o0] * pw, words, pw):
                    st.loads.append(_Load(ld, ("WGT", wgt_slot)))
                for ld in _linear_loads(isa.Buf.PRM, wgt_slot * prm_half, addrs.prm + o0 * pp, n, pp):
                    st.loads.append(_Load(ld, ("WGT", wgt_slot)))  # PRM shares the weights' slot lifetime
            wbase, pbase, acc = {}, {}, 0
            for o in groups[j]:
                wbase[o] = wgt_slot * wgt_half + acc
                acc += (ranges[o][1] - ranges[o][0]) * taps
                pbase[o] = wgt_slot * prm_half + (o - groups[j][0])
            wslot_id = ("WGT", wgt_slot)
        # ---- input tile ----
        key = (t, (lo, hi))
        if cur_inp != key:
            cur_inp = key
            inp_slot = inp_loads % inp_slots
            inp_loads += 1
            st.loads.append(_Load(isa.Load(
                buf=isa.Buf.INP, sram_base=inp_slot * inp_half,
                dram_addr=addrs.inp + ((lo * s.h + tile.y0) * s.w + tile.x0) * pin,
                x_size=tile.nx, y_size=tile.ny, z_size=hi - lo, y_stride=s.w, z_stride=s.h * s.w,
                pad_top=tile.pt, pad_bottom=tile.pb, pad_left=tile.pl, pad_right=tile.pr, pad_value=zp_in),
                ("INP", inp_slot)))
        st.reads = {("INP", inp_slot), wslot_id}
        plane = tile.hp * tile.wp
        px = tile.th * tile.tw
        for o in groups[j]:
            olo, ohi = ranges[o]
            out_base = (op_index % out_slots) * px_max
            conv = isa.Conv(
                inp_base=inp_slot * inp_half + (olo - lo) * plane, wgt_base=wbase[o], prm_base=pbase[o],
                out_base=out_base, in_w=tile.wp, in_plane=plane, out_h=tile.th, out_w=tile.tw, kh=s.kh, kw=s.kw,
                stride_y=s.stride[0], stride_x=s.stride[1], dil_y=s.dil[0], dil_x=s.dil[1], cin_blocks=ohi - olo,
                zp_out=int(layer.zp_out), act_min=int(layer.act_min), act_max=int(layer.act_max))
            store = isa.Store(sram_base=out_base, dram_addr=addrs.out + ((o * s.ho + tile.r0) * s.wo + tile.c0) * po,
                              x_size=tile.tw, y_size=tile.th, y_stride=s.wo)
            st.ops.append(_Op(conv, store, px * (ohi - olo) * taps + _OP_OVERHEAD))
            op_index += 1
        steps.append(st)
    return steps


# --------------------------------------------------------------------------------------------
# Pool planning
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _PoolShape:
    ch: int
    h: int
    w: int
    k: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    ho: int
    wo: int
    avg: bool
    #: distinct (M, S) pairs of an average pool, and the output rectangles (r0, r1, c0, c1, pair)
    #: that use each; one pair and one rectangle unless the divisor varies per window.
    pairs: tuple[tuple[int, int], ...] = ((1, 0),)
    regions: tuple[tuple[int, int, int, int, int], ...] = ()


def _divisor_regions(mult: np.ndarray, shift: np.ndarray) -> tuple[tuple[tuple[int, int], ...], tuple]:
    """Cut per-window (M, S) arrays (Ho, Wo) into rectangles of one pair each.

    The POOL instruction has one multiplier per channel block, so an average pool whose divisor
    depends on the window (count_include_pad=False at the border) becomes one POOL per rectangle
    of equal divisor: consecutive equal rows are merged, then each row band is cut into runs of
    equal columns. For border-dependent divisors this gives at most 9 rectangles."""
    pairs: dict[tuple[int, int], int] = {}
    ids = np.zeros(mult.shape, dtype=np.int64)
    for (i, j), m in np.ndenumerate(mult):
        ids[i, j] = pairs.setdefault((int(m), int(shift[i, j])), len(pairs))
    regions = []
    ho, wo = ids.shape
    r0 = 0
    while r0 < ho:
        r1 = r0 + 1
        while r1 < ho and np.array_equal(ids[r1], ids[r0]):
            r1 += 1
        c0 = 0
        while c0 < wo:
            c1 = c0 + 1
            while c1 < wo and ids[r0, c1] == ids[r0, c0]:
                c1 += 1
            regions.append((r0, r1, c0, c1, int(ids[r0, c0])))
            c0 = c1
        r0 = r1
    return tuple(pairs), tuple(regions)


def _pool_shape(layer: PoolLayer, in_shape: tuple[int, int, int]) -> _PoolShape:
    ch, h, w = in_shape
    kind = layer.kind
    if kind == "global_avg":
        k, stride, pads = (h, w), (1, 1), (0, 0, 0, 0)
        if h > 31 or w > 31:
            raise CompileError(f"global average pool over {h}x{w}: the POOL window is at most 31x31 (average of "
                               "averages would not be bit-exact); reduce the plane first")
    elif kind in ("max", "avg"):
        k, stride, pads = _pair(layer.kernel, "kernel"), _pair(layer.stride, "stride"), _pads(layer.pads)
    else:
        raise CompileError(f"pool kind {kind!r}: allowed 'max', 'avg', 'global_avg'")
    if max(k) > 31 or max(stride) > 7:
        raise CompileError(f"pool kernel {k} / stride {stride}: POOL allows kernels 1..31 and strides 1..7")
    if max(pads) > PAD_MAX:
        raise CompileError(f"pool pads {pads}: LOAD inserts at most {PAD_MAX} padding rows/columns per side")
    if kind == "max" and (max(pads[0], pads[2]) >= k[0] or max(pads[1], pads[3]) >= k[1]):
        raise CompileError(f"max pool pads {pads} must be smaller than the kernel {k}")
    ho = (h + pads[0] + pads[2] - k[0]) // stride[0] + 1
    wo = (w + pads[1] + pads[3] - k[1]) // stride[1] + 1
    if ho < 1 or wo < 1:
        raise CompileError(f"pool kernel {k} does not fit the padded input {h}x{w} with pads {pads}")
    avg = kind != "max"
    full = ((0, ho, 0, wo, 0),)
    if not avg:
        return _PoolShape(ch, h, w, k, stride, pads, ho, wo, avg, ((1, 0),), full)
    mult, shift = np.asarray(layer.mult), np.asarray(layer.shift)
    if mult.ndim == 0 and shift.ndim == 0:
        if not layer.count_include_pad and max(pads) > 0:
            from dlproc.targets.golden.windows import window_counts
            if np.any(window_counts(h, w, k, stride, pads) != k[0] * k[1]):
                raise CompileError(
                    "average pool with count_include_pad=False over padding needs a divisor per window: pass "
                    "mult/shift as (Ho, Wo) arrays (dlproc.targets.golden.ops.avgpool_multipliers)")
        pair = (int(mult), int(shift))
        _check_requant(np.array([pair[0]]), np.array([pair[0]]), np.array([pair[1]]), "average pool")
        return _PoolShape(ch, h, w, k, stride, pads, ho, wo, avg, (pair,), full)
    try:
        mult, shift = np.broadcast_to(mult, (ho, wo)), np.broadcast_to(shift, (ho, wo))
    except ValueError:
        raise CompileError(f"average pool mult/shift must be scalars or broadcast to the output (Ho, Wo) = "
                           f"({ho}, {wo}), got {np.shape(layer.mult)} / {np.shape(layer.shift)}") from None
    _check_requant(mult.astype(np.int64), mult.astype(np.int64), shift.astype(np.int64), "average pool")
    pairs, regions = _divisor_regions(mult, shift)
    return _PoolShape(ch, h, w, k, stride, pads, ho, wo, avg, pairs, regions)


def plan_pool(geom: Geometry, layer: PoolLayer, in_shape: tuple[int, int, int], addrs: ConvAddrs,
              config: Any = None) -> tuple[list[_Step], Plan]:
    """Tile a pool layer (``addrs.wgt`` is unused; ``addrs.prm`` holds AVG parameters)."""
    s = _pool_shape(layer, in_shape)
    n_blk = _blocks(s.ch, geom.c)
    bw, lat = _ddr_model(config, geom)
    n_pairs = len(s.pairs)
    prm_resident = (not s.avg) or n_pairs * n_blk <= geom.depth("PRM")
    best = None
    for inp_slots in (2, 1):  # as for conv: one slot only when a window is too big for a half
        for g in _group_sizes(n_blk):
            if not prm_resident and g > geom.depth("PRM") // 2:
                continue

            def fits(th: int, tw: int) -> bool:
                in_words = g * _extent(th, s.stride[0], s.k[0], 1) * _extent(tw, s.stride[1], s.k[1], 1)
                return (th * tw <= geom.acc_depth and g * th * tw <= geom.depth("OUT")
                        and in_words <= geom.depth("INP") // inp_slots)

            for th, tw in _tile_candidates(s.ho, s.wo, fits):
                steps, out_slots = _pool_steps(geom, layer, s, addrs, g, n_blk, th, tw, prm_resident, inp_slots)
                est = _estimate(geom, steps, out_slots, bw, lat)
                if best is None or est < best[0]:
                    plan = Plan("pool", (th, tw), g, "tiles-outer", "none", len(steps), out_slots, est, 0,
                                _dma_bytes(geom, steps), inp_slots)
                    best = (est, steps, plan)
        if best is not None:
            break
    if best is None:
        raise CompileError(f"pool {s.k} over {s.h}x{s.w}: one output pixel of one channel block does not fit "
                           f"INP ({geom.depth('INP')} words) / OUT / ACC ({geom.acc_depth})")
    return best[1], best[2]


def _pool_steps(geom: Geometry, layer: PoolLayer, s: _PoolShape, addrs: ConvAddrs, g: int, n_blk: int, th: int,
                tw: int, prm_resident: bool, inp_slots: int) -> tuple[list[_Step], int]:
    pin, pp, po = geom.pitch("INP"), geom.pitch("PRM"), geom.pitch("OUT")
    tiles = _tiles(s.ho, s.wo, th, tw, s.k, s.stride, (1, 1), s.pads, s.h, s.w)
    inp_half = geom.depth("INP") // inp_slots
    prm_half = geom.depth("PRM") // 2
    out_words = g * th * tw
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // out_words)
    pad_value = int(layer.zp_in) if s.avg else -128
    steps = []
    inp_loads = prm_loads = 0
    prm_loaded = False
    op_index = 0
    for tile in tiles:
        # The divisor rectangles this tile overlaps (one, the whole tile, unless divisors vary).
        parts = []
        for r0, r1, c0, c1, pair in s.regions:
            a0, a1 = max(r0, tile.r0), min(r1, tile.r0 + tile.th)
            b0_, b1 = max(c0, tile.c0), min(c1, tile.c0 + tile.tw)
            if a0 < a1 and b0_ < b1:
                parts.append((a0, a1, b0_, b1, pair))
        for b0 in range(0, n_blk, g):
            nb = min(g, n_blk - b0)
            # Streamed parameters: the tile's rectangles are processed in chunks whose (M, S) pairs
            # fit one PRM half; each chunk is a step of its own (loading only its parameters and
            # reusing the INP slot of the first), so the token rules cover the PRM halves too.
            chunks = [parts] if prm_resident else _chunks_by_pairs(parts, max(1, prm_half // nb))
            for ci, chunk in enumerate(chunks):
                st = _Step()
                pair_pos: dict[int, int] = {}
                if s.avg:
                    if prm_resident:
                        if not prm_loaded:
                            prm_loaded = True
                            for ld in _linear_loads(isa.Buf.PRM, 0, addrs.prm, len(s.pairs) * n_blk, pp):
                                st.loads.append(_Load(ld, ("PRM", "res")))
                        st.reads.add(("PRM", "res"))
                    else:
                        pslot = prm_loads % 2
                        prm_loads += 1
                        for pair in sorted({p[4] for p in chunk}):
                            pair_pos[pair] = pslot * prm_half + len(pair_pos) * nb
                            st.loads.append(_Load(isa.Load(
                                buf=isa.Buf.PRM, sram_base=pair_pos[pair],
                                dram_addr=addrs.prm + (pair * n_blk + b0) * pp, x_size=nb), ("PRM", pslot)))
                        st.reads.add(("PRM", pslot))
                if ci == 0:
                    slot = inp_loads % inp_slots
                    inp_loads += 1
                    st.loads.append(_Load(isa.Load(
                        buf=isa.Buf.INP, sram_base=slot * inp_half,
                        dram_addr=addrs.inp + ((b0 * s.h + tile.y0) * s.w + tile.x0) * pin,
                        x_size=tile.nx, y_size=tile.ny, z_size=nb, y_stride=s.w, z_stride=s.h * s.w,
                        pad_top=tile.pt, pad_bottom=tile.pb, pad_left=tile.pl, pad_right=tile.pr,
                        pad_value=pad_value), ("INP", slot)))
                st.reads.add(("INP", slot))
                for a0, a1, c0, c1, pair in chunk:
                    oh, ow = a1 - a0, c1 - c0
                    out_base = (op_index % out_slots) * out_words
                    prm_base = (pair * n_blk + b0 if prm_resident else pair_pos[pair]) if s.avg else 0
                    pool = isa.Pool(
                        inp_base=slot * inp_half + (a0 - tile.r0) * s.stride[0] * tile.wp
                        + (c0 - tile.c0) * s.stride[1],
                        out_base=out_base, prm_base=prm_base, in_w=tile.wp,
                        in_plane=tile.hp * tile.wp, out_h=oh, out_w=ow, kh=s.k[0], kw=s.k[1],
                        stride_y=s.stride[0], stride_x=s.stride[1], z_size=nb,
                        mode=isa.PoolMode.AVG if s.avg else isa.PoolMode.MAX,
                        zp_in=int(layer.zp_in) if s.avg else 0, zp_out=int(layer.zp_out) if s.avg else 0,
                        act_min=int(layer.act_min) if s.avg else -128, act_max=int(layer.act_max) if s.avg else 127)
                    store = isa.Store(sram_base=out_base, dram_addr=addrs.out + ((b0 * s.ho + a0) * s.wo + c0) * po,
                                      x_size=ow, y_size=oh, z_size=nb, y_stride=s.wo, z_stride=s.ho * s.wo)
                    st.ops.append(_Op(pool, store, nb * pool_plane_cycles(pool) + _OP_OVERHEAD))
                    op_index += 1
                steps.append(st)
    return steps, out_slots


def _chunks_by_pairs(parts: list[tuple[int, int, int, int, int]], max_pairs: int) -> list[list]:
    """Consecutive runs of rectangles using at most ``max_pairs`` distinct (M, S) pairs each."""
    chunks: list[list] = []
    cur: list = []
    pairs: set[int] = set()
    for part in parts:
        if part[4] not in pairs and len(pairs) == max_pairs:
            chunks.append(cur)
            cur, pairs = [], set()
        cur.append(part)
        pairs.add(part[4])
    if cur:
        chunks.append(cur)
    return chunks


def _pool_params(geom: Geometry, s: _PoolShape, n_blk: int) -> bytes:
    """PRM image of an average pool: for each distinct (M, S) pair, one word per channel block."""
    c = geom.c
    words = []
    for m, sh in s.pairs:
        mm = np.full(c, m, dtype=np.int64)
        words.append(_prm_word(geom, np.zeros(c, dtype=np.int64), mm, mm, np.full(c, sh, dtype=np.int64)) * n_blk)
    return b"".join(words)


# --------------------------------------------------------------------------------------------
# Whole programs
# --------------------------------------------------------------------------------------------
def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _geometry(config: Any) -> Geometry:
    return config if isinstance(config, Geometry) else Geometry.from_config(config)


def _assemble(geom: Geometry, blobs: list[tuple[str, bytes]], out_name_size: int,
              out_shape: tuple[int, int, int], planner: Callable[[ConvAddrs], tuple[list[_Step], Plan]],
              dram_base: int, mark_index: int,
              prologue: Callable[[], list[isa.Instruction]] | None = None,
              emit: Callable[..., list[isa.Instruction]] | None = None) -> LayerProgram:
    """Lay the regions out from ``dram_base`` (input, weights, params, output, instructions), plan,
    emit, and build the image. Regions start on 64-byte boundaries (and on bus beats)."""
    align = max(64, geom.bus_bytes)
    if dram_base % align:
        raise CompileError(f"dram_base {dram_base:#x} must be a multiple of {align}")
    regions: dict[str, Region] = {}
    addr = dram_base
    for name, data in blobs:
        regions[name] = Region(name, addr, len(data))
        addr = _align(addr + max(len(data), 1), align)
    regions["output"] = Region("output", addr, out_name_size)
    addr = _align(addr + out_name_size, align)
    addrs = ConvAddrs(regions["input"].addr, regions.get("weights", regions["input"]).addr,
                      regions.get("params", regions["input"]).addr, regions["output"].addr)
    steps, plan = planner(addrs)
    insns = (emit or emit_instructions)(steps, plan, mark_index=mark_index)
    if prologue is not None:  # instructions that run first (the LRN table load); token-balanced
        insns = prologue() + insns
    for insn in insns:
        insn.validate(geom.hw)
    program = isa.encode_program(insns)
    regions["instructions"] = Region("instructions", addr, len(program))
    end = _align(addr + len(program), align)
    image = bytearray(end - dram_base)
    for name, data in blobs:
        r = regions[name]
        image[r.addr - dram_base:r.addr - dram_base + len(data)] = data
    ins = regions["instructions"]
    image[ins.addr - dram_base:ins.addr - dram_base + ins.size] = program
    return LayerProgram(geom, bytes(image), dram_base, ins.addr, len(insns), dram_base, end, regions, out_shape,
                        insns, plan)


def build_conv_program(config: Any, layer: ConvLayer, x: np.ndarray, *, dram_base: int = 0,
                       mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    s = _conv_shape(layer, tuple(np.shape(x)))  # type: ignore[arg-type]
    wimg, _ = pack_conv_weights(geom, layer, s)
    blobs = [("input", pack_input(geom, x)), ("weights", wimg), ("params", pack_conv_params(geom, layer, s))]
    out_size = _blocks(s.co, geom.c) * s.ho * s.wo * geom.pitch("OUT")
    return _assemble(geom, blobs, out_size, (s.co, s.ho, s.wo),
                     lambda a: plan_conv(geom, layer, (s.ci, s.h, s.w), a, cfg), dram_base, mark_index)


def build_pool_program(config: Any, layer: PoolLayer, x: np.ndarray, *, dram_base: int = 0,
                       mark_index: int = 0) -> LayerProgram:
    """A complete program computing the pool ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    s = _pool_shape(layer, tuple(np.shape(x)))  # type: ignore[arg-type]
    n_blk = _blocks(s.ch, geom.c)
    blobs = [("input", pack_input(geom, x))]
    if s.avg:
        blobs.append(("params", _pool_params(geom, s, n_blk)))
    out_size = n_blk * s.ho * s.wo * geom.pitch("OUT")
    return _assemble(geom, blobs, out_size, (s.ch, s.ho, s.wo),
                     lambda a: plan_pool(geom, layer, (s.ch, s.h, s.w), a, cfg), dram_base, mark_index)


def build_layer_program(config: Any, layer: ConvLayer | PoolLayer, x: np.ndarray, **kw: Any) -> LayerProgram:
    if isinstance(layer, ConvLayer):
        return build_conv_program(config, layer, x, **kw)
    if isinstance(layer, PoolLayer):
        return build_pool_program(config, layer, x, **kw)
    raise CompileError(f"unsupported layer type {type(layer).__name__}: allowed ConvLayer, PoolLayer")


# --------------------------------------------------------------------------------------------
# Optional blocks: element-wise add (adder module) and nearest upsample (segmentation block)
# --------------------------------------------------------------------------------------------
@dataclass
class AddLayer:
    """Element-wise add of two int8 tensors of one shape (``dlproc.targets.golden.ops.add``)."""

    za: int
    ma: int
    zb: int
    mb: int
    shift: int
    zp_out: int
    act_min: int = -128
    act_max: int = 127


@dataclass
class UpsampleLayer:
    """Nearest-neighbour upsample by integer factors (``dlproc.targets.golden.ops.upsample_nearest``)."""

    scale: int | tuple[int, int] = 2


def _require_block(geom: Geometry, opcode: isa.Opcode) -> None:
    if not geom.hw.has_block(opcode):
        _, module, prop = isa.OPTIONAL_BLOCKS[opcode]
        raise CompileError(f"{opcode.name} needs a block this processor is generated without; "
                           f"turn on {module}.{prop}")


def plan_add(geom: Geometry, layer: AddLayer, shape: tuple[int, int, int], addrs: ConvAddrs, b_addr: int,
             config: Any = None) -> tuple[list[_Step], Plan]:
    """Chunks of n words of both operands (``addrs.inp`` = a, ``b_addr`` = b, both in the channel-block
    layout, which is dense, so a chunk is a linear run): each step loads a's and b's chunk into one
    INP half, ADDs them into an OUT slot and stores the slot. 2 cycles per word."""
    _require_block(geom, isa.Opcode.ADD)
    ch, h, w = shape
    total = _blocks(ch, geom.c) * h * w
    n = min(total, geom.depth("INP") // 4, geom.depth("OUT") // 2, SIZE_MAX)
    if n < 1:
        raise CompileError(f"add: INP ({geom.depth('INP')} words) / OUT ({geom.depth('OUT')}) too small for one word")
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // n)
    half = geom.depth("INP") // 2
    pin, po = geom.pitch("INP"), geom.pitch("OUT")
    steps = []
    for k, start in enumerate(range(0, total, n)):
        cnt = min(n, total - start)
        slot = k % 2
        st = _Step()
        for ld in _linear_loads(isa.Buf.INP, slot * half, addrs.inp + start * pin, cnt, pin):
            st.loads.append(_Load(ld, ("INP", slot)))
        for ld in _linear_loads(isa.Buf.INP, slot * half + n, b_addr + start * pin, cnt, pin):
            st.loads.append(_Load(ld, ("INP", slot)))
        st.reads.add(("INP", slot))
        out_base = (k % out_slots) * n
        add = isa.Add(inp_a=slot * half, inp_b=slot * half + n, out_base=out_base, count=cnt,
                      za=int(layer.za), zb=int(layer.zb), ma=int(layer.ma), mb=int(layer.mb),
                      shift=int(layer.shift), zp_out=int(layer.zp_out), act_min=int(layer.act_min),
                      act_max=int(layer.act_max))
        store = isa.Store(sram_base=out_base, dram_addr=addrs.out + start * po, x_size=cnt)
        st.ops.append(_Op(add, store, 2 * cnt + _OP_OVERHEAD))
        steps.append(st)
    bw, lat = _ddr_model(config, geom)
    plan = Plan("add", (1, n), 1, "tiles-outer", "none", len(steps), out_slots,
                _estimate(geom, steps, out_slots, bw, lat), 0, _dma_bytes(geom, steps))
    return steps, plan


def _upsample_tile(geom: Geometry, nb: int, h: int, w: int, sy: int, sx: int) -> tuple[int, int, int]:
    """(blocks, input rows, input columns) of the largest tile whose input fits an INP half and
    whose output fits half of OUT (so at least two OUT slots)."""
    half_in, out_cap = geom.depth("INP") // 2, geom.depth("OUT") // 2
    tc = min(w, half_in, out_cap // (sy * sx), SIZE_MAX // sx)
    if tc < 1:
        raise CompileError(f"upsample x{sy}x{sx}: one output pixel block does not fit OUT ({geom.depth('OUT')} words)")
    tr = max(1, min(h, half_in // tc, out_cap // (sy * sx * tc), SIZE_MAX // sy))
    g = max(1, min(nb, half_in // (tr * tc), out_cap // (tr * sy * tc * sx)))
    return g, tr, tc


def plan_upsample(geom: Geometry, layer: UpsampleLayer, shape: tuple[int, int, int], addrs: ConvAddrs,
                  config: Any = None) -> tuple[list[_Step], Plan]:
    """Tiles of g channel blocks x tr input rows x tc input columns: LOAD the tile, UPSAMPLE it into an
    OUT slot (tr*sy x tc*sx pixels per block), STORE the slot into the output. 1 cycle per output word."""
    _require_block(geom, isa.Opcode.UPSAMPLE)
    sy, sx = _pair(layer.scale, "upsample scale")
    if sy > 15 or sx > 15:
        raise CompileError(f"upsample scale {(sy, sx)}: the UPSAMPLE instruction allows 1..15 per axis")
    ch, h, w = shape
    nb = _blocks(ch, geom.c)
    ho, wo = h * sy, w * sx
    g, tr, tc = _upsample_tile(geom, nb, h, w, sy, sx)
    out_words = g * tr * sy * tc * sx
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // out_words)
    half = geom.depth("INP") // 2
    pin, po = geom.pitch("INP"), geom.pitch("OUT")
    steps = []
    k = 0
    for b0 in range(0, nb, g):
        gb = min(g, nb - b0)
        for r0 in range(0, h, tr):
            nr = min(tr, h - r0)
            for c0 in range(0, w, tc):
                nc = min(tc, w - c0)
                slot = k % 2
                st = _Step()
                st.loads.append(_Load(isa.Load(
                    buf=isa.Buf.INP, sram_base=slot * half, dram_addr=addrs.inp + ((b0 * h + r0) * w + c0) * pin,
                    x_size=nc, y_size=nr, z_size=gb, y_stride=w, z_stride=h * w), ("INP", slot)))
                st.reads.add(("INP", slot))
                out_base = (k % out_slots) * out_words
                ups = isa.Upsample(inp_base=slot * half, out_base=out_base, in_w=nc, in_plane=nr * nc,
                                   out_h=nr * sy, out_w=nc * sx, scale_y=sy, scale_x=sx, z_size=gb)
                store = isa.Store(sram_base=out_base, dram_addr=addrs.out + ((b0 * ho + r0 * sy) * wo + c0 * sx) * po,
                                  x_size=nc * sx, y_size=nr * sy, z_size=gb, y_stride=wo, z_stride=ho * wo)
                st.ops.append(_Op(ups, store, gb * nr * sy * nc * sx + _OP_OVERHEAD))
                steps.append(st)
                k += 1
    bw, lat = _ddr_model(config, geom)
    plan = Plan("upsample", (tr * sy, tc * sx), g, "tiles-outer", "none", len(steps), out_slots,
                _estimate(geom, steps, out_slots, bw, lat), 0, _dma_bytes(geom, steps))
    return steps, plan


def build_add_program(config: Any, layer: AddLayer, xa: np.ndarray, xb: np.ndarray, *, dram_base: int = 0,
                      mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.add`` of the int8 tensors ``xa`` and ``xb`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    if np.shape(xa) != np.shape(xb):
        raise CompileError(f"add operands differ in shape: {np.shape(xa)} and {np.shape(xb)}")
    img_a, img_b = pack_input(geom, xa), pack_input(geom, xb)
    align = max(64, geom.bus_bytes)
    off_b = _align(len(img_a), align)
    blob = img_a + bytes(off_b - len(img_a)) + img_b
    shape = tuple(int(v) for v in np.shape(xa))
    out_size = _blocks(shape[0], geom.c) * shape[1] * shape[2] * geom.pitch("OUT")
    return _assemble(geom, [("input", blob)], out_size, shape,  # type: ignore[arg-type]
                     lambda a: plan_add(geom, layer, shape, a, a.inp + off_b, cfg), dram_base, mark_index)


def build_upsample_program(config: Any, layer: UpsampleLayer, x: np.ndarray, *, dram_base: int = 0,
                           mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.upsample_nearest(x, layer.scale)`` for the int8 ``x`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    ch, h, w = (int(v) for v in np.shape(x))
    sy, sx = _pair(layer.scale, "upsample scale")
    out_size = _blocks(ch, geom.c) * h * sy * w * sx * geom.pitch("OUT")
    return _assemble(geom, [("input", pack_input(geom, x))], out_size, (ch, h * sy, w * sx),
                     lambda a: plan_upsample(geom, layer, (ch, h, w), a, cfg), dram_base, mark_index)


@dataclass
class LrnLayer:
    """Cross-channel LRN in fixed point (``dlproc.targets.golden.ops.lrn``; tables from ``ops.lrn_params``)."""

    size: int
    zp_in: int
    table_mult: np.ndarray  #: LRN_TABLE_SIZE multipliers (< 2**15)
    table_shift: np.ndarray  #: LRN_TABLE_SIZE shifts (<= 46)
    zp_out: int
    act_min: int = -128
    act_max: int = 127


def pack_lrn_table(geom: Geometry, layer: LrnLayer) -> bytes:
    """The LRN table as PRM words: lane l of word w = entry w*C + l (bias 0, M_neg = M)."""
    from dlproc.hardware.numerics import LRN_TABLE_SIZE

    c = geom.c
    mult = np.asarray(layer.table_mult, dtype=np.int64).reshape(-1)
    shift = np.asarray(layer.table_shift, dtype=np.int64).reshape(-1)
    if mult.shape != (LRN_TABLE_SIZE,) or shift.shape != (LRN_TABLE_SIZE,):
        raise CompileError(f"LRN tables must hold {LRN_TABLE_SIZE} entries each, got {mult.shape} and {shift.shape}")
    _check_requant(mult, mult, shift, "LRN table")
    words = -(-LRN_TABLE_SIZE // c)
    pm, ps = np.zeros(words * c, dtype=np.int64), np.zeros(words * c, dtype=np.int64)
    pm[:LRN_TABLE_SIZE], ps[:LRN_TABLE_SIZE] = mult, shift
    zero = np.zeros(c, dtype=np.int64)
    return b"".join(_prm_word(geom, zero, pm[w * c:(w + 1) * c], pm[w * c:(w + 1) * c], ps[w * c:(w + 1) * c])
                    for w in range(words))


def _table_stream(geom: Geometry, table_addr: int, words: int,
                  make: Callable[[int, int, bool], isa.Instruction]) -> list[isa.Instruction]:
    """LOAD PRM / table-copy pairs, one PRM-full at a time, serialised by tokens as in
    :func:`lrn_table_stream`; ``make(tab_base, count, push_prev)`` builds the copy instruction."""
    depth, pp = geom.depth("PRM"), geom.pitch("PRM")
    out: list[isa.Instruction] = []
    starts = list(range(0, words, depth))
    for k, w0 in enumerate(starts):
        n = min(depth, words - w0)
        loads = _linear_loads(isa.Buf.PRM, 0, table_addr + w0 * pp, n, pp)
        loads[0].pop_next = k > 0
        loads[-1].push_next = True
        out.extend(loads)
        out.append(make(w0 * geom.c, n, k + 1 < len(starts)))
    return out


def lrn_table_stream(geom: Geometry, table_addr: int) -> list[isa.Instruction]:
    """LOAD PRM / LRNTAB pairs that put the whole table (at ``table_addr``, from :func:`pack_lrn_table`)
    into the LRN block, one PRM-full at a time. Serialised by tokens: each LOAD but the first waits
    (C2L) for the LRNTAB that read the previous chunk; each LRNTAB waits (L2C) for its LOAD. The
    token counters are balanced at the end; later LRNs follow LRNTAB in the compute unit's order."""
    from dlproc.hardware.numerics import LRN_TABLE_SIZE

    words = -(-LRN_TABLE_SIZE // geom.c)
    return _table_stream(geom, table_addr, words, lambda base, n, push: isa.LrnTab(
        prm_base=0, tab_base=base, count=n, pop_prev=True, push_prev=push))


def plan_lrn(geom: Geometry, layer: LrnLayer, shape: tuple[int, int, int], addrs: ConvAddrs,
             config: Any = None) -> tuple[list[_Step], Plan]:
    """Tiles of n consecutive pixels with all their channel blocks (the channel window crosses
    blocks, so a tile never splits a pixel's channels): LOAD the tile into an INP half, LRN it into
    an OUT slot, STORE it. One cycle per output word. The table is loaded by :func:`lrn_table_stream`."""
    from dlproc.hardware.numerics import LRN_MAX_SIZE

    _require_block(geom, isa.Opcode.LRN)
    if not 1 <= int(layer.size) <= LRN_MAX_SIZE:
        raise CompileError(f"LRN size {layer.size}: the LRN block allows 1..{LRN_MAX_SIZE}")
    ch, h, w = shape
    nb = _blocks(ch, geom.c)
    half, out_cap = geom.depth("INP") // 2, geom.depth("OUT") // 2
    n = min(h * w, half // nb, out_cap // nb, SIZE_MAX)
    if n < 1:
        raise CompileError(f"LRN over {ch} channels: one pixel's {nb} channel blocks do not fit an INP half "
                           f"({half} words) and half of OUT ({out_cap} words)")
    bw, lat = _ddr_model(config, geom)
    # The largest tile needs the fewest instructions, but its first LOAD and last STORE do not
    # overlap anything; smaller tiles pipeline LOAD / LRN / STORE (LRN is DDR-bound: a word in
    # and a word out per output word), so the tile is chosen by the cost model.
    best: tuple[int, list[_Step], Plan] | None = None
    for tile in sorted({max(1, -(-n // k)) for k in (1, 2, 4, 8, 16)}, reverse=True):
        steps, out_slots = _lrn_steps(geom, layer, shape, addrs, nb, tile)
        est = _estimate(geom, steps, out_slots, bw, lat)
        if best is None or est < best[0]:
            best = (est, steps, Plan("lrn", (1, tile), nb, "tiles-outer", "none", len(steps), out_slots, est, 0,
                                     _dma_bytes(geom, steps)))
    assert best is not None
    return best[1], best[2]


def _lrn_steps(geom: Geometry, layer: LrnLayer, shape: tuple[int, int, int], addrs: ConvAddrs, nb: int,
               n: int) -> tuple[list[_Step], int]:
    ch, h, w = shape
    half = geom.depth("INP") // 2
    out_words = n * nb
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // out_words)
    pin, po = geom.pitch("INP"), geom.pitch("OUT")
    steps = []
    for k, p0 in enumerate(range(0, h * w, n)):
        cnt = min(n, h * w - p0)
        slot = k % 2
        st = _Step()
        st.loads.append(_Load(isa.Load(buf=isa.Buf.INP, sram_base=slot * half, dram_addr=addrs.inp + p0 * pin,
                                       x_size=cnt, z_size=nb, z_stride=h * w), ("INP", slot)))
        st.reads.add(("INP", slot))
        out_base = (k % out_slots) * out_words
        lrn = isa.Lrn(inp_base=slot * half, out_base=out_base, in_plane=cnt, n_pix=cnt, cin_blocks=nb, channels=ch,
                      size=int(layer.size), zp_in=int(layer.zp_in), zp_out=int(layer.zp_out),
                      act_min=int(layer.act_min), act_max=int(layer.act_max))
        store = isa.Store(sram_base=out_base, dram_addr=addrs.out + p0 * po, x_size=cnt, z_size=nb, z_stride=h * w)
        st.ops.append(_Op(lrn, store, cnt * nb + _OP_OVERHEAD))
        steps.append(st)
    return steps, out_slots


def lrn_table_cycles(geom: Geometry) -> int:
    """Compute-unit cycles of loading the table (LRNTAB: C + 2 cycles per PRM word), DMA excluded."""
    from dlproc.hardware.numerics import LRN_TABLE_SIZE

    return -(-LRN_TABLE_SIZE // geom.c) * (geom.c + 2)


def build_lrn_program(config: Any, layer: LrnLayer, x: np.ndarray, *, dram_base: int = 0,
                      mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.lrn`` of the int8 ``x`` (C, H, W): the table load, then the tiles."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    shape = tuple(int(v) for v in np.shape(x))
    out_size = _blocks(shape[0], geom.c) * shape[1] * shape[2] * geom.pitch("OUT")
    table = pack_lrn_table(geom, layer)
    holder: dict[str, Any] = {}

    def planner(a: ConvAddrs) -> tuple[list[_Step], Plan]:
        steps, plan = plan_lrn(geom, layer, shape, a, cfg)  # type: ignore[arg-type]
        holder["table"] = lrn_table_stream(geom, a.prm)
        return steps, plan

    prog = _assemble(geom, [("input", pack_input(geom, x)), ("params", table)], out_size, shape,  # type: ignore[arg-type]
                     planner, dram_base, mark_index, prologue=lambda: holder["table"])
    return prog


@dataclass
class SoftmaxLayer:
    """Integer softmax over the channels of every pixel (``dlproc.targets.golden.ops.softmax_int8``); output
    scale 1/256, zero point -128. ``exp_table`` is ``ops.softmax_exp_table(s_in)``."""

    exp_table: np.ndarray


def pack_softmax_table(geom: Geometry, layer: SoftmaxLayer) -> bytes:
    """The exp table as PRM words: the bias field of lane l of word w = entry w*C + l."""
    from dlproc.hardware.numerics import SOFTMAX_EXP_BITS

    table = np.asarray(layer.exp_table, dtype=np.int64).reshape(-1)
    size = isa.SOFTMAX_TABLE_SIZE
    if table.shape != (size,) or table.min() < 0 or table.max() > 2**SOFTMAX_EXP_BITS:
        raise CompileError(f"softmax exp table must hold {size} entries in 0..2**{SOFTMAX_EXP_BITS}")
    c = geom.c
    words = -(-size // c)
    padded = np.zeros(words * c, dtype=np.int64)
    padded[:size] = table
    zero = np.zeros(c, dtype=np.int64)
    return b"".join(_prm_word(geom, padded[w * c:(w + 1) * c], zero, zero, zero) for w in range(words))


def softmax_table_stream(geom: Geometry, table_addr: int) -> list[isa.Instruction]:
    """LOAD PRM / SMXTAB pairs loading the exp table (at ``table_addr``, from :func:`pack_softmax_table`)."""
    words = -(-isa.SOFTMAX_TABLE_SIZE // geom.c)
    return _table_stream(geom, table_addr, words, lambda base, n, push: isa.SmxTab(
        prm_base=0, tab_base=base, count=n, pop_prev=True, push_prev=push))


def plan_softmax(geom: Geometry, layer: SoftmaxLayer, shape: tuple[int, int, int], addrs: ConvAddrs,
                 config: Any = None) -> tuple[list[_Step], Plan]:
    """Tiles of n consecutive pixels with all their channel blocks: LOAD, SOFTMAX, STORE
    (3*cin_blocks + ~78 cycles per pixel). The exp table is loaded first (``build_softmax_program``)."""
    from dlproc.hardware.numerics import SOFTMAX_MAX_CHANNELS

    _require_block(geom, isa.Opcode.SOFTMAX)
    ch, h, w = shape
    if not 1 <= ch <= SOFTMAX_MAX_CHANNELS:
        raise CompileError(f"softmax over {ch} channels: the softmax block allows 1..{SOFTMAX_MAX_CHANNELS}")
    nb = _blocks(ch, geom.c)
    half, out_cap = geom.depth("INP") // 2, geom.depth("OUT") // 2
    n = min(h * w, half // nb, out_cap // nb, SIZE_MAX)
    if n < 1:
        raise CompileError(f"softmax over {ch} channels: one pixel's {nb} channel blocks do not fit an INP half "
                           f"({half} words) and half of OUT ({out_cap} words)")
    out_words = n * nb
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // out_words)
    pin, po = geom.pitch("INP"), geom.pitch("OUT")
    steps = []
    for k, p0 in enumerate(range(0, h * w, n)):
        cnt = min(n, h * w - p0)
        slot = k % 2
        st = _Step()
        st.loads.append(_Load(isa.Load(buf=isa.Buf.INP, sram_base=slot * half, dram_addr=addrs.inp + p0 * pin,
                                       x_size=cnt, z_size=nb, z_stride=h * w), ("INP", slot)))
        st.reads.add(("INP", slot))
        out_base = (k % out_slots) * out_words
        smx = isa.Softmax(inp_base=slot * half, out_base=out_base, in_plane=cnt, n_pix=cnt, cin_blocks=nb, channels=ch)
        store = isa.Store(sram_base=out_base, dram_addr=addrs.out + p0 * po, x_size=cnt, z_size=nb, z_stride=h * w)
        st.ops.append(_Op(smx, store, cnt * (3 * nb + 78) + _OP_OVERHEAD))
        steps.append(st)
    bw, lat = _ddr_model(config, geom)
    plan = Plan("softmax", (1, n), nb, "tiles-outer", "none", len(steps), out_slots,
                _estimate(geom, steps, out_slots, bw, lat), 0, _dma_bytes(geom, steps))
    return steps, plan


def build_softmax_program(config: Any, layer: SoftmaxLayer, x: np.ndarray, *, dram_base: int = 0,
                          mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.softmax_int8`` over the channels of the int8 ``x`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    shape = tuple(int(v) for v in np.shape(x))
    image = pack_softmax_table(geom, layer)
    c = geom.c
    out_size = _blocks(shape[0], c) * shape[1] * shape[2] * geom.pitch("OUT")
    holder: dict[str, Any] = {}

    def planner(a: ConvAddrs) -> tuple[list[_Step], Plan]:
        steps, plan = plan_softmax(geom, layer, shape, a, cfg)  # type: ignore[arg-type]
        holder["table"] = softmax_table_stream(geom, a.prm)
        return steps, plan

    return _assemble(geom, [("input", pack_input(geom, x)), ("params", image)], out_size, shape,  # type: ignore[arg-type]
                     planner, dram_base, mark_index, prologue=lambda: holder["table"])


def run_on_isasim(prog: LayerProgram, machine: Machine | None = None, **machine_kw: Any) -> tuple[np.ndarray, RunResult]:
    """Run ``prog`` on the ISA simulator; returns the decoded output and the run's statistics."""
    if machine is None:
        size = _align(prog.dma_limit + 64, 4096)
        machine = Machine(geometry=prog.geometry, dram_size=size, **machine_kw)
    machine.mem_write(prog.dram_base, prog.image)
    res = machine.run(None, insn_base=prog.insn_base, count=prog.insn_count, dma_base=prog.dma_base,
                      dma_limit=prog.dma_limit)
    return prog.read_output(machine.dram[prog.output_addr:prog.output_addr + prog.output_bytes],
                            base=prog.output_addr), res


# --------------------------------------------------------------------------------------------
# Transposed convolution (ONNX ConvTranspose, Darknet [deconvolutional]) on the conv engine
# --------------------------------------------------------------------------------------------
__all__ += ["ConvTransposeLayer", "ConvTransposePhase", "convtranspose_out_shape", "convtranspose_phases",
            "convtranspose_macs", "pack_convtranspose_images", "plan_convtranspose", "emit_convtranspose",
            "build_convtranspose_program"]


@dataclass
class ConvTransposeLayer:
    """A quantized transposed convolution (``dlproc.targets.golden.ops.conv_transpose2d``).

    ``weight`` is int8 ``(Co, Ci/groups, kh, kw)``: ONNX's ``(Ci, Co/groups, kh, kw)`` with the two
    channel axes swapped per group by the importer (``docs/frontends.md``), so that output channels
    come first as for :class:`ConvLayer`. ``bias`` is unfolded; ``mult``/``shift``/``mult_neg`` per
    output channel. ``pads`` (top, left, bottom, right) crop the full output, ``output_padding``
    (y, x) adds rows/columns at the bottom/right."""

    weight: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    mult_neg: np.ndarray | None = None
    zp_in: int = 0
    zp_out: int = 0
    act_min: int = -128
    act_max: int = 127
    stride: int | tuple[int, int] = 1
    pads: int | tuple[int, ...] = 0
    output_padding: int | tuple[int, int] = 0
    dilation: int | tuple[int, int] = 1
    groups: int = 1


@dataclass(frozen=True)
class ConvTransposePhase:
    """One output phase of a transposed conv: the outputs (oy0 + sy*i, ox0 + sx*j) form an ordinary
    stride-1 convolution of the input with a sub-kernel (see :func:`convtranspose_phases`)."""

    oy0: int
    ox0: int
    layer: ConvLayer  #: the sub-kernel conv (weights already flipped; all-zero if no tap falls on the phase)
    shape: _ConvShape  #: its geometry; pads may be negative (input rows/columns the phase skips)
    real: bool = True  #: False for a bias-only piece (zero 1x1 kernel)


def _out_padding(v: int | Sequence[int]) -> tuple[int, int]:
    t = (int(v), int(v)) if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < 0:
        raise CompileError(f"output_padding must be an int or (y, x) pair >= 0, got {v!r}")
    return t  # type: ignore[return-value]


def convtranspose_out_shape(layer: ConvTransposeLayer, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """(Co, Ho, Wo) with Ho = (H-1)*sy + (kh-1)*dy + 1 - pad_top - pad_bottom + output_padding_y."""
    w = np.asarray(layer.weight)
    if w.ndim != 4:
        raise CompileError(f"transposed conv weight must be (Co, Ci/groups, kh, kw), got shape {w.shape}")
    ci, h, wd = in_shape
    co, cig, kh, kw = w.shape
    g = int(layer.groups)
    if g < 1 or ci % g or co % g or cig != ci // g:
        raise CompileError(f"transposed conv groups={g} does not fit input channels {ci}, output channels {co} "
                           f"and weight shape {w.shape} (need Ci and Co divisible by groups, weight dim 1 = Ci/groups)")
    s, d, p, op = (_pair(layer.stride, "stride"), _pair(layer.dilation, "dilation"), _pads(layer.pads),
                   _out_padding(layer.output_padding))
    ho = (h - 1) * s[0] + (kh - 1) * d[0] + 1 - p[0] - p[2] + op[0]
    wo = (wd - 1) * s[1] + (kw - 1) * d[1] + 1 - p[1] - p[3] + op[1]
    if ho < 1 or wo < 1:
        raise CompileError(f"transposed conv: pads {p} crop the whole {h}x{wd} -> "
                           f"{ho + p[0] + p[2]}x{wo + p[1] + p[3]} output")
    return co, ho, wo


@dataclass(frozen=True)
class _AxisSeg:
    """A run of outputs o = rho + s*(n0 + i), i < n, of one phase along one axis: a correlation of the
    input with ``taps`` (kernel indices, correlation order; None = no real input, the bias only)
    and dilation ``dil``, reading input index i + a (pads: before = -a, after = the overhang)."""

    n0: int
    n: int
    taps: tuple[int, ...] | None
    dil: int
    pad_before: int
    pad_after: int


def _axis_segments(rho: int, k: int, s: int, d: int, pad: int, in_len: int, out_len: int) -> list[_AxisSeg]:
    """One axis of one phase, cut where outputs read only padding.

    Output o of the transposed conv sums x[i]*w[t] over o + pad = i*s + t*d. For o = rho + s*n the
    taps are those with t*d = r (mod s), r = (rho+pad) mod s: t0, t0 + s/g, ... (g = gcd(s, d)),
    reading x[m - e0 - j*d/g] with m = n + (rho+pad)//s and e0 = (t0*d - r)/s. Reversed, that is a
    correlation with dilation d/g and flipped taps whose first input index is
    a = (rho+pad)//s - e0 - (J-1)*d/g. Outputs at either end whose whole window is padding (with
    dilation or output_padding) are the bias only; they become separate zero-weight segments,
    because LOAD cannot produce a tile that is all padding."""
    n_out = len(range(rho, out_len, s))
    r, c0 = (rho + pad) % s, (rho + pad) // s
    taps = [t for t in range(k) if (t * d) % s == r]
    if not taps:
        return _zero_segments(0, n_out, in_len)
    g = math.gcd(s, d)
    dd = d // g
    span = (len(taps) - 1) * dd
    a = c0 - (taps[0] * d - r) // s - span
    head = min(max(-(a + span), 0), n_out)
    tail = min(max(n_out - (in_len - a), 0), n_out - head)
    segs = _zero_segments(0, head, in_len)
    n = n_out - head - tail
    if n > 0:
        first = a + head
        segs.append(_AxisSeg(head, n, tuple(taps[::-1]), dd, -first, (n - 1) + span + first - (in_len - 1)))
    return segs + _zero_segments(n_out - tail, tail, in_len)


def _zero_segments(n0: int, n: int, in_len: int) -> list[_AxisSeg]:
    """Bias-only outputs n0..n0+n-1 as zero-weight 1-tap segments over real input (at most in_len each)."""
    return [_AxisSeg(n0 + i, min(in_len, n - i), None, 1, 0, 0) for i in range(0, n, in_len)]


def convtranspose_phases(layer: ConvTransposeLayer, in_shape: tuple[int, int, int]) -> list[ConvTransposePhase]:
    """The sub-pixel decomposition: per output phase (oy mod sy, ox mod sx) an ordinary stride-1
    convolution of the input with the sub-kernel of the taps that land on that phase, flipped
    (phases whose edges read only padding are cut into pieces, see :func:`_axis_segments`).

    Bit-exact with the zero-insertion definition (``golden.ops.conv_transpose2d``): every output
    sums exactly the products of the taps that land on it, padding taps read zp_in (LOAD pads with
    it) and contribute 0 after the zero-point fold, and the requantization is the layer's. The
    pieces' outputs are (oy0 + sy*i, ox0 + sx*j); the planner scatters them with strided STOREs."""
    co, ho, wo = convtranspose_out_shape(layer, in_shape)
    ci, h, wd = in_shape
    w = np.asarray(layer.weight)
    if w.dtype != np.int8:
        raise CompileError(f"transposed conv weight must be int8, got {w.dtype}")
    _, cig, kh, kw = w.shape
    s, d, p = _pair(layer.stride, "stride"), _pair(layer.dilation, "dilation"), _pads(layer.pads)
    phases = []
    for ry in range(min(s[0], ho)):
        ysegs = _axis_segments(ry, kh, s[0], d[0], p[0], h, ho)
        for rx in range(min(s[1], wo)):
            xsegs = _axis_segments(rx, kw, s[1], d[1], p[1], wd, wo)
            for ys in ysegs:
                for xs in xsegs:
                    if ys.taps is not None and xs.taps is not None:
                        pieces = [(ys, xs, w[:, :, list(ys.taps)][:, :, :, list(xs.taps)], True)]
                    else:  # the bias only: a zero 1x1 conv, each axis cut to at most the input's size
                        zero = np.zeros((co, cig, 1, 1), dtype=np.int8)
                        pieces = [(y, x, zero, False) for y in _zero_segments(ys.n0, ys.n, h)
                                  for x in _zero_segments(xs.n0, xs.n, wd)]
                    for y, x, sub, real in pieces:
                        phases.append(_phase(layer, in_shape, s, ry, rx, y, x, sub, real))
    return phases


def _phase(layer: ConvTransposeLayer, in_shape: tuple[int, int, int], s: tuple[int, int], ry: int, rx: int,
           y: _AxisSeg, x: _AxisSeg, sub: np.ndarray, real: bool) -> ConvTransposePhase:
    ci, h, wd = in_shape
    co, _, jy, jx = sub.shape
    if jy > 31 or jx > 31 or y.dil > 7 or x.dil > 7:
        raise CompileError(f"transposed conv phase ({ry}, {rx}): sub-kernel {jy}x{jx} with dilation "
                           f"({y.dil}, {x.dil}); the CONV instruction allows 1..31 taps and dilation 1..7")
    pads = (y.pad_before, x.pad_before, y.pad_after, x.pad_after)
    if max(pads) > PAD_MAX:
        raise CompileError(f"transposed conv phase ({ry}, {rx}) needs padding {pads}; LOAD inserts at most "
                           f"{PAD_MAX} rows/columns per side")
    sub_layer = ConvLayer(weight=np.ascontiguousarray(sub), bias=layer.bias, mult=layer.mult, shift=layer.shift,
                          mult_neg=layer.mult_neg, zp_in=layer.zp_in, zp_out=layer.zp_out, act_min=layer.act_min,
                          act_max=layer.act_max, groups=layer.groups)
    shape = _ConvShape(ci, h, wd, co, jy, jx, (1, 1), pads, (y.dil, x.dil), int(layer.groups), y.n, x.n)
    return ConvTransposePhase(ry + s[0] * y.n0, rx + s[1] * x.n0, sub_layer, shape, real)


def pack_convtranspose_images(geom: Geometry, layer: ConvTransposeLayer, in_shape: tuple[int, int, int]
                              ) -> tuple[bytes, bytes, list[tuple[int, int]]]:
    """(weight image, parameter image, per phase (weight byte offset, parameter byte offset)).

    Each phase's images are those of its sub-kernel conv (whole WGT/PRM words, so every offset is
    a multiple of the bus beat), concatenated in phase order."""
    wimg, pimg, offs = bytearray(), bytearray(), []
    for ph in convtranspose_phases(layer, in_shape):
        offs.append((len(wimg), len(pimg)))
        wimg += pack_conv_weights(geom, ph.layer, ph.shape)[0]
        pimg += pack_conv_params(geom, ph.layer, ph.shape)
    return bytes(wimg), bytes(pimg), offs


def _scatter_store(st: isa.Store, ph: ConvTransposePhase, s: tuple[int, int], out_hw: tuple[int, int],
                   out_addr: int, pitch: int) -> isa.Store:
    """The phase's dense tile store (planned against output base 0) rewritten to land every pixel at
    its place in the full output: output (oy0 + sy*i, ox0 + sx*j). The STORE's x axis is contiguous,
    so for sx > 1 a tile row becomes its y axis (one element per row, y_stride = sx) and tile rows
    its z axis (z_stride = sy*Wo); for sx = 1 rows stay contiguous."""
    ho, wo = out_hw
    hp, wp = ph.shape.ho, ph.shape.wo
    ob, rem = divmod(st.dram_addr // pitch, hp * wp)
    r0, c0 = divmod(rem, wp)
    th, tw = st.y_size, st.x_size
    addr = out_addr + ((ob * ho + ph.oy0 + s[0] * r0) * wo + ph.ox0 + s[1] * c0) * pitch
    if s[1] == 1:
        return isa.Store(sram_base=st.sram_base, dram_addr=addr, x_size=tw, y_size=th, y_stride=s[0] * wo)
    return isa.Store(sram_base=st.sram_base, dram_addr=addr, x_size=1, y_size=tw, z_size=th, y_stride=s[1],
                     z_stride=s[0] * wo)


def plan_convtranspose(geom: Geometry, layer: ConvTransposeLayer, in_shape: tuple[int, int, int],
                       addrs: ConvAddrs, config: Any = None) -> tuple[list[tuple[list[_Step], Plan]], Plan]:
    """Plan every phase as an ordinary conv (``addrs.wgt``/``addrs.prm`` point at the images of
    :func:`pack_convtranspose_images`); returns per phase (steps, plan) and a summary plan."""
    co, ho, wo = convtranspose_out_shape(layer, in_shape)
    s = _pair(layer.stride, "stride")
    po = geom.pitch("OUT")
    _, _, offs = pack_convtranspose_images(geom, layer, in_shape)
    out = []
    for ph, (woff, poff) in zip(convtranspose_phases(layer, in_shape), offs):
        steps, plan = _plan_conv_shape(geom, ph.layer, ph.shape,
                                       ConvAddrs(addrs.inp, addrs.wgt + woff, addrs.prm + poff, 0), config)
        for st in steps:
            for op in st.ops:
                op.store = _scatter_store(op.store, ph, s, (ho, wo), addrs.out, po)
        bw, lat = _ddr_model(config, geom)
        plan.estimated_cycles = _estimate(geom, steps, plan.out_slots, bw, lat)
        plan.dma_bytes = _dma_bytes(geom, steps)
        out.append((steps, plan))
    first = out[0][1]
    summary = Plan("convtranspose", first.tile, first.group, first.order, first.weights,
                   sum(p.steps for _, p in out), first.out_slots, sum(p.estimated_cycles for _, p in out),
                   convtranspose_macs(layer, in_shape), sum(p.dma_bytes for _, p in out), first.inp_slots)
    return out, summary


def convtranspose_macs(layer: ConvTransposeLayer, in_shape: tuple[int, int, int]) -> int:
    """MACs the conv engine does for the layer: per phase, outputs x (Ci/groups) x sub-kernel taps
    (padding taps included, as for a conv; bias-only pieces count 0)."""
    total = 0
    for ph in convtranspose_phases(layer, in_shape):
        if ph.real:
            total += _conv_macs(ph.shape)
    return total


def emit_convtranspose(phases: list[tuple[list[_Step], Plan]], geom: Geometry, *, mark_index: int | None = 0,
                       finish: bool = True) -> list[isa.Instruction]:
    """The phases' streams joined by :func:`chain_streams`' barrier (a phase's loads overwrite INP/WGT
    slots the previous phase's convs read, and its stores must not overtake them); optionally a MARK
    after the last STORE and FINISH."""
    streams = [emit_instructions(steps, plan, mark_index=None, finish=False) for steps, plan in phases]
    insns = chain_streams(geom, streams)[:-1]  # without chain_streams' FINISH
    if mark_index is not None:
        insns.append(isa.Mark(index=mark_index))
    if finish:
        insns.append(isa.Finish())
    return insns


def build_convtranspose_program(config: Any, layer: ConvTransposeLayer, x: np.ndarray, *, dram_base: int = 0,
                                mark_index: int = 0) -> LayerProgram:
    """A complete program computing the transposed conv ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    in_shape = tuple(int(v) for v in np.shape(x))
    out_shape = convtranspose_out_shape(layer, in_shape)  # type: ignore[arg-type]
    wimg, pimg, _ = pack_convtranspose_images(geom, layer, in_shape)  # type: ignore[arg-type]
    blobs = [("input", pack_input(geom, x)), ("weights", wimg), ("params", pimg)]
    out_size = _blocks(out_shape[0], geom.c) * out_shape[1] * out_shape[2] * geom.pitch("OUT")
    def planner(a: ConvAddrs) -> Any:
        return plan_convtranspose(geom, layer, in_shape, a, cfg)  # type: ignore[arg-type]

    return _assemble(geom, blobs, out_size, out_shape, planner, dram_base, mark_index,
                     emit=lambda phases, plan, mark_index: emit_convtranspose(phases, geom, mark_index=mark_index))

# --------------------------------------------------------------------------------------------
# Fully connected layers on the FC engine (fc module)
# --------------------------------------------------------------------------------------------
@dataclass
class FcLayer:
    """A quantized fully connected layer over an input tensor (C, H, W) flattened in C, H, W order
    (ONNX Flatten + Gemm, Darknet ``connected``). ``bias`` is the unfolded int32 bias; the builder
    folds ``-zp_in * sum(w)`` into it as for CONV. ``mult``/``shift``/``mult_neg`` per output."""

    weight: np.ndarray  #: int8 (Co, C*H*W)
    bias: np.ndarray  #: int32 (Co,)
    mult: np.ndarray
    shift: np.ndarray
    mult_neg: np.ndarray | None = None
    zp_in: int = 0
    zp_out: int = 0
    act_min: int = -128
    act_max: int = 127


@dataclass(frozen=True)
class _FcShape:
    co: int
    ch: int
    hw: int  #: H*W of the input plane
    x_words: int  #: INP words of the input: channel blocks x pixels
    n_in: int  #: x elements the engine sums over (x_words * C, padded lanes have zero weights)
    slices: int  #: S = ceil(n_in / F) weight slices per output
    tile: int  #: outputs per FC instruction (a multiple of C)


def _fc_shape(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> _FcShape:
    hw, c = geom.hw, geom.c
    if not hw.fc:
        raise CompileError("FC needs the FC engine; turn on fc.ModuleGeneration")
    ch, h, w = (int(v) for v in in_shape)
    weight = np.asarray(layer.weight)
    if weight.dtype != np.int8 or weight.ndim != 2 or weight.shape[1] != ch * h * w:
        raise CompileError(f"fc weight must be int8 (Co, {ch * h * w}) for a {ch}x{h}x{w} input, got "
                           f"{weight.dtype} {weight.shape}")
    co = weight.shape[0]
    x_words = _blocks(ch, c) * h * w
    n_in = x_words * c
    f = hw.fc_lanes
    if n_in > hw.fc_in_depth or x_words > hw.inp_depth // 2:
        raise CompileError(f"fc over {ch}x{h}x{w} inputs ({n_in} lanes): the x buffer holds {hw.fc_in_depth} "
                           f"(fc.InputMemorySize) and an INP half {hw.inp_depth // 2 * c}")
    slices = -(-n_in // f)
    per_word = (c * c) // f
    by_wgt = (hw.wgt_depth // 2) * per_word // slices
    limit = min(by_wgt, hw.fc_out_max, (hw.prm_depth // 2) * c, (hw.out_depth // 2) * c)
    tile = limit // c * c
    if tile < 1:
        raise CompileError(f"fc with {n_in} inputs: {c} outputs ({-(-c * slices // per_word)} WGT words) do not fit "
                           f"a WGT half of {hw.wgt_depth // 2} words (or fc.OutputMemorySize < C)")
    largest = _FcShape(co, ch, h * w, x_words, n_in, slices, min(tile, _blocks(co, c) * c))
    # The weight image is laid out per tile, so the tile size must not depend on anything but the
    # geometry: the choice uses the bus-rate DDR model.
    return _fc_tile_choice(geom, largest, None)


def fc_weight_matrix(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> np.ndarray:
    """int8 (Co, n_in): column ``(cb*H*W + pixel)*C + lane`` is input channel cb*C + lane at that
    pixel, i.e. the order in which the x copy puts the INP words (zero for padded lanes)."""
    s = _fc_shape(geom, layer, in_shape)
    c = geom.c
    nb = _blocks(s.ch, c)
    w = np.zeros((s.co, nb * c, s.hw), dtype=np.int8)
    w[:, :s.ch] = np.asarray(layer.weight).reshape(s.co, s.ch, s.hw)
    return np.ascontiguousarray(w.reshape(s.co, nb, c, s.hw).transpose(0, 1, 3, 2).reshape(s.co, s.n_in))


def _fc_tiles(s: _FcShape) -> list[tuple[int, int]]:
    return [(o0, min(s.tile, s.co - o0)) for o0 in range(0, s.co, s.tile)]


def _fc_tile_choice(geom: Geometry, s: _FcShape, config: Any) -> _FcShape:
    """The tile size with the lowest estimated cycles among the largest fitting one and smaller
    ones: the first tile's weight load is not overlapped with any FC, so smaller tiles shorten
    it, while every tile adds fixed LOAD/FC/STORE costs."""
    import dataclasses

    c = geom.c
    best, best_cycles = s, None
    for parts in (1, 2, 4, 8, 16, 32, 64):
        tile = min(s.tile, -(-_blocks(s.co, parts) // c) * c)
        cand = dataclasses.replace(s, tile=max(c, tile))
        steps, out_slots = _fc_steps(geom, cand, None, ConvAddrs(0, 0, 0, 0))
        bw, lat = _ddr_model(config, geom)
        cycles = _fc_estimate(geom, steps, out_slots, bw, lat)
        if best_cycles is None or cycles < best_cycles:
            best, best_cycles = cand, cycles
    return best


def pack_fc_weights(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> tuple[bytes, list[int]]:
    """The weight stream per tile (``isa.Fc``: slice s of F bytes at byte (s % K)*F of word s // K),
    each word padded to the WGT pitch; returns the image and each tile's first word."""
    s = _fc_shape(geom, layer, in_shape)
    c, f = geom.c, geom.hw.fc_lanes
    per_word = (c * c) // f
    wm = fc_weight_matrix(geom, layer, in_shape)
    pitch = geom.pitch("WGT")
    out, firsts, word = [], [], 0
    for o0, n in _fc_tiles(s):
        sl = np.zeros((n, s.slices * f), dtype=np.int8)
        sl[:, :s.n_in] = wm[o0:o0 + n]
        words = -(-(n * s.slices) // per_word)
        img = np.zeros((words, pitch), dtype=np.int8)
        flat = np.zeros(words * per_word * f, dtype=np.int8)
        flat[:sl.size] = sl.reshape(-1)
        img[:, :per_word * f] = flat.reshape(words, per_word * f)
        out.append(img.tobytes())
        firsts.append(word)
        word += words
    return b"".join(out), firsts


def pack_fc_params(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> bytes:
    """PRM words per block of C outputs: folded bias, M, M_neg, S."""
    return _pack_weighted_params(geom, layer, _fc_shape(geom, layer, in_shape).co, "fc")


class _FcEmitter(_Emitter):
    """Tokens and order of an FC layer whose intermediate tiles have no STORE (``op.store`` None):
    the loads' C2L waits as for every layer; each FC pops L2C for its step's loads and never waits
    for a STORE (every tile writes its own OUT words); only the FC before the STORE pushes C2S."""

    def tokens(self) -> None:
        steps = self.steps
        last_reader: dict[tuple, int] = {}
        waits: list[int] = []
        for k, st in enumerate(steps):
            w = max((last_reader.get(ld.slot, -1) for ld in st.loads), default=-1)
            waits.append(w)
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
            return super().stream(mark_index, finish)
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


def _fc_estimate(geom: Geometry, steps: list[_Step], out_slots: int, bw: float, latency: int) -> int:
    """:func:`_estimate` for FC steps; a tile without STORE is costed with a one-word STORE."""
    est = [_Step(st.loads, [_Op(op.compute, op.store or isa.Store(x_size=1), op.cycles) for op in st.ops], st.reads)
           for st in steps]
    return _estimate(geom, est, max(out_slots, 1), bw, latency)


def _fc_steps(geom: Geometry, s: _FcShape, layer: FcLayer | None, addrs: ConvAddrs) -> tuple[list[_Step], int]:
    hw, c = geom.hw, geom.c
    per_word = (c * c) // hw.fc_lanes
    wh, ph = hw.wgt_depth // 2, hw.prm_depth // 2
    out_words = s.tile // c
    out_slots = min(OUT_SLOTS_MAX, hw.out_depth // out_words)
    pw, pp, po = geom.pitch("WGT"), geom.pitch("PRM"), geom.pitch("OUT")
    zp_out, act_min, act_max = (0, -128, 127) if layer is None else (int(layer.zp_out), int(layer.act_min),
                                                                     int(layer.act_max))
    # All parameters of the layer are loaded once when they fit PRM (one LOAD less per tile, whose
    # DDR latency the load-bound schedule would otherwise pay every tile); else per tile, alternating.
    resident = _blocks(s.co, c) <= hw.prm_depth
    # When OUT holds the whole output vector, every tile writes its own words and one STORE at the
    # end writes them all: a STORE between the weight loads would cost the load-bound schedule
    # a few bursts' worth of read bubbles per tile.
    whole_out = _blocks(s.co, c) <= hw.out_depth
    n_tiles = len(_fc_tiles(s))
    steps, first = [], 0
    for t, (o0, n) in enumerate(_fc_tiles(s)):
        half = t % 2
        st = _Step()
        if t == 0:
            st.loads += [_Load(ld, ("INP", 0)) for ld in _linear_loads(isa.Buf.INP, 0, addrs.inp, s.x_words,
                                                                        geom.pitch("INP"))]
            st.reads.add(("INP", 0))
            if resident:
                st.loads += [_Load(ld, ("PRM", "res")) for ld in _linear_loads(isa.Buf.PRM, 0, addrs.prm,
                                                                                _blocks(s.co, c), pp)]
        words = -(-(n * s.slices) // per_word)
        blocks = _blocks(n, c)
        st.loads += [_Load(ld, ("WGT", half)) for ld in _linear_loads(isa.Buf.WGT, half * wh, addrs.wgt + first * pw,
                                                                       words, pw)]
        if resident:
            prm_base = o0 // c
        else:
            prm_base = half * ph
            st.loads += [_Load(ld, ("PRM", half)) for ld in _linear_loads(isa.Buf.PRM, half * ph,
                                                                           addrs.prm + (o0 // c) * pp, blocks, pp)]
            st.reads.add(("PRM", half))
        st.reads.add(("WGT", half))
        first += words
        out_base = o0 // c if whole_out else (t % out_slots) * out_words
        fc = isa.Fc(inp_base=0, wgt_base=half * wh, prm_base=prm_base, out_base=out_base, n_in=s.n_in, n_out=n,
                    load_x=int(t == 0), zp_out=zp_out, act_min=act_min, act_max=act_max)
        store: isa.Store | None = isa.Store(sram_base=out_base, dram_addr=addrs.out + (o0 // c) * po, x_size=blocks)
        if whole_out:
            store = isa.Store(sram_base=0, dram_addr=addrs.out, x_size=_blocks(s.co, c)) if t == n_tiles - 1 else None
        cycles = n * s.slices + (s.x_words * -(-c // hw.fc_lanes) if t == 0 else 0) + _OP_OVERHEAD
        st.ops.append(_Op(fc, store, cycles))
        steps.append(st)
    return steps, out_slots


def plan_fc(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int], addrs: ConvAddrs,
            config: Any = None) -> tuple[list[_Step], Plan]:
    """Tiles of ``tile`` outputs (chosen by the cost model): the x vector is loaded into INP once
    and copied into the x buffer by the first FC (load_x); each tile's weight stream and PRM words
    alternate between the two WGT/PRM halves, so the LOAD of tile k+1 overlaps the FC of tile k
    (the layer is memory-bound: the FC engine consumes F >= B weight bytes per cycle)."""
    s = _fc_shape(geom, layer, in_shape)
    steps, out_slots = _fc_steps(geom, s, layer, addrs)
    bw, lat = _ddr_model(config, geom)
    plan = Plan("fc", (1, 1), s.tile // geom.c, "tiles-outer", "streamed", len(steps), out_slots,
                _fc_estimate(geom, steps, out_slots, bw, lat), s.co * s.ch * s.hw,
                _dma_bytes(geom, [_Step(st.loads, [op for op in st.ops if op.store is not None]) for st in steps]))
    return steps, plan


def fc_out_shape(layer: FcLayer) -> tuple[int, int, int]:
    return (int(np.shape(layer.weight)[0]), 1, 1)


def build_fc_program(config: Any, layer: FcLayer, x: np.ndarray, *, dram_base: int = 0,
                     mark_index: int = 0) -> LayerProgram:
    """A complete program computing the fully connected ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = _geometry(config)
    cfg = None if isinstance(config, Geometry) else config
    shape = tuple(int(v) for v in np.shape(x))
    wimg, _ = pack_fc_weights(geom, layer, shape)  # type: ignore[arg-type]
    blobs = [("input", pack_input(geom, x)), ("weights", wimg), ("params", pack_fc_params(geom, layer, shape))]  # type: ignore[arg-type]
    co = fc_out_shape(layer)[0]
    out_size = _blocks(co, geom.c) * geom.pitch("OUT")
    return _assemble(geom, blobs, out_size, (co, 1, 1),
                     lambda a: plan_fc(geom, layer, shape, a, cfg), dram_base, mark_index)  # type: ignore[arg-type]
