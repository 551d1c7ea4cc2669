"""sim/hugetext.py: a loaded library's code moved onto a huge page, and the cases that keep it."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from dlproc.sim.hugetext import LINK_FLAGS, move_text_to_huge_pages

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
needs_thp = pytest.mark.skipif(not _THP.exists() or "[never]" in _THP.read_text(),
                               reason="transparent huge pages are off on this machine")

_SOURCE = r"""
extern "C" int triangle(int n) {
    int sum = 0;
    for (int i = 1; i <= n; ++i) sum += i * (i % 7 == 3 ? 2 : 1);
    return sum;
}
"""


def _library(tmp_path: Path, name: str, flags: tuple[str, ...]) -> Path:
    source = tmp_path / "lib.cpp"
    source.write_text(_SOURCE)
    out = tmp_path / name
    cxx = os.environ.get("CXX", "g++")
    subprocess.run([cxx, "-O2", "-fPIC", "-shared", *flags, str(source), "-o", str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


def _expected(n: int) -> int:
    return sum(i * (2 if i % 7 == 3 else 1) for i in range(1, n + 1))


@needs_thp
def test_code_moves_to_a_huge_page_and_still_runs(tmp_path):
    path = _library(tmp_path, "libaligned.so", LINK_FLAGS)
    lib = ctypes.CDLL(str(path))
    result = move_text_to_huge_pages(path)
    assert result.huge_kb >= 2048, result
    assert result.reason == ""
    assert lib.triangle(1000) == _expected(1000)  # the moved code computes what it did before
    maps = Path("/proc/self/maps").read_text()
    assert not any(line.endswith(str(path.resolve())) and " r-xp " in line for line in maps.splitlines())


def test_library_without_the_alignment_stays_where_it_was_loaded(tmp_path):
    path = _library(tmp_path, "libplain.so", ())
    lib = ctypes.CDLL(str(path))
    result = move_text_to_huge_pages(path)
    assert result.huge_kb == 0
    if _THP.exists() and "[never]" not in _THP.read_text():
        assert "2 MB boundary" in result.reason
    assert lib.triangle(50) == _expected(50)


def test_switched_off_by_the_environment(tmp_path, monkeypatch):
    path = _library(tmp_path, "liboff.so", LINK_FLAGS)
    lib = ctypes.CDLL(str(path))
    monkeypatch.setenv("DLPROC_NATIVE_HUGETEXT", "0")
    result = move_text_to_huge_pages(path)
    assert (result.huge_kb, result.reason) == (0, "DLPROC_NATIVE_HUGETEXT=0")
    assert lib.triangle(10) == _expected(10)


@needs_thp
def test_native_harness_reports_its_code_on_huge_pages():
    import sim_fixture as fx
    from dlproc.sim.harness import NativeSim

    sim = NativeSim.from_verilog(fx.fixture_verilog(64), top="fixture_top", mem_bytes=8, bytes_per_cycle=8,
                                 latency=10, ddr_size=1 << 20)
    assert sim.huge_text.huge_kb >= 2048, sim.huge_text
    sim.mem_write(0x100, bytes(range(64)))
    assert sim.mem_read(0x100, 64) == bytes(range(64))
