"""cocotb 2.1 benches on Verilator and the runner that builds and runs them (see runner.py)."""

from dlproc.sim.cocotb.runner import CocotbFailure, CocotbResult, build_cocotb, run_cocotb

__all__ = ["run_cocotb", "build_cocotb", "CocotbResult", "CocotbFailure"]
