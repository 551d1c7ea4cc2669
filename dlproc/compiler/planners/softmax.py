"""The softmax planner: channel softmax on the softmax engine (``gateware/softmax.py``), with its
exponent table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import prm_word
from dlproc.compiler.planners.schedule import (ConvAddrs, ddr_model, estimate_steps, pixel_batch, pixel_batch_steps,
                                               Plan, require_block, Step, steps_dma_bytes, table_stream)

__all__ = ["SoftmaxLayer", "pack_softmax_table", "softmax_table_stream", "plan_softmax"]


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
    return b"".join(prm_word(geom, padded[w * c:(w + 1) * c], zero, zero, zero) for w in range(words))


def softmax_table_stream(geom: Geometry, table_addr: int) -> list[isa.Instruction]:
    """LOAD PRM / SMXTAB pairs loading the exp table (at ``table_addr``, from :func:`pack_softmax_table`)."""
    words = -(-isa.SOFTMAX_TABLE_SIZE // geom.c)
    return table_stream(geom, table_addr, words, lambda base, n, push: isa.SmxTab(
        prm_base=0, tab_base=base, count=n, pop_prev=True, push_prev=push))


def plan_softmax(geom: Geometry, layer: SoftmaxLayer, shape: tuple[int, int, int], addrs: ConvAddrs,
                 config: Any = None) -> tuple[list[Step], Plan]:
    """Tiles of n consecutive pixels with all their channel blocks: LOAD, SOFTMAX, STORE
    (3*cin_blocks + ~78 cycles per pixel). The exp table is loaded first (``build_softmax_program``)."""
    from dlproc.hardware.numerics import SOFTMAX_MAX_CHANNELS

    require_block(geom, isa.Opcode.SOFTMAX)
    ch, h, w = shape
    if not 1 <= ch <= SOFTMAX_MAX_CHANNELS:
        raise CompileError(f"softmax over {ch} channels: the softmax block allows 1..{SOFTMAX_MAX_CHANNELS}")
    nb, n = pixel_batch(geom, "softmax", shape)

    def softmax(inp_base: int, out_base: int, cnt: int) -> isa.Softmax:
        return isa.Softmax(inp_base=inp_base, out_base=out_base, in_plane=cnt, n_pix=cnt, cin_blocks=nb, channels=ch)

    # About 3 * cin_blocks + 78 cycles per pixel (gateware/softmax.py).
    steps, out_slots = pixel_batch_steps(geom, shape, addrs, nb, n, softmax, lambda cnt: cnt * (3 * nb + 78))
    bw, lat = ddr_model(config, geom)
    plan = Plan("softmax", (1, n), nb, "tiles-outer", "none", len(steps), out_slots,
                estimate_steps(geom, steps, out_slots, bw, lat), 0, steps_dma_bytes(geom, steps))
    return steps, plan
