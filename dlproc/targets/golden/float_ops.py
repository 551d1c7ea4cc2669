"""Float32 reference of every operation of the golden model (batched NCHW).

These are the real-valued operations that the integer ops in :mod:`dlproc.targets.golden.ops` approximate:
the quantizer runs them to calibrate (Darknet networks have no ONNX Runtime reference), and the tests
compare the integer ops against them on dequantized inputs. The definitions follow ONNX (Conv,
MaxPool, AveragePool, LRN, Resize nearest, Softmax over axis 1); the tests check each one against
ONNX Runtime.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dlproc.ir import Activation
from dlproc.targets.golden.windows import (
    as_pads,
    as_pair,
    check_conv_shapes,
    check_nchw,
    convtranspose_geometry,
    im2col,
    output_size,
    pad_nchw,
    reduce_taps,
    window_counts,
    windows,
    zero_insert,
)

__all__ = [
    "conv2d",
    "fully_connected",
    "maxpool",
    "avgpool",
    "global_avgpool",
    "add",
    "concat",
    "lrn",
    "upsample_nearest",
    "softmax",
    "activation",
]


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def activation(x: np.ndarray, act: Activation | None) -> np.ndarray:
    """Apply an IR activation (None is the identity)."""
    x = _f32(x)
    return x if act is None else act.apply(x).astype(np.float32)


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    stride: int | Sequence[int] = 1,
    pads: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    act: Activation | None = None,
) -> np.ndarray:
    """2-D convolution (ONNX Conv): x (N, C, H, W), w (Co, C/groups, kh, kw), bias (Co,) or None.

    Zero padding; pads are (top, left, bottom, right). ``act`` optionally applies a fused activation.
    """
    x, w = _f32(x), _f32(w)
    check_conv_shapes(x, w, groups)
    stride, dilation, pads = as_pair(stride, "stride"), as_pair(dilation, "dilation"), as_pads(pads)
    kernel = (w.shape[2], w.shape[3])
    n, _, h, wd = x.shape
    ho, wo = output_size(h, wd, kernel, stride, pads, dilation)
    cols = im2col(windows(pad_nchw(x, pads, 0.0), kernel, stride, dilation, (ho, wo)), groups, np.float32)
    co = w.shape[0]
    wmat = w.reshape(groups, co // groups, -1).transpose(0, 2, 1)  # (g, K, Co/g)
    out = np.matmul(cols, wmat)  # (N, g, Ho*Wo, Co/g)
    out = out.transpose(0, 1, 3, 2).reshape(n, co, ho, wo)
    if bias is not None:
        out = out + _f32(bias).reshape(1, co, 1, 1)
    return activation(out, act)


def fully_connected(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, act: Activation | None = None
) -> np.ndarray:
    """Fully connected layer (ONNX Gemm with transB=1): x (N, Cin) or (N, C, H, W) flattened, w (Co, Cin)."""
    x, w = _f32(x), _f32(w)
    x = x.reshape(x.shape[0], -1)
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"fc input has {x.shape[1]} features, weight expects {w.shape[1]}")
    out = x @ w.T
    if bias is not None:
        out = out + _f32(bias)
    return activation(out, act)


def maxpool(
    x: np.ndarray, kernel: int | Sequence[int], stride: int | Sequence[int] = 1, pads: int | Sequence[int] = 0
) -> np.ndarray:
    """Max pooling (ONNX MaxPool, floor mode): padding never wins (it behaves as -inf)."""
    x = _f32(x)
    check_nchw(x)
    kernel, stride, pads = as_pair(kernel, "kernel"), as_pair(stride, "stride"), as_pads(pads)
    ho, wo = output_size(x.shape[2], x.shape[3], kernel, stride, pads)
    return reduce_taps(windows(pad_nchw(x, pads, -np.inf), kernel, stride, (1, 1), (ho, wo)), np.maximum)


def avgpool(
    x: np.ndarray,
    kernel: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    pads: int | Sequence[int] = 0,
    count_include_pad: bool = False,
) -> np.ndarray:
    """Average pooling (ONNX AveragePool, floor mode).

    With ``count_include_pad`` the divisor is always kh*kw (padding counts as zeros); without it,
    the number of real input pixels under the window (ONNX's default).
    """
    x = _f32(x)
    check_nchw(x)
    kernel, stride, pads = as_pair(kernel, "kernel"), as_pair(stride, "stride"), as_pads(pads)
    ho, wo = output_size(x.shape[2], x.shape[3], kernel, stride, pads)
    view = windows(pad_nchw(x, pads, 0.0), kernel, stride, (1, 1), (ho, wo))
    total = reduce_taps(view, np.add, np.float64)
    if count_include_pad:
        divisor = np.float64(kernel[0] * kernel[1])
    else:
        divisor = window_counts(x.shape[2], x.shape[3], kernel, stride, pads).astype(np.float64)
    return (total / divisor).astype(np.float32)


def global_avgpool(x: np.ndarray) -> np.ndarray:
    """Mean over the spatial axes, keeping them as 1x1 (ONNX GlobalAveragePool)."""
    x = _f32(x)
    check_nchw(x)
    return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(np.float32)


def add(xa: np.ndarray, xb: np.ndarray, act: Activation | None = None) -> np.ndarray:
    """Element-wise sum of two equally shaped tensors, with an optional fused activation."""
    xa, xb = _f32(xa), _f32(xb)
    if xa.shape != xb.shape:
        raise ValueError(f"add operands differ in shape: {xa.shape} and {xb.shape}")
    return activation(xa + xb, act)


def mul(xa: np.ndarray, xb: np.ndarray, act: Activation | None = None) -> np.ndarray:
    """Element-wise product; ``xb`` may be a per-channel (N, C, 1, 1) vector broadcast over the pixels."""
    xa, xb = _f32(xa), _f32(xb)
    if np.broadcast_shapes(xa.shape, xb.shape) != xa.shape:
        raise ValueError(f"mul: operand b {xb.shape} must broadcast to operand a {xa.shape}")
    return activation(xa * xb, act)


def concat(xs: Sequence[np.ndarray], axis: int = 1) -> np.ndarray:
    """Concatenation along ``axis`` (channels by default)."""
    if not xs:
        raise ValueError("concat needs at least one input")
    return np.concatenate([_f32(x) for x in xs], axis=axis)


def lrn(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """Cross-channel local response normalization exactly as ONNX LRN defines it.

    square_sum[n, c] = sum of x[n, i]**2 for i in [c - floor((size-1)/2), c + ceil((size-1)/2)]
    (clipped to the channel range); y = x / (bias + alpha / size * square_sum) ** beta.
    """
    x = _f32(x)
    check_nchw(x)
    if size < 1:
        raise ValueError(f"LRN size must be >= 1, got {size}")
    square_sum = channel_window_sum(x.astype(np.float64) ** 2, size)
    return (x / (bias + alpha / size * square_sum) ** beta).astype(np.float32)


def channel_window_sum(v: np.ndarray, size: int) -> np.ndarray:
    """Sum of ``v`` over ONNX LRN's channel window of each channel (axis 1), via a cumulative sum."""
    lo = (size - 1) // 2  # channels before j in the window; size - 1 - lo after it
    c = v.shape[1]
    padded = np.zeros((v.shape[0], c + size) + v.shape[2:], dtype=v.dtype)
    padded[:, 1 + lo : 1 + lo + c] = v
    csum = np.cumsum(padded, axis=1)
    # Window of channel j covers padded indices j+1 .. j+lo+hi+1 (the leading zero row makes the
    # difference of two prefix sums exact at the borders).
    return csum[:, size : size + c] - csum[:, 0:c]


def upsample_nearest(x: np.ndarray, scale: int | Sequence[int]) -> np.ndarray:
    """Nearest-neighbour upsampling by an integer factor (ONNX Resize, mode nearest, integer scale)."""
    x = _f32(x)
    check_nchw(x)
    sy, sx = as_pair(scale, "scale")
    return np.repeat(np.repeat(x, sy, axis=2), sx, axis=3)


def softmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """Softmax along ``axis`` (channels by default), computed stably in float64."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


# -- transposed convolution ----------------------------------------------------------------------
__all__ += ["conv_transpose2d", "output_padding_pair"]


def output_padding_pair(value: int | Sequence[int]) -> tuple[int, int]:
    """Normalise ``output_padding`` (an int or a (y, x) pair, >= 0)."""
    pair = (int(value),) * 2 if np.isscalar(value) else tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 0:
        raise ValueError(f"output_padding must be an int or a (y, x) pair >= 0, got {value!r}")
    return pair  # type: ignore[return-value]


def conv_transpose2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    stride: int | Sequence[int] = 1,
    pads: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    act: Activation | None = None,
) -> np.ndarray:
    """2-D transposed convolution (ONNX ConvTranspose): x (N, C, H, W), w (Co, C/groups, kh, kw).

    ``w`` is in the IR's layout, output channels first: ONNX's weight (C, Co/groups, kh, kw) with
    the channel axes swapped per group (``dlproc.frontends.onnx``). Computed as its definition's
    equivalent convolution: ``stride - 1`` zeros between the input pixels, padded by
    ``(k-1)*d - pads`` (+ ``output_padding`` at the bottom/right), stride 1, kernel flipped.
    """
    x, w = _f32(x), _f32(w)
    check_conv_shapes(x, w, groups)
    stride, dilation, pads = as_pair(stride, "stride"), as_pair(dilation, "dilation"), as_pads(pads)
    kernel = (w.shape[2], w.shape[3])
    (ho, wo), eq = convtranspose_geometry(x.shape[2], x.shape[3], kernel, stride, pads,
                                          output_padding_pair(output_padding), dilation)
    out = conv2d(zero_insert(x, stride, eq, 0.0), w[:, :, ::-1, ::-1], bias, 1, 0, dilation, groups, act)
    assert out.shape[2:] == (ho, wo)
    return out
