"""Verilator builds of the native harness, cached by content and safe under parallel pytest workers.

Every build lives in ``build/verilator/<key>/`` (``DLPROC_BUILD_DIR`` overrides ``build/verilator``),
where ``key`` is the sha256 of everything that can change the binary: the configuration hash, the
Verilog text, the harness sources, the Verilator and compiler versions and the flags. A finished build
has a ``build.json`` marker written last, so an interrupted build is detected and redone.

Two pytest-xdist workers asking for the same key must not both compile it (the machine has two
cores), so :func:`locked_build` takes an exclusive ``fcntl`` lock on ``<key>.lock`` around the
check-and-build; the second worker waits and then finds the finished build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dlproc.errors import ToolchainError
from dlproc.toolchain import check_cxx_toolchain, find_verilator, make_overrides, native_enabled, verilator_env

__all__ = [
    "NATIVE_DIR",
    "BuildResult",
    "SimBuildError",
    "build_root",
    "locked_build",
    "verilator_flags",
    "build_native",
    "run_process_group",
]

NATIVE_DIR = Path(__file__).resolve().parent / "native"
HARNESS_SOURCES = ("harness.cpp", "ddr.cpp", "ddr.h", "compat/lz4.h")
MARKER = "build.json"
LIB_NAME = "libdlsim.so"
# A build of the de10nano processor took 20 min on the shared, overloaded 2-core machine; an hour means a hang.
BUILD_TIMEOUT_S = 3600
LOG_TAIL_LINES = 60


class SimBuildError(ToolchainError):
    """A Verilator or C++ build failed; the message carries the tail of the build log."""


@dataclass(frozen=True)
class BuildResult:
    """A finished (possibly cached) build."""

    key: str
    directory: Path
    artifact: Path        # the .so or executable
    seconds: float        # wall time of the build when it was made
    cached: bool          # True when this call found the build already done


def build_root() -> Path:
    """The cache folder: ``$DLPROC_BUILD_DIR`` or ``<repo>/build/verilator``."""
    env = os.environ.get("DLPROC_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parent.parent / "build" / "verilator"


def _jobs() -> str:
    # Two cores are shared by a whole team, so builds use at most two jobs unless told otherwise.
    return os.environ.get("DLPROC_BUILD_JOBS", "2")


def verilator_flags() -> list[str]:
    """Verilator options shared by every dlproc build (see docs/simulation.md for the measurements).

    Amaranth's Verilog triggers only WIDTHEXPAND/WIDTHTRUNC warnings, which Verilator would make
    fatal; ``-Wno-fatal`` keeps any other warning visible in the log without failing the build.
    ``--threads`` is deliberately absent: it always lost on the two-core machine.
    """
    return [
        "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC",
        "-O3", "--x-assign", "fast", "--x-initial", "0", "--noassert",
    ]


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_marker(directory: Path) -> dict | None:
    try:
        return json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None


def locked_build(key: str, build: Callable[[Path], Path], label: str = "build") -> BuildResult:
    """Return the build for ``key``, running ``build(directory) -> artifact`` once if it is missing.

    ``build`` gets an empty directory and returns the path of the artifact inside it. It runs under
    an exclusive lock so that parallel processes never build the same key twice.
    """
    root = build_root()
    directory = root / key
    with _file_lock(root / f"{key}.lock"):
        marker = _read_marker(directory)
        if marker is not None and (directory / marker["artifact"]).exists():
            return BuildResult(key, directory, directory / marker["artifact"], float(marker["seconds"]), True)
        if directory.exists():
            shutil.rmtree(directory)  # an interrupted earlier build
        directory.mkdir(parents=True)
        start = time.monotonic()
        artifact = build(directory)
        seconds = time.monotonic() - start
        info = {"artifact": str(artifact.relative_to(directory)), "seconds": round(seconds, 2), "label": label}
        (directory / MARKER).write_text(json.dumps(info, indent=1))
        return BuildResult(key, directory, artifact, seconds, False)


def run_process_group(cmd: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float,
                      stdout=None, stderr=None) -> int:  # noqa: ANN001 - file objects or None
    """Run ``cmd`` in its own process group; on timeout kill the whole group and re-raise.

    Verilator runs make, which runs g++: killing only the direct child would leave the compilers
    running as orphans on a shared machine.
    """
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise


def run_logged(cmd: list[str], cwd: Path, env: dict[str, str], log: Path, what: str) -> None:
    """Run a build command with its output in ``log``; raise :class:`SimBuildError` with its tail."""
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        try:
            returncode = run_process_group(cmd, cwd=cwd, env=env, timeout=BUILD_TIMEOUT_S, stdout=out,
                                           stderr=subprocess.STDOUT)
        except subprocess.TimeoutExpired as exc:
            raise SimBuildError(f"{what} did not finish within {BUILD_TIMEOUT_S} s (log: {log})") from exc
        except OSError as exc:
            raise SimBuildError(f"{what} could not start: {exc}") from exc
    if returncode != 0:
        lines = log.read_text(errors="replace").splitlines()
        # Compiler command lines are very long; the end of each line is enough to recognise it.
        tail = "\n".join(line if len(line) <= 400 else "..." + line[-400:] for line in lines[-LOG_TAIL_LINES:])
        raise SimBuildError(f"{what} failed with exit code {returncode} (full log: {log}):\n{tail}")


def _sources_digest() -> str:
    h = hashlib.sha256()
    for name in HARNESS_SOURCES:
        h.update(name.encode() + b"\0" + (NATIVE_DIR / name).read_bytes() + b"\0")
    return h.hexdigest()


def _lz4_compat(directory: Path) -> list[str]:
    """Extra compiler/linker options for FST tracing when liblz4's development files are missing.

    Verilator's FST writer includes ``<lz4.h>`` and links ``-llz4``. Many machines have the runtime
    library ``liblz4.so.1`` (a dependency of systemd) but not the header or the ``liblz4.so`` link.
    We then use the two-function declaration header shipped in ``native/compat`` and a private
    ``liblz4.so`` symlink, instead of requiring a system package.
    """
    if Path("/usr/include/lz4.h").exists():
        return []
    folders = [Path(p) for p in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu")]
    for folder in (f for f in folders if f.is_dir()):
        if (folder / "liblz4.so").exists():
            return [f"-I{NATIVE_DIR / 'compat'}"]
        runtime = sorted(folder.glob("liblz4.so.1*"))
        if runtime:
            link_dir = directory / "lz4link"
            link_dir.mkdir(exist_ok=True)
            (link_dir / "liblz4.so").symlink_to(runtime[0])
            return [f"-I{NATIVE_DIR / 'compat'}", f"-L{link_dir}"]
    raise ToolchainError(
        "FST tracing needs liblz4 (runtime library liblz4.so.1 or the liblz4-dev package), and "
        "neither was found; install liblz4-dev or trace to VCD instead (vcd=...)"
    )


def build_native(verilog: str, top: str, mem_bytes: int, *, config_hash: str = "",
                 trace: str | None = None, native: bool | None = None) -> BuildResult:
    """Build (or reuse) the native harness ``.so`` for a Verilog top level.

    ``top`` is the Verilog module name, ``mem_bytes`` the memory bus width in bytes, ``trace``
    ``None``, ``"fst"`` or ``"vcd"`` (tracing builds are separate cache entries because tracing slows
    every cycle down).
    """
    if trace not in (None, "fst", "vcd"):
        raise ValueError(f"trace must be None, 'fst' or 'vcd', not {trace!r}")
    if mem_bytes not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise ValueError(f"memory bus width must be a power of two between 1 and 128 bytes, not {mem_bytes}")
    info = find_verilator()
    cxx_version = check_cxx_toolchain()
    native = native_enabled() if native is None else native
    flags = verilator_flags() + ([f"--trace-{trace}"] if trace else [])
    key_src = json.dumps({
        "kind": "native", "config": config_hash, "top": top, "mem_bytes": mem_bytes,
        "verilog": hashlib.sha256(verilog.encode()).hexdigest(), "sources": _sources_digest(),
        "flags": flags, "make": make_overrides(native), "verilator": info.version, "cxx": cxx_version,
    }, sort_keys=True)
    key = "native-" + hashlib.sha256(key_src.encode()).hexdigest()[:24]

    def build(directory: Path) -> Path:
        src = directory / f"{top}.v"
        src.write_text(verilog)
        cflags = ["-fPIC", f"-DDL_MEM_BYTES={mem_bytes}", f"-I{NATIVE_DIR}"]
        ldflags = ["-shared", "-Wl,-Bsymbolic"]
        if trace == "fst":
            extra = _lz4_compat(directory)
            cflags += [f for f in extra if f.startswith("-I")]
            ldflags += [f for f in extra if f.startswith("-L")]
        cmd = [str(info.executable), "--cc", "--exe", "--build", "-j", _jobs(), *flags,
               "--top-module", top, "--prefix", "Vtop", "-Mdir", "obj", "-o", LIB_NAME,
               "-CFLAGS", " ".join(cflags), "-LDFLAGS", " ".join(ldflags),
               str(src), str(NATIVE_DIR / "harness.cpp"), str(NATIVE_DIR / "ddr.cpp")]
        run_logged(cmd, directory, verilator_env(native=native), directory / "build.log",
                   f"Verilator build of {top} ({'trace ' + trace if trace else 'no trace'})")
        return directory / "obj" / LIB_NAME

    return locked_build(key, build, label=f"native {top} {config_hash[:12]}")
