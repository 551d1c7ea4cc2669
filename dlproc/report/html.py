"""One self-contained HTML file: the plots are embedded as data: URIs (the file can be mailed or
opened from anywhere) and also written as PNG files next to it (for slides and docs)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dlproc.errors import DlprocError

from dlproc.report import plots
from dlproc.report.model import ReportData

__all__ = ["Section", "write_html", "network_sections", "explore_section", "check_report_path"]

STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 75em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
.note { color: #555; font-size: 0.9em; }
"""


@dataclass
class Section:
    title: str
    plot: str | None = None  #: name of the PNG (without extension)
    png: bytes | None = None
    html: str = ""  #: table or text under the plot (already escaped)
    notes: list[str] = field(default_factory=list)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _plot(name: str, title: str, draw: Callable[[], bytes], table: str = "", notes: list[str] | None = None) -> Section:
    return Section(title, name, draw(), table, notes or [])


def network_sections(data: ReportData) -> list[Section]:
    layer_rows = [[l.name, l.op, f"{l.cycles:,}", f"{l.compute:,.0f}", f"{l.ddr:,.0f}", f"{l.fixed:,.0f}",
                   f"{l.macs:,}", f"{100 * l.utilization:.1f} %",
                   f"{l.intensity:.2f}" if l.intensity else "-"] for l in data.layers]
    sections = [
        Section("Summary", html=_table(
            ["network", "configuration", "clock", "MAC array", "cycles / frame", "frames/s", "MAC util.", "bound"],
            [[data.network, f"{data.config_name or 'compiled'} ({data.config_hash[:12]})", f"{data.clock_mhz:g} MHz",
              f"{data.c}x{data.c}", f"{data.cycles:,}", f"{data.fps:,.1f}", f"{100 * data.utilization:.1f} %",
              data.bound]]), notes=data.notes),
        _plot("cycles", "Per-layer cycles by what bounds them", lambda: plots.cycles_by_bound(data),
              _table(["layer", "op", "cycles", "compute", "DDR", "fixed", "MACs", "MAC util.", "MACs/byte"],
                     layer_rows),
              ["compute = MAC-array issue cycles; DDR = transfer cycles not overlapped by compute; fixed = the rest "
               "(DDR latency, dependency-token waits, instruction overheads). Estimator timeline "
               "(dlproc.estimate.layer_breakdown), program order."]),
        _plot("utilization", "MAC utilization per layer", lambda: plots.utilization(data)),
        _plot("roofline", "Roofline", lambda: plots.roofline(data), notes=[
            f"Roofs: the {data.c}x{data.c} array's {data.peak_macs_per_cycle} MACs per cycle and "
            f"DDRBytesPerCycle = {data.ddr_bytes_per_cycle:g} bytes per cycle."]),
    ]
    if any(g.rtl is not None for g in data.groups):
        rows = [[g.name, f"{g.estimate:,}", f"{g.rtl:,}" if g.rtl is not None else "-",
                 f"{100 * g.error:+.1f} %" if g.error is not None else "-"] for g in data.groups]
        total_err = ((data.cycles - data.rtl_cycles) / data.rtl_cycles) if data.rtl_cycles else None
        rows.append(["network", f"{data.cycles:,}", f"{data.rtl_cycles:,}" if data.rtl_cycles else "-",
                     f"{100 * total_err:+.1f} %" if total_err is not None else "-"])
        sections.append(_plot("estimate_vs_rtl", "Estimate against the RTL", lambda: plots.estimate_vs_rtl(data),
                              _table(["MARK interval", "estimate", "RTL", "error"], rows)))
    res = data.resources
    d = res.device
    res_rows = [[r.name, f"{r.dsp:,}", f"{r.ram:,}", f"{r.alms:,}", r.note] for r in res.generated_rows]
    res_rows.append(["total", f"{res.dsp:,}", f"{res.ram:,}", f"{res.alms_effective:,}",
                     "fits" if res.fits else "DOES NOT FIT: " + "; ".join(res.problems())])
    res_rows.append(["available", f"{d.dsp_blocks:,}", f"{d.ram_blocks:,}", f"{d.alms:,}", d.name])
    sections.append(_plot("resources", "Resources against the device", lambda: plots.resources(data),
                          _table(["module", "DSP blocks", f"{d.ram_block} blocks", "ALMs", "note"], res_rows)))
    return sections


def explore_section(result: Any) -> Section:
    best = result.best
    rows = []
    for p in result.points:
        verdict = ("invalid: " + p.reason) if not p.valid else ("fits" if p.fits else "does not fit")
        rows.append([p.label, f"{p.fps:,.1f}" if p.valid else "-", f"{p.dsp:,}", f"{p.ram:,}", f"{p.alms:,}",
                     verdict + ("  <- fastest that fits" if p is best else "")])
    if not any(p.valid for p in result.points):
        raise DlprocError("no valid point to plot: every combination of the sweep is invalid")
    return _plot("pareto", f"Design-space exploration: Pareto front on {result.device}",
                 lambda: plots.pareto(result.points, result.device, best),
                 _table(["configuration", "frames/s", "DSP", "RAM", "ALMs", "verdict"], rows))


def check_report_path(path: str | Path) -> Path:
    """Refuse a report name that is not .html before any long work is done."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise DlprocError(f"report file {str(path)!r} must end in .html")
    return path


def write_html(path: str | Path, title: str, sections: list[Section]) -> Path:
    """Write ``path`` and one ``<stem>_<plot>.png`` per plot next to it; returns ``path``."""
    path = check_report_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.png is not None:
            (path.parent / f"{path.stem}_{s.plot}.png").write_bytes(s.png)
            uri = "data:image/png;base64," + base64.b64encode(s.png).decode()
            parts.append(f"<img class='plot' id='plot-{s.plot}' alt='{html.escape(s.title)}' src='{uri}'>")
        parts.append(s.html)
        parts.extend(f"<p class='note'>{html.escape(n)}</p>" for n in s.notes)
    parts.append("<p class='note'>Generated by dlproc report.</p></body></html>")
    path.write_text("\n".join(parts))
    return path
