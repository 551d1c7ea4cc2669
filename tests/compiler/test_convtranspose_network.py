"""ConvTranspose through the whole flow: ONNX import (weight layout, pads from auto_pad/output_shape,
batch norm and ReLU folded) against ONNX Runtime, stats, quantization, and compiled networks on the
ISA-level simulator (golden target) bit-exact with ``run_int8``."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.compiler import compile_network
from dlproc.errors import ModelError
from dlproc.frontends import load_onnx
from dlproc.targets.golden.run import run_float, run_int8
from dlproc.quant import Quantizer
from dlproc.frontends.stats import layer_macs

from layerprog_cases import small_config
from test_compiler_random import check_golden


def model(nodes, in_shape, inits):
    graph = helper.make_graph(
        nodes, "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def ort_run(m, x):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def segnet_like(rng, *, cin=4, mid=8, h=6, w=5, groups=1, **ct_attrs):
    """conv-relu, ConvTranspose-BN-ReLU (2x upsampling), 1x1 conv head."""
    cog = 6 // groups
    inits = {"w1": rng.normal(0, 0.3, (mid, cin, 3, 3)), "b1": rng.normal(0, 0.1, mid),
             "wt": rng.normal(0, 0.2, (mid, cog, 4, 4)), "bt": rng.normal(0, 0.1, cog * groups),
             "s": rng.uniform(0.5, 1.5, 6), "b": rng.normal(0, 0.1, 6), "m": rng.normal(0, 0.1, 6),
             "v": rng.uniform(0.5, 1.5, 6), "w3": rng.normal(0, 0.3, (3, 6, 1, 1))}
    attrs = {k: v for k, v in ({"strides": [2, 2], "pads": [1, 1, 1, 1]} | ct_attrs).items() if v is not None}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("ConvTranspose", ["r1", "wt", "bt"], ["t"], name="up", group=groups, **attrs),
        helper.make_node("BatchNormalization", ["t", "s", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["y"], name="head"),
    ]
    return model(nodes, ["N", cin, h, w], inits)


@pytest.mark.parametrize("groups, attrs", [
    (1, {}),
    (2, {}),
    (1, {"strides": [2, 3], "pads": [0, 1, 2, 0], "output_padding": [1, 2], "dilations": [1, 2]}),
    (1, {"auto_pad": "SAME_UPPER", "pads": None}),
    (1, {"auto_pad": "SAME_LOWER", "pads": None, "strides": [3, 2]}),
    (1, {"strides": [3, 2], "output_shape": [16, 9], "pads": None}),
])
def test_import_matches_onnxruntime(groups, attrs):
    rng = np.random.default_rng(1)
    m = segnet_like(rng, groups=groups, **attrs)
    net = load_onnx(m)
    up = next(l for l in net.layers if l.op == "convtranspose")
    assert up.origin == ["up", "bn", "relu2"] and up.activation is not None
    x = rng.uniform(-1, 1, (2, 4, 6, 5)).astype(np.float32)
    ref = ort_run(m, x)
    got = run_float(net, x)[net.outputs[0]]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert up.shape.as_tuple() == (6,) + ort_run(_truncated(m), x).shape[2:]


def _truncated(m):
    """The model up to the ConvTranspose's output (to read its spatial size from ONNX Runtime)."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    del m2.graph.output[:]
    m2.graph.output.extend([helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    keep = [n for n in m2.graph.node if n.name in ("conv1", "relu1", "up")]
    del m2.graph.node[:]
    m2.graph.node.extend(keep)
    return m2


def test_import_errors_and_macs():
    rng = np.random.default_rng(2)
    m = segnet_like(rng)
    net = load_onnx(m)
    up = next(l for l in net.layers if l.op == "convtranspose")
    # Every input pixel (8 channels, 6x5) meets every tap (6 outputs x 4x4).
    assert layer_macs(up, net) == 8 * 6 * 5 * 6 * 16
    assert up.params["weight"].shape == (6, 8, 4, 4)
    bad = segnet_like(rng, output_shape=[40, 40], pads=None)
    with pytest.raises(ModelError, match="output_shape .* larger than the full output"):
        load_onnx(bad)


def quantize(net, rng):
    q = Quantizer(net)
    c, h, w = q.input_shape
    q.calibrate(rng.uniform(-1, 1, (12, c, h, w)).astype(np.float32))
    return q.quantize()


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 3], "pads": [0, 1, 2, 0], "output_padding": [1, 2],
                                        "dilations": [1, 2]}])
def test_compiled_network_matches_golden_and_float(attrs):
    rng = np.random.default_rng(3)
    m = segnet_like(rng, **attrs)
    net = load_onnx(m)
    qnet = quantize(net, rng)
    x = rng.uniform(-1, 1, (2, 4, 6, 5)).astype(np.float32)
    cn = check_golden(qnet, small_config(4), x)
    entry = cn.layer("up")
    assert entry.hw and entry.insn_count > 0
    # The int8 network stays close to the float one (quantization error only).
    y = qnet.dequantize(qnet.outputs[0], run_int8(qnet, qnet.quantize_input(x))[qnet.outputs[0]])
    ref = ort_run(m, x)
    assert np.abs(y - ref).max() < 0.1 * np.abs(ref).max() + 4 * qnet[qnet.outputs[0]].scale


def test_segmentation_block_off_still_compiles_and_says_so():
    rng = np.random.default_rng(4)
    qnet = quantize(load_onnx(segnet_like(rng)), rng)
    cfg = small_config(4)
    cfg.set_module_property("conv", "SegmentationBlockGeneration", False)
    x = rng.uniform(-1, 1, (1, 4, 6, 5)).astype(np.float32)
    cn = check_golden(qnet, cfg, x)
    assert any("does not need conv.SegmentationBlockGeneration" in n for n in cn.notes)
    on = compile_network(qnet, small_config(4))
    assert not any("SegmentationBlockGeneration" in n for n in on.notes)
