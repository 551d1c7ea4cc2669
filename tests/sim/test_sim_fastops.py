"""sim/native/dl_fastops.h against Verilator's own runtime functions, and the build step using it.

The native harness compiles the Verilated model with shift-based sign extensions instead of
Verilator's ``-(x & msb) | x`` (sim/build.py ``use_fast_sign_extension``). Every replaced function
must return exactly what Verilator's returns for the clean operands Verilator passes; a C++
program compares them for every operand width on edge values and random values.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dlproc.errors import ToolchainError
from dlproc.flow.toolchain import check_cxx_toolchain, find_verilator
from sim.build import FAST_SIGN_FUNCTIONS, NATIVE_DIR, use_fast_sign_extension

# One line per function: how the C++ check calls Verilator's and dlproc's version with operands
# a, b of width w (1..32 for the I forms, 1..64 for the Q forms) and result width 32 or 64.
_CHECKS = {
    "EXTENDS_II": ("I", "{p}EXTENDS_II(32, w, a)"),
    "EXTENDS_QI": ("I", "{p}EXTENDS_QI(64, w, a)"),
    "EXTENDS_QQ": ("Q", "{p}EXTENDS_QQ(64, w, a)"),
    "MULS_III": ("I", "{p}MULS_III(w, a, b)"),
    "MULS_QQQ": ("Q", "{p}MULS_QQQ(w, a, b)"),
    "GTS_III": ("I", "{p}GTS_III(w, a, b)"),
    "GTES_III": ("I", "{p}GTES_III(w, a, b)"),
    "LTS_III": ("I", "{p}LTS_III(w, a, b)"),
    "LTES_III": ("I", "{p}LTES_III(w, a, b)"),
    "GTS_IQQ": ("Q", "{p}GTS_IQQ(w, a, b)"),
    "GTES_IQQ": ("Q", "{p}GTES_IQQ(w, a, b)"),
    "LTS_IQQ": ("Q", "{p}LTS_IQQ(w, a, b)"),
    "LTES_IQQ": ("Q", "{p}LTES_IQQ(w, a, b)"),
}

_PROGRAM = r"""
#include "verilated.h"
#include "dl_fastops.h"
#include <cstdio>
#include <random>

static uint64_t mask(int w) { return w >= 64 ? ~0ULL : ((1ULL << w) - 1); }

// Edge values of a w-bit operand (0, 1, the largest and smallest signed values, all ones) and
// random ones, all clean: no bit set at or above w.
template <typename F>
static long sweep(int max_width, F check) {
    std::mt19937_64 rng(12345);
    long bad = 0;
    for (int w = 1; w <= max_width; ++w) {
        const uint64_t m = mask(w), msb = 1ULL << (w - 1);
        const uint64_t edges[] = {0, 1, msb - 1, msb, msb + 1, m, m - 1, m >> 1};
        for (uint64_t a : edges)
            for (uint64_t b : edges) bad += check(w, a & m, b & m);
        for (int i = 0; i < 4000; ++i) bad += check(w, rng() & m, rng() & m);
    }
    return bad;
}

int main() {
    long bad = 0;
CHECKS
    std::printf("mismatches %ld\n", bad);
    return bad != 0;
}
"""


def _check_source() -> str:
    lines = []
    for name, (kind, call) in _CHECKS.items():
        width, ctype = (32, "IData") if kind == "I" else (64, "QData")
        ours, theirs = call.format(p="DL_"), call.format(p="VL_")
        lines.append(
            f"    bad += sweep({width}, [](int w, uint64_t x, uint64_t y) {{\n"
            f"        const {ctype} a = ({ctype})x, b = ({ctype})y; (void)b;\n"
            f"        const bool differ = (uint64_t)({ours}) != (uint64_t)({theirs});\n"
            f"        if (differ) std::printf(\"{name} w=%d a=%llx b=%llx\\n\", w, (unsigned long long)x, (unsigned long long)y);\n"
            f"        return (long)differ; }});")
    return _PROGRAM.replace("CHECKS", "\n".join(lines))


def test_every_replaced_function_is_checked():
    assert set(_CHECKS) == set(FAST_SIGN_FUNCTIONS)


def test_fastops_match_verilator_runtime(tmp_path: Path):
    check_cxx_toolchain()
    include = find_verilator().root / "include"
    source = tmp_path / "fastops_check.cpp"
    source.write_text(_check_source())
    exe = tmp_path / "fastops_check"
    cxx = os.environ.get("CXX", "g++")
    # -O2, as the model is compiled: the check must hold for the optimised code, too.
    build = subprocess.run([cxx, "-std=c++17", "-O2", f"-I{include}", f"-I{include / 'vltstd'}", f"-I{NATIVE_DIR}",
                            str(source), "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip().endswith("mismatches 0"), run.stdout[-4000:]


def _model_file(obj: Path, name: str, body: str) -> Path:
    path = obj / name
    path.write_text(f'// Verilated\n#include "Vtop__pch.h"\n\n{body}\n')
    return path


def test_rename_touches_only_the_replaced_calls(tmp_path: Path):
    obj = tmp_path / "obj"
    obj.mkdir()
    model = _model_file(obj, "Vtop___024root__0.cpp",
                        "x = VL_MULS_III(16, VL_EXTENDS_II(16,8, a), b);\n"
                        "y = VL_SHIFTRS_III(8, 8, 3, c, 2);\n"
                        "z = VL_GTS_IQQ(40, d, e) + MY_VL_EXTENDS_II(1);\n")
    untouched = _model_file(obj, "Vtop___024root__1.cpp", "w = VL_SHIFTR_III(8, 8, 3, c, 2);\n")
    harness = tmp_path / "harness.cpp"
    harness.write_text("int v = VL_EXTENDS_II(32, 8, 1);\n")

    assert use_fast_sign_extension(obj) == 3
    text = model.read_text()
    assert 'include "Vtop__pch.h"\n#include "dl_fastops.h"\n' in text
    assert "DL_MULS_III(16, DL_EXTENDS_II(16,8, a), b)" in text
    assert "VL_SHIFTRS_III(8, 8, 3, c, 2)" in text        # not a replaced function
    assert "DL_GTS_IQQ(40, d, e)" in text and "MY_VL_EXTENDS_II(1)" in text  # whole names only
    assert "dl_fastops" not in untouched.read_text()       # nothing to replace, file unchanged
    assert harness.read_text() == "int v = VL_EXTENDS_II(32, 8, 1);\n"  # outside obj/


def test_rename_refuses_a_model_without_the_pch_include(tmp_path: Path):
    obj = tmp_path / "obj"
    obj.mkdir()
    (obj / "Vtop___024root__0.cpp").write_text("x = VL_EXTENDS_II(16, 8, a);\n")
    with pytest.raises(ToolchainError, match="Vtop__pch.h"):
        use_fast_sign_extension(obj)
