"""What the host does around a run: quantize and fold the input, decode outputs, run SW layers.

These functions take only a :class:`CompiledNetwork` (no quantized network), because the
firmware will do the same from the compiled-network file alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlproc.errors import CompileError
from dlproc.targets.golden import float_ops, ops
from dlproc.targets.golden.run import region_float, yolo_float
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.packing import pack_input, unpack_output

__all__ = ["check_input", "quantize_input", "im2col", "fold_batch", "geometry", "pack_frame", "unpack_tensor",
           "tensor_nbytes", "run_software_layers"]


def check_input(cn: Any, x: Any) -> np.ndarray:
    """A float32 NCHW batch of the network's input shape, or a CompileError naming what is expected."""
    x = np.asarray(x)
    c, h, w = cn.input.shape
    if x.ndim == 3:
        raise CompileError(f"input of shape {tuple(x.shape)}: expected a batch (N, {c}, {h}, {w}) (NCHW); "
                           "add the batch dimension, e.g. x[None]")
    if x.ndim != 4 or tuple(x.shape[1:]) != (c, h, w) or x.shape[0] < 1:
        raise CompileError(f"input of shape {tuple(x.shape)}: network {cn.name!r} expects (N, {c}, {h}, {w}) "
                           "float32 in NCHW layout with N >= 1")
    if not np.issubdtype(x.dtype, np.floating):
        raise CompileError(f"input dtype {x.dtype}: expected float32 (the workflow quantizes it)")
    if not np.all(np.isfinite(x)):
        raise CompileError("input contains NaN or Inf values")
    return x.astype(np.float32, copy=False)


def quantize_input(cn: Any, x: np.ndarray) -> np.ndarray:
    """float32 batch -> int8 with the input scale and zero point (as QuantizedNetwork.quantize_input)."""
    return ops.quantize_tensor(x, cn.input.scale, cn.input.zero_point)


def im2col(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], pads: tuple[int, int, int, int],
           dilation: tuple[int, int], pad_value: int) -> np.ndarray:
    """int8 (N, C, H, W) -> (N, C*kh*kw, Ho, Wo), channel order (c, ky, kx), padding = ``pad_value``."""
    n, c, h, w = x.shape
    (kh, kw), (sy, sx), (dy, dx) = kernel, stride, dilation
    pt, pl, pb, pr = pads
    xp = np.full((n, c, h + pt + pb, w + pl + pr), pad_value, dtype=x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    ho = (h + pt + pb - ((kh - 1) * dy + 1)) // sy + 1
    wo = (w + pl + pr - ((kw - 1) * dx + 1)) // sx + 1
    out = np.empty((n, c, kh, kw, ho, wo), dtype=x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dy, kx * dx
            out[:, :, ky, kx] = xp[:, :, y0:y0 + (ho - 1) * sy + 1:sy, x0:x0 + (wo - 1) * sx + 1:sx]
    return out.reshape(n, c * kh * kw, ho, wo)


def fold_batch(cn: Any, xq: np.ndarray) -> np.ndarray:
    """Apply the input transform recorded in the compiled network (im2col or none)."""
    t = cn.input.transform
    if not t:
        return xq
    if t.get("kind") != "im2col":
        raise CompileError(f"unknown input transform {t.get('kind')!r} in compiled network {cn.name!r}")
    return im2col(xq, tuple(t["kernel"]), tuple(t["stride"]), tuple(t["pads"]), tuple(t["dilation"]),
                  int(t["pad_value"]))


def geometry(cn: Any) -> Geometry:
    return Geometry.from_config(cn.processor_config())


def pack_frame(geom: Geometry, frame: np.ndarray) -> bytes:
    """One int8 (C, H, W) frame in the channel-block DRAM layout."""
    return pack_input(geom, np.ascontiguousarray(frame))


def unpack_tensor(geom: Geometry, data: bytes, shape: tuple[int, int, int]) -> np.ndarray:
    return unpack_output(geom, np.frombuffer(data, dtype=np.uint8), shape)


def tensor_nbytes(geom: Geometry, shape: tuple[int, int, int]) -> int:
    return -(-shape[0] // geom.c) * shape[1] * shape[2] * geom.pitch("OUT")


_SW_OPS = {
    "softmax": lambda attrs, a: float_ops.softmax(a[0], axis=1),
    "yolo": lambda attrs, a: yolo_float(a[0], attrs),
    "region": lambda attrs, a: region_float(a[0], attrs),
}


def run_software_layers(cn: Any, hw_values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Dequantize the tensors read back, run the SW layers in float32, return the network outputs.

    ``hw_values`` maps each boundary tensor to its int8 batch (N, C, H, W). Network outputs that
    are HW tensors are dequantized; SW outputs are float32, as ``golden.run.run_int8`` gives them.
    """
    values: dict[str, np.ndarray] = {}
    for t in cn.outputs:
        values[t.name] = ops.dequantize(hw_values[t.name], t.scale, t.zero_point)
    for layer in cn.layers:
        if layer.hw or layer.op == "input":
            continue
        try:
            fn = _SW_OPS[layer.op]
        except KeyError:
            raise CompileError(f"software layer {layer.name!r}: no host implementation of {layer.op!r}") from None
        args = [values[name] for name in layer.inputs]
        out = np.asarray(fn(layer.attrs, args), dtype=np.float32)
        values[layer.name] = out.reshape((out.shape[0],) + tuple(layer.shape))
    return {name: values[name] for name in cn.network_outputs}
