"""The report's plots (matplotlib, Agg backend: no display needed). Each function draws one figure
and returns it as PNG bytes, so the HTML can embed it and the caller can write it as a file."""

from __future__ import annotations

import io
from typing import Any, Sequence

from dlproc.report.model import ReportData

__all__ = ["cycles_by_bound", "utilization", "roofline", "estimate_vs_rtl", "resources", "pareto"]

COLOURS = {"compute": "#4c72b0", "ddr": "#dd8452", "fixed": "#937860", "estimate": "#4c72b0", "rtl": "#55a868"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # headless: the report is written on build machines and in CI
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    _pyplot().close(fig)
    return buf.getvalue()


def _names(data: ReportData) -> list[str]:
    return [l.name for l in data.layers]


def cycles_by_bound(data: ReportData) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(data.layers) + 2), 4))
    x = range(len(data.layers))
    bottom = [0.0] * len(data.layers)
    for key, label in (("compute", "compute (MAC array)"), ("ddr", "DDR (not hidden by compute)"),
                       ("fixed", "fixed cost (latency, tokens, overheads)")):
        values = [getattr(l, key) for l in data.layers]
        ax.bar(x, values, bottom=bottom, color=COLOURS[key], label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(list(x), _names(data), rotation=45, ha="right")
    ax.set_ylabel("cycles (estimate)")
    ax.set_title(f"Per-layer cycles by bound, {data.network} ({data.cycles:,} cycles per frame)")
    ax.legend(fontsize=8)
    return _png(fig)


def utilization(data: ReportData) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(data.layers) + 2), 3.5))
    ax.bar(range(len(data.layers)), [100 * l.utilization for l in data.layers], color=COLOURS["compute"])
    ax.axhline(100 * data.utilization, color="k", ls="--", lw=1, label=f"network {100 * data.utilization:.1f} %")
    ax.set_xticks(range(len(data.layers)), _names(data), rotation=45, ha="right")
    ax.set_ylabel(f"MAC utilization (%) of {data.c}x{data.c}")
    ax.set_ylim(0, 100)
    ax.set_title("MAC utilization per layer (estimate)")
    ax.legend(fontsize=8)
    return _png(fig)


def roofline(data: ReportData) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    points = [l for l in data.layers if l.intensity]
    peak, bw = data.peak_macs_per_cycle, data.ddr_bytes_per_cycle
    lo = min([p.intensity for p in points] + [peak / bw / 10])
    hi = max([p.intensity for p in points] + [peak / bw * 10])
    xs = [lo / 2, peak / bw, hi * 2]
    ax.plot(xs, [min(peak, x * bw) for x in xs], "k-", lw=1.5, label=f"roof: {peak} MACs/cycle, {bw:g} B/cycle")
    for p in points:
        ax.scatter([p.intensity], [p.macs_per_cycle], s=40, zorder=3)
        ax.annotate(p.name, (p.intensity, p.macs_per_cycle), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (MACs per DRAM byte)")
    ax.set_ylabel("MACs per cycle")
    ax.set_title("Roofline of the layers (estimate)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def estimate_vs_rtl(data: ReportData) -> bytes:
    plt = _pyplot()
    groups = data.groups
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(groups) + 2), 3.8))
    x = list(range(len(groups)))
    ax.bar([i - 0.2 for i in x], [g.estimate for g in groups], 0.4, color=COLOURS["estimate"], label="estimate")
    ax.bar([i + 0.2 for i in x], [g.rtl or 0 for g in groups], 0.4, color=COLOURS["rtl"],
           label=f"RTL ({data.rtl_target or 'profile'})")
    for i, g in enumerate(groups):
        if g.error is not None:
            ax.annotate(f"{100 * g.error:+.1f}%", (i, max(g.estimate, g.rtl or 0)), ha="center", fontsize=8,
                        xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(x, [g.name for g in groups], rotation=45, ha="right")
    ax.set_ylabel("cycles")
    ax.set_title("Estimate against the RTL profile (per MARK interval)")
    ax.legend(fontsize=8)
    return _png(fig)


def resources(data: ReportData) -> bytes:
    plt = _pyplot()
    table = data.resources
    d = table.device
    fig, ax = plt.subplots(figsize=(7, 3.2))
    kinds = [("dsp", "DSP blocks", table.dsp, d.dsp_blocks), ("ram", f"{d.ram_block} blocks", table.ram, d.ram_blocks),
             ("alm", "ALMs", table.alms_effective, d.alms)]
    for i, (_key, label, used, avail) in enumerate(kinds):
        pct = 100.0 * used / avail
        ax.barh(i, min(pct, 100), color="#c44e52" if pct > 100 else COLOURS["compute"])
        ax.text(min(pct, 100) + 1, i, f"{used:,} / {avail:,} ({pct:.1f} %)", va="center", fontsize=8)
    ax.axvline(100, color="k", lw=1)
    ax.set_yticks(range(len(kinds)), [k[1] for k in kinds])
    ax.set_xlim(0, 130)
    ax.set_xlabel(f"% of the {d.name} ({d.family})")
    ax.set_title("Resources against the device (estimate)")
    return _png(fig)


def pareto(points: Sequence[Any], device: str, best: Any = None) -> bytes:
    """Frames/s against DSP blocks, RAM blocks and ALMs for the valid points of an exploration."""
    from dlproc.estimate.explore import pareto_front

    plt = _pyplot()
    valid = [p for p in points if p.valid]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, key, label in zip(axes, ("dsp", "ram", "alms"), ("DSP blocks", "RAM blocks (M10K/M20K)", "ALMs")):
        for fits, colour in ((True, COLOURS["compute"]), (False, "#c44e52")):
            pts = [p for p in valid if p.fits == fits]
            ax.scatter([getattr(p, key) for p in pts], [p.fps for p in pts], c=colour,
                       label="fits" if fits else "does not fit")
        front = pareto_front(valid, key)
        ax.plot([getattr(p, key) for p in front], [p.fps for p in front], "k--", lw=1, label="Pareto front")
        if best is not None:
            ax.scatter([getattr(best, key)], [best.fps], s=160, facecolors="none", edgecolors="green",
                       label="fastest that fits")
        ax.set_xlabel(label)
        ax.set_ylabel("frames/s")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Design-space exploration on {device}")
    return _png(fig)
