"""A float NumPy evaluator of the IR, used by the front-end tests as an independent reference.

It computes each IR layer from its attributes and parameters alone (one image, C,H,W), so a test
can compare an imported network against ONNX Runtime running the original model: any mistake in
folding, fusing, padding or weight layout shows up as a numeric difference.
"""

from __future__ import annotations

import numpy as np

from dlproc.ir import Layer, Network


def run_ir(net: Network, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for layer in net.layers:
        if layer.op == "input":
            values[layer.name] = np.asarray(inputs[layer.name], np.float64).reshape(layer.shape.as_tuple())
            continue
        args = [values[name] for name in layer.inputs]
        out = _OPS[layer.op](layer, *args)
        act = layer.attrs.get("activation")
        if act is not None:
            out = act.apply(out)
        assert out.shape == layer.shape.as_tuple(), (layer.name, out.shape, layer.shape)
        values[layer.name] = out
    return values


def _windows(x: np.ndarray, kernel, stride, dilation=(1, 1)):
    """Yield (ky, kx, strided view) for every kernel tap of an already padded map."""
    c, h, w = x.shape
    kh, kw = kernel
    sy, sx = stride
    dy, dx = dilation
    ho = (h - (kh - 1) * dy - 1) // sy + 1
    wo = (w - (kw - 1) * dx - 1) // sx + 1
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dy, kx * dx
            yield ky, kx, x[:, y0:y0 + (ho - 1) * sy + 1:sy, x0:x0 + (wo - 1) * sx + 1:sx]


def _pad(x, pads, value=0.0):
    top, left, bottom, right = pads
    return np.pad(x, ((0, 0), (top, bottom), (left, right)), constant_values=value)


def _conv(layer: Layer, x):
    w, b = layer.params["weight"].astype(np.float64), layer.params["bias"].astype(np.float64)
    groups = layer.attrs["groups"]
    xp = _pad(x, layer.attrs["pads"])
    cout, cin_g = w.shape[:2]
    cout_g = cout // groups
    out = None
    for ky, kx, view in _windows(xp, layer.attrs["kernel"], layer.attrs["stride"], layer.attrs["dilation"]):
        part = np.concatenate([
            np.einsum("oc,chw->ohw", w[g * cout_g:(g + 1) * cout_g, :, ky, kx], view[g * cin_g:(g + 1) * cin_g])
            for g in range(groups)
        ])
        out = part if out is None else out + part
    return out + b[:, None, None]


def _fc(layer: Layer, x):
    y = layer.params["weight"].astype(np.float64) @ x.reshape(-1) + layer.params["bias"]
    return y.reshape(-1, 1, 1)


def _maxpool(layer: Layer, x):
    xp = _pad(x, layer.attrs["pads"], -np.inf)
    return np.max([v for _, _, v in _windows(xp, layer.attrs["kernel"], layer.attrs["stride"])], axis=0)


def _avgpool(layer: Layer, x):
    xp = _pad(x, layer.attrs["pads"])
    ones = _pad(np.ones_like(x), layer.attrs["pads"])
    kernel, stride = layer.attrs["kernel"], layer.attrs["stride"]
    total = np.sum([v for _, _, v in _windows(xp, kernel, stride)], axis=0)
    if layer.attrs["count_include_pad"]:
        return total / (kernel[0] * kernel[1])
    count = np.sum([v for _, _, v in _windows(ones, kernel, stride)], axis=0)
    return total / count


def _lrn(layer: Layer, x):
    size, alpha, beta, bias = (layer.attrs[k] for k in ("size", "alpha", "beta", "bias"))
    c = x.shape[0]
    sq = np.zeros_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + (size - 1 + 1) // 2)
        sq[ch] = np.sum(x[lo:hi + 1] ** 2, axis=0)
    return x / (bias + alpha / size * sq) ** beta


def _softmax(layer: Layer, x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


_OPS = {
    "conv": _conv,
    "fc": _fc,
    "maxpool": _maxpool,
    "avgpool": _avgpool,
    "global_avgpool": lambda layer, x: x.mean(axis=(1, 2), keepdims=True),
    "act": lambda layer, x: x,
    "add": lambda layer, a, b: a + b,
    "concat": lambda layer, *xs: np.concatenate(xs, axis=0),
    "lrn": _lrn,
    "softmax": _softmax,
    "upsample": lambda layer, x: x.repeat(layer.attrs["scale"], axis=1).repeat(layer.attrs["scale"], axis=2),
    "yolo": lambda layer, x: x,
    "region": lambda layer, x: x,
}


# -- self-checks of the reference against naive loops -------------------------------------------


def test_reference_conv_matches_naive_loops():
    from dlproc.ir import Shape

    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    pads, stride, dil, groups = (1, 0, 2, 1), (2, 1), (1, 2), 2
    xp = np.pad(x, ((0, 0), (1, 2), (0, 1)))
    ho = (xp.shape[1] - 3) // 2 + 1
    wo = (xp.shape[2] - 3) // 1 + 1
    expect = np.zeros((6, ho, wo))
    for o in range(6):
        g = o // 3
        for y in range(ho):
            for xx in range(wo):
                acc = b[o]
                for ci in range(2):
                    for ky in range(3):
                        for kx in range(2):
                            acc += w[o, ci, ky, kx] * xp[g * 2 + ci, y * 2 + ky, xx + 2 * kx]
                expect[o, y, xx] = acc
    layer = Layer("c", "conv", ["x"], Shape(6, ho, wo), attrs={
        "kernel": (3, 2), "stride": stride, "pads": pads, "dilation": dil, "groups": groups},
        params={"weight": w, "bias": b})
    np.testing.assert_allclose(_conv(layer, x), expect, rtol=1e-12, atol=1e-12)


def test_reference_pools_match_naive_loops():
    from dlproc.ir import Shape

    x = np.arange(2 * 5 * 5, dtype=np.float64).reshape(2, 5, 5) * np.where(np.arange(5) % 2, -1, 1)
    mp = Layer("m", "maxpool", ["x"], Shape(2, 3, 3), attrs={"kernel": (2, 2), "stride": (2, 2), "pads": (0, 0, 1, 1)})
    out = _maxpool(mp, x)
    assert out[0, 2, 2] == x[0, 4, 4]  # the window over the bottom-right corner sees one real pixel
    assert out[1, 0, 0] == max(x[1, 0, 0], x[1, 0, 1], x[1, 1, 0], x[1, 1, 1])
    ap = Layer("a", "avgpool", ["x"], Shape(2, 3, 3), attrs={"kernel": (2, 2), "stride": (2, 2),
                                                              "pads": (0, 0, 1, 1), "count_include_pad": False})
    assert _avgpool(ap, x)[0, 2, 2] == x[0, 4, 4]
    ap.attrs["count_include_pad"] = True
    assert _avgpool(ap, x)[0, 2, 2] == x[0, 4, 4] / 4
