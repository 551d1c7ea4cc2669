"""DRAM burst planning as ``dma.BurstPlanner`` does it: a strided transfer's rows split into
bursts of at most ``max_burst`` beats that never cross a ``max_burst``-beat boundary."""

from __future__ import annotations

from dlproc.estimate.timing import TimingParams
from dlproc.hardware import isa


def row_bursts(start_beat: int, row_beats: int, mb: int) -> tuple[int, int, int]:
    """(bursts, first burst length, last burst length) of one row starting at ``start_beat``."""
    off = start_beat % mb
    first = min(row_beats, mb - off)
    if first == row_beats:
        return 1, first, first
    rest = row_beats - first
    n = 1 + -(-rest // mb)
    last = rest - (n - 2) * mb
    return n, first, last




def transfer_bursts(insn: isa.Load | isa.Store, eb: int, tp: TimingParams) -> tuple[int, int]:
    """(bursts, beats) of a strided transfer."""
    mb = tp.max_burst
    key = (insn.x_size, insn.y_size, insn.z_size, insn.y_stride, insn.z_stride,
           (insn.dram_addr // tp.bus_bytes) % mb, eb, mb)
    hit = _BURST_CACHE.get(key)
    if hit is None:
        hit = _BURST_CACHE[key] = count_bursts(*key)
    return hit


def load_bursts(load: isa.Load, tp: TimingParams) -> tuple[int, int]:
    """(bursts, beats) of a LOAD, whose elements are as wide as its buffer's."""
    return transfer_bursts(load, tp.elem_beats[isa.Buf(load.buf).name], tp)


_BURST_CACHE: dict[tuple[int, ...], tuple[int, int]] = {}


def count_bursts(x: int, ysize: int, zsize: int, ystride: int, zstride: int, base: int, eb: int,
                  mb: int) -> tuple[int, int]:
    row = x * eb
    rows = ysize * zsize
    ys, zs = ystride * eb, zstride * eb
    if (ys % mb == 0 or ysize == 1) and (zs % mb == 0 or zsize == 1):
        n, _, _ = row_bursts(base, row, mb)
        return n * rows, row * rows
    if rows <= 64:
        n = 0
        for z in range(zsize):
            for y in range(ysize):
                n += row_bursts(base + z * zs + y * ys, row, mb)[0]
        return n, row * rows
    # Many rows with irregular alignment: the offsets repeat with period mb, so sample one period.
    n = 0
    count = 0
    for z in range(min(zsize, mb)):
        for y in range(min(ysize, mb)):
            n += row_bursts(base + z * zs + y * ys, row, mb)[0]
            count += 1
    return round(n * rows / count), row * rows

