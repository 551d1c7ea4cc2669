"""Import a QDQ-quantized ONNX model (ONNX Runtime ``quantize_static``, QuantFormat.QDQ) as is.

A QDQ model is a float graph whose tensors pass through QuantizeLinear -> DequantizeLinear pairs
(activations) and whose weights and biases are stored as int8/int32 behind a DequantizeLinear.
The importer

1. *strips* the Q/DQ nodes (:func:`strip_qdq`): each activation pair becomes an Identity, each
   quantized constant a float initializer holding its dequantized value, and the file's scale and
   zero point of every tensor and the integers of every weight and bias are kept aside;
2. reads the stripped float graph with the ordinary ONNX front end, so every operator rule
   (shapes, padding, ReLU fusion, flatten into fc) is the one float models get; and
3. attaches the kept quantization to the IR layers (:class:`~dlproc.frontends.qspec.QuantSpec`)
   and builds the QuantizedNetwork with :func:`~dlproc.quant.imported.build_qnet`.

Nothing is calibrated. uint8 activations become int8 exactly (code - 128, zero point - 128);
an asymmetric or uint8 weight becomes ``w - zp_w`` when that fits int8 (exact), otherwise the node
is rejected. Per-channel weight scales must run along the output channels. Anything else the
processor cannot express is a :class:`~dlproc.errors.ModelError` naming the node and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dlproc.errors import ModelError
from dlproc.ir import Network
from dlproc.frontends.qspec import QuantSpec, TensorQ, WeightQ, to_int8_domain

__all__ = ["is_qdq", "strip_qdq", "qoperator_to_qdq", "load_qdq_float", "import_qdq", "qdq_spec"]

# Nodes that only move or view codes: the file must give their output the input's quantization.
_SHAPE_ONLY = ("Flatten", "Reshape", "MaxPool", "Resize", "Upsample", "Identity", "Dropout")
# ONNX ops that belong to the operator-style quantized format (QOperator).
_QOPERATOR = ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearConcat", "QLinearAveragePool",
              "QLinearGlobalAveragePool", "ConvInteger", "MatMulInteger", "QLinearMul", "QLinearSigmoid")
_WEIGHTED = ("Conv", "Gemm", "MatMul")


def is_qdq(proto: onnx.ModelProto) -> bool:
    """Whether the model carries its own quantization (Q/DQ or QLinear nodes)."""
    from dlproc.frontends.filetype import QUANTIZED_ONNX_OPS

    return any(node.op_type in QUANTIZED_ONNX_OPS for node in proto.graph.node)


@dataclass
class _QConst:
    """A quantized constant: integer values, scale/zero point (broadcast along ``axis``)."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int


@dataclass
class StrippedModel:
    """The float graph of a QDQ model plus the quantization its Q/DQ nodes held."""

    proto: onnx.ModelProto
    tensors: dict[str, TensorQ]        # activation tensor name -> int8-domain quantization
    consts: dict[str, _QConst]         # name of a dequantized constant -> its integers


def _label(node: onnx.NodeProto) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def _err(source: str, node: onnx.NodeProto, why: str) -> ModelError:
    return ModelError(f"{source}: {node.op_type} {_label(node)!r}: {why}")


def strip_qdq(proto: onnx.ModelProto, source: str) -> StrippedModel:
    """Remove every Q/DQ node (see the module docstring); the result is an ordinary float graph."""
    proto = qoperator_to_qdq(proto, source)
    graph = proto.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is not None:
                inits[node.output[0]] = numpy_helper.to_array(attr.t)
        if node.op_type in _QOPERATOR:
            raise _err(source, node, "this operator of the operator-style quantized ONNX (QOperator format) is "
                       "not imported (only QLinearConv and QLinearMatMul are); quantize with QuantFormat.QDQ "
                       "(Q/DQ nodes around float operators) instead")
    producers = {out: node for node in graph.node for out in node.output}
    tensors: dict[str, TensorQ] = {}
    consts: dict[str, _QConst] = {}
    new_inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    alias: dict[str, str] = {}  # DequantizeLinear output -> the float tensor its Q/DQ pair carried
    graph_outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type == "QuantizeLinear":
            scale, zp, dtype = _qparams(source, node, inits, producers)
            if node.input[0] in inits:
                raise _err(source, node, "quantizes a constant at run time; store the weight quantized "
                           "(an integer initializer behind a DequantizeLinear)")
            tq = TensorQ(float(scale), to_int8_domain(int(zp), dtype, f"{source}: QuantizeLinear {_label(node)!r}"))
            known = tensors.get(node.input[0])
            if known is not None and known != tq:
                raise _err(source, node, f"tensor {node.input[0]!r} is quantized twice with different scales "
                           f"({known.scale:g}/{known.zero_point} and {tq.scale:g}/{tq.zero_point})")
            tensors[node.input[0]] = tq
            if node.output[0] in graph_outputs:  # an int8 graph output: the float tensor stands in
                nodes.append(helper.make_node("Identity", [node.input[0]], [node.output[0]], name=_label(node)))
            continue
        if node.op_type == "DequantizeLinear":
            src = node.input[0]
            if src in inits:
                consts[node.output[0]] = _dequantize_const(source, node, inits)
                deq = _dq_value(consts[node.output[0]])
                new_inits.append(numpy_helper.from_array(deq.astype(np.float32), node.output[0]))
                continue
            q_node = producers.get(src)
            if q_node is None or q_node.op_type != "QuantizeLinear":
                raise _err(source, node, f"dequantizes {src!r}, which is neither a stored constant nor the "
                           "output of a QuantizeLinear (int8 graph inputs are not supported: the model must "
                           "take float input)")
            if _qparams(source, node, inits, producers)[:2] != _qparams(source, q_node, inits, producers)[:2]:
                raise _err(source, node, "its scale/zero point differ from those of the QuantizeLinear feeding it")
            nodes.append(helper.make_node("Identity", [q_node.input[0]], [node.output[0]], name=_label(node)))
            alias[node.output[0]] = q_node.input[0]
            continue
        nodes.append(node)
    _check_nodes(source, nodes, consts, inits, tensors, alias)
    used = {name for node in nodes for name in node.input}
    kept_inits = [i for i in graph.initializer if i.name in used]
    out_graph = helper.make_graph(
        nodes, graph.name, list(graph.input), [_float_output(o) for o in graph.output], kept_inits + new_inits,
    )
    out = helper.make_model(out_graph, opset_imports=list(proto.opset_import))
    out.ir_version = proto.ir_version
    return StrippedModel(out, tensors, consts)


def _float_output(value: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """A graph output declared float (an int8 output now carries the float tensor it quantized)."""
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim]
    return helper.make_tensor_value_info(value.name, onnx.TensorProto.FLOAT, dims)


def _qparams(source: str, node: onnx.NodeProto, inits: dict, producers: dict) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """(scale, zero point, integer type) of a Q/DQ node; activations must be per tensor."""
    if len(node.input) < 2 or node.input[1] not in inits:
        raise _err(source, node, "its scale must be a constant")
    scale = np.asarray(inits[node.input[1]], dtype=np.float64)
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in inits:
            raise _err(source, node, "its zero point must be a constant")
        zp_arr = inits[node.input[2]]
    else:
        zp_arr = np.zeros((), np.uint8)  # ONNX's default zero point is uint8 0
    if scale.size != 1 or np.asarray(zp_arr).size != 1:
        raise _err(source, node, f"per-channel activation quantization (scale shape {list(scale.shape)}) cannot "
                   "be expressed; the processor quantizes activations per tensor")
    if not float(scale.reshape(-1)[0]) > 0:
        raise _err(source, node, f"scale {float(scale.reshape(-1)[0])} must be positive")
    return scale.reshape(-1)[0], np.asarray(zp_arr).reshape(-1)[0], np.asarray(zp_arr).dtype


def _dequantize_const(source: str, node: onnx.NodeProto, inits: dict) -> _QConst:
    q = np.asarray(inits[node.input[0]])
    if q.dtype not in (np.int8, np.uint8, np.int32):
        raise _err(source, node, f"{q.dtype} constants cannot be expressed (int8/uint8 weights, int32 biases)")
    if len(node.input) < 2 or node.input[1] not in inits:
        raise _err(source, node, "its scale must be a constant")
    scale = np.asarray(inits[node.input[1]], dtype=np.float64)
    zp = np.asarray(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else np.zeros((), q.dtype)
    axis = next((int(helper.get_attribute_value(a)) for a in node.attribute if a.name == "axis"), 1)
    if any(a.name == "block_size" and helper.get_attribute_value(a) for a in node.attribute):
        raise _err(source, node, "blocked quantization (block_size) cannot be expressed")
    if scale.size > 1:
        axis = axis + q.ndim if axis < 0 else axis
        if scale.ndim != 1 or q.ndim <= axis or q.shape[axis] != scale.size:
            raise _err(source, node, f"scale shape {list(scale.shape)} does not fit constant {list(q.shape)} on axis {axis}")
    return _QConst(q=q, scale=scale, zero_point=zp.astype(np.int64), axis=axis)


def _dq_value(c: _QConst) -> np.ndarray:
    """(q - zp) * scale in float64, broadcast along the quantization axis."""
    shape = [1] * c.q.ndim
    if c.scale.size > 1:
        shape[c.axis] = -1
    scale = c.scale.reshape(shape) if c.scale.size > 1 else c.scale.reshape(())
    zp = c.zero_point.reshape(shape) if c.zero_point.size > 1 else c.zero_point.reshape(())
    return (c.q.astype(np.int64) - zp).astype(np.float64) * scale


def _check_nodes(source: str, nodes: list, consts: dict, inits: dict, tensors: dict, alias: dict) -> None:
    """Reject what the float importer would accept but the int8 arithmetic cannot express."""
    for node in nodes:
        if node.op_type in _WEIGHTED:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if float(attrs.get("alpha", 1.0)) != 1.0 or float(attrs.get("beta", 1.0)) != 1.0:
                raise _err(source, node, "alpha/beta other than 1 scale the stored integers; not supported")
            if len(node.input) > 1 and node.input[1] in inits and node.input[1] not in consts:
                raise _err(source, node, "its weight is float (no DequantizeLinear); an int8 model needs "
                           "quantized weights")
        if node.op_type in _SHAPE_ONLY and node.input and node.output:
            a, b = tensors.get(alias.get(node.input[0], node.input[0])), tensors.get(node.output[0])
            if a is not None and b is not None and a != b:
                raise _err(source, node, f"the file requantizes ({a.scale:g}, {a.zero_point}) -> ({b.scale:g}, "
                           f"{b.zero_point}) across a {node.op_type}, which only moves codes on the processor")


# -- QOperator format: QLinearConv / QLinearMatMul rewritten as their QDQ equivalent ----------------

# Ops that may run directly on int8 tensors in the QOperator format (they only move codes).
_INT8_PASSTHROUGH = ("MaxPool", "Flatten", "Reshape", "Identity", "Resize", "Upsample", "Dropout")


def qoperator_to_qdq(proto: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """The QDQ form of a QOperator-format model: QLinearConv(x, w, B) becomes DQ(x), DQ(w), DQ(B)
    -> Conv -> Q (the bias at scale x_scale * w_scale, as QLinearConv defines it); QLinearMatMul
    likewise with MatMul; a MaxPool/Flatten/Reshape on an int8 tensor gets a DQ in front and a Q
    behind with its input's quantization. Other QLinear* ops stay and are rejected by the stripper.
    A model without QLinearConv/QLinearMatMul is returned unchanged."""
    graph = proto.graph
    if not any(n.op_type in ("QLinearConv", "QLinearMatMul") for n in graph.node):
        return proto
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    qinfo: dict[str, tuple[str, str]] = {}  # int8 tensor -> (scale, zero point) initializer names
    nodes: list[onnx.NodeProto] = []
    extra: list[onnx.TensorProto] = []

    def dq(name: str, scale: str, zp: str, axis: int | None = None) -> str:
        out = f"{name}__dq"
        kw = {} if axis is None else {"axis": axis}
        nodes.append(helper.make_node("DequantizeLinear", [name, scale, zp], [out], name=out, **kw))
        return out

    for node in graph.node:
        if node.op_type == "QuantizeLinear":
            qinfo[node.output[0]] = (node.input[1], node.input[2] if len(node.input) > 2 else "")
            nodes.append(node)
        elif node.op_type in ("QLinearConv", "QLinearMatMul"):
            conv = node.op_type == "QLinearConv"
            x, xs, xz, w, ws, wz, ys, yz = node.input[:8]
            if w not in inits:
                raise _err(source, node, "its weight must be a stored constant")
            w_axis = 0 if conv else 1
            inputs = [dq(x, xs, xz), dq(w, ws, wz, w_axis if inits[ws].size > 1 else None)]
            if conv and len(node.input) > 8 and node.input[8]:
                b = node.input[8]
                bscale = (np.asarray(inits[xs], np.float32) * np.asarray(inits[ws], np.float32)).reshape(-1)
                extra += [numpy_helper.from_array(bscale, f"{b}__scale"),
                          numpy_helper.from_array(np.zeros(bscale.shape, np.int32), f"{b}__zp")]
                inputs.append(dq(b, f"{b}__scale", f"{b}__zp", 0 if bscale.size > 1 else None))
            y_f = f"{node.output[0]}__float"
            nodes.append(helper.make_node("Conv" if conv else "MatMul", inputs, [y_f], name=_label(node)))
            nodes[-1].attribute.extend(node.attribute)
            nodes.append(helper.make_node("QuantizeLinear", [y_f, ys, yz], [node.output[0]], name=f"{_label(node)}__q"))
            qinfo[node.output[0]] = (ys, yz)
        elif node.op_type in _INT8_PASSTHROUGH and node.input and node.input[0] in qinfo:
            scale, zp = qinfo[node.input[0]]
            inputs = [dq(node.input[0], scale, zp)] + list(node.input[1:])
            y_f = f"{node.output[0]}__float"
            moved = helper.make_node(node.op_type, inputs, [y_f], name=_label(node))
            moved.attribute.extend(node.attribute)
            nodes.append(moved)
            nodes.append(helper.make_node("QuantizeLinear", [y_f, scale, zp], [node.output[0]], name=f"{_label(node)}__q"))
            qinfo[node.output[0]] = (scale, zp)
        else:
            nodes.append(node)
    out_graph = helper.make_graph(nodes, graph.name, list(graph.input), list(graph.output),
                                  list(graph.initializer) + extra)
    out = helper.make_model(out_graph, opset_imports=list(proto.opset_import))
    out.ir_version = proto.ir_version
    return out


# -- attaching the quantization to the IR ----------------------------------------------------------


def _out_channel_axis(node: onnx.NodeProto) -> int:
    """The axis of the stored weight that runs along the layer's output channels."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = next((int(helper.get_attribute_value(a)) for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return 1  # MatMul: (K, N)


def _weight_q(source: str, node: onnx.NodeProto, layer, stripped: StrippedModel, s_in: float,
              notes: list[str]) -> WeightQ:
    wc = stripped.consts[node.input[1]]
    cout = layer.shape.c
    if wc.q.dtype == np.int32:
        raise _err(source, node, "an int32 weight cannot be expressed (int8/uint8 weights only)")
    if wc.scale.size > 1 and wc.axis != _out_channel_axis(node):
        raise _err(source, node, f"per-channel weight scales along axis {wc.axis} (not the output channels) "
                   "cannot be expressed; the processor scales weights per output channel")
    s_w = np.broadcast_to(wc.scale.reshape(-1), (cout,)).astype(np.float64)
    # The IR weight is the dequantized (q - zp) * s_w in IR layout; dividing by s_w gives the
    # integers back exactly (|q - zp| <= 255 and float32 keeps 24 bits), whatever the importer's
    # transpose, without repeating its layout rules here.
    w_ir = layer.params["weight"].astype(np.float64)
    ints = w_ir / s_w.reshape((-1,) + (1,) * (w_ir.ndim - 1))
    w_int = np.rint(ints)
    if np.max(np.abs(ints - w_int), initial=0.0) > 1e-3:
        raise _err(source, node, "its weight could not be matched to the stored integers")
    if w_int.min(initial=0) < -128 or w_int.max(initial=0) > 127:
        raise _err(source, node, f"weight minus its zero point spans {int(w_int.min())}..{int(w_int.max())}, "
                   "outside int8; asymmetric weights are supported only when w - zp_w fits int8")
    bias = None
    if len(node.input) > 2 and node.input[2] in stripped.consts:
        bc = stripped.consts[node.input[2]]
        if bc.q.dtype != np.int32:
            raise _err(source, node, f"its bias is {bc.q.dtype}; QDQ biases are int32")
        b = bc.q.astype(np.int64).reshape(-1) - np.broadcast_to(bc.zero_point.reshape(-1), (cout,))
        s_b = np.broadcast_to(bc.scale.reshape(-1), (cout,)).astype(np.float64)
        want = s_in * s_w
        # ORT stores the bias at exactly s_in * s_w (as float32); anything else is rescaled to it,
        # which rounds once more (docs/import.md).
        if np.allclose(s_b, want, rtol=1e-6, atol=0):
            bias = b
        else:
            bias = np.rint(b * s_b / want).astype(np.int64)
            notes.append(f"{node.op_type} {_label(node)!r}: bias stored at another scale than s_in * s_w; "
                         "rescaled to it (one more rounding)")
        if np.abs(bias).max(initial=0) >= 2**31:
            raise _err(source, node, "its bias does not fit int32 at the scale s_in * s_w")
    return WeightQ(weight=w_int.astype(np.int8), scale=s_w, bias=bias)


def qdq_spec(source: str, net: Network, stripped: StrippedModel) -> QuantSpec:
    spec = QuantSpec(source=source)
    nodes = {_label(n): n for n in stripped.proto.graph.node}
    for layer in net:
        tq = stripped.tensors.get(layer.tensor or "")
        if tq is not None:
            spec.tensors[layer.name] = tq
        if layer.op == "input" and tq is None:
            raise ModelError(f"{source}: input {layer.name!r} is not quantized (no QuantizeLinear on it)")
        for label in layer.origin[1:]:  # nodes fused into this layer: their output must not requantize
            node = nodes.get(label)
            if node is None:
                continue
            if node.op_type in ("BatchNormalization", "Add") and layer.op in ("conv", "fc"):
                raise _err(source, node, f"is folded into {layer.origin[0]!r} by the importer, which would "
                           "change the stored integers; quantize the float model instead")
        main = nodes.get(layer.origin[0]) if layer.origin else None
        if main is not None and layer.op in ("conv", "fc"):
            if len(main.output) and main.output[0] != layer.tensor:
                inner = stripped.tensors.get(main.output[0])
                if inner is not None and inner != tq:
                    raise _err(source, main, "its output is requantized before the activation fused into it; "
                               "the processor requantizes once per layer")
            src_q = spec.tensors.get(layer.inputs[0])
            if src_q is None:
                raise _err(source, main, "its input is not quantized")
            spec.weights[layer.name] = _weight_q(source, main, layer, stripped, src_q.scale, spec.notes)
    return spec


def _read(model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str, Path | None]:
    from dlproc.frontends.onnx import read_model

    return read_model(model)


def load_qdq_float(model: str | Path | onnx.ModelProto, input_size: tuple[int, int] | None = None) -> Network:
    """The float IR of a QDQ model (weights dequantized): what ``dlproc stats`` reads."""
    return _load(model, input_size)[0]


def _load(model, input_size):
    from dlproc.frontends.onnx import load_onnx

    proto, source, path = _read(model)
    stripped = strip_qdq(proto, source)
    net = load_onnx(stripped.proto, input_size=input_size)
    net.source_format = "onnx-qdq"
    net.source_path = str(path) if path else None
    if path is not None and net.name in ("", "onnx_model"):
        net.name = path.stem
    return net, stripped, source


def import_qdq(model: str | Path | onnx.ModelProto, input_size: tuple[int, int] | None = None) -> tuple[Network, QuantSpec]:
    """The float IR of a QDQ model and the file's quantization (scales, zero points, int weights)."""
    net, stripped, source = _load(model, input_size)
    return net, qdq_spec(source, net, stripped)
