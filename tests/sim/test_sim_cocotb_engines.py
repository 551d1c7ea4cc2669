"""cocotb benches of the compute engines at block level (Verilator), against dlproc.targets.golden.ops.

One bench per engine (``dlproc.sim.cocotb.benches.EngineBench``: the engine, the buffers it reads
with their write ports exposed, the output stage, the compute unit's instruction decode), seven of them
side by side in one top level (``EngineBenches``) so that a single Verilator build serves them,
with tiny hardware parameters so that the build stays short. Each run checks many
constrained-random layers (see the docstrings of ``sim/cocotb/test_<engine>.py``) plus one case
with a deliberately corrupted expected value that the bench must report.
``DLPROC_BENCH_SEED`` overrides the seed (failures print it with the case number).
"""

from __future__ import annotations

import os

import pytest

from dlproc.hardware import isa
from dlproc.sim.cocotb import run_cocotb
from dlproc.sim.cocotb.benches import SEED_ENV, bench_env, benches_verilog

pytestmark = pytest.mark.slow  # one Verilator build (cached by Verilog hash)


def _hw(c: int, inp: int, prm: int, **flags: bool) -> isa.HardwareParams:
    wgt = 256 if flags.pop("wgt", False) else 2
    return isa.HardwareParams(c=c, mem_data_width=64, inp_depth=inp, wgt_depth=wgt, prm_depth=prm,
                              out_depth=256, **flags)


# engine -> (hardware parameters, accumulator depth, cocotb test name)
BENCHES = {
    "conv": (_hw(4, 1024, 8, wgt=True), 64, "random_layers_match_golden_conv2d"),
    # The depthwise mode at C = 9: a window of three rows (dw_kh = 3), so 3x3 kernels in one CONV.
    "conv_dw": (_hw(9, 1024, 8, wgt=True), 64, "random_depthwise_match_golden_conv2d"),
    "pool": (_hw(2, 1024, 8), 64, "random_layers_match_golden_pool"),
    "add": (_hw(4, 512, 2, adder=True, multiply=True), 128, "random_adds_match_golden_add"),
    "upsample": (_hw(2, 512, 2, upsample=True), 128, "random_layers_match_golden_upsample"),
    "lrn": (_hw(2, 256, 128, lrn=True), 128, "random_lrn_match_golden_lrn"),
    "softmax": (_hw(4, 256, 64, softmax=True), 128, "random_softmax_match_golden_softmax_int8"),
}


@pytest.fixture(scope="module")
def top() -> tuple[str, str]:
    """All engine benches in one top level: one Verilator build (the runtime is compiled once)."""
    return benches_verilog({kind: (hw, acc) for kind, (hw, acc, _) in BENCHES.items()})


@pytest.mark.parametrize("kind", list(BENCHES))
def test_engine_bench(top, kind, tmp_path):
    hw, acc, test = BENCHES[kind]
    text, name = top
    seed = int(os.environ.get(SEED_ENV, "1"))
    result = run_cocotb(text, name, f"dlproc.sim.cocotb.test_{kind}", tmp_path,
                        bench_env(hw, acc, seed, prefix=f"{kind}__"), expect_tests=2, timeout_s=600)
    # Each module also runs one case with a corrupted expected value, which must be reported.
    assert result.failed == 0 and sorted(result.passed_names) == sorted([test, "corrupted_expectation_is_caught"])
