"""cocotb bench of the FC engine (sim/cocotb/test_fc.py) on Verilator: random FC commands,
bit-exact with the golden model; C = 6 > F = 4 (each INP word copied in two chunks, nine weight
slices per WGT word). (C, F) = (4, 4/8/16) and (3, 8) are covered by the Amaranth-simulator tests."""

from __future__ import annotations

import pytest

from dlproc.sim.cocotb import run_cocotb
from dlproc.sim.cocotb.test_fc import bench_verilog


@pytest.mark.slow
@pytest.mark.parametrize("c, f, seed", [(6, 4, 2)])
def test_fc_engine_bench(tmp_path, c, f, seed):
    result = run_cocotb(bench_verilog(seed, c, f), "fc_bench", "dlproc.sim.cocotb.test_fc", tmp_path,
                        {"DLPROC_BENCH_C": str(c), "DLPROC_BENCH_F": str(f), "DLPROC_BENCH_SEED": str(seed)},
                        expect_tests=1)
    assert result.passed_names == ["random_fc_commands_match_golden"] and result.failed == 0
