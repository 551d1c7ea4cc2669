"""The Linux HAL (the one the HPS runs) without a board: a sparse file stands in for /dev/mem
(``mem_dev=``), with the processor's registers at the lightweight-bridge address 0xFF200000 and
the DMA window at 0x30000000, as on the boards. The file does not compute, so its STATUS is preset
(DONE, idle or ERROR); the test checks every register and byte the runtime writes, that the
network is relocated into the window, that outputs and counters are read back, and that timeouts
and processor errors are reported. It runs the cross-compiled ARM binary under qemu-arm when both
exist, and the native build of the same code always."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from dlproc.hardware import isa, regmap
from dlproc.flow.firmware import CROSS_CC, build_program

from firmware_fixture import digits, packed_frames, section

CSR = 0xFF200000
DMA = 0x30000000
DMA_SIZE = 0x100000
PATTERN_SEED = 0x5A


def _runners():
    out = [pytest.param("native", id="native")]
    arm = shutil.which(CROSS_CC) and shutil.which("qemu-arm")
    out.append(pytest.param("arm", id="arm-qemu", marks=pytest.mark.skipif(
        not arm, reason="needs arm-linux-gnueabihf-gcc and qemu-arm (apt-get install -y gcc-arm-linux-gnueabihf "
                        "qemu-user)")))
    return out


def _exe(kind):
    if kind == "arm":
        return ["qemu-arm", str(build_program("dlproc-run", "linux", cross=True, werror=True).artifact)]
    return [str(build_program("dlproc-run", "linux", werror=True).artifact)]


class FakeMem:
    """A sparse file laid out like the HPS physical address space."""

    def __init__(self, path, cn, status):
        self.path = path
        with open(path, "wb") as f:
            f.truncate(CSR + 0x1000)
        regs = {
            "ID": regmap.MAGIC, "VERSION": (regmap.VERSION_MAJOR << 16) | (regmap.VERSION_MINOR << 8) | isa.ISA_VERSION,
            "CONFIG_HASH_LO": cn.hash64 & 0xFFFFFFFF, "CONFIG_HASH_HI": cn.hash64 >> 32,
            "HW_PARAMS": cn.c | (cn.bus_bytes << 8) | (16 << 16) | (8 << 24), "HW_INP_DEPTH": 256,
            "HW_WGT_DEPTH": 256, "HW_PRM_DEPTH": 32, "HW_OUT_DEPTH": 100, "HW_PROFILE_DEPTH": 16,
            "STATUS": status, "CYCLES_LO": 1234, "CYCLES_HI": 0, "FETCHED": cn.insn_count,
            "PROF_COUNT": len(cn.profile), "PROF_DATA_LO": 777, "COMPUTE_BUSY": 4321,
            "ERR_INSN": 3, "ERR_ADDR": DMA + 0x1234,
        }
        for name, value in regs.items():
            self.poke(CSR + 4 * regmap.offset(name), struct.pack("<I", value))

    def poke(self, addr, data):
        with open(self.path, "r+b") as f:
            f.seek(addr)
            f.write(data)

    def peek(self, addr, n):
        with open(self.path, "rb") as f:
            f.seek(addr)
            return f.read(n)

    def reg(self, name):
        return struct.unpack("<I", self.peek(CSR + 4 * regmap.offset(name), 4))[0]


def _run(kind, tmp_path, mem, blob, frame, *extra):
    (tmp_path / "net").write_bytes(blob)
    (tmp_path / "in").write_bytes(frame)
    hal = ["--hal", f"csr_phys={CSR:#x}", "--hal", f"mem_dev={mem.path}", "--hal", f"dma_phys={DMA:#x}",
           "--hal", f"dma_size={DMA_SIZE:#x}", "--hal", "poll_us=200"]
    return subprocess.run([*_exe(kind), *hal, *extra, str(tmp_path / "net"), str(tmp_path / "in"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)


def _regions(cn):
    return {r["name"]: r for r in cn.memory_map.to_list()}


@pytest.mark.parametrize("kind", _runners())
def test_registers_memory_and_readback(kind, tmp_path):
    d = digits()
    cn = d.cn
    regions = _regions(cn)
    mem = FakeMem(tmp_path / "mem", cn, status=0x2)  # DONE
    out = regions["OutputResultOffset"]
    pattern = bytes((PATTERN_SEED + 7 * i) & 0xFF for i in range(out["size"]))
    mem.poke(DMA + out["offset"], pattern)
    frame = packed_frames(cn)[0]
    proc = _run(kind, tmp_path, mem, d.blob, frame)
    assert proc.returncode == 0, proc.stderr
    assert "HAL linux" in proc.stdout and f"relocated from {cn.base:#x}" in proc.stdout
    assert "total: 1234 cycles" in proc.stdout and "COMPUTE_BUSY=4321" in proc.stdout
    assert (tmp_path / "out").read_bytes() == pattern
    # The registers the runtime programmed (the last CTRL write is the ACK after the run).
    insn = regions["InstructionDataOffset"]["offset"]
    assert mem.reg("INSN_BASE") == DMA + insn and mem.reg("INSN_COUNT") == cn.insn_count
    assert mem.reg("DMA_BASE") == DMA and mem.reg("DMA_LIMIT") == DMA + cn.memory_map.end
    assert mem.reg("CTRL") == regmap.REG["CTRL"].field("ACK").mask
    assert mem.reg("PROF_INDEX") == len(cn.profile) - 1
    # What landed in the DMA window: input, weights, and the program relocated to 0x30000000.
    assert mem.peek(DMA + regions["InputDataOffset"]["offset"], len(frame)) == frame
    cw = section(d.blob, "CWGT")
    assert mem.peek(DMA + regions["ConvWeightDataOffset"]["offset"], len(cw)) == cw
    fw = section(d.blob, "FWGT")
    assert mem.peek(DMA + regions["FCWeightDataOffset"]["offset"], len(fw)) == fw
    placed = isa.decode_program(mem.peek(DMA + insn, 32 * cn.insn_count))
    original = isa.decode_program(section(d.blob, "INSN"))
    moved = 0
    for a, b in zip(placed, original):
        if isinstance(b, (isa.Load, isa.Store)):
            assert a.dram_addr == b.dram_addr - cn.base + DMA
            b.dram_addr = a.dram_addr
            moved += 1
        assert a == b
    assert moved > 0


@pytest.mark.parametrize("kind", _runners())
def test_timeout_and_processor_error(kind, tmp_path):
    d = digits()
    frame = packed_frames(d.cn)[0]
    mem = FakeMem(tmp_path / "mem", d.cn, status=0x0)  # idle, never finishes
    proc = _run(kind, tmp_path, mem, d.blob, frame, "--timeout-ms", "30")
    assert proc.returncode == 1 and "E_TIMEOUT" in proc.stderr and "aborted" in proc.stderr
    assert mem.reg("CTRL") == regmap.REG["CTRL"].field("ACK").mask  # ABORT, then ACK
    code = int(isa.ErrorCode.DMA_LOAD)
    mem = FakeMem(tmp_path / "mem2", d.cn, status=0x4 | (code << 8))
    proc = _run(kind, tmp_path, mem, d.blob, frame)
    layer = next(l for l in d.cn.layers if l.insn_count and l.insn_first <= 3 < l.insn_first + l.insn_count)
    assert proc.returncode == 1 and "E_PROC" in proc.stderr
    assert f"DMA_LOAD (code {code}) at instruction 3 (layer '{layer.name}'), address {DMA + 0x1234:#010x}" in proc.stderr
    mem = FakeMem(tmp_path / "mem3", d.cn, status=0x1)  # busy with something else
    proc = _run(kind, tmp_path, mem, d.blob, frame)
    assert proc.returncode == 1 and "E_STATE" in proc.stderr and "busy" in proc.stderr
    other = digits("other")
    proc = _run(kind, tmp_path, FakeMem(tmp_path / "mem4", d.cn, status=0x2), other.blob, frame)
    assert proc.returncode == 1 and "E_CONFIG" in proc.stderr
