"""Design-space exploration: sweep configuration properties, estimate each point, pick the best.

    from dlproc.estimate.explore import explore
    result = explore(qnet, base_config, {"conv.ConvThreadNumber": ["64", "256"],
                                         "conv.InputMemorySize": ["28x28x64", "56x56x64"]}, jobs=2)
    print(result.table()); result.plot("pareto.png"); result.best

Every combination of the sweep values is applied to a copy of the base configuration, the
network is compiled for it and timed by the performance estimator, and its resources are
estimated (:func:`dlproc.estimate.resources.estimate_resources`) against the board's device. The
combinations run in parallel in a ``concurrent.futures.ProcessPoolExecutor``. A value the
property does not allow, or a network that cannot be compiled for a configuration, makes that
combination *invalid* with the reason; the sweep goes on. The best configuration is the one with
the most frames per second among those that fit the device.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from dlproc import progress as bars
from dlproc.errors import ConfigError, DlprocError

__all__ = ["Point", "ExploreResult", "parse_sweep", "explore", "pareto_front"]


@dataclass
class Point:
    """One evaluated combination of sweep values."""

    assignments: dict[str, str]
    valid: bool = False
    reason: str = ""
    cycles: int = 0
    fps: float = 0.0
    utilization: float = 0.0
    dsp: int = 0
    alms: int = 0
    ram: int = 0
    fits: bool = False
    problems: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None  #: ProcessorConfig.to_dict() of a valid point

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.assignments.items())


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``module.Property=v1,v2,...`` -> (name, values). A list value is written with brackets
    (``[28,28,64]``) or as ``28x28x64``; commas inside brackets do not separate values."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name or "." not in name:
        raise ConfigError(f"--sweep {text!r} is malformed: write module.Property=v1,v2,... "
                          "(e.g. conv.ConvThreadNumber=64,256)")
    out, depth, cur = [], 0, ""
    for ch in values:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    out = [v for v in out if v]
    if not out:
        raise ConfigError(f"--sweep {text!r} gives no values")
    return name, out


def _evaluate(base: dict[str, Any], assignments: dict[str, str], network: Any, device: str | None) -> Point:
    """One combination (runs in a worker process)."""
    from dlproc.compiler import compile_network
    from dlproc.config import ProcessorConfig
    from dlproc.estimate.resources import estimate_resources

    from dlproc.estimate.report import estimate_compiled

    point = Point(dict(assignments))
    try:
        cfg = ProcessorConfig.from_dict(base, source="explore base")
        cfg.update([(*name.split(".", 1), value) for name, value in assignments.items()])
    except DlprocError as exc:
        point.reason = f"configuration: {exc}"
        return point
    try:
        res = estimate_resources(cfg, device)
        point.dsp, point.alms, point.ram = res.dsp, res.alms_effective, res.ram
        point.fits, point.problems = res.fits, res.problems()
    except DlprocError as exc:
        point.reason = f"resources: {exc}"
        return point
    try:
        cn = compile_network(network, cfg)
        rep = estimate_compiled(cn, cfg)
    except DlprocError as exc:
        point.reason = f"compile: {exc}"
        return point
    point.valid = True
    point.cycles, point.fps, point.utilization = rep.cycles, rep.fps, rep.utilization
    point.config = cfg.to_dict()
    return point


@dataclass
class ExploreResult:
    network: str
    device: str
    points: list[Point]

    @property
    def best(self) -> Point | None:
        """The fastest valid point that fits the device."""
        ok = [p for p in self.points if p.valid and p.fits]
        return max(ok, key=lambda p: (p.fps, -p.dsp, -p.alms, -p.ram)) if ok else None

    def table(self) -> str:
        names = list(self.points[0].assignments) if self.points else []
        widths = [max(len(n), *(len(p.assignments[n]) for p in self.points)) + 2 for n in names]
        head = "".join(f"{n:<{w}}" for n, w in zip(names, widths))
        lines = [f"Design-space exploration of {self.network!r} on {self.device}", "",
                 head + f"{'cycles':>12}{'Frames/s':>11}{'MAC util.':>11}{'DSP':>7}{'ALMs':>9}{'RAM':>7}  verdict"]
        best = self.best
        for p in self.points:
            cells = "".join(f"{p.assignments[n]:<{w}}" for n, w in zip(names, widths))
            if not p.valid and not p.dsp:
                lines.append(cells + f"{'':>58}  invalid: {p.reason}")
                continue
            verdict = "fits" if p.fits else "does not fit: " + "; ".join(p.problems)
            perf = f"{p.cycles:>12,}{p.fps:>11.1f}{100 * p.utilization:>10.1f}%"
            if not p.valid:
                verdict, perf = f"invalid: {p.reason}", f"{'-':>12}{'-':>11}{'-':>11}"
            mark = "  <- fastest that fits" if p is best else ""
            lines.append(cells + f"{perf}{p.dsp:>7,}{p.alms:>9,}{p.ram:>7,}  {verdict}{mark}")
        lines.append("")
        lines.append(f"Fastest configuration that fits: {best.label} ({best.fps:.1f} frames/s)" if best
                     else "No valid configuration fits the device.")
        return "\n".join(lines)

    def plot(self, path: str | Path) -> Path:
        """Frames/s against DSP blocks and against ALMs (PNG); the Pareto points are joined."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        valid = [p for p in self.points if p.valid]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, key, label in ((axes[0], "dsp", "DSP blocks"), (axes[1], "alms", "ALMs")):
            for fits, colour in ((True, "tab:blue"), (False, "tab:red")):
                pts = [p for p in valid if p.fits == fits]
                ax.scatter([getattr(p, key) for p in pts], [p.fps for p in pts], c=colour,
                           label="fits" if fits else "does not fit")
            front = pareto_front(valid, key)
            ax.plot([getattr(p, key) for p in front], [p.fps for p in front], "k--", lw=1, label="Pareto front")
            best = self.best
            if best is not None:
                ax.scatter([getattr(best, key)], [best.fps], s=160, facecolors="none", edgecolors="green",
                           label="fastest that fits")
            ax.set_xlabel(label)
            ax.set_ylabel("frames/s")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{self.network} on {self.device}")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


def pareto_front(points: Sequence[Point], key: str) -> list[Point]:
    """Points not dominated in (fewer ``key`` resources, more frames/s), sorted by the resource."""
    front = []
    best_fps = -1.0
    for p in sorted(points, key=lambda q: (getattr(q, key), -q.fps)):
        if p.fps > best_fps:
            front.append(p)
            best_fps = p.fps
    return front


def explore(network: Any, base_config: Any, sweeps: dict[str, list[str]], *, device: str | None = None,
            jobs: int = 1, progress: Callable[[Point], None] | None = None) -> ExploreResult:
    """Evaluate every combination of ``sweeps`` (property name -> values) on ``base_config``.

    ``network`` is a quantized network (a float one is quantized once, with synthetic
    calibration data); ``device`` a part or board name (default: the configuration's board).
    """
    from dlproc.ir import Network

    from dlproc.estimate.performance import synthetic_quantize

    from dlproc.compiler import CompiledNetwork

    if isinstance(network, CompiledNetwork):
        raise ConfigError(f"network {network.name!r} is already compiled for one configuration; explore needs "
                          "the float (.onnx, .cfg) or quantized (.dlq) network to compile it for every point")
    if isinstance(network, Network):
        network = synthetic_quantize(network)
    if not sweeps:
        raise ConfigError("nothing to explore: give at least one sweep (module.Property=v1,v2,...)")
    names = list(sweeps)
    combos = [dict(zip(names, values)) for values in itertools.product(*(sweeps[n] for n in names))]
    base = base_config.to_dict()
    dev = device or base_config.board
    points: list[Point] = []

    def done(point: Point) -> None:
        points.append(point)
        shown.update(1)
        if progress:
            progress(point)

    with bars.bar(len(combos), f"exploring {len(combos)} configurations of {getattr(network, 'name', 'network')}",
                  "point") as shown:
        if jobs <= 1:
            for combo in combos:
                done(_evaluate(base, combo, network, dev))
        else:
            with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(_evaluate, base, combo, network, dev) for combo in combos]
                for combo, fut in zip(combos, futures):
                    try:
                        done(fut.result())
                    except Exception as exc:  # a crashed worker must not end the sweep
                        done(Point(dict(combo), reason=f"internal error: {type(exc).__name__}: {exc}"))
    from dlproc.estimate.resources import estimate_resources

    device_name = estimate_resources(base_config, dev).device.name
    return ExploreResult(getattr(network, "name", "network"), device_name, points)
