"""The LRN planner: cross-channel local response normalisation on the LRN engine
(``gateware/lrn.py``), with the table of x^-beta the engine interpolates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import check_requant, prm_word
from dlproc.compiler.planners.schedule import (ConvAddrs, ddr_model, estimate_steps, pixel_batch, pixel_batch_steps,
                                               Plan, require_block, Step, steps_dma_bytes, table_stream)

__all__ = ["LrnLayer", "pack_lrn_table", "lrn_table_stream", "plan_lrn", "lrn_table_cycles"]


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
    check_requant(mult, mult, shift, "LRN table")
    words = -(-LRN_TABLE_SIZE // c)
    pm, ps = np.zeros(words * c, dtype=np.int64), np.zeros(words * c, dtype=np.int64)
    pm[:LRN_TABLE_SIZE], ps[:LRN_TABLE_SIZE] = mult, shift
    zero = np.zeros(c, dtype=np.int64)
    return b"".join(prm_word(geom, zero, pm[w * c:(w + 1) * c], pm[w * c:(w + 1) * c], ps[w * c:(w + 1) * c])
                    for w in range(words))


def lrn_table_stream(geom: Geometry, table_addr: int) -> list[isa.Instruction]:
    """LOAD PRM / LRNTAB pairs that put the whole table (at ``table_addr``, from :func:`pack_lrn_table`)
    into the LRN block, one PRM-full at a time. Serialised by tokens: each LOAD but the first waits
    (C2L) for the LRNTAB that read the previous chunk; each LRNTAB waits (L2C) for its LOAD. The
    token counters are balanced at the end; later LRNs follow LRNTAB in the compute unit's order."""
    from dlproc.hardware.numerics import LRN_TABLE_SIZE

    words = -(-LRN_TABLE_SIZE // geom.c)
    return table_stream(geom, table_addr, words, lambda base, n, push: isa.LrnTab(
        prm_base=0, tab_base=base, count=n, pop_prev=True, push_prev=push))


def plan_lrn(geom: Geometry, layer: LrnLayer, shape: tuple[int, int, int], addrs: ConvAddrs,
             config: Any = None) -> tuple[list[Step], Plan]:
    """Tiles of n consecutive pixels with all their channel blocks (the channel window crosses
    blocks, so a tile never splits a pixel's channels): LOAD the tile into an INP half, LRN it into
    an OUT slot, STORE it. One cycle per output word. The table is loaded by :func:`lrn_table_stream`."""
    from dlproc.hardware.numerics import LRN_MAX_SIZE

    require_block(geom, isa.Opcode.LRN)
    if not 1 <= int(layer.size) <= LRN_MAX_SIZE:
        raise CompileError(f"LRN size {layer.size}: the LRN block allows 1..{LRN_MAX_SIZE}")
    nb, n = pixel_batch(geom, "LRN", shape)
    bw, lat = ddr_model(config, geom)
    # The largest tile needs the fewest instructions, but its first LOAD and last STORE do not
    # overlap anything; smaller tiles pipeline LOAD / LRN / STORE (LRN is DDR-bound: a word in
    # and a word out per output word), so the tile is chosen by the cost model.
    best: tuple[int, list[Step], Plan] | None = None
    for tile in sorted({max(1, -(-n // k)) for k in (1, 2, 4, 8, 16)}, reverse=True):
        steps, out_slots = _lrn_steps(geom, layer, shape, addrs, nb, tile)
        est = estimate_steps(geom, steps, out_slots, bw, lat)
        if best is None or est < best[0]:
            best = (est, steps, Plan("lrn", (1, tile), nb, "tiles-outer", "none", len(steps), out_slots, est, 0,
                                     steps_dma_bytes(geom, steps)))
    assert best is not None
    return best[1], best[2]


def _lrn_steps(geom: Geometry, layer: LrnLayer, shape: tuple[int, int, int], addrs: ConvAddrs, nb: int,
               n: int) -> tuple[list[Step], int]:
    def lrn(inp_base: int, out_base: int, cnt: int) -> isa.Lrn:
        return isa.Lrn(inp_base=inp_base, out_base=out_base, in_plane=cnt, n_pix=cnt, cin_blocks=nb, channels=shape[0],
                       size=int(layer.size), zp_in=int(layer.zp_in), zp_out=int(layer.zp_out),
                       act_min=int(layer.act_min), act_max=int(layer.act_max))

    # One output word per cycle (gateware/lrn.py).
    return pixel_batch_steps(geom, shape, addrs, nb, n, lrn, lambda cnt: cnt * nb)


def lrn_table_cycles(geom: Geometry) -> int:
    """Compute-unit cycles of loading the table (LRNTAB: C + 2 cycles per PRM word), DMA excluded."""
    from dlproc.hardware.numerics import LRN_TABLE_SIZE

    return -(-LRN_TABLE_SIZE // geom.c) * (geom.c + 2)
