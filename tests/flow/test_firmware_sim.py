"""Firmware in the loop: the C runtime (dlproc-run, simulation HAL) runs the real compiled digits
network on the Verilated processor. Outputs must equal the ISA-level simulator and the layer-level
golden model bit for bit, the profile must equal what the Python harness reads from the same RTL,
and every failure (other configuration, DMA region too small, wrong input, timeout, processor error)
must be reported by name."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets import host
from dlproc.flow.firmware import build_program
from dlproc.targets.golden.run import run_int8
from dlproc.targets.workflow import Workflow

from firmware_fixture import (CFG, decode_outputs, digits, other_config, packed_frames, rebuild, section,
                              sim_hal_args)

pytestmark = pytest.mark.slow  # the first run builds the Verilated processor (cached afterwards)


@pytest.fixture(scope="module")
def runner():
    return build_program("dlproc-run", "sim", werror=True).artifact


def run_fw(runner, tmp_path, blob, frame, *extra, hal=None):
    net, inp, out = tmp_path / "net.dlnet", tmp_path / "in.bin", tmp_path / "out.bin"
    net.write_bytes(blob)
    inp.write_bytes(frame)
    if out.exists():
        out.unlink()
    proc = subprocess.run([str(runner), *(hal or sim_hal_args()), *extra, str(net), str(inp), str(out)],
                          capture_output=True, text=True, timeout=120)
    return proc, (out.read_bytes() if out.exists() else None)


def parse_profile(stdout: str) -> tuple[int, list[int]]:
    total = int(re.search(r"^total: (\d+) cycles", stdout, re.M).group(1))
    entries = [int(m.group(1)) for m in re.finditer(r"^\d+\s+\S+\s+(\d+)\s+[\d.]+$", stdout, re.M)]
    return total, entries


def test_digits_network_matches_golden_bit_for_bit(runner, tmp_path):
    d = digits()
    cn = d.cn
    frames = packed_frames(cn)
    golden = Workflow(cn, target="golden")
    golden.predict(d.x)
    layer_level = run_int8(d.qnet, host.quantize_input(cn, d.x), collect=True)
    for i, frame in enumerate(frames):
        proc, region = run_fw(runner, tmp_path, d.blob, frame)
        assert proc.returncode == 0, proc.stderr
        assert len(region) == next(r["size"] for r in cn.memory_map.to_list() if r["name"] == "OutputResultOffset")
        outs = decode_outputs(cn, region)
        for name, value in outs.items():
            np.testing.assert_array_equal(value, golden.last_hw_values[name][i])
            np.testing.assert_array_equal(value, layer_level[name][i])
    assert int(np.argmax(outs["fc"])) == int(np.argmax(golden.last_hw_values["fc"][-1]))


def test_profile_equals_the_python_harness_on_the_same_rtl(runner, tmp_path):
    d = digits()
    frame = packed_frames(d.cn)[0]
    proc, _ = run_fw(runner, tmp_path, d.blob, frame)
    assert proc.returncode == 0, proc.stderr
    total, entries = parse_profile(proc.stdout)
    assert len(entries) == len(d.cn.profile) and all(e > 0 for e in entries)
    for entry in d.cn.profile:
        assert "+".join(entry.layers)[:20] in proc.stdout
    sim = Workflow(d.cn, target="sim")
    try:
        _, prof = sim.predict(d.x[:1], profile=True, display=False)
    finally:
        sim.close()
    assert total == prof.last_frame_cycles
    assert entries == [layer.cycles for layer in prof.layers]
    counters = dict(re.findall(r"(\w+)=(\d+)", proc.stdout.split("counters:")[1].splitlines()[0]))
    assert int(counters["COMPUTE_BUSY"]) > 0 and int(counters["MEM_RD_BEATS"]) > 0


def test_network_for_another_configuration_is_refused(runner, tmp_path):
    other = digits("other")
    proc, out = run_fw(runner, tmp_path, other.blob, packed_frames(other.cn)[0])
    assert proc.returncode == 1 and out is None
    assert "E_CONFIG" in proc.stderr and f"{other.cn.hash64:016x}" in proc.stderr
    assert f"{CFG.hash64:016x}" in proc.stderr and "recompile" in proc.stderr
    assert other_config().hash64 == other.cn.hash64


def test_dma_region_too_small_and_wrong_input(runner, tmp_path):
    d = digits()
    frame = packed_frames(d.cn)[0]
    proc, _ = run_fw(runner, tmp_path, d.blob, frame, hal=sim_hal_args(ddr_size=0x8000))
    assert proc.returncode == 1 and "E_RANGE" in proc.stderr and "cannot be moved into the DMA region" in proc.stderr
    proc, _ = run_fw(runner, tmp_path, d.blob, frame[:-16])
    assert proc.returncode == 1 and "E_INPUT" in proc.stderr and str(len(frame)) in proc.stderr
    corrupt = bytearray(d.blob)
    corrupt[-100] ^= 0xFF
    proc, _ = run_fw(runner, tmp_path, bytes(corrupt), frame)
    assert proc.returncode == 1 and "E_FORMAT" in proc.stderr and "checksum" in proc.stderr


def test_timeout_aborts_and_reports(runner, tmp_path):
    d = digits()
    # At a 1 MHz clock, 1 ms of processor time is 1000 cycles, far less than the network needs.
    proc, out = run_fw(runner, tmp_path, d.blob, packed_frames(d.cn)[0], "--timeout-ms", "1",
                       hal=sim_hal_args(clock_mhz=1.0))
    assert proc.returncode == 1 and out is None
    assert "E_TIMEOUT" in proc.stderr and "aborted" in proc.stderr and "still busy" not in proc.stderr


def _patched_program(blob: bytes, index: int, patch) -> bytes:
    insns = bytearray(section(blob, "INSN"))
    word = bytearray(insns[32 * index:32 * index + 32])
    patch(word)
    insns[32 * index:32 * index + 32] = word
    return rebuild(blob, {"INSN": bytes(insns)})


def test_processor_errors_are_named_with_the_layer(runner, tmp_path):
    d = digits()
    cn = d.cn
    frame = packed_frames(cn)[0]
    program = isa.decode_program(section(d.blob, "INSN"))
    # An illegal opcode in the middle of conv2's instructions.
    conv2 = cn.layer("conv2")
    k = conv2.insn_first + conv2.insn_count // 2
    bad = _patched_program(d.blob, k, lambda w: w.__setitem__(0, (w[0] & 0xF0) | 0xC))  # opcode 12
    proc, _ = run_fw(runner, tmp_path, bad, frame)
    assert proc.returncode == 1 and "E_PROC" in proc.stderr
    assert "ILLEGAL_OPCODE" in proc.stderr and f"instruction {k}" in proc.stderr and "'conv2'" in proc.stderr
    # A STORE whose first element is the network's last bus beat, so its bursts run past the DMA
    # window's end: the hardware refuses them (no bus transaction) and reports DMA_STORE.
    s = next(i for i, insn in enumerate(program) if isinstance(insn, isa.Store) and insn.x_size > 1)
    program[s].dram_addr = cn.base + cn.memory_map.end - cn.bus_bytes

    def aim_outside(w: bytearray) -> None:
        w[:] = isa.encode_program([program[s]])
    proc, _ = run_fw(runner, tmp_path, _patched_program(d.blob, s, aim_outside), frame)
    assert proc.returncode == 1 and "DMA_STORE" in proc.stderr and "address 0x" in proc.stderr
    assert f"window [0x0, {cn.memory_map.end:#x})" in proc.stderr
    layer = next(l for l in cn.layers if l.insn_count and l.insn_first <= s < l.insn_first + l.insn_count)
    assert f"'{layer.name}'" in proc.stderr


def test_network_at_the_boards_dma_window_and_relocation(runner, tmp_path):
    """Compiled for base 0x30000000 (the boards' reserved DDR window) and run with the simulated DDR
    placed there; and each file run in the other's region, which the runtime relocates to: the same
    bit-exact result every time."""
    from dlproc.compiler import netfile
    from dlproc.compiler import compile_network

    d = digits()
    golden = Workflow(d.cn, target="golden")
    golden.predict(d.x[3:4])
    at_board = compile_network(d.qnet, CFG, base=0x30000000)
    cases = [(netfile.to_bytes(at_board), at_board, "0x30000000", None),
             (netfile.to_bytes(at_board), at_board, "0", "relocated from 0x30000000"),
             (d.blob, d.cn, "0x30000000", "relocated from 0x0")]
    for blob, cn, ddr_base, note in cases:
        proc, region = run_fw(runner, tmp_path, blob, packed_frames(cn)[3],
                              hal=sim_hal_args() + ["--hal", f"ddr_base={ddr_base}"])
        assert proc.returncode == 0, proc.stderr
        assert f"memory [{int(ddr_base, 0):#x}, " in proc.stdout
        assert (note in proc.stdout) if note else ("relocated" not in proc.stdout)
        np.testing.assert_array_equal(decode_outputs(cn, region)["fc"], golden.last_hw_values["fc"][0])
