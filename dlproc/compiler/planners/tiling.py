"""Output tiles and their receptive fields: the tile grid of a layer, each tile's input window
(halo and border padding included), and the candidate tile sizes the planners' cost model compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dlproc.errors import CompileError
from dlproc.hardware import isa

__all__ = ["as_pair", "as_pads", "Tile", "tile_grid", "tile_input_load", "extent", "block_group_sizes",
           "tile_candidates"]


def as_pair(v: int | Sequence[int], name: str) -> tuple[int, int]:
    t = (int(v), int(v)) if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < 1:
        raise CompileError(f"{name} must be a positive int or (y, x) pair, got {v!r}")
    return t  # type: ignore[return-value]


def as_pads(v: int | Sequence[int]) -> tuple[int, int, int, int]:
    t = (int(v),) * 4 if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) == 2:
        t = (t[0], t[1], t[0], t[1])
    if len(t) != 4 or min(t) < 0:
        raise CompileError(f"pads must be (top, left, bottom, right) >= 0, got {v!r}")
    return t  # type: ignore[return-value]


@dataclass(frozen=True)
class Tile:
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


def tile_grid(ho: int, wo: int, th: int, tw: int, k: tuple[int, int], stride: tuple[int, int], dil: tuple[int, int],
           pads: tuple[int, int, int, int], h: int, w: int) -> list[Tile]:
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
            tiles.append(Tile(r0, n_r, c0, n_c, y0, ny, x0, nx, pt, pb, pl, pr))
    return tiles


def tile_input_load(tile: Tile, h: int, w: int, blocks: tuple[int, int], inp_addr: int, pitch: int,
                    sram_base: int, pad_value: int) -> isa.Load:
    """The LOAD of channel blocks [lo, hi) of a tile's input window from a (blocks, h, w) tensor at
    ``inp_addr`` into INP at ``sram_base``, with the border padding (``pad_value``) inserted."""
    lo, hi = blocks
    return isa.Load(buf=isa.Buf.INP, sram_base=sram_base, dram_addr=inp_addr + ((lo * h + tile.y0) * w + tile.x0) * pitch,
                    x_size=tile.nx, y_size=tile.ny, z_size=hi - lo, y_stride=w, z_stride=h * w,
                    pad_top=tile.pt, pad_bottom=tile.pb, pad_left=tile.pl, pad_right=tile.pr, pad_value=pad_value)


def extent(n: int, stride: int, k: int, dil: int) -> int:
    return (n - 1) * stride + (k - 1) * dil + 1


def block_group_sizes(n: int) -> list[int]:
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


def tile_candidates(ho: int, wo: int, fits: Callable[[int, int], bool]) -> list[tuple[int, int]]:
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
