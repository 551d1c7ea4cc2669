"""The ONNX importer: every supported operator, from models built here with onnx.helper.

Each numeric test runs the original model in ONNX Runtime and the imported IR in the float
reference of ``test_frontend_reference.py``; they must agree to 1e-4. Shapes of every IR layer are
also cross-checked against ONNX's own shape inference.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.errors import ModelError, UnsupportedOperatorError
from dlproc.frontends import load_network, load_onnx
from dlproc.ir import Activation, Shape
from test_frontend_reference import run_ir

RNG = np.random.default_rng(1234)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, in_shape, out_shape, inits=None, opset=17, in_name="x", out_names=("y",)):
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in out_names],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    # ONNX requires typed graph outputs; let its shape inference fill them in.
    return onnx.shape_inference.infer_shapes(model)


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _check(model, in_shape, atol=1e-4):
    """Import ``model``, compare IR and ONNX Runtime outputs and inferred shapes; return the net."""
    net = load_onnx(model)
    x = _rand(*in_shape)
    expected = _ort(model, x)
    for image in range(x.shape[0]):
        got = run_ir(net, {net.inputs[0]: x[image]})
        for name, ref in zip(net.outputs, expected):
            np.testing.assert_allclose(got[name].reshape(-1), ref[image].reshape(-1), rtol=1e-4, atol=atol)
    inferred = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in
              list(inferred.value_info) + list(inferred.output)}
    for layer in net.layers:
        if layer.tensor in shapes and shapes[layer.tensor]:
            dims = shapes[layer.tensor][1:]
            assert int(np.prod(dims)) == layer.shape.size, (layer.name, dims, layer.shape)
            if len(dims) == 3:
                assert tuple(dims) == layer.shape.as_tuple(), (layer.name, dims, layer.shape)
    return net


# -- Conv, BatchNormalization, activations -----------------------------------------------------


def test_conv_bn_relu_fold_into_one_layer_and_match_onnxruntime():
    w, b = _rand(8, 2, 3, 3), _rand(8)
    bn = dict(s=_rand(8) + 2, bb=_rand(8), m=_rand(8), v=np.abs(_rand(8)) + 0.5)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", strides=[2, 1], pads=[1, 0, 2, 1],
                         dilations=[1, 2], group=2),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn", epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    model = _model(nodes, [1, 4, 9, 10], None, dict(w=w, b=b, **bn))
    net = _check(model, (1, 4, 9, 10))
    conv = net["conv"]
    assert [l.op for l in net] == ["input", "conv"]
    assert conv.origin == ["conv", "bn", "relu"] and conv.tensor == "y"
    assert conv.attrs["stride"] == (2, 1) and conv.attrs["pads"] == (1, 0, 2, 1)
    assert conv.attrs["dilation"] == (1, 2) and conv.attrs["groups"] == 2
    assert conv.activation == Activation("relu")
    assert conv.shape == Shape(8, (9 + 3 - 3) // 2 + 1, (10 + 1 - 5) + 1)
    factor = bn["s"] / np.sqrt(bn["v"] + 1e-3)
    np.testing.assert_allclose(conv.bias, (b - bn["m"]) * factor + bn["bb"], rtol=1e-5)
    assert conv.weight.dtype == np.float32 and conv.weight.shape == (8, 2, 3, 3)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", strides=[2, 2], auto_pad=auto_pad)]
    net = _check(_model(nodes, [1, 3, 8, 7], None, dict(w=_rand(4, 3, 4, 3))), (1, 3, 8, 7))
    pads = net["c"].attrs["pads"]
    expected = {"SAME_UPPER": (1, 1, 1, 1), "SAME_LOWER": (1, 1, 1, 1), "VALID": (0, 0, 0, 0)}[auto_pad]
    # Height 8, kernel 4, stride 2: 2 rows of padding, split evenly; width 7, kernel 3: 2 columns.
    assert pads == expected
    assert net["c"].shape == (Shape(4, 4, 4) if auto_pad != "VALID" else Shape(4, 3, 3))


def test_conv_same_lower_puts_odd_padding_first():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="SAME_LOWER")]
    net = _check(_model(nodes, [1, 2, 5, 5], None, dict(w=_rand(3, 2, 2, 2))), (1, 2, 5, 5))
    assert net["c"].attrs["pads"] == (1, 1, 0, 0)


@pytest.mark.parametrize("opset", [6, 13])
def test_leaky_and_clip_fuse(opset):
    inits = dict(w=_rand(4, 3, 1, 1))
    if opset >= 11:
        inits.update(lo=np.array(-1.5, np.float32), hi=np.array(2.0, np.float32))
        clip = helper.make_node("Clip", ["l", "lo", "hi"], ["y"], name="clip")
    else:
        clip = helper.make_node("Clip", ["l"], ["y"], name="clip", min=-1.5, max=2.0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.2),
        clip,
    ]
    net = _check(_model(nodes, [1, 3, 4, 4], None, inits, opset=opset), (1, 3, 4, 4))
    # The conv takes the LeakyRelu; the Clip that follows becomes its own layer.
    assert net["conv"].activation == Activation("leaky", alpha=0.2)
    assert net["clip"].op == "act" and net["clip"].activation == Activation("clip", lo=-1.5, hi=2.0)


def test_clip_min_zero_is_relu():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Clip", ["c", "lo"], ["y"], name="clip")]
    net = _check(_model(nodes, [1, 3, 4, 4], None, dict(w=_rand(4, 3, 1, 1), lo=np.array(0, np.float32))),
                 (1, 3, 4, 4))
    assert net["conv"].activation == Activation("relu")


def test_activation_not_fused_when_producer_has_other_consumers():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["c", "r"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu2"),
    ]
    net = _check(_model(nodes, [1, 3, 5, 5], None, dict(w=_rand(3, 3, 3, 3))), (1, 3, 5, 5))
    assert net["conv"].activation is None
    assert net["relu"].op == "act" and net["relu"].inputs == ["conv"]
    assert net["add"].inputs == ["conv", "relu"] and net["add"].activation == Activation("relu")
    assert net["add"].origin == ["add", "relu2"]


def test_batchnorm_that_cannot_be_folded_is_a_depthwise_conv():
    """A BatchNormalization after an activation, or after a Concat (DenseNet's pre-activation
    BN -> ReLU), becomes a 1x1 depthwise conv (the ReLU after it fuses into it)."""
    rng = np.random.default_rng(7)
    s, b, m = (rng.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(3))
    v = rng.uniform(0.5, 2.0, 8).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Concat", ["r", "x2"], ["cat"], axis=1, name="cat"),
        helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["bn"], name="bn_after_concat"),
        helper.make_node("Relu", ["bn"], ["y"], name="relu2"),
    ]
    inits = dict(w=_rand(4, 3, 1, 1), s=s, b=b, m=m, v=v)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w4"], ["x2"], name="conv2")] + nodes, "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        initializer=[numpy_helper.from_array(a, k) for k, a in (inits | {"w4": _rand(4, 3, 1, 1)}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    net = _check(model, (1, 3, 4, 4))
    bn = net["bn_after_concat"]
    assert bn.op == "conv" and bn.attrs["groups"] == 8 and bn.weight.shape == (8, 1, 1, 1)
    assert bn.inputs == ["cat"] and bn.activation == Activation("relu") and bn.origin == ["bn_after_concat", "relu2"]


# -- fully connected ------------------------------------------------------------------------------


@pytest.mark.parametrize("trans_b", [0, 1])
def test_flatten_gemm_with_alpha_beta(trans_b):
    w = _rand(5, 2 * 3 * 3)
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w", "c"], ["g"], name="fc", transB=trans_b, alpha=0.5, beta=2.0),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    model = _model(nodes, [1, 2, 3, 3], None, dict(w=w if trans_b else w.T.copy(), c=_rand(1, 5)))
    net = _check(model, (1, 2, 3, 3))
    fc = net["fc"]
    assert [l.op for l in net] == ["input", "fc"]
    assert fc.weight.shape == (5, 18) and fc.shape == Shape(5, 1, 1)
    assert fc.origin == ["fc", "flat", "relu"] and fc.activation == Activation("relu")
    np.testing.assert_allclose(fc.weight, 0.5 * w, rtol=1e-6)


def test_reshape_matmul_add_becomes_fc_with_bias():
    w, bias = _rand(12, 6), _rand(6)
    nodes = [
        helper.make_node("Conv", ["x", "k"], ["c"], name="conv"),
        helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "bias"], ["y"], name="bias_add"),
    ]
    inits = dict(k=_rand(3, 2, 1, 1), shape=np.array([1, -1], np.int64), w=w, bias=bias)
    net = _check(_model(nodes, [1, 2, 2, 2], None, inits), (1, 2, 2, 2))
    assert [l.op for l in net] == ["input", "conv", "fc"]
    fc = net["matmul"]
    assert fc.origin == ["matmul", "reshape", "bias_add"] and fc.tensor == "y"
    np.testing.assert_allclose(fc.bias, bias)
    np.testing.assert_allclose(fc.weight, w.T)


def test_fixed_batch_reshape_gemm_batchnorm_folds_into_fc():
    w, bn = _rand(4, 12), dict(s=_rand(4) + 2, b=_rand(4), m=_rand(4), v=np.abs(_rand(4)) + 0.5)
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Gemm", ["r", "w"], ["g"], name="fc", transB=1),
        helper.make_node("BatchNormalization", ["g", "s", "b", "m", "v"], ["y"], name="bn"),
    ]
    model = _model(nodes, [3, 3, 2, 2], None, dict(shape=np.array([3, 12], np.int64), w=w, **bn))
    net = _check(model, (3, 3, 2, 2))
    assert [l.op for l in net] == ["input", "fc"] and net.meta["batch"] == 3
    assert net["fc"].origin == ["fc", "reshape", "bn"]


def test_softmax_over_channels_of_every_pixel():
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)]
    net = _check(_model(nodes, [1, 5, 3, 2], None, opset=13), (1, 5, 3, 2))
    assert net["sm"].op == "softmax" and net["sm"].shape == Shape(5, 3, 2)
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm_old", axis=1)]
    with pytest.raises(ModelError, match="Softmax 'sm_old': only a softmax over the channel axis"):
        load_onnx(_model(nodes, [1, 5, 3, 2], None, opset=11))


def test_flattened_map_feeding_a_conv_like_op_is_an_error():
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flat"),
             helper.make_node("Concat", ["f", "f"], ["y"], name="cat", axis=1)]
    with pytest.raises(ModelError, match="channel axis"):
        load_onnx(_model(nodes, [1, 2, 3, 3], None))


# -- pooling --------------------------------------------------------------------------------------


def test_maxpool_pads_and_ceil_mode():
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 0, 0, 1], ceil_mode=1)]
    net = _check(_model(nodes, [1, 2, 8, 8], None), (1, 2, 8, 8))
    pool = net["pool"]
    # ceil((8 + 1 - 3) / 2) + 1 = 4 rows; ceil((8 + 1 - 3) / 2) + 1 = 4 columns.
    assert pool.shape == Shape(2, 4, 4)
    assert pool.attrs["kernel"] == (3, 3) and pool.attrs["stride"] == (2, 2)


@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_count_include_pad(include):
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], name="avg", kernel_shape=[3, 3], strides=[1, 1],
                              pads=[1, 1, 1, 1], count_include_pad=include)]
    net = _check(_model(nodes, [1, 3, 5, 5], None), (1, 3, 5, 5))
    assert net["avg"].attrs["count_include_pad"] is bool(include)
    assert net["avg"].shape == Shape(3, 5, 5)


def test_global_average_pool_flatten_gemm_softmax():
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w"], ["l"], name="fc", transB=1),
        helper.make_node("Softmax", ["l"], ["y"], name="prob", axis=1),
    ]
    net = _check(_model(nodes, [1, 6, 4, 4], None, dict(w=_rand(3, 6))), (1, 6, 4, 4))
    assert [l.op for l in net] == ["input", "global_avgpool", "fc", "softmax"]
    assert net["gap"].shape == Shape(6, 1, 1) and net["prob"].shape == Shape(3, 1, 1)


# -- add, concat, lrn, upsampling, pass-through ---------------------------------------------------


def test_concat_channels_and_lrn():
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1"),
        helper.make_node("Conv", ["x", "w2"], ["b"], name="c2"),
        helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
        helper.make_node("LRN", ["cat"], ["y"], name="lrn", size=3, alpha=1e-2, beta=0.75, bias=2.0),
    ]
    net = _check(_model(nodes, [1, 3, 4, 4], None, dict(w1=_rand(2, 3, 1, 1), w2=_rand(3, 3, 1, 1))), (1, 3, 4, 4))
    assert net["cat"].shape == Shape(5, 4, 4) and net["cat"].inputs == ["c1", "c2"]
    assert net["lrn"].attrs == {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 2.0}


def test_concat_on_another_axis_is_an_error():
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], name="cat_h", axis=2)]
    with pytest.raises(ModelError, match="Concat 'cat_h': only concatenation along the channel axis"):
        load_onnx(_model(nodes, [1, 3, 4, 4], None))


@pytest.mark.parametrize("ctm,nearest", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor")])
def test_resize_nearest_integer_scale(ctm, nearest):
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="nearest",
                              coordinate_transformation_mode=ctm, nearest_mode=nearest)]
    model = _model(nodes, [1, 2, 3, 4], None, dict(scales=np.array([1, 1, 2, 2], np.float32)), opset=13)
    net = _check(model, (1, 2, 3, 4))
    assert net["up"].op == "upsample" and net["up"].attrs == {"scale": 2} and net["up"].shape == Shape(2, 6, 8)


def test_resize_by_sizes_and_upsample_opset9():
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="up", mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    net = _check(_model(nodes, [1, 2, 3, 3], None, dict(sizes=np.array([1, 2, 9, 9], np.int64)), opset=13),
                 (1, 2, 3, 3))
    assert net["up"].attrs == {"scale": 3}
    nodes = [helper.make_node("Upsample", ["x", "scales"], ["y"], name="up9", mode="nearest")]
    net = _check(_model(nodes, [1, 2, 3, 3], None, dict(scales=np.array([1, 1, 2, 2], np.float32)), opset=9),
                 (1, 2, 3, 3))
    assert net["up9"].attrs == {"scale": 2} and net["up9"].shape == Shape(2, 6, 6)


def test_resize_linear_or_fractional_is_an_error():
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="lin", mode="linear")]
    with pytest.raises(ModelError, match="Resize 'lin': mode 'linear' is not supported"):
        load_onnx(_model(nodes, [1, 2, 3, 3], None, dict(scales=np.array([1, 1, 2, 2], np.float32)), opset=13))
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="frac", mode="nearest")]
    with pytest.raises(ModelError, match="same integer factor"):
        load_onnx(_model(nodes, [1, 2, 4, 4], None, dict(scales=np.array([1, 1, 1.5, 1.5], np.float32)), opset=13))


def test_dropout_and_identity_are_removed():
    nodes = [
        helper.make_node("Identity", ["x"], ["i"], name="id"),
        helper.make_node("Conv", ["i", "w"], ["c"], name="conv"),
        helper.make_node("Dropout", ["c"], ["d"], name="drop"),
        helper.make_node("Relu", ["d"], ["y"], name="relu"),
    ]
    net = _check(_model(nodes, [1, 3, 4, 4], None, dict(w=_rand(2, 3, 1, 1))), (1, 3, 4, 4))
    assert [l.op for l in net] == ["input", "conv"]
    assert net["conv"].activation == Activation("relu") and net.outputs == ["conv"]


def test_names_fall_back_to_output_names_and_stay_unique():
    nodes = [helper.make_node("Relu", ["x"], ["x_relu"]), helper.make_node("Relu", ["x_relu"], ["y"], name="x")]
    net = load_onnx(_model(nodes, [1, 3, 2, 2], None))
    assert [l.name for l in net] == ["x", "x_relu", "x_2"]
    assert net["x_2"].origin == ["x"] and net["x_2"].tensor == "y"


# -- errors ---------------------------------------------------------------------------------------


def test_every_unsupported_node_is_listed_in_one_error():
    nodes = [
        helper.make_node("Sin", ["x"], ["s"], name="sin"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Sub", ["r", "r"], ["t"], name="tr1"),
        helper.make_node("Sin", ["t"], ["y"]),
    ]
    with pytest.raises(UnsupportedOperatorError) as info:
        load_onnx(_model(nodes, [1, 3, 2, 2], None))
    assert info.value.nodes == [("Sin", "sin"), ("Sub", "tr1"), ("Sin", "y")]
    assert ("3 unsupported node(s): Sin 'sin', Sub 'tr1' (needs an element-wise subtraction), "
            "Sin 'y'") in str(info.value)


def _small_model_bytes():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    return _model(nodes, [1, 3, 8, 8], None, dict(w=_rand(16, 3, 3, 3))).SerializeToString()


def test_truncated_and_garbage_files_name_the_file(tmp_path):
    data = _small_model_bytes()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"truncated\.onnx: not a (readable|valid) ONNX model"):
        load_network(truncated)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xfe not protobuf at all \x00\x01" * 10)
    with pytest.raises(ModelError, match=r"garbage\.onnx: not a (readable|valid) ONNX model"):
        load_network(garbage)


def test_cli_reports_a_truncated_model_without_traceback(tmp_path):
    data = _small_model_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:-7])
    proc = subprocess.run([sys.executable, "-m", "dlproc", "stats", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "cut.onnx" in proc.stderr and "ONNX model" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_symbolic_input_size_needs_and_takes_input_size():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    model = _model(nodes, [1, 3, "H", "W"], None, dict(w=_rand(4, 3, 3, 3)))
    with pytest.raises(ModelError, match="symbolic; give an input size"):
        load_onnx(model)
    net = load_onnx(model, input_size=(10, 12))
    assert net["conv"].shape == Shape(4, 10, 12)
    fixed = _model(nodes, [1, 3, 8, 8], None, dict(w=_rand(4, 3, 3, 3)))
    with pytest.raises(ModelError, match="fixes the size 8x8"):
        load_onnx(fixed, input_size=(10, 12))


def test_load_network_dispatch_errors(tmp_path):
    other = tmp_path / "net.pb"
    other.write_bytes(b"x")
    with pytest.raises(ModelError, match=r"net\.pb: unknown network file type '\.pb'; use \.onnx or a Darknet \.cfg"):
        load_network(other)
    model = tmp_path / "m.onnx"
    model.write_bytes(_small_model_bytes())
    with pytest.raises(ModelError, match="a weights file only applies to Darknet"):
        load_network(model, weights=tmp_path / "m.weights")
    net = load_network(model)
    assert net.source_format == "onnx" and net.source_path == str(model) and net.name == "test"


@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn",
                                 "pytorch_half_pixel"])
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("scale", [2, 3])
def test_resize_is_accepted_exactly_when_onnxruntime_replicates_pixels(ctm, nearest, scale):
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="nearest",
                              coordinate_transformation_mode=ctm, nearest_mode=nearest)]
    model = _model(nodes, [1, 1, 3, 4], None, dict(scales=np.array([1, 1, scale, scale], np.float32)), opset=13)
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    replicated = np.array_equal(_ort(model, x)[0], x.repeat(scale, axis=2).repeat(scale, axis=3))
    if replicated:
        assert load_onnx(model)["up"].attrs == {"scale": scale}
    else:
        with pytest.raises(ModelError, match="does not replicate pixels"):
            load_onnx(model)


def test_supported_ops_lists_every_handler():
    import onnx as onnx_lib
    from dlproc.frontends import onnx as onnx_frontend
    x = onnx_lib.helper.make_tensor_value_info("x", onnx_lib.TensorProto.FLOAT, [1, 1, 2, 2])
    model = onnx_lib.helper.make_model(onnx_lib.helper.make_graph([], "empty", [x], [x]))
    importer = onnx_frontend._Importer(model, "empty.onnx", None, None)
    assert set(importer.handlers) == set(onnx_frontend.SUPPORTED_OPS)
