"""MATLAB's profiler table from the processor's own MARK counters.

Each MARK instruction latches the cycle counter (cycles since START) into a profile entry once every
earlier store has completed, so entry k minus entry k-1 is the time of the layer (group) ending at
MARK k, measured by the hardware. The table follows ``predict(..., 'Profile', 'on')`` of MATLAB's
Deep Learning HDL Toolbox: a ``Network`` row with LastFrameLatency(cycles), LastFrameLatency(seconds),
FramesNum, Total Latency and Frames/s, then one row per layer, the clock in a footnote. dlproc adds
the MAC utilization of each layer: true multiply-accumulates / (cycles * C * C).

The MARK counters give per-layer times only; what the MAC hardware did is counted by two run-wide
performance counters (dlproc.hardware.regmap): MAC_ACTIVE, the cycles the C x C conv array consumed an INP
word (C*C MACs), and FC_MAC_ACTIVE, the cycles the FC engine's F lanes consumed a weight slice
(F MACs). A target that reads them (the ``sim`` target does) passes them as :class:`MacActivity`,
and the table adds the measured figure for the frame: issued MACs = MAC_ACTIVE*C*C +
FC_MAC_ACTIVE*F over cycles * C * C. It counts the lanes the hardware issued, padding included, so
it is at least the true-MAC utilization; an FC layer on the FC engine can reach at most F/(C*C)
of the array's peak (F MACs per cycle, bound by the weight stream).

The ``golden`` target (the ISA-level simulator) is functional and has no cycle counts; its profile
says so instead of inventing numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LayerProfile", "MacActivity", "ProfileResult", "TITLE", "layer_cycles"]

TITLE = "Deep Learning Processor Profiler Performance Results"


@dataclass
class LayerProfile:
    name: str
    cycles: int | None
    macs: int = 0
    utilization: float | None = None  #: fraction of the C*C array's peak (0..1)


@dataclass
class MacActivity:
    """The MAC_ACTIVE and FC_MAC_ACTIVE counters of one frame (hardware-measured)."""

    conv_cycles: int  #: MAC_ACTIVE: cycles of C*C MACs on the conv array
    fc_cycles: int  #: FC_MAC_ACTIVE: cycles of F MACs on the FC engine
    fc_lanes: int  #: F (0 when the configuration has no FC engine)

    def issued_macs(self, c: int) -> int:
        return self.conv_cycles * c * c + self.fc_cycles * self.fc_lanes


@dataclass
class ProfileResult:
    """The profile of the last frame of a predict() call (plus the batch's total latency)."""

    target: str
    clock_mhz: float
    c: int
    frames: int
    last_frame_cycles: int | None
    total_cycles: int | None
    layers: list[LayerProfile] = field(default_factory=list)
    mac_activity: MacActivity | None = None  #: the last frame's MAC counters, where measured

    @property
    def issued_utilization(self) -> float | None:
        """(MAC_ACTIVE*C*C + FC_MAC_ACTIVE*F) / (cycles * C * C) of the last frame, if measured."""
        if self.mac_activity is None or not self.last_frame_cycles:
            return None
        return self.mac_activity.issued_macs(self.c) / (self.last_frame_cycles * self.c * self.c)

    @property
    def has_cycles(self) -> bool:
        return self.last_frame_cycles is not None

    def seconds(self, cycles: int | None) -> float | None:
        return None if cycles is None else cycles / (self.clock_mhz * 1e6)

    @property
    def frames_per_second(self) -> float | None:
        if not self.total_cycles:
            return None
        return self.frames * self.clock_mhz * 1e6 / self.total_cycles

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``dlproc predict --json --profile``."""
        total: dict[str, Any] = {"cycles": self.last_frame_cycles}
        if self.mac_activity is not None:
            total.update(mac_active=self.mac_activity.conv_cycles, fc_mac_active=self.mac_activity.fc_cycles,
                         fc_lanes=self.mac_activity.fc_lanes)
        return {"layers": [{"name": l.name, "cycles": l.cycles} for l in self.layers], "total": total}

    def table(self) -> str:
        if not self.has_cycles:
            names = ", ".join(l.name for l in self.layers)
            return (f"{TITLE}\n\n    The {self.target} target (the ISA-level functional simulator) has no cycle "
                    f"counts; run with target 'sim' (cycle-accurate RTL) for the profile.\n"
                    f"    Profiled layers: {names}")
        head = (f"{'':<24}{'LastFrameLatency(cycles)':>26}{'LastFrameLatency(seconds)':>28}{'FramesNum':>12}"
                f"{'Total Latency':>16}{'Frames/s':>12}{'MAC util.':>11}")
        lines = [f"              {TITLE}", "", head,
                 f"{'Network':<24}{self.last_frame_cycles:>26,}{self.seconds(self.last_frame_cycles):>28.5f}"
                 f"{self.frames:>12}{self.total_cycles:>16,}{self.frames_per_second:>12.1f}"
                 f"{self._network_util():>10.1f}%"]
        for l in self.layers:
            util = f"{100 * l.utilization:>10.1f}%" if l.utilization is not None else f"{'-':>11}"
            lines.append(f"{'    ' + l.name:<24}{l.cycles:>26,}{self.seconds(l.cycles):>28.5f}{'':>40}{util}")
        lines.append(f" * The clock frequency of the DL processor is: {self.clock_mhz:g}MHz")
        lines.append(f" * MAC util. = multiply-accumulates / (cycles x {self.c}x{self.c} MAC array)")
        act = self.mac_activity
        if act is not None and self.last_frame_cycles:
            cyc = self.last_frame_cycles
            fc = (f", FC lanes {act.fc_cycles:,} cycles x {act.fc_lanes} MACs ({100 * act.fc_cycles / cyc:.1f}%)"
                  if act.fc_lanes else "")
            lines.append(f" * Measured (MAC_ACTIVE, FC_MAC_ACTIVE): MAC array {act.conv_cycles:,} cycles "
                         f"({100 * act.conv_cycles / cyc:.1f}%){fc}; issued MACs / (cycles x {self.c}x{self.c}) "
                         f"= {100 * self.issued_utilization:.1f}%")
        return "\n".join(lines)

    def _network_util(self) -> float:
        macs = sum(l.macs for l in self.layers)
        return 100.0 * macs / (self.last_frame_cycles * self.c * self.c) if self.last_frame_cycles else 0.0

    def __str__(self) -> str:
        return self.table()


def layer_cycles(cn: Any, marks: list[int] | None, frame_cycles: int | None, target: str, frames: int,
                 total_cycles: int | None, mac_activity: MacActivity | None = None) -> ProfileResult:
    """Turn the latched MARK values (cycles since START, one per profile entry) into a profile;
    ``mac_activity`` is the last frame's MAC counters where the target reads them."""
    layers = []
    prev = 0
    for entry in cn.profile:
        name = entry.layers[0] if len(entry.layers) == 1 else f"{entry.layers[0]}>>{entry.layers[-1]}"
        if marks is None:
            layers.append(LayerProfile(name, None, entry.macs))
            continue
        cycles = marks[entry.index] - prev
        prev = marks[entry.index]
        util = entry.macs / (cycles * cn.c * cn.c) if cycles > 0 and entry.macs else None
        layers.append(LayerProfile(name, cycles, entry.macs, util))
    return ProfileResult(target, cn.clock_mhz, cn.c, frames, frame_cycles, total_cycles, layers, mac_activity)
