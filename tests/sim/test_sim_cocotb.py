"""cocotb benches on Verilator, run through dlproc.sim.cocotb.run_cocotb (one cached build per DUT)."""

from __future__ import annotations

import pytest

from dlproc.sim.cocotb import CocotbFailure, run_cocotb

import sim_fixture as fx


@pytest.fixture(scope="module")
def fixture_verilog() -> str:
    return fx.fixture_verilog(64)


@pytest.mark.slow
def test_fixture_bench_passes(fixture_verilog, tmp_path):
    result = run_cocotb(fixture_verilog, "fixture_top", "cocotb_fixture_bench", tmp_path, {"BENCH_SEED": "11"},
                        expect_tests=3)
    assert result.tests == 3 and result.failed == 0
    assert sorted(result.passed_names) == ["csr_reset_values_and_readback", "dma_window_violation_issues_no_transaction",
                                           "randomized_copies"]
    assert result.sim_time_ns > 0


@pytest.mark.slow
def test_runner_reports_failures(fixture_verilog, tmp_path):
    # A bench whose reset-value expectation is wrong must fail loudly with the test's name.
    with pytest.raises(CocotbFailure, match="csr_reset_values_and_readback"):
        run_cocotb(fixture_verilog, "fixture_top", "cocotb_fixture_bench", tmp_path,
                   {"BENCH_BREAK": "1"}, testcase="csr_reset_values_and_readback")
