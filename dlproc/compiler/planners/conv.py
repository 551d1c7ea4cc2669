"""The conv planner: convolutions (grouped and dilated included) on the conv engine
(``gateware/conv.py``), with the weight and parameter images in the order CONV reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.conv_dw import (DwLink, depthwise_links, depthwise_refusal, dw_conv_cycles, dw_rows,
                                              pack_dw_words)
from dlproc.compiler.planners.conv_partial import plan_conv_partial
from dlproc.compiler.planners.packing import channel_blocks, pack_weighted_params
from dlproc.compiler.planners.schedule import (ConvAddrs, OP_OVERHEAD, OUT_SLOTS_MAX, PAD_MAX, Plan, SIZE_MAX, Step,
                                               StepLoad, StepOp, ddr_model, estimate_steps, linear_loads,
                                               steps_dma_bytes)
from dlproc.compiler.planners.tiling import (as_pads, as_pair, block_group_sizes, extent, tile_candidates, tile_grid,
                                             tile_input_load)

__all__ = [
    "ConvLayer", "ConvShape", "conv_shape", "pack_conv_weights", "pack_conv_params", "conv_macs", "plan_conv",
    "plan_conv_shape",
]


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
    #: 256 int8 entries: the results go through the output stage's activation table (planners/act_table.py)
    act_table: np.ndarray | None = None


@dataclass(frozen=True)
class ConvShape:
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


def conv_shape(layer: ConvLayer, in_shape: tuple[int, int, int]) -> ConvShape:
    w = np.asarray(layer.weight)
    if w.dtype != np.int8 or w.ndim != 4:
        raise CompileError(f"conv weight must be int8 (Co, Ci/groups, kh, kw), got {w.dtype} {w.shape}")
    ci, h, wd = in_shape
    co, cig, kh, kw = w.shape
    g = int(layer.groups)
    if g < 1 or ci % g or co % g or cig != ci // g:
        raise CompileError(f"conv groups={g} does not fit input channels {ci}, output channels {co} and "
                           f"weight shape {w.shape} (need Ci and Co divisible by groups, weight dim 1 = Ci/groups)")
    stride, dil, pads = as_pair(layer.stride, "stride"), as_pair(layer.dilation, "dilation"), as_pads(layer.pads)
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
    return ConvShape(ci, h, wd, co, kh, kw, stride, pads, dil, g, ho, wo)


def _ob_input_blocks(s: ConvShape, c: int) -> list[tuple[int, int]]:
    """For each output block: the range [lo, hi) of input blocks its channels' groups read.

    Grouped convolutions are mapped onto the dense C x C array by zeroing the weights between
    different groups; an output block straddling groups reads the union of their input blocks."""
    cig, cog = s.ci // s.groups, s.co // s.groups
    ranges = []
    for ob in range(channel_blocks(s.co, c)):
        co_lo, co_hi = ob * c, min(s.co, ob * c + c) - 1
        g_lo, g_hi = co_lo // cog, co_hi // cog
        ranges.append((g_lo * cig // c, channel_blocks((g_hi + 1) * cig, c)))
    return ranges


def pack_conv_weights(geom: Geometry, layer: ConvLayer, s: ConvShape) -> tuple[bytes, list[int]]:
    """Weight image: per output block, words (cb, ky, kx) of C x C [co][ci]; returns the image and
    each block's first word (in words, relative to the image)."""
    c = geom.c
    links = depthwise_links(geom, s)
    if links is not None:
        return pack_dw_words(geom, layer.weight, s, links)
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


def pack_conv_params(geom: Geometry, layer: ConvLayer, s: ConvShape) -> bytes:
    """PRM image: one word per output block with the folded bias and the requantization params."""
    return pack_weighted_params(geom, layer, s.co, "conv")


def conv_macs(s: ConvShape) -> int:
    return s.ho * s.wo * s.co * (s.ci // s.groups) * s.kh * s.kw


def plan_conv(geom: Geometry, layer: ConvLayer, in_shape: tuple[int, int, int], addrs: ConvAddrs,
              config: Any = None) -> tuple[list[Step], Plan]:
    """Tile a conv layer; returns its steps (instructions without tokens) and the plan summary."""
    return plan_conv_shape(geom, layer, conv_shape(layer, in_shape), addrs, config)


def plan_conv_shape(geom: Geometry, layer: ConvLayer, s: ConvShape, addrs: ConvAddrs,
                     config: Any = None) -> tuple[list[Step], Plan]:
    """:func:`plan_conv` for a checked shape (the transposed conv's phases build theirs directly)."""
    c = geom.c
    ranges = _ob_input_blocks(s, c)
    n_ob = len(ranges)
    taps = s.kh * s.kw
    # A depthwise layer in the conv engine's depthwise mode: one WGT word per link and block
    # (planners/conv_dw.py); otherwise one word per input block and tap.
    links = depthwise_links(geom, s)
    ob_words = [len(links) if links else (hi - lo) * taps for lo, hi in ranges]
    wgt_start = list(np.cumsum([0] + ob_words[:-1]))
    total_words = sum(ob_words)
    resident = total_words <= geom.depth("WGT") and n_ob <= geom.depth("PRM")
    bw, lat = ddr_model(config, geom)
    best: tuple[int, list[Step], Plan] | None = None
    group_sizes = block_group_sizes(n_ob)
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
                steps = _conv_steps(geom, layer, s, addrs, ranges, wgt_start, ob_words, groups, g_ranges, wmode,
                                    wslots, order, th, tw, inp_slots, links)
                out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // (th * tw))
                est = estimate_steps(geom, steps, out_slots, bw, lat)
                if best is None or est < best[0]:
                    plan = Plan("conv", (th, tw), g, order, wmode, len(steps), out_slots, est, conv_macs(s),
                                steps_dma_bytes(geom, steps), inp_slots, chunks=len(links) if links else 1,
                                note=_depthwise_note(geom, s, links))
                    best = (est, steps, plan)
        if best is not None:
            break
    if best is None:
        # One output block's reduction does not fit: split it over its input blocks into a chain
        # of CONVs that pass their partial sums on in the accumulator (planners/conv_partial.py).
        partial = plan_conv_partial(geom, layer, s, addrs, ranges, [int(v) for v in wgt_start], conv_macs(s), config)
        if partial is not None:
            return partial
        window = extent(1, 1, s.kh, s.dil[0]) * extent(1, 1, s.kw, s.dil[1])
        raise CompileError(
            f"conv {s.ci}->{s.co} {s.kh}x{s.kw} does not fit this configuration even as a partial-sum chain: "
            f"one input block's {s.kh * s.kw} taps need {s.kh * s.kw} WGT words (WGT has {geom.depth('WGT')}) "
            f"and its window for one output pixel {window} INP words (INP has {geom.depth('INP')}); "
            "raise WeightMemorySize / InputMemorySize")
    return best[1], best[2]


def _depthwise_note(geom: Geometry, s: ConvShape, links: list[DwLink] | None) -> str:
    if links:
        return (f"depthwise mode, {len(links)} CONV(s) per tile and block" if len(links) > 1 else "depthwise mode")
    reason = depthwise_refusal(geom, s)
    return f"depthwise on the dense array (one multiplier per C): {reason}" if reason else ""


def _conv_candidates(geom: Geometry, s: ConvShape, ranges: list[tuple[int, int]], ob_words: list[int],
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
        in_w = extent(tw, s.stride[1], s.kw, s.dil[1])
        in_words = nblk * extent(th, s.stride[0], s.kh, s.dil[0]) * in_w
        return (px <= geom.acc_depth and px <= geom.depth("OUT") and in_words <= geom.depth("INP") // inp_slots
                and in_w <= SIZE_MAX)

    cands = tile_candidates(s.ho, s.wo, fits)
    for order in ("tiles-outer", "groups-outer"):
        # With resident weights "groups outer" only reloads the input more often.
        if order == "groups-outer" and (len(groups) == 1 or wmode == "resident"):
            continue
        for th, tw in cands:
            yield groups, g_ranges, wmode, wslots, order, th, tw


def _conv_steps(geom: Geometry, layer: ConvLayer, s: ConvShape, addrs: ConvAddrs, ranges: list[tuple[int, int]],
                wgt_start: list[int], ob_words: list[int], groups: list[list[int]], g_ranges: list[tuple[int, int]],
                wmode: str, wslots: int, order: str, th: int, tw: int, inp_slots: int,
                links: list[DwLink] | None = None) -> list[Step]:
    pin, pw, pp, po = geom.pitch("INP"), geom.pitch("WGT"), geom.pitch("PRM"), geom.pitch("OUT")
    tiles = tile_grid(s.ho, s.wo, th, tw, (s.kh, s.kw), s.stride, s.dil, s.pads, s.h, s.w)
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
    steps: list[Step] = []
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
        st = Step()
        lo, hi = g_ranges[j]
        # ---- weights and parameters of group j ----
        if wmode == "resident":
            if j not in resident_loaded:
                resident_loaded.add(j)
                o0, n = groups[j][0], len(groups[j])
                words = sum(ob_words[o] for o in groups[j])
                for ld in linear_loads(isa.Buf.WGT, wgt_start[o0], addrs.wgt + wgt_start[o0] * pw, words, pw):
                    st.loads.append(StepLoad(ld, ("WGT", "res", j)))
                for ld in linear_loads(isa.Buf.PRM, o0, addrs.prm + o0 * pp, n, pp):
                    st.loads.append(StepLoad(ld, ("PRM", "res", j)))
            wbase = {o: wgt_start[o] for o in groups[j]}
            pbase = {o: o for o in groups[j]}
            wslot_id = ("WGT", "res", j)
        else:
            if cur_wgt != j:
                cur_wgt = j
                wgt_slot = wgt_loads % wslots
                wgt_loads += 1
                o0, n = groups[j][0], len(groups[j])
                words = sum(ob_words[o] for o in groups[j])
                for ld in linear_loads(isa.Buf.WGT, wgt_slot * wgt_half, addrs.wgt + wgt_start[o0] * pw, words, pw):
                    st.loads.append(StepLoad(ld, ("WGT", wgt_slot)))
                for ld in linear_loads(isa.Buf.PRM, wgt_slot * prm_half, addrs.prm + o0 * pp, n, pp):
                    st.loads.append(StepLoad(ld, ("WGT", wgt_slot)))  # PRM shares the weights' slot lifetime
            wbase, pbase, acc = {}, {}, 0
            for o in groups[j]:
                wbase[o] = wgt_slot * wgt_half + acc
                acc += ob_words[o]
                pbase[o] = wgt_slot * prm_half + (o - groups[j][0])
            wslot_id = ("WGT", wgt_slot)
        # ---- input tile ----
        key = (t, (lo, hi))
        if cur_inp != key:
            cur_inp = key
            inp_slot = inp_loads % inp_slots
            inp_loads += 1
            st.loads.append(StepLoad(tile_input_load(tile, s.h, s.w, (lo, hi), addrs.inp, pin, inp_slot * inp_half,
                                                     zp_in), ("INP", inp_slot)))
        st.reads = {("INP", inp_slot), wslot_id}
        plane = tile.hp * tile.wp
        px = tile.th * tile.tw
        for o in groups[j]:
            olo, ohi = ranges[o]
            out_base = (op_index % out_slots) * px_max
            store = isa.Store(sram_base=out_base, dram_addr=addrs.out + ((o * s.ho + tile.r0) * s.wo + tile.c0) * po,
                              x_size=tile.tw, y_size=tile.th, y_stride=s.wo)
            if links:
                st.ops += _depthwise_ops(layer, s, tile, links, inp_slot * inp_half + (olo - lo) * plane, wbase[o],
                                         pbase[o], out_base, store)
                op_index += 1
                continue
            conv = isa.Conv(
                inp_base=inp_slot * inp_half + (olo - lo) * plane, wgt_base=wbase[o], prm_base=pbase[o],
                out_base=out_base, in_w=tile.wp, in_plane=plane, out_h=tile.th, out_w=tile.tw, kh=s.kh, kw=s.kw,
                stride_y=s.stride[0], stride_x=s.stride[1], dil_y=s.dil[0], dil_x=s.dil[1], cin_blocks=ohi - olo,
                zp_out=int(layer.zp_out), act_min=int(layer.act_min), act_max=int(layer.act_max))
            st.ops.append(StepOp(conv, store, px * (ohi - olo) * taps + OP_OVERHEAD))
            op_index += 1
        steps.append(st)
    return steps


def _depthwise_ops(layer: ConvLayer, s: ConvShape, tile: Any, links: list[DwLink], inp_base: int, wgt_base: int,
                   prm_base: int, out_base: int, store: isa.Store) -> list[StepOp]:
    """One output tile and block in the depthwise mode: one CONV per link, chained through the
    accumulator when there are several (the last one writes OUT and has the STORE)."""
    rows = dw_rows(s, links)
    ops = []
    for k, link in enumerate(links):
        last = k == len(links) - 1
        conv = isa.Conv(
            inp_base=inp_base + link.ky0 * tile.wp + link.kx0, wgt_base=wgt_base + k, prm_base=prm_base,
            out_base=out_base if last else 0, in_w=tile.wp, in_plane=tile.hp * tile.wp, out_h=tile.th,
            out_w=tile.tw, kh=link.kh, kw=link.kw, stride_y=s.stride[0], stride_x=s.stride[1],
            zp_out=int(layer.zp_out), act_min=int(layer.act_min), act_max=int(layer.act_max),
            acc_in=int(k > 0), acc_keep=int(not last), dw=1, dw_rows=rows)
        ops.append(StepOp(conv, store if last else None, dw_conv_cycles(conv, OP_OVERHEAD)))
    return ops
