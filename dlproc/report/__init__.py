"""``dlproc report``: one self-contained HTML file (plus PNGs) for a compiled network and a
configuration: per-layer cycles stacked by what bounds them, MAC utilization, a roofline, estimate
against RTL where a profile is given, resources against the device, and for an exploration the
Pareto front of frames/s against DSP blocks, RAM blocks and ALMs.

    from dlproc.report import write_report, write_explore_report
    write_report("r.html", cn, config, profile=prof)          # prof: ProfileResult or its JSON
    write_explore_report("e.html", result, qnet)              # result: dlproc.estimate.explore

The figures come from :mod:`dlproc.report.model` (the estimator and resource estimator), the
plots from :mod:`dlproc.report.plots` (matplotlib), the page from :mod:`dlproc.report.html`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlproc.report.html import Section, explore_section, network_sections, write_html
from dlproc.report.model import ReportData, collect

__all__ = ["write_report", "write_explore_report", "collect", "ReportData"]


def write_report(path: str | Path, cn: Any, config: Any = None, *, profile: Any = None,
                 config_name: str = "") -> Path:
    data = collect(cn, config, profile=profile, config_name=config_name)
    return write_html(path, f"dlproc report: {data.network}", network_sections(data))


def write_explore_report(path: str | Path, result: Any, network: Any = None) -> Path:
    """The Pareto section, then (with the quantized ``network``) the full report of the fastest
    configuration that fits."""
    sections: list[Section] = [explore_section(result)]
    best = result.best
    if best is not None and network is not None and best.config is not None:
        from dlproc.compiler import compile_network
        from dlproc.config import ProcessorConfig

        cfg = ProcessorConfig.from_dict(best.config, source="the fastest explored configuration")
        data = collect(compile_network(network, cfg), cfg, config_name=best.label)
        for s in network_sections(data):
            s.title = f"{s.title} (fastest that fits: {best.label})"
            sections.append(s)
    return write_html(path, f"dlproc explore: {result.network} on {result.device}", sections)
