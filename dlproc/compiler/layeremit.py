"""Entry points the network compiler needs from the layer-program builder, built on its pieces.

:mod:`dlproc.compiler.layerprog` builds a *whole* program for one layer (its own DRAM layout, a MARK and a
FINISH). The compiler needs the instructions of one layer whose input, output, weights and
parameters already live at given DRAM addresses, without MARK and FINISH, so that it can chain
layers into one stream (``schedule.chain_streams``), plus each layer's output shape and weight
images. This module provides exactly that and nothing else: the tiling, the weight packing and the
token schedule are layerprog's (``plan_conv``/``plan_pool``, ``pack_conv_weights``,
``pack_conv_params``, ``emit_instructions``). It is the only compiler module that uses layerprog's
private helpers (``_conv_shape``, ``_pool_shape``, ``_pool_params``, ``_pair``); these functions belong in
``layerprog`` itself and live here, clearly separated, until its owner moves them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlproc.hardware import isa
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners import (act_table, add, conv, convtranspose, fc, lrn, pool, schedule, softmax, tiling,
                                      upsample)

__all__ = ["EmittedLayer", "emit_conv", "emit_pool", "conv_images", "pool_param_image", "conv_out_shape",
           "pool_out_shape", "emit_add", "emit_upsample", "emit_lrn", "lrn_table_image", "upsample_out_shape",
           "convtranspose_out_shape", "convtranspose_images", "convtranspose_macs", "emit_convtranspose",
           "fc_fit", "fc_images", "emit_fc", "softmax_table_image", "emit_softmax", "act_table_image",
           "act_table_load", "with_table_flag"]


@dataclass
class EmittedLayer:
    """The instructions of one layer (no MARK, no FINISH) and how layerprog tiled it."""

    instructions: list[isa.Instruction]
    plan: schedule.Plan


def conv_out_shape(layer: conv.ConvLayer, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    s = conv.conv_shape(layer, in_shape)
    return (s.co, s.ho, s.wo)


def pool_out_shape(layer: pool.PoolLayer, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    s = pool.pool_shape(layer, in_shape)
    return (s.ch, s.ho, s.wo)


def conv_images(geom: Geometry, layer: conv.ConvLayer, in_shape: tuple[int, int, int]) -> tuple[bytes, bytes]:
    """(weight image, parameter image) of a conv in the contract's DRAM layout."""
    s = conv.conv_shape(layer, in_shape)
    weights, _ = conv.pack_conv_weights(geom, layer, s)
    return weights, conv.pack_conv_params(geom, layer, s)


def pool_param_image(geom: Geometry, layer: pool.PoolLayer, in_shape: tuple[int, int, int]) -> bytes:
    """The PRM image of an average pool (empty for max pooling)."""
    s = pool.pool_shape(layer, in_shape)
    if not s.avg:
        return b""
    return pool.pool_params(geom, s, -(-s.ch // geom.c))


def _strip(steps: list, plan: schedule.Plan) -> list[isa.Instruction]:
    # No MARK and no FINISH: the network linker places MARKs per profile group and one FINISH.
    return schedule.emit_instructions(steps, plan, mark_index=None, finish=False)


def emit_conv(geom: Geometry, layer: conv.ConvLayer, in_shape: tuple[int, int, int], addrs: schedule.ConvAddrs,
              config: object = None) -> EmittedLayer:
    """Instructions of a conv reading ``addrs.inp`` and writing ``addrs.out`` (absolute addresses)."""
    steps, plan = conv.plan_conv(geom, layer, in_shape, addrs, config)
    return EmittedLayer(_strip(steps, plan), plan)


def emit_pool(geom: Geometry, layer: pool.PoolLayer, in_shape: tuple[int, int, int], addrs: schedule.ConvAddrs,
              config: object = None) -> EmittedLayer:
    """Instructions of a pool reading ``addrs.inp`` and writing ``addrs.out`` (``addrs.prm``: AVG params)."""
    steps, plan = pool.plan_pool(geom, layer, in_shape, addrs, config)
    return EmittedLayer(_strip(steps, plan), plan)


# -- optional blocks: element-wise add, nearest upsample, LRN ------------------------------------
def upsample_out_shape(layer: upsample.UpsampleLayer, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    sy, sx = tiling.as_pair(layer.scale, "upsample scale")
    return (in_shape[0], in_shape[1] * sy, in_shape[2] * sx)


def lrn_table_image(geom: Geometry, layer: lrn.LrnLayer) -> bytes:
    """The LRN table in PRM words (placed in the conv weight region)."""
    return lrn.pack_lrn_table(geom, layer)


def emit_add(geom: Geometry, layer: add.AddLayer, shape: tuple[int, int, int], addrs: schedule.ConvAddrs,
             b_addr: int, config: object = None) -> EmittedLayer:
    """Instructions of ``a + b`` (``addrs.inp`` = a, ``b_addr`` = b, ``addrs.out`` = result)."""
    steps, plan = add.plan_add(geom, layer, shape, addrs, b_addr, config)
    return EmittedLayer(_strip(steps, plan), plan)


def emit_upsample(geom: Geometry, layer: upsample.UpsampleLayer, shape: tuple[int, int, int],
                  addrs: schedule.ConvAddrs, config: object = None) -> EmittedLayer:
    steps, plan = upsample.plan_upsample(geom, layer, shape, addrs, config)
    return EmittedLayer(_strip(steps, plan), plan)


def emit_lrn(geom: Geometry, layer: lrn.LrnLayer, shape: tuple[int, int, int], addrs: schedule.ConvAddrs,
             config: object = None) -> EmittedLayer:
    """The table load (from ``addrs.prm``) followed by the LRN tiles."""
    steps, plan = lrn.plan_lrn(geom, layer, shape, addrs, config)
    return EmittedLayer(lrn.lrn_table_stream(geom, addrs.prm) + _strip(steps, plan), plan)


# -- transposed convolution (sub-pixel phases on the conv engine) --------------------------------
def convtranspose_out_shape(layer: convtranspose.ConvTransposeLayer, in_shape: tuple[int, int, int]
                            ) -> tuple[int, int, int]:
    return convtranspose.convtranspose_out_shape(layer, in_shape)


def convtranspose_images(geom: Geometry, layer: convtranspose.ConvTransposeLayer, in_shape: tuple[int, int, int]
                         ) -> tuple[bytes, bytes]:
    """(weight image, parameter image): the phases' conv images, concatenated."""
    wimg, pimg, _ = convtranspose.pack_convtranspose_images(geom, layer, in_shape)
    return wimg, pimg


def convtranspose_macs(layer: convtranspose.ConvTransposeLayer, in_shape: tuple[int, int, int]) -> int:
    """Products of real taps (what the conv engine computes, padding taps included, bias-only pieces not)."""
    return convtranspose.convtranspose_macs(layer, in_shape)


def emit_convtranspose(geom: Geometry, layer: convtranspose.ConvTransposeLayer, in_shape: tuple[int, int, int],
                       addrs: schedule.ConvAddrs, config: object = None) -> EmittedLayer:
    """The phases' instructions (joined by barriers, no MARK, no FINISH) and the summary plan."""
    phases, plan = convtranspose.plan_convtranspose(geom, layer, in_shape, addrs, config)
    return EmittedLayer(convtranspose.emit_convtranspose(phases, geom, mark_index=None, finish=False), plan)


# -- fc module: FC engine and softmax block ------------------------------------------------------
def fc_fit(geom: Geometry, layer: fc.FcLayer, in_shape: tuple[int, int, int]) -> dict[str, int]:
    """How the FC engine runs ``layer`` ({"co", "n_in", "tile", ...}); CompileError if it does not fit."""
    s = fc.fc_shape(geom, layer, in_shape)
    return {"co": s.co, "n_in": s.n_in, "slices": s.slices, "tile": s.tile}


def fc_images(geom: Geometry, layer: fc.FcLayer, in_shape: tuple[int, int, int]) -> tuple[bytes, bytes]:
    """(weight stream, parameter image) of an FC layer on the FC engine."""
    weights, _ = fc.pack_fc_weights(geom, layer, in_shape)
    return weights, fc.pack_fc_params(geom, layer, in_shape)


def emit_fc(geom: Geometry, layer: fc.FcLayer, in_shape: tuple[int, int, int], addrs: schedule.ConvAddrs,
            config: object = None) -> EmittedLayer:
    steps, plan = fc.plan_fc(geom, layer, in_shape, addrs, config)
    return EmittedLayer(_strip(steps, plan), plan)


def softmax_table_image(geom: Geometry, layer: softmax.SoftmaxLayer) -> bytes:
    """The softmax exp table in PRM words (placed in the fc weight region)."""
    return softmax.pack_softmax_table(geom, layer)


def emit_softmax(geom: Geometry, layer: softmax.SoftmaxLayer, shape: tuple[int, int, int],
                 addrs: schedule.ConvAddrs, config: object = None) -> EmittedLayer:
    """The exp table load (from ``addrs.prm``: LOAD PRM / SMXTAB) followed by the SOFTMAX tiles."""
    steps, plan = softmax.plan_softmax(geom, layer, shape, addrs, config)
    return EmittedLayer(softmax.softmax_table_stream(geom, addrs.prm) + _strip(steps, plan), plan)


# -- the output stage's activation table ---------------------------------------------------------
def act_table_image(geom: Geometry, table) -> bytes:
    """The 256-entry activation table in PRM words (placed in the op's weight region)."""
    return act_table.pack_act_table(geom, table)


def act_table_load(geom: Geometry, table_addr: int) -> list[isa.Instruction]:
    """LOAD PRM / ACTTAB pairs loading the table at ``table_addr`` (a stream of its own for the linker)."""
    return act_table.act_table_stream(geom, table_addr)


def with_table_flag(insns: list[isa.Instruction]) -> list[isa.Instruction]:
    """A layer's instructions with their results sent through the activation table."""
    return act_table.with_table_flag(insns)
