"""The array geometry a program is planned for: the ISA's hardware parameters plus the accumulator depth.

Derived from a configuration in one place (:meth:`Geometry.from_config`), so that the planners,
the ISA simulator and the estimator can never disagree about buffer sizes and word shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlproc.hardware import isa

__all__ = ["Geometry", "default_acc_depth"]


def default_acc_depth(hw: isa.HardwareParams) -> int:
    """Accumulator depth (output pixels per CONV/POOL) of a configuration.

    The contract sizes ACC as "the largest output tile"; a tile lands in one half of OUT when the
    program double-buffers, so half of OUT is the largest tile any double-buffered program uses.
    If ``isa.HardwareParams`` grows an ``acc_depth`` field, that is authoritative.
    """
    return int(getattr(hw, "acc_depth", None) or max(1, hw.out_depth // 2))


@dataclass(frozen=True)
class Geometry:
    """Everything the ISA exposes about a configuration: the hardware parameters of ``dlproc.hardware.isa``
    plus the accumulator depth. Derived in one place (:meth:`from_config`) so that the simulator
    and the program builder can never disagree."""

    hw: isa.HardwareParams
    acc_depth: int

    @classmethod
    def from_config(cls, config: Any) -> "Geometry":
        hw = isa.HardwareParams.from_config(config)
        return cls(hw, default_acc_depth(hw))

    @classmethod
    def from_hw(cls, hw: isa.HardwareParams, acc_depth: int | None = None) -> "Geometry":
        return cls(hw, acc_depth if acc_depth is not None else default_acc_depth(hw))

    @property
    def c(self) -> int:
        return self.hw.c

    @property
    def bus_bytes(self) -> int:
        return self.hw.bytes_per_beat

    def pitch(self, buf: str) -> int:
        return self.hw.pitch(buf)

    def elem_bytes(self, buf: str) -> int:
        return self.hw.elem_bytes(buf)

    def depth(self, buf: str) -> int:
        return self.hw.depth(buf)
