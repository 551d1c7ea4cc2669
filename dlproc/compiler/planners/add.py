"""The add planner: element-wise addition of two tensors on the adder engine (``gateware/add.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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
    #: 256 int8 entries: the results go through the output stage's activation table (planners/act_table.py)
    act_table: np.ndarray | None = None
    #: multiply instead of add (``ops.mul``: acc = (a - za) * (b - zb), requantized with M = ma)
    mul: bool = False
    #: b is a per-channel (C, 1, 1) vector broadcast over the pixels of a (multiply only)
    broadcast: bool = False


def plan_add(geom: Geometry, layer: AddLayer, shape: tuple[int, int, int], addrs: ConvAddrs, b_addr: int,
             config: Any = None) -> tuple[list[Step], Plan]:
    """Chunks of n words of both operands (``addrs.inp`` = a, ``b_addr`` = b, both in the channel-block
    layout, which is dense, so a chunk is a linear run): each step loads a's and b's chunk into one
    INP half, ADDs them into an OUT slot and stores the slot. 2 cycles per word.

    A broadcast b (``layer.broadcast``: one word per channel block) is loaded for the chunk's
    channel blocks only, and the ADD reads it with ``b_repeat`` = H*W (a chunk of whole channel
    blocks), or as one constant word (a chunk inside one channel block: ``b_repeat`` = its length)."""
    require_block(geom, isa.Opcode.ADD)
    ch, h, w = shape
    nb, pix = channel_blocks(ch, geom.c), h * w
    n = min(nb * pix, geom.depth("INP") // 4, geom.depth("OUT") // 2, SIZE_MAX)
    if n < 1:
        what = "mul" if layer.mul else "add"
        raise CompileError(f"{what}: INP ({geom.depth('INP')} words) / OUT ({geom.depth('OUT')}) too small for one word")
    if layer.broadcast:
        if not layer.mul:
            raise CompileError("a broadcast operand is supported for the multiply only")
        chunks = _broadcast_chunks(nb, pix, n)
    else:
        total = nb * pix
        chunks = [(start, min(n, total - start), start, 0) for start in range(0, total, n)]
    return _chunk_steps(geom, layer, addrs, b_addr, n, chunks, config)


def _broadcast_chunks(nb: int, pix: int, n: int) -> list[tuple[int, int, int, int]]:
    """(first word, words, first b word, b_repeat) of the chunks of a (C, H, W) times a per-channel
    b (C, 1, 1): whole channel blocks of a when a block (H*W words) fits a chunk of n words, else
    chunks inside one block (b constant: b_repeat = the chunk's length)."""
    if pix <= n:
        per = n // pix
        return [(cb * pix, min(per, nb - cb) * pix, cb, pix) for cb in range(0, nb, per)]
    return [(cb * pix + start, min(n, pix - start), cb, min(n, pix - start))
            for cb in range(nb) for start in range(0, pix, n)]


def _chunk_steps(geom: Geometry, layer: AddLayer, addrs: ConvAddrs, b_addr: int, n: int,
                 chunks: list[tuple[int, int, int, int]], config: Any) -> tuple[list[Step], Plan]:
    """One step per chunk: LOAD a's words and b's into an INP half (b after n words of a; the ADD
    range rule counts b as ``count`` words, which the half holds), ADD into an OUT slot, STORE it."""
    out_slots = min(OUT_SLOTS_MAX, geom.depth("OUT") // n)
    half = geom.depth("INP") // 2
    pin, po = geom.pitch("INP"), geom.pitch("OUT")
    steps = []
    for k, (start, cnt, b_start, repeat) in enumerate(chunks):
        slot = k % 2
        st = Step()
        b_words = cnt if repeat == 0 else -(-cnt // repeat)
        for ld in linear_loads(isa.Buf.INP, slot * half, addrs.inp + start * pin, cnt, pin):
            st.loads.append(StepLoad(ld, ("INP", slot)))
        for ld in linear_loads(isa.Buf.INP, slot * half + n, b_addr + b_start * pin, b_words, pin):
            st.loads.append(StepLoad(ld, ("INP", slot)))
        st.reads.add(("INP", slot))
        out_base = (k % out_slots) * n
        insn = _add_insn(layer, slot * half, slot * half + n, out_base, cnt, repeat)
        store = isa.Store(sram_base=out_base, dram_addr=addrs.out + start * po, x_size=cnt)
        st.ops.append(StepOp(insn, store, 2 * cnt + OP_OVERHEAD))
        steps.append(st)
    bw, lat = ddr_model(config, geom)
    plan = Plan("mul" if layer.mul else "add", (1, n), 1, "tiles-outer", "none", len(steps), out_slots,
                estimate_steps(geom, steps, out_slots, bw, lat), 0, steps_dma_bytes(geom, steps))
    return steps, plan


def _add_insn(layer: AddLayer, inp_a: int, inp_b: int, out_base: int, count: int, b_repeat: int) -> isa.Add:
    return isa.Add(inp_a=inp_a, inp_b=inp_b, out_base=out_base, count=count, za=int(layer.za), zb=int(layer.zb),
                   ma=int(layer.ma), mb=0 if layer.mul else int(layer.mb), shift=int(layer.shift),
                   zp_out=int(layer.zp_out), act_min=int(layer.act_min), act_max=int(layer.act_max),
                   mul=int(layer.mul), b_repeat=b_repeat)
