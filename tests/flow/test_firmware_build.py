"""The firmware builds warning-free (-Wall -Wextra -Werror) for every program and HAL, natively and
cross-compiled for the Cortex-A9 HPS, through dlproc.flow.firmware (cached) and the Makefile."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from dlproc.errors import ToolchainError
from dlproc.firmware import PROGRAMS, sources
from dlproc.flow.firmware import CROSS_CC, build_program, find_compiler

NATIVE = [("dlproc-run", "sim"), ("dlproc-run", "linux"), ("dlproc-agent", "sim"), ("dlproc-agent", "linux"),
          ("libdlproc_net.so", None)]


def _elf(path):
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF"
    ei_class = data[4]
    machine = struct.unpack_from("<H", data, 18)[0]
    if ei_class == 1:  # 32-bit
        e_flags = struct.unpack_from("<I", data, 36)[0]
        phoff, phentsize, phnum = struct.unpack_from("<I", data, 28)[0], *struct.unpack_from("<HH", data, 42)
        types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    else:
        e_flags = struct.unpack_from("<I", data, 48)[0]
        phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
        types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return ei_class, machine, e_flags, types


@pytest.mark.parametrize("program,hal", NATIVE)
def test_native_build_is_warning_free(program, hal):
    build = build_program(program, hal, werror=True)
    assert build.artifact.is_file() and build.artifact.stat().st_size > 1000
    ei_class, machine, _flags, _types = _elf(build.artifact)
    assert (ei_class, machine) == (2, 62)  # ELF64, x86-64
    again = build_program(program, hal, werror=True)
    assert again.cached and again.artifact == build.artifact


def test_sanitizer_builds_are_warning_free():
    for program, hal in (("fuzz-netfile", None), ("dlproc-agent", "sim")):
        build = build_program(program, hal, sanitize=True, werror=True)
        assert b"__asan_init" in build.artifact.read_bytes()


def test_sources_per_program_and_hal():
    names = {p.name for p in sources("dlproc-agent", "linux")}
    assert {"agent.c", "dlproc_rt.c", "netfile.c", "hal_linux.c"} <= names and "hal_sim.c" not in names
    assert "hal_sim.c" in {p.name for p in sources("dlproc-run", "sim")}
    assert not {"dlproc_rt.c", "hal_sim.c", "hal_linux.c"} & {p.name for p in sources("fuzz-netfile")}
    assert set(PROGRAMS) == {"dlproc-run", "dlproc-agent", "fuzz-netfile", "libdlproc_net.so"}
    with pytest.raises(KeyError, match="unknown HAL"):
        sources("dlproc-run", "baremetal")


@pytest.mark.parametrize("program", ["dlproc-run", "dlproc-agent"])
def test_cross_compiles_for_cortex_a9(program):
    if shutil.which(CROSS_CC) is None:
        print(f"SKIPPED: {CROSS_CC} is not installed (CI: apt-get install -y gcc-arm-linux-gnueabihf)")
        pytest.skip(f"{CROSS_CC} is not installed; CI installs it with apt-get install -y gcc-arm-linux-gnueabihf")
    build = build_program(program, "linux", cross=True, werror=True)
    ei_class, machine, e_flags, types = _elf(build.artifact)
    assert (ei_class, machine) == (1, 40)  # ELF32, ARM
    assert e_flags & 0x400, "not the hard-float EABI (EF_ARM_ABI_FLOAT_HARD)"
    assert e_flags >> 24 == 5  # EABI version 5
    assert 3 not in types, "the HPS binary must be static (no PT_INTERP)"
    readelf = shutil.which("arm-linux-gnueabihf-readelf")
    if readelf:
        attrs = subprocess.run([readelf, "-A", str(build.artifact)], capture_output=True, text=True, check=True).stdout
        # The static C library's objects merge the CPU name to "7-A"; the architecture, NEON and the
        # hard-float calling convention are what the Cortex-A9 needs.
        assert "Tag_CPU_arch: v7" in attrs and "Tag_CPU_arch_profile: Application" in attrs
        assert "Tag_Advanced_SIMD_arch: NEON" in attrs and "Tag_ABI_VFP_args: VFP registers" in attrs


def test_missing_compilers_are_clear_errors(monkeypatch):
    monkeypatch.setenv("DLPROC_CROSS_CC", "no-such-arm-gcc")
    with pytest.raises(ToolchainError, match="apt-get install -y gcc-arm-linux-gnueabihf"):
        find_compiler(cross=True)
    with pytest.raises(ToolchainError, match="apt-get install -y gcc-arm-linux-gnueabihf"):
        build_program("dlproc-agent", "linux", cross=True)
    monkeypatch.setenv("CC", "no-such-gcc")
    with pytest.raises(ToolchainError, match="no C compiler"):
        build_program("dlproc-run", "sim")
    with pytest.raises(ToolchainError, match="simulation HAL"):
        build_program("dlproc-run", "sim", cross=True)


def test_makefile_builds_everything_warning_free(tmp_path):
    from dlproc.firmware import FIRMWARE_DIR

    targets = ["sim", "linux", "fuzz"] + (["cross"] if shutil.which(CROSS_CC) else [])
    proc = subprocess.run(["make", "-s", "-C", str(FIRMWARE_DIR), f"BUILD={tmp_path}", "WERROR=1", "-j", "2",
                           *targets], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == ""
    expected = ["dlproc-run-sim", "dlproc-agent-sim", "dlproc-run-linux", "dlproc-agent-linux", "fuzz-netfile",
                "libdlproc_net.so"] + (["arm/dlproc-run", "arm/dlproc-agent"] if "cross" in targets else [])
    for name in expected:
        assert (tmp_path / name).is_file(), name


def test_linux_hal_refuses_bad_options(tmp_path):
    """The HPS HAL's option checks run anywhere (the devices themselves exist only on the board)."""
    exe = build_program("dlproc-run", "linux", werror=True).artifact
    (tmp_path / "n").write_bytes(b"x")
    (tmp_path / "i").write_bytes(b"x")
    files = [str(tmp_path / "n"), str(tmp_path / "i"), str(tmp_path / "o")]

    def run(*hal):
        args = [a for h in hal for a in ("--hal", h)]
        return subprocess.run([str(exe), *args, *files], capture_output=True, text=True, timeout=30)

    proc = run("dma_phys=0x30000000", "dma_size=0x1000")
    assert proc.returncode == 1 and "exactly one of uio=/dev/uioN or csr_phys=ADDR" in proc.stderr
    proc = run("uio=/dev/uio0", "csr_phys=0xff200000", "udmabuf=udmabuf0")
    assert proc.returncode == 1 and "exactly one of uio" in proc.stderr
    proc = run("uio=/dev/uio0")
    assert proc.returncode == 1 and "exactly one of udmabuf=NAME or dma_phys=ADDR" in proc.stderr
    proc = run("uio=/dev/no-such-uio", "dma_phys=0x30000000", "dma_size=0x1000")
    assert proc.returncode == 1 and "/sys/class/uio/no-such-uio/maps/map0/size" in proc.stderr
    proc = run("frobnicate=1")
    assert proc.returncode == 1 and "unknown linux HAL option 'frobnicate'" in proc.stderr and "udmabuf=NAME" in proc.stderr
    proc = run("csr_phys=banana", "udmabuf=x")
    assert proc.returncode == 1 and "csr_phys has a bad value 'banana'" in proc.stderr
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "HAL 'linux' options" in proc.stdout
