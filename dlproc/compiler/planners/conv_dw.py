"""Depthwise convolutions on the conv engine's depthwise mode (``CONV.dw``, ``gateware/conv.py``).

A depthwise layer (groups = input channels = output channels) would use one multiplier per
C x C weight word on the dense path: a diagonal word per tap. The depthwise mode instead gives
the array's C input lanes to the kernel's taps (3 per kernel row, ``dw_kh`` rows) and its C
output lanes to the channels of a block, so one evaluation per output pixel computes all C
channels. A kernel larger than ``dw_kh`` x 3 is cut into *links* of at most that size, run as
a partial-sum chain (``acc_keep`` ... ``acc_in``) over the same input tile: link (ky0, kx0)
reads the tile from row ky0 and column kx0 on. The planner is the dense conv planner's
(``planners/conv.py``) with one weight word per link and block and these CONVs per tile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.hardware.costs import dw_walk
from dlproc.hardware.geometry import Geometry

__all__ = ["DwLink", "depthwise_links", "depthwise_refusal", "dw_rows", "pack_dw_words", "dw_conv_cycles"]


@dataclass(frozen=True)
class DwLink:
    """A part of the kernel one depthwise CONV covers: rows ky0.., columns kx0.."""

    ky0: int
    kh: int
    kx0: int
    kw: int


def _is_depthwise(s: Any) -> bool:
    return s.groups > 1 and s.groups == s.ci == s.co


def depthwise_refusal(geom: Geometry, s: Any) -> str | None:
    """Why a depthwise-shaped layer runs on the dense array instead of the depthwise mode (None:
    it runs in the depthwise mode, or it is not a depthwise layer at all)."""
    if not _is_depthwise(s):
        if s.groups > 1 and s.ci // s.groups == 1:
            return (f"depthwise multiplier {s.co // s.groups} > 1: each input channel feeds several output "
                    "channels, which the depthwise mode (one output lane per input lane) cannot run")
        return None
    if s.kh * s.kw == 1:
        return None  # a 1x1 depthwise conv is one tap: the dense path runs it at full rate already
    if not geom.hw.depthwise or geom.hw.dw_kh < 1:
        return "this processor has no depthwise mode (conv DepthwiseBlockGeneration 'on', C >= 3)"
    if s.dil != (1, 1):
        return f"dilation {s.dil[0]}x{s.dil[1]}: the depthwise mode's window holds adjacent rows and columns"
    if any(link.kh * link.kw < 2 for link in _cut(geom, s)):
        return (f"a {s.kh}x{s.kw} kernel cuts into one-tap links on this processor (window "
                f"{geom.hw.dw_kh}x{isa.DW_WINDOW_COLS}), which the depthwise mode does not run")
    return None


def _balanced(n: int, most: int) -> list[tuple[int, int]]:
    """(start, size) of ceil(n / most) parts of n as equal as possible."""
    parts = -(-n // most)
    sizes = [n // parts + (k < n % parts) for k in range(parts)]
    return [(sum(sizes[:k]), sizes[k]) for k in range(parts)]


def _cut(geom: Geometry, s: Any) -> list[DwLink]:
    return [DwLink(ky0, kh, kx0, kw) for ky0, kh in _balanced(s.kh, geom.hw.dw_kh)
            for kx0, kw in _balanced(s.kw, isa.DW_WINDOW_COLS)]


def depthwise_links(geom: Geometry, s: Any) -> list[DwLink] | None:
    """The kernel's links when the layer runs in the depthwise mode, else None."""
    if not _is_depthwise(s) or s.kh * s.kw == 1 or depthwise_refusal(geom, s) is not None:
        return None
    return _cut(geom, s)


def dw_rows(s: Any, links: list[DwLink]) -> int:
    """Output rows per strip: the most the window's DW_COL words per column hold for every link
    (a chain's links must agree, their sums are in the same strip order)."""
    tallest = max(link.kh for link in links)
    return max(1, min(15, (isa.DW_COL - tallest) // s.stride[0] + 1))


def pack_dw_words(geom: Geometry, weight: np.ndarray, s: Any, links: list[DwLink]) -> tuple[bytes, list[int]]:
    """Weight image: per output block one WGT word per link, byte [c][3*ky + 3 - kw + kx] = the
    tap (ky0 + ky, kx0 + kx) of channel block*C + c (the engine's window order)."""
    c, pitch = geom.c, geom.pitch("WGT")
    n_ob = -(-s.co // c)
    words = np.zeros((n_ob, len(links), c, c), dtype=np.int8)
    w = np.asarray(weight)[:, 0]  # (C, kh, kw)
    for ob in range(n_ob):
        lanes = range(min(c, s.co - ob * c))
        for k, link in enumerate(links):
            for ky in range(link.kh):
                for kx in range(link.kw):
                    pos = isa.DW_WINDOW_COLS * ky + isa.DW_WINDOW_COLS - link.kw + kx
                    for lane in lanes:
                        words[ob, k, lane, pos] = w[ob * c + lane, link.ky0 + ky, link.kx0 + kx]
    buf = np.zeros((n_ob * len(links), pitch), dtype=np.uint8)
    buf[:, : c * c] = words.reshape(-1, c * c).view(np.uint8)
    return buf.tobytes(), [ob * len(links) for ob in range(n_ob)]


def dw_conv_cycles(conv: isa.Conv, overhead: int) -> int:
    """Planner's cycles of one depthwise CONV: its walk (``costs.dw_walk``), the evaluations of
    its last column and ``overhead`` for the hand-over (docs/compute.md)."""
    walk, last_rows = dw_walk(conv)
    return walk + last_rows + overhead
