"""The DRAM layout of tensors and parameters (``docs/programs.md``, "Layout"): channel blocks of C
lanes for activations, and the PRM words (bias, requantization multiplier and shift per channel)
that every weighted engine loads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry

__all__ = [
    "channel_blocks", "pack_input", "unpack_output", "prm_word", "check_requant", "pack_weighted_params",
]


def channel_blocks(n: int, c: int) -> int:
    return -(-n // c)


def pack_input(geom: Geometry, x: np.ndarray) -> bytes:
    """int8 (C, H, W) -> channel-block layout; lanes beyond C and the beat tail are zero."""
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 3:
        raise CompileError(f"layer input must be an int8 (C, H, W) array, got {x.dtype} {x.shape}")
    c = geom.c
    ch, h, w = x.shape
    nb = channel_blocks(ch, c)
    pitch = geom.pitch("INP")
    arr = np.zeros((nb, h, w, pitch), dtype=np.uint8)
    padded = np.zeros((nb * c, h, w), dtype=np.int8)
    padded[:ch] = x
    arr[..., :c] = padded.reshape(nb, c, h, w).transpose(0, 2, 3, 1).view(np.uint8)
    return arr.tobytes()


def unpack_output(geom: Geometry, data: np.ndarray | bytes, shape: tuple[int, int, int]) -> np.ndarray:
    """Inverse of :func:`pack_input` for an OUT-layout tensor of ``shape`` (C, H, W)."""
    c = geom.c
    ch, h, w = shape
    nb = channel_blocks(ch, c)
    pitch = geom.pitch("OUT")
    arr = np.frombuffer(bytes(data), dtype=np.uint8)[: nb * h * w * pitch].reshape(nb, h, w, pitch)
    lanes = arr[..., :c].view(np.int8)  # (nb, h, w, c)
    return np.ascontiguousarray(lanes.transpose(0, 3, 1, 2).reshape(nb * c, h, w)[:ch])


def prm_word(geom: Geometry, bias: np.ndarray, mult: np.ndarray, mneg: np.ndarray, shift: np.ndarray) -> bytes:
    """One PRM word: per lane bias int32 LE, M uint16, M_neg uint16, S uint8 (9 bytes per lane)."""
    c = geom.c
    rec = np.zeros(c, dtype=[("bias", "<i4"), ("m", "<u2"), ("mneg", "<u2"), ("s", "u1")])
    n = len(bias)
    rec["bias"][:n], rec["m"][:n], rec["mneg"][:n], rec["s"][:n] = bias, mult, mneg, shift
    out = np.zeros(geom.pitch("PRM"), dtype=np.uint8)
    out[: 9 * c] = np.frombuffer(rec.tobytes(), dtype=np.uint8)
    return out.tobytes()


def check_requant(mult: np.ndarray, mneg: np.ndarray, shift: np.ndarray, what: str) -> None:
    from dlproc.hardware.numerics import MAX_SHIFT, MULT_BITS
    for name, arr, hi in (("mult", mult, (1 << MULT_BITS) - 1), ("mult_neg", mneg, (1 << MULT_BITS) - 1),
                          ("shift", shift, MAX_SHIFT)):
        if (arr < 0).any() or (arr > hi).any():
            raise CompileError(f"{what}: {name} must be in 0..{hi}, got range {arr.min()}..{arr.max()}")


def pack_weighted_params(geom: Geometry, layer: Any, co: int, what: str) -> bytes:
    """PRM image of a weighted layer (conv or fc: ``weight`` with output channels first, ``bias``,
    ``mult``/``shift``/``mult_neg``, ``zp_in``): one word per block of C outputs with the bias with
    ``-zp_in * sum(w)`` folded in and the requantization parameters."""
    from dlproc.targets.golden.ops import fold_zero_point
    c = geom.c
    bias = np.asarray(layer.bias, dtype=np.int64).reshape(-1)
    mult = np.broadcast_to(np.asarray(layer.mult, dtype=np.int64), (co,))
    shift = np.broadcast_to(np.asarray(layer.shift, dtype=np.int64), (co,))
    mneg = mult if layer.mult_neg is None else np.broadcast_to(np.asarray(layer.mult_neg, dtype=np.int64), (co,))
    if bias.shape != (co,):
        raise CompileError(f"{what} bias must have shape ({co},), got {bias.shape}")
    check_requant(mult, mneg, shift, f"{what} requantization")
    folded = fold_zero_point(bias, np.asarray(layer.weight), int(layer.zp_in)).astype(np.int64)
    words = []
    for ob in range(channel_blocks(co, c)):
        sl = slice(ob * c, min(co, ob * c + c))
        words.append(prm_word(geom, folded[sl], mult[sl], mneg[sl], shift[sl]))
    return b"".join(words)
