"""The upsample planner: nearest-neighbour upsampling on the upsample engine (``gateware/upsample.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import channel_blocks
from dlproc.compiler.planners.schedule import (ConvAddrs, OP_OVERHEAD, OUT_SLOTS_MAX, Plan, SIZE_MAX, Step, StepLoad,
                                               StepOp, ddr_model, estimate_steps, require_block, steps_dma_bytes)
from dlproc.compiler.planners.tiling import as_pair

__all__ = ["UpsampleLayer", "plan_upsample"]


@dataclass
class UpsampleLayer:
    """Nearest-neighbour upsample by integer factors (``dlproc.targets.golden.ops.upsample_nearest``)."""

    scale: int | tuple[int, int] = 2


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
                  config: Any = None) -> tuple[list[Step], Plan]:
    """Tiles of g channel blocks x tr input rows x tc input columns: LOAD the tile, UPSAMPLE it into an
    OUT slot (tr*sy x tc*sx pixels per block), STORE the slot into the output. 1 cycle per output word."""
    require_block(geom, isa.Opcode.UPSAMPLE)
    sy, sx = as_pair(layer.scale, "upsample scale")
    if sy > 15 or sx > 15:
        raise CompileError(f"upsample scale {(sy, sx)}: the UPSAMPLE instruction allows 1..15 per axis")
    ch, h, w = shape
    nb = channel_blocks(ch, geom.c)
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
                st = Step()
                st.loads.append(StepLoad(isa.Load(
                    buf=isa.Buf.INP, sram_base=slot * half, dram_addr=addrs.inp + ((b0 * h + r0) * w + c0) * pin,
                    x_size=nc, y_size=nr, z_size=gb, y_stride=w, z_stride=h * w), ("INP", slot)))
                st.reads.add(("INP", slot))
                out_base = (k % out_slots) * out_words
                ups = isa.Upsample(inp_base=slot * half, out_base=out_base, in_w=nc, in_plane=nr * nc,
                                   out_h=nr * sy, out_w=nc * sx, scale_y=sy, scale_x=sx, z_size=gb)
                store = isa.Store(sram_base=out_base, dram_addr=addrs.out + ((b0 * ho + r0 * sy) * wo + c0 * sx) * po,
                                  x_size=nc * sx, y_size=nr * sy, z_size=gb, y_stride=wo, z_stride=ho * wo)
                st.ops.append(StepOp(ups, store, gb * nr * sy * nc * sx + OP_OVERHEAD))
                steps.append(st)
                k += 1
    bw, lat = ddr_model(config, geom)
    plan = Plan("upsample", (tr * sy, tc * sx), g, "tiles-outer", "none", len(steps), out_slots,
                estimate_steps(geom, steps, out_slots, bw, lat), 0, steps_dma_bytes(geom, steps))
    return steps, plan
