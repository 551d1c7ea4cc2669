"""Move a loaded harness library's machine code onto transparent huge pages (Linux).

Why: the Verilated model of a preset runs through about 150 KB of straight-line code every
simulated cycle, more than the L1 instruction cache, so it streams from L2 each cycle. With 4 KB
pages the physical pages the kernel happens to give the library's code decide how evenly that
code spreads over the L2 sets: six copies of one and the same ``de10nano_int8`` build ran at
0.86 to 1.03 M cycles per CPU second (docs/simulation.md "Speed"). On one 2 MB page the code is
physically contiguous; one build then still ran at 0.93-1.02 M over fresh processes.

How: ``sim/build.py`` links the library with a 2 MB segment alignment, so its code segment starts
on a 2 MB boundary and is followed by an inaccessible gap up to the next one. Right after
``dlopen``, before any of its code runs, :func:`move_text_to_huge_pages` copies the code out,
maps anonymous memory over [start, next 2 MB boundary), asks for huge pages
(``MADV_HUGEPAGE``), copies the code back and makes it read-only and executable again. Only libc
runs meanwhile (through ctypes), never the library itself. Where any of that is not possible (not
Linux, transparent huge pages off, a library linked without the alignment) the library simply
stays as it was loaded; the result says which.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

HUGE_PAGE = 2 << 20  #: x86-64 transparent huge page; sim/build.py links with this alignment
LINK_FLAGS = (f"-Wl,-zmax-page-size={HUGE_PAGE:#x}",)

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 0x02, 0x10, 0x20
_MADV_HUGEPAGE = 14
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class HugeText:
    """What :func:`move_text_to_huge_pages` did: ``huge_kb`` of code now on huge pages (0 if
    none), or ``reason`` why the code stayed where it was loaded."""

    huge_kb: int
    reason: str = ""


def enabled() -> bool:
    """False if ``DLPROC_NATIVE_HUGETEXT=0`` (e.g. to let ``perf`` see the library's symbols,
    which it cannot once the code lives in anonymous memory)."""
    return os.environ.get("DLPROC_NATIVE_HUGETEXT", "1").strip().lower() not in ("0", "no", "false", "off")


def _mappings() -> list[tuple[int, int, str, str]]:
    rows = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        rows.append((lo, hi, fields[1], fields[5] if len(fields) > 5 else ""))
    return rows


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _huge_kb(start: int) -> int:
    text = Path("/proc/self/smaps").read_text()
    at = text.find(f"{start:x}-")
    for line in text[at:].splitlines()[1:40]:
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def move_text_to_huge_pages(library: str | Path) -> HugeText:
    """Put the code of the just-loaded ``library`` on huge pages (see the module docstring).

    Must be called before any function of the library runs (and with no other thread inside it).
    """
    if not enabled():
        return HugeText(0, "DLPROC_NATIVE_HUGETEXT=0")
    if not sys.platform.startswith("linux"):
        return HugeText(0, "not Linux")
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        return HugeText(0, "transparent huge pages are off")
    path = str(Path(library).resolve())
    maps = _mappings()
    code = [(lo, hi) for lo, hi, perms, name in maps if name == path and perms.startswith("r-x")]
    if len(code) != 1:
        return HugeText(0, f"{len(code)} executable mappings of the library")
    start, end = code[0]
    if start % HUGE_PAGE:
        return HugeText(0, "the code does not start on a 2 MB boundary (linked without the alignment)")
    stop = -(-end // HUGE_PAGE) * HUGE_PAGE
    # Everything in [start, stop) must be the library's own code or the gap behind it.
    for lo, hi, perms, name in maps:
        if lo < stop and hi > start and not (name == path and perms[:3] in ("r-x", "---")):
            return HugeText(0, f"{lo:#x}-{hi:#x} ({name or 'anonymous'}) lies in the code's 2 MB range")
    libc = _libc()
    size = end - start
    saved = libc.mmap(None, size, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if saved in (None, _MAP_FAILED):
        return HugeText(0, f"mmap of a {size}-byte copy failed (errno {ctypes.get_errno()})")
    try:
        ctypes.memmove(saved, start, size)
        # From here until mprotect the library has no code: nothing may call it (see above).
        placed = libc.mmap(start, stop - start, _PROT_READ | _PROT_WRITE,
                           _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_FIXED, -1, 0)
        if placed != start:
            raise OSError(ctypes.get_errno(), "mmap over the library's code failed")
        libc.madvise(start, stop - start, _MADV_HUGEPAGE)  # a hint: without it, plain pages
        ctypes.memmove(start, saved, size)
        if libc.mprotect(start, stop - start, _PROT_READ | _PROT_EXEC) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of the library's code failed")
    finally:
        libc.munmap(saved, size)
    huge = _huge_kb(start)
    return HugeText(huge, "" if huge else "the kernel gave no huge page (memory fragmented?)")
