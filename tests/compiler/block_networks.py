"""Small networks that the compiler, RTL and estimator tests share: a ResNet basic block with a
projection shortcut (ONNX, batch norms folded at import), a yolov3-tiny style upsample-and-route
net, an inception-like module whose branch widths are not multiples of C, and the helpers that
build and quantize them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlproc.frontends import load_onnx
from dlproc.ir import Activation
from dlproc.quant import Quantizer

from test_quant_nets import RELU, NetBuilder, rand_b, rand_w

__all__ = ["quantize_random", "quantize_shape", "onnx_model", "bn_params", "resnet_block", "upsample_route",
           "mini_inception"]


def quantize_random(net, rng, lo=-1.0, hi=1.0):
    """``net`` quantized on 12 uniform random inputs in [lo, hi)."""
    q = Quantizer(net)
    c, h, w = q.input_shape
    q.calibrate(rng.uniform(lo, hi, (12, c, h, w)).astype(np.float32))
    return q.quantize()


def onnx_model(nodes, in_shape, inits):
    """An opset-17 ONNX model of ``nodes`` from input ``x`` (``in_shape``) to output ``y``, with
    ``inits`` as float32 initializers, shapes inferred."""
    graph = helper.make_graph(
        nodes, "blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def bn_params(rng, c, p):
    """The four BatchNormalization tensors of ``c`` channels, named ``{p}_s/_b/_m/_v``."""
    return {f"{p}_s": rng.uniform(0.5, 1.5, c), f"{p}_b": rng.normal(0, 0.1, c), f"{p}_m": rng.normal(0, 0.1, c),
            f"{p}_v": rng.uniform(0.5, 1.5, c)}


def resnet_block(rng):
    """conv-bn-relu-conv-bn on the main path, a 1x1 stride-2 projection conv-bn on the shortcut, add, relu."""
    cin, co = 4, 8
    inits = {"w1": rng.normal(0, 0.3, (co, cin, 3, 3)), "w2": rng.normal(0, 0.2, (co, co, 3, 3)),
             "wp": rng.normal(0, 0.4, (co, cin, 1, 1)), **bn_params(rng, co, "bn1"), **bn_params(rng, co, "bn2"),
             **bn_params(rng, co, "bnp")}
    bn = lambda p, i, o: helper.make_node("BatchNormalization", [i, f"{p}_s", f"{p}_b", f"{p}_m", f"{p}_v"], [o],
                                          name=p)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", strides=[2, 2], pads=[1, 1, 1, 1]),
        bn("bn1", "c1", "n1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        bn("bn2", "c2", "n2"),
        helper.make_node("Conv", ["x", "wp"], ["cp"], name="proj", strides=[2, 2]),
        bn("bnp", "cp", "np"),
        helper.make_node("Add", ["n2", "np"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    return load_onnx(onnx_model(nodes, [1, cin, 8, 8], inits))


def upsample_route(rng):
    """yolov3-tiny style: a strided trunk, a 1x1 conv, upsample x2, route (concat) with the
    earlier higher-resolution feature map, a conv; plus an add of two branches."""
    b = NetBuilder("route", (3, 8, 8))
    c0 = b.conv("c0", "input", rand_w(rng, 8, 3, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1),
                act=Activation("leaky", alpha=0.1))
    p0 = b.pool("p0", c0, "maxpool", 2, 2)
    c1 = b.conv("c1", p0, rand_w(rng, 8, 8, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1),
                act=Activation("leaky", alpha=0.1))
    c2 = b.conv("c2", c1, rand_w(rng, 4, 8, 1, 1), rand_b(rng, 4), act=Activation("leaky", alpha=0.1))
    up = b.upsample("up", c2, 2)
    cat = b.concat("route", [up, c0])
    out = b.conv("head", cat, rand_w(rng, 6, 12, 1, 1), rand_b(rng, 6))
    return b.build([out])


def quantize_shape(net, shape, n=3, seed=0):
    """``net`` quantized on ``n`` uniform random inputs of ``shape`` in [0, 1)."""
    q = Quantizer(net)
    q.calibrate(np.random.default_rng(seed).uniform(0, 1, (n, *shape)).astype(np.float32))
    return q.quantize()


def mini_inception(rng) -> object:
    """An inception-like module at C = 4 whose branch widths (3, 6, 5, 2) are not multiples of 4."""
    b = NetBuilder("mini_inception", (4, 10, 10))
    x = b.conv("stem", "input", rand_w(rng, 6, 4, 3, 3), rand_b(rng, 6), pads=(1, 1, 1, 1), act=RELU)
    b1 = b.conv("b1", x, rand_w(rng, 3, 6, 1, 1), rand_b(rng, 3), act=RELU)
    r3 = b.conv("r3", x, rand_w(rng, 5, 6, 1, 1), rand_b(rng, 5), act=RELU)
    b3 = b.conv("b3", r3, rand_w(rng, 6, 5, 3, 3), rand_b(rng, 6), pads=(1, 1, 1, 1), act=RELU)
    r5 = b.conv("r5", x, rand_w(rng, 2, 6, 1, 1), rand_b(rng, 2), act=RELU)
    b5 = b.conv("b5", r5, rand_w(rng, 5, 2, 5, 5), rand_b(rng, 5), pads=(2, 2, 2, 2), act=RELU)
    p = b.pool("pool", x, "maxpool", 3, 1, pads=(1, 1, 1, 1))
    bp = b.conv("proj", p, rand_w(rng, 2, 6, 1, 1), rand_b(rng, 2), act=RELU)
    cat = b.concat("cat", [b1, b3, b5, bp])  # 16 channels, 3 + 6 + 5 + 2: padded to 4 + 8 + 8 + 2
    y = b.pool("down", cat, "maxpool", 3, 2, pads=(0, 0, 1, 1))
    z = b.conv("after", y, rand_w(rng, 5, 16, 1, 1), rand_b(rng, 5), act=RELU)
    b.fc("fc", b.gap("gap", z), rand_w(rng, 7, 5), rand_b(rng, 7))
    return b.build(["fc"])
