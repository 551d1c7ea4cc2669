"""A BatchNormalization that cannot be folded (DenseNet's pre-activation: Concat -> BN -> ReLU ->
conv) runs as a 1x1 depthwise conv: imported, compiled (also over a concat with padding channels,
5 + 6 channels at C = 4) and bit-exact on the ISA-level simulator against the golden model."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.compiler import compile_network
from dlproc.frontends.onnx import load_onnx
from dlproc.quant import Quantizer
from dlproc.targets.golden.run import run_int8
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config


def densenet_block(c1: int, c2: int, seed: int = 9):
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


@pytest.mark.parametrize("c1, c2", [(8, 4), (5, 6)])  # (5, 6): the concat has padding channels at C = 4
def test_unfoldable_batchnorm_runs_as_a_depthwise_conv(c1, c2):
    net = load_onnx(densenet_block(c1, c2))
    norm = net["norm"]
    assert norm.op == "conv" and norm.attrs["groups"] == c1 + c2 and norm.activation.kind == "relu"
    cfg = small_config(4, inp=(16, 16, 16), out=(16, 16, 4), wgt=16384)
    x = np.random.default_rng(10).uniform(-1, 1, (8, 3, 8, 8)).astype(np.float32)
    q = Quantizer(net, config=cfg)
    q.calibrate(x)
    qnet = q.quantize()
    cn = compile_network(qnet, cfg)
    ref = run_int8(qnet, qnet.quantize_input(x[:2]), collect=True)
    wf = Workflow(cn, cfg, target="golden")
    try:
        wf.predict(x[:2], display=False)
    finally:
        wf.close()
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)
