"""The figures of a report, computed from the estimator, the resource estimator and a profile.

Nothing here re-derives a cycle count: the per-layer rows are
:func:`dlproc.estimate.performance.layer_breakdown` of the estimator's timeline, the per-group rows
are :func:`~dlproc.estimate.performance.estimate_compiled`'s, and the resources are
:func:`dlproc.estimate.resources.estimate_resources`. This module only splits and joins them:

* **what bounds a layer**: the layer's cycles T are split into *compute* (MAC-array issue cycles
  inside the layer, at most T), *DDR* (memory-transfer cycles beyond what overlaps the compute,
  at most what is left) and *fixed cost* (the rest: DDR latency, token waits, instruction
  overheads, pipeline drains). The three add up to T, so they stack;
* **roofline**: operational intensity = MACs per DRAM byte the layer moves; the roofs are the
  array's peak (C x C MACs per cycle) and DDRBytesPerCycle x intensity;
* **estimate vs RTL**: the profiler's entries (MARK intervals) and the estimator's rows are the
  same intervals of the same program, matched by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlproc.errors import DlprocError

__all__ = ["LayerFigures", "GroupFigures", "ReportData", "collect", "profile_cycles"]

#: The board whose device a configuration without a board (generic) is measured against.
DEFAULT_BOARD = "de10-nano"


@dataclass
class LayerFigures:
    """One hardware layer in program order (estimator)."""

    name: str
    op: str
    cycles: int
    macs: int
    utilization: float
    compute: float  #: cycles the MAC array issues (<= cycles)
    ddr: float  #: DDR cycles not hidden under compute
    fixed: float  #: the rest of the cycles
    dram_bytes: float

    @property
    def intensity(self) -> float | None:
        """MACs per DRAM byte (None for a layer without MACs or without traffic)."""
        return self.macs / self.dram_bytes if self.macs and self.dram_bytes else None

    @property
    def macs_per_cycle(self) -> float:
        return self.macs / self.cycles if self.cycles else 0.0


@dataclass
class GroupFigures:
    """One profile entry (MARK interval): estimate and, where profiled, the RTL's cycles."""

    name: str
    estimate: int
    rtl: int | None = None

    @property
    def error(self) -> float | None:
        """(estimate - RTL) / RTL."""
        return (self.estimate - self.rtl) / self.rtl if self.rtl else None


@dataclass
class ReportData:
    network: str
    config_name: str
    config_hash: str
    clock_mhz: float
    c: int
    ddr_bytes_per_cycle: float
    cycles: int
    fps: float
    utilization: float
    bound: str
    layers: list[LayerFigures]
    groups: list[GroupFigures]
    resources: Any  #: dlproc.estimate.resources.ResourceTable
    rtl_cycles: int | None = None
    rtl_target: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.c * self.c


def _split(cycles: int, compute: float, memory: float) -> tuple[float, float, float]:
    comp = min(compute, float(cycles))
    ddr = min(max(memory - comp, 0.0), cycles - comp)
    return comp, ddr, cycles - comp - ddr


def profile_cycles(profile: Any) -> tuple[dict[str, int], int | None, str | None]:
    """Per-entry cycles, frame cycles and target of a ProfileResult or of its JSON form
    (``dlproc predict --json --profile``: the whole document or its ``profile`` member)."""
    if profile is None:
        return {}, None, None
    if hasattr(profile, "layers") and hasattr(profile, "last_frame_cycles"):
        return ({l.name: l.cycles for l in profile.layers if l.cycles is not None}, profile.last_frame_cycles,
                profile.target)
    if isinstance(profile, dict):
        doc = profile.get("profile", profile)
        try:
            layers = {str(l["name"]): l["cycles"] for l in doc["layers"]}
            total = doc.get("total", {}).get("cycles")
        except (KeyError, TypeError, AttributeError):
            raise DlprocError("the profile is not the JSON of `dlproc predict --profile --json` (expected "
                              '{"profile": {"layers": [{"name", "cycles"}], "total": {"cycles"}}})') from None
        return {k: int(v) for k, v in layers.items() if v is not None}, total, doc.get("target")
    raise DlprocError(f"a profile must be a ProfileResult or its JSON, not {type(profile).__name__}")


def collect(cn: Any, config: Any = None, *, profile: Any = None, config_name: str = "") -> ReportData:
    """The figures of compiled network ``cn`` on ``config`` (default: the one it was compiled for)."""
    from dlproc.estimate.report import estimate_compiled, layer_breakdown
    from dlproc.estimate.resources import estimate_resources

    config = config or cn.processor_config()
    if cn.config_hash != config.config_hash():
        raise DlprocError(f"network {cn.name!r} was compiled for configuration {cn.config_hash[:12]}, not for "
                          f"{config.config_hash()[:12]}; recompile it or omit the configuration")
    rep = estimate_compiled(cn, config)
    tl = rep.timeline
    rows = layer_breakdown(cn, tl)
    bounds = [0.0]
    for r in rows:
        bounds.append(bounds[-1] + r["cycles"])
    work = tl.work_per_interval(bounds) if rows else []
    bus_bytes = cn.bus_bytes
    layers = []
    for r, (comp, mem) in zip(rows, work):
        c, d, f = _split(r["cycles"], comp, mem)
        # mem is in cycles at the DDR's beat rate; back to bytes for the roofline.
        layers.append(LayerFigures(r["layer"], r["op"], r["cycles"], r["macs"], r["utilization"], c, d, f,
                                   mem * tl.bus_rate * bus_bytes))
    measured, rtl_total, target = profile_cycles(profile)
    groups = [GroupFigures(l.name, l.cycles, measured.get(l.name)) for l in rep.layers]
    notes = list(rep.notes)
    if measured and not any(g.rtl is not None for g in groups):
        raise DlprocError("the profile's layer names match none of the network's profile entries "
                          f"({', '.join(g.name for g in groups)}); was it measured on this network?")
    board = config.board if config.board != "generic" else DEFAULT_BOARD
    if board != config.board:
        notes.append(f"the configuration has no board; resources are shown against the {board}'s device")
    resources = estimate_resources(config, board, name=config_name)
    return ReportData(cn.name, config_name, config.config_hash(), rep.clock_mhz, rep.c,
                      float(config.ddr_bytes_per_cycle), rep.cycles, rep.fps, rep.utilization, rep._network_bound(),
                      layers, groups, resources, rtl_total, target, notes)
