"""Patterns of torchvision's exports that need a rewrite at import, each imported, compiled and
bit-exact on the ISA-level simulator against the golden model (and equal to ONNX Runtime in float):

* a BatchNormalization that cannot be folded (DenseNet's pre-activation: Concat -> BN -> ReLU ->
  conv) runs as a 1x1 depthwise conv, also over a concat with padding channels (5 + 6 at C = 4);
* a GlobalAveragePool over a plane larger than one POOL window (squeeze-and-excitation at
  112x112) is an average pool over equal windows that tile the plane, then a global one;
* VGG-16's first FC (25,088 inputs) on a configuration whose FC engine and WGT cannot hold its
  reduction runs as a 7x7 conv split into partial-sum CONVs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort

from dlproc.compiler import compile_network
from dlproc.frontends.onnx import load_onnx

from act_table_models import densenet_block, isasim_matches_golden, quantize, quantized_vgg_classifier
from layerprog_cases import small_config


@pytest.mark.parametrize("c1, c2", [(8, 4), (5, 6)])  # (5, 6): the concat has padding channels at C = 4
def test_unfoldable_batchnorm_runs_as_a_depthwise_conv(c1, c2):
    net = load_onnx(densenet_block(c1, c2))
    norm = net["norm"]
    assert norm.op == "conv" and norm.attrs["groups"] == c1 + c2 and norm.activation.kind == "relu"
    cfg = small_config(4, inp=(16, 16, 16), out=(16, 16, 4), wgt=16384)
    x = np.random.default_rng(10).uniform(-1, 1, (8, 3, 8, 8)).astype(np.float32)
    isasim_matches_golden(quantize(net, cfg, x), cfg, x)


def global_pool_model(hw: int):
    rng = np.random.default_rng(hw)
    w = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("hw, window", [(40, 5), (62, 2), (20, None)])
def test_large_global_pool_is_two_pools(hw, window):
    from dlproc.targets.golden.run import run_float

    model = global_pool_model(hw)
    net = load_onnx(model)
    if window is None:
        assert [l.op for l in net][-1] == "global_avgpool" and "gap/windows" not in net
    else:
        first = net["gap/windows"]
        assert first.op == "avgpool" and first.attrs["kernel"] == (window, window)
        assert first.shape.as_tuple() == (4, hw // window, hw // window) and net["gap"].inputs == ["gap/windows"]
    x = np.random.default_rng(11).uniform(-1, 1, (6, 3, hw, hw)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(run_float(net, x[:1])["gap"], sess.run(None, {"x": x[:1]})[0], rtol=1e-5, atol=1e-6)
    cfg = small_config(4, inp=(64, 64, 8), out=(32, 32, 4), wgt=16384)
    isasim_matches_golden(quantize(net, cfg, x), cfg, x)


@pytest.mark.parametrize("split", ["slice", "split"])
def test_channel_shuffle_and_chunk_are_address_remaps(split):
    """torch's channel_shuffle and chunk: ``channels`` layers (views, no instructions) that match ONNX
    Runtime in float and run bit-exact, including a view copied compactly into a concat at C = 4
    (14 channels: the views select channels across channel blocks)."""
    from act_table_models import quantized_shuffle, shuffle_model
    from dlproc.hardware import isa
    from dlproc.targets.golden.run import run_float

    model = shuffle_model(split=split)
    net = load_onnx(model)
    views = [layer for layer in net if layer.op == "channels"]
    assert len(views) == 3
    assert views[0].attrs["index"] == (0, 7, 1, 8, 2, 9, 3, 10, 4, 11, 5, 12, 6, 13)  # out[b*2 + a] = in[a*7 + b]
    assert [len(v.attrs["index"]) for v in views[1:]] == [7, 7]
    x = np.random.default_rng(12).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(run_float(net, x)["conv_out"], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    cfg = small_config(4, inp=(16, 16, 16), out=(16, 16, 4), wgt=16384)
    _, qnet, data = quantized_shuffle(cfg, split=split)
    cn = compile_network(qnet, cfg)
    assert not any("shuffle" in n and "copy" in n for n in cn.notes)
    assert any("address remap" in n for n in cn.notes)
    assert sum(isinstance(i, isa.Conv) for i in isa.decode_program(cn.instructions)) > 0
    isasim_matches_golden(quantize(net, cfg, data), cfg, data)


def erf_gelu_model(seed: int = 13):
    """conv 3x3 -> GELU as torch writes it at opset 17 (Div by sqrt 2, Erf, Add 1, Mul x, Mul 0.5;
    the constants as Constant nodes) -> conv 1x1."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (4, 8, 1, 1)).astype(np.float32), "w2")

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32)))

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
             const("sqrt2", 1.4142135381698608), helper.make_node("Div", ["c", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"), const("one", 1.0),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["c", "a"], ["m"], name="mul"), const("half", 0.5),
             helper.make_node("Mul", ["m", "half"], ["g"], name="gelu"),
             helper.make_node("Conv", ["g", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                              initializer=[w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_erf_gelu_is_the_gelu_table_activation():
    from dlproc.frontends.onnx import fuse_erf_gelu
    from dlproc.targets.golden.run import run_float

    model = erf_gelu_model()
    assert [n.op_type for n in fuse_erf_gelu(model).graph.node] == ["Conv", "Constant", "Constant", "Constant",
                                                                      "Gelu", "Conv"]
    net = load_onnx(model)
    assert [(layer.op, layer.activation.kind if layer.activation else None) for layer in net][1:] == [
        ("conv", None), ("act", "gelu"), ("conv", None)]
    x = np.random.default_rng(14).uniform(-1, 1, (8, 3, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(run_float(net, x[:1])["conv2"], sess.run(None, {"x": x[:1]})[0], rtol=1e-4, atol=1e-5)
    cfg = small_config(4, inp=(16, 16, 16), out=(16, 16, 4), wgt=16384)
    cfg.set_module_property("conv", "ActivationTableGeneration", True)
    isasim_matches_golden(quantize(net, cfg, x), cfg, x)
    # A pattern whose intermediate has another reader stays as it is (and is then refused).
    other = erf_gelu_model()
    other.graph.output.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 8, 8, 8]))
    assert fuse_erf_gelu(other) is other


def test_vgg_first_fc_on_a_small_buffer_is_a_partial_sum_chain():
    from dlproc.hardware import isa
    from sim_fixture import blocks_config

    cfg = blocks_config()  # WGT 1,024 words: one output block's 128 x 49 = 6,272 words do not fit
    _, qnet, x = quantized_vgg_classifier(cfg)
    cn = compile_network(qnet, cfg)
    text = "\n".join(cn.notes)
    assert "fc6: does not fit the FC engine" in text and "partial-sum CONVs per output block" in text
    convs = [i for i in isa.decode_program(cn.instructions) if isinstance(i, isa.Conv)]
    chain = convs[:next(k for k, c in enumerate(convs) if not c.acc_keep) + 1]
    assert len(chain) > 1 and sum(c.cin_blocks for c in chain) == 512 // 4
    assert [c.acc_in for c in chain] == [0] + [1] * (len(chain) - 1)
    isasim_matches_golden(qnet, cfg, x)
