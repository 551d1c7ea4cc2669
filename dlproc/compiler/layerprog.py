"""Single-layer programs: one layer -> a complete, runnable dlproc program, for tests and benchmarks.

Given a processor configuration, one layer's integer parameters and int8 input tensors, a
``build_*_program`` function lays out the input, weight and parameter images and the instruction
stream in DRAM, and says where the output lands and how to decode it. It is a thin helper on top
of the per-engine planners in :mod:`dlproc.compiler.planners`, which the network compiler uses
directly; ``dlproc.targets.isasim.run_on_isasim`` runs the result on the ISA simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.add import AddLayer, plan_add
from dlproc.compiler.planners.conv import ConvLayer, conv_shape, pack_conv_params, pack_conv_weights, plan_conv
from dlproc.compiler.planners.convtranspose import (ConvTransposeLayer, convtranspose_out_shape, emit_convtranspose,
                                                    pack_convtranspose_images, plan_convtranspose)
from dlproc.compiler.planners.fc import FcLayer, fc_out_shape, pack_fc_params, pack_fc_weights, plan_fc
from dlproc.compiler.planners.lrn import LrnLayer, lrn_table_stream, pack_lrn_table, plan_lrn
from dlproc.compiler.planners.packing import channel_blocks, pack_input, unpack_output
from dlproc.compiler.planners.pool import PoolLayer, plan_pool, pool_params, pool_shape
from dlproc.compiler.planners.schedule import ConvAddrs, Plan, Step, emit_instructions, geometry_of
from dlproc.compiler.planners.softmax import SoftmaxLayer, pack_softmax_table, plan_softmax, softmax_table_stream
from dlproc.compiler.planners.tiling import as_pair
from dlproc.compiler.planners.upsample import UpsampleLayer, plan_upsample

__all__ = [
    # the layer descriptions a builder takes (defined by their planners)
    "ConvLayer", "PoolLayer", "AddLayer", "UpsampleLayer", "LrnLayer", "SoftmaxLayer", "FcLayer", "ConvTransposeLayer",
    "Region", "LayerProgram", "build_conv_program", "build_pool_program", "build_layer_program",
    "build_add_program", "build_upsample_program", "build_lrn_program", "build_softmax_program",
    "build_convtranspose_program", "build_fc_program",
]


@dataclass(frozen=True)
class Region:
    """A named DRAM region (absolute byte address)."""

    name: str
    addr: int
    size: int


@dataclass
class LayerProgram:
    """A runnable single-layer program: write ``image`` to DRAM at ``dram_base``, start the
    processor with INSN_BASE/INSN_COUNT/DMA_BASE/DMA_LIMIT, then decode the output region."""

    geometry: Geometry
    image: bytes  #: DRAM contents of [dram_base, dma_limit), instructions included
    dram_base: int
    insn_base: int
    insn_count: int
    dma_base: int
    dma_limit: int
    regions: dict[str, Region]
    output_shape: tuple[int, int, int]  #: (Co, Ho, Wo)
    instructions: list[isa.Instruction]
    plan: "Plan"

    @property
    def output_addr(self) -> int:
        return self.regions["output"].addr

    @property
    def output_bytes(self) -> int:
        return self.regions["output"].size

    @property
    def program_bytes(self) -> bytes:
        return isa.encode_program(self.instructions)

    def read_output(self, dram: bytes | bytearray | np.ndarray, base: int = 0) -> np.ndarray:
        """Decode the int8 (Co, Ho, Wo) output from DRAM bytes whose byte 0 is address ``base``
        (pass ``base=output_addr`` with just the output region, 0 with the whole DRAM)."""
        data = np.frombuffer(bytes(dram), dtype=np.uint8) if not isinstance(dram, np.ndarray) else dram
        lo = self.output_addr - base
        if lo < 0 or lo + self.output_bytes > data.size:
            raise CompileError(
                f"read_output: the output region [{self.output_addr:#x}, {self.output_addr + self.output_bytes:#x}) "
                f"is not inside the {data.size} bytes given from address {base:#x}")
        return unpack_output(self.geometry, data[lo:lo + self.output_bytes], self.output_shape)


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _assemble(geom: Geometry, blobs: list[tuple[str, bytes]], out_name_size: int,
              out_shape: tuple[int, int, int], planner: Callable[[ConvAddrs], tuple[list[Step], Plan]],
              dram_base: int, mark_index: int,
              prologue: Callable[[], list[isa.Instruction]] | None = None,
              emit: Callable[..., list[isa.Instruction]] | None = None) -> LayerProgram:
    """Lay the regions out from ``dram_base`` (input, weights, params, output, instructions), plan,
    emit, and build the image. Regions start on 64-byte boundaries (and on bus beats)."""
    align = max(64, geom.bus_bytes)
    if dram_base % align:
        raise CompileError(f"dram_base {dram_base:#x} must be a multiple of {align}")
    regions: dict[str, Region] = {}
    addr = dram_base
    for name, data in blobs:
        regions[name] = Region(name, addr, len(data))
        addr = _align(addr + max(len(data), 1), align)
    regions["output"] = Region("output", addr, out_name_size)
    addr = _align(addr + out_name_size, align)
    addrs = ConvAddrs(regions["input"].addr, regions.get("weights", regions["input"]).addr,
                      regions.get("params", regions["input"]).addr, regions["output"].addr)
    steps, plan = planner(addrs)
    insns = (emit or emit_instructions)(steps, plan, mark_index=mark_index)
    if prologue is not None:  # instructions that run first (the LRN table load); token-balanced
        insns = prologue() + insns
    for insn in insns:
        insn.validate(geom.hw)
    program = isa.encode_program(insns)
    regions["instructions"] = Region("instructions", addr, len(program))
    end = _align(addr + len(program), align)
    image = bytearray(end - dram_base)
    for name, data in blobs:
        r = regions[name]
        image[r.addr - dram_base:r.addr - dram_base + len(data)] = data
    ins = regions["instructions"]
    image[ins.addr - dram_base:ins.addr - dram_base + ins.size] = program
    return LayerProgram(geom, bytes(image), dram_base, ins.addr, len(insns), dram_base, end, regions, out_shape,
                        insns, plan)


def build_conv_program(config: Any, layer: ConvLayer, x: np.ndarray, *, dram_base: int = 0,
                       mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    s = conv_shape(layer, tuple(np.shape(x)))  # type: ignore[arg-type]
    wimg, _ = pack_conv_weights(geom, layer, s)
    blobs = [("input", pack_input(geom, x)), ("weights", wimg), ("params", pack_conv_params(geom, layer, s))]
    out_size = channel_blocks(s.co, geom.c) * s.ho * s.wo * geom.pitch("OUT")
    return _assemble(geom, blobs, out_size, (s.co, s.ho, s.wo),
                     lambda a: plan_conv(geom, layer, (s.ci, s.h, s.w), a, cfg), dram_base, mark_index)


def build_pool_program(config: Any, layer: PoolLayer, x: np.ndarray, *, dram_base: int = 0,
                       mark_index: int = 0) -> LayerProgram:
    """A complete program computing the pool ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    s = pool_shape(layer, tuple(np.shape(x)))  # type: ignore[arg-type]
    n_blk = channel_blocks(s.ch, geom.c)
    blobs = [("input", pack_input(geom, x))]
    if s.avg:
        blobs.append(("params", pool_params(geom, s, n_blk)))
    out_size = n_blk * s.ho * s.wo * geom.pitch("OUT")
    return _assemble(geom, blobs, out_size, (s.ch, s.ho, s.wo),
                     lambda a: plan_pool(geom, layer, (s.ch, s.h, s.w), a, cfg), dram_base, mark_index)


def build_layer_program(config: Any, layer: ConvLayer | PoolLayer, x: np.ndarray, **kw: Any) -> LayerProgram:
    if isinstance(layer, ConvLayer):
        return build_conv_program(config, layer, x, **kw)
    if isinstance(layer, PoolLayer):
        return build_pool_program(config, layer, x, **kw)
    raise CompileError(f"unsupported layer type {type(layer).__name__}: allowed ConvLayer, PoolLayer")


def build_add_program(config: Any, layer: AddLayer, xa: np.ndarray, xb: np.ndarray, *, dram_base: int = 0,
                      mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.add`` of the int8 tensors ``xa`` and ``xb`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    if np.shape(xa) != np.shape(xb):
        raise CompileError(f"add operands differ in shape: {np.shape(xa)} and {np.shape(xb)}")
    img_a, img_b = pack_input(geom, xa), pack_input(geom, xb)
    align = max(64, geom.bus_bytes)
    off_b = _align(len(img_a), align)
    blob = img_a + bytes(off_b - len(img_a)) + img_b
    shape = tuple(int(v) for v in np.shape(xa))
    out_size = channel_blocks(shape[0], geom.c) * shape[1] * shape[2] * geom.pitch("OUT")
    return _assemble(geom, [("input", blob)], out_size, shape,  # type: ignore[arg-type]
                     lambda a: plan_add(geom, layer, shape, a, a.inp + off_b, cfg), dram_base, mark_index)


def build_upsample_program(config: Any, layer: UpsampleLayer, x: np.ndarray, *, dram_base: int = 0,
                           mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.upsample_nearest(x, layer.scale)`` for the int8 ``x`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    ch, h, w = (int(v) for v in np.shape(x))
    sy, sx = as_pair(layer.scale, "upsample scale")
    out_size = channel_blocks(ch, geom.c) * h * sy * w * sx * geom.pitch("OUT")
    return _assemble(geom, [("input", pack_input(geom, x))], out_size, (ch, h * sy, w * sx),
                     lambda a: plan_upsample(geom, layer, (ch, h, w), a, cfg), dram_base, mark_index)


def build_lrn_program(config: Any, layer: LrnLayer, x: np.ndarray, *, dram_base: int = 0,
                      mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.lrn`` of the int8 ``x`` (C, H, W): the table load, then the tiles."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    shape = tuple(int(v) for v in np.shape(x))
    out_size = channel_blocks(shape[0], geom.c) * shape[1] * shape[2] * geom.pitch("OUT")
    table = pack_lrn_table(geom, layer)
    holder: dict[str, Any] = {}

    def planner(a: ConvAddrs) -> tuple[list[Step], Plan]:
        steps, plan = plan_lrn(geom, layer, shape, a, cfg)  # type: ignore[arg-type]
        holder["table"] = lrn_table_stream(geom, a.prm)
        return steps, plan

    prog = _assemble(geom, [("input", pack_input(geom, x)), ("params", table)], out_size, shape,  # type: ignore[arg-type]
                     planner, dram_base, mark_index, prologue=lambda: holder["table"])
    return prog


def build_softmax_program(config: Any, layer: SoftmaxLayer, x: np.ndarray, *, dram_base: int = 0,
                          mark_index: int = 0) -> LayerProgram:
    """A complete program computing ``ops.softmax_int8`` over the channels of the int8 ``x`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    shape = tuple(int(v) for v in np.shape(x))
    image = pack_softmax_table(geom, layer)
    c = geom.c
    out_size = channel_blocks(shape[0], c) * shape[1] * shape[2] * geom.pitch("OUT")
    holder: dict[str, Any] = {}

    def planner(a: ConvAddrs) -> tuple[list[Step], Plan]:
        steps, plan = plan_softmax(geom, layer, shape, a, cfg)  # type: ignore[arg-type]
        holder["table"] = softmax_table_stream(geom, a.prm)
        return steps, plan

    return _assemble(geom, [("input", pack_input(geom, x)), ("params", image)], out_size, shape,  # type: ignore[arg-type]
                     planner, dram_base, mark_index, prologue=lambda: holder["table"])


def build_convtranspose_program(config: Any, layer: ConvTransposeLayer, x: np.ndarray, *, dram_base: int = 0,
                                mark_index: int = 0) -> LayerProgram:
    """A complete program computing the transposed conv ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    in_shape = tuple(int(v) for v in np.shape(x))
    out_shape = convtranspose_out_shape(layer, in_shape)  # type: ignore[arg-type]
    wimg, pimg, _ = pack_convtranspose_images(geom, layer, in_shape)  # type: ignore[arg-type]
    blobs = [("input", pack_input(geom, x)), ("weights", wimg), ("params", pimg)]
    out_size = channel_blocks(out_shape[0], geom.c) * out_shape[1] * out_shape[2] * geom.pitch("OUT")
    def planner(a: ConvAddrs) -> Any:
        return plan_convtranspose(geom, layer, in_shape, a, cfg)  # type: ignore[arg-type]

    return _assemble(geom, blobs, out_size, out_shape, planner, dram_base, mark_index,
                     emit=lambda phases, plan, mark_index: emit_convtranspose(phases, geom, mark_index=mark_index))


def build_fc_program(config: Any, layer: FcLayer, x: np.ndarray, *, dram_base: int = 0,
                     mark_index: int = 0) -> LayerProgram:
    """A complete program computing the fully connected ``layer`` on the int8 input ``x`` (C, H, W)."""
    geom = geometry_of(config)
    cfg = None if isinstance(config, Geometry) else config
    shape = tuple(int(v) for v in np.shape(x))
    wimg, _ = pack_fc_weights(geom, layer, shape)  # type: ignore[arg-type]
    blobs = [("input", pack_input(geom, x)), ("weights", wimg), ("params", pack_fc_params(geom, layer, shape))]  # type: ignore[arg-type]
    co = fc_out_shape(layer)[0]
    out_size = channel_blocks(co, geom.c) * geom.pitch("OUT")
    return _assemble(geom, blobs, out_size, (co, 1, 1),
                     lambda a: plan_fc(geom, layer, shape, a, cfg), dram_base, mark_index)  # type: ignore[arg-type]
