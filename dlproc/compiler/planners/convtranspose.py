"""The transposed-convolution planner: sub-pixel phases of ordinary convolutions on the conv engine,
each stored with a scattered STORE (``docs/programs.md``, "Transposed convolution").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.conv import (ConvLayer, ConvShape, conv_macs, pack_conv_params, pack_conv_weights,
                                           plan_conv_shape)
from dlproc.compiler.planners.schedule import (ConvAddrs, PAD_MAX, Plan, Step, chain_streams, ddr_model,
                                               emit_instructions, estimate_steps, steps_dma_bytes)
from dlproc.compiler.planners.tiling import as_pads, as_pair

__all__ = [
    "ConvTransposeLayer", "ConvTransposePhase", "convtranspose_out_shape", "convtranspose_phases",
    "pack_convtranspose_images", "plan_convtranspose", "convtranspose_macs", "emit_convtranspose",
]


@dataclass
class ConvTransposeLayer:
    """A quantized transposed convolution (``dlproc.targets.golden.ops.conv_transpose2d``).

    ``weight`` is int8 ``(Co, Ci/groups, kh, kw)``: ONNX's ``(Ci, Co/groups, kh, kw)`` with the two
    channel axes swapped per group by the importer (``docs/frontends.md``), so that output channels
    come first as for :class:`ConvLayer`. ``bias`` is unfolded; ``mult``/``shift``/``mult_neg`` per
    output channel. ``pads`` (top, left, bottom, right) crop the full output, ``output_padding``
    (y, x) adds rows/columns at the bottom/right."""

    weight: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    mult_neg: np.ndarray | None = None
    zp_in: int = 0
    zp_out: int = 0
    act_min: int = -128
    act_max: int = 127
    stride: int | tuple[int, int] = 1
    pads: int | tuple[int, ...] = 0
    output_padding: int | tuple[int, int] = 0
    dilation: int | tuple[int, int] = 1
    groups: int = 1


@dataclass(frozen=True)
class ConvTransposePhase:
    """One output phase of a transposed conv: the outputs (oy0 + sy*i, ox0 + sx*j) form an ordinary
    stride-1 convolution of the input with a sub-kernel (see :func:`convtranspose_phases`)."""

    oy0: int
    ox0: int
    layer: ConvLayer  #: the sub-kernel conv (weights already flipped; all-zero if no tap falls on the phase)
    shape: ConvShape  #: its geometry; pads may be negative (input rows/columns the phase skips)
    real: bool = True  #: False for a bias-only piece (zero 1x1 kernel)


def _out_padding(v: int | Sequence[int]) -> tuple[int, int]:
    t = (int(v), int(v)) if np.isscalar(v) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < 0:
        raise CompileError(f"output_padding must be an int or (y, x) pair >= 0, got {v!r}")
    return t  # type: ignore[return-value]


def convtranspose_out_shape(layer: ConvTransposeLayer, in_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """(Co, Ho, Wo) with Ho = (H-1)*sy + (kh-1)*dy + 1 - pad_top - pad_bottom + output_padding_y."""
    w = np.asarray(layer.weight)
    if w.ndim != 4:
        raise CompileError(f"transposed conv weight must be (Co, Ci/groups, kh, kw), got shape {w.shape}")
    ci, h, wd = in_shape
    co, cig, kh, kw = w.shape
    g = int(layer.groups)
    if g < 1 or ci % g or co % g or cig != ci // g:
        raise CompileError(f"transposed conv groups={g} does not fit input channels {ci}, output channels {co} "
                           f"and weight shape {w.shape} (need Ci and Co divisible by groups, weight dim 1 = Ci/groups)")
    s, d, p, op = (as_pair(layer.stride, "stride"), as_pair(layer.dilation, "dilation"), as_pads(layer.pads),
                   _out_padding(layer.output_padding))
    ho = (h - 1) * s[0] + (kh - 1) * d[0] + 1 - p[0] - p[2] + op[0]
    wo = (wd - 1) * s[1] + (kw - 1) * d[1] + 1 - p[1] - p[3] + op[1]
    if ho < 1 or wo < 1:
        raise CompileError(f"transposed conv: pads {p} crop the whole {h}x{wd} -> "
                           f"{ho + p[0] + p[2]}x{wo + p[1] + p[3]} output")
    return co, ho, wo


@dataclass(frozen=True)
class _AxisSeg:
    """A run of outputs o = rho + s*(n0 + i), i < n, of one phase along one axis: a correlation of the
    input with ``taps`` (kernel indices, correlation order; None = no real input, the bias only)
    and dilation ``dil``, reading input index i + a (pads: before = -a, after = the overhang)."""

    n0: int
    n: int
    taps: tuple[int, ...] | None
    dil: int
    pad_before: int
    pad_after: int


def _axis_segments(rho: int, k: int, s: int, d: int, pad: int, in_len: int, out_len: int) -> list[_AxisSeg]:
    """One axis of one phase, cut where outputs read only padding.

    Output o of the transposed conv sums x[i]*w[t] over o + pad = i*s + t*d. For o = rho + s*n the
    taps are those with t*d = r (mod s), r = (rho+pad) mod s: t0, t0 + s/g, ... (g = gcd(s, d)),
    reading x[m - e0 - j*d/g] with m = n + (rho+pad)//s and e0 = (t0*d - r)/s. Reversed, that is a
    correlation with dilation d/g and flipped taps whose first input index is
    a = (rho+pad)//s - e0 - (J-1)*d/g. Outputs at either end whose whole window is padding (with
    dilation or output_padding) are the bias only; they become separate zero-weight segments,
    because LOAD cannot produce a tile that is all padding."""
    n_out = len(range(rho, out_len, s))
    r, c0 = (rho + pad) % s, (rho + pad) // s
    taps = [t for t in range(k) if (t * d) % s == r]
    if not taps:
        return _zero_segments(0, n_out, in_len)
    g = math.gcd(s, d)
    dd = d // g
    span = (len(taps) - 1) * dd
    a = c0 - (taps[0] * d - r) // s - span
    head = min(max(-(a + span), 0), n_out)
    tail = min(max(n_out - (in_len - a), 0), n_out - head)
    segs = _zero_segments(0, head, in_len)
    n = n_out - head - tail
    if n > 0:
        first = a + head
        segs.append(_AxisSeg(head, n, tuple(taps[::-1]), dd, -first, (n - 1) + span + first - (in_len - 1)))
    return segs + _zero_segments(n_out - tail, tail, in_len)


def _zero_segments(n0: int, n: int, in_len: int) -> list[_AxisSeg]:
    """Bias-only outputs n0..n0+n-1 as zero-weight 1-tap segments over real input (at most in_len each)."""
    return [_AxisSeg(n0 + i, min(in_len, n - i), None, 1, 0, 0) for i in range(0, n, in_len)]


def convtranspose_phases(layer: ConvTransposeLayer, in_shape: tuple[int, int, int]) -> list[ConvTransposePhase]:
    """The sub-pixel decomposition: per output phase (oy mod sy, ox mod sx) an ordinary stride-1
    convolution of the input with the sub-kernel of the taps that land on that phase, flipped
    (phases whose edges read only padding are cut into pieces, see :func:`_axis_segments`).

    Bit-exact with the zero-insertion definition (``golden.ops.conv_transpose2d``): every output
    sums exactly the products of the taps that land on it, padding taps read zp_in (LOAD pads with
    it) and contribute 0 after the zero-point fold, and the requantization is the layer's. The
    pieces' outputs are (oy0 + sy*i, ox0 + sx*j); the planner scatters them with strided STOREs."""
    co, ho, wo = convtranspose_out_shape(layer, in_shape)
    ci, h, wd = in_shape
    w = np.asarray(layer.weight)
    if w.dtype != np.int8:
        raise CompileError(f"transposed conv weight must be int8, got {w.dtype}")
    _, cig, kh, kw = w.shape
    s, d, p = as_pair(layer.stride, "stride"), as_pair(layer.dilation, "dilation"), as_pads(layer.pads)
    phases = []
    for ry in range(min(s[0], ho)):
        ysegs = _axis_segments(ry, kh, s[0], d[0], p[0], h, ho)
        for rx in range(min(s[1], wo)):
            xsegs = _axis_segments(rx, kw, s[1], d[1], p[1], wd, wo)
            for ys in ysegs:
                for xs in xsegs:
                    if ys.taps is not None and xs.taps is not None:
                        pieces = [(ys, xs, w[:, :, list(ys.taps)][:, :, :, list(xs.taps)], True)]
                    else:  # the bias only: a zero 1x1 conv, each axis cut to at most the input's size
                        zero = np.zeros((co, cig, 1, 1), dtype=np.int8)
                        pieces = [(y, x, zero, False) for y in _zero_segments(ys.n0, ys.n, h)
                                  for x in _zero_segments(xs.n0, xs.n, wd)]
                    for y, x, sub, real in pieces:
                        phases.append(_phase(layer, in_shape, s, ry, rx, y, x, sub, real))
    return phases


def _phase(layer: ConvTransposeLayer, in_shape: tuple[int, int, int], s: tuple[int, int], ry: int, rx: int,
           y: _AxisSeg, x: _AxisSeg, sub: np.ndarray, real: bool) -> ConvTransposePhase:
    ci, h, wd = in_shape
    co, _, jy, jx = sub.shape
    if jy > 31 or jx > 31 or y.dil > 7 or x.dil > 7:
        raise CompileError(f"transposed conv phase ({ry}, {rx}): sub-kernel {jy}x{jx} with dilation "
                           f"({y.dil}, {x.dil}); the CONV instruction allows 1..31 taps and dilation 1..7")
    pads = (y.pad_before, x.pad_before, y.pad_after, x.pad_after)
    if max(pads) > PAD_MAX:
        raise CompileError(f"transposed conv phase ({ry}, {rx}) needs padding {pads}; LOAD inserts at most "
                           f"{PAD_MAX} rows/columns per side")
    sub_layer = ConvLayer(weight=np.ascontiguousarray(sub), bias=layer.bias, mult=layer.mult, shift=layer.shift,
                          mult_neg=layer.mult_neg, zp_in=layer.zp_in, zp_out=layer.zp_out, act_min=layer.act_min,
                          act_max=layer.act_max, groups=layer.groups)
    shape = ConvShape(ci, h, wd, co, jy, jx, (1, 1), pads, (y.dil, x.dil), int(layer.groups), y.n, x.n)
    return ConvTransposePhase(ry + s[0] * y.n0, rx + s[1] * x.n0, sub_layer, shape, real)


def pack_convtranspose_images(geom: Geometry, layer: ConvTransposeLayer, in_shape: tuple[int, int, int]
                              ) -> tuple[bytes, bytes, list[tuple[int, int]]]:
    """(weight image, parameter image, per phase (weight byte offset, parameter byte offset)).

    Each phase's images are those of its sub-kernel conv (whole WGT/PRM words, so every offset is
    a multiple of the bus beat), concatenated in phase order."""
    wimg, pimg, offs = bytearray(), bytearray(), []
    for ph in convtranspose_phases(layer, in_shape):
        offs.append((len(wimg), len(pimg)))
        wimg += pack_conv_weights(geom, ph.layer, ph.shape)[0]
        pimg += pack_conv_params(geom, ph.layer, ph.shape)
    return bytes(wimg), bytes(pimg), offs


def _scatter_store(st: isa.Store, ph: ConvTransposePhase, s: tuple[int, int], out_hw: tuple[int, int],
                   out_addr: int, pitch: int) -> isa.Store:
    """The phase's dense tile store (planned against output base 0) rewritten to land every pixel at
    its place in the full output: output (oy0 + sy*i, ox0 + sx*j). The STORE's x axis is contiguous,
    so for sx > 1 a tile row becomes its y axis (one element per row, y_stride = sx) and tile rows
    its z axis (z_stride = sy*Wo); for sx = 1 rows stay contiguous."""
    ho, wo = out_hw
    hp, wp = ph.shape.ho, ph.shape.wo
    ob, rem = divmod(st.dram_addr // pitch, hp * wp)
    r0, c0 = divmod(rem, wp)
    th, tw = st.y_size, st.x_size
    addr = out_addr + ((ob * ho + ph.oy0 + s[0] * r0) * wo + ph.ox0 + s[1] * c0) * pitch
    if s[1] == 1:
        return isa.Store(sram_base=st.sram_base, dram_addr=addr, x_size=tw, y_size=th, y_stride=s[0] * wo)
    return isa.Store(sram_base=st.sram_base, dram_addr=addr, x_size=1, y_size=tw, z_size=th, y_stride=s[1],
                     z_stride=s[0] * wo)


def plan_convtranspose(geom: Geometry, layer: ConvTransposeLayer, in_shape: tuple[int, int, int],
                       addrs: ConvAddrs, config: Any = None) -> tuple[list[tuple[list[Step], Plan]], Plan]:
    """Plan every phase as an ordinary conv (``addrs.wgt``/``addrs.prm`` point at the images of
    :func:`pack_convtranspose_images`); returns per phase (steps, plan) and a summary plan."""
    co, ho, wo = convtranspose_out_shape(layer, in_shape)
    s = as_pair(layer.stride, "stride")
    po = geom.pitch("OUT")
    _, _, offs = pack_convtranspose_images(geom, layer, in_shape)
    out = []
    for ph, (woff, poff) in zip(convtranspose_phases(layer, in_shape), offs):
        steps, plan = plan_conv_shape(geom, ph.layer, ph.shape,
                                       ConvAddrs(addrs.inp, addrs.wgt + woff, addrs.prm + poff, 0), config)
        for st in steps:
            for op in st.ops:
                op.store = _scatter_store(op.store, ph, s, (ho, wo), addrs.out, po)
        bw, lat = ddr_model(config, geom)
        plan.estimated_cycles = estimate_steps(geom, steps, plan.out_slots, bw, lat)
        plan.dma_bytes = steps_dma_bytes(geom, steps)
        out.append((steps, plan))
    first = out[0][1]
    summary = Plan("convtranspose", first.tile, first.group, first.order, first.weights,
                   sum(p.steps for _, p in out), first.out_slots, sum(p.estimated_cycles for _, p in out),
                   convtranspose_macs(layer, in_shape), sum(p.dma_bytes for _, p in out), first.inp_slots)
    return out, summary


def convtranspose_macs(layer: ConvTransposeLayer, in_shape: tuple[int, int, int]) -> int:
    """MACs the conv engine does for the layer: per phase, outputs x (Ci/groups) x sub-kernel taps
    (padding taps included, as for a conv; bias-only pieces count 0)."""
    total = 0
    for ph in convtranspose_phases(layer, in_shape):
        if ph.real:
            total += conv_macs(ph.shape)
    return total


def emit_convtranspose(phases: list[tuple[list[Step], Plan]], geom: Geometry, *, mark_index: int | None = 0,
                       finish: bool = True) -> list[isa.Instruction]:
    """The phases' streams joined by :func:`chain_streams`' barrier (a phase's loads overwrite INP/WGT
    slots the previous phase's convs read, and its stores must not overtake them); optionally a MARK
    after the last STORE and FINISH."""
    streams = [emit_instructions(steps, plan, mark_index=None, finish=False) for steps, plan in phases]
    insns = chain_streams(geom, streams)[:-1]  # without chain_streams' FINISH
    if mark_index is not None:
        insns.append(isa.Mark(index=mark_index))
    if finish:
        insns.append(isa.Finish())
    return insns
