"""Quantizer robustness (issue 23, item 5): a channel whose weights are tiny next to its bias (the
last Gemm of torchvision's GoogLeNet hit this) gets a raised weight scale and a note instead of
"quantized bias exceeds int32", and the network still runs bit-exact on the ISA simulator."""

from __future__ import annotations

import numpy as np

from dlproc.quant import Quantizer
from dlproc.regress.generator import NetworkBuilder
from dlproc.targets.golden import ops
from dlproc.targets.golden.run import run_float, run_int8
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config


def _dead_channel_net():
    rng = np.random.default_rng(5)
    b = NetworkBuilder("dead_channel", (3, 6, 6))
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    w[2] = 1e-7 * np.sign(rng.standard_normal((3, 3, 3)))  # a dead channel: weights ~1e-7, bias 0.5
    bias = np.array([0.1, -0.2, 0.5, 0.0], np.float32)
    return b.build([b.conv("conv", "input", w, bias, pads=(1, 1, 1, 1))])


def test_a_bias_beyond_int32_raises_the_weight_scale_with_a_note(tmp_path):
    net = _dead_channel_net()
    q = Quantizer(net)
    x = np.random.default_rng(6).uniform(-1, 1, (8, 3, 6, 6)).astype(np.float32)
    q.calibrate(x)
    s_in = q.quantize()["input"].scale
    # Without the raise, the dead channel's bias would not fit int32 (the former error).
    _, s_w = ops.quantize_weights(net["conv"].params["weight"])
    assert abs(0.5 / (s_in * float(s_w[2]))) > 2 ** 31
    qnet = q.quantize()
    notes = qnet.meta["notes"]
    assert len(notes) == 1 and "layer 'conv'" in notes[0] and "([2])" in notes[0], notes
    conv = qnet["conv"]
    assert abs(int(conv.params["bias"][2])) <= ops.BIAS_LIMIT
    # The dead channel's output is its bias, to within one output step, like the float network.
    ref = run_float(net, x)["conv"]
    got = qnet.dequantize("conv", run_int8(qnet, qnet.quantize_input(x))["conv"])
    assert np.max(np.abs(got[:, 2] - ref[:, 2])) <= conv.scale * 1.01
    # The notes are kept in the .dlq, and the compiled program equals the golden model.
    path = qnet.save(tmp_path / "dead.dlq")
    from dlproc.quant import QuantizedNetwork

    assert QuantizedNetwork.load(path).meta["notes"] == notes
    wf = Workflow(qnet, small_config(4), target="golden")
    wf.predict(x[:2], display=False)
    np.testing.assert_array_equal(wf.last_hw_values["conv"], run_int8(qnet, qnet.quantize_input(x[:2]))["conv"])


def test_the_cli_prints_the_note(tmp_path, capsys):
    from dlproc.cli import main

    net_path = tmp_path / "dead.onnx"
    _save_onnx(_dead_channel_net(), net_path)
    np.save(tmp_path / "calib.npy", np.random.default_rng(6).uniform(-1, 1, (8, 3, 6, 6)).astype(np.float32))
    assert main(["quantize", str(net_path), "--calibration", str(tmp_path / "calib.npy"), "-o",
                 str(tmp_path / "q.dlq")]) == 0
    out = capsys.readouterr().out
    assert "note: layer 'conv': the weight scale of 1 output channel(s)" in out


def _save_onnx(net, path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv = net["conv"]
    a = conv.attrs
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=list(a["kernel"]),
                            pads=list(a["pads"]))
    graph = helper.make_graph([node], "dead", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [numpy_helper.from_array(conv.params["weight"], "w"),
                               numpy_helper.from_array(conv.params["bias"], "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
