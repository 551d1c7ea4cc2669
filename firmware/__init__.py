"""The dlproc firmware: the C runtime for the ARM HPS, its HALs, the runner and the board agent.

This package only locates the C sources (installed as ``dlproc.firmware``); building them is
:mod:`dlproc.flow.firmware`. Layout::

    include/   dlproc_rt.h (runtime API), dlproc_hal.h, dlproc_net.h, dlproc_checksum.h,
               dlproc_util.h, and the generated dlproc_regs.h / dlproc_isa.h
    src/       dlproc_rt.c, netfile.c, checksum.c, dlproc_util.c, hal_linux.c, hal_sim.c,
               dlproc_run.c (the dlproc-run program)
    agent/     agent.c (the dlproc-agent program), dlproc_proto.h (its wire protocol)
    fuzz/      the parser's C test API and the sanitizer-built fuzz driver
    Makefile   the same builds for people without Python (native sim HAL, cross for the HPS)
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIRMWARE_DIR", "INCLUDE_DIRS", "RUNTIME_SOURCES", "PARSER_SOURCES", "HAL_SOURCES", "PROGRAM_SOURCES", "HALS",
           "PROGRAMS", "sources", "all_files"]

FIRMWARE_DIR = Path(__file__).resolve().parent
INCLUDE_DIRS = (FIRMWARE_DIR / "include", FIRMWARE_DIR / "agent")
#: The runtime proper, shared by every program and both HALs.
_PARSER = ("netfile.c", "checksum.c", "dlproc_util.c", "dlproc_names.c")
RUNTIME_SOURCES = tuple(FIRMWARE_DIR / "src" / n for n in ("dlproc_rt.c",) + _PARSER)
#: The file parser alone (no HAL): what the fuzz driver and the ctypes library link.
PARSER_SOURCES = tuple(FIRMWARE_DIR / "src" / n for n in _PARSER)
#: One HAL is linked into each program: ``linux`` on the HPS, ``sim`` with the Verilated processor.
HAL_SOURCES = {"linux": (FIRMWARE_DIR / "src" / "hal_linux.c",), "sim": (FIRMWARE_DIR / "src" / "hal_sim.c",)}
HALS = tuple(HAL_SOURCES)
#: Programs and the sources beyond the runtime and HAL that they need. ``fuzz-netfile`` and
#: ``libdlproc_net`` need no HAL: they exercise the file parser alone.
PROGRAM_SOURCES = {
    "dlproc-run": (FIRMWARE_DIR / "src" / "dlproc_run.c",),
    "dlproc-agent": (FIRMWARE_DIR / "agent" / "agent.c",),
    "fuzz-netfile": (FIRMWARE_DIR / "fuzz" / "fuzz_netfile.c",),
    "libdlproc_net.so": (FIRMWARE_DIR / "fuzz" / "net_capi.c",),
}
PROGRAMS = tuple(PROGRAM_SOURCES)
_NO_HAL = ("fuzz-netfile", "libdlproc_net.so")


def sources(program: str, hal: str | None = "sim") -> list[Path]:
    """The C files of ``program`` linked with ``hal`` (ignored for the HAL-less programs)."""
    if program not in PROGRAM_SOURCES:
        raise KeyError(f"unknown firmware program {program!r}; known: {', '.join(PROGRAMS)}")
    if program in _NO_HAL:
        return list(PROGRAM_SOURCES[program]) + list(PARSER_SOURCES)
    if hal not in HAL_SOURCES:
        raise KeyError(f"unknown HAL {hal!r}; known: {', '.join(HALS)}")
    return list(PROGRAM_SOURCES[program]) + list(RUNTIME_SOURCES) + list(HAL_SOURCES[hal])


def needs_hal(program: str) -> bool:
    return program not in _NO_HAL


def all_files() -> list[Path]:
    """Every source and header, for content hashes of builds."""
    return sorted(p for d in ("src", "include", "agent", "fuzz") for p in (FIRMWARE_DIR / d).glob("*.[ch]"))
