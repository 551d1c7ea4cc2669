"""The float reference ops against ONNX Runtime, one single-node ONNX model per case."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from dlproc.targets.golden import float_ops as F
from dlproc.ir import Activation

OPSET = 13


def run_onnx(op: str, inputs: dict[str, np.ndarray], out_shape_rank: int = 4, initializers=(), **attrs):
    """Build a one-node ONNX model computing ``op`` on ``inputs`` and run it in ONNX Runtime."""
    in_infos = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inputs.items()]
    names = list(inputs) + [init.name for init in initializers]
    node = helper.make_node(op, names, ["y"], **attrs)
    out_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_shape_rank)
    graph = helper.make_graph([node], "g", in_infos, [out_info], initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def onnx_pads(pads):
    top, left, bottom, right = pads
    return [top, left, bottom, right]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 2),
    cg=st.integers(1, 3),
    cog=st.integers(1, 3),
    groups=st.integers(1, 3),
    h=st.integers(3, 9),
    w=st.integers(3, 9),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dil=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    seed=st.integers(0, 2**31),
)
def test_conv2d_matches_onnxruntime(n, cg, cog, groups, h, w, k, stride, dil, pads, seed):
    rng = np.random.default_rng(seed)
    c, co = cg * groups, cog * groups
    if h + pads[0] + pads[2] < dil[0] * (k[0] - 1) + 1 or w + pads[1] + pads[3] < dil[1] * (k[1] - 1) + 1:
        return
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((co, cg, *k)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    ref = run_onnx(
        "Conv", {"x": x, "w": wt, "b": b}, kernel_shape=list(k), strides=list(stride),
        dilations=list(dil), pads=onnx_pads(pads), group=groups,
    )
    got = F.conv2d(x, wt, b, stride, pads, dil, groups)
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_fully_connected_matches_onnxruntime():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 20)).astype(np.float32)
    w = rng.standard_normal((7, 20)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    ref = run_onnx("Gemm", {"x": x, "w": w, "b": b}, out_shape_rank=2, transB=1)
    np.testing.assert_allclose(F.fully_connected(x, w, b), ref, rtol=1e-5, atol=1e-5)
    # A 4-D input is flattened in C, H, W order.
    x4 = rng.standard_normal((2, 5, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(
        F.fully_connected(x4, w[:, :20], b), F.fully_connected(x4.reshape(2, 20), w, b), rtol=0, atol=0
    )


@settings(max_examples=30, deadline=None)
@given(
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    h=st.integers(3, 8),
    w=st.integers(3, 8),
    include=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_pools_match_onnxruntime(k, stride, pads, h, w, include, seed):
    pads = tuple(min(p, kk - 1) for p, kk in zip(pads, (k[0], k[1], k[0], k[1])))  # ONNX: pad < kernel
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    attrs = dict(kernel_shape=list(k), strides=list(stride), pads=onnx_pads(pads))
    ref_max = run_onnx("MaxPool", {"x": x}, **attrs)
    np.testing.assert_array_equal(F.maxpool(x, k, stride, pads), ref_max)
    ref_avg = run_onnx("AveragePool", {"x": x}, count_include_pad=int(include), **attrs)
    np.testing.assert_allclose(F.avgpool(x, k, stride, pads, include), ref_avg, rtol=1e-5, atol=1e-6)


def test_global_avgpool_matches_onnxruntime():
    x = np.random.default_rng(2).standard_normal((2, 4, 7, 5)).astype(np.float32)
    np.testing.assert_allclose(F.global_avgpool(x), run_onnx("GlobalAveragePool", {"x": x}), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 3, 5, 7])
def test_lrn_matches_onnxruntime(size):
    x = (np.random.default_rng(size).standard_normal((2, 7, 3, 4)) * 3).astype(np.float32)
    attrs = dict(size=size, alpha=0.01, beta=0.75, bias=2.0)
    ref = run_onnx("LRN", {"x": x}, **attrs)
    np.testing.assert_allclose(F.lrn(x, **attrs), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_size_follows_the_onnx_window(size):
    """ONNX Runtime rejects even sizes; ONNX's definition still applies: [c - floor((s-1)/2), c + ceil((s-1)/2)]."""
    x = np.random.default_rng(9).standard_normal((1, 6, 2, 2)).astype(np.float32)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.stack([(x[:, max(0, c - lo) : c + hi + 1] ** 2).sum(axis=1) for c in range(6)], axis=1)
    ref = x / (1.5 + 0.02 / size * sq) ** 0.75
    np.testing.assert_allclose(F.lrn(x, size, 0.02, 0.75, 1.5), ref, rtol=1e-5)


def test_add_concat_softmax_upsample_match_onnxruntime():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    b = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(F.add(a, b), run_onnx("Add", {"a": a, "b": b}), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(F.concat([a, b]), run_onnx("Concat", {"a": a, "b": b}, axis=1))
    np.testing.assert_allclose(F.softmax(a), run_onnx("Softmax", {"x": a}, axis=1), rtol=1e-5, atol=1e-7)
    ref = run_onnx_resize(a, [1, 1, 2, 3])
    np.testing.assert_array_equal(F.upsample_nearest(a, (2, 3)), ref)


def run_onnx_resize(x: np.ndarray, scales: list[float]) -> np.ndarray:
    """ONNX Resize (nearest, integer scales) needs empty roi and a scales initializer."""
    roi = helper.make_tensor("roi", TensorProto.FLOAT, [0], [])
    sc = helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)
    return run_onnx("Resize", {"x": x}, initializers=[roi, sc], mode="nearest")


@pytest.mark.parametrize(
    "act, op, attrs",
    [
        (Activation("relu"), "Relu", {}),
        (Activation("leaky", alpha=0.1), "LeakyRelu", {"alpha": 0.1}),
    ],
)
def test_activation_matches_onnxruntime(act, op, attrs):
    x = np.random.default_rng(4).standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(F.activation(x, act), run_onnx(op, {"x": x}, **attrs), rtol=1e-6, atol=0)


def test_clip_activation_matches_onnxruntime():
    x = (np.random.default_rng(5).standard_normal((1, 3, 4, 4)) * 5).astype(np.float32)
    lo = helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0])
    hi = helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])
    ref = run_onnx("Clip", {"x": x}, initializers=[lo, hi])
    np.testing.assert_array_equal(F.activation(x, Activation("clip", lo=0.0, hi=6.0)), ref)


def test_bad_shapes_are_rejected():
    x = np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match="groups"):
        F.conv2d(x, np.zeros((3, 2, 3, 3), np.float32), None, groups=2)
    with pytest.raises(ValueError, match="does not fit"):
        F.maxpool(x, 7)
    with pytest.raises(ValueError, match="NCHW"):
        F.maxpool(x[0], 2)
