"""``verilator --lint-only -Wall`` on generated Verilog, with the documented generator waivers.

The waivers in ``lint_waivers.vlt`` cover warning classes that every Amaranth/Yosys netlist
produces (see docs/simulation.md); :func:`lint_verilog` runs Verilator with them and returns the
remaining warnings, which a clean design does not have. It also counts what each waived rule would
have reported, for information.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dlproc.errors import ToolchainError
from dlproc.flow.toolchain import find_verilator, verilator_env

__all__ = ["LintReport", "lint_verilog", "WAIVERS", "WAIVED_RULES"]

WAIVERS = Path(__file__).resolve().parent / "lint_waivers.vlt"
WAIVED_RULES = tuple(re.findall(r"^lint_off -rule (\w+)", WAIVERS.read_text(), re.M))
_WARNING = re.compile(r"^%(Warning|Error)-?([A-Z0-9_]*): (.*)$", re.M)
LINT_TIMEOUT_S = 600


@dataclass
class LintReport:
    """Warnings left after the waivers (``remaining``) and what the waived rules would report."""

    remaining: list[str] = field(default_factory=list)
    waived_counts: Counter = field(default_factory=Counter)
    returncode: int = 0

    @property
    def clean(self) -> bool:
        return not self.remaining and self.returncode == 0


def _run(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, env=verilator_env(), capture_output=True, text=True,
                              timeout=LINT_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ToolchainError(f"verilator --lint-only did not finish within {LINT_TIMEOUT_S} s") from exc


def lint_verilog(verilog: str, top: str, *, count_waived: bool = True) -> LintReport:
    """Lint ``verilog`` (module ``top``) with ``-Wall`` and the waivers."""
    exe = str(find_verilator().executable)
    report = LintReport()
    with tempfile.TemporaryDirectory(prefix="dlproc-lint-") as tmp:
        src = Path(tmp) / f"{top}.v"
        src.write_text(verilog)
        base = [exe, "--lint-only", "-Wall", "-Wno-fatal", "--top-module", top]
        proc = _run(base + [str(WAIVERS), str(src)], tmp)
        report.returncode = proc.returncode
        for kind, rule, text in _WARNING.findall(proc.stderr):
            if rule or kind == "Error":
                report.remaining.append(f"%{kind}-{rule}: {text}")
        if count_waived:
            raw = _run(base + [str(src)], tmp)
            for _, rule, _ in _WARNING.findall(raw.stderr):
                if rule in WAIVED_RULES:
                    report.waived_counts[rule] += 1
    return report
