"""The add planner: element-wise addition of two tensors on the adder engine (``gateware/add.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import channel_blocks
from dlproc.compiler.planners.schedule import (ConvAddrs, OP_OVERHEAD, OUT_SLOTS_MAX, Plan, SIZE_MAX, Step, StepLoad,
                                               StepOp, ddr_model, estimate_steps, linear_loads, require_block,
                                               steps_dma_bytes)

__all__ = ["AddLayer", "plan_add"]


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


def plan_add(geom: Geometry, layer: AddLayer, shape: tuple[int, int, int], addrs: ConvAddrs, b_addr: int,
             config: Any = None) -> tuple[list[Step], Plan]:
    """Chunks of n words of both operands (``addrs.inp`` = a, ``b_addr`` = b, both in the channel-block
    layout, which is dense, so a chunk is a linear run): each step loads a's and b's chunk into one
    INP half, ADDs them into an OUT slot and stores the slot. 2 cycles per word."""
    require_block(geom, isa.Opcode.ADD)
    ch, h, w = shape
    total = channel_blocks(ch, geom.c) * h * w
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
        st = Step()
        for ld in linear_loads(isa.Buf.INP, slot * half, addrs.inp + start * pin, cnt, pin):
            st.loads.append(StepLoad(ld, ("INP", slot)))
        for ld in linear_loads(isa.Buf.INP, slot * half + n, b_addr + start * pin, cnt, pin):
            st.loads.append(StepLoad(ld, ("INP", slot)))
        st.reads.add(("INP", slot))
        out_base = (k % out_slots) * n
        add = isa.Add(inp_a=slot * half, inp_b=slot * half + n, out_base=out_base, count=cnt,
                      za=int(layer.za), zb=int(layer.zb), ma=int(layer.ma), mb=int(layer.mb),
                      shift=int(layer.shift), zp_out=int(layer.zp_out), act_min=int(layer.act_min),
                      act_max=int(layer.act_max))
        store = isa.Store(sram_base=out_base, dram_addr=addrs.out + start * po, x_size=cnt)
        st.ops.append(StepOp(add, store, 2 * cnt + OP_OVERHEAD))
        steps.append(st)
    bw, lat = ddr_model(config, geom)
    plan = Plan("add", (1, n), 1, "tiles-outer", "none", len(steps), out_slots,
                estimate_steps(geom, steps, out_slots, bw, lat), 0, steps_dma_bytes(geom, steps))
    return steps, plan
