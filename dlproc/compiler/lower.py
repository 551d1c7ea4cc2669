"""Lowering: quantized layers -> processor operations (layerprog conv/pool layers) on DRAM tensors.

What each hardware layer becomes:

* ``conv`` -> one conv op (batch norm and the activation were fused into it by the importer and the
  quantizer: the activation is the requantization clamp, leaky ReLU the negative multiplier).
  *Sibling 1x1 convs* (the same input, stride 1, no padding, the same output zero point and clamp,
  outputs read only by other hardware layers, not concat inputs: GoogLeNet's 3x3_reduce and
  5x5_reduce) become **one** conv op whose output blocks hold each sibling's channels from a
  block boundary on; each sibling's tensor is a channel-block slice of it (like a concat slice).
  The input is read once instead of once per sibling and one barrier and pipeline fill is saved;
  the MAC work is the same.
* ``fc`` -> an FC op on the FC engine when the configuration has it (fc.ModuleGeneration) and the
  layer fits it (inputs within fc.InputMemorySize and an INP half, C outputs' weights within a WGT
  half); the input tensor is read as it is (x element (cb*H*W + pixel)*C + lane), the weight
  columns are permuted to that order (zero columns for a padded concat's padding channels).
  Otherwise (hardware fallback, with a notice/note):
  a convolution whose kernel covers the whole input plane (H x W, no padding) over the
  producer's tensor as it is, so no flatten/relayout is needed: weight (Co, C*H*W) in C, H, W
  order is exactly an OIHW kernel (Co, C, H, W). The output is (Co, 1, 1).
* ``maxpool`` / ``avgpool`` / ``global_avgpool`` -> a pool op (separate POOL instructions after
  the producing conv; the conv output goes through DRAM).
* ``act`` (an activation the importer could not fuse) -> a 1x1 depthwise conv with unit weights
  and the layer's rescale multiplier: ``requantize(x - zp_in, M, S, zp_out, clamp)``, bit-exact
  with ``golden.ops.rescale``.
* ``act`` with an activation table (sigmoid, SiLU, HardSwish, ...: ``params["act_table"]``) -> fused
  into the conv/fc/add in front when that layer's output has no other reader (not the host, no
  other layer, no sibling merge): the producer's op writes the act's tensor with its results
  through the output stage's table (``spec.act_table``), and the producer's own tensor never
  exists. Otherwise a 1x1 depthwise conv with unit weights, zero bias and the identity
  requantization (``acc = x``, M/2**S = 1, zp 0) through the table: ``table[x + 128]``, the
  golden model's ``ops.table_lookup``.
* ``mul`` -> an ADD op with ``mul`` set (the adder's multiply, adder.Multiplication): same-shape
  operands, or a per-channel (C, 1, 1) b read once per channel block (``b_repeat``).
* ``add`` -> an ADD op over both operands (channel-block layout, same shape; the adder module),
  with the quantized layer's (ma, mb, shift) and its clamp (a fused ReLU is act_min = zp_out).
* ``convtranspose`` -> one convtranspose op: sy*sx stride-1 convs (one per output phase, with the
  sub-kernel of the taps that land on it, flipped) whose STOREs scatter the phase's pixels into
  the output with strides sy/sx (``layerprog.convtranspose_phases``); the conv engine only.
* ``upsample`` -> an UPSAMPLE op (nearest, integer factors; the segmentation block).
* ``lrn`` -> an LRN op: the layer's table (``lrn_mult``/``lrn_shift``) is placed in the conv weight
  region and loaded into the LRN block (LOAD PRM + LRNTAB) before the tiles (the LRN block).
* ``softmax`` (quantized int8 for the softmax block) -> the exp table load (LOAD PRM + SMXTAB) and
  SOFTMAX tiles over the channels (the softmax block).
* ``concat`` -> no instructions: every input is written by its producer straight into its
  channel-block slice of the concat tensor (the DRAM layout is channel-block major, so a slice is
  itself a valid tensor). An input that cannot be written in place (the network input, a tensor
  that is also read by the host, one that is already a slice of another concat, or one that needs
  a rescale to the concat's scale) is copied/rescaled into its slice by a 1x1 depthwise conv.
  An input whose channel count is not a multiple of C still starts its slice on a channel-block
  boundary: its last block's unused lanes stay in the concat tensor as *padding channels* (the
  producer writes whole blocks anyway). The concat tensor then carries a ``channel_map`` (the
  physical channel of every logical channel); consumers that work per channel (pools, standalone
  activations, upsample, copies) keep the map, convs and fcs get zero weights for the padding
  channels (so whatever the padding lanes hold never reaches an output), and layers that mix
  channels otherwise (LRN, add with a different map) or tensors the host reads are refused.

First-layer folding: a conv that reads the network input with few channels (Cin < C) would use
Cin of the C input lanes. When it pays (fewer channel blocks after folding than blocks x taps
before), the host performs im2col on the int8 input -- every output pixel's receptive field
(Cin x kh x kw values, padding = zp_in) becomes its channel vector -- and the conv becomes a 1x1
conv over Cin*kh*kw channels. Bit-exact: padded taps hold zp_in exactly as LOAD's padding would.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlproc.errors import CompileError
from dlproc.hardware import isa
from dlproc.compiler.planners.add import AddLayer
from dlproc.compiler.planners.conv import ConvLayer
from dlproc.compiler.planners.convtranspose import ConvTransposeLayer
from dlproc.compiler.planners.fc import FcLayer, fc_out_shape
from dlproc.compiler.planners.lrn import LrnLayer
from dlproc.compiler.planners.pool import PoolLayer
from dlproc.compiler.planners.softmax import SoftmaxLayer
from dlproc.compiler.planners.upsample import UpsampleLayer

from dlproc.compiler import layeremit

__all__ = ["Tensor", "HwOp", "InputFold", "Lowered", "lower"]

# 2**14 / 2**14 == 1: an exact identity requantization, used to copy a tensor into a concat slice.
_IDENTITY_M, _IDENTITY_S = 1 << 14, 14


@dataclass
class Tensor:
    """A tensor in DRAM (channel-block layout). ``alias`` = (root tensor, first channel block)."""

    name: str
    shape: tuple[int, int, int]  #: physical (C, H, W) in DRAM; C includes padding channels
    alias: tuple[str, int] | None = None
    #: physical channel of each logical channel, or None when they coincide (no padding channels)
    channel_map: np.ndarray | None = None

    @property
    def logical_shape(self) -> tuple[int, int, int]:
        if self.channel_map is None:
            return self.shape
        return (len(self.channel_map), self.shape[1], self.shape[2])


@dataclass
class HwOp:
    """One processor operation: a layerprog conv/pool layer reading ``src`` and writing ``dst``."""

    layer: str  #: the quantized layer it implements (profile rows, layer table)
    kind: str  #: "conv", "pool", "add", "upsample", "lrn" or "convtranspose"
    spec: ConvLayer | PoolLayer | AddLayer | UpsampleLayer | LrnLayer | ConvTransposeLayer
    src: str
    dst: str
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    weights: str = "conv"  #: weight region: "conv" (ConvWeightDataOffset) or "fc" (FCWeightDataOffset)
    macs: int = 0  #: multiply-accumulates of the original layer (utilization)
    note: str = ""
    src2: str | None = None  #: the second operand of an element-wise add


@dataclass
class InputFold:
    """im2col of the network input done by the host (see the module docstring)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]
    pad_value: int
    shape: tuple[int, int, int]  #: the folded tensor (Cin*kh*kw, Ho, Wo)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "im2col", "kernel": list(self.kernel), "stride": list(self.stride), "pads": list(self.pads),
                "dilation": list(self.dilation), "pad_value": self.pad_value, "shape": list(self.shape)}


@dataclass
class Lowered:
    ops: list[HwOp]
    tensors: dict[str, Tensor]
    input_tensor: str
    fold: InputFold | None
    notes: list[str] = field(default_factory=list)


def _pair(v: Any) -> tuple[int, int]:
    if np.isscalar(v):
        return (int(v), int(v))
    return tuple(int(a) for a in v)  # type: ignore[return-value]


def _pads(v: Any) -> tuple[int, int, int, int]:
    if np.isscalar(v):
        return (int(v),) * 4  # type: ignore[return-value]
    t = tuple(int(a) for a in v)
    return t if len(t) == 4 else (t[0], t[1], t[0], t[1])  # type: ignore[return-value]


def _conv_spec(layer: Any, zp_in: int, weight: np.ndarray | None = None, **geometry: Any) -> ConvLayer:
    p = layer.params
    a = layer.attrs
    kw = dict(stride=a.get("stride", 1), pads=a.get("pads", 0), dilation=a.get("dilation", 1),
              groups=int(a.get("groups", 1)))
    kw.update(geometry)
    return ConvLayer(weight=p["weight"] if weight is None else weight, bias=p["bias"], mult=p["mult"],
                     shift=p["shift"], mult_neg=p.get("mult_neg"), zp_in=zp_in, zp_out=int(layer.zero_point),
                     act_min=int(layer.act_min), act_max=int(layer.act_max), **kw)


def _rescale_spec(channels: int, zp_in: int, mult: Any, shift: Any, zp_out: int, act_min: int = -128,
                  act_max: int = 127, mult_neg: Any = None) -> ConvLayer:
    """A 1x1 depthwise conv computing ``requantize(x - zp_in, M, S, zp_out, clamp, M_neg)`` per channel."""
    def per_channel(v: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=np.int64).reshape(-1), (channels,)).copy()

    return ConvLayer(weight=np.ones((channels, 1, 1, 1), dtype=np.int8), bias=np.zeros(channels, dtype=np.int32),
                     mult=per_channel(mult), shift=per_channel(shift),
                     mult_neg=None if mult_neg is None else per_channel(mult_neg), zp_in=zp_in, zp_out=zp_out,
                     act_min=act_min, act_max=act_max, groups=channels)


def _fold_pays(cin: int, kh: int, kw: int, c: int) -> bool:
    before = -(-cin // c) * kh * kw
    after = -(-(cin * kh * kw) // c)
    return cin < c and after < before


class _Lowerer:
    def __init__(self, qnet: Any, hw_names: set[str], geom: Any, boundary: set[str], fold_input: bool):
        self.qnet = qnet
        self.hw = hw_names
        self.geom = geom
        self.c = geom.c
        self.boundary = boundary
        self.fold_input = fold_input
        self.ops: list[HwOp] = []
        self.tensors: dict[str, Tensor] = {}
        self.notes: list[str] = []
        self.fold: InputFold | None = None
        self.input_name = qnet.inputs[0]
        self.input_tensor = self.input_name
        #: tensors that are channel views of another (``channels`` layers: no memory of their own)
        self.views: set[str] = set()
        #: producer name -> the table act fused into it (see the module docstring)
        self.tabled = self._table_fusions()
        self.fused_acts = {act.name for act in self.tabled.values()}

    def _table_fusions(self) -> dict[str, Any]:
        fused = {}
        if not self.geom.hw.has_block(isa.Opcode.ACTTAB):
            return fused
        for act in self.qnet.layers:
            if act.op != "act" or "act_table" not in act.params or act.name not in self.hw:
                continue
            src = self.qnet[act.inputs[0]]
            if (src.op in ("conv", "fc", "add", "mul") and src.name in self.hw and src.name not in self.boundary
                    and [l.name for l in self._consumers(src.name)] == [act.name]):
                fused[src.name] = act
        return fused

    def _dst(self, layer: Any) -> str:
        """The tensor ``layer``'s op writes: its own, or that of the table act fused into it."""
        act = self.tabled.get(layer.name)
        return layer.name if act is None else act.name

    def _table(self, layer: Any) -> Any:
        act = self.tabled.get(layer.name)
        return None if act is None else np.asarray(act.params["act_table"])

    def _fused_note(self, layer: Any) -> str:
        act = self.tabled.get(layer.name)
        if act is None:
            return ""
        return f"; + {act.activation.kind} ({act.name}) through the activation table"

    # -- helpers -------------------------------------------------------------------------------
    def _consumers(self, name: str) -> list[Any]:
        return [layer for layer in self.qnet.layers if name in layer.inputs]

    def _add_tensor(self, name: str, shape: tuple[int, int, int], channel_map: np.ndarray | None = None) -> None:
        self.tensors[name] = Tensor(name, tuple(int(v) for v in shape), channel_map=channel_map)  # type: ignore[arg-type]

    def _map_of(self, name: str) -> np.ndarray | None:
        return self.tensors[name].channel_map

    def _padded_weight(self, layer: Any, src: str, weight: np.ndarray) -> np.ndarray:
        """``weight`` (Co, Ci, kh, kw) over the physical channels of ``src``: zeros on padding channels."""
        cmap = self._map_of(src)
        if cmap is None:
            return weight
        if int(layer.attrs.get("groups", 1)) != 1:
            raise CompileError(f"layer {layer.name!r} ({layer.op}): a grouped convolution cannot read {src!r}, a "
                               "concat with padding channels (its inputs are not multiples of C channels)")
        out = np.zeros((weight.shape[0], self.tensors[src].shape[0], *weight.shape[2:]), dtype=weight.dtype)
        out[:, cmap] = weight
        return out

    def _refuse_padded(self, layer: Any, src: str, why: str) -> None:
        if self._map_of(src) is not None:
            raise CompileError(f"layer {layer.name!r} ({layer.op}) reads {src!r}, a concat whose inputs are not "
                               f"multiples of C = {self.c} channels (so it holds padding channels), and {why}; "
                               "choose a ConvThreadNumber whose square root divides the concat inputs' channels")

    def _op(self, layer: Any, kind: str, spec: Any, src: str, dst: str, macs: int = 0, weights: str = "conv",
            note: str = "", src2: str | None = None) -> tuple[int, int, int]:
        in_shape = self.tensors[src].shape
        try:
            if kind == "conv":
                out_shape = layeremit.conv_out_shape(spec, in_shape)
            elif kind == "pool":
                out_shape = layeremit.pool_out_shape(spec, in_shape)
            elif kind == "upsample":
                out_shape = layeremit.upsample_out_shape(spec, in_shape)
            elif kind == "convtranspose":
                out_shape = layeremit.convtranspose_out_shape(spec, in_shape)
            elif kind == "fc":
                out_shape = fc_out_shape(spec)
            else:  # add, lrn: the shape of the input
                out_shape = in_shape
        except CompileError as exc:
            raise CompileError(f"layer {layer.name!r} ({layer.op}): {exc}") from None
        self.ops.append(HwOp(layer.name, kind, spec, src, dst, in_shape, out_shape, weights, macs, note, src2))
        return out_shape

    # -- per operator --------------------------------------------------------------------------
    def lower(self) -> Lowered:
        in_layer = self.qnet[self.input_name]
        self._add_tensor(self.input_name, in_layer.shape.as_tuple())
        for layer in self.qnet.layers:
            if layer.name not in self.hw or layer.name in self.fused_acts:
                continue
            if self._dst(layer) not in self.tensors:  # not already lowered with a sibling
                getattr(self, f"_lower_{layer.op}")(layer)
            expect = layer.shape.as_tuple()
            got = self.tensors[self._dst(layer)].logical_shape
            if got != expect:
                raise CompileError(f"layer {layer.name!r} ({layer.op}): lowered output shape {got} differs from the "
                                   f"network's {expect}")
        return Lowered(self.ops, self.tensors, self.input_tensor, self.fold, self.notes)

    def _lower_conv(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        w = layer.params["weight"]
        co, cig, kh, kw = w.shape
        out_c, out_h, out_w = layer.shape.as_tuple()
        macs = out_h * out_w * co * cig * kh * kw
        fused = f" (fused: {' + '.join(layer.origin)})" if len(layer.origin) > 1 else ""
        cmap = self._map_of(src.name)
        if cmap is not None and cig == 1 and co == int(layer.attrs.get("groups", 1)) == len(cmap):
            self._lower_depthwise_padded(layer, src, cmap, macs, fused)
            return
        if self._should_fold(layer, src):
            a = layer.attrs
            cin = src.shape.c
            self.fold = InputFold(_pair(a.get("kernel", (kh, kw))), _pair(a.get("stride", 1)), _pads(a.get("pads", 0)),
                                  _pair(a.get("dilation", 1)), int(src.zero_point), (cin * kh * kw, out_h, out_w))
            folded = f"{self.input_name}/im2col"
            self._add_tensor(folded, self.fold.shape)
            self.input_tensor = folded
            spec = _conv_spec(layer, int(src.zero_point), w.reshape(co, cin * kh * kw, 1, 1), stride=1, pads=0,
                              dilation=1, groups=1, act_table=self._table(layer))
            shape = self._op(layer, "conv", spec, folded, self._dst(layer), macs,
                             note=f"first-layer folding: {cin}x{kh}x{kw} taps -> {cin * kh * kw} channels (im2col "
                                  f"on the host){fused}{self._fused_note(layer)}")
            self.notes.append(f"{layer.name}: first-layer folding, the host folds the {kh}x{kw} taps of the "
                              f"{cin}-channel input into {cin * kh * kw} channels (a 1x1 conv on "
                              f"{-(-cin * kh * kw // self.c)} channel block(s) instead of {kh * kw} taps)")
        elif len(siblings := self._siblings(layer)) > 1:
            self._lower_merged(siblings)
            return
        else:
            spec = _conv_spec(layer, int(src.zero_point), self._padded_weight(layer, src.name, w),
                              act_table=self._table(layer))
            shape = self._op(layer, "conv", spec, src.name, self._dst(layer), macs,
                             note=(fused.strip() + self._fused_note(layer)).lstrip("; "))
        self._add_tensor(self._dst(layer), shape)
        if len(layer.origin) > 1:
            self.notes.append(f"{layer.name}: {' + '.join(layer.origin)} fused into one conv")

    def _lower_depthwise_padded(self, layer: Any, src: Any, cmap: np.ndarray, macs: int, fused: str) -> None:
        """A depthwise conv (one input channel per output channel, e.g. a BatchNormalization that could
        not be folded) reading a concat with padding channels: it works per channel, so it runs over
        the physical channels (zero weights, bias and multiplier on the padding ones) and its output
        keeps the channel map, as a standalone activation does."""
        phys = self.tensors[src.name].shape[0]
        p = layer.params

        def spread(v: Any, shape: tuple[int, ...] = ()) -> np.ndarray:
            v = np.asarray(v)
            out = np.zeros((phys,) + shape, dtype=v.dtype)
            out[cmap] = v.reshape((len(cmap),) + shape)
            return out

        mneg = p.get("mult_neg")
        spec = ConvLayer(weight=spread(p["weight"], p["weight"].shape[1:]), bias=spread(p["bias"]),
                         mult=spread(p["mult"]), shift=spread(p["shift"]),
                         mult_neg=None if mneg is None else spread(mneg), zp_in=int(src.zero_point),
                         zp_out=int(layer.zero_point), act_min=int(layer.act_min), act_max=int(layer.act_max),
                         stride=layer.attrs.get("stride", 1), pads=layer.attrs.get("pads", 0),
                         dilation=layer.attrs.get("dilation", 1), groups=phys, act_table=self._table(layer))
        shape = self._op(layer, "conv", spec, src.name, self._dst(layer), macs,
                         note=(f"depthwise over the {phys} physical channels of a padded concat{fused}"
                               + self._fused_note(layer)))
        self._add_tensor(self._dst(layer), shape, cmap)

    def _mergeable(self, layer: Any) -> bool:
        """A 1x1 stride-1 unpadded conv whose output only other hardware layers read, never a concat."""
        if layer.op != "conv" or layer.name in self.boundary or layer.name in self.tensors or layer.name in self.tabled:
            return False
        a = layer.attrs
        if (int(a.get("groups", 1)) != 1 or _pair(a.get("stride", 1)) != (1, 1) or _pads(a.get("pads", 0)) != (0,) * 4
                or _pair(a.get("dilation", 1)) != (1, 1) or layer.params["weight"].shape[2:] != (1, 1)):
            return False
        consumers = self._consumers(layer.name)
        return bool(consumers) and all(c.name in self.hw and c.op != "concat" for c in consumers)

    def _siblings(self, layer: Any) -> list[Any]:
        """``layer`` and the later mergeable 1x1 convs reading the same tensor (module docstring)."""
        src = layer.inputs[0]
        if src == self.input_name or not self._mergeable(layer):
            return [layer]

        def key(l: Any) -> tuple:
            return (int(l.zero_point), int(l.act_min), int(l.act_max), l.params.get("mult_neg") is None)

        group = [layer]
        for other in self._consumers(src):
            if other is not layer and other.name in self.hw and other.inputs == [src] and self._mergeable(other) \
                    and key(other) == key(layer):
                group.append(other)
        return group

    def _lower_merged(self, group: list[Any]) -> None:
        """One conv op for sibling 1x1 convs; each sibling's output is a block-aligned slice of it."""
        c = self.c
        src = self.qnet[group[0].inputs[0]]
        first = group[0]
        ws, bias, mult, shift, mneg, starts = [], [], [], [], [], []
        at = 0
        for k, layer in enumerate(group):
            p = layer.params
            w = self._padded_weight(layer, src.name, p["weight"])
            co = w.shape[0]
            # Every sibling but the last is padded to whole blocks (zero weights and bias; any
            # valid requantization), so the next one starts on a block boundary.
            n = -(-co // c) * c if k + 1 < len(group) else co
            pad = n - co

            def ext(v: Any, fill: Any) -> np.ndarray:
                v = np.asarray(v).reshape(-1)
                return np.concatenate([v, np.full(pad, fill, dtype=v.dtype)])

            ws.append(np.concatenate([w, np.zeros((pad, *w.shape[1:]), dtype=w.dtype)]))
            bias.append(ext(p["bias"], 0))
            mult.append(ext(p["mult"], np.asarray(p["mult"]).reshape(-1)[0]))
            shift.append(ext(p["shift"], np.asarray(p["shift"]).reshape(-1)[0]))
            if p.get("mult_neg") is not None:
                mneg.append(ext(p["mult_neg"], np.asarray(p["mult_neg"]).reshape(-1)[0]))
            starts.append(at)
            at += n
        spec = ConvLayer(weight=np.concatenate(ws), bias=np.concatenate(bias), mult=np.concatenate(mult),
                         shift=np.concatenate(shift), mult_neg=np.concatenate(mneg) if mneg else None,
                         zp_in=int(src.zero_point), zp_out=int(first.zero_point), act_min=int(first.act_min),
                         act_max=int(first.act_max))
        names = [layer.name for layer in group]
        merged = "+".join(names)
        macs = sum(int(np.prod(l.params["weight"].shape)) * l.shape.h * l.shape.w for l in group)
        shape = self._op(first, "conv", spec, src.name, merged, macs,
                         note=f"sibling 1x1 convs {' + '.join(names)} as one conv")
        self._add_tensor(merged, shape)
        for layer, start in zip(group, starts):
            self._add_tensor(layer.name, (layer.shape.c, shape[1], shape[2]))
            self.tensors[layer.name].alias = (merged, start // c)
        self.notes.append(f"{first.name}: sibling 1x1 convs {', '.join(names)} (same input {src.name}) run as one "
                          f"conv of {at} output channels; each output is a channel-block slice of it")

    def _should_fold(self, layer: Any, src: Any) -> bool:
        if not self.fold_input or src.name != self.input_name or self.fold is not None:
            return False
        if int(layer.attrs.get("groups", 1)) != 1 or len(self._consumers(src.name)) != 1:
            return False
        _, cin, kh, kw = layer.params["weight"].shape
        return _fold_pays(cin, kh, kw, self.c)

    def _lower_fc(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        c, h, w = self.tensors[src.name].logical_shape
        weight = layer.params["weight"]
        co = weight.shape[0]
        if weight.shape[1] != c * h * w:
            raise CompileError(f"layer {layer.name!r} (fc): weight has {weight.shape[1]} inputs, the input tensor "
                               f"{c}x{h}x{w} has {c * h * w}")
        kernel = self._padded_weight(layer, src.name, weight.reshape(co, c, h, w))
        logical_macs = co * c * h * w
        c = kernel.shape[1]
        refused = ""
        if self.geom.hw.has_block(isa.Opcode.FC):
            refused = self._lower_fc_engine(layer, src, (c, h, w), kernel.reshape(co, -1), logical_macs)
            if refused is None:
                return
        if h > 31 or w > 31:
            raise CompileError(f"layer {layer.name!r} (fc) reads a {h}x{w} plane; it runs as an {h}x{w} convolution "
                               "and the CONV kernel is at most 31x31 (add a pooling layer before it)")
        spec = _conv_spec(layer, int(src.zero_point), kernel, stride=1, pads=0, dilation=1, groups=1,
                          act_table=self._table(layer))
        # The FC engine's reason travels in the note, so that a conv that does not fit either
        # names both (compile.py adds the note of an fc-as-conv op to its error).
        why = f"; the FC engine was not used: {refused}" if refused else ""
        shape = self._op(layer, "conv", spec, src.name, self._dst(layer), logical_macs, weights="fc",
                         note=f"fc as a {h}x{w} conv over the {c}-channel input{why}{self._fused_note(layer)}")
        self._add_tensor(self._dst(layer), shape)

    def _lower_fc_engine(self, layer: Any, src: Any, in_shape: tuple[int, int, int], weight: np.ndarray,
                         macs: int) -> str | None:
        """FC on the FC engine (fc module): None, or why the layer does not fit it (also in a note).

        ``weight`` is (Co, C*H*W) over the physical channels of the input tensor ``in_shape``."""
        p = layer.params
        spec = FcLayer(weight=weight, bias=p["bias"], mult=p["mult"], shift=p["shift"], mult_neg=p.get("mult_neg"),
                       zp_in=int(src.zero_point), zp_out=int(layer.zero_point), act_min=int(layer.act_min),
                       act_max=int(layer.act_max), act_table=self._table(layer))
        try:
            s = layeremit.fc_fit(self.geom, spec, in_shape)
        except CompileError as exc:
            self.notes.append(f"{layer.name}: does not fit the FC engine ({exc}); it runs on the conv module as a "
                              "convolution (hardware fallback)")
            return str(exc)
        c, h, w = in_shape
        shape = self._op(layer, "fc", spec, src.name, self._dst(layer), macs, weights="fc",
                         note=f"fc on the FC engine ({self.geom.hw.fc_lanes} lanes, {s['tile']} outputs per "
                              f"tile){self._fused_note(layer)}")
        self._add_tensor(self._dst(layer), shape)
        return None

    def _lower_softmax(self, layer: Any) -> None:
        """Softmax on the softmax block: exp table load, then SOFTMAX tiles over the channels."""
        src = self.qnet[layer.inputs[0]]
        spec = SoftmaxLayer(exp_table=np.asarray(layer.params["exp_table"]))
        shape = self._op(layer, "softmax", spec, src.name, layer.name, note="softmax on the softmax block")
        self._add_tensor(layer.name, shape)

    def _pool(self, layer: Any, spec: PoolLayer, note: str = "") -> None:
        src = self.qnet[layer.inputs[0]]
        shape = self._op(layer, "pool", spec, src.name, layer.name, note=note)
        self._add_tensor(layer.name, shape, self._map_of(src.name))

    def _lower_maxpool(self, layer: Any) -> None:
        a = layer.attrs
        self._pool(layer, PoolLayer("max", a["kernel"], a.get("stride", 1), a.get("pads", 0)))

    def _avg_params(self, layer: Any) -> tuple[Any, Any]:
        # Per-window divisors (count_include_pad=False over padding) come as (Ho, Wo) arrays;
        # layerprog then issues one POOL per rectangle of equal divisor.
        if "mult" in layer.params:
            return layer.params["mult"], layer.params["shift"]
        return int(layer.q["mult"]), int(layer.q["shift"])

    def _lower_avgpool(self, layer: Any) -> None:
        a = layer.attrs
        src = self.qnet[layer.inputs[0]]
        m, s = self._avg_params(layer)
        self._pool(layer, PoolLayer("avg", a["kernel"], a.get("stride", 1), a.get("pads", 0), int(src.zero_point),
                                    int(layer.zero_point), m, s, int(layer.act_min), int(layer.act_max),
                                    bool(a.get("count_include_pad", False))))

    def _lower_global_avgpool(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        m, s = self._avg_params(layer)
        self._pool(layer, PoolLayer("global_avg", zp_in=int(src.zero_point), zp_out=int(layer.zero_point), mult=m,
                                    shift=s, act_min=int(layer.act_min), act_max=int(layer.act_max)))

    def _lower_act(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        q = layer.q
        ch = self.tensors[src.name].shape[0]
        if "act_table" in layer.params:
            # The identity requantization (acc = x with zero bias and zp_in 0) and the table.
            spec = dataclasses.replace(_rescale_spec(ch, 0, _IDENTITY_M, _IDENTITY_S, 0),
                                       act_table=np.asarray(layer.params["act_table"]))
            shape = self._op(layer, "conv", spec, src.name, layer.name,
                             note=f"standalone {layer.activation.kind} through the activation table (1x1 depthwise "
                                  "conv, identity requantization)")
            self._add_tensor(layer.name, shape, self._map_of(src.name))
            return
        spec = _rescale_spec(ch, int(src.zero_point), q["mult"], q["shift"], int(layer.zero_point),
                             int(layer.act_min), int(layer.act_max), q.get("mult_neg"))
        shape = self._op(layer, "conv", spec, src.name, layer.name,
                         note="standalone activation as a 1x1 depthwise conv")
        self._add_tensor(layer.name, shape, self._map_of(src.name))

    def _lower_add(self, layer: Any) -> None:
        a, b = (self.qnet[n] for n in layer.inputs)
        sa, sb = self.tensors[a.name].shape, self.tensors[b.name].shape
        if sa != sb:
            raise CompileError(f"layer {layer.name!r} (add): operands have different shapes {sa} and {sb}")
        ma, mb = self._map_of(a.name), self._map_of(b.name)
        if (ma is None) != (mb is None) or (ma is not None and not np.array_equal(ma, mb)):
            self._refuse_padded(layer, a.name if ma is not None else b.name,
                                "the other operand has a different channel layout")
        q = layer.q
        spec = AddLayer(int(a.zero_point), int(q["ma"]), int(b.zero_point), int(q["mb"]), int(q["shift"]),
                        int(layer.zero_point), int(layer.act_min), int(layer.act_max), self._table(layer))
        shape = self._op(layer, "add", spec, a.name, self._dst(layer),
                         note=f"element-wise add (ADD){self._fused_note(layer)}", src2=b.name)
        self._add_tensor(self._dst(layer), shape, ma)

    def _lower_mul(self, layer: Any) -> None:
        a, b = (self.qnet[n] for n in layer.inputs)
        sa, sb = self.tensors[a.name].shape, self.tensors[b.name].shape
        broadcast = sa != sb
        if broadcast and sb != (sa[0], 1, 1):
            raise CompileError(f"layer {layer.name!r} (mul): operand b {sb} is neither a's shape {sa} nor a "
                               "per-channel vector of it")
        ma, mb = self._map_of(a.name), self._map_of(b.name)
        if (ma is None) != (mb is None) or (ma is not None and not np.array_equal(ma, mb)):
            self._refuse_padded(layer, a.name if ma is not None else b.name,
                                "the other operand has a different channel layout")
        q = layer.q
        spec = AddLayer(int(a.zero_point), int(q["mult"]), int(b.zero_point), 0, int(q["shift"]),
                        int(layer.zero_point), int(layer.act_min), int(layer.act_max), self._table(layer),
                        mul=True, broadcast=broadcast)
        what = "per-channel vector broadcast over the pixels" if broadcast else "same-shape operands"
        shape = self._op(layer, "add", spec, a.name, self._dst(layer),
                         note=f"element-wise multiply (ADD.mul, {what}){self._fused_note(layer)}", src2=b.name)
        self._add_tensor(self._dst(layer), shape, ma)

    def _lower_channels(self, layer: Any) -> None:
        """A channel selection/permutation (shuffle, Split, Slice): no instructions. The layer's tensor
        is a view of its input's memory whose channel map picks the physical channels; convs and fcs
        read it through zero-padded weights, per-channel layers keep the map, a concat copies it
        compactly. A view the host reads is copied compactly into a tensor of its own."""
        src = self.qnet[layer.inputs[0]]
        t = self.tensors[src.name]
        base = t.channel_map if t.channel_map is not None else np.arange(t.shape[0])
        cmap = base[np.asarray(layer.attrs["index"], dtype=np.int64)]
        if layer.name in self.boundary:
            spec = self._compacting_copy(src.name, int(src.zero_point), int(layer.zero_point), cmap)
            shape = self._op(layer, "conv", spec, src.name, layer.name,
                             note="channel selection read by the host: a compacting 1x1 copy")
            self._add_tensor(layer.name, shape)
            return
        self._add_tensor(layer.name, t.shape, cmap)
        self.tensors[layer.name].alias = (src.name, 0)
        self.views.add(layer.name)
        self.notes.append(f"{layer.name}: channel selection of {src.name} ({len(cmap)} of {t.shape[0]} channels) as "
                          "an address remap (no instructions)")

    def _compacting_copy(self, src: str, zp_in: int, zp_out: int, cmap: np.ndarray, mult: int = _IDENTITY_M,
                         shift: int = _IDENTITY_S) -> ConvLayer:
        """A 1x1 conv writing the channels ``cmap`` of ``src``'s physical tensor densely (unit
        weights, zero bias; exact with the default identity requantization, or a rescale M/2**S)."""
        n, phys = len(cmap), self.tensors[src].shape[0]
        weight = np.zeros((n, phys, 1, 1), dtype=np.int8)
        weight[np.arange(n), cmap] = 1
        return ConvLayer(weight=weight, bias=np.zeros(n, dtype=np.int32), mult=np.full(n, mult),
                         shift=np.full(n, shift), zp_in=zp_in, zp_out=zp_out)

    def _lower_upsample(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        spec = UpsampleLayer(layer.attrs.get("scale", 2))
        shape = self._op(layer, "upsample", spec, src.name, layer.name, note="nearest upsample (UPSAMPLE)")
        self._add_tensor(layer.name, shape, self._map_of(src.name))

    def _lower_lrn(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        self._refuse_padded(layer, src.name, "LRN sums over neighbouring channels")
        spec = LrnLayer(int(layer.attrs["size"]), int(src.zero_point), layer.params["lrn_mult"],
                        layer.params["lrn_shift"], int(layer.zero_point), int(layer.act_min), int(layer.act_max))
        shape = self._op(layer, "lrn", spec, src.name, layer.name, note="LRN (table load + LRN)")
        self._add_tensor(layer.name, shape)

    def _lower_concat(self, layer: Any) -> None:
        c = self.c
        # A channel view (shuffle, split) is copied compactly into its slice (its logical channels
        # only); every other input occupies its physical channels.
        compact = {name for name in layer.inputs if name in self.views}
        shapes = [self.tensors[name].logical_shape if name in compact else self.tensors[name].shape
                  for name in layer.inputs]
        h, w = shapes[0][1:]
        if any(s[1:] != (h, w) for s in shapes):
            raise CompileError(f"layer {layer.name!r} (concat): inputs have different planes {shapes}")
        # Every input starts on a channel-block boundary; an input that is not a multiple of C
        # leaves padding channels up to the next boundary (see the module docstring).
        starts, maps, at = [], [], 0
        for name, s in zip(layer.inputs, shapes):
            starts.append(at)
            own = None if name in compact else self._map_of(name)
            maps.append(at + (np.arange(s[0]) if own is None else own))
            at += -(-s[0] // c) * c
        total = starts[-1] + shapes[-1][0]
        cmap = np.concatenate(maps)
        padded = len(cmap) != total
        if padded and layer.name in self.boundary:
            raise CompileError(
                f"layer {layer.name!r} (concat) is read by the host, but its inputs are not multiples of C = {c} "
                "channels (the hardware tensor would hold padding channels); choose a ConvThreadNumber whose square "
                "root divides the concat inputs' channels")
        self._add_tensor(layer.name, (total, h, w), cmap if padded else None)
        rescales = layer.q.get("rescale") or [None] * len(layer.inputs)
        copies = []
        for name, s, rescale, start in zip(layer.inputs, shapes, rescales, starts):
            block = start // c
            if rescale is None and self._can_alias(name):
                self.tensors[name].alias = (layer.name, block)
            else:
                part = f"{layer.name}/{name}"
                self._add_tensor(part, s, None if name in compact else self._map_of(name))
                self.tensors[part].alias = (layer.name, block)
                src = self.qnet[name]
                m, sh = (_IDENTITY_M, _IDENTITY_S) if rescale is None else (int(rescale[0]), int(rescale[1]))
                if name in compact:
                    spec = self._compacting_copy(name, int(src.zero_point), int(layer.zero_point), self._map_of(name),
                                                 m, sh)
                else:
                    spec = _rescale_spec(s[0], int(src.zero_point), m, sh, int(layer.zero_point))
                why = "rescale to the concat's scale" if rescale is not None else "copy"
                self._op(layer, "conv", spec, name, part, note=f"{why} of {name} into its channel slice")
                copies.append(name)
        written = [n for n in layer.inputs if n not in copies]
        self.notes.append(f"{layer.name}: concat by strided stores"
                          + (f" ({', '.join(written)} written in place)" if written else "")
                          + (f"; {', '.join(copies)} copied into their slices" if copies else "")
                          + (f"; {total - len(cmap)} padding channels (inputs not multiples of C = {c})"
                             if padded else ""))

    def _can_alias(self, name: str) -> bool:
        t = self.tensors[name]
        produced = any(op.dst == name for op in self.ops)
        return produced and t.alias is None and name not in self.boundary

    # -- transposed convolution ----------------------------------------------------------------
    def _lower_convtranspose(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        p, a = layer.params, layer.attrs
        spec = ConvTransposeLayer(
            weight=p["weight"], bias=p["bias"], mult=p["mult"], shift=p["shift"], mult_neg=p.get("mult_neg"),
            zp_in=int(src.zero_point), zp_out=int(layer.zero_point), act_min=int(layer.act_min),
            act_max=int(layer.act_max), stride=a.get("stride", 1), pads=a.get("pads", 0),
            output_padding=a.get("output_padding", 0), dilation=a.get("dilation", 1), groups=int(a.get("groups", 1)))
        sy, sx = _pair(a.get("stride", 1))
        macs = layeremit.convtranspose_macs(spec, self.tensors[src.name].shape)
        fused = f" (fused: {' + '.join(layer.origin)})" if len(layer.origin) > 1 else ""
        shape = self._op(layer, "convtranspose", spec, src.name, layer.name, macs,
                         note=f"transposed conv as {sy * sx} phase conv(s) with scattered stores{fused}")
        self._add_tensor(layer.name, shape)
        if len(layer.origin) > 1:
            self.notes.append(f"{layer.name}: {' + '.join(layer.origin)} fused into one transposed conv")
        if not self.geom.hw.upsample:
            self.notes.append(f"{layer.name}: transposed conv runs on the conv engine (output phases as stride-1 "
                              "convolutions); it does not need conv.SegmentationBlockGeneration, which is off")


def lower(qnet: Any, hw_names: set[str], geom: Any, boundary: set[str], fold_input: bool = True,
          reorder: bool = True) -> Lowered:
    """Lower the HW layers of ``qnet`` (see the module docstring); ``reorder`` applies
    :func:`schedule_ops`."""
    low = _Lowerer(qnet, hw_names, geom, boundary, fold_input).lower()
    if reorder:
        low.ops = schedule_ops(low.ops, low.tensors)
    return low


def _root(tensors: dict[str, Tensor], name: str) -> str:
    while tensors[name].alias is not None:
        name = tensors[name].alias[0]  # type: ignore[index]
    return name


def schedule_ops(ops: list[HwOp], tensors: dict[str, Tensor]) -> list[HwOp]:
    """Reorder operations so that an operation rarely reads what the one just before it wrote.

    The linker (:mod:`.program`) joins two operations without a full barrier when the second does
    not read the first one's output (its loads may then run while the first one's stores drain);
    in an inception block the pool branch and the 1x1 convs read the block input, so putting the
    pool between the merged reduce convs and the 3x3/5x5 convs that read them makes every join of
    the block but the first weak. Layers (runs of operations of one layer) are the units; a unit
    keeps its place relative to every earlier unit it shares a DRAM tensor (root) with when either
    writes it (so data and reuse order are unchanged); among the units that are ready, the first
    in network order that does not read the previous unit's output is taken, else the first."""
    units: list[list[HwOp]] = []
    for op in ops:
        if units and units[-1][-1].layer == op.layer:
            units[-1].append(op)
        else:
            units.append([op])
    reads = [{_root(tensors, n) for op in u for n in (op.src, op.src2) if n} for u in units]
    writes = [{_root(tensors, op.dst) for op in u} for u in units]
    preds = [{a for a in range(b) if writes[a] & (reads[b] | writes[b]) or reads[a] & writes[b]}
             for b in range(len(units))]
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(units):
        ready = [b for b in range(len(units)) if b not in done and preds[b] <= done]
        last = writes[order[-1]] if order else set()
        pick = next((b for b in ready if not reads[b] & last), ready[0])
        order.append(pick)
        done.add(pick)
    return [op for b in order for op in units[b]]
