"""Transposed convolution in the golden model: the float op against ONNX Runtime, the int8 op against
a direct loop over the definition and against the float op within quantization error."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.targets.golden import float_ops as F
from dlproc.targets.golden import ops
from dlproc.ir import Activation


def onnx_weight(w_ir: np.ndarray, groups: int) -> np.ndarray:
    """IR (Co, Ci/g, kh, kw) -> ONNX ConvTranspose (Ci, Co/g, kh, kw)."""
    co, cig, kh, kw = w_ir.shape
    cog = co // groups
    return np.ascontiguousarray(
        w_ir.reshape(groups, cog, cig, kh, kw).transpose(0, 2, 1, 3, 4).reshape(groups * cig, cog, kh, kw))


def run_ort(x, w_onnx, b, **attrs):
    inits = [numpy_helper.from_array(w_onnx, "w"), numpy_helper.from_array(b, "b")]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def random_case(rng):
    """(n, ci, co, groups, h, w, k, stride, dil, pads, output_padding) with a non-empty output."""
    while True:
        g = int(rng.choice([1, 1, 2, 3]))
        cig, cog = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        d = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        p = tuple(int(rng.integers(0, 3)) for _ in range(4))
        # ONNX Runtime requires output_padding < stride.
        op = tuple(int(rng.integers(0, si)) for si in s)
        ho = (h - 1) * s[0] + (k[0] - 1) * d[0] + 1 - p[0] - p[2] + op[0]
        wo = (w - 1) * s[1] + (k[1] - 1) * d[1] + 1 - p[1] - p[3] + op[1]
        if ho >= 1 and wo >= 1:
            return int(rng.integers(1, 3)), g * cig, g * cog, g, h, w, k, s, d, p, op


def direct_acc(x, w, bias, s, p, op, d, g, zp):
    """The definition, one product at a time: y[o] += (x[i] - zp) * w[t] where o = i*s - pad + t*d."""
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    ho = (h - 1) * s[0] + (kh - 1) * d[0] + 1 - p[0] - p[2] + op[0]
    wo = (wd - 1) * s[1] + (kw - 1) * d[1] + 1 - p[1] - p[3] + op[1]
    cog = co // g
    acc = np.zeros((n, co, ho, wo), dtype=np.int64) + np.asarray(bias, np.int64).reshape(1, co, 1, 1)
    xc = x.astype(np.int64) - zp
    for o in range(co):
        grp = o // cog
        for i in range(cig):
            for ty in range(kh):
                for tx in range(kw):
                    for iy in range(h):
                        oy = iy * s[0] - p[0] + ty * d[0]
                        if not 0 <= oy < ho:
                            continue
                        for ix in range(wd):
                            ox = ix * s[1] - p[1] + tx * d[1]
                            if 0 <= ox < wo:
                                acc[:, o, oy, ox] += xc[:, grp * cig + i, iy, ix] * int(w[o, i, ty, tx])
    return acc


@pytest.mark.parametrize("seed", range(40))
def test_float_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    n, ci, co, g, h, w, k, s, d, p, op = random_case(rng)
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    wt = rng.standard_normal((co, ci // g, *k)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    ref = run_ort(x, onnx_weight(wt, g), b, strides=list(s), pads=list(p), dilations=list(d),
                  output_padding=list(op), group=g, kernel_shape=list(k))
    got = F.conv_transpose2d(x, wt, b, s, p, op, d, g)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_float_fused_activation_and_bad_arguments():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    wt = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    out = F.conv_transpose2d(x, wt, None, 2, 1, 1, act=Activation("relu"))
    np.testing.assert_array_equal(out, np.maximum(F.conv_transpose2d(x, wt, None, 2, 1, 1), 0))
    assert out.shape == (1, 4, 6, 6)
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose2d(x, wt, None, 2, 1, -1)
    with pytest.raises(ValueError, match="leave no output"):
        F.conv_transpose2d(x, wt, None, 1, 4)


@pytest.mark.parametrize("seed", range(25))
def test_int8_matches_direct_definition(seed):
    rng = np.random.default_rng(100 + seed)
    n, ci, co, g, h, w, k, s, d, p, op = random_case(rng)
    x = rng.integers(-128, 128, (n, ci, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ci // g, *k), dtype=np.int8)
    bias = rng.integers(-5000, 5000, co).astype(np.int32)
    zp = int(rng.integers(-128, 128))
    got = ops.conv_transpose2d(x, wt, bias, s, p, op, d, g, zp)
    np.testing.assert_array_equal(got, direct_acc(x, wt, bias, s, p, op, d, g, zp))
    for dtype in (np.float64, np.int64):  # every matmul path gives the same integers
        np.testing.assert_array_equal(ops.conv_transpose2d(x, wt, bias, s, p, op, d, g, zp, matmul_dtype=dtype), got)


def test_int8_is_within_quantization_error_of_float():
    rng = np.random.default_rng(5)
    xf = rng.uniform(-1.0, 3.0, (2, 6, 7, 5)).astype(np.float32)
    wf = (rng.standard_normal((5, 6, 4, 4)) * 0.3).astype(np.float32)
    bf = rng.standard_normal(5).astype(np.float32) * 0.1
    s_in, zp_in = 4.0 / 255, -128 + round(1.0 / (4.0 / 255))
    xq = ops.quantize_tensor(xf, s_in, zp_in)
    wq, s_w = ops.quantize_weights(wf)
    bq = ops.quantize_bias(bf, s_in, s_w)
    ref = F.conv_transpose2d(xf, wf, bf, 2, 1, 0)
    s_out = float(np.abs(ref).max()) / 127
    rq = ops.requant_params(s_in, s_w, s_out, 0, None)
    acc = ops.conv_transpose2d(xq, wq, bq, 2, 1, 0, 1, 1, zp_in)
    q = ops.requantize(acc, rq.mult.reshape(1, -1, 1, 1), rq.shift.reshape(1, -1, 1, 1), 0, rq.act_min, rq.act_max,
                       rq.mult_neg.reshape(1, -1, 1, 1))
    err = np.abs(q.astype(np.float32) * s_out - ref)
    # Input (s_in/2 per tap), weight (s_w/2 per tap) and output (s_out/2) rounding, 4 taps per output.
    assert err.max() < 4 * 6 * (np.abs(wf).max() * s_in / 2 + 3.0 * s_w.max() / 2) + s_out
    assert err.mean() < 2 * s_out
