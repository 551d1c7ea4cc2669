"""The estimator's reports: per profiled layer group, like the hardware profiler (MATLAB's
``estimatePerformance`` table), and per hardware layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlproc.estimate.machine import Timeline, simulate_program
from dlproc.estimate.timing import EstimateError, TimingParams, timing_for


TITLE = "Deep Learning Processor Estimator Performance Results"
#: A layer is bound by compute or memory when that resource is busy for at least this fraction of
#: its cycles; otherwise latencies, token waits and instruction overheads dominate ("control").
BOUND_THRESHOLD = 0.6


@dataclass
class LayerPerf:
    """One row of the estimate: a layer (or a profiled layer group)."""

    name: str
    type: str
    cycles: int
    seconds: float
    macs: int
    utilization: float  #: macs / (cycles * C * C)
    gops: float  #: 2 * macs / seconds / 1e9 (one MAC = two operations)
    bound: str  #: "compute", "memory" or "control"
    layers: list[str] = field(default_factory=list)


@dataclass
class PerformanceReport:
    """What ``estimate_performance`` returns; ``table()`` prints MATLAB's layout."""

    network: str
    clock_mhz: float
    c: int
    frames: int
    cycles: int  #: LastFrameLatency(cycles)
    layers: list[LayerPerf]
    macs: int
    timeline: Timeline | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return self.c * self.c

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)

    @property
    def total_cycles(self) -> int:
        """Total Latency: the frames run back to back, each with the same latency."""
        return self.cycles * self.frames

    @property
    def fps(self) -> float:
        return self.frames * self.clock_mhz * 1e6 / self.total_cycles if self.total_cycles else 0.0

    @property
    def utilization(self) -> float:
        return self.macs / (self.cycles * self.threads) if self.cycles else 0.0

    @property
    def gops(self) -> float:
        return 2 * self.macs / self.seconds / 1e9 if self.cycles else 0.0

    def to_json(self) -> dict[str, Any]:
        """The ``dlproc estimate --json`` document."""
        return {
            "layers": [{"name": l.name, "type": l.type, "cycles": l.cycles, "utilization": round(l.utilization, 6)}
                       for l in self.layers],
            "total": {"cycles": self.cycles, "fps": round(self.fps, 6), "macs": self.macs},
        }

    def table(self) -> str:
        """MATLAB's estimatePerformance table plus GOP/s, MAC utilization and the bound."""
        name_w = max([24] + [len(l.name) + 6 for l in self.layers])
        head = (f"{'':<{name_w}}{'LastFrameLatency(cycles)':>26}{'LastFrameLatency(seconds)':>28}{'FramesNum':>12}"
                f"{'Total Latency':>16}{'Frames/s':>12}{'GOP/s':>9}{'MAC util.':>11}{'Bound':>10}")
        lines = [f"              {TITLE}", "", head,
                 f"{'Network':<{name_w}}{self.cycles:>26,}{self.seconds:>28.5f}{self.frames:>12}"
                 f"{self.total_cycles:>16,}{self.fps:>12.1f}{self.gops:>9.1f}{100 * self.utilization:>10.1f}%"
                 f"{self._network_bound():>10}"]
        for l in self.layers:
            lines.append(f"{'    ' + l.name:<{name_w}}{l.cycles:>26,}{l.seconds:>28.5f}{'':>40}{l.gops:>9.1f}"
                         f"{100 * l.utilization:>10.1f}%{l.bound:>10}")
        lines.append(f" * The clock frequency of the DL processor is: {self.clock_mhz:g}MHz")
        lines.append(f" * MAC util. = multiply-accumulates / (cycles x {self.c}x{self.c} MAC array); "
                     f"GOP/s counts a MAC as 2 operations")
        lines.append(" * Bound: the unit busy for most of the layer's cycles (compute = MAC array, memory = DDR "
                     "transfers, control = latency, token waits and instruction overheads)")
        lines.extend(f" * {n}" for n in self.notes)
        return "\n".join(lines)

    def _network_bound(self) -> str:
        if not self.layers:
            return ""
        by: dict[str, int] = {}
        for l in self.layers:
            by[l.bound] = by.get(l.bound, 0) + l.cycles
        return max(by, key=by.get)

    def __str__(self) -> str:
        return self.table()


def layer_bound(work: tuple[float, float], t0: float, t1: float) -> str:
    span = max(t1 - t0, 1.0)
    comp, mem = work[0] / span, work[1] / span
    if max(comp, mem) < BOUND_THRESHOLD:
        return "control"
    return "compute" if comp >= mem else "memory"


def layer_row(tl: Timeline, name: str, kind: str, t0: float, t1: float, macs: int, clock_mhz: float,
               layers: list[str], work: tuple[float, float] | None = None) -> LayerPerf:
    cycles = int(round(t1 - t0))
    seconds = cycles / (clock_mhz * 1e6)
    util = macs / (cycles * tl.c * tl.c) if cycles > 0 else 0.0
    gops = 2 * macs / seconds / 1e9 if cycles > 0 else 0.0
    if work is None:
        w = tl.window(t0, t1)
        work = (w["compute"], w["memory"])
    return LayerPerf(name, kind, cycles, seconds, macs, util, gops, layer_bound(work, t0, t1), layers)


def estimate_compiled(cn: Any, config: Any = None, *, frames: int = 1,
                      timing: TimingParams | None = None) -> PerformanceReport:
    """Estimate a :class:`dlproc.compiler.CompiledNetwork` (per profiled layer group, like the
    hardware profiler: entry k spans from MARK k-1 to MARK k)."""
    if frames < 1:
        raise EstimateError(f"frames must be >= 1, got {frames}")
    config = config or cn.processor_config()
    tp = timing or timing_for(config)
    insn_base = cn.memory_map.addr("InstructionDataOffset")
    tl = simulate_program(config, cn.instructions, insn_base=insn_base, timing=tp)
    ops = {l.name: l.op for l in cn.layers}
    bounds = [0.0]
    for entry in cn.profile:
        t1 = tl.marks.get(entry.index)
        if t1 is None:
            raise EstimateError(f"profile entry {entry.index} has no MARK in the instruction stream")
        bounds.append(t1)
    work = tl.work_per_interval(bounds)
    rows = []
    for k, entry in enumerate(cn.profile):
        name = entry.layers[0] if len(entry.layers) == 1 else f"{entry.layers[0]}>>{entry.layers[-1]}"
        kind = "+".join(dict.fromkeys(ops.get(n, "?") for n in entry.layers))
        rows.append(layer_row(tl, name, kind, bounds[k], bounds[k + 1], int(entry.macs), tp.clock_mhz,
                               list(entry.layers), work[k]))
    macs = sum(int(l.macs) for l in cn.layers if l.hw)
    notes = []
    sw = [l.name for l in cn.layers if not l.hw and l.op not in ("input",)]
    if sw:
        notes.append("not included (run on the host): " + ", ".join(sw))
    return PerformanceReport(cn.name, tp.clock_mhz, tp.c, frames, tl.cycles, rows, macs, tl, notes)


def layer_breakdown(cn: Any, timeline: Timeline) -> list[dict[str, Any]]:
    """Per hardware layer of a compiled network (finer than the profile entries, which the
    profile buffer's depth may merge): cycles from the previous layer's last completed store or
    compute instruction to this layer's, its MACs and MAC utilization, in program order (which the
    compiler may change from network order). Consecutive layers can overlap (a weak join lets the
    next one load while this one's stores drain), so a row is the time by which this layer
    extends the run; a layer that finishes before the one before it gets 0. The rows add up to
    the network."""
    rows: list[dict[str, Any]] = []
    prev = 0.0
    c2 = timeline.c * timeline.c
    for layer in sorted(cn.layers, key=lambda e: e.insn_first):
        if not layer.hw or layer.insn_count == 0:
            continue
        span = range(layer.insn_first, layer.insn_first + layer.insn_count)
        # A layer ends with its last store or compute; LOADs at its end may be the next layer's
        # prefetched weights (dlproc.compiler.program).
        ends = [timeline.end[i] for i in span if timeline.unit[i] != "load"]
        end = max(ends) if ends else max(timeline.end[i] for i in span)
        cycles = int(round(max(end, prev) - prev))
        prev = max(prev, end)
        rows.append({"layer": layer.name, "op": layer.op, "cycles": cycles, "macs": int(layer.macs),
                     "utilization": layer.macs / (cycles * c2) if cycles > 0 else 0.0})
    return rows


def estimate_layer_program(config: Any, prog: Any, *, name: str = "layer", kind: str = "conv",
                           timing: TimingParams | None = None) -> PerformanceReport:
    """Estimate a :class:`dlproc.compiler.layerprog.LayerProgram` (one row for the whole layer)."""
    tp = timing or timing_for(config)
    tl = simulate_program(config, prog.instructions, insn_base=prog.insn_base, timing=tp)
    macs = int(getattr(prog.plan, "macs", 0) or 0)
    row = layer_row(tl, name, kind, 0.0, float(tl.cycles), macs, tp.clock_mhz, [name])
    return PerformanceReport(name, tp.clock_mhz, tp.c, 1, tl.cycles, [row], macs, tl)


