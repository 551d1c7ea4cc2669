"""The ONNX front end: reads an ONNX model into a :class:`dlproc.ir.Network`.

The importer walks the graph's nodes in their (topological) order and builds IR layers with its
own per-operator shape rules, so every shape it reports is one it understands. On the way it

* folds BatchNormalization into the conv (or fully connected) layer in front of it (a
  BatchNormalization that cannot be folded, e.g. after a Concat, becomes a 1x1 depthwise conv),
* folds an Add of a constant into the bias of the conv/fc in front of it (MatMul + Add = fc),
* fuses Relu, LeakyRelu and Clip into the conv/fc/add in front of them when that layer has no
  other consumer (otherwise the activation becomes a standalone ``act`` layer),
* makes every other unary activation (Sigmoid, Tanh, HardSwish, HardSigmoid, Gelu, Mish, Elu,
  Selu, Celu, Softplus, Softsign, and SiLU as torch writes it, ``Mul(x, Sigmoid(x))``) an ``act``
  layer of a table kind (the compiler fuses the activation table into the layer in front),
* absorbs Flatten/Reshape in front of a fully connected layer, and
* removes Dropout and Identity.

Operators it does not know are collected first and reported together in one
:class:`~dlproc.errors.UnsupportedOperatorError`, so a user sees everything a model lacks at once.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dlproc.errors import ModelError, UnsupportedOperatorError
from dlproc.ir import Activation, Layer, Network, Shape

__all__ = ["load_onnx", "read_model", "SUPPORTED_OPS"]

# Layers with a (Cout, ...) weight and a bias: BatchNormalization, an Add of a constant and an
# activation fold into them.
_WEIGHTED_OPS = ("conv", "fc", "convtranspose")

# Operators the importer removes without a trace in the IR (they are no-ops at inference).
_PASSTHROUGH_OPS = ("Identity", "Dropout")

#: Every ONNX operator the importer accepts (the keys of the importer's handler table).
SUPPORTED_OPS = (
    "Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "Relu", "LeakyRelu", "Clip",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Concat", "LRN", "Softmax", "Flatten",
    "Reshape", "Resize", "Upsample", "Constant", "Identity", "Dropout",
    "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Gelu", "Mish", "Elu", "Selu", "Celu", "Softplus", "Softsign",
    "Mul", "Transpose", "Slice", "Split", "ReduceMean",
)

#: What an operator the importer refuses would need, for the error that lists them.
_NEEDS = {
    "LayerNormalization": "a normalization over the channels of a pixel, which the processor has no unit for",
    "Div": "an element-wise division",
    "Sub": "an element-wise subtraction",
    "Pow": "an element-wise power",
    "Sqrt": "an element-wise square root of a tensor that is not an activation of a conv/fc/add",
    "Erf": "an element-wise erf outside GELU's Div/Erf/Add/Mul/Mul pattern",
    "Exp": "an element-wise exponential outside a softmax",
    "Pad": "a padding layer of its own (padding is imported only as a conv's or pool's pads)",
    "Gather": "indexing a tensor by values (attention, embeddings)",
    "InstanceNormalization": "a normalization over each channel's pixels at run time",
    "GroupNormalization": "a normalization over groups of channels at run time",
    "ReduceMax": "a reduction other than a global average pool",
    "ReduceSum": "a reduction other than a global average pool",
    "Einsum": "a general tensor contraction (attention)",
    "Expand": "a broadcast other than a per-channel vector in Mul",
    "Tile": "a broadcast other than a per-channel vector in Mul",
    "Where": "a data-dependent selection",
    "Max": "an element-wise maximum of two tensors",
    "Min": "an element-wise minimum of two tensors",
}


def load_onnx(model: str | Path | onnx.ModelProto, input_size: tuple[int, int] | None = None) -> Network:
    """Import an ONNX model (a file path or a ``ModelProto``) into the IR.

    ``input_size`` (height, width) fixes the spatial size of an input whose height/width are
    symbolic in the model; a model with fixed sizes must not be given a different one.
    """
    proto, source, path = read_model(model)
    proto = fuse_erf_gelu(fold_shape_arithmetic(proto, input_size))
    return _Importer(proto, source, path, input_size).run()


def fuse_erf_gelu(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with GELU as ``torch.onnx.export`` writes it before opset 20 --
    ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``, operands of Add and Mul in either order --
    replaced by one ``Gelu`` node (the importer's ``gelu`` table activation). The five nodes'
    intermediate tensors must have no other reader; the model is returned unchanged when there is
    no such pattern."""
    nodes = list(proto.graph.node)
    if not any(n.op_type == "Erf" for n in nodes):
        return proto
    # Constant tensors by name, converted only when a candidate's scalar is tested (the weights
    # are converted once, by the importer).
    consts = {t.name: t for t in proto.graph.initializer}
    consts.update({n.output[0]: n.attribute[0].t for n in nodes
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    readers = Counter(name for n in nodes for name in n.input)
    readers.update(o.name for o in proto.graph.output)

    def scalar(name: str, value: float) -> bool:
        t = consts.get(name)
        if t is None or int(np.prod(t.dims)) != 1:
            return False
        return abs(float(numpy_helper.to_array(t).reshape(())) - value) <= 1e-5 * abs(value)

    def other(node, name: str) -> str | None:
        """The other input of a two-input node that has ``name`` as one input."""
        a, b = node.input
        return b if a == name else a if b == name else None

    replace: dict[int, onnx.NodeProto] = {}
    drop: set[int] = set()
    index = {id(n): k for k, n in enumerate(nodes)}
    for erf in nodes:
        if erf.op_type != "Erf":
            continue
        div = producer.get(erf.input[0])
        if div is None or div.op_type != "Div" or not scalar(div.input[1], math.sqrt(2.0)):
            continue
        x = div.input[0]
        adds = [n for n in consumers.get(erf.output[0], []) if n.op_type == "Add"]
        if len(adds) != 1 or not scalar(other(adds[0], erf.output[0]) or "", 1.0):
            continue
        add = adds[0]
        mul1 = [n for n in consumers.get(add.output[0], []) if n.op_type == "Mul" and other(n, add.output[0]) == x]
        if len(mul1) != 1:
            continue
        mul2 = [n for n in consumers.get(mul1[0].output[0], [])
                if n.op_type == "Mul" and scalar(other(n, mul1[0].output[0]) or "", 0.5)]
        if len(mul2) != 1:
            continue
        chain = [div, erf, add, mul1[0]]
        if any(readers[n.output[0]] != 1 for n in chain):
            continue
        last = mul2[0]
        replace[index[id(last)]] = helper.make_node("Gelu", [x], [last.output[0]], name=_label(last))
        drop.update(index[id(n)] for n in chain)
    if not replace:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    out.graph.node.extend(replace.get(k, n) for k, n in enumerate(nodes) if k not in drop)
    return out


#: Operators of shape arithmetic: what ``torch.onnx.export`` writes for ``x.view(x.size(0), -1)``
#: or ``torch.chunk`` on shapes it cannot prove constant.
SHAPE_OPS = ("Shape", "Size")
_QUANT_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul")


def fold_shape_arithmetic(proto: onnx.ModelProto, input_size: tuple[int, int] | None = None) -> onnx.ModelProto:
    """The model with its shape subgraphs (``Shape`` -> ``Gather`` / ``Unsqueeze`` / ``Div`` /
    ``Concat`` ... feeding a ``Reshape``, ``Slice`` or ``Split``) folded into constants.

    The folding is ONNX Runtime's basic graph optimizer (constant folding on static shapes), run on
    a copy whose symbolic batch is 1 and whose symbolic height/width are ``input_size``: the
    processor runs one frame of one size, so every shape is a constant there. A model without a
    ``Shape`` node is returned unchanged, and so is a QDQ model (the optimizer would fold the
    dequantization of constant weights into float tensors and lose the file's scales)."""
    ops = {n.op_type for n in proto.graph.node}
    if not ops & set(SHAPE_OPS) or ops & set(_QUANT_OPS):
        return proto
    import tempfile

    import onnxruntime as ort

    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    initializers = {t.name for t in fixed.graph.initializer}
    for inp in fixed.graph.input:
        if inp.name in initializers:
            continue
        dims = inp.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            if d.HasField("dim_value"):
                continue
            if i == 0:
                d.dim_value = 1
            elif len(dims) == 4 and i >= 2 and input_size is not None:
                d.dim_value = int(input_size[i - 2])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "folded.onnx")
        try:
            ort.InferenceSession(fixed.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise ModelError(f"ONNX model {proto.graph.name or '(unnamed)'!r}: its shape arithmetic could not be "
                             f"folded by ONNX Runtime ({_first_line(exc)})") from None
        folded = onnx.load(options.optimized_model_filepath)
    return folded


def read_model(model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str, Path | None]:
    """Parse and check the model so that a broken file fails here, with the file's name."""
    if isinstance(model, onnx.ModelProto):
        proto, source, path = model, f"ONNX model {model.graph.name or '(unnamed)'!r}", None
    else:
        path = Path(model)
        source = str(path)
        if not path.is_file():
            raise ModelError(f"{path}: no such ONNX file")
        try:
            proto = onnx.load(str(path))
        except Exception as exc:  # protobuf raises several unrelated types for a corrupt file
            raise ModelError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from None
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise ModelError(f"{source}: not a valid ONNX model (the ONNX checker says: {_first_line(exc)})") from None
    if not proto.graph.node:
        raise ModelError(f"{source}: the ONNX graph has no nodes (is the file truncated?)")
    return proto, source, path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@dataclass
class _Value:
    """What the importer knows about one ONNX tensor.

    A tensor is either a constant (``const``) or the output of IR layer ``layer``. ``rank`` is its
    ONNX rank including the batch dimension (4 for feature maps, 2 for vectors). ``flat`` marks a
    Flatten/Reshape view of a feature map with more than one pixel, which only a fully connected
    layer may read; ``views`` names the Flatten/Reshape nodes that produced the view.
    """

    layer: str | None = None
    rank: int = 4
    const: np.ndarray | None = None
    flat: bool = False
    #: A channel shuffle in progress (``Reshape`` to N, g, C/g, H, W, then ``Transpose`` 0 2 1 3 4):
    #: (g, transposed); the ``Reshape`` back to N, C, H, W makes it a ``channels`` layer.
    shuffle: tuple[int, bool] | None = None
    views: list[str] = field(default_factory=list)


class _Importer:
    def __init__(self, proto: onnx.ModelProto, source: str, path: Path | None, input_size):
        self.proto = proto
        self.graph = proto.graph
        self.source = source
        self.path = path
        self.input_size = input_size
        self.opset = next(
            (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1
        )
        self.values: dict[str, _Value] = {}
        self.layers: list[Layer] = []
        self.by_name: dict[str, Layer] = {}
        self.alias: dict[str, str] = {}
        self.uses: Counter[str] = Counter()
        self.graph_outputs = [o.name for o in self.graph.output]
        self.batch: int | None = None  # a fixed batch size of the model's inputs, if any
        self.silu: set[int] = set()  # indices of the Mul nodes that are SiLU (_silu_muls)
        self.node_index = -1  # index of the node being imported
        self.handlers: dict[str, Callable[[onnx.NodeProto], None]] = {
            "Conv": self._conv,
            "ConvTranspose": self._conv_transpose,
            "Gemm": self._gemm,
            "MatMul": self._matmul,
            "BatchNormalization": self._batchnorm,
            "Relu": lambda n: self._activation(n, Activation("relu")),
            "LeakyRelu": lambda n: self._activation(
                n, Activation("leaky", alpha=float(self._attrs(n).get("alpha", 0.01)))
            ),
            "Clip": self._clip,
            "MaxPool": lambda n: self._pool(n, "maxpool"),
            "AveragePool": lambda n: self._pool(n, "avgpool"),
            "GlobalAveragePool": self._global_avgpool,
            "Add": self._add,
            "Concat": self._concat,
            "LRN": self._lrn,
            "Softmax": self._softmax,
            "Flatten": self._flatten,
            "Reshape": self._reshape,
            "Resize": self._resize,
            "Upsample": self._upsample,
            "Constant": self._constant,
            "Identity": lambda n: None,
            "Dropout": lambda n: None,
            "Sigmoid": lambda n: self._table_activation(n, Activation("sigmoid")),
            "Tanh": lambda n: self._table_activation(n, Activation("tanh")),
            "HardSwish": lambda n: self._table_activation(n, Activation("hardswish")),
            "HardSigmoid": lambda n: self._table_activation(n, Activation(
                "hardsigmoid", alpha=float(self._attrs(n).get("alpha", 0.2)),
                beta=float(self._attrs(n).get("beta", 0.5)))),
            "Gelu": lambda n: self._table_activation(n, Activation(
                "gelu_tanh" if self._attrs(n).get("approximate", "none") == "tanh" else "gelu")),
            "Mish": lambda n: self._table_activation(n, Activation("mish")),
            "Elu": lambda n: self._table_activation(n, Activation("elu", alpha=float(self._attrs(n).get("alpha", 1.0)))),
            "Selu": lambda n: self._table_activation(n, Activation(
                "selu", alpha=float(self._attrs(n).get("alpha", 1.67326319217681884765625)),
                beta=float(self._attrs(n).get("gamma", 1.05070102214813232421875)))),
            "Celu": lambda n: self._table_activation(n, Activation("celu", alpha=float(self._attrs(n).get("alpha", 1.0)))),
            "Softplus": lambda n: self._table_activation(n, Activation("softplus")),
            "Softsign": lambda n: self._table_activation(n, Activation("softsign")),
            "Mul": self._mul,
            "Transpose": self._transpose,
            "Slice": self._slice,
            "Split": self._split,
            "ReduceMean": self._reduce_mean,
        }

    # -- driver ---------------------------------------------------------------------------------

    def run(self) -> Network:
        self._check_supported()
        self._resolve_passthrough()
        for init in self.graph.initializer:
            array = numpy_helper.to_array(init)
            # Parameters are float32 in the IR whatever precision the model stores them in.
            self.values[init.name] = _Value(const=array.astype(np.float32) if array.dtype.kind == "f" else array)
        for inp in self.graph.input:
            if inp.name not in self.values:
                self._input(inp)
        for self.node_index, node in enumerate(self.graph.node):
            self.handlers[node.op_type](node)
        outputs = []
        for name in self.graph_outputs:
            value = self._value(name, "the graph output")
            if value.layer is None:
                raise ModelError(f"{self.source}: graph output {name!r} is a constant, not computed by a layer")
            if value.layer not in outputs:
                outputs.append(value.layer)
        inputs = [layer.name for layer in self.layers if layer.op == "input"]
        name = self.graph.name or (self.path.stem if self.path else "onnx_model")
        net = Network(
            name=name,
            layers=self.layers,
            inputs=inputs,
            outputs=outputs,
            source_format="onnx",
            source_path=str(self.path) if self.path else None,
            meta={"opset": self.opset, "batch": self.batch},
        )
        net.validate()
        return net

    def _check_supported(self) -> None:
        bad = []
        self.silu = self._silu_muls()
        for k, node in enumerate(self.graph.node):
            if node.domain not in ("", "ai.onnx"):
                bad.append((f"{node.domain}.{node.op_type}", _label(node)))
            elif node.op_type not in self.handlers:
                bad.append((node.op_type, _label(node)))
        if bad:
            raise UnsupportedOperatorError(bad, self.source, _NEEDS)

    def _silu_muls(self) -> set[int]:
        """Indices of the Mul nodes that are SiLU as torch exports it: ``Mul(x, Sigmoid(x))`` (either order),
        the Sigmoid's output read by nothing else."""
        sigmoid_of = {n.output[0]: n.input[0] for n in self.graph.node if n.op_type == "Sigmoid"}
        reads = Counter(name for n in self.graph.node for name in n.input)
        reads.update(o.name for o in self.graph.output)
        found = set()
        for k, node in enumerate(self.graph.node):
            if node.op_type != "Mul" or len(node.input) != 2:
                continue
            a, b = node.input
            for x, s in ((a, b), (b, a)):
                if sigmoid_of.get(s) == x and reads[s] == 1:
                    found.add(k)
        return found

    def _resolve_passthrough(self) -> None:
        """Map every Identity/Dropout output to the tensor it passes on, and count real uses."""
        for node in self.graph.node:
            if node.op_type in _PASSTHROUGH_OPS:
                self.alias[node.output[0]] = self._resolve(node.input[0])
        for node in self.graph.node:
            if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
                mask = node.output[1]
                if any(mask in n.input for n in self.graph.node) or mask in self.graph_outputs:
                    raise ModelError(
                        f"{self.source}: Dropout {_label(node)!r}: its mask output is used; "
                        "only the data output of a Dropout can be imported (it is removed)"
                    )
            if node.op_type not in _PASSTHROUGH_OPS:
                for name in node.input:
                    if name:
                        self.uses[self._resolve(name)] += 1
        for name in self.graph_outputs:
            self.uses[self._resolve(name)] += 1

    def _resolve(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    # -- helpers --------------------------------------------------------------------------------

    def _error(self, node: onnx.NodeProto, message: str) -> ModelError:
        return ModelError(f"{self.source}: {node.op_type} {_label(node)!r}: {message}")

    def _attrs(self, node: onnx.NodeProto) -> dict[str, Any]:
        out = {}
        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                value = value.decode()
            elif attr.type == onnx.AttributeProto.FLOAT:
                # ONNX stores float attributes as float32; take the shortest decimal that rounds to
                # it (0.2, not 0.20000000298), which is what the model's author wrote.
                value = float(str(np.float32(value)))
            out[attr.name] = value
        return out

    def _value(self, name: str, what: str) -> _Value:
        resolved = self._resolve(name)
        if resolved not in self.values:
            raise ModelError(f"{self.source}: {what} reads tensor {name!r}, which nothing before it produces")
        return self.values[resolved]

    def _tensor(self, node: onnx.NodeProto, index: int = 0) -> _Value:
        """The input ``index`` of ``node`` as the output of a layer (constants are an error)."""
        if index >= len(node.input) or not node.input[index]:
            raise self._error(node, f"input {index} is missing")
        value = self._value(node.input[index], f"{node.op_type} {_label(node)!r}")
        if value.layer is None:
            raise self._error(node, f"input {index} ({node.input[index]!r}) is a constant; a computed tensor is required")
        return value

    def _feature_map(self, node: onnx.NodeProto, index: int = 0) -> tuple[_Value, Layer]:
        """Input ``index`` as an N,C,H,W feature map."""
        value = self._tensor(node, index)
        if value.rank != 4 or value.flat:
            raise self._error(node, f"expects a 4-D N,C,H,W input, got a rank-{value.rank} tensor")
        return value, self.by_name[value.layer]

    def _const(self, node: onnx.NodeProto, index: int, what: str, required: bool = True) -> np.ndarray | None:
        if index >= len(node.input) or not node.input[index]:
            if required:
                raise self._error(node, f"{what} (input {index}) is missing")
            return None
        value = self._value(node.input[index], f"{node.op_type} {_label(node)!r}")
        if value.const is None:
            raise self._error(
                node, f"{what} ({node.input[index]!r}) must be a constant (initializer or Constant node)"
            )
        return value.const

    def _unique(self, name: str) -> str:
        if name not in self.by_name:
            return name
        n = 2
        while f"{name}_{n}" in self.by_name:
            n += 1
        return f"{name}_{n}"

    def _add_layer(self, node: onnx.NodeProto | None, op: str, inputs: list[str], shape: Shape,
                   attrs: dict | None = None, params: dict | None = None, rank: int = 4,
                   origin: list[str] | None = None, name: str | None = None,
                   tensor: str | None = None) -> Layer:
        if shape.c < 1 or shape.h < 1 or shape.w < 1:
            where = f"{node.op_type} {_label(node)!r}" if node is not None else name
            raise ModelError(f"{self.source}: {where}: output shape {shape.c}x{shape.h}x{shape.w} is empty")
        layer = Layer(
            name=self._unique(name or _label(node)),
            op=op,
            inputs=inputs,
            shape=shape,
            attrs=attrs or {},
            params=params or {},
            origin=origin if origin is not None else [_label(node)],
            tensor=tensor if tensor is not None else node.output[0],
        )
        self.layers.append(layer)
        self.by_name[layer.name] = layer
        self.values[layer.tensor] = _Value(layer=layer.name, rank=rank)
        return layer

    def _sole_consumer(self, value: _Value, tensor: str) -> Layer | None:
        """The producing layer if ``tensor`` is its output and this is the tensor's only use."""
        if value.layer is None or value.flat or value.views:
            return None
        layer = self.by_name[value.layer]
        if layer.tensor != self._resolve(tensor) or self.uses[self._resolve(tensor)] != 1:
            return None
        return layer

    def _merge(self, layer: Layer, node: onnx.NodeProto, rank: int) -> None:
        """Record that ``node`` was folded into ``layer``: its output is now the layer's output."""
        layer.origin.append(_label(node))
        layer.tensor = node.output[0]
        self.values[node.output[0]] = _Value(layer=layer.name, rank=rank)

    # -- inputs and constants -------------------------------------------------------------------

    def _input(self, inp: onnx.ValueInfoProto) -> None:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
        where = f"{self.source}: input {inp.name!r}"
        if len(dims) not in (2, 4):
            raise ModelError(f"{where}: rank {len(dims)} is not supported (N,C,H,W or N,C expected)")
        if dims[0] is not None:
            # The IR has no batch dimension; a fixed batch only matters to Reshape targets.
            if self.batch not in (None, dims[0]):
                raise ModelError(f"{where}: batch size {dims[0]} differs from another input's {self.batch}")
            self.batch = dims[0]
        if dims[1] is None:
            raise ModelError(f"{where}: the channel count must be fixed in the model")
        if len(dims) == 2:
            shape, rank = Shape(dims[1], 1, 1), 2
        else:
            h, w = dims[2], dims[3]
            if self.input_size is not None:
                ih, iw = self.input_size
                if (h is not None and h != ih) or (w is not None and w != iw):
                    raise ModelError(
                        f"{where}: the model fixes the size {h}x{w}; an input size of {ih}x{iw} "
                        "can only be given for a model whose height/width are symbolic"
                    )
                h, w = ih, iw
            if h is None or w is None:
                raise ModelError(f"{where}: height/width are symbolic; give an input size (--input-size H,W)")
            shape, rank = Shape(dims[1], h, w), 4
        layer = Layer(name=self._unique(inp.name), op="input", inputs=[], shape=shape,
                      origin=[inp.name], tensor=inp.name)
        self.layers.append(layer)
        self.by_name[layer.name] = layer
        self.values[inp.name] = _Value(layer=layer.name, rank=rank)

    def _constant(self, node: onnx.NodeProto) -> None:
        attrs = self._attrs(node)
        if "value" in attrs:
            array = numpy_helper.to_array(attrs["value"])
        elif "value_float" in attrs:
            array = np.array(attrs["value_float"], dtype=np.float32)
        elif "value_floats" in attrs:
            array = np.array(attrs["value_floats"], dtype=np.float32)
        elif "value_int" in attrs:
            array = np.array(attrs["value_int"], dtype=np.int64)
        elif "value_ints" in attrs:
            array = np.array(attrs["value_ints"], dtype=np.int64)
        else:
            raise self._error(node, f"only tensor/float/int values are supported, got {sorted(attrs)}")
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        self.values[node.output[0]] = _Value(const=array)

    # -- compute layers -------------------------------------------------------------------------

    def _conv(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        weight = self._const(node, 1, "the weight")
        bias = self._const(node, 2, "the bias", required=False)
        attrs = self._attrs(node)
        if weight.ndim != 4:
            raise self._error(node, f"only 2-D convolutions are supported (weight rank {weight.ndim})")
        cout, cin_g, kh, kw = (int(d) for d in weight.shape)
        groups = int(attrs.get("group", 1))
        kernel = tuple(attrs.get("kernel_shape", (kh, kw)))
        if kernel != (kh, kw):
            raise self._error(node, f"kernel_shape {list(kernel)} disagrees with the weight shape {list(weight.shape)}")
        if cin_g * groups != src.shape.c or cout % groups:
            raise self._error(
                node, f"weight {list(weight.shape)} with group={groups} does not fit {src.shape.c} input channels"
            )
        stride = _pair(attrs.get("strides"), 1)
        dilation = _pair(attrs.get("dilations"), 1)
        pads = self._pads(node, attrs, (src.shape.h, src.shape.w), (kh, kw), stride, dilation)
        ho = _out_len(src.shape.h, pads[0] + pads[2], kh, stride[0], dilation[0])
        wo = _out_len(src.shape.w, pads[1] + pads[3], kw, stride[1], dilation[1])
        if bias is None:
            bias = np.zeros(cout, np.float32)
        if bias.shape != (cout,):
            raise self._error(node, f"bias shape {list(bias.shape)} is not ({cout},)")
        self._add_layer(
            node, "conv", [value.layer], Shape(cout, ho, wo),
            attrs={"kernel": (kh, kw), "stride": stride, "pads": pads, "dilation": dilation,
                   "groups": groups, "activation": None},
            params={"weight": weight.astype(np.float32).copy(), "bias": bias.astype(np.float32).copy()},
        )

    def _pads(self, node, attrs, in_hw, kernel, stride, dilation) -> tuple[int, int, int, int]:
        """ONNX pads (h_begin, w_begin, h_end, w_end) or auto_pad, as (top, left, bottom, right)."""
        auto = attrs.get("auto_pad", "NOTSET")
        if auto in ("NOTSET", ""):
            pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
            if len(pads) != 4:
                raise self._error(node, f"pads {list(pads)} must have 4 entries for a 2-D operator")
            if min(pads) < 0:
                raise self._error(node, f"negative pads {list(pads)} are not supported")
            return pads
        if auto == "VALID":
            return (0, 0, 0, 0)
        if auto not in ("SAME_UPPER", "SAME_LOWER"):
            raise self._error(node, f"auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
        begin, end = [], []
        for size, k, s, d in zip(in_hw, kernel, stride, dilation):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            # SAME_UPPER puts the odd pixel of padding at the end, SAME_LOWER at the beginning.
            b, e = (small, large) if auto == "SAME_UPPER" else (large, small)
            begin.append(b)
            end.append(e)
        return (begin[0], begin[1], end[0], end[1])

    def _gemm(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        attrs = self._attrs(node)
        if int(attrs.get("transA", 0)):
            raise self._error(node, "transA=1 is not supported (the activation must be the left operand)")
        b = self._const(node, 1, "the weight B")
        c = self._const(node, 2, "the bias C", required=False)
        if b.ndim != 2:
            raise self._error(node, f"weight B must be 2-D, got shape {list(b.shape)}")
        weight = (b if int(attrs.get("transB", 0)) else b.T) * np.float32(attrs.get("alpha", 1.0))
        bias = None
        if c is not None:
            bias = self._per_channel(node, c, weight.shape[0], rank=2) * np.float32(attrs.get("beta", 1.0))
        self._fully_connected(node, value, weight, bias)

    def _matmul(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        b = self._const(node, 1, "the weight (second operand)")
        if b.ndim != 2:
            raise self._error(node, f"only a matrix-vector product with a 2-D constant weight is supported, got {list(b.shape)}")
        self._fully_connected(node, value, b.T, None)

    def _fully_connected(self, node, value: _Value, weight: np.ndarray, bias: np.ndarray | None) -> None:
        src = self.by_name[value.layer]
        if value.rank != 2:
            raise self._error(node, f"expects a 2-D N,K input (Flatten it first), got a rank-{value.rank} tensor")
        cout, cin = weight.shape
        if cin != src.shape.size:
            raise self._error(node, f"weight has {cin} inputs but its input tensor has {src.shape.size} values")
        if bias is None:
            bias = np.zeros(cout, np.float32)
        self._add_layer(
            node, "fc", [value.layer], Shape(int(cout), 1, 1), attrs={"activation": None},
            params={"weight": np.ascontiguousarray(weight, dtype=np.float32), "bias": bias.astype(np.float32)},
            rank=2, origin=[_label(node)] + value.views,
        )

    def _per_channel(self, node, const: np.ndarray, channels: int, rank: int) -> np.ndarray:
        """A constant that broadcasts per channel, as a (channels,) vector, or an error."""
        arr = np.asarray(const, dtype=np.float32)
        if arr.size == 1:
            return np.full(channels, arr.reshape(()), np.float32)
        ok_shapes = {(channels,), (1, channels)} if rank == 2 else {(channels, 1, 1), (1, channels, 1, 1)}
        if arr.shape not in ok_shapes:
            raise self._error(node, f"constant of shape {list(arr.shape)} does not broadcast per channel over {channels} channels")
        return arr.reshape(channels).copy()

    def _batchnorm(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        attrs = self._attrs(node)
        if int(attrs.get("training_mode", 0)):
            raise self._error(node, "training_mode=1 cannot be imported (inference graphs only)")
        scale, beta, mean, var = (self._const(node, i, what) for i, what in
                                  ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")))
        layer = self._sole_consumer(value, node.input[0])
        src = self.by_name[value.layer]
        eps = float(np.float32(attrs.get("epsilon", 1e-5)))
        foldable = layer is not None and layer.op in _WEIGHTED_OPS and layer.activation is None
        channels = layer.shape.c if foldable else src.shape.c
        vectors = [self._per_channel(node, v, channels, rank=2) for v in (scale, beta, mean, var)]
        scale, beta, mean, var = (v.astype(np.float64) for v in vectors)
        factor = scale / np.sqrt(var + eps)
        if not foldable:
            # A BatchNormalization after a concat, a pool, an activation or a tensor with other
            # readers (DenseNet's pre-activation): a per-channel affine y = factor * x + shift, run
            # as a 1x1 depthwise conv (exact in float; a ReLU after it fuses into it as usual).
            if value.flat or value.rank != 4:
                raise self._error(node, "a BatchNormalization that cannot be folded into the layer in front "
                                  "must read a 4-D feature map")
            shift = beta - mean * factor
            self._add_layer(node, "conv", [src.name], src.shape, rank=value.rank, attrs={
                "kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "dilation": (1, 1),
                "groups": channels, "activation": None},
                params={"weight": factor.reshape(channels, 1, 1, 1).astype(np.float32),
                        "bias": shift.astype(np.float32)})
            return
        w = layer.params["weight"].astype(np.float64)
        layer.params["weight"] = (w * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
        layer.params["bias"] = ((layer.params["bias"] - mean) * factor + beta).astype(np.float32)
        self._merge(layer, node, value.rank)

    def _activation(self, node: onnx.NodeProto, act: Activation) -> None:
        value = self._tensor(node, 0)
        layer = self._sole_consumer(value, node.input[0])
        if layer is not None and layer.op in _WEIGHTED_OPS + ("add", "mul") and layer.activation is None:
            layer.attrs["activation"] = act
            self._merge(layer, node, value.rank)
            return
        if value.flat:
            raise self._error(node, "cannot read a flattened feature map (only a fully connected layer can)")
        src = self.by_name[value.layer]
        self._add_layer(node, "act", [src.name], src.shape, attrs={"activation": act}, rank=value.rank)

    def _table_activation(self, node: onnx.NodeProto, act: Activation) -> None:
        """A unary activation the output stage's table computes: always an ``act`` layer, which the
        compiler fuses into the layer in front when that layer has no other consumer."""
        value = self._tensor(node, 0)
        if value.flat:
            raise self._error(node, "cannot read a flattened feature map (only a fully connected layer can)")
        src = self.by_name[value.layer]
        self._add_layer(node, "act", [src.name], src.shape, attrs={"activation": act}, rank=value.rank)

    def _mul(self, node: onnx.NodeProto) -> None:
        """SiLU (``Mul(x, Sigmoid(x))``), or an element-wise multiply of two computed tensors of one
        shape, or of a feature map and a per-channel (N, C, 1, 1) vector (squeeze-and-excitation)."""
        if self.node_index in self.silu:
            self._silu(node)
            return
        values = [self._value(name, f"Mul {_label(node)!r}") for name in node.input[:2]]
        if any(v.const is not None for v in values):
            raise self._error(node, "a Mul by a constant is not supported (only products of two computed tensors)")
        a, b = (self._tensor(node, i) for i in (0, 1))
        la, lb = self.by_name[a.layer], self.by_name[b.layer]
        if a.flat or b.flat or a.rank != b.rank:
            raise self._error(node, "operands must be feature maps of one rank (no flattened tensors)")
        if la.shape == lb.shape or lb.shape == Shape(la.shape.c):
            pass
        elif la.shape == Shape(lb.shape.c):
            la, lb = lb, la  # the per-channel vector goes second
        else:
            raise self._error(node, f"operands have shapes {la.shape} and {lb.shape}; supported are equal shapes "
                              "and a feature map times a per-channel vector (N, C, 1, 1)")
        self._add_layer(node, "mul", [la.name, lb.name], la.shape, attrs={"activation": None}, rank=a.rank)

    def _silu(self, node: onnx.NodeProto) -> None:
        """``Mul(x, Sigmoid(x))`` (checked by :meth:`_silu_muls`): the Sigmoid's act layer becomes SiLU."""
        for index in (0, 1):
            value = self._value(node.input[index], f"Mul {_label(node)!r}")
            layer = self.by_name.get(value.layer) if value.layer is not None else None
            if layer is not None and layer.op == "act" and layer.activation.kind == "sigmoid" \
                    and layer.tensor == self._resolve(node.input[index]):
                layer.attrs["activation"] = Activation("silu")
                self._merge(layer, node, value.rank)
                return
        raise self._error(node, "only Mul(x, Sigmoid(x)) (SiLU) is supported")

    def _clip(self, node: onnx.NodeProto) -> None:
        attrs = self._attrs(node)
        if self.opset < 11:
            lo, hi = float(attrs.get("min", -np.inf)), float(attrs.get("max", np.inf))
        else:
            lo_c = self._const(node, 1, "min", required=False)
            hi_c = self._const(node, 2, "max", required=False)
            lo = float(lo_c.reshape(())) if lo_c is not None else -np.inf
            hi = float(hi_c.reshape(())) if hi_c is not None else np.inf
        if lo == 0.0 and hi == np.inf:
            act = Activation("relu")
        elif np.isfinite(lo) and np.isfinite(hi) and lo < hi:
            act = Activation("clip", lo=lo, hi=hi)
        else:
            raise self._error(node, f"bounds [{lo}, {hi}] are not supported; a Clip needs finite min < max "
                              "(or min=0 without max, which is a ReLU)")
        self._activation(node, act)

    def _pool(self, node: onnx.NodeProto, op: str) -> None:
        value, src = self._feature_map(node)
        attrs = self._attrs(node)
        if len(node.output) > 1 and node.output[1]:
            raise self._error(node, "the Indices output is not supported")
        kernel = tuple(int(k) for k in attrs.get("kernel_shape", ()))
        if len(kernel) != 2:
            raise self._error(node, f"kernel_shape {list(kernel)} must have 2 entries")
        stride = _pair(attrs.get("strides"), 1)
        dilation = _pair(attrs.get("dilations"), 1)
        if dilation != (1, 1):
            raise self._error(node, f"dilations {list(dilation)} are not supported for pooling")
        pads = list(self._pads(node, attrs, (src.shape.h, src.shape.w), kernel, stride, dilation))
        out = []
        for axis, size in enumerate((src.shape.h, src.shape.w)):
            total = pads[axis] + pads[axis + 2]
            n = _out_len(size, total, kernel[axis], stride[axis], 1)
            if int(attrs.get("ceil_mode", 0)):
                n = -(-(size + total - kernel[axis]) // stride[axis]) + 1
                # A last window that would start in the end padding is dropped (ONNX/PyTorch rule).
                if (n - 1) * stride[axis] >= size + pads[axis]:
                    n -= 1
                extra = (n - 1) * stride[axis] + kernel[axis] - (size + total)
                if extra > 0:
                    if op == "avgpool" and int(attrs.get("count_include_pad", 0)):
                        raise self._error(node, "ceil_mode=1 together with count_include_pad=1 is not supported")
                    # The extra window positions behave like padding that is never counted, so
                    # they become end padding in the IR.
                    pads[axis + 2] += extra
            out.append(n)
        ir_attrs = {"kernel": kernel, "stride": stride, "pads": tuple(pads)}
        if op == "avgpool":
            ir_attrs["count_include_pad"] = bool(int(attrs.get("count_include_pad", 0)))
        self._add_layer(node, op, [value.layer], Shape(src.shape.c, out[0], out[1]), attrs=ir_attrs)

    def _global_avgpool(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        windows = _global_pool_windows(src.shape.h, src.shape.w)
        if windows is not None:
            # The POOL window is at most 31x31: a larger plane (squeeze-and-excitation at 112x112)
            # is first averaged over equal k x k windows that tile it, then globally. The average of
            # equal-sized window averages is the global average exactly (in float); the quantizer
            # calibrates the intermediate tensor like any other.
            (kh, kw) = windows
            first = self._add_layer(node, "avgpool", [value.layer], Shape(src.shape.c, src.shape.h // kh,
                                                                          src.shape.w // kw),
                                    attrs={"kernel": (kh, kw), "stride": (kh, kw), "pads": (0, 0, 0, 0),
                                           "count_include_pad": False},
                                    name=f"{_label(node)}/windows", tensor=f"{node.output[0]}/windows")
            self._add_layer(node, "global_avgpool", [first.name], Shape(src.shape.c, 1, 1))
            return
        self._add_layer(node, "global_avgpool", [value.layer], Shape(src.shape.c, 1, 1))

    def _add(self, node: onnx.NodeProto) -> None:
        values = [self._value(name, f"Add {_label(node)!r}") for name in node.input[:2]]
        consts = [v.const is not None for v in values]
        if all(consts):
            raise self._error(node, "adds two constants; constant folding is not supported")
        if any(consts):
            index = consts.index(False)
            value, const = values[index], values[1 - index].const
            layer = self._sole_consumer(value, node.input[index])
            if layer is None or layer.op not in _WEIGHTED_OPS or layer.activation is not None:
                raise self._error(
                    node, "an Add of a constant is supported only as the bias of the conv or fully connected "
                    "layer directly in front of it (whose output it alone reads, before any activation)"
                )
            layer.params["bias"] = layer.params["bias"] + self._per_channel(node, const, layer.shape.c, value.rank)
            self._merge(layer, node, value.rank)
            return
        a, b = (self._tensor(node, i) for i in (0, 1))
        la, lb = self.by_name[a.layer], self.by_name[b.layer]
        if la.shape != lb.shape or a.rank != b.rank or a.flat or b.flat:
            raise self._error(node, f"operands have shapes {la.shape} and {lb.shape}; only equal shapes "
                              "(no broadcasting) are supported")
        self._add_layer(node, "add", [la.name, lb.name], la.shape, attrs={"activation": None}, rank=a.rank)

    def _concat(self, node: onnx.NodeProto) -> None:
        values = [self._tensor(node, i) for i in range(len(node.input))]
        rank = values[0].rank
        axis = int(self._attrs(node).get("axis", 1))
        if axis < 0:
            axis += rank
        if axis != 1 or any(v.rank != rank or v.flat for v in values):
            raise self._error(node, f"only concatenation along the channel axis (1) of equally ranked tensors "
                              f"is supported, got axis {self._attrs(node).get('axis')} on rank {rank}")
        shapes = [self.by_name[v.layer].shape for v in values]
        if len({(s.h, s.w) for s in shapes}) != 1:
            raise self._error(node, f"inputs differ in height/width: {', '.join(map(str, shapes))}")
        shape = Shape(sum(s.c for s in shapes), shapes[0].h, shapes[0].w)
        self._add_layer(node, "concat", [v.layer for v in values], shape, rank=rank)

    def _lrn(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        attrs = self._attrs(node)
        if "size" not in attrs:
            raise self._error(node, "the size attribute is required")
        self._add_layer(node, "lrn", [value.layer], src.shape, attrs={
            "size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
            "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0)),
        })

    def _softmax(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        src = self.by_name[value.layer]
        axis = int(self._attrs(node).get("axis", 1 if self.opset < 13 else -1))
        if axis < 0:
            axis += value.rank
        pixels = 1 if value.rank == 2 else src.shape.h * src.shape.w
        # Before opset 13 Softmax flattens from ``axis`` on, so it is a channel softmax only for
        # one-pixel maps; from 13 on it normalizes the single ``axis``.
        channel_softmax = axis == 1 and (pixels == 1 or self.opset >= 13) and not value.flat
        if not channel_softmax:
            raise self._error(node, f"only a softmax over the channel axis is supported (axis {axis} on a "
                              f"rank-{value.rank} tensor of shape {src.shape})")
        self._add_layer(node, "softmax", [value.layer], src.shape, rank=value.rank)

    # -- views ----------------------------------------------------------------------------------

    def _flatten(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        axis = int(self._attrs(node).get("axis", 1))
        if axis < 0:
            axis += value.rank
        if axis != 1:
            raise self._error(node, f"only axis=1 (keep the batch dimension) is supported, got {axis}")
        self._view(node, value, rank=2)

    def _reshape(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        target = [int(d) for d in self._const(node, 1, "the target shape").reshape(-1)]
        src = self.by_name[value.layer]
        n = self.batch or 1
        dims = [n, src.shape.c, src.shape.h, src.shape.w] if value.rank == 4 else [n, src.shape.size]
        resolved = [dims[i] if d == 0 and i < len(dims) and not int(self._attrs(node).get("allowzero", 0)) else d
                    for i, d in enumerate(target)]
        if resolved.count(-1) == 1:
            known = int(np.prod([d for d in resolved if d != -1]))
            resolved[resolved.index(-1)] = src.shape.size // max(known, 1)
        c, h, w = src.shape.as_tuple()
        if value.shuffle is None and value.rank == 4 and not value.flat and len(resolved) == 5 \
                and resolved[0] == n and resolved[3:] == [h, w] and resolved[1] * resolved[2] == c:
            # The first step of a channel shuffle (torch's x.view(n, g, c // g, h, w)).
            self.values[node.output[0]] = _Value(layer=value.layer, rank=5, shuffle=(resolved[1], False))
            return
        if value.shuffle is not None:
            g, transposed = value.shuffle
            if not transposed or resolved != [n, c, h, w]:
                raise self._error(node, f"a channel shuffle must be Reshape to [N, g, C/g, H, W], Transpose "
                                  f"[0, 2, 1, 3, 4], Reshape to [N, C, H, W]; got a reshape to {target}")
            # out[b*g + a] = in[a*(C/g) + b]: output channel k reads input channel (k % g)*(C/g) + k // g.
            k = np.arange(c)
            index = tuple(int(v) for v in (k % g) * (c // g) + k // g)
            self._add_layer(node, "channels", [value.layer], src.shape, attrs={"index": index})
            return
        if resolved == [n, src.shape.size]:
            self._view(node, value, rank=2)
        elif resolved == [n, src.shape.c, src.shape.h, src.shape.w] and not value.flat:
            self._view(node, value, rank=4)
        else:
            raise self._error(node, f"reshape of {dims} to {target} is supported only as a flatten to "
                              f"[{n}, {src.shape.size}] in front of a fully connected layer")

    def _transpose(self, node: onnx.NodeProto) -> None:
        value = self._tensor(node, 0)
        perm = [int(v) for v in self._attrs(node).get("perm", [])]
        if value.shuffle is None or value.shuffle[1] or perm != [0, 2, 1, 3, 4]:
            raise self._error(node, f"Transpose {perm} is supported only as the middle of a channel shuffle "
                              "(Reshape to [N, g, C/g, H, W], Transpose [0, 2, 1, 3, 4], Reshape to [N, C, H, W])")
        self.values[node.output[0]] = _Value(layer=value.layer, rank=5, shuffle=(value.shuffle[0], True))

    def _channel_range(self, node: onnx.NodeProto, value: _Value, start: int, stop: int, step: int = 1,
                       output: int = 0) -> None:
        src = self.by_name[value.layer]
        index = tuple(range(start, stop, step))
        if not index:
            raise self._error(node, f"selects no channel ({start}:{stop}:{step} of {src.shape.c})")
        shape = Shape(len(index), src.shape.h, src.shape.w)
        self._add_layer(node, "channels", [src.name], shape, attrs={"index": index},
                        name=_label(node) if output == 0 else f"{_label(node)}_{output}", tensor=node.output[output])

    def _slice(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        if self.opset < 10:
            raise self._error(node, "Slice before opset 10 (attributes) is not supported")
        starts, ends = (self._const(node, i, what).reshape(-1) for i, what in ((1, "starts"), (2, "ends")))
        axes = self._const(node, 3, "axes", required=False)
        steps = self._const(node, 4, "steps", required=False)
        axes = list(range(len(starts))) if axes is None else [int(a) for a in axes.reshape(-1)]
        steps = [1] * len(starts) if steps is None else [int(v) for v in steps.reshape(-1)]
        dims = [1, src.shape.c, src.shape.h, src.shape.w]
        spans = {}
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            ax = ax + 4 if ax < 0 else ax
            lo, hi, _ = slice(int(st), int(en), sp).indices(dims[ax])
            spans[ax] = (lo, hi, sp)
        other = {ax: sp for ax, sp in spans.items() if ax != 1 and sp != (0, dims[ax], 1)}
        if other or spans.get(1, (0, 0, 1))[2] < 1:
            raise self._error(node, "only a slice along the channels (axis 1, step >= 1) is supported")
        lo, hi, sp = spans.get(1, (0, src.shape.c, 1))
        self._channel_range(node, value, lo, hi, sp)

    def _split(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        attrs = self._attrs(node)
        axis = int(attrs.get("axis", 0))
        if axis not in (1, -3):
            raise self._error(node, f"only a split along the channels (axis 1) is supported, got axis {axis}")
        if len(node.input) > 1 and node.input[1]:
            sizes = [int(v) for v in self._const(node, 1, "split").reshape(-1)]
        elif "split" in attrs:
            sizes = [int(v) for v in attrs["split"]]
        else:
            parts = int(attrs.get("num_outputs", len(node.output)))
            each = -(-src.shape.c // parts)
            sizes = [min(each, src.shape.c - k * each) for k in range(parts)]
        if sum(sizes) != src.shape.c or len(sizes) != len(node.output):
            raise self._error(node, f"split sizes {sizes} do not cover the {src.shape.c} channels in "
                              f"{len(node.output)} outputs")
        at = 0
        for k, size in enumerate(sizes):
            self._channel_range(node, value, at, at + size, 1, output=k)
            at += size

    def _reduce_mean(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        attrs = self._attrs(node)
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = self._const(node, 1, "axes").reshape(-1).tolist()
        axes = sorted(int(a) + 4 if int(a) < 0 else int(a) for a in (axes or []))
        if axes != [2, 3]:
            raise self._error(node, f"ReduceMean over axes {axes} is supported only over the plane (2, 3), "
                              "as a global average pool")
        self._global_avgpool(node)
        if not int(attrs.get("keepdims", 1)):
            out = self.values[node.output[0]]
            self.values[node.output[0]] = _Value(layer=out.layer, rank=2)

    def _view(self, node: onnx.NodeProto, value: _Value, rank: int) -> None:
        src = self.by_name[value.layer]
        flat = rank == 2 and src.shape.h * src.shape.w > 1
        self.values[node.output[0]] = _Value(layer=value.layer, rank=rank, flat=flat or (value.flat and rank == 2),
                                             views=value.views + [_label(node)])

    # -- upsampling -----------------------------------------------------------------------------

    def _resize(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        attrs = self._attrs(node)
        if attrs.get("mode", "nearest") != "nearest":
            raise self._error(node, f"mode {attrs.get('mode')!r} is not supported (only 'nearest')")
        if self.opset < 11:
            scales, sizes = self._const(node, 1, "scales"), None
        else:
            scales = self._const(node, 2, "scales", required=False)
            sizes = self._const(node, 3, "sizes", required=False)
        axes = list(attrs.get("axes", range(4)))
        axes = [a + 4 if a < 0 else a for a in axes]
        in_dims = [1, src.shape.c, src.shape.h, src.shape.w]
        factors = {a: Fraction(1) for a in range(4)}
        if scales is not None and scales.size:
            for a, s in zip(axes, scales.reshape(-1)):
                factors[a] = Fraction(float(s)).limit_denominator(1 << 16)
        elif sizes is not None and sizes.size:
            for a, s in zip(axes, sizes.reshape(-1)):
                factors[a] = Fraction(int(s), in_dims[a])
        else:
            raise self._error(node, "needs constant scales or sizes")
        scale = self._integer_scale(node, factors)
        ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
        nearest = attrs.get("nearest_mode", "round_prefer_floor")
        for size in (src.shape.h, src.shape.w):
            if not _is_replication(size, scale, ctm, nearest):
                raise self._error(node, f"coordinate_transformation_mode {ctm!r} with nearest_mode {nearest!r} "
                                  f"does not replicate pixels for scale {scale}; only pixel replication is supported")
        self._upsampled(node, value, src, scale)

    def _upsample(self, node: onnx.NodeProto) -> None:
        value, src = self._feature_map(node)
        attrs = self._attrs(node)
        if attrs.get("mode", "nearest") != "nearest":
            raise self._error(node, f"mode {attrs.get('mode')!r} is not supported (only 'nearest')")
        scales = np.array(attrs["scales"]) if "scales" in attrs else self._const(node, 1, "scales")
        factors = {a: Fraction(float(s)).limit_denominator(1 << 16) for a, s in enumerate(scales.reshape(-1))}
        self._upsampled(node, value, src, self._integer_scale(node, factors))

    def _integer_scale(self, node, factors: dict[int, Fraction]) -> int:
        if factors[0] != 1 or factors[1] != 1 or factors[2] != factors[3] or factors[2].denominator != 1 \
                or factors[2] < 1:
            raise self._error(node, f"scales {[str(factors[a]) for a in range(4)]} are not supported; only the "
                              "same integer factor >= 1 for height and width (1 for N and C)")
        return int(factors[2])

    def _upsampled(self, node, value: _Value, src: Layer, scale: int) -> None:
        shape = Shape(src.shape.c, src.shape.h * scale, src.shape.w * scale)
        self._add_layer(node, "upsample", [value.layer], shape, attrs={"scale": scale})


    # -- transposed convolution ------------------------------------------------------------------

    def _conv_transpose(self, node: onnx.NodeProto) -> None:
        """ConvTranspose -> ``convtranspose``; the weight (Ci, Co/g, kh, kw) becomes (Co, Ci/g, kh, kw)."""
        value, src = self._feature_map(node)
        weight = self._const(node, 1, "the weight")
        bias = self._const(node, 2, "the bias", required=False)
        attrs = self._attrs(node)
        if weight.ndim != 4:
            raise self._error(node, f"only 2-D transposed convolutions are supported (weight rank {weight.ndim})")
        cin, cout_g, kh, kw = (int(d) for d in weight.shape)
        groups = int(attrs.get("group", 1))
        if tuple(attrs.get("kernel_shape", (kh, kw))) != (kh, kw):
            raise self._error(node, f"kernel_shape {list(attrs['kernel_shape'])} disagrees with the weight shape "
                              f"{list(weight.shape)}")
        if groups < 1 or cin != src.shape.c or cin % groups:
            raise self._error(node, f"weight {list(weight.shape)} with group={groups} does not fit "
                              f"{src.shape.c} input channels (ConvTranspose weights are (Cin, Cout/group, kh, kw))")
        cout = cout_g * groups
        stride = _pair(attrs.get("strides"), 1)
        dilation = _pair(attrs.get("dilations"), 1)
        out_pad = tuple(int(v) for v in attrs.get("output_padding", (0, 0)))
        if len(out_pad) != 2 or min(out_pad) < 0:
            raise self._error(node, f"output_padding {list(out_pad)} must be two values >= 0")
        full = [(n - 1) * s + (k - 1) * d + 1 + op for n, s, k, d, op in
                zip((src.shape.h, src.shape.w), stride, (kh, kw), dilation, out_pad)]
        pads = self._transpose_pads(node, attrs, (src.shape.h, src.shape.w), stride, full)
        ho, wo = full[0] - pads[0] - pads[2], full[1] - pads[1] - pads[3]
        if bias is None:
            bias = np.zeros(cout, np.float32)
        if bias.shape != (cout,):
            raise self._error(node, f"bias shape {list(bias.shape)} is not ({cout},)")
        cig = cin // groups
        w_ir = weight.reshape(groups, cig, cout_g, kh, kw).transpose(0, 2, 1, 3, 4).reshape(cout, cig, kh, kw)
        self._add_layer(
            node, "convtranspose", [value.layer], Shape(cout, ho, wo),
            attrs={"kernel": (kh, kw), "stride": stride, "pads": pads, "output_padding": out_pad,
                   "dilation": dilation, "groups": groups, "activation": None},
            params={"weight": np.ascontiguousarray(w_ir, dtype=np.float32), "bias": bias.astype(np.float32).copy()},
        )

    def _transpose_pads(self, node, attrs, in_hw, stride, full) -> tuple[int, int, int, int]:
        """ConvTranspose's pads (top, left, bottom, right) from pads, auto_pad or output_shape.

        ``full`` is the uncropped output size per axis. With ``output_shape`` (or SAME_*: output =
        input * stride) ONNX sets total = full - output and puts total // 2 at the beginning for
        SAME_UPPER, at the end otherwise."""
        auto = attrs.get("auto_pad", "NOTSET") or "NOTSET"
        if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
            raise self._error(node, f"auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
        target = attrs.get("output_shape")
        if target is None and auto in ("SAME_UPPER", "SAME_LOWER"):
            target = [n * s for n, s in zip(in_hw, stride)]
        if target is None:
            if auto == "VALID":
                return (0, 0, 0, 0)
            pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
            if len(pads) != 4 or min(pads) < 0:
                raise self._error(node, f"pads {list(pads)} must be 4 values >= 0 for a 2-D operator")
            return pads  # type: ignore[return-value]
        target = [int(v) for v in target][-2:]
        begin, end = [], []
        for f, t in zip(full, target):
            total = f - t
            if total < 0:
                raise self._error(node, f"output_shape {target} is larger than the full output {full}; "
                                  "use output_padding to grow the output")
            small, large = total // 2, total - total // 2
            b, e = (small, large) if auto == "SAME_UPPER" else (large, small)
            begin.append(b)
            end.append(e)
        return (begin[0], begin[1], end[0], end[1])

#: The largest POOL window side and stride (the instruction's kh/kw and stride fields).
_POOL_WINDOW_MAX, _POOL_STRIDE_MAX = 31, 7


def _global_pool_windows(h: int, w: int) -> tuple[int, int] | None:
    """For a global average pool over an h x w plane larger than one POOL window: the window
    (kh, kw), each side at most the POOL stride limit 7 (the windows tile the plane, so the stride
    is the window), that tiles the plane exactly into at most 31 x 31 windows (the largest such
    sides: 7 x 7 for 112 x 112), or None when the plane fits one window or no exact tiling exists
    (the compiler then names the limit)."""
    if h <= _POOL_WINDOW_MAX and w <= _POOL_WINDOW_MAX:
        return None

    def side(n: int) -> int | None:
        fits = [k for k in range(1, _POOL_STRIDE_MAX + 1) if n % k == 0 and n // k <= _POOL_WINDOW_MAX]
        return max(fits) if fits else None

    kh, kw = side(h), side(w)
    return None if kh is None or kw is None else (kh, kw)


def _label(node: onnx.NodeProto) -> str:
    """The name a node is known by: its own name, else its first output's name."""
    return node.name or (node.output[0] if node.output else node.op_type)


def _pair(value, default: int) -> tuple[int, int]:
    if value is None:
        return (default, default)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ModelError(f"expected 2 values for a 2-D operator attribute, got {list(value)}")
    return value


def _out_len(size: int, pad_total: int, k: int, s: int, d: int) -> int:
    return (size + pad_total - ((k - 1) * d + 1)) // s + 1


def _is_replication(in_len: int, scale: int, ctm: str, nearest: str) -> bool:
    """Whether ONNX Resize's nearest sampling picks input index x // scale for every output x."""
    out_len = in_len * scale
    for x in range(out_len):
        if ctm in ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric"):
            # half_pixel_symmetric equals half_pixel for an exact integer scale.
            src = Fraction(2 * x + 1, 2 * scale) - Fraction(1, 2)
            if ctm == "pytorch_half_pixel" and out_len == 1:
                src = Fraction(0)
        elif ctm == "asymmetric":
            src = Fraction(x, scale)
        elif ctm == "tf_half_pixel_for_nn":
            src = Fraction(2 * x + 1, 2 * scale)
        elif ctm == "align_corners":
            src = Fraction(0) if out_len == 1 else Fraction(x * (in_len - 1), out_len - 1)
        else:
            return False
        if nearest in ("round_prefer_floor", "round_prefer_ceil"):
            tie = (2 * src).denominator == 1 and (2 * src).numerator % 2 == 1
            if tie:
                index = int(src // 1) if nearest == "round_prefer_floor" else int(src // 1) + 1
            else:
                index = int((src + Fraction(1, 2)) // 1)
        elif nearest == "floor":
            index = int(src // 1)
        elif nearest == "ceil":
            index = -int((-src) // 1)
        else:
            return False
        if min(max(index, 0), in_len - 1) != x // scale:
            return False
    return True
