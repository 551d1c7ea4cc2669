"""cocotb benches of single compute blocks (constrained random, bit-exact with dlproc.hardware.numerics)."""

from __future__ import annotations

import pytest
from amaranth.back import verilog

from dlproc.hardware.gateware.output_stage import OutputStage
from dlproc.sim.cocotb import run_cocotb


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_output_stage_bench(tmp_path, seed):
    text = verilog.convert(OutputStage(4, 8), name="output_stage", emit_src=False)
    result = run_cocotb(text, "output_stage", "dlproc.sim.cocotb.test_output_stage", tmp_path,
                        {"DLPROC_BENCH_C": "4", "DLPROC_BENCH_SEED": str(seed)}, expect_tests=1)
    assert result.passed_names == ["random_items_match_requantize"] and result.failed == 0


@pytest.mark.slow
def test_output_stage_with_the_activation_table_bench(tmp_path):
    text = verilog.convert(OutputStage(4, 8, table=True), name="output_stage_table", emit_src=False)
    result = run_cocotb(text, "output_stage_table", "dlproc.sim.cocotb.test_output_stage", tmp_path,
                        {"DLPROC_BENCH_C": "4", "DLPROC_BENCH_SEED": "3", "DLPROC_BENCH_TABLE": "1"}, expect_tests=2)
    assert sorted(result.passed_names) == ["random_items_match_requantize", "random_items_through_the_table"]
    assert result.failed == 0
