"""Darknet's [deconvolutional]: shape rule, .weights order and layout (c, n, size, size), batch norm
folded, checked against Darknet's own forward pass (gemm + col2im) written out in NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.errors import ModelError
from dlproc.frontends import load_darknet
from dlproc.targets.golden.run import run_float

CFG = """[net]
height=5
width=4
channels=3

[convolutional]
filters=4
size=3
stride=1
pad=1
activation=leaky

[deconvolutional]
batch_normalize={bn}
filters=5
size=4
stride=2
padding=1
activation=relu
"""


def darknet_deconv(x, w_file, stride, pad):
    """forward_deconvolutional_layer: col = W^T x (W is c x (n*size*size)), then col2im."""
    c, h, wd = x.shape
    _, n, k, _ = w_file.shape
    ho, wo = (h - 1) * stride + k - 2 * pad, (wd - 1) * stride + k - 2 * pad
    col = w_file.reshape(c, n * k * k).T @ x.reshape(c, h * wd)  # (n*k*k, h*w)
    out = np.zeros((n, ho, wo), np.float64)
    for idx in range(n * k * k):
        ch, ky, kx = idx // (k * k), (idx // k) % k, idx % k
        for iy in range(h):
            for ix in range(wd):
                oy, ox = iy * stride - pad + ky, ix * stride - pad + kx
                if 0 <= oy < ho and 0 <= ox < wo:
                    out[ch, oy, ox] += col[idx, iy * wd + ix]
    return out


@pytest.mark.parametrize("bn", [0, 1])
def test_deconvolutional_matches_darknets_forward(tmp_path, bn):
    rng = np.random.default_rng(bn)
    cfg = tmp_path / "deconv.cfg"
    cfg.write_text(CFG.format(bn=bn))
    conv = {"biases": rng.normal(0, 0.1, 4), "weights": rng.normal(0, 0.3, (4, 3, 3, 3))}
    dec = {"biases": rng.normal(0, 0.1, 5), "scales": rng.uniform(0.5, 1.5, 5), "mean": rng.normal(0, 0.1, 5),
           "variance": rng.uniform(0.5, 1.5, 5), "weights": rng.normal(0, 0.3, (4, 5, 4, 4))}
    order = ["biases"] + (["scales", "mean", "variance"] if bn else []) + ["weights"]
    blobs = [conv["biases"], conv["weights"]] + [dec[k] for k in order]
    header = np.array([0, 2, 0], "<i4").tobytes() + np.array([0], "<u8").tobytes()
    weights = tmp_path / "deconv.weights"
    weights.write_bytes(header + b"".join(np.asarray(b, "<f4").ravel().tobytes() for b in blobs))
    net = load_darknet(cfg, weights)
    layer = net["deconv_1"]
    assert layer.op == "convtranspose" and layer.shape.as_tuple() == (5, 10, 8)
    x = rng.uniform(-1, 1, (1, 3, 5, 4)).astype(np.float32)
    values = run_float(net, x, collect=True)
    a = values["conv_0"][0].astype(np.float64)
    ref = darknet_deconv(a, dec["weights"].astype(np.float32).astype(np.float64), 2, 1)
    if bn:
        ref = (ref - dec["mean"][:, None, None]) / (np.sqrt(dec["variance"][:, None, None]) + 1e-6)
        ref = ref * dec["scales"][:, None, None]
    ref = np.maximum(ref + dec["biases"][:, None, None], 0)
    np.testing.assert_allclose(values["deconv_1"][0], ref, rtol=1e-4, atol=1e-4)


def test_unknown_deconvolutional_key_is_refused(tmp_path):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(CFG.format(bn=0) + "groups=2\n")
    with pytest.raises(ModelError, match="groups"):
        load_darknet(cfg)
