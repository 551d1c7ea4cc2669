"""Sliding-window geometry shared by the float and the integer golden operations.

Both op modules compute convolutions and pools the same way: pad the NCHW tensor, take a strided
view with one axis per kernel tap, and reduce over the tap axes (a matmul for convolutions). Keeping
the geometry here means the float reference and the integer model can never disagree about which
input pixels a window covers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Pair = tuple[int, int]
Pads = tuple[int, int, int, int]


def as_pair(value: int | Sequence[int], name: str) -> Pair:
    """Normalise an int or a (y, x) pair, rejecting non-positive values."""
    if isinstance(value, (int, np.integer)):
        pair = (int(value), int(value))
    else:
        pair = tuple(int(v) for v in value)
        if len(pair) != 2:
            raise ValueError(f"{name} must be an int or a (y, x) pair, got {value!r}")
    if min(pair) < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return pair  # type: ignore[return-value]


def as_pads(pads: int | Sequence[int]) -> Pads:
    """Normalise pads to (top, left, bottom, right); an int pads every side."""
    if isinstance(pads, (int, np.integer)):
        out = (int(pads),) * 4
    else:
        out = tuple(int(p) for p in pads)
        if len(out) == 2:  # (y, x): symmetric
            out = (out[0], out[1], out[0], out[1])
        if len(out) != 4:
            raise ValueError(f"pads must be (top, left, bottom, right), got {pads!r}")
    if min(out) < 0:
        raise ValueError(f"pads must be >= 0, got {pads!r}")
    return out  # type: ignore[return-value]


def output_size(h: int, w: int, kernel: Pair, stride: Pair, pads: Pads, dilation: Pair = (1, 1)) -> Pair:
    """Output height and width of a window operation (floor mode, as ONNX with ceil_mode=0)."""
    eff_h = dilation[0] * (kernel[0] - 1) + 1
    eff_w = dilation[1] * (kernel[1] - 1) + 1
    ho = (h + pads[0] + pads[2] - eff_h) // stride[0] + 1
    wo = (w + pads[1] + pads[3] - eff_w) // stride[1] + 1
    if ho < 1 or wo < 1:
        raise ValueError(
            f"window {kernel} (dilation {dilation}) does not fit the padded input {h}x{w} with pads {pads}"
        )
    return ho, wo


def pad_nchw(x: np.ndarray, pads: Pads, value: float | int) -> np.ndarray:
    """Pad the two spatial axes of an NCHW tensor with a constant."""
    top, left, bottom, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def windows(xp: np.ndarray, kernel: Pair, stride: Pair, dilation: Pair, out_hw: Pair) -> np.ndarray:
    """A read-only strided view (N, C, Ho, Wo, kh, kw) of a padded NCHW tensor; no copy is made."""
    n, c = xp.shape[:2]
    sn, sc, sh, sw = xp.strides
    shape = (n, c, out_hw[0], out_hw[1], kernel[0], kernel[1])
    strides = (sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1])
    return np.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides, writeable=False)


def im2col(view: np.ndarray, groups: int, dtype: np.dtype) -> np.ndarray:
    """Rearrange a window view into (N, groups, Ho*Wo, C/groups*kh*kw) columns of ``dtype`` (one copy)."""
    n, c, ho, wo, kh, kw = view.shape
    grouped = view.reshape(n, groups, c // groups, ho, wo, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    cols = np.ascontiguousarray(grouped, dtype=dtype)
    return cols.reshape(n, groups, ho * wo, (c // groups) * kh * kw)


def window_counts(h: int, w: int, kernel: Pair, stride: Pair, pads: Pads) -> np.ndarray:
    """How many real (non-padding) input pixels each output window covers, shape (Ho, Wo)."""
    ho, wo = output_size(h, w, kernel, stride, pads)
    # A window's count is a product of its row and column coverage, so two 1-D counts suffice.
    oy = np.arange(ho) * stride[0] - pads[0]
    ox = np.arange(wo) * stride[1] - pads[1]
    rows = np.minimum(oy + kernel[0], h) - np.maximum(oy, 0)
    cols = np.minimum(ox + kernel[1], w) - np.maximum(ox, 0)
    return np.clip(rows, 0, None)[:, None] * np.clip(cols, 0, None)[None, :]


def check_nchw(x: np.ndarray, name: str = "x") -> None:
    if x.ndim != 4:
        raise ValueError(f"{name} must be a batched NCHW array (4 dimensions), got shape {x.shape}")


def check_conv_shapes(x: np.ndarray, w: np.ndarray, groups: int) -> None:
    check_nchw(x)
    if w.ndim != 4:
        raise ValueError(f"conv weight must be (Cout, Cin/groups, kh, kw), got shape {w.shape}")
    c, co = x.shape[1], w.shape[0]
    if groups < 1 or c % groups or co % groups:
        raise ValueError(f"groups={groups} must divide input channels {c} and output channels {co}")
    if w.shape[1] * groups != c:
        raise ValueError(f"conv weight has {w.shape[1]} input channels per group, input has {c}/{groups}")


def reduce_taps(view: np.ndarray, ufunc: np.ufunc, dtype: np.dtype | None = None) -> np.ndarray:
    """Reduce a window view (N, C, Ho, Wo, kh, kw) over its two tap axes with ``ufunc``.

    A loop over the kh*kw taps of whole-tensor operations is several times faster than NumPy's
    reduction over two short, strided trailing axes.
    """
    kh, kw = view.shape[4], view.shape[5]
    out = np.array(view[..., 0, 0], dtype=dtype or view.dtype)
    for ky in range(kh):
        for kx in range(kw):
            if ky or kx:
                ufunc(out, view[..., ky, kx], out=out)
    return out


def convtranspose_geometry(
    h: int, w: int, kernel: Pair, stride: Pair, pads: Pads, output_padding: Pair, dilation: Pair
) -> tuple[Pair, Pads]:
    """Output (Ho, Wo) of a transposed convolution and the pads of its equivalent convolution.

    ``Ho = (H-1)*sy + (kh-1)*dy + 1 - top - bottom + output_padding_y``. The equivalent
    convolution runs (stride 1, same dilation, kernel flipped) over the input with ``sy - 1``
    zeros between rows and ``sx - 1`` between columns, padded by ``(k-1)*d - pad`` before and
    ``(k-1)*d - pad + output_padding`` after; those pads are negative where ``pads`` crop more than
    the kernel's reach (:func:`zero_insert` then crops).
    """
    ho = (h - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1 - pads[0] - pads[2] + output_padding[0]
    wo = (w - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1 - pads[1] - pads[3] + output_padding[1]
    if ho < 1 or wo < 1:
        raise ValueError(f"transposed conv: pads {pads} leave no output of the {h}x{w} input "
                         f"(kernel {kernel}, stride {stride}, dilation {dilation})")
    ey, ex = (kernel[0] - 1) * dilation[0], (kernel[1] - 1) * dilation[1]
    eq = (ey - pads[0], ex - pads[1], ey - pads[2] + output_padding[0], ex - pads[3] + output_padding[1])
    return (ho, wo), eq  # type: ignore[return-value]


def zero_insert(x: np.ndarray, stride: Pair, pads: tuple[int, int, int, int], value: float | int) -> np.ndarray:
    """Put ``stride - 1`` rows/columns of ``value`` between the pixels of an NCHW tensor, then pad
    (top, left, bottom, right) with ``value``; negative pads crop."""
    n, c, h, w = x.shape
    sy, sx = stride
    out = np.full((n, c, (h - 1) * sy + 1, (w - 1) * sx + 1), value, dtype=x.dtype)
    out[:, :, ::sy, ::sx] = x
    top, left, bottom, right = pads
    out = out[:, :, max(-top, 0):out.shape[2] - max(-bottom, 0), max(-left, 0):out.shape[3] - max(-right, 0)]
    return pad_nchw(out, (max(top, 0), max(left, 0), max(bottom, 0), max(right, 0)), value)
