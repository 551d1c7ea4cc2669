"""The activation table end to end without RTL: torch-style ONNX activations import as table
``act`` layers, every table equals the float function rounded over all 256 codes, the compiler
fuses the table into the conv/add/FC in front (or runs it standalone), and the ISA-level simulator
equals the golden model on every tensor the host reads. Bad input: no table in the configuration,
a Mul that is not SiLU."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.compiler import compile_network
from dlproc.errors import CompileError, QuantizationError, UnsupportedOperatorError
from dlproc.frontends.onnx import load_onnx
from dlproc.hardware import isa
from dlproc.ir import TABLE_KINDS, Activation
from dlproc.targets.golden import ops
from dlproc.targets.golden.run import run_float, run_int8
from dlproc.targets.workflow import Workflow

from act_table_models import activations_model, isasim_matches_golden, quantize, quantized_activations
from layerprog_cases import small_config


def table_config(on: bool = True):
    cfg = small_config(4, inp=(16, 16, 16), out=(16, 16, 4), wgt=16384)
    cfg.set_module_property("conv", "ActivationTableGeneration", on)
    return cfg


# Scalar float references written independently of dlproc.ir (math module, one value at a time).
def _sig(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


def _softplus(v: float) -> float:
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


REFERENCE = {
    "sigmoid": (Activation("sigmoid"), _sig),
    "tanh": (Activation("tanh"), math.tanh),
    "silu": (Activation("silu"), lambda v: v * _sig(v)),
    "hardswish": (Activation("hardswish"), lambda v: v * min(max(v + 3.0, 0.0), 6.0) / 6.0),
    # ONNX HardSigmoid is alpha * x + beta (torch exports alpha = 1/6): the same float operations.
    "hardsigmoid": (Activation("hardsigmoid", alpha=1 / 6, beta=0.5), lambda v: min(max((1 / 6) * v + 0.5, 0.0), 1.0)),
    "gelu": (Activation("gelu"), lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))),
    "gelu_tanh": (Activation("gelu_tanh"),
                  lambda v: 0.5 * v * (1.0 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))),
    "mish": (Activation("mish"), lambda v: v * math.tanh(_softplus(v))),
    "elu": (Activation("elu", alpha=0.7), lambda v: v if v > 0 else 0.7 * math.expm1(v)),
    "selu": (Activation("selu", alpha=1.6732632, beta=1.0507010),
             lambda v: 1.0507010 * (v if v > 0 else 1.6732632 * math.expm1(v))),
    "celu": (Activation("celu", alpha=0.5), lambda v: max(v, 0.0) + min(0.0, 0.5 * math.expm1(v / 0.5))),
    "softplus": (Activation("softplus"), _softplus),
    "softsign": (Activation("softsign"), lambda v: v / (1.0 + abs(v))),
}


def test_every_table_kind_has_a_reference():
    assert set(REFERENCE) == set(TABLE_KINDS)


@pytest.mark.parametrize("kind", sorted(REFERENCE))
@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out", [(0.05, 3, 0.02, -20), (0.11, -128, 0.05, 0),
                                                        (0.02, 40, 0.008, -128)])
def test_table_is_the_float_function_rounded_over_all_256_codes(kind, s_in, zp_in, s_out, zp_out):
    act, f = REFERENCE[kind]
    table = ops.activation_table(act, s_in, zp_in, s_out, zp_out)
    want = [min(max(round_half_even(f((q - zp_in) * s_in) / s_out) + zp_out, -128), 127) for q in range(-128, 128)]
    np.testing.assert_array_equal(table, np.array(want, dtype=np.int8))
    # The lookup on codes: entry q + 128.
    codes = np.arange(-128, 128, dtype=np.int8)
    np.testing.assert_array_equal(ops.table_lookup(codes, table), table)


def round_half_even(v: float) -> int:
    return int(np.rint(v))


def test_a_function_that_is_not_elementwise_has_no_table():
    from dlproc.errors import ModelError

    with pytest.raises(ModelError, match="activation kind 'softmax' is not one of relu, leaky, clip, sigmoid"):
        Activation("softmax")


def test_a_table_for_the_clamp_activations_is_refused():
    for act in (Activation("relu"), Activation("clip", lo=0, hi=6), None):
        with pytest.raises(QuantizationError, match="not a table activation"):
            ops.activation_table(act, 0.1, 0, 0.1, 0)


def test_import_matches_onnxruntime_in_float():
    model = activations_model()
    net = load_onnx(model)
    kinds = {layer.name: layer.activation.kind for layer in net if layer.op == "act"}
    assert kinds == {"sig1": "silu", "hswish": "hardswish", "sig3": "sigmoid", "tanh": "tanh",
                     "softplus": "softplus", "hsig": "hardsigmoid", "sig_fc": "sigmoid"}
    x = np.random.default_rng(5).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(2)])
    ours = run_float(net, x)[net.outputs[0]].reshape(2, -1)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_fusion_and_standalone_tables_match_golden_on_the_isa_simulator():
    cfg = table_config()
    _, qnet, x = quantized_activations(cfg)
    cn = compile_network(qnet, cfg)
    insns = isa.decode_program(cn.instructions)
    # One table load per table activation, 7 of them: 256 / C = 64 PRM words each, in PRM-fulls of
    # 16 words (ParameterMemorySize 32 channels, both halves), so 4 ACTTABs per table.
    tabs = [i for i in insns if isinstance(i, isa.ActTab)]
    assert sum(i.tab_base == 0 for i in tabs) == 7 and len(tabs) == 28
    assert sorted({i.tab_base for i in tabs}) == [0, 64, 128, 192]
    tabled = [i for i in insns if isinstance(i, (isa.Conv, isa.Add, isa.Fc)) and i.act_table]
    assert {type(i) for i in tabled} == {isa.Conv, isa.Add, isa.Fc}
    ref = run_int8(qnet, qnet.quantize_input(x[:3]), collect=True)
    wf = Workflow(cn, cfg, target="golden")
    try:
        y = wf.predict(x[:3], display=False)
    finally:
        wf.close()
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)
    # The int8 network is close to the float one (the tables are exact; the error is quantization).
    f = run_float(load_onnx(activations_model()), x[:3])["sig_fc"].reshape(3, -1)
    sqnr = 10 * np.log10(np.sum(f ** 2) / np.sum((np.asarray(y).reshape(3, -1) - f) ** 2))
    assert sqnr > 20, sqnr


def test_fused_producers_write_the_act_tensor_and_standalone_ones_are_identity_convs():
    from dlproc.compiler.lower import lower
    from dlproc.compiler.partition import partition
    from dlproc.hardware.geometry import Geometry

    cfg = table_config()
    _, qnet, _ = quantized_activations(cfg)
    hw = {a.name for a in partition(qnet, cfg) if a.hw}
    # Every layer runs on the processor; the host reads the network output only.
    assert hw == {layer.name for layer in qnet.layers if layer.op != "input"}
    low = lower(qnet, hw, Geometry.from_config(cfg), set(qnet.outputs))
    by_layer = {op.layer: op for op in low.ops}
    for producer, act in (("conv1", "sig1"), ("conv2", "hswish"), ("conv3", "sig3"), ("add", "hsig"),
                          ("fc", "sig_fc")):
        assert by_layer[producer].dst == act and by_layer[producer].spec.act_table is not None
        assert "through the activation table" in by_layer[producer].note
        assert act not in by_layer and producer not in low.tensors
    for act in ("tanh", "softplus"):  # after a concat / on a tensor with two readers
        spec = by_layer[act].spec
        assert spec.act_table is not None and spec.groups == spec.weight.shape[0] and spec.zp_in == 0
    assert by_layer["conv4"].spec.act_table is None


def test_without_the_table_the_compiler_names_the_property():
    cfg = table_config(on=False)
    _, qnet, _ = quantized_activations(cfg)
    with pytest.raises(CompileError, match="ActivationTableGeneration"):
        compile_network(qnet, cfg)


def test_sigmoid_block_generation_generates_the_table():
    cfg = table_config(on=False)
    cfg.set_module_property("fc", "SigmoidBlockGeneration", True)
    assert isa.HardwareParams.from_config(cfg).act_table
    _, qnet, _ = quantized_activations(cfg)
    compile_network(qnet, cfg)


def test_an_operator_the_processor_cannot_express_is_listed_with_what_it_needs():
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="c"),
             helper.make_node("Div", ["a", "a"], ["t"], name="div"),
             helper.make_node("LayerNormalization", ["t", "w"], ["y"], name="ln")]
    graph = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOperatorError) as info:
        load_onnx(model)
    text = str(info.value)
    assert "2 unsupported node(s)" in text and "Div 'div' (needs an element-wise division)" in text
    assert "LayerNormalization 'ln' (needs a normalization over the channels" in text


DARKNET_CFG = """[net]
height=8
width=8
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=mish

[convolutional]
filters=8
size=1
stride=1
activation=swish

[shortcut]
from=-2
activation=linear

[convolutional]
filters=4
size=1
stride=1
activation=logistic
"""


def test_darknet_table_activations_import_fuse_and_match_golden(tmp_path):
    from dlproc.frontends.darknet import load_darknet

    path = tmp_path / "mish.cfg"
    path.write_text(DARKNET_CFG)
    net = load_darknet(path)
    acts = [(layer.inputs[0], layer.activation.kind) for layer in net if layer.op == "act"]
    assert [k for _, k in acts] == ["mish", "silu", "sigmoid"]
    assert all(net[src].activation is None for src, _ in acts)
    cfg = table_config()
    x = np.random.default_rng(8).uniform(0, 1, (8, 3, 8, 8)).astype(np.float32)
    isasim_matches_golden(quantize(net, cfg, x), cfg, x)


# -- element-wise multiply (adder.Multiplication): squeeze-and-excitation ---------------------------
def test_se_block_imports_and_matches_onnxruntime_in_float():
    from act_table_models import se_model

    model = se_model()
    net = load_onnx(model)
    mul = net["se_mul"]
    assert mul.op == "mul" and mul.inputs == ["sig1", "se_gate"]  # the per-channel vector second
    assert net["se_gate"].shape.as_tuple() == (8, 1, 1)
    assert net["se_sig_r"].activation.kind == "silu"  # Mul(Sigmoid(r), r): either operand order
    x = np.random.default_rng(6).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(run_float(net, x)["project"], sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("hw", [8, 20])  # 20x20 = 400 pixels: chunks inside one channel block
def test_se_block_multiply_matches_golden_on_the_isa_simulator(hw):
    from act_table_models import quantized_se

    cfg = table_config()
    _, qnet, x = quantized_se(cfg, hw=hw)
    cn = compile_network(qnet, cfg)
    muls = [i for i in isa.decode_program(cn.instructions) if isinstance(i, isa.Add) and i.mul]
    assert muls and all(i.b_repeat > 0 for i in muls)
    isasim_matches_golden(qnet, cfg, x, cn)


def test_multiply_needs_adder_multiplication():
    from act_table_models import quantized_se

    cfg = table_config()
    cfg.set_module_property("adder", "Multiplication", False)
    assert not isa.HardwareParams.from_config(cfg).multiply
    _, qnet, _ = quantized_se(cfg)
    with pytest.raises(CompileError, match="adder.Multiplication"):
        compile_network(qnet, cfg)


def test_a_mul_that_does_not_broadcast_per_channel_is_refused_by_name():
    from dlproc.errors import ModelError

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 3, 2, 2)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="c"),
             helper.make_node("Conv", ["x", "w2"], ["b"], name="d"),  # 3x3 output, a is 4x4
             helper.make_node("Mul", ["a", "b"], ["y"], name="bad_mul")]
    graph = helper.make_graph(nodes, "mul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
                              initializer=[w, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"Mul 'bad_mul'.*per-channel vector"):
        load_onnx(model)
