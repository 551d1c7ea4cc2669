"""Build the C firmware (runtime, runner, agent, fuzz driver) natively or for the Cortex-A9, cached.

    from dlproc.flow.firmware import build_program
    run = build_program("dlproc-run", hal="sim")                 # native, simulation HAL
    agent = build_program("dlproc-agent", hal="linux", cross=True)   # static ARM binary for the HPS
    fuzz = build_program("fuzz-netfile", sanitize=True)          # ASan + UBSan

Builds land in ``build/firmware/<key>/`` (``DLPROC_FIRMWARE_BUILD_DIR`` overrides the folder);
the key hashes the compiler's identity, the flags and every firmware source and header, so a
change to any of them rebuilds and nothing else does. An exclusive file lock per key keeps
parallel pytest workers from compiling the same thing twice.

The cross build uses Debian's ``arm-linux-gnueabihf-gcc`` (``apt-get install -y
gcc-arm-linux-gnueabihf``) with ``-mcpu=cortex-a9 -mfpu=neon -mfloat-abi=hard`` and links
statically, so the binary runs on any HPS Linux image regardless of its C library version.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dlproc.errors import ToolchainError
from dlproc.firmware import INCLUDE_DIRS, all_files, needs_hal, sources

__all__ = ["CROSS_CC", "CROSS_FLAGS", "WARNING_FLAGS", "FirmwareBuild", "FirmwareBuildError", "build_program",
           "find_compiler", "build_root"]

CROSS_CC = "arm-linux-gnueabihf-gcc"
CROSS_FLAGS = ("-mcpu=cortex-a9", "-mfpu=neon", "-mfloat-abi=hard")
CROSS_APT = "apt-get install -y gcc-arm-linux-gnueabihf"
#: The firmware must compile without a single warning under these (tests add -Werror).
WARNING_FLAGS = ("-std=c11", "-Wall", "-Wextra")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g")
BUILD_TIMEOUT_S = 300


class FirmwareBuildError(ToolchainError):
    """The C compiler rejected the firmware; the message carries its output."""


@dataclass(frozen=True)
class FirmwareBuild:
    """A finished (possibly cached) firmware build."""

    program: str
    hal: str | None
    cross: bool
    artifact: Path
    compiler: str
    cached: bool


def build_root() -> Path:
    env = os.environ.get("DLPROC_FIRMWARE_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "build" / "firmware"


def find_compiler(cross: bool = False) -> str:
    """The C compiler to use, or a :class:`ToolchainError` that says how to install it."""
    if cross:
        cc = os.environ.get("DLPROC_CROSS_CC", CROSS_CC)
        if shutil.which(cc) is None:
            raise ToolchainError(f"the cross compiler {cc} for the Cortex-A9 HPS is not installed; on Debian/Ubuntu "
                                 f"install it with '{CROSS_APT}' (or set DLPROC_CROSS_CC)")
        return cc
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise ToolchainError(f"no C compiler: '{cc}' is not on PATH; install gcc (e.g. 'apt-get install -y gcc') "
                             "or set CC")
    return cc


def _compiler_id(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError as exc:
        raise ToolchainError(f"cannot run the C compiler {cc}: {exc}") from None
    return out.splitlines()[0] if out else cc


def _flags(program: str, cross: bool, sanitize: bool, werror: bool, optimize: str) -> list[str]:
    flags = list(WARNING_FLAGS) + [optimize]
    if werror:
        flags.append("-Werror")
    if cross:
        flags += list(CROSS_FLAGS)
    if sanitize:
        flags += list(SANITIZE_FLAGS)
    if program.endswith(".so"):
        flags += ["-fPIC", "-shared"]
    elif cross:
        flags.append("-static")
    return flags


def _libs(program: str, hal: str | None) -> list[str]:
    libs = ["-lm"]
    if needs_hal(program) and hal == "sim":
        libs.append("-ldl")
    return libs


def build_program(program: str, hal: str | None = "sim", *, cross: bool = False, sanitize: bool = False,
                  werror: bool = False, optimize: str = "-O2") -> FirmwareBuild:
    """Compile ``program`` (see :data:`dlproc.firmware.PROGRAMS`) with ``hal`` ("sim" or "linux").

    ``cross`` builds a static Cortex-A9 binary (the simulation HAL makes no sense there);
    ``sanitize`` adds AddressSanitizer and UndefinedBehaviorSanitizer; ``werror`` turns warnings
    into errors. Returns the cached build when nothing changed.
    """
    if not needs_hal(program):
        hal = None
    if cross and hal == "sim":
        raise ToolchainError("the simulation HAL runs on the workstation only; cross-compile with hal='linux'")
    if cross and sanitize:
        raise ToolchainError("sanitizer builds are native only")
    srcs = sources(program, hal)
    cc = find_compiler(cross)
    flags = _flags(program, cross, sanitize, werror, optimize)
    libs = _libs(program, hal)
    digest = hashlib.sha256()
    digest.update(json.dumps({"program": program, "hal": hal, "cc": cc, "id": _compiler_id(cc), "flags": flags,
                              "libs": libs, "sources": [str(s.name) for s in srcs]}).encode())
    for f in all_files():
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    key = f"{program}-{hal or 'nohal'}-{'arm' if cross else 'native'}{'-san' if sanitize else ''}-" \
          f"{digest.hexdigest()[:16]}"
    root = build_root()
    directory = root / key
    artifact = directory / program
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (directory / "build.json").exists() and artifact.exists():
                return FirmwareBuild(program, hal, cross, artifact, cc, True)
            if directory.exists():
                shutil.rmtree(directory)
            directory.mkdir(parents=True)
            cmd = [cc, *flags, *(f"-I{d}" for d in INCLUDE_DIRS), *(str(s) for s in srcs), "-o", str(artifact), *libs]
            start = time.monotonic()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise FirmwareBuildError(f"{cc} could not build {program}: {exc}") from None
            (directory / "build.log").write_text("$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr)
            if proc.returncode != 0:
                raise FirmwareBuildError(f"{cc} failed to build {program} (exit {proc.returncode}):\n"
                                         f"{(proc.stdout + proc.stderr)[-4000:]}")
            info = {"command": cmd, "seconds": round(time.monotonic() - start, 2), "warnings": proc.stderr}
            (directory / "build.json").write_text(json.dumps(info, indent=1))
            return FirmwareBuild(program, hal, cross, artifact, cc, False)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
