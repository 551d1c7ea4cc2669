"""Simulation of the generated processor (installed as ``dlproc.sim``).

* :mod:`dlproc.sim.harness` -- ``NativeSim``: the Verilated processor plus a C++ DDR model in a
  shared library, driven through ctypes (whole programs, no Python per cycle);
* :mod:`dlproc.sim.build` -- the content-keyed, lock-protected Verilator build cache;
* :mod:`dlproc.sim.cocotb` -- ``run_cocotb`` and the cocotb 2.1 benches (CSR, DMA, blocks);
* :mod:`dlproc.sim.lint` -- ``verilator --lint-only -Wall`` with the documented waivers.

See docs/simulation.md.
"""

from dlproc.sim.build import BuildResult, SimBuildError, build_native, build_root
from dlproc.sim.harness import DdrStats, NativeSim, ProgramResult, SimTimeout

__all__ = ["NativeSim", "SimTimeout", "DdrStats", "ProgramResult", "BuildResult", "SimBuildError",
           "build_native", "build_root"]
