"""ONNX models with the patterns torch.onnx.export writes (opset 17), built with onnx.helper:
SiLU as ``Mul(x, Sigmoid(x))``, HardSwish, HardSigmoid, Sigmoid, Tanh, Softplus fused into a conv,
an add and a Gemm and standalone after a concat and after a conv read twice; squeeze-and-excitation
(a channel-wise Mul); VGG's classifier entry (a 25088-input Gemm). Shared by the compiler tests (ISA-level simulator) and the RTL tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlproc.compiler import compile_network
from dlproc.frontends.onnx import load_onnx
from dlproc.quant import Quantizer
from dlproc.targets.golden.run import run_int8
from dlproc.targets.workflow import Workflow


def _init(rng, name: str, shape, scale: float = 0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def activations_model(seed: int = 40) -> onnx.ModelProto:
    """x (3x8x8) -> conv 3x3 (8) -> SiLU -> conv 1x1 (8) -> HardSwish -> [a]
    a -> conv 3x3 (4) -> Sigmoid -> [b];  a -> conv 1x1 (4) -> [c]  (c is read by Gelu and Concat)
    concat(b, c) -> Tanh (standalone: a concat has no requantization) -> [t] -> conv 1x1 (4) -> [c5]
    c -> Softplus (standalone: c has two readers) -> [g];  add(g, c5) -> HardSigmoid (fused into the add)
    -> global pool -> Gemm (5) -> Sigmoid (fused into the FC)."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,), 0.1),
             _init(rng, "w2", (8, 8, 1, 1)), _init(rng, "b2", (8,), 0.1),
             _init(rng, "w3", (4, 8, 3, 3), 0.2), _init(rng, "b3", (4,), 0.1),
             _init(rng, "w4", (4, 8, 1, 1)), _init(rng, "b4", (4,), 0.1),
             _init(rng, "w5", (4, 8, 1, 1)), _init(rng, "b5", (4,), 0.1),
             _init(rng, "fw", (5, 4), 0.5), _init(rng, "fb", (5,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig1"),
        helper.make_node("Mul", ["c1", "s1"], ["silu1"], name="silu1"),
        helper.make_node("Conv", ["silu1", "w2", "b2"], ["c2"], name="conv2"),
        helper.make_node("HardSwish", ["c2"], ["a"], name="hswish"),
        helper.make_node("Conv", ["a", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], name="conv3"),
        helper.make_node("Sigmoid", ["c3"], ["b"], name="sig3"),
        helper.make_node("Conv", ["a", "w4", "b4"], ["c"], name="conv4"),
        helper.make_node("Concat", ["b", "c"], ["bc"], axis=1, name="cat"),
        helper.make_node("Tanh", ["bc"], ["t"], name="tanh"),
        helper.make_node("Softplus", ["c"], ["g"], name="softplus"),
        helper.make_node("Conv", ["t", "w5", "b5"], ["c5"], name="conv5"),
        helper.make_node("Add", ["g", "c5"], ["sum"], name="add"),
        helper.make_node("HardSigmoid", ["sum"], ["hs"], alpha=1.0 / 6, beta=0.5, name="hsig"),
        helper.make_node("GlobalAveragePool", ["hs"], ["gp"], name="gap"),
        helper.make_node("Flatten", ["gp"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], transB=1, name="fc"),
        helper.make_node("Sigmoid", ["logits"], ["y"], name="sig_fc"),
    ]
    graph = helper.make_graph(nodes, "activations",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def quantized_activations(config=None, seed: int = 40):
    """(float network, quantized network, calibration data) of :func:`activations_model`."""
    net = load_onnx(activations_model(seed))
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (16, 3, 8, 8)).astype(np.float32)
    return net, quantize(net, config, x), x


def se_model(seed: int = 50, ch: int = 8, hw: int = 8) -> onnx.ModelProto:
    """EfficientNet's squeeze-and-excitation as torch exports it: conv 3x3 -> SiLU -> [a];
    a -> GlobalAveragePool -> conv 1x1 (2) -> SiLU -> conv 1x1 (ch) -> Sigmoid -> [gate];
    Mul(a, gate) (a per-channel vector broadcast over the pixels) -> conv 1x1 (4)."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (ch, 3, 3, 3)), _init(rng, "b1", (ch,), 0.1),
             _init(rng, "wr", (2, ch, 1, 1), 0.5), _init(rng, "br", (2,), 0.1),
             _init(rng, "we", (ch, 2, 1, 1), 0.5), _init(rng, "be", (ch,), 0.1),
             _init(rng, "w2", (4, ch, 1, 1)), _init(rng, "b2", (4,), 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig1"),
             helper.make_node("Mul", ["c1", "s1"], ["a"], name="silu"),
             helper.make_node("GlobalAveragePool", ["a"], ["g"], name="se_pool"),
             helper.make_node("Conv", ["g", "wr", "br"], ["r"], name="se_reduce"),
             helper.make_node("Sigmoid", ["r"], ["rs"], name="se_sig_r"),
             helper.make_node("Mul", ["rs", "r"], ["rsilu"], name="se_silu"),
             helper.make_node("Conv", ["rsilu", "we", "be"], ["e"], name="se_expand"),
             helper.make_node("Sigmoid", ["e"], ["gate"], name="se_gate"),
             helper.make_node("Mul", ["gate", "a"], ["scaled"], name="se_mul"),
             helper.make_node("Conv", ["scaled", "w2", "b2"], ["y"], name="project")]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, hw, hw])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def quantized_se(config=None, seed: int = 50, ch: int = 8, hw: int = 8):
    """(float network, quantized network, calibration data) of :func:`se_model`."""
    net = load_onnx(se_model(seed, ch, hw))
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (16, 3, hw, hw)).astype(np.float32)
    return net, quantize(net, config, x), x


def shuffle_model(seed: int = 60, split: str = "slice", hw: int = 8) -> onnx.ModelProto:
    """ShuffleNet v2's unit as torch exports it: x -> conv 1x1 (8) -> [a]; x -> conv 1x1 (6) -> [b];
    concat(a, b) (14 channels) -> channel shuffle (Reshape [1, 2, 7, H, W], Transpose [0, 2, 1, 3, 4],
    Reshape [1, 14, H, W]) -> chunk(2) as ``Slice`` with torch's Shape/Gather/Add/Div/Mul arithmetic
    (``split="slice"``) or as ``Split`` -> [x1], [x2]; x2 -> conv 1x1 (7) + ReLU; concat(x1, that)."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "wa", (8, 3, 1, 1)), _init(rng, "wb", (6, 3, 1, 1)), _init(rng, "wc", (7, 7, 1, 1)),
             _init(rng, "wo", (4, 14, 1, 1)),
             numpy_helper.from_array(np.array([1, 2, 7, hw, hw], np.int64), "shape5"),
             numpy_helper.from_array(np.array([1, 14, hw, hw], np.int64), "shape4"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([1 << 62], np.int64), "big"),
             numpy_helper.from_array(np.array([7, 7], np.int64), "halves")]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
             helper.make_node("Concat", ["a", "b"], ["ab"], axis=1, name="cat1"),
             helper.make_node("Reshape", ["ab", "shape5"], ["v5"], name="view5"),
             helper.make_node("Transpose", ["v5"], ["t5"], perm=[0, 2, 1, 3, 4], name="shuffle"),
             helper.make_node("Reshape", ["t5", "shape4"], ["s"], name="view4")]
    if split == "slice":
        nodes += [helper.make_node("Shape", ["s"], ["shp"], name="shape"),
                  helper.make_node("Gather", ["shp", "one"], ["c"], axis=0, name="gather"),
                  helper.make_node("Add", ["c", "one"], ["c1"], name="plus1"),
                  helper.make_node("Div", ["c1", "two"], ["half"], name="div2"),
                  helper.make_node("Mul", ["half", "one"], ["end1"], name="times1"),
                  helper.make_node("Slice", ["s", "zero", "end1", "one"], ["x1"], name="chunk0"),
                  helper.make_node("Slice", ["s", "end1", "big", "one"], ["x2"], name="chunk1")]
    else:
        nodes += [helper.make_node("Split", ["s", "halves"], ["x1", "x2"], axis=1, name="chunk")]
    nodes += [helper.make_node("Conv", ["x2", "wc"], ["c2"], name="conv_c"),
              helper.make_node("Relu", ["c2"], ["r2"], name="relu_c"),
              helper.make_node("Concat", ["x1", "r2"], ["cat"], axis=1, name="cat2"),
              helper.make_node("Conv", ["cat", "wo"], ["y"], name="conv_out")]
    graph = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, hw, hw])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def quantized_shuffle(config=None, seed: int = 60, split: str = "slice"):
    """(float network, quantized network, calibration data) of :func:`shuffle_model`."""
    net = load_onnx(shuffle_model(seed, split))
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (16, 3, 8, 8)).astype(np.float32)
    return net, quantize(net, config, x), x


def densenet_block(c1: int, c2: int, seed: int = 9) -> onnx.ModelProto:
    """DenseNet's pre-activation: conv 3x3 (c1) and conv 1x1 (c2) -> Concat -> BatchNormalization ->
    ReLU -> conv 1x1 (4); the BatchNormalization cannot be folded into a conv."""
    rng = np.random.default_rng(seed)
    ch = c1 + c2

    def init(name, *shape, lo=-0.5, hi=0.5):
        return numpy_helper.from_array(rng.uniform(lo, hi, shape).astype(np.float32), name)

    inits = [init("w1", c1, 3, 3, 3), init("w2", c2, 3, 1, 1), init("s", ch, lo=0.5, hi=1.5),
             init("b", ch), init("m", ch), init("v", ch, lo=0.5, hi=2.0), init("w3", 4, ch, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
             helper.make_node("Conv", ["x", "w2"], ["b2"], name="conv_b"),
             helper.make_node("Concat", ["a", "b2"], ["cat"], axis=1, name="cat"),
             helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["bn"], name="norm"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w3"], ["y"], name="conv_out")]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def quantized_densenet(config=None, c1: int = 5, c2: int = 6):
    """(float network, quantized network, calibration data) of :func:`densenet_block` (5 + 6
    channels: the concat has padding channels at C = 4)."""
    net = load_onnx(densenet_block(c1, c2))
    x = np.random.default_rng(10).uniform(-1, 1, (8, 3, 8, 8)).astype(np.float32)
    return net, quantize(net, config, x), x


def vgg_classifier_model(seed: int = 70, outputs: int = 10) -> onnx.ModelProto:
    """VGG-16's classifier entry as torch exports it: x (512x14x14) -> MaxPool 2x2 -> Flatten ->
    Gemm (25088 -> ``outputs``, transB) -> Relu. On a small configuration neither the FC engine
    nor one CONV holds its reduction, so it runs as a 7x7 conv split into partial sums."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "fw", (outputs, 512 * 7 * 7), 0.01), _init(rng, "fb", (outputs,), 0.1)]
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool5"),
        helper.make_node("Flatten", ["p"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["fc"], alpha=1.0, beta=1.0, transB=1, name="fc6"),
        helper.make_node("Relu", ["fc"], ["y"], name="relu6"),
    ]
    graph = helper.make_graph(nodes, "vgg_classifier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outputs])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def quantized_vgg_classifier(config=None, seed: int = 70):
    """(float network, quantized network, calibration data) of :func:`vgg_classifier_model`."""
    net = load_onnx(vgg_classifier_model(seed))
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (4, 512, 14, 14)).astype(np.float32)
    return net, quantize(net, config, x), x


def quantize(net, config, x: np.ndarray):
    """``net`` quantized for ``config`` on the calibration data ``x``."""
    q = Quantizer(net, config=config)
    q.calibrate(x)
    return q.quantize()


def isasim_matches_golden(qnet, config, x: np.ndarray, cn=None) -> None:
    """Compile ``qnet`` (unless ``cn`` is given), run 2 frames of ``x`` on the ISA-level simulator
    (the golden target) and assert every tensor the host reads equals ``run_int8``'s bit for bit."""
    cn = compile_network(qnet, config) if cn is None else cn
    ref = run_int8(qnet, qnet.quantize_input(x[:2]), collect=True)
    wf = Workflow(cn, config, target="golden")
    try:
        wf.predict(x[:2], display=False)
    finally:
        wf.close()
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)
