"""Verilator builds of the native harness, cached by content and safe under parallel pytest workers.

Every build lives in ``build/verilator/<key>/`` (``DLPROC_BUILD_DIR`` overrides ``build/verilator``),
where ``key`` is the sha256 of everything that can change the binary: the configuration hash, the
Verilog text, the simulation wrapper (:func:`harness_wrapper`), the harness sources, the Verilator
and compiler versions and the flags. A finished build
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
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dlproc import progress
from dlproc.errors import ToolchainError
from dlproc.sim.hugetext import LINK_FLAGS as HUGE_TEXT_LINK_FLAGS
from dlproc.flow.toolchain import check_cxx_toolchain, find_verilator, make_overrides, native_enabled, verilator_env

__all__ = [
    "NATIVE_DIR",
    "BuildResult",
    "SimBuildError",
    "build_root",
    "locked_build",
    "verilator_flags",
    "build_native",
    "harness_wrapper",
    "run_process_group",
]

NATIVE_DIR = Path(__file__).resolve().parent / "native"
HARNESS_SOURCES = ("harness.cpp", "ddr.cpp", "ddr.h", "dl_fastops.h", "compat/lz4.h")
# Bumped when the build procedure changes what a build contains (wrapper, schedule check).
NATIVE_BUILD_VERSION = 4
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
    ``--threads`` is deliberately absent: it always lost on the two-core machine. ``-fno-table``
    keeps Verilator from replacing small pieces of logic by lookup tables in its constant pool:
    building the table index from the input bits costs more than the logic (native harness on
    ``de10nano_int8``: 0.99-1.02 against 0.96-0.98 M cycles/s in alternating fresh processes).
    """
    return [
        "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC",
        "-O3", "-fno-table", "--x-assign", "fast", "--x-initial", "0", "--noassert",
    ]


def native_verilator_flags() -> list[str]:
    """Verilator options of the native harness builds only (on top of :func:`verilator_flags`).

    ``DLPROC_VERILATOR_EXTRA`` appends options for experiments; they are part of the cache key.
    """
    return os.environ.get("DLPROC_VERILATOR_EXTRA", "").split()


def native_cflags() -> list[str]:
    """Extra C++ options of the native harness builds (part of the cache key)."""
    return os.environ.get("DLPROC_NATIVE_CFLAGS", "").split()


def host_cpu_id() -> str:
    """A digest of this machine's CPU model and feature flags (``/proc/cpuinfo``), or ``""``.

    Part of the key of ``-march=native`` builds, so that a build folder shared between machines
    never hands a binary with instructions the CPU lacks to another host.
    """
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    first = text.split("\n\n", 1)[0]
    keep = [line for line in first.splitlines() if line.split(":")[0].strip() in ("vendor_id", "model name", "flags")]
    return hashlib.sha256("\n".join(keep).encode()).hexdigest()[:16]


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
        with progress.running(f"Verilator {label}"):
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


WRAPPER_TOP = "dlsim_top"
# (name, direction, width or None when it is read from the top level's declaration)
_CONTRACT_PORTS = (
    ("csr__address", "input", None), ("csr__read", "input", 1), ("csr__write", "input", 1),
    ("csr__writedata", "input", 32), ("csr__readdata", "output", 32),
    ("mem__address", "output", None), ("mem__burstcount", "output", None), ("mem__read", "output", 1),
    ("mem__write", "output", 1), ("mem__writedata", "output", "data"), ("mem__byteenable", "output", "be"),
    ("mem__waitrequest", "input", 1), ("mem__readdata", "input", "data"), ("mem__readdatavalid", "input", 1),
    ("irq", "output", 1),
)
#: The second memory port of the wrapper (``MemoryPorts = 2``: the write-only master ``mem1``).
#: The wrapper always has it, so one harness serves one- and two-port tops.
_PORT1 = tuple((name.replace("mem__", "mem1__"), d, w) for name, d, w in _CONTRACT_PORTS if name.startswith("mem__"))
#: Port 1's Avalon write responses (the write master of a two-port top waits for them).
_PORT1_RESPONSES = (("mem1__writeresponsevalid", "input", 1), ("mem1__response", "input", 2))
_WRAPPER_PORTS = _CONTRACT_PORTS + _PORT1 + _PORT1_RESPONSES
#: Memory signals a read-only (port 0 of a two-port top) or write-only (port 1) master lacks;
#: the wrapper drives the missing outputs with zero and leaves the missing inputs unconnected.
_OPTIONAL = frozenset({"mem__write", "mem__writedata", "mem__byteenable"}
                      | {n for n, _d, _w in _PORT1 + _PORT1_RESPONSES})
# Inputs that change only in CSR transactions and at reset; the wrapper samples them on in_strobe.
_STROBED = ("rst", "csr__address", "csr__read", "csr__write", "csr__writedata")


def _port_width(module_text: str, name: str, top: str) -> int:
    width = _find_port_width(module_text, name)
    if width is None:
        raise SimBuildError(f"top level {top!r} has no port {name!r}; the native harness needs the dlproc port "
                            "contract (see docs/simulation.md)")
    return width


def _find_port_width(module_text: str, name: str) -> int | None:
    pattern = (r"\b(?:input|output)\s+(?:(?:wire|reg|logic)\s+)*(?:\[\s*(\d+)\s*:\s*(\d+)\s*\]\s*)?\\?"
               + re.escape(name) + r"(?![\w$])")
    match = re.search(pattern, module_text)
    if match is None:
        return None
    if match.group(1) is None:
        return 1
    return abs(int(match.group(1)) - int(match.group(2))) + 1


def harness_wrapper(verilog: str, top: str, mem_bytes: int) -> str:
    """A Verilog wrapper ``dlsim_top`` around ``top`` that samples the slow inputs on a strobe.

    Amaranth makes ``rst`` a synchronous reset, so every register's next-state logic depends on
    the ``rst`` input; the CSR inputs feed the whole register-file decode. Verilator evaluates all
    logic that depends on a top-level input in its input-combinational (``ico``) region on *every*
    ``eval()``, which made that region the bigger half of the simulation time. The wrapper drives
    the design's ``rst`` and CSR inputs from registers clocked by ``in_strobe``, which the harness
    pulses only when it changes them (reset, CSR accesses), in a separate ``eval()`` before the
    clock edge that samples them, so the design sees exactly the values it saw before: cycle
    counts and outputs do not change. The memory inputs, which change every cycle, stay direct.

    The wrapper always has two full memory ports, ``mem__*`` and ``mem1__*``. A top with the one
    read/write master connects ``mem__*`` and leaves port 1 quiet; a two-port top (``mem__*``
    read-only, ``mem1__*`` write-only, ``MemoryPorts = 2``) connects what it has, and the
    outputs it lacks read zero (no request), so the harness serves both kinds unchanged.
    """
    # The name must be followed by the port list: Yosys names submodules "\\top.sub".
    match = re.search(r"\bmodule\s+\\?" + re.escape(top) + r"\s*[#(;](.*?)\bendmodule\b", verilog, re.S)
    if match is None:
        raise SimBuildError(f"the Verilog has no module {top!r}")
    text = match.group(1)
    widths: dict[str, int] = {}
    present: set[str] = set()
    for name, _direction, width in _WRAPPER_PORTS:
        found = _find_port_width(text, name)
        if found is None and name not in _OPTIONAL:
            _port_width(text, name, top)  # raises, naming the missing port
        if found is not None:
            present.add(name)
        if width == "data":
            widths[name] = 8 * mem_bytes
        elif width == "be":
            widths[name] = mem_bytes
        elif width is None:
            # A missing port 1 address/burstcount takes port 0's width (it only ever reads zero).
            widths[name] = found if found is not None else widths[name.replace("mem1__", "mem__")]
        else:
            widths[name] = width
    _port_width(text, "clk", top)
    _port_width(text, "rst", top)

    def decl(direction: str, name: str, width: int) -> str:
        return f"  {direction} {'[' + str(width - 1) + ':0] ' if width > 1 else ''}{name};"

    names = ["clk", "in_strobe", "rst"] + [n for n, _d, _w in _WRAPPER_PORTS]
    lines = [f"module {WRAPPER_TOP}({', '.join(names)});", decl("input", "clk", 1), decl("input", "in_strobe", 1),
             decl("input", "rst", 1)]
    lines += [decl(d, n, widths[n]) for n, d, _w in _WRAPPER_PORTS]
    lines += [f"  assign {n} = 0;" for n, d, _w in _WRAPPER_PORTS if d == "output" and n not in present]
    connections = [".clk(clk)"]
    for name in _STROBED:
        width = widths.get(name, 1)
        lines.append(f"  reg {'[' + str(width - 1) + ':0] ' if width > 1 else ''}{name}_q = 0;")
        lines.append(f"  always @(posedge in_strobe) {name}_q <= {name};")
        connections.append(f".{name}({name}_q)")
    connections += [f".{n}({n})" for n, _d, _w in _WRAPPER_PORTS if n not in _STROBED and n in present]
    lines.append(f"  {top} dut({', '.join(connections)});")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


# The contract's outputs as Verilator spells them in C++ ("__" becomes "___05F").
_OUTPUT_MEMBERS = tuple(n.replace("__", "___05F") for n, d, _w in _WRAPPER_PORTS if d == "output")
_ICO_FUNCTION = re.compile(r"^void Vtop___024root___ico_\w+\(Vtop___024root\* vlSelf\) \{\n(.*?)^\}", re.M | re.S)
_OUTPUT_ASSIGN = re.compile(r"\bvlSelfRef\.(?:" + "|".join(_OUTPUT_MEMBERS) + r")\b(?:\[[^\]]*\])?\s*=(?!=)")


#: The Verilator runtime functions that ``sim/native/dl_fastops.h`` implements with shift-based
#: sign extension (same results for the clean operands Verilator passes; see that header).
FAST_SIGN_FUNCTIONS = ("EXTENDS_II", "EXTENDS_QI", "EXTENDS_QQ", "MULS_III", "MULS_QQQ",
                       "GTS_III", "GTES_III", "LTS_III", "LTES_III",
                       "GTS_IQQ", "GTES_IQQ", "LTS_IQQ", "LTES_IQQ")
_FAST_SIGN_CALL = re.compile(r"\bVL_(" + "|".join(FAST_SIGN_FUNCTIONS) + r")\(")


def use_fast_sign_extension(obj: Path) -> int:
    """Point the generated model's sign-extending calls at ``dl_fastops.h``; returns the count.

    Verilator writes a sign extension as ``-(x & msb) | x``, which GCC compiles literally; the
    conv engine's 256 signed products each went through four of them. Renaming ``VL_EXTENDS_II(``
    to ``DL_EXTENDS_II(`` (and the signed multiplies and compares built on it) in the model's
    C++ between Verilator and the compiler gives GCC a plain shift pair it turns into ``movsx``
    (docs/simulation.md "Speed"). Only files Verilator wrote for the model are touched.
    """
    count = 0
    for source in sorted(obj.glob("Vtop*.cpp")):
        text = source.read_text()
        new, n = _FAST_SIGN_CALL.subn(r"DL_\1(", text)
        if n:
            # After the precompiled header's include, so that the header stays the first one.
            head, sep, rest = new.partition('#include "Vtop__pch.h"\n')
            if not sep and "__Trace" in source.name:
                # A tracing build's dump code does not include the precompiled header; it runs
                # only when dumping, so Verilator's own sign extension is kept there.
                continue
            if not sep:
                raise ToolchainError(f"{source.name}: Verilator's model does not include Vtop__pch.h; "
                                     "cannot add dl_fastops.h")
            source.write_text(head + sep + '#include "dl_fastops.h"\n' + rest)
            count += n
    return count


def _outputs_need_settle(obj: Path) -> bool:
    """True unless Verilator's model shows that no top-level output depends on an input.

    Verilator puts every piece of logic that depends on a top-level input into its
    input-combinational (``ico``) functions. If none of them writes an output port, the outputs
    are functions of the registers only, and the values left by the rising-edge ``eval()`` are the
    ones the DDR model must see in the next cycle: the harness can skip the falling-edge
    ``eval()``. A model without an input-combinational region (no ``__Vico`` state) needs no
    settling either; one that has the region but no function we recognise keeps the safe schedule.
    """
    bodies = [m.group(1) for f in sorted(obj.glob("Vtop___024root__*.cpp")) if "Slow" not in f.name
              for m in _ICO_FUNCTION.finditer(f.read_text(errors="replace"))]
    if not bodies:
        return "__Vico" in (obj / "Vtop___024root.h").read_text(errors="replace")
    return any(_OUTPUT_ASSIGN.search(body) for body in bodies)


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
    flags = verilator_flags() + native_verilator_flags() + ([f"--trace-{trace}"] if trace else [])
    wrapper = harness_wrapper(verilog, top, mem_bytes)
    cflags_opt = native_cflags()
    key_src = json.dumps({
        "kind": "native", "version": NATIVE_BUILD_VERSION, "config": config_hash, "top": top, "mem_bytes": mem_bytes,
        "verilog": hashlib.sha256(verilog.encode()).hexdigest(), "sources": _sources_digest(),
        "wrapper": hashlib.sha256(wrapper.encode()).hexdigest(), "cflags": cflags_opt,
        "flags": flags, "make": make_overrides(native), "verilator": info.version, "cxx": cxx_version,
        "host": host_cpu_id() if native else "",
    }, sort_keys=True)
    key = "native-" + hashlib.sha256(key_src.encode()).hexdigest()[:24]

    def build(directory: Path) -> Path:
        src = directory / f"{top}.v"
        src.write_text(verilog)
        wrapper_src = directory / f"{WRAPPER_TOP}.v"
        wrapper_src.write_text(wrapper)
        cflags = ["-fPIC", f"-DDL_MEM_BYTES={mem_bytes}", f"-I{NATIVE_DIR}", *cflags_opt]
        # The 2 MB segment alignment lets the harness move the code onto a huge page after
        # loading it (sim/hugetext.py).
        ldflags = ["-shared", "-Wl,-Bsymbolic", *HUGE_TEXT_LINK_FLAGS]
        if trace == "fst":
            extra = _lz4_compat(directory)
            cflags += [f for f in extra if f.startswith("-I")]
            ldflags += [f for f in extra if f.startswith("-L")]
        cmd = [str(info.executable), "--cc", "--exe", *flags,
               "--top-module", WRAPPER_TOP, "--prefix", "Vtop", "-Mdir", "obj", "-o", LIB_NAME,
               "-CFLAGS", " ".join(cflags), "-LDFLAGS", " ".join(ldflags),
               str(wrapper_src), str(src), str(NATIVE_DIR / "harness.cpp"), str(NATIVE_DIR / "ddr.cpp")]
        env = verilator_env(native=native)
        what = f"Verilator build of {top} ({'trace ' + trace if trace else 'no trace'})"
        run_logged(cmd, directory, env, directory / "build.log", what)
        # Between Verilator and the C++ compiler: decide the harness's clock schedule from the
        # generated model (see _outputs_need_settle) and hand it to harness.cpp in a header.
        settle = _outputs_need_settle(directory / "obj")
        (directory / "obj" / "dl_schedule.h").write_text(
            "// Written by sim/build.py: 1 if a memory/CSR output of the top level depends\n"
            "// combinationally on an input, so the harness needs the falling-edge eval().\n"
            f"#define DL_SETTLE_EVAL {int(settle)}\n")
        use_fast_sign_extension(directory / "obj")
        run_logged(["make", "-C", "obj", "-f", "Vtop.mk", "-j", _jobs()], directory, env,
                   directory / "build.log", what)
        return directory / "obj" / LIB_NAME

    return locked_build(key, build, label=f"native {top} {config_hash[:12]}")
