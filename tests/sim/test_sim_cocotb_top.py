"""cocotb benches on the real processor top (C = 4, 64-bit memory), through run_cocotb.

One cocotb Verilator build of the configuration serves both benches (cached by Verilog hash).
"""

from __future__ import annotations

import json

import pytest

from dlproc.sim.cocotb import run_cocotb
from dlproc.sim.cocotb.common import CONFIG_ENV, SEED_ENV
from dlproc.sim.harness import processor_verilog

from layerprog_cases import small_config

pytestmark = pytest.mark.slow  # the first run builds the processor with --public-flat-rw


@pytest.fixture(scope="module")
def cfg():
    return small_config(4, width=64)


def bench_env(cfg, seed: int) -> dict[str, str]:
    return {CONFIG_ENV: json.dumps(cfg.to_dict()), SEED_ENV: str(seed)}


def test_csr_bench(cfg, tmp_path):
    result = run_cocotb(processor_verilog(cfg), "dlproc_top", "dlproc.sim.cocotb.test_csr", tmp_path,
                        bench_env(cfg, 1), expect_tests=4, timeout_s=900)
    assert result.failed == 0 and sorted(result.passed_names) == [
        "access_types_behave", "identity_registers_match_config", "irq_follows_status_and_ack",
        "reset_values_match_regmap"]


@pytest.mark.parametrize("seed", [1, 2])
def test_dma_bench(cfg, tmp_path, seed):
    result = run_cocotb(processor_verilog(cfg), "dlproc_top", "dlproc.sim.cocotb.test_dma", tmp_path,
                        bench_env(cfg, seed), expect_tests=5, timeout_s=900)
    # (the two write-response benches are skipped on a one-port processor: reported, not failed)
    assert result.failed == 0 and len(result.passed_names) == 5
    assert result.sim_time_ns > 0


def test_dma_bench_two_memory_ports(cfg, tmp_path):
    """The same benches on a MemoryPorts = 2 processor: a randomized, protocol-checking model on
    each master (reads on mem__, writes on mem1__, one memory), plus the write-response benches
    (completion after the last response, error responses); one seed, one more build."""
    two = cfg.copy()
    two.set_property("MemoryPorts", 2)
    result = run_cocotb(processor_verilog(two), "dlproc_top", "dlproc.sim.cocotb.test_dma", tmp_path,
                        bench_env(two, 3), expect_tests=5, timeout_s=900)
    assert result.failed == 0 and len(result.passed_names) == 5
