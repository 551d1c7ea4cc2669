"""The pool planner: max and average pooling on the pool engine (``gateware/pool.py``), average
pooling's border divisors folded into the PRM words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.costs import pool_plane_cycles
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import channel_blocks, check_requant, prm_word
from dlproc.compiler.planners.schedule import (ConvAddrs, OP_OVERHEAD, OUT_SLOTS_MAX, PAD_MAX, Plan, Step, StepLoad,
                                               StepOp, ddr_model, estimate_steps, linear_loads, steps_dma_bytes)
from dlproc.compiler.planners.tiling import (as_pads, as_pair, block_group_sizes, extent, tile_candidates, tile_grid,
                                             tile_input_load)

__all__ = ["PoolLayer", "PoolShape", "pool_shape", "plan_pool", "pool_params"]


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


@dataclass(frozen=True)
class PoolShape:
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


def pool_shape(layer: PoolLayer, in_shape: tuple[int, int, int]) -> PoolShape:
    ch, h, w = in_shape
    kind = layer.kind
    if kind == "global_avg":
        k, stride, pads = (h, w), (1, 1), (0, 0, 0, 0)
        if h > 31 or w > 31:
            raise CompileError(f"global average pool over {h}x{w}: the POOL window is at most 31x31 (average of "
                               "averages would not be bit-exact); reduce the plane first")
    elif kind in ("max", "avg"):
        k, stride, pads = as_pair(layer.kernel, "kernel"), as_pair(layer.stride, "stride"), as_pads(layer.pads)
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
        return PoolShape(ch, h, w, k, stride, pads, ho, wo, avg, ((1, 0),), full)
    mult, shift = np.asarray(layer.mult), np.asarray(layer.shift)
    if mult.ndim == 0 and shift.ndim == 0:
        if not layer.count_include_pad and max(pads) > 0:
            from dlproc.targets.golden.windows import window_counts
            if np.any(window_counts(h, w, k, stride, pads) != k[0] * k[1]):
                raise CompileError(
                    "average pool with count_include_pad=False over padding needs a divisor per window: pass "
                    "mult/shift as (Ho, Wo) arrays (dlproc.targets.golden.ops.avgpool_multipliers)")
        pair = (int(mult), int(shift))
        check_requant(np.array([pair[0]]), np.array([pair[0]]), np.array([pair[1]]), "average pool")
        return PoolShape(ch, h, w, k, stride, pads, ho, wo, avg, (pair,), full)
    try:
        mult, shift = np.broadcast_to(mult, (ho, wo)), np.broadcast_to(shift, (ho, wo))
    except ValueError:
        raise CompileError(f"average pool mult/shift must be scalars or broadcast to the output (Ho, Wo) = "
                           f"({ho}, {wo}), got {np.shape(layer.mult)} / {np.shape(layer.shift)}") from None
    check_requant(mult.astype(np.int64), mult.astype(np.int64), shift.astype(np.int64), "average pool")
    pairs, regions = _divisor_regions(mult, shift)
    return PoolShape(ch, h, w, k, stride, pads, ho, wo, avg, pairs, regions)


def plan_pool(geom: Geometry, layer: PoolLayer, in_shape: tuple[int, int, int], addrs: ConvAddrs,
              config: Any = None) -> tuple[list[Step], Plan]:
    """Tile a pool layer (``addrs.wgt`` is unused; ``addrs.prm`` holds AVG parameters)."""
    s = pool_shape(layer, in_shape)
    n_blk = channel_blocks(s.ch, geom.c)
    bw, lat = ddr_model(config, geom)
    n_pairs = len(s.pairs)
    prm_resident = (not s.avg) or n_pairs * n_blk <= geom.depth("PRM")
    best = None
    for inp_slots in (2, 1):  # as for conv: one slot only when a window is too big for a half
        for g in block_group_sizes(n_blk):
            if not prm_resident and g > geom.depth("PRM") // 2:
                continue

            def fits(th: int, tw: int) -> bool:
                in_words = g * extent(th, s.stride[0], s.k[0], 1) * extent(tw, s.stride[1], s.k[1], 1)
                return (th * tw <= geom.acc_depth and g * th * tw <= geom.depth("OUT")
                        and in_words <= geom.depth("INP") // inp_slots)

            for th, tw in tile_candidates(s.ho, s.wo, fits):
                steps, out_slots = _pool_steps(geom, layer, s, addrs, g, n_blk, th, tw, prm_resident, inp_slots)
                est = estimate_steps(geom, steps, out_slots, bw, lat)
                if best is None or est < best[0]:
                    plan = Plan("pool", (th, tw), g, "tiles-outer", "none", len(steps), out_slots, est, 0,
                                steps_dma_bytes(geom, steps), inp_slots)
                    best = (est, steps, plan)
        if best is not None:
            break
    if best is None:
        raise CompileError(f"pool {s.k} over {s.h}x{s.w}: one output pixel of one channel block does not fit "
                           f"INP ({geom.depth('INP')} words) / OUT / ACC ({geom.acc_depth})")
    return best[1], best[2]


def _pool_steps(geom: Geometry, layer: PoolLayer, s: PoolShape, addrs: ConvAddrs, g: int, n_blk: int, th: int,
                tw: int, prm_resident: bool, inp_slots: int) -> tuple[list[Step], int]:
    pin, pp, po = geom.pitch("INP"), geom.pitch("PRM"), geom.pitch("OUT")
    tiles = tile_grid(s.ho, s.wo, th, tw, s.k, s.stride, (1, 1), s.pads, s.h, s.w)
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
                st = Step()
                pair_pos: dict[int, int] = {}
                if s.avg:
                    if prm_resident:
                        if not prm_loaded:
                            prm_loaded = True
                            for ld in linear_loads(isa.Buf.PRM, 0, addrs.prm, len(s.pairs) * n_blk, pp):
                                st.loads.append(StepLoad(ld, ("PRM", "res")))
                        st.reads.add(("PRM", "res"))
                    else:
                        pslot = prm_loads % 2
                        prm_loads += 1
                        for pair in sorted({p[4] for p in chunk}):
                            pair_pos[pair] = pslot * prm_half + len(pair_pos) * nb
                            st.loads.append(StepLoad(isa.Load(
                                buf=isa.Buf.PRM, sram_base=pair_pos[pair],
                                dram_addr=addrs.prm + (pair * n_blk + b0) * pp, x_size=nb), ("PRM", pslot)))
                        st.reads.add(("PRM", pslot))
                if ci == 0:
                    slot = inp_loads % inp_slots
                    inp_loads += 1
                    st.loads.append(StepLoad(tile_input_load(tile, s.h, s.w, (b0, b0 + nb), addrs.inp, pin,
                                                             slot * inp_half, pad_value), ("INP", slot)))
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
                    st.ops.append(StepOp(pool, store, nb * pool_plane_cycles(pool) + OP_OVERHEAD))
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


def pool_params(geom: Geometry, s: PoolShape, n_blk: int) -> bytes:
    """PRM image of an average pool: for each distinct (M, S) pair, one word per channel block."""
    c = geom.c
    words = []
    for m, sh in s.pairs:
        mm = np.full(c, m, dtype=np.int64)
        words.append(prm_word(geom, np.zeros(c, dtype=np.int64), mm, mm, np.full(c, sh, dtype=np.int64)) * n_blk)
    return b"".join(words)
