"""Quality gate: the generated processor Verilog passes ``verilator --lint-only -Wall`` with only the
documented generator waivers (sim/lint_waivers.vlt, docs/simulation.md)."""

from __future__ import annotations

import pytest

from dlproc.sim.harness import processor_verilog
from dlproc.sim.lint import WAIVED_RULES, lint_verilog

from layerprog_cases import small_config
import sim_fixture as fx


@pytest.mark.slow
def test_processor_verilog_lints_clean_with_documented_waivers():
    report = lint_verilog(processor_verilog(small_config(4, width=64)), "dlproc_top")
    assert report.remaining == [], "\n".join(report.remaining[:30])
    assert report.returncode == 0
    # The waivers are not vacuous: the generator really produces these classes.
    assert set(report.waived_counts) <= set(WAIVED_RULES)
    assert report.waived_counts["WIDTHEXPAND"] > 0


@pytest.mark.slow
def test_every_optional_block_lints_clean_with_documented_waivers():
    """Adder, upsample, LRN, softmax and FC all generated (C = 4; the RTL tests' shared
    configuration, so its Verilog is cached with theirs): no warning beyond the generator waivers."""
    from dlproc.hardware.gateware import hardware_params

    cfg = fx.blocks_config()
    hw = hardware_params(cfg)
    assert hw.c == 4 and all((hw.adder, hw.upsample, hw.lrn, hw.softmax, hw.fc))
    report = lint_verilog(processor_verilog(cfg), "dlproc_top", count_waived=False)
    assert report.remaining == [], "\n".join(report.remaining[:30])
    assert report.returncode == 0


def test_lint_reports_a_real_problem():
    # A latch-like combinational loop is not waived and must be reported.
    verilog = fx.fixture_verilog(64) + "\nmodule bad(input a, output y); wire l; assign l = a ? l : 1'b0; assign y = l; endmodule\n"
    report = lint_verilog(verilog, "bad", count_waived=False)
    assert report.remaining and any("UNOPTFLAT" in w or "ALWCOMBORDER" in w or "UNOPT" in w for w in report.remaining), report.remaining
