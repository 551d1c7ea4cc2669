"""Import a full-integer TensorFlow Lite model (``.tflite``, int8) with the file's quantization.

The FlatBuffer is read with the maintained ``tflite`` package (its generated schema classes);
no TensorFlow is needed. Supported operators: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED,
AVERAGE_POOL_2D, MAX_POOL_2D, ADD, CONCATENATION, RESHAPE (a flatten, or a no-op), SOFTMAX
(software, as for ONNX), RESIZE_NEAREST_NEIGHBOR (integer factor), PAD (folded into the
convolution it feeds: TFLite pads int8 with the zero point, as dlproc's LOAD does), MEAN over
height and width (global average pool), and QUANTIZE/DEQUANTIZE at the model's edges.

TFLite is NHWC; the importer converts once, here: shapes become C, H, W, conv weights
``[Co, kh, kw, Ci]`` become ``(Co, Ci, kh, kw)``, depthwise ``[1, kh, kw, C*m]`` become
``(C*m, 1, kh, kw)`` with ``groups = C``, and a fully connected layer reading an H x W x C map
(TFLite flattens it in H, W, C order) gets its weight columns permuted to dlproc's C, H, W order.

The result is the float IR (weights dequantized; what ``dlproc stats`` reads) plus a
:class:`~dlproc.frontends.qspec.QuantSpec`, made into a QuantizedNetwork by
:func:`~dlproc.quant.imported.build_qnet`. Arithmetic differences from the TFLite reference
kernels are listed in docs/import.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlproc.errors import ModelError, UnsupportedOperatorError
from dlproc.ir import Activation, Layer, Network, Shape
from dlproc.frontends.qspec import QuantSpec, TensorQ, WeightQ, to_int8_domain

__all__ = ["import_tflite", "load_tflite_float", "SUPPORTED_OPS"]

SUPPORTED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "AVERAGE_POOL_2D", "MAX_POOL_2D", "ADD",
                 "CONCATENATION", "RESHAPE", "SOFTMAX", "RESIZE_NEAREST_NEIGHBOR", "PAD", "MEAN", "QUANTIZE",
                 "DEQUANTIZE")


def _tfl():
    try:
        import tflite
    except ImportError:  # pragma: no cover - a core dependency
        raise ModelError("reading .tflite files needs the 'tflite' package (pip install tflite)") from None
    return tflite


@dataclass
class _Val:
    """What a TFLite tensor is in the IR: the output of ``layer``; ``hwc`` set for a flattened map
    (its H, W, C, so that a fully connected layer can reorder its weight columns); ``pads`` for
    the output of a PAD that is waiting for the convolution it feeds."""

    layer: str
    hwc: tuple[int, int, int] | None = None
    pads: tuple[int, int, int, int] | None = None
    pad_node: str = ""


@dataclass
class _Importer:
    path: Path
    data: bytes
    source: str
    layers: list[Layer] = field(default_factory=list)
    spec: QuantSpec | None = None
    vals: dict[int, _Val] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tfl = _tfl()
        self.tfl = tfl
        try:
            self.model = tfl.Model.GetRootAsModel(self.data, 0)
            if self.model.SubgraphsLength() < 1:
                raise ModelError(f"{self.source}: the TFLite model has no subgraph")
            self.g = self.model.Subgraphs(0)
            self.g.OperatorsLength()
        except ModelError:
            raise
        except Exception as exc:  # a truncated FlatBuffer raises struct/index errors deep inside
            raise ModelError(f"{self.source}: not a readable TFLite model ({type(exc).__name__}: {exc})") from None
        self.spec = QuantSpec(source=self.source)
        self.op_names = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}

    # -- tensors --------------------------------------------------------------------------------

    def tensor(self, index: int):
        return self.g.Tensors(index)

    def tname(self, index: int) -> str:
        return self.tensor(index).Name().decode(errors="replace")

    def shape(self, index: int) -> list[int]:
        t = self.tensor(index)
        return [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []

    def const(self, index: int) -> np.ndarray | None:
        t = self.tensor(index)
        buf = self.model.Buffers(t.Buffer())
        if buf is None or buf.DataLength() == 0:
            return None
        dtype = {self.tfl.TensorType.INT8: np.int8, self.tfl.TensorType.UINT8: np.uint8,
                 self.tfl.TensorType.INT32: np.int32, self.tfl.TensorType.INT64: np.int64,
                 self.tfl.TensorType.FLOAT32: np.float32}.get(t.Type())
        if dtype is None:
            return None
        return np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=dtype).reshape(self.shape(index))

    def qparams(self, index: int) -> tuple[np.ndarray, np.ndarray, int]:
        q = self.tensor(index).Quantization()
        if q is None or q.ScaleLength() == 0:
            return np.zeros(0), np.zeros(0, np.int64), 0
        return (q.ScaleAsNumpy().astype(np.float64), q.ZeroPointAsNumpy().astype(np.int64),
                int(q.QuantizedDimension()))

    def act_q(self, index: int, what: str) -> TensorQ:
        scale, zp, _ = self.qparams(index)
        if scale.size != 1:
            raise ModelError(f"{what}: tensor {self.tname(index)!r} has {scale.size} scales; activations must be "
                             "quantized per tensor (is this a float or dynamic-range model? full-integer int8 needed)")
        dtype = {self.tfl.TensorType.INT8: np.int8, self.tfl.TensorType.UINT8: np.uint8}.get(
            self.tensor(index).Type(), np.float32)
        return TensorQ(float(scale[0]), to_int8_domain(int(zp[0]), dtype, what))

    # -- driver ---------------------------------------------------------------------------------

    def run(self) -> Network:
        ops = [self._opname(i) for i in range(self.g.OperatorsLength())]
        bad = [(name, self._label(i)) for i, name in enumerate(ops) if name not in SUPPORTED_OPS]
        if bad:
            raise UnsupportedOperatorError(bad, self.source)
        for i in range(self.g.InputsLength()):
            self._input(self.g.Inputs(i))
        for i, name in enumerate(ops):
            op = self.g.Operators(i)
            getattr(self, "_" + name.lower())(op, i)
        outputs = []
        for i in range(self.g.OutputsLength()):
            val = self.vals.get(self.g.Outputs(i))
            if val is None or val.pads is not None:
                raise ModelError(f"{self.source}: graph output {self.tname(self.g.Outputs(i))!r} is not computed "
                                 "by a supported layer")
            if val.layer not in outputs:
                outputs.append(val.layer)
        net = Network(name=self.path.stem, layers=self.layers,
                      inputs=[l.name for l in self.layers if l.op == "input"], outputs=outputs,
                      source_format="tflite", source_path=str(self.path), meta={"layout": "NHWC"})
        net.validate()
        return net

    def _opname(self, i: int) -> str:
        op = self.g.Operators(i)
        code = self.model.OperatorCodes(op.OpcodeIndex())
        # Schema >= 2.4 keeps codes above 127 in BuiltinCode, older ones in DeprecatedBuiltinCode.
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == self.tfl.BuiltinOperator.CUSTOM:
            return "CUSTOM:" + (code.CustomCode() or b"?").decode(errors="replace")
        return self.op_names.get(builtin, f"BUILTIN_{builtin}")

    def _label(self, i: int) -> str:
        op = self.g.Operators(i)
        return self.tname(op.Outputs(0)) if op.OutputsLength() else f"op{i}"

    def _err(self, i: int, why: str) -> ModelError:
        return ModelError(f"{self.source}: {self._opname(i)} {self._label(i)!r}: {why}")

    def _ins(self, op) -> list[int]:
        return [op.Inputs(j) for j in range(op.InputsLength())]

    def _options(self, op, cls_name: str):
        table = op.BuiltinOptions()
        opts = getattr(self.tfl, cls_name)()
        if table is not None:
            opts.Init(table.Bytes, table.Pos)
        return opts

    def _src(self, i: int, tensor: int, allow_pad: bool = False, allow_flat: bool = False) -> _Val:
        val = self.vals.get(tensor)
        if val is None:
            raise self._err(i, f"reads tensor {self.tname(tensor)!r}, which no supported layer produces (a constant?)")
        if val.pads is not None and not allow_pad:
            raise ModelError(f"{self.source}: PAD {val.pad_node!r}: a PAD is supported only directly in front of "
                             f"a convolution (here {self._opname(i)} {self._label(i)!r} reads it)")
        if val.hwc is not None and not allow_flat:
            raise self._err(i, "reads a flattened feature map; only FULLY_CONNECTED may")
        return val

    def _layer(self, name: str) -> Layer:
        return next(l for l in self.layers if l.name == name)

    def _new_layer(self, i: int, op: str, inputs: list[str], shape: Shape, attrs: dict | None = None,
             params: dict | None = None, out: int | None = None) -> Layer:
        tfop = self.g.Operators(i)
        out = tfop.Outputs(0) if out is None else out
        name = self.tname(out)
        base, n = name, 2
        while any(l.name == name for l in self.layers):
            name, n = f"{base}_{n}", n + 1
        layer = Layer(name=name, op=op, inputs=inputs, shape=shape, attrs=attrs or {}, params=params or {},
                      origin=[f"{self._opname(i)}:{self.tname(out)}"], tensor=self.tname(out))
        self.layers.append(layer)
        self.vals[out] = _Val(layer=name)
        self.spec.tensors[name] = self.act_q(out, f"{self.source}: {self._opname(i)} {self._label(i)!r}")
        return layer

    # -- operators --------------------------------------------------------------------------------

    def _input(self, index: int) -> None:
        dims = self.shape(index)
        if len(dims) == 4:
            shape = Shape(dims[3], dims[1], dims[2])
        elif len(dims) == 2:
            shape = Shape(dims[1])
        else:
            raise ModelError(f"{self.source}: input {self.tname(index)!r}: shape {dims} is not N,H,W,C or N,C")
        name = self.tname(index)
        layer = Layer(name=name, op="input", inputs=[], shape=shape, origin=[name], tensor=name)
        self.layers.append(layer)
        self.vals[index] = _Val(layer=name)
        if self.tensor(index).Type() != self.tfl.TensorType.FLOAT32:
            self.spec.tensors[name] = self.act_q(index, f"{self.source}: input {name!r}")

    def _quantize(self, op, i: int) -> None:
        src_t, out = op.Inputs(0), op.Outputs(0)
        val = self._src(i, src_t)
        src = self._layer(val.layer)
        if src.op == "input" and src.name not in self.spec.tensors:
            # float input -> int8: the input layer takes this tensor's quantization (the host quantizes).
            self.spec.tensors[src.name] = self.act_q(out, f"{self.source}: QUANTIZE {self._label(i)!r}")
            self.vals[out] = val
            return
        # int8 -> int8 requantization: a standalone rescale (act without an activation).
        self._new_layer(i, "act", [val.layer], src.shape, attrs={"activation": None})

    def _dequantize(self, op, i: int) -> None:
        self.vals[op.Outputs(0)] = self._src(i, op.Inputs(0))  # the int8 layer is the output

    def _activation(self, i: int, code: int) -> Activation | None:
        aft = self.tfl.ActivationFunctionType
        if code == aft.NONE:
            return None
        if code == aft.RELU:
            return Activation("relu")
        if code == aft.RELU6:
            return Activation("clip", lo=0.0, hi=6.0)
        if code == aft.RELU_N1_TO_1:
            return Activation("clip", lo=-1.0, hi=1.0)
        raise self._err(i, f"fused activation {code} cannot be expressed (NONE, RELU, RELU6, RELU_N1_TO_1)")

    def _same_pads(self, hw, kernel, stride, dilation) -> tuple[int, int, int, int]:
        begin, end = [], []
        for n, k, s, d in zip(hw, kernel, stride, dilation):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            begin.append(total // 2)  # TFLite puts the odd pixel at the end (ONNX SAME_UPPER)
            end.append(total - total // 2)
        return (begin[0], begin[1], end[0], end[1])

    def _conv_2d(self, op, i: int, depthwise: bool = False) -> None:
        ins = self._ins(op)
        opts = self._options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
        val = self._src(i, ins[0], allow_pad=True)
        src = self._layer(val.layer)
        wq = self.const(ins[1])
        if wq is None or wq.dtype not in (np.int8, np.uint8):
            raise self._err(i, "the filter must be a stored int8 constant (a full-integer model)")
        w_scale, w_zp, w_dim = self.qparams(ins[1])
        if depthwise:
            _, kh, kw, cout = wq.shape
            if w_dim not in (3, 0) or (w_scale.size > 1 and w_dim != 3):
                raise self._err(i, f"per-channel filter scales along dimension {w_dim} cannot be expressed")
            w_ir = np.transpose(wq, (3, 0, 1, 2))           # (C*m, 1, kh, kw)
            groups = src.shape.c
            if cout % groups:
                raise self._err(i, f"{cout} output channels are not a multiple of {groups} input channels")
        else:
            cout, kh, kw, cin = wq.shape
            if w_scale.size > 1 and w_dim != 0:
                raise self._err(i, f"per-channel filter scales along dimension {w_dim} cannot be expressed")
            w_ir = np.transpose(wq, (0, 3, 1, 2))           # (Co, Ci, kh, kw)
            groups = src.shape.c // cin
        stride = (int(opts.StrideH()) or 1, int(opts.StrideW()) or 1)
        dilation = (int(opts.DilationHFactor()) or 1, int(opts.DilationWFactor()) or 1)
        in_h, in_w = src.shape.h, src.shape.w
        if opts.Padding() == self.tfl.Padding.SAME:
            pads = self._same_pads((in_h, in_w), (kh, kw), stride, dilation)
        else:
            pads = (0, 0, 0, 0)
        if val.pads is not None:  # a PAD folded in front: the conv pads with the input zero point too
            pads = tuple(a + b for a, b in zip(pads, val.pads))
        pad_h, pad_w = pads[0] + pads[2], pads[1] + pads[3]
        ho = (in_h + pad_h - (kh - 1) * dilation[0] - 1) // stride[0] + 1
        wo = (in_w + pad_w - (kw - 1) * dilation[1] - 1) // stride[1] + 1
        weight, s_w = self._weight(i, w_ir, w_scale, w_zp, cout)
        bias = self._bias(i, ins, cout)
        layer = self._new_layer(
            i, "conv", [val.layer], Shape(cout, ho, wo),
            attrs={"kernel": (kh, kw), "stride": stride, "pads": tuple(int(p) for p in pads), "dilation": dilation,
                   "groups": int(groups), "activation": self._activation(i, opts.FusedActivationFunction())},
            params={"weight": (weight * s_w.reshape(-1, 1, 1, 1)).astype(np.float32),
                    "bias": self._float_bias(bias, src, s_w)},
        )
        self.spec.weights[layer.name] = WeightQ(weight=weight, scale=s_w, bias=bias)

    def _depthwise_conv_2d(self, op, i: int) -> None:
        self._conv_2d(op, i, depthwise=True)

    def _weight(self, i: int, w: np.ndarray, scale: np.ndarray, zp: np.ndarray, cout: int):
        """int8 weight (zero point removed, must fit int8) and per-output-channel scale."""
        zp_b = np.broadcast_to(zp.reshape(-1) if zp.size else np.zeros(1, np.int64), (cout,))
        w_int = w.astype(np.int64) - zp_b.reshape((-1,) + (1,) * (w.ndim - 1))
        if w_int.min(initial=0) < -128 or w_int.max(initial=0) > 127:
            raise self._err(i, f"weight minus its zero point spans {w_int.min()}..{w_int.max()}, outside int8")
        if scale.size == 0:
            raise self._err(i, "the weight has no quantization scale (not a full-integer model)")
        return w_int.astype(np.int8), np.broadcast_to(scale.reshape(-1), (cout,)).astype(np.float64)

    def _bias(self, i: int, ins: list[int], cout: int) -> np.ndarray | None:
        if len(ins) < 3 or ins[2] < 0:
            return np.zeros(cout, np.int64)
        b = self.const(ins[2])
        if b is None or b.dtype != np.int32:
            raise self._err(i, "the bias must be a stored int32 constant")
        # TFLite's bias scale is s_in * s_w by construction; its zero point is 0.
        return b.astype(np.int64).reshape(-1)

    def _float_bias(self, bias: np.ndarray, src: Layer, s_w: np.ndarray) -> np.ndarray:
        s_in = self.spec.tensors[src.name].scale if src.name in self.spec.tensors else 1.0
        return (bias * s_in * s_w).astype(np.float32)

    def _fully_connected(self, op, i: int) -> None:
        ins = self._ins(op)
        opts = self._options(op, "FullyConnectedOptions")
        val = self._src(i, ins[0], allow_flat=True)
        src = self._layer(val.layer)
        wq = self.const(ins[1])
        if wq is None or wq.ndim != 2 or wq.dtype not in (np.int8, np.uint8):
            raise self._err(i, "the weight must be a stored 2-D int8 constant")
        if int(opts.WeightsFormat()) != 0:
            raise self._err(i, "shuffled weight formats cannot be imported")
        cout, k = wq.shape
        if k != src.shape.size:
            raise self._err(i, f"weight {list(wq.shape)} does not fit an input of {src.shape.size} values")
        w_scale, w_zp, w_dim = self.qparams(ins[1])
        if w_scale.size > 1 and w_dim != 0:
            raise self._err(i, f"per-channel weight scales along dimension {w_dim} cannot be expressed")
        hwc = val.hwc or (src.shape.h, src.shape.w, src.shape.c)
        # TFLite flattens N,H,W,C in H, W, C order; dlproc's fc reads C, H, W: permute the columns.
        w_chw = wq.reshape(cout, *hwc).transpose(0, 3, 1, 2).reshape(cout, k)
        weight, s_w = self._weight(i, w_chw, w_scale, w_zp, cout)
        bias = self._bias(i, ins, cout)
        layer = self._new_layer(i, "fc", [val.layer], Shape(cout),
                          attrs={"activation": self._activation(i, opts.FusedActivationFunction())},
                          params={"weight": (weight * s_w.reshape(-1, 1)).astype(np.float32),
                                  "bias": self._float_bias(bias, src, s_w)})
        self.spec.weights[layer.name] = WeightQ(weight=weight, scale=s_w, bias=bias)

    def _pool(self, op, i: int, kind: str) -> None:
        opts = self._options(op, "Pool2DOptions")
        val = self._src(i, op.Inputs(0))
        src = self._layer(val.layer)
        if opts.FusedActivationFunction() != self.tfl.ActivationFunctionType.NONE:
            raise self._err(i, "a fused activation on a pool cannot be expressed")
        kernel = (int(opts.FilterHeight()), int(opts.FilterWidth()))
        stride = (int(opts.StrideH()) or 1, int(opts.StrideW()) or 1)
        pads = (self._same_pads((src.shape.h, src.shape.w), kernel, stride, (1, 1))
                if opts.Padding() == self.tfl.Padding.SAME else (0, 0, 0, 0))
        ho = (src.shape.h + pads[0] + pads[2] - kernel[0]) // stride[0] + 1
        wo = (src.shape.w + pads[1] + pads[3] - kernel[1]) // stride[1] + 1
        attrs: dict[str, Any] = {"kernel": kernel, "stride": stride, "pads": pads}
        if kind == "avgpool":
            attrs["count_include_pad"] = False  # TFLite divides by the real pixels under the window
        self._new_layer(i, kind, [val.layer], Shape(src.shape.c, ho, wo), attrs=attrs)

    def _max_pool_2d(self, op, i: int) -> None:
        self._pool(op, i, "maxpool")

    def _average_pool_2d(self, op, i: int) -> None:
        self._pool(op, i, "avgpool")

    def _add(self, op, i: int) -> None:
        opts = self._options(op, "AddOptions")
        ins = self._ins(op)
        a, b = (self._src(i, t) for t in ins[:2])
        la, lb = self._layer(a.layer), self._layer(b.layer)
        if la.shape != lb.shape:
            raise self._err(i, f"operands {la.shape} and {lb.shape} differ; broadcasting is not supported")
        self._new_layer(i, "add", [la.name, lb.name], la.shape,
                        attrs={"activation": self._activation(i, opts.FusedActivationFunction())})

    def _concatenation(self, op, i: int) -> None:
        opts = self._options(op, "ConcatenationOptions")
        ins = self._ins(op)
        rank = len(self.shape(ins[0]))
        axis = int(opts.Axis()) + (rank if opts.Axis() < 0 else 0)
        if axis != rank - 1:
            raise self._err(i, f"only concatenation along channels (the last NHWC axis) is supported, got axis {axis}")
        if opts.FusedActivationFunction() != self.tfl.ActivationFunctionType.NONE:
            raise self._err(i, "a fused activation on a concatenation cannot be expressed")
        vals = [self._src(i, t) for t in ins]
        shapes = [self._layer(v.layer).shape for v in vals]
        if len({(s.h, s.w) for s in shapes}) != 1:
            raise self._err(i, "inputs differ in height/width")
        self._new_layer(i, "concat", [v.layer for v in vals], Shape(sum(s.c for s in shapes), shapes[0].h, shapes[0].w))

    def _reshape(self, op, i: int) -> None:
        val = self._src(i, op.Inputs(0), allow_flat=True)
        src = self._layer(val.layer)
        out = [d for d in self.shape(op.Outputs(0))]
        if len(out) == 2 and out[1] == src.shape.size:
            hwc = val.hwc or (src.shape.h, src.shape.w, src.shape.c)
            self.vals[op.Outputs(0)] = _Val(layer=val.layer, hwc=hwc if src.shape.h * src.shape.w > 1 else None)
        elif len(out) == 4 and (out[3], out[1], out[2]) == src.shape.as_tuple() and val.hwc is None:
            self.vals[op.Outputs(0)] = val
        else:
            raise self._err(i, f"a reshape of {src.shape} to {out} is supported only as a flatten in front of "
                            "FULLY_CONNECTED (or a no-op)")
        q_in, q_out = self.spec.tensors[val.layer], self.act_q(op.Outputs(0), self._label(i))
        if q_in != q_out:
            raise self._err(i, "the reshape changes the quantization, which only a rescale layer can do")

    def _softmax(self, op, i: int) -> None:
        opts = self._options(op, "SoftmaxOptions")
        if abs(float(opts.Beta()) - 1.0) > 1e-6:
            raise self._err(i, f"beta {opts.Beta()} is not supported (only 1)")
        val = self._src(i, op.Inputs(0))
        self._new_layer(i, "softmax", [val.layer], self._layer(val.layer).shape, attrs={})

    def _resize_nearest_neighbor(self, op, i: int) -> None:
        opts = self._options(op, "ResizeNearestNeighborOptions")
        val = self._src(i, op.Inputs(0))
        src = self._layer(val.layer)
        size = self.const(op.Inputs(1))
        if size is None:
            raise self._err(i, "the output size must be a constant")
        oh, ow = (int(v) for v in size.reshape(-1))
        if opts.AlignCorners() or oh % src.shape.h or ow % src.shape.w or oh // src.shape.h != ow // src.shape.w:
            raise self._err(i, f"{src.shape.h}x{src.shape.w} -> {oh}x{ow}: only the same integer factor for height "
                            "and width without align_corners (pixel replication) is supported")
        # half_pixel_centers picks floor((x + 0.5) / f), the same pixel as x // f for an integer f.
        self._new_layer(i, "upsample", [val.layer], Shape(src.shape.c, oh, ow), attrs={"scale": oh // src.shape.h})

    def _pad(self, op, i: int) -> None:
        val = self._src(i, op.Inputs(0))
        src = self._layer(val.layer)
        pads = self.const(op.Inputs(1))
        if pads is None or pads.shape != (4, 2):
            raise self._err(i, "the paddings must be a constant 4x2 array (N, H, W, C)")
        pads = pads.astype(np.int64)
        if pads[0].any() or pads[3].any() or pads.min() < 0:
            raise self._err(i, f"paddings {pads.tolist()}: only non-negative height/width padding is supported")
        if self.act_q(op.Outputs(0), self._label(i)) != self.spec.tensors[val.layer]:
            raise self._err(i, "the PAD changes the quantization")
        # TFLite pads an int8 tensor with its zero point: exactly the padding a dlproc conv inserts.
        self.vals[op.Outputs(0)] = _Val(layer=val.layer, pads=(int(pads[1, 0]), int(pads[2, 0]), int(pads[1, 1]),
                                                              int(pads[2, 1])), pad_node=self._label(i))
        del src

    def _mean(self, op, i: int) -> None:
        val = self._src(i, op.Inputs(0))
        src = self._layer(val.layer)
        axes = self.const(op.Inputs(1))
        if axes is None or sorted(int(a) % 4 for a in axes.reshape(-1)) != [1, 2] or len(self.shape(op.Inputs(0))) != 4:
            raise self._err(i, "MEAN is supported only over height and width of an N,H,W,C map (a global average pool)")
        self._new_layer(i, "global_avgpool", [val.layer], Shape(src.shape.c))


def _read(path: str | Path) -> tuple[Path, bytes]:
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such TFLite file")
    data = path.read_bytes()
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelError(f"{path}: not a TFLite model (no 'TFL3' FlatBuffer identifier)")
    return path, data


def import_tflite(path: str | Path) -> tuple[Network, QuantSpec]:
    p, data = _read(path)
    imp = _Importer(p, data, str(p))
    try:
        net = imp.run()
    except ModelError:
        raise
    except Exception as exc:  # a corrupt FlatBuffer fails deep inside the generated accessors
        raise ModelError(f"{p}: not a readable TFLite model ({type(exc).__name__}: {exc})") from None
    for layer in net:
        if layer.name not in imp.spec.tensors:
            raise ModelError(f"{p}: {layer.name!r} has no int8 quantization (a full-integer int8 model is needed; "
                             "convert with representative data and TFLITE_BUILTINS_INT8)")
    return net, imp.spec


def load_tflite_float(path: str | Path, input_size: tuple[int, int] | None = None) -> Network:
    """The float IR of a .tflite model (weights dequantized): what ``dlproc stats`` reads."""
    if input_size is not None:
        raise ModelError(f"{path}: a TFLite model fixes its input size; --input-size does not apply")
    return import_tflite(path)[0]
