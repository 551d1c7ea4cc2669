"""Convolutions whose reduction does not fit the buffers, as partial-sum chains.

A CONV sums over all the input channel blocks it is given, so one output block's weights
(``cin_blocks * kh * kw`` WGT words) and its input tile (``cin_blocks`` planes of the receptive
field) must fit WGT and INP. When they do not (VGG-16's first FC as a 7x7 conv on a small
configuration, YOLOv2-tiny's 3x3x1024 layers on a small WGT), the planner splits the input
blocks of every output block into *chunks* and runs one CONV per chunk: the first holds its int32
sums in the conv engine's accumulator (``acc_keep``), the middle ones continue and hold them
(``acc_in`` + ``acc_keep``), the last continues them and writes the requantized tile
(``acc_in``). The sums are exact, so the chain equals one CONV over all blocks bit for bit.

Loop order: output tiles, then output blocks, then the chunks of the block (a chain must run
uninterrupted on the conv engine: the accumulator holds one tile of one block). Each chunk is one
step: its weights (the chunk's words of the block, contiguous in the layer's weight image) and
the block's PRM word go to the WGT/PRM half not in use, and -- unless the tile's whole input fits
an INP half, when it is loaded once per tile -- its input planes to the INP half not in use, so
the next chunk's loads overlap this chunk's CONV.
"""

from __future__ import annotations

from typing import Any, Iterator

from dlproc.hardware import isa
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.schedule import (ConvAddrs, OP_OVERHEAD, OUT_SLOTS_MAX, SIZE_MAX, Plan, Step, StepLoad,
                                               StepOp, ddr_model, estimate_steps, linear_loads, steps_dma_bytes)
from dlproc.compiler.planners.tiling import extent, tile_candidates, tile_grid, tile_input_load

__all__ = ["plan_conv_partial"]


def plan_conv_partial(geom: Geometry, layer: Any, s: Any, addrs: ConvAddrs, ranges: list[tuple[int, int]],
                      wgt_start: list[int], macs: int, config: Any = None) -> tuple[list[Step], Plan] | None:
    """The cheapest partial-sum schedule of a conv (``s`` a ``ConvShape``, ``ranges`` each output
    block's input blocks, ``wgt_start`` its first word in the weight image, ``macs`` the layer's
    MACs for the plan), or None when not even one input block of one output pixel fits."""
    bw, lat = ddr_model(config, geom)
    best: tuple[int, list[Step], Plan] | None = None
    for chunk, wslots in _chunk_sizes(geom, s, ranges):
        for whole_input in (True, False):
            for th, tw in _tiles(geom, s, ranges, chunk, whole_input):
                steps = _partial_steps(geom, layer, s, addrs, ranges, wgt_start, chunk, wslots, whole_input, th, tw)
                out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // (th * tw))
                est = estimate_steps(geom, steps, out_slots, bw, lat)
                if best is None or est < best[0]:
                    chunks = max(_n_chunks(hi - lo, chunk) for lo, hi in ranges)
                    plan = Plan("conv", (th, tw), 1, "tiles-outer", "streamed", len(steps), out_slots, est, macs,
                                steps_dma_bytes(geom, steps), 1 if whole_input else 2, chunks=chunks)
                    best = (est, steps, plan)
    return None if best is None else (best[1], best[2])


def _n_chunks(blocks: int, chunk: int) -> int:
    return -(-blocks // chunk)


def _chunk_sizes(geom: Geometry, s: Any, ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(input blocks per CONV, WGT slots): the largest chunk whose weights fit a WGT half (double
    buffered), balanced so all chunks of a block are about equal; a single WGT slot only when not
    even one block's taps fit a half. A block needs one PRM word per slot."""
    taps = s.kh * s.kw
    nb = max(hi - lo for lo, hi in ranges)
    for wslots in (2, 1):
        if geom.depth("PRM") < wslots:
            continue
        k_max = min(nb, geom.depth("WGT") // wslots // taps, SIZE_MAX)
        if k_max >= 1:
            yield -(-nb // _n_chunks(nb, k_max)), wslots
            return


def _tiles(geom: Geometry, s: Any, ranges: list[tuple[int, int]], chunk: int,
           whole_input: bool) -> list[tuple[int, int]]:
    """Output tiles whose input fits: the whole input of a block once in INP (``whole_input``:
    loaded once per tile and block range) or one chunk's planes in an INP half."""
    planes = max(hi - lo for lo, hi in ranges) if whole_input else chunk
    cap = geom.depth("INP") if whole_input else geom.depth("INP") // 2

    def fits(th: int, tw: int) -> bool:
        in_w = extent(tw, s.stride[1], s.kw, s.dil[1])
        words = planes * extent(th, s.stride[0], s.kh, s.dil[0]) * in_w
        return (th * tw <= geom.acc_depth and th * tw <= geom.depth("OUT") and words <= cap and in_w <= SIZE_MAX)

    cands = tile_candidates(s.ho, s.wo, fits)
    return cands[:4]  # the largest tiles: a split layer is load-bound, more tiles only reload weights


def _partial_steps(geom: Geometry, layer: Any, s: Any, addrs: ConvAddrs, ranges: list[tuple[int, int]],
                   wgt_start: list[int], chunk: int, wslots: int, whole_input: bool, th: int,
                   tw: int) -> list[Step]:
    pin, pw, pp, po = geom.pitch("INP"), geom.pitch("WGT"), geom.pitch("PRM"), geom.pitch("OUT")
    tiles = tile_grid(s.ho, s.wo, th, tw, (s.kh, s.kw), s.stride, s.dil, s.pads, s.h, s.w)
    taps = s.kh * s.kw
    wgt_half, prm_half = geom.depth("WGT") // wslots, geom.depth("PRM") // wslots
    inp_half = geom.depth("INP") // 2
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // (th * tw))
    zp_in = int(layer.zp_in)
    steps: list[Step] = []
    loaded: tuple | None = None  # the (tile, block range) whose whole input is in INP
    links = stores = 0
    for t, tile in enumerate(tiles):
        plane = tile.hp * tile.wp
        for ob, (lo, hi) in enumerate(ranges):
            n = _n_chunks(hi - lo, chunk)
            for k in range(n):
                c_lo, c_hi = lo + k * chunk, min(hi, lo + (k + 1) * chunk)
                st = Step()
                if whole_input:
                    if loaded != (t, lo, hi):
                        loaded = (t, lo, hi)
                        st.loads.append(StepLoad(tile_input_load(tile, s.h, s.w, (lo, hi), addrs.inp, pin, 0, zp_in),
                                                 ("INP", 0)))
                    inp_slot, inp_base = ("INP", 0), (c_lo - lo) * plane
                else:
                    half = links % 2
                    st.loads.append(StepLoad(tile_input_load(tile, s.h, s.w, (c_lo, c_hi), addrs.inp, pin,
                                                             half * inp_half, zp_in), ("INP", half)))
                    inp_slot, inp_base = ("INP", half), half * inp_half
                wslot = links % wslots
                words = (c_hi - c_lo) * taps
                first_word = wgt_start[ob] + (c_lo - lo) * taps
                for ld in linear_loads(isa.Buf.WGT, wslot * wgt_half, addrs.wgt + first_word * pw, words, pw):
                    st.loads.append(StepLoad(ld, ("WGT", wslot)))
                for ld in linear_loads(isa.Buf.PRM, wslot * prm_half, addrs.prm + ob * pp, 1, pp):
                    st.loads.append(StepLoad(ld, ("WGT", wslot)))  # PRM shares the weights' slot lifetime
                st.reads = {inp_slot, ("WGT", wslot)}
                last = k == n - 1
                out_base = (stores % out_slots) * th * tw if last else 0
                conv = isa.Conv(
                    inp_base=inp_base, wgt_base=wslot * wgt_half, prm_base=wslot * prm_half, out_base=out_base,
                    in_w=tile.wp, in_plane=plane, out_h=tile.th, out_w=tile.tw, kh=s.kh, kw=s.kw,
                    stride_y=s.stride[0], stride_x=s.stride[1], dil_y=s.dil[0], dil_x=s.dil[1],
                    cin_blocks=c_hi - c_lo, zp_out=int(layer.zp_out), act_min=int(layer.act_min),
                    act_max=int(layer.act_max), acc_in=int(k > 0), acc_keep=int(not last))
                store = None
                if last:
                    store = isa.Store(sram_base=out_base, dram_addr=addrs.out + ((ob * s.ho + tile.r0) * s.wo + tile.c0) * po,
                                      x_size=tile.tw, y_size=tile.th, y_stride=s.wo)
                    stores += 1
                st.ops.append(StepOp(conv, store, tile.th * tile.tw * words + OP_OVERHEAD))
                steps.append(st)
                links += 1
    return steps

