"""The dlproc processor in Amaranth: one module per hardware block.

``DlprocTop`` (``top.py``) is the whole processor; ``generate_verilog(config)`` returns its
Verilog (top module ``dlproc_top``). Blocks: ``csr`` (control/status registers), ``fetch``,
``dma`` (burst planner, memory arbiter, load and store units), ``tokens`` (instruction queues and
dependency tokens), ``buffers`` (INP/WGT/PRM/OUT), ``profile``, and the compute unit
(``compute``, ``conv``, ``output_stage``, ``pool``). ``avalon`` holds the bus signatures.
"""

from __future__ import annotations

import re
from typing import Any

from dlproc.hardware.gateware.top import DlprocTop, hardware_params

__all__ = ["DlprocTop", "generate_rtlil", "generate_verilog", "drop_zero_meminit", "hardware_params", "lint", "LINT_WAIVERS"]

TOP_NAME = "dlproc_top"

#: Verilator ``-Wall`` warning classes waived for the generated Verilog, and why. Each comes from
#: how Yosys's Verilog backend writes any Amaranth design, not from the design itself (the
#: Amaranth source has exact, defined widths); docs/architecture.md repeats the list.
LINT_WAIVERS: dict[str, str] = {
    "WIDTHEXPAND": "Yosys relies on Verilog's context-determined widths (e.g. `3'h4 - cur[4:3]`, "
    "`index < 3'h4`), which are exactly Amaranth's zero/sign extension",
    "WIDTHTRUNC": "Yosys writes `!fsm_state` and narrowing assignments whose truncation is Amaranth's "
    "defined wrap-around",
    "CASEINCOMPLETE": "Yosys emits `casez` without default after a default assignment, so no latch "
    "and no X can result",
    "PROCASSINIT": "Yosys declares registers with their reset/initial value (`reg x = 0;`) and "
    "assigns them in `always` blocks, which is how Amaranth's `init=` is expressed",
    "DECLFILENAME": "Amaranth writes the whole module hierarchy into one file, Verilator expects "
    "one module per file",
    "UNUSEDSIGNAL": "Amaranth emits a named wire for every field of every layout-typed signal (all "
    "members of the instruction union in every block that carries an instruction) and keeps the "
    "unused carry bits of widened arithmetic",
}


def generate_rtlil(config: Any) -> str:
    """The RTLIL of the whole processor (top module ``dlproc_top``), all-zero memory inits dropped.

    Amaranth 0.5 gives every ``lib.memory.Memory`` an explicit initial value, all zeros here, and
    Yosys's Verilog backend writes that out as one assignment per memory word: for the preset
    configurations more than three quarters of the Verilog text, most of Verilator's build time and
    most of the conversion time. The RAM blocks of Cyclone V and Arria 10 power up as zero, and the
    simulators run two-state with ``--x-initial 0``, so omitting an all-zero initial value changes
    nothing; a memory with any non-zero initial value keeps it.
    """
    from amaranth.back import rtlil

    hw = hardware_params(config)  # a configuration error is raised before anything is built
    text = rtlil.convert(DlprocTop(hw), name=TOP_NAME, emit_src=False)
    return drop_zero_meminit(text)


def generate_verilog(config: Any) -> str:
    """The Verilog of the whole processor for a ProcessorConfig (top module ``dlproc_top``)."""
    return rtlil_to_verilog(generate_rtlil(config))


_MEMINIT_CELL = re.compile(r"^[ \t]*cell \$meminit_v2 [^\n]*\n(?:(?![ \t]*end\n)[^\n]*\n)*?[ \t]*end\n", re.M)
_ZERO_DATA = re.compile(r"^[ \t]*connect \\DATA \d+'0+\s*$", re.M)


def drop_zero_meminit(rtlil_text: str) -> str:
    """Remove the ``$meminit_v2`` cells of an RTLIL text whose data is all zero bits."""

    def keep_unless_zero(match: "re.Match[str]") -> str:
        return "" if _ZERO_DATA.search(match.group(0)) else match.group(0)

    return _MEMINIT_CELL.sub(keep_unless_zero, rtlil_text)


def rtlil_to_verilog(rtlil_text: str) -> str:
    """Convert RTLIL to Verilog: the passes ``amaranth.back.verilog`` runs, less one clean-up.

    Amaranth's script is ``proc -nomux -norom; memory_collect; write_verilog -norename``. Its
    ``proc`` ends with ``opt_expr``, which rewrites an XOR with a constant into per-bit NOTs and a
    concatenation: the conv engine's offset-binary adder tree (``p ^ 0x8000`` on every product)
    came out as ``{~p[15], p[14:0]}``, which Verilator evaluates with five instructions instead of
    one. ``-noopt`` leaves the expressions as Amaranth wrote them; Verilator and Quartus simplify
    constants themselves, so the hardware is the same (``de10nano_int8``: 15.76 k -> 14.98 k model
    instructions per simulated cycle, docs/simulation.md "Speed"; Yosys synthesis reads the RTLIL,
    not this text).

    Before that, :func:`dlproc.hardware.gateware.regfold.fold_register_processes` turns the registers whose
    next value is a plain enable/reset pattern into flip-flop cells with an enable and a
    synchronous reset, so that Verilator computes their next value only when they load (the
    module's docstring has the reasoning and the measurement).
    """
    # amaranth.back.verilog offers no hook between RTLIL and Verilog, so the script is run here
    # with Amaranth's own Yosys finder; the amaranth version is pinned below 0.6 in pyproject.toml.
    from amaranth._toolchain.yosys import find_yosys

    from dlproc.hardware.gateware.regfold import fold_register_processes

    yosys = find_yosys(lambda version: version >= (0, 40))
    folded, _ = fold_register_processes(rtlil_text)
    script = [
        f"read_rtlil <<rtlil\n{folded}\nrtlil",
        "proc -nomux -norom -noopt",
        "memory_collect",
        "write_verilog -norename",
    ]
    # As in Amaranth: Yosys warns that not every process can be written as Verilog, but Amaranth
    # emits only processes that can, so the warnings are squashed.
    return yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)


def lint(verilog_text: str, workdir: "str | None" = None) -> str:
    """Run ``verilator --lint-only -Wall`` (with :data:`LINT_WAIVERS`) on ``verilog_text``.

    Returns Verilator's messages; raises :class:`dlproc.errors.ToolchainError` if it reports any.
    """
    import subprocess
    import tempfile
    from pathlib import Path

    from dlproc.errors import ToolchainError
    from dlproc.flow.toolchain import find_verilator, verilator_env

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = Path(tmp) / f"{TOP_NAME}.v"  # file name = module name (DECLFILENAME)
        path.write_text(verilog_text)
        cmd = [str(find_verilator().executable), "--lint-only", "-Wall", "--top-module", TOP_NAME]
        cmd += [f"-Wno-{name}" for name in LINT_WAIVERS]
        result = subprocess.run(cmd + [str(path)], env=verilator_env(), capture_output=True, text=True)
    messages = result.stdout + result.stderr
    if result.returncode != 0 or "%Warning" in messages or "%Error" in messages:
        raise ToolchainError(f"verilator lint of {TOP_NAME} failed:\n{messages[:20000]}")
    return messages
