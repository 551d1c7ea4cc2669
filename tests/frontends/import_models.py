"""Int8 models made with the real tools, for the import tests (tests/frontends/test_frontend_{qdq,tflite,filetype}.py, tests/targets/test_rtl_imported.py).

* QDQ ONNX: float graphs built with ``onnx.helper`` and quantized by ONNX Runtime's
  ``quantize_static`` (QuantFormat.QDQ) on random calibration data.
* TFLite: a small Keras model converted by TensorFlow's TFLiteConverter to full-integer int8
  (only when TensorFlow is installed: the ``tflite-convert`` extra).

And the comparisons: the golden model's int8 outputs against ONNX Runtime CPU / the LiteRT
interpreter, as (fraction identical, max |difference| in LSB) per output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlproc.targets.golden.run import run_int8

OPSET = 17


@dataclass
class Agreement:
    """Golden vs reference on one output: fraction of identical int8 values and the largest gap."""

    name: str
    identical: float
    max_lsb: int
    count: int

    def __str__(self) -> str:
        return f"{self.name}: {100 * self.identical:.2f} % identical, max {self.max_lsb} LSB ({self.count} values)"


def agreement(name: str, got: np.ndarray, ref: np.ndarray) -> Agreement:
    d = np.abs(got.astype(np.int64).reshape(ref.shape) - ref.astype(np.int64))
    return Agreement(name, float((d == 0).mean()), int(d.max()), int(d.size))


# -- QDQ ONNX ------------------------------------------------------------------------------------


class _Graph:
    """A tiny builder of float ONNX graphs with random weights."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def conv(self, name: str, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, relu: bool = True,
             group: int = 1) -> str:
        fan_in = cin // group * k * k
        w = self.rng.normal(0, 1.4 / np.sqrt(fan_in), (cout, cin // group, k, k)).astype(np.float32)
        b = self.rng.normal(0, 0.1, cout).astype(np.float32)
        self.inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
        self.nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_y"], name=name,
                                           pads=[k // 2] * 4, strides=[stride, stride], group=group))
        if not relu:
            return f"{name}_y"
        self.nodes.append(helper.make_node("Relu", [f"{name}_y"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def model(self, x_shape: tuple[int, ...], out: str, name: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return m


def random_conv_net(rng: np.random.Generator) -> onnx.ModelProto:
    """Three convolutions (3x3, strided 3x3, 1x1), ReLU, max pool; 16 channels out."""
    g = _Graph(rng)
    y = g.conv("c1", "x", 3, 8)
    y = g.conv("c2", y, 8, 16, stride=2)
    y = g.op("MaxPool", [y], "pool", kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    y = g.conv("c3", y, 16, 16, k=1, relu=False)
    return g.model((1, 3, 16, 16), y, "random_conv")


def resnet_block_net(rng: np.random.Generator) -> onnx.ModelProto:
    """A ResNet basic block: conv-ReLU-conv plus the identity shortcut, ReLU after the add; then a
    concat of the block with its input and an upsample (nearest Resize)."""
    g = _Graph(rng)
    stem = g.conv("stem", "x", 3, 8)
    y = g.conv("b1", stem, 8, 8)
    y = g.conv("b2", y, 8, 8, relu=False)
    s = g.op("Add", [y, stem], "add")
    s = g.op("Relu", [s], "add_relu")
    c = g.op("Concat", [s, stem], "cat", axis=1)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up_scales")
    g.inits.append(scales)
    u = g.op("Resize", [c, "", "up_scales"], "up", mode="nearest")
    y = g.conv("head", u, 16, 8, relu=False)
    return g.model((1, 3, 8, 8), y, "resnet_block")


def classifier_head_net(rng: np.random.Generator) -> onnx.ModelProto:
    """A conv, average pool, global average pool and Gemm classifier: 10 outputs per image."""
    g = _Graph(rng)
    y = g.conv("c1", "x", 3, 16)
    y = g.op("AveragePool", [y], "avg", kernel_shape=[2, 2], strides=[2, 2])
    y = g.op("GlobalAveragePool", [y], "gap")
    y = g.op("Flatten", [y], "flat")
    w = rng.normal(0, 0.4, (10, 16)).astype(np.float32)
    g.inits += [numpy_helper.from_array(w, "fc_w"), numpy_helper.from_array(rng.normal(0, 0.1, 10).astype(np.float32), "fc_b")]
    y = g.op("Gemm", [y, "fc_w", "fc_b"], "fc", transB=1)
    return g.model((1, 3, 8, 8), y, "classifier_head")


def quantize_qdq(model: onnx.ModelProto, path: Path, rng: np.random.Generator, *, per_channel: bool = True,
                 uint8: bool = False, reduce_range: bool = True, samples: int = 16,
                 qoperator: bool = False) -> Path:
    """``path``: ``model`` quantized by ONNX Runtime quantize_static (QDQ) on N(0, 1) data.

    ``reduce_range`` (7-bit weights) is what ONNX Runtime recommends on x86 CPUs without VNNI: its
    int8 kernels (u8 x s8 pair sums in 16 bits) saturate with full-range weights, up to 8 LSB off
    its own float reference on this machine (docs/import.md)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    data = [{"x": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

    float_path = path.with_suffix(".float.onnx")
    onnx.save(model, float_path)
    act = QuantType.QUInt8 if uint8 else QuantType.QInt8
    quantize_static(str(float_path), str(path), Reader(), quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                    per_channel=per_channel,
                    activation_type=act, weight_type=QuantType.QInt8,
                    reduce_range=reduce_range)
    return path


def ort_int8_outputs(path: Path, x: np.ndarray, optimize: bool = True) -> np.ndarray:
    """ONNX Runtime CPU's output codes on ``x`` (one image per run: the models have batch 1).

    ``optimize`` (the default session) lets ONNX Runtime fuse the Q/DQ pairs into its integer
    kernels (QLinearConv ...); without it every DequantizeLinear -> float op -> QuantizeLinear runs
    as written, the QDQ format's defining semantics.

    The graph output is the DequantizeLinear of the int8 result, (q - zp) * s; q is recovered
    exactly by quantizing it again with the same scale."""
    import onnxruntime as ort

    model = onnx.load(str(path))
    out_name = model.graph.output[0].name
    dq = next(n for n in model.graph.node if n.output[0] == out_name and n.op_type == "DequantizeLinear")
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    scale, zp = float(inits[dq.input[1]]), inits[dq.input[2]]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    outs = [sess.run(None, {"x": x[i : i + 1]})[0] for i in range(len(x))]
    q = np.rint(np.concatenate(outs) / scale) + zp.astype(np.int64)
    # uint8 codes map to dlproc's int8 codes by - 128 (docs/import.md).
    return (q - 128 if zp.dtype == np.uint8 else q).astype(np.int64)


def golden_outputs(qnet, x: np.ndarray) -> np.ndarray:
    return run_int8(qnet, qnet.quantize_input(x))[qnet.outputs[0]]


# -- TFLite --------------------------------------------------------------------------------------


def keras_int8_tflite(path: Path, rng: np.random.Generator) -> Path:
    """A small Keras CNN converted to a full-integer int8 .tflite (int8 input and output).

    Every imported TFLite operator appears: CONV_2D (ReLU, ReLU6 fused), DEPTHWISE_CONV_2D, ADD,
    CONCATENATION, PAD, MAX/AVERAGE_POOL_2D, RESIZE_NEAREST_NEIGHBOR, MEAN, RESHAPE,
    FULLY_CONNECTED, SOFTMAX."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(int(rng.integers(1 << 30)))
    L = tf.keras.layers
    inp = L.Input((8, 8, 3), batch_size=1)
    a = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    b = L.DepthwiseConv2D(3, padding="same")(a)
    c = L.Conv2D(8, 1, activation="relu6")(b)
    d = L.Add()([a, c])
    e = L.Concatenate()([d, a])
    p = L.ZeroPadding2D(1)(e)
    f = L.Conv2D(16, 3, strides=2)(p)
    g = L.MaxPooling2D(2)(f)
    u = L.Resizing(4, 4, interpolation="nearest")(g)
    h = L.AveragePooling2D(2)(u)
    gap = L.GlobalAveragePooling2D()(h)
    fc = L.Dense(10)(L.Flatten()(f))
    out = L.Softmax()(fc)
    model = tf.keras.Model(inp, [f, gap, fc, out])
    data = [rng.normal(0, 1, (1, 8, 8, 3)).astype(np.float32) for _ in range(32)]
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([x] for x in data)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    path.write_bytes(conv.convert())
    return path


def litert_outputs(path: Path, x_nhwc: np.ndarray, reference_kernels: bool = True) -> dict[str, np.ndarray]:
    """The LiteRT interpreter's int8 outputs (NHWC as the file has them), by output tensor name.

    ``reference_kernels`` runs TFLite's reference kernels (BUILTIN_REF, the definition of TFLite's
    integer arithmetic) instead of the optimized/XNNPACK ones."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = OpResolverType.BUILTIN_REF if reference_kernels else OpResolverType.AUTO
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=kind)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    outs = it.get_output_details()
    res: dict[str, list[np.ndarray]] = {o["name"]: [] for o in outs}
    for i in range(len(x_nhwc)):
        it.set_tensor(inp["index"], x_nhwc[i : i + 1])
        it.invoke()
        for o in outs:
            res[o["name"]].append(it.get_tensor(o["index"]).copy())
    return {k: np.concatenate(v) for k, v in res.items()}


def golden_tflite(qnet, x_nhwc: np.ndarray) -> dict[str, np.ndarray]:
    """The golden model's outputs by TFLite tensor name, back in NHWC (software softmax quantized
    with its file scale, as the TFLite model outputs it)."""
    res = run_int8(qnet, x_nhwc.transpose(0, 3, 1, 2))
    out = {}
    for name in qnet.outputs:
        layer = qnet[name]
        v = res[name]
        if v.dtype != np.int8:
            v = np.clip(np.rint(v / layer.scale) + layer.zero_point, -128, 127)
        v = v.astype(np.int64)
        out[layer.tensor] = v.transpose(0, 2, 3, 1) if layer.shape.h * layer.shape.w > 1 else v.reshape(len(v), -1)
    return out


# -- per layer: every layer fed the runtime's own int8 input ---------------------------------------


def _layer_agreements(qnet, res: dict[str, np.ndarray]) -> list[Agreement]:
    """Golden op of every hardware layer on the reference's inputs vs the reference's output."""
    from dlproc.targets.golden import run as grun

    out = []
    for layer in qnet:
        if layer.op == "input" or not layer.hardware or layer.name not in res:
            continue
        srcs = [qnet[n] for n in layer.inputs]
        if not all(s.name in res for s in srcs):
            continue
        args = [res[s.name].reshape((-1,) + s.shape.as_tuple()).astype(np.int8) for s in srcs]
        got = grun._nchw(grun._INT_OPS[layer.op](layer, srcs, args), layer)
        out.append(agreement(f"{layer.name} ({layer.op})", got, res[layer.name].reshape(got.shape)))
    return out


def ort_per_layer(path: Path, qnet, x: np.ndarray) -> list[Agreement]:
    """Per-layer agreement with ONNX Runtime: every QuantizeLinear output becomes a graph output."""
    import onnxruntime as ort

    model = onnx.load(str(path))
    q_of = {n.input[0]: n for n in model.graph.node if n.op_type == "QuantizeLinear"}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    names = {}
    for layer in qnet:
        node = q_of.get(layer.tensor or "")
        if node is not None:
            names[layer.name] = node.output[0]
            elem = TensorProto.UINT8 if inits[node.input[2]].dtype == np.uint8 else TensorProto.INT8
            model.graph.output.append(helper.make_tensor_value_info(node.output[0], elem, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    runs = [sess.run(list(names.values()), {"x": x[i : i + 1]}) for i in range(len(x))]
    res = {}
    for k, name in enumerate(names):
        v = np.concatenate([r[k] for r in runs]).astype(np.int64)
        res[name] = v - 128 if runs[0][k].dtype == np.uint8 else v
    return _layer_agreements(qnet, res)


def litert_per_layer(path: Path, qnet, x_nhwc: np.ndarray, reference_kernels: bool = True) -> list[Agreement]:
    """Per-layer agreement with the LiteRT interpreter (all intermediate tensors preserved)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = OpResolverType.BUILTIN_REF if reference_kernels else OpResolverType.AUTO
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=kind, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    index = {d["name"]: d["index"] for d in it.get_tensor_details()}
    res: dict[str, list[np.ndarray]] = {}
    for i in range(len(x_nhwc)):
        it.set_tensor(it.get_input_details()[0]["index"], x_nhwc[i : i + 1])
        it.invoke()
        for layer in qnet:
            v = x_nhwc[i : i + 1] if layer.op == "input" else it.get_tensor(index[layer.tensor])
            res.setdefault(layer.name, []).append(v.copy())
    nchw = {}
    for name, parts in res.items():
        v = np.concatenate(parts)
        nchw[name] = v.transpose(0, 3, 1, 2) if v.ndim == 4 else v.reshape(len(v), -1, 1, 1)
    return _layer_agreements(qnet, nchw)
