"""Lowering: quantized layers -> processor operations (layerprog conv/pool layers) on DRAM tensors.

What each hardware layer becomes:

* ``conv`` -> one conv op (batch norm and the activation were fused into it by the importer and the
  quantizer: the activation is the requantization clamp, leaky ReLU the negative multiplier).
* ``fc`` -> an FC op on the FC engine when the configuration has it (fc.ModuleGeneration) and the
  layer fits it (inputs within fc.InputMemorySize and an INP half, C outputs' weights within a WGT
  half); the input tensor is read as it is (x element (cb*H*W + pixel)*C + lane), the weight
  columns are permuted to that order. Otherwise (hardware fallback, with a notice/note):
  a convolution whose kernel covers the whole input plane (H x W, no padding) over the
  producer's tensor as it is, so no flatten/relayout is needed: weight (Co, C*H*W) in C, H, W
  order is exactly an OIHW kernel (Co, C, H, W). The output is (Co, 1, 1).
* ``maxpool`` / ``avgpool`` / ``global_avgpool`` -> a pool op (separate POOL instructions after
  the producing conv; the conv output goes through DRAM).
* ``act`` (an activation the importer could not fuse) -> a 1x1 depthwise conv with unit weights
  and the layer's rescale multiplier: ``requantize(x - zp_in, M, S, zp_out, clamp)``, bit-exact
  with ``golden.ops.rescale``.
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
  Every input but the last must have a multiple of C channels.

First-layer folding: a conv that reads the network input with few channels (Cin < C) would use
Cin of the C input lanes. When it pays (fewer channel blocks after folding than blocks x taps
before), the host performs im2col on the int8 input -- every output pixel's receptive field
(Cin x kh x kw values, padding = zp_in) becomes its channel vector -- and the conv becomes a 1x1
conv over Cin*kh*kw channels. Bit-exact: padded taps hold zp_in exactly as LOAD's padding would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlproc.errors import CompileError
from dlproc import isa
from dlproc.layerprog import (AddLayer, ConvLayer, ConvTransposeLayer, FcLayer, LrnLayer, PoolLayer, SoftmaxLayer,
                              UpsampleLayer, fc_out_shape)

from . import layeremit

__all__ = ["Tensor", "HwOp", "InputFold", "Lowered", "lower"]

# 2**14 / 2**14 == 1: an exact identity requantization, used to copy a tensor into a concat slice.
_IDENTITY_M, _IDENTITY_S = 1 << 14, 14


@dataclass
class Tensor:
    """A tensor in DRAM (channel-block layout). ``alias`` = (root tensor, first channel block)."""

    name: str
    shape: tuple[int, int, int]
    alias: tuple[str, int] | None = None


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

    # -- helpers -------------------------------------------------------------------------------
    def _consumers(self, name: str) -> list[Any]:
        return [layer for layer in self.qnet.layers if name in layer.inputs]

    def _add_tensor(self, name: str, shape: tuple[int, int, int]) -> None:
        self.tensors[name] = Tensor(name, tuple(int(v) for v in shape))  # type: ignore[arg-type]

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
            if layer.name not in self.hw:
                continue
            getattr(self, f"_lower_{layer.op}")(layer)
            expect = layer.shape.as_tuple()
            got = self.tensors[layer.name].shape
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
        if self._should_fold(layer, src):
            a = layer.attrs
            cin = src.shape.c
            self.fold = InputFold(_pair(a.get("kernel", (kh, kw))), _pair(a.get("stride", 1)), _pads(a.get("pads", 0)),
                                  _pair(a.get("dilation", 1)), int(src.zero_point), (cin * kh * kw, out_h, out_w))
            folded = f"{self.input_name}/im2col"
            self._add_tensor(folded, self.fold.shape)
            self.input_tensor = folded
            spec = _conv_spec(layer, int(src.zero_point), w.reshape(co, cin * kh * kw, 1, 1), stride=1, pads=0,
                              dilation=1, groups=1)
            shape = self._op(layer, "conv", spec, folded, layer.name, macs,
                             note=f"first-layer folding: {cin}x{kh}x{kw} taps -> {cin * kh * kw} channels (im2col "
                                  f"on the host){fused}")
            self.notes.append(f"{layer.name}: first-layer folding, the host folds the {kh}x{kw} taps of the "
                              f"{cin}-channel input into {cin * kh * kw} channels (a 1x1 conv on "
                              f"{-(-cin * kh * kw // self.c)} channel block(s) instead of {kh * kw} taps)")
        else:
            spec = _conv_spec(layer, int(src.zero_point))
            shape = self._op(layer, "conv", spec, src.name, layer.name, macs, note=fused.strip())
        self._add_tensor(layer.name, shape)
        if len(layer.origin) > 1:
            self.notes.append(f"{layer.name}: {' + '.join(layer.origin)} fused into one conv")

    def _should_fold(self, layer: Any, src: Any) -> bool:
        if not self.fold_input or src.name != self.input_name or self.fold is not None:
            return False
        if int(layer.attrs.get("groups", 1)) != 1 or len(self._consumers(src.name)) != 1:
            return False
        _, cin, kh, kw = layer.params["weight"].shape
        return _fold_pays(cin, kh, kw, self.c)

    def _lower_fc(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        c, h, w = self.tensors[src.name].shape
        weight = layer.params["weight"]
        co = weight.shape[0]
        if weight.shape[1] != c * h * w:
            raise CompileError(f"layer {layer.name!r} (fc): weight has {weight.shape[1]} inputs, the input tensor "
                               f"{c}x{h}x{w} has {c * h * w}")
        if self.geom.hw.has_block(isa.Opcode.FC) and self._lower_fc_engine(layer, src, (c, h, w)):
            return
        if h > 31 or w > 31:
            raise CompileError(f"layer {layer.name!r} (fc) reads a {h}x{w} plane; it runs as an {h}x{w} convolution "
                               "and the CONV kernel is at most 31x31 (add a pooling layer before it)")
        spec = _conv_spec(layer, int(src.zero_point), weight.reshape(co, c, h, w), stride=1, pads=0, dilation=1,
                          groups=1)
        shape = self._op(layer, "conv", spec, src.name, layer.name, co * c * h * w, weights="fc",
                         note=f"fc as a {h}x{w} conv over the {c}-channel input")
        self._add_tensor(layer.name, shape)

    def _lower_fc_engine(self, layer: Any, src: Any, in_shape: tuple[int, int, int]) -> bool:
        """FC on the FC engine (fc module); False (with a note) if the layer does not fit it."""
        p = layer.params
        spec = FcLayer(weight=p["weight"], bias=p["bias"], mult=p["mult"], shift=p["shift"], mult_neg=p.get("mult_neg"),
                       zp_in=int(src.zero_point), zp_out=int(layer.zero_point), act_min=int(layer.act_min),
                       act_max=int(layer.act_max))
        try:
            s = layeremit.fc_fit(self.geom, spec, in_shape)
        except CompileError as exc:
            self.notes.append(f"{layer.name}: does not fit the FC engine ({exc}); it runs on the conv module as a "
                              "convolution (hardware fallback)")
            return False
        c, h, w = in_shape
        shape = self._op(layer, "fc", spec, src.name, layer.name, s["co"] * c * h * w, weights="fc",
                         note=f"fc on the FC engine ({self.geom.hw.fc_lanes} lanes, {s['tile']} outputs per tile)")
        self._add_tensor(layer.name, shape)
        return True

    def _lower_softmax(self, layer: Any) -> None:
        """Softmax on the softmax block: exp table load, then SOFTMAX tiles over the channels."""
        src = self.qnet[layer.inputs[0]]
        spec = SoftmaxLayer(exp_table=np.asarray(layer.params["exp_table"]))
        shape = self._op(layer, "softmax", spec, src.name, layer.name, note="softmax on the softmax block")
        self._add_tensor(layer.name, shape)

    def _pool(self, layer: Any, spec: PoolLayer, note: str = "") -> None:
        src = self.qnet[layer.inputs[0]]
        shape = self._op(layer, "pool", spec, src.name, layer.name, note=note)
        self._add_tensor(layer.name, shape)

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
        spec = _rescale_spec(ch, int(src.zero_point), q["mult"], q["shift"], int(layer.zero_point),
                             int(layer.act_min), int(layer.act_max), q.get("mult_neg"))
        shape = self._op(layer, "conv", spec, src.name, layer.name,
                         note="standalone activation as a 1x1 depthwise conv")
        self._add_tensor(layer.name, shape)

    def _lower_add(self, layer: Any) -> None:
        a, b = (self.qnet[n] for n in layer.inputs)
        sa, sb = self.tensors[a.name].shape, self.tensors[b.name].shape
        if sa != sb:
            raise CompileError(f"layer {layer.name!r} (add): operands have different shapes {sa} and {sb}")
        q = layer.q
        spec = AddLayer(int(a.zero_point), int(q["ma"]), int(b.zero_point), int(q["mb"]), int(q["shift"]),
                        int(layer.zero_point), int(layer.act_min), int(layer.act_max))
        shape = self._op(layer, "add", spec, a.name, layer.name, note="element-wise add (ADD)", src2=b.name)
        self._add_tensor(layer.name, shape)

    def _lower_upsample(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        spec = UpsampleLayer(layer.attrs.get("scale", 2))
        shape = self._op(layer, "upsample", spec, src.name, layer.name, note="nearest upsample (UPSAMPLE)")
        self._add_tensor(layer.name, shape)

    def _lower_lrn(self, layer: Any) -> None:
        src = self.qnet[layer.inputs[0]]
        spec = LrnLayer(int(layer.attrs["size"]), int(src.zero_point), layer.params["lrn_mult"],
                        layer.params["lrn_shift"], int(layer.zero_point), int(layer.act_min), int(layer.act_max))
        shape = self._op(layer, "lrn", spec, src.name, layer.name, note="LRN (table load + LRN)")
        self._add_tensor(layer.name, shape)

    def _lower_concat(self, layer: Any) -> None:
        c = self.c
        shapes = [self.tensors[name].shape for name in layer.inputs]
        h, w = shapes[0][1:]
        if any(s[1:] != (h, w) for s in shapes):
            raise CompileError(f"layer {layer.name!r} (concat): inputs have different planes {shapes}")
        for name, s in zip(layer.inputs[:-1], shapes[:-1]):
            if s[0] % c:
                raise CompileError(
                    f"layer {layer.name!r} (concat): input {name!r} has {s[0]} channels, not a multiple of C = {c}; "
                    "every concat input but the last must fill whole channel blocks (choose a ConvThreadNumber "
                    "whose square root divides the channel counts)")
        total = sum(s[0] for s in shapes)
        self._add_tensor(layer.name, (total, h, w))
        rescales = layer.q.get("rescale") or [None] * len(layer.inputs)
        block = 0
        copies = []
        for name, s, rescale in zip(layer.inputs, shapes, rescales):
            if rescale is None and self._can_alias(name):
                self.tensors[name].alias = (layer.name, block)
            else:
                part = f"{layer.name}/{name}"
                self._add_tensor(part, s)
                self.tensors[part].alias = (layer.name, block)
                src = self.qnet[name]
                m, sh = (_IDENTITY_M, _IDENTITY_S) if rescale is None else (int(rescale[0]), int(rescale[1]))
                spec = _rescale_spec(s[0], int(src.zero_point), m, sh, int(layer.zero_point))
                why = "rescale to the concat's scale" if rescale is not None else "copy"
                self._op(layer, "conv", spec, name, part, note=f"{why} of {name} into its channel slice")
                copies.append(name)
            block += s[0] // c
        written = [n for n in layer.inputs if n not in copies]
        self.notes.append(f"{layer.name}: concat by strided stores"
                          + (f" ({', '.join(written)} written in place)" if written else "")
                          + (f"; {', '.join(copies)} copied into their slices" if copies else ""))

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


def lower(qnet: Any, hw_names: set[str], geom: Any, boundary: set[str], fold_input: bool = True) -> Lowered:
    """Lower the HW layers of ``qnet`` (see the module docstring)."""
    return _Lowerer(qnet, hw_names, geom, boundary, fold_input).lower()
