"""Train the digits example CNN with plain NumPy and export it to ONNX.

Network (input 1 x 16 x 16, values in [0, 1]):

    conv 3x3, 1 -> 8, pad 1, ReLU  -> maxpool 2x2
    conv 3x3, 8 -> 16, pad 1, ReLU -> maxpool 2x2
    flatten (C, H, W) -> fully connected 256 -> 10 -> softmax

Data: scikit-learn's handwritten digits through ``dlproc.quant.data.digits_dataset``: the first
1437 images (load_digits order) train, the last 360 are held out and never seen here except for
the final accuracy print. Training is deterministic: NumPy ``default_rng(SEED)`` initialises the
weights and shuffles the mini-batches, and everything runs in float32 on the CPU in a few seconds.

    python examples/digits/train.py                     # writes dlproc/data/models/digits.onnx
    python examples/digits/train.py -o /tmp/digits.onnx --epochs 20
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlproc.quant.data import digits_dataset

SEED = 0
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "dlproc" / "data" / "models" / "digits.onnx"


# -- layers with hand-written backward passes ---------------------------------------------------


def im2col3x3(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N*H*W, C*9) patches of a 3x3 window with one pixel of zero padding."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N,C,H,W,3,3
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * w, c * 9)


def col2im3x3(cols: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """The adjoint of im2col3x3: scatter-add patch gradients back onto the input."""
    n, c, h, w = shape
    cols = cols.reshape(n, h, w, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=cols.dtype)
    for ky in range(3):
        for kx in range(3):
            dxp[:, :, ky : ky + h, kx : kx + w] += cols[:, :, :, :, ky, kx].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1]


def conv_forward(x, w, b):
    n, _, h, wd = x.shape
    cols = im2col3x3(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def conv_backward(dout, cols, x_shape, w):
    co = w.shape[0]
    d = dout.transpose(0, 2, 3, 1).reshape(-1, co)
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dx = col2im3x3(d @ w.reshape(co, -1), x_shape)
    return dx, dw, db


def pool_forward(x):
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = blocks.max(axis=(3, 5))
    mask = blocks == out[:, :, :, None, :, None]
    return out, mask


def pool_backward(dout, mask):
    n, c, h2, _, w2, _ = mask.shape
    # Ties share the gradient; after ReLU they are almost always zeros, whose gradient is zero.
    d = mask * dout[:, :, :, None, :, None]
    return d.reshape(n, c, h2 * 2, w2 * 2)


# -- the model --------------------------------------------------------------------------------


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1_w": he((8, 1, 3, 3), 9),
        "conv1_b": np.zeros(8, np.float32),
        "conv2_w": he((16, 8, 3, 3), 72),
        "conv2_b": np.zeros(16, np.float32),
        "fc_w": he((10, 256), 256),
        "fc_b": np.zeros(10, np.float32),
    }


def forward(p, x, keep=False):
    z1, c1 = conv_forward(x, p["conv1_w"], p["conv1_b"])
    a1 = np.maximum(z1, 0)
    p1, m1 = pool_forward(a1)
    z2, c2 = conv_forward(p1, p["conv2_w"], p["conv2_b"])
    a2 = np.maximum(z2, 0)
    p2, m2 = pool_forward(a2)
    flat = p2.reshape(p2.shape[0], -1)
    logits = flat @ p["fc_w"].T + p["fc_b"]
    if not keep:
        return logits
    return logits, (x, z1, c1, p1, m1, z2, c2, m2, flat)


def loss_and_grads(p, x, y):
    logits, (x, z1, c1, p1, m1, z2, c2, m2, flat) = forward(p, x, keep=True)
    shifted = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(shifted)
    prob /= prob.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -np.log(prob[np.arange(n), y] + 1e-12).mean()
    dlogits = prob
    dlogits[np.arange(n), y] -= 1
    dlogits /= n
    g = {"fc_w": dlogits.T @ flat, "fc_b": dlogits.sum(axis=0)}
    dp2 = (dlogits @ p["fc_w"]).reshape(n, 16, 4, 4)
    dz2 = pool_backward(dp2, m2) * (z2 > 0)
    dp1, g["conv2_w"], g["conv2_b"] = conv_backward(dz2, c2, p1.shape, p["conv2_w"])
    dz1 = pool_backward(dp1, m1) * (z1 > 0)
    _, g["conv1_w"], g["conv1_b"] = conv_backward(dz1, c1, x.shape, p["conv1_w"])
    return float(loss), {k: v.astype(np.float32) for k, v in g.items()}


def shift_augment(x: np.ndarray, rng: np.random.Generator, max_shift: int = 1) -> np.ndarray:
    """Move each image by up to ``max_shift`` pixels in y and x (zero fill).

    The held-out images come from other writers, whose digits sit differently in the frame;
    random translations are the cheapest way to make the small network robust to that.
    """
    n, _, h, w = x.shape
    out = np.zeros_like(x)
    shifts = rng.integers(-max_shift, max_shift + 1, size=(n, 2))
    for i, (dy, dx) in enumerate(shifts):
        ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
        xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
        out[i, :, yd, xd] = x[i, :, ys, xs]
    return out


def train(epochs: int, batch: int, lr: float, max_shift: int, wd: float, cosine: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x, y = digits_dataset("train")
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    beta1, beta2, eps, step = 0.9, 0.999, 1e-8, 0
    for epoch in range(epochs):
        order = rng.permutation(len(y))
        # Cosine decay of the step size: large steps early, fine convergence at the end.
        rate = lr * 0.5 * (1 + np.cos(np.pi * epoch / epochs)) if cosine else lr
        total = 0.0
        for start in range(0, len(y), batch):
            idx = order[start : start + batch]
            loss, g = loss_and_grads(p, shift_augment(x[idx], rng, max_shift), y[idx])
            total += loss * len(idx)
            step += 1
            for k in p:  # Adam
                m[k] = beta1 * m[k] + (1 - beta1) * g[k]
                v[k] = beta2 * v[k] + (1 - beta2) * g[k] ** 2
                mhat = m[k] / (1 - beta1**step)
                vhat = v[k] / (1 - beta2**step)
                # Decoupled weight decay (AdamW) on the weights only, not the biases.
                decay = wd * p[k] if k.endswith("_w") else 0.0
                p[k] = (p[k] - rate * (mhat / (np.sqrt(vhat) + eps) + decay)).astype(np.float32)
        acc = accuracy(p, x, y)
        print(f"epoch {epoch + 1:2d}: loss {total / len(y):.4f}, train top-1 {acc:.2%}")
    return p


def accuracy(p, x, y) -> float:
    return float((forward(p, x).argmax(axis=1) == y).mean())


# -- ONNX export -------------------------------------------------------------------------------


def export_onnx(p: dict[str, np.ndarray], path: Path) -> None:
    inits = [numpy_helper.from_array(v, name=k) for k, v in p.items()]
    nodes = [
        helper.make_node("Conv", ["input", "conv1_w", "conv1_b"], ["conv1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2_w", "conv2_b"], ["conv2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], name="pool2",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool2"], ["flatten"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flatten", "fc_w", "fc_b"], ["fc"], name="fc", transB=1),
        helper.make_node("Softmax", ["fc"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 16, 16])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="dlproc examples/digits/train.py")
    model.ir_version = 8  # readable by every onnxruntime >= 1.10
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--wd", type=float, default=0.0, help="AdamW weight decay")
    parser.add_argument("--cosine", action="store_true", help="cosine learning-rate decay")
    parser.add_argument("--shift", type=int, default=1, help="largest random translation in pixels")
    args = parser.parse_args()
    t0 = time.perf_counter()
    p = train(args.epochs, args.batch, args.lr, args.shift, args.wd, args.cosine)
    xh, yh = digits_dataset("heldout")
    print(f"held-out top-1 (NumPy): {accuracy(p, xh, yh):.2%}  ({time.perf_counter() - t0:.1f} s)")
    export_onnx(p, args.output)
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
