"""The FC planner: fully connected layers on the FC engine (``gateware/fc.py``), weights streamed
as C x C tiles of the weight matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import channel_blocks, pack_weighted_params
from dlproc.compiler.planners.schedule import (ConvAddrs, OP_OVERHEAD, OUT_SLOTS_MAX, Plan, Step, StepLoad, StepOp,
                                               ddr_model, estimate_steps, linear_loads, steps_dma_bytes)

__all__ = [
    "FcLayer", "FcShape", "fc_shape", "fc_weight_matrix", "pack_fc_weights", "pack_fc_params", "plan_fc",
    "fc_out_shape",
]


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
    #: 256 int8 entries: the results go through the output stage's activation table (planners/act_table.py)
    act_table: np.ndarray | None = None


@dataclass(frozen=True)
class FcShape:
    co: int
    ch: int
    hw: int  #: H*W of the input plane
    x_words: int  #: INP words of the input: channel blocks x pixels
    n_in: int  #: x elements the engine sums over (x_words * C, padded lanes have zero weights)
    slices: int  #: S = ceil(n_in / F) weight slices per output
    tile: int  #: outputs per FC instruction: a multiple of C, or fewer than C (see ``sub_word``)
    hw_c: int = 1  #: C, the lanes of an OUT word

    @property
    def sub_word(self) -> bool:
        """The weights of C outputs do not fit a WGT half: each FC instruction computes ``tile`` < C
        outputs, starting at lane ``o0 % C`` of its word (``Fc.lane0``), and several instructions
        fill one C-lane OUT word."""
        return self.tile % self.hw_c != 0


def fc_shape(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> FcShape:
    hw, c = geom.hw, geom.c
    if not hw.fc:
        raise CompileError("FC needs the FC engine; turn on fc.ModuleGeneration")
    ch, h, w = (int(v) for v in in_shape)
    weight = np.asarray(layer.weight)
    if weight.dtype != np.int8 or weight.ndim != 2 or weight.shape[1] != ch * h * w:
        raise CompileError(f"fc weight must be int8 (Co, {ch * h * w}) for a {ch}x{h}x{w} input, got "
                           f"{weight.dtype} {weight.shape}")
    co = weight.shape[0]
    x_words = channel_blocks(ch, c) * h * w
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
        # Fewer than C outputs per instruction, each instruction's outputs starting inside a word;
        # OUT must then hold the whole output vector, since the words are filled over several
        # instructions and stored once at the end.
        tile = min(limit, co)
        if tile < 1:
            raise CompileError(f"fc with {n_in} inputs: one output's {slices} weight slices "
                               f"({-(-slices // per_word)} WGT words) do not fit a WGT half of {hw.wgt_depth // 2} "
                               "words; raise fc.WeightMemorySize or lower the input size")
        if channel_blocks(co, c) > hw.out_depth:
            raise CompileError(f"fc with {n_in} inputs runs {tile} outputs per instruction (C = {c} outputs do not "
                               f"fit a WGT half), which needs all {channel_blocks(co, c)} output words in OUT "
                               f"(OUT has {hw.out_depth}); raise fc.OutputMemorySize or WeightMemorySize")
        return FcShape(co, ch, h * w, x_words, n_in, slices, tile, c)
    largest = FcShape(co, ch, h * w, x_words, n_in, slices, min(tile, channel_blocks(co, c) * c), c)
    # The weight image is laid out per tile, so the tile size must not depend on anything but the
    # geometry: the choice uses the bus-rate DDR model.
    return _fc_tile_choice(geom, largest, None)


def fc_weight_matrix(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> np.ndarray:
    """int8 (Co, n_in): column ``(cb*H*W + pixel)*C + lane`` is input channel cb*C + lane at that
    pixel, i.e. the order in which the x copy puts the INP words (zero for padded lanes)."""
    s = fc_shape(geom, layer, in_shape)
    c = geom.c
    nb = channel_blocks(s.ch, c)
    w = np.zeros((s.co, nb * c, s.hw), dtype=np.int8)
    w[:, :s.ch] = np.asarray(layer.weight).reshape(s.co, s.ch, s.hw)
    return np.ascontiguousarray(w.reshape(s.co, nb, c, s.hw).transpose(0, 1, 3, 2).reshape(s.co, s.n_in))


def _fc_tiles(s: FcShape) -> list[tuple[int, int]]:
    return [(o0, min(s.tile, s.co - o0)) for o0 in range(0, s.co, s.tile)]


def _fc_tile_choice(geom: Geometry, s: FcShape, config: Any) -> FcShape:
    """The tile size with the lowest estimated cycles among the largest fitting one and smaller
    ones: the first tile's weight load is not overlapped with any FC, so smaller tiles shorten
    it, while every tile adds fixed LOAD/FC/STORE costs."""
    import dataclasses

    c = geom.c
    if s.sub_word:  # the largest tile that fits is already below one word
        return s
    best, best_cycles = s, None
    for parts in (1, 2, 4, 8, 16, 32, 64):
        tile = min(s.tile, -(-channel_blocks(s.co, parts) // c) * c)
        cand = dataclasses.replace(s, tile=max(c, tile))
        steps, out_slots = _fc_steps(geom, cand, None, ConvAddrs(0, 0, 0, 0))
        bw, lat = ddr_model(config, geom)
        cycles = _fc_estimate(geom, steps, out_slots, bw, lat)
        if best_cycles is None or cycles < best_cycles:
            best, best_cycles = cand, cycles
    return best


def pack_fc_weights(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int]) -> tuple[bytes, list[int]]:
    """The weight stream per tile (``isa.Fc``: slice s of F bytes at byte (s % K)*F of word s // K),
    each word padded to the WGT pitch; returns the image and each tile's first word."""
    s = fc_shape(geom, layer, in_shape)
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
    return pack_weighted_params(geom, layer, fc_shape(geom, layer, in_shape).co, "fc")


def _fc_estimate(geom: Geometry, steps: list[Step], out_slots: int, bw: float, latency: int) -> int:
    """:func:`estimate_steps` for FC steps; a tile without STORE is costed with a one-word STORE."""
    est = [Step(st.loads, [StepOp(op.compute, op.store or isa.Store(x_size=1), op.cycles) for op in st.ops], st.reads)
           for st in steps]
    return estimate_steps(geom, est, max(out_slots, 1), bw, latency)


def _fc_steps(geom: Geometry, s: FcShape, layer: FcLayer | None, addrs: ConvAddrs) -> tuple[list[Step], int]:
    hw, c = geom.hw, geom.c
    per_word = (c * c) // hw.fc_lanes
    wh, ph = hw.wgt_depth // 2, hw.prm_depth // 2
    out_words = max(1, s.tile // c)
    out_slots = min(OUT_SLOTS_MAX, hw.out_depth // out_words)
    pw, pp, po = geom.pitch("WGT"), geom.pitch("PRM"), geom.pitch("OUT")
    zp_out, act_min, act_max = (0, -128, 127) if layer is None else (int(layer.zp_out), int(layer.act_min),
                                                                     int(layer.act_max))
    # All parameters of the layer are loaded once when they fit PRM (one LOAD less per tile, whose
    # DDR latency the load-bound schedule would otherwise pay every tile); else per tile, alternating.
    resident = channel_blocks(s.co, c) <= hw.prm_depth
    # When OUT holds the whole output vector, every tile writes its own words and one STORE at the
    # end writes them all: a STORE between the weight loads would cost the load-bound schedule
    # a few bursts' worth of read bubbles per tile.
    whole_out = channel_blocks(s.co, c) <= hw.out_depth
    assert whole_out or not s.sub_word, "fc_shape refuses sub-word tiles without the whole output in OUT"
    n_tiles = len(_fc_tiles(s))
    steps, first = [], 0
    for t, (o0, n) in enumerate(_fc_tiles(s)):
        half = t % 2
        st = Step()
        if t == 0:
            st.loads += [StepLoad(ld, ("INP", 0)) for ld in linear_loads(isa.Buf.INP, 0, addrs.inp, s.x_words,
                                                                        geom.pitch("INP"))]
            st.reads.add(("INP", 0))
            if resident:
                st.loads += [StepLoad(ld, ("PRM", "res")) for ld in linear_loads(isa.Buf.PRM, 0, addrs.prm,
                                                                                channel_blocks(s.co, c), pp)]
        words = -(-(n * s.slices) // per_word)
        lane0 = o0 % c  # non-zero only for sub-word tiles
        blocks = channel_blocks(lane0 + n, c)
        st.loads += [StepLoad(ld, ("WGT", half)) for ld in linear_loads(isa.Buf.WGT, half * wh, addrs.wgt + first * pw,
                                                                       words, pw)]
        if resident:
            prm_base = o0 // c
        else:
            prm_base = half * ph
            st.loads += [StepLoad(ld, ("PRM", half)) for ld in linear_loads(isa.Buf.PRM, half * ph,
                                                                           addrs.prm + (o0 // c) * pp, blocks, pp)]
            st.reads.add(("PRM", half))
        st.reads.add(("WGT", half))
        first += words
        out_base = o0 // c if whole_out else (t % out_slots) * out_words
        fc = isa.Fc(inp_base=0, wgt_base=half * wh, prm_base=prm_base, out_base=out_base, n_in=s.n_in, n_out=n,
                    load_x=int(t == 0), zp_out=zp_out, act_min=act_min, act_max=act_max, lane0=lane0)
        store: isa.Store | None = isa.Store(sram_base=out_base, dram_addr=addrs.out + (o0 // c) * po, x_size=blocks)
        if whole_out:
            store = isa.Store(sram_base=0, dram_addr=addrs.out, x_size=channel_blocks(s.co, c)) if t == n_tiles - 1 else None
        cycles = n * s.slices + (s.x_words * -(-c // hw.fc_lanes) if t == 0 else 0) + OP_OVERHEAD
        st.ops.append(StepOp(fc, store, cycles))
        steps.append(st)
    return steps, out_slots


def plan_fc(geom: Geometry, layer: FcLayer, in_shape: tuple[int, int, int], addrs: ConvAddrs,
            config: Any = None) -> tuple[list[Step], Plan]:
    """Tiles of ``tile`` outputs (chosen by the cost model): the x vector is loaded into INP once
    and copied into the x buffer by the first FC (load_x); each tile's weight stream and PRM words
    alternate between the two WGT/PRM halves, so the LOAD of tile k+1 overlaps the FC of tile k
    (the layer is memory-bound: the FC engine consumes F >= B weight bytes per cycle)."""
    s = fc_shape(geom, layer, in_shape)
    steps, out_slots = _fc_steps(geom, s, layer, addrs)
    bw, lat = ddr_model(config, geom)
    plan = Plan("fc", (1, 1), max(1, s.tile // geom.c), "tiles-outer", "streamed", len(steps), out_slots,
                _fc_estimate(geom, steps, out_slots, bw, lat), s.co * s.ch * s.hw,
                steps_dma_bytes(geom, [Step(st.loads, [op for op in st.ops if op.store is not None]) for st in steps]))
    return steps, plan


def fc_out_shape(layer: FcLayer) -> tuple[int, int, int]:
    return (int(np.shape(layer.weight)[0]), 1, 1)
