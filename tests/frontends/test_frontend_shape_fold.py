"""Shape arithmetic as torch.onnx.export writes it (``x.view(x.size(0), -1)``: Shape, Gather,
Unsqueeze, Concat feeding a Reshape) is folded at import by ONNX Runtime's graph optimizer, so the
network imports, and its float golden model equals ONNX Runtime on the original file."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.errors import UnsupportedOperatorError
from dlproc.frontends.onnx import fold_shape_arithmetic, load_onnx
from dlproc.targets.golden.run import run_float


def view_flatten_model(batch: int | str = 1, hw: int | str = 8) -> onnx.ModelProto:
    """conv 3x3 (8 channels) -> relu -> maxpool 2 -> x.view(x.size(0), -1) -> Gemm to 5."""
    rng = np.random.default_rng(30)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b")
    fw = numpy_helper.from_array(rng.normal(0, 0.1, (5, 8 * 4 * 4)).astype(np.float32), "fw")
    fb = numpy_helper.from_array(rng.normal(0, 0.1, 5).astype(np.float32), "fb")
    consts = [numpy_helper.from_array(np.array(0, np.int64), "idx0"),
              numpy_helper.from_array(np.array([0], np.int64), "axes0"),
              numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Gather", ["s", "idx0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["p", "target"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "view_flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [batch, 3, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])],
                              initializer=[w, b, fw, fb, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("batch, hw, size", [(1, 8, None), ("N", 8, None), ("N", "H", (8, 8))])
def test_view_flatten_imports_and_matches_onnxruntime(batch, hw, size):
    model = view_flatten_model(batch, hw)
    net = load_onnx(model, input_size=size)
    assert [layer.op for layer in net.layers] == ["input", "conv", "maxpool", "fc"]
    x = np.random.default_rng(31).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    ours = run_float(net, x)[net.outputs[0]]
    np.testing.assert_allclose(ours.reshape(1, -1), _ort(model, x), rtol=1e-4, atol=1e-5)


def test_folding_removes_the_shape_nodes_and_leaves_other_models_alone():
    folded = fold_shape_arithmetic(view_flatten_model())
    assert not {"Shape", "Gather", "Unsqueeze", "Concat"} & {n.op_type for n in folded.graph.node}
    plain = view_flatten_model()
    del plain.graph.node[3:7]  # no Shape node: the model is returned as it is
    assert fold_shape_arithmetic(plain) is plain


def test_unfoldable_shape_arithmetic_still_names_the_nodes():
    """Symbolic height/width without an input size cannot be folded: the importer's one error
    about the input size (not a traceback from the optimizer)."""
    from dlproc.errors import ModelError

    with pytest.raises((ModelError, UnsupportedOperatorError)) as info:
        load_onnx(view_flatten_model("N", "H"))
    assert "input size" in str(info.value) or "Shape" in str(info.value)
