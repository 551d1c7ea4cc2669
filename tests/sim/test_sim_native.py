"""Native harness (Verilator .so + C++ DDR model via ctypes), tested on the port-contract fixture.

The fixture (tests/sim_fixture.py) is a CSR file plus a burst DMA copy engine with the processor's
exact top-level ports, so these tests pin down the harness and the DDR model independently of the
processor: CSR timing, data movement, byteenable, read latency, bytes per cycle, protocol and range
errors, timeouts, the build cache and its lock, and FST tracing.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random

import numpy as np
import pytest

from dlproc.errors import SimulationError
from dlproc.sim.build import build_native, build_root
from dlproc.sim.harness import NativeSim, SimTimeout

import sim_fixture as fx

BUS = 8  # the fixture's 64-bit memory bus


@pytest.fixture(scope="module")
def verilog() -> str:
    return fx.fixture_verilog(64)


def make_sim(verilog: str, bytes_per_cycle: float = 8, latency: int = 10, **kw) -> NativeSim:
    return NativeSim.from_verilog(verilog, top="fixture_top", mem_bytes=BUS, bytes_per_cycle=bytes_per_cycle,
                                  latency=latency, ddr_size=1 << 20, **kw)


def start_copy(sim: NativeSim, src: int, dst: int, n: int, burst: int = 4, irq: bool = True) -> None:
    for reg, value in ((fx.REG_SRC, src), (fx.REG_DST, dst), (fx.REG_LEN, n), (fx.REG_BURST, burst)):
        sim.csr_write(reg, value)
    sim.csr_write(fx.REG_CTRL, (fx.CTRL_IRQ_EN if irq else 0) | fx.CTRL_START)


def copy_cycles(sim: NativeSim, n: int, burst: int) -> int:
    sim.mem_write(0x1000, bytes(n))
    start_copy(sim, 0x1000, 0x40000, n, burst)
    return sim.run(1_000_000)


def test_csr_reset_values_readback_and_timing(verilog):
    sim = make_sim(verilog)
    assert sim.csr_read(fx.REG_ID) == fx.FIXTURE_ID
    assert sim.csr_read(fx.REG_SCRATCH) == 0x5A5A0000
    assert sim.csr_read(fx.REG_BURST) == 4
    assert sim.csr_read(fx.REG_DMA_LIMIT) == 0xFFFFFFFF
    before = sim.cycles
    sim.csr_write(fx.REG_SCRATCH, 0xCAFEF00D)
    assert sim.cycles == before + 1           # a write is one bus cycle
    assert sim.csr_read(fx.REG_SCRATCH) == 0xCAFEF00D
    assert sim.cycles == before + 2           # a read is one cycle plus the fixed latency
    sim.csr_write(fx.REG_SCRATCH, 0xFFFFFFFF + 5)   # values are masked to 32 bits
    assert sim.csr_read(fx.REG_SCRATCH) == 4
    assert not sim.irq


@pytest.mark.parametrize("n,burst", [(8, 1), (1000 * 8, 8), (96, 3)])
def test_copy_moves_exact_bytes(verilog, n, burst):
    sim = make_sim(verilog)
    rng = np.random.default_rng(n)
    data = rng.integers(0, 256, n, dtype=np.uint8)
    sim.mem_write(0x2000, data)                       # a numpy buffer is accepted as is
    guard = bytes([0xEE]) * 64
    sim.mem_write(0x80000 - 64, guard)
    sim.mem_write(0x80000 + n, guard)
    start_copy(sim, 0x2000, 0x80000, n, burst)
    cycles = sim.run(1_000_000)
    assert sim.irq and sim.last_status == "irq"
    assert sim.csr_read(fx.REG_STATUS) == fx.STATUS_DONE
    assert sim.mem_read(0x80000, n) == data.tobytes()
    assert sim.mem_read(0x80000 - 64, 64) == guard and sim.mem_read(0x80000 + n, 64) == guard
    stats = sim.ddr_stats()
    beats = n // BUS
    assert (stats.read_beats, stats.write_beats) == (beats, beats)
    assert (stats.read_bytes, stats.write_bytes) == (n, n)
    assert stats.read_cmds == stats.write_cmds == -(-beats // burst)
    assert stats.busy_cycles == 2 * beats
    assert 0 < cycles < 40 * beats + 100


def test_byteenable_is_honoured(verilog):
    sim = make_sim(verilog)
    n = 64
    sim.mem_write(0x1000, bytes(range(1, n + 1)))
    sim.mem_write(0x3000, bytes([0xAA]) * n)
    sim.csr_write(fx.REG_BE_MASK, 0b10100101)
    start_copy(sim, 0x1000, 0x3000, n, 8)
    sim.run(10_000)
    out = sim.mem_read(0x3000, n)
    expected = bytes((i + 1) if (0b10100101 >> (i % 8)) & 1 else 0xAA for i in range(n))
    assert out == expected
    assert sim.ddr_stats().write_bytes == n // 2


def test_read_latency_adds_exactly_per_burst(verilog):
    # The fixture waits for all beats of a burst before writing, so each burst sees the full latency.
    n, burst = 64 * BUS, 4
    bursts = n // BUS // burst
    c10 = copy_cycles(make_sim(verilog, latency=10), n, burst)
    c30 = copy_cycles(make_sim(verilog, latency=30), n, burst)
    assert c30 - c10 == 20 * bursts
    # Latency 0 is the protocol minimum of one cycle, the same as 1.
    assert copy_cycles(make_sim(verilog, latency=0), n, burst) == copy_cycles(make_sim(verilog, latency=1), n, burst)


@pytest.mark.parametrize("bpc", [1, 2, 4, 0.5])
def test_bytes_per_cycle_limits_throughput(verilog, bpc):
    n = 512 * BUS
    sim = make_sim(verilog, bytes_per_cycle=bpc, latency=1)
    cycles = copy_cycles(sim, n, 8)
    traffic = 2 * n                        # every byte is read and written once
    ideal = traffic / bpc
    # Credit banked before run() starts (at most one beat plus one cycle's worth) may save a few cycles.
    banked = (BUS + bpc) / bpc
    assert ideal - banked <= cycles <= ideal * 1.03 + 200, (cycles, ideal)


def test_full_bandwidth_is_one_beat_per_cycle(verilog):
    n = 512 * BUS
    cycles = copy_cycles(make_sim(verilog, bytes_per_cycle=8, latency=1), n, 8)
    # Per 8-beat burst: NEXT, the READ command, 8 read beats (the first one latency=1 cycle after the
    # command) and 8 write beats, with no overlap in the fixture; plus one CHECK cycle.
    assert cycles == (n // BUS // 8) * 18 + 1


def test_out_of_range_access_is_an_error(verilog):
    sim = make_sim(verilog)
    start_copy(sim, 0x1000, (1 << 20) - 16, 64, 4)   # the write runs past the 1 MiB model
    with pytest.raises(SimulationError, match="outside the DDR model"):
        sim.run(10_000)
    code, message = sim.ddr_error
    assert code == 1 and "write" in message
    # The whole burst is checked at its first beat, so nothing of it was written.
    assert sim.ddr_stats().write_beats == 0
    assert sim.mem_read((1 << 20) - 16, 16) == bytes(16)


def test_misaligned_command_is_an_error(verilog):
    sim = make_sim(verilog)
    start_copy(sim, 0x1004, 0x2000, 64, 4)
    with pytest.raises(SimulationError, match="not aligned"):
        sim.run(10_000)
    assert sim.ddr_error[0] == 2


def test_dma_window_violation_issues_no_transaction(verilog):
    sim = make_sim(verilog)
    sim.csr_write(fx.REG_DMA_BASE, 0x1000)
    sim.csr_write(fx.REG_DMA_LIMIT, 0x2000)
    start_copy(sim, 0x1000, 0x1F00, 0x200, 4)        # destination runs past the limit
    sim.run(1000)
    assert sim.csr_read(fx.REG_STATUS) == fx.STATUS_ERROR
    stats = sim.ddr_stats()
    assert stats.read_cmds == stats.write_cmds == 0


def test_timeout_status_and_exception(verilog):
    sim = make_sim(verilog, bytes_per_cycle=1)
    start_copy(sim, 0x1000, 0x8000, 4096, 8)
    with pytest.raises(SimTimeout):
        sim.run(100)
    assert sim.last_status == "timeout"
    assert sim.run(50, raise_on_timeout=False) == 50
    assert sim.last_status == "timeout"
    assert sim.run(1_000_000) > 0 and sim.irq
    before = sim.cycles
    sim.step(7)                                      # step ignores the interrupt
    assert sim.cycles == before + 7


def test_mem_bounds_and_instances_are_independent(verilog):
    a = make_sim(verilog)
    b = make_sim(verilog)
    assert a.build.artifact == b.build.artifact and b.build.cached
    a.mem_write(0, b"\x01\x02\x03")
    assert a.mem_read(0, 3) == b"\x01\x02\x03" and b.mem_read(0, 3) == b"\x00\x00\x00"
    with pytest.raises(SimulationError, match="outside the modelled memory"):
        a.mem_write((1 << 20) - 2, b"abc")
    with pytest.raises(SimulationError):
        a.mem_read(-1, 4)
    a.close()
    with pytest.raises(SimulationError, match="closed"):
        a.csr_read(0)


def test_reset_keeps_memory_and_clears_registers(verilog):
    sim = make_sim(verilog)
    sim.mem_write(0x100, b"keep")
    sim.csr_write(fx.REG_SCRATCH, 1)
    sim.reset()
    assert sim.csr_read(fx.REG_SCRATCH) == 0x5A5A0000
    assert sim.mem_read(0x100, 4) == b"keep"


def _build_in_child(args):
    verilog, build_dir = args
    os.environ["DLPROC_BUILD_DIR"] = build_dir
    result = build_native(verilog, "stub_top", 4, config_hash="lock-test")
    return result.cached, str(result.artifact)


@pytest.mark.slow
def test_parallel_builds_of_one_key_build_once(tmp_path, monkeypatch):
    # A minimal hand-written top keeps this fresh build short.
    verilog = fx.stub_verilog(32)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_build_in_child, [(verilog, str(tmp_path))] * 2)
    assert sorted(cached for cached, _ in results) == [False, True]
    assert results[0][1] == results[1][1]
    # The library built by the children is reused here and works with a 32-bit bus.
    monkeypatch.setenv("DLPROC_BUILD_DIR", str(tmp_path))
    sim = NativeSim.from_verilog(verilog, top="stub_top", mem_bytes=4, bytes_per_cycle=4, latency=3,
                                 ddr_size=1 << 16, config_hash="lock-test")
    assert sim.build.cached and str(sim.build.artifact) == results[0][1]
    assert json.loads((sim.build.directory / "build.json").read_text())["seconds"] > 0
    assert sim.csr_read(0) == 0x5A5A0000
    sim.csr_write(0, 0x80000001)
    assert sim.csr_read(0) == 0x80000001 and sim.irq
    assert len(list(tmp_path.glob("native-*/build.json"))) == 1


@pytest.mark.slow
def test_fst_trace_is_written(verilog, tmp_path):
    path = tmp_path / "copy.fst"
    sim = make_sim(verilog, fst=path)
    assert sim.build.key != make_sim(verilog).build.key
    sim.mem_write(0x1000, bytes(range(64)))
    start_copy(sim, 0x1000, 0x2000, 64, 4)
    sim.run(10_000)
    assert sim.mem_read(0x2000, 64) == bytes(range(64))
    sim.close()
    data = path.read_bytes()
    assert len(data) > 200 and data[0] == 0      # FST files start with a header block (type 0)


def test_build_cache_location_and_marker(verilog):
    sim = make_sim(verilog)
    assert sim.build.directory.parent == build_root()
    marker = json.loads((sim.build.directory / "build.json").read_text())
    assert marker["artifact"].endswith("libdlsim.so")
    assert sim.build.seconds == pytest.approx(marker["seconds"], abs=0.01)


def test_random_copies_against_python_model(verilog):
    rng = random.Random(1234)
    sim = make_sim(verilog, bytes_per_cycle=3, latency=7)
    shadow = bytearray(1 << 16)
    for i in range(6):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40) * BUS))
        src = rng.randrange(0, 0x4000 // BUS) * BUS
        dst = 0x8000 + rng.randrange(0, 0x4000 // BUS) * BUS
        sim.mem_write(src, data)
        shadow[src:src + len(data)] = data
        start_copy(sim, src, dst, len(data), rng.randrange(1, 9))
        sim.run(1_000_000)
        sim.csr_write(fx.REG_STATUS, fx.STATUS_DONE)         # clear DONE for the next copy
        shadow[dst:dst + len(data)] = data
        assert sim.mem_read(0, 1 << 16) == bytes(shadow), f"copy {i}"
