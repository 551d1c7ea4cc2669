"""Optional-block layer programs on the Verilated processor: ADD and UPSAMPLE on the C = 4
configuration of test_rtl_layers (the cached native build is shared), LRN and SOFTMAX on a C = 4
configuration with every block; bit-exact with the ISA-level simulator and the golden model."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.targets.golden import ops
from dlproc.compiler.layerprog import AddLayer, UpsampleLayer, build_add_program, build_upsample_program
from dlproc.targets.isasim import run_on_isasim

from layerprog_cases import small_config
from sim_fixture import blocks_config

pytestmark = pytest.mark.slow

CFG = small_config(4)


@pytest.fixture(scope="module")
def sim():
    from dlproc.sim.harness import NativeSim

    with NativeSim(CFG, ddr_size=1 << 20) as s:
        yield s


def test_add_rtl_matches_isasim_and_golden(sim):
    rng = np.random.default_rng(1200)
    xa = rng.integers(-128, 128, (10, 17, 19), dtype=np.int8)
    xb = rng.integers(-128, 128, (10, 17, 19), dtype=np.int8)
    ma, mb, shift = ops.add_params(0.05, 0.02, 0.06)
    layer = AddLayer(za=5, ma=ma, zb=-9, mb=mb, shift=shift, zp_out=-3, act_min=-3, act_max=127)  # ReLU
    prog = build_add_program(CFG, layer, xa, xb)
    out, res = sim.run_layer_program(prog, max_cycles=5_000_000)
    assert res.error_code == 0
    isa_out, _ = run_on_isasim(prog)
    ref = ops.add(xa[None], 5, ma, xb[None], -9, mb, shift, -3, -3, 127)[0]
    np.testing.assert_array_equal(isa_out, ref)
    np.testing.assert_array_equal(out, ref)


def test_upsample_rtl_matches_isasim_and_golden(sim):
    rng = np.random.default_rng(1201)
    x = rng.integers(-128, 128, (9, 13, 11), dtype=np.int8)
    prog = build_upsample_program(CFG, UpsampleLayer(2), x)
    out, res = sim.run_layer_program(prog, max_cycles=5_000_000)
    assert res.error_code == 0
    ref = ops.upsample_nearest(x[None], 2)[0]
    np.testing.assert_array_equal(run_on_isasim(prog)[0], ref)
    np.testing.assert_array_equal(out, ref)


@pytest.fixture(scope="module")
def sim_all():
    """A processor with every optional block (sim_fixture.blocks_config, shared with test_rtl_networks)."""
    from dlproc.sim.harness import NativeSim

    with NativeSim(blocks_config(), ddr_size=1 << 20) as s:
        yield s


def test_lrn_rtl_matches_isasim_and_golden(sim_all):
    """Table load (LOAD PRM / LRNTAB pairs), then tiles of pixels with all their channel blocks."""
    from dlproc.compiler.layerprog import LrnLayer, build_lrn_program

    rng = np.random.default_rng(1202)
    params = ops.lrn_params(5, 1e-4, 0.75, 1.0, 0.1, 0.05)  # GoogLeNet's size/alpha/beta/bias
    layer = LrnLayer(size=5, zp_in=-3, table_mult=params.mult, table_shift=params.shift, zp_out=2)
    x = rng.integers(-128, 128, (19, 9, 11), dtype=np.int8)
    prog = build_lrn_program(blocks_config(), layer, x)
    out, res = sim_all.run_layer_program(prog, max_cycles=5_000_000)
    assert res.error_code == 0
    ref = ops.lrn(x[None], 5, -3, params.mult, params.shift, 2)[0]
    np.testing.assert_array_equal(run_on_isasim(prog)[0], ref)
    np.testing.assert_array_equal(out, ref)


def test_softmax_rtl_matches_isasim_and_golden(sim_all):
    from dlproc.compiler.layerprog import SoftmaxLayer, build_softmax_program

    rng = np.random.default_rng(1203)
    x = rng.integers(-128, 128, (1000, 1, 1), dtype=np.int8)  # a classifier's output
    table = ops.softmax_exp_table(0.08)
    prog = build_softmax_program(blocks_config(), SoftmaxLayer(table), x)
    out, res = sim_all.run_layer_program(prog, max_cycles=5_000_000)
    assert res.error_code == 0
    ref = ops.softmax_int8(x[None], table)[0]
    np.testing.assert_array_equal(run_on_isasim(prog)[0], ref)
    np.testing.assert_array_equal(out, ref)
