"""Layer programs for random max / average / global average pools on the ISA simulator, compared
bit-exactly with the golden model (``golden.ops.maxpool`` / ``avgpool`` / ``global_avgpool``)."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.targets.golden import ops
from dlproc.targets.isasim import SCHEDULES
from dlproc.compiler.layerprog import PoolLayer, build_pool_program
from dlproc.targets.isasim import run_on_isasim

from layerprog_cases import pool_reference, random_pool, small_config

CFG = small_config(4, inp=(12, 12, 4), out=(10, 10, 2), wgt=1024, prm=32)


@pytest.mark.parametrize("kind", ["max", "avg", "global_avg"])
@pytest.mark.parametrize("seed", range(10))
def test_random_pool_matches_golden(kind, seed):
    layer, x = random_pool(np.random.default_rng(seed * 31 + len(kind)), kind)
    prog = build_pool_program(CFG, layer, x)
    for schedule in SCHEDULES:
        got, res = run_on_isasim(prog, schedule=schedule)
        np.testing.assert_array_equal(got, pool_reference(layer, x))
        assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}


def test_max_pool_pads_with_minus_128_and_tiles():
    rng = np.random.default_rng(4)
    x = np.full((6, 20, 20), -128, np.int8)
    x[:, 5:, 3:] = rng.integers(-128, 128, (6, 15, 17), dtype=np.int8)
    layer = PoolLayer("max", 3, 2, (1, 1, 1, 1))
    prog = build_pool_program(CFG, layer, x)
    got, _ = run_on_isasim(prog)
    np.testing.assert_array_equal(got, pool_reference(layer, x))
    loads = [i for i in prog.instructions if isinstance(i, isa.Load)]
    assert len(loads) > 2 and all(i.pad_value == -128 for i in loads)


@pytest.mark.parametrize("seed", range(6))
def test_avg_pool_excluding_padding_uses_per_window_divisors(seed):
    """count_include_pad=False: the divisor shrinks at the border, so the program splits each
    tile into rectangles of equal divisor, one POOL (and PRM pair) each."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    pads = tuple(int(rng.integers(0, k)) for _ in range(4))
    ch, h, w = int(rng.integers(1, 12)), int(rng.integers(k, 20)), int(rng.integers(k, 20))
    stride = int(rng.integers(1, 3))
    mult, shift = ops.avgpool_multipliers(1.0, float(rng.uniform(0.5, 2)), (h, w), k, stride, pads, False)
    layer = PoolLayer("avg", k, stride, pads, zp_in=int(rng.integers(-9, 9)), zp_out=int(rng.integers(-9, 9)),
                      mult=mult, shift=shift, count_include_pad=False)
    x = rng.integers(-128, 128, (ch, h, w), dtype=np.int8)
    prog = build_pool_program(CFG, layer, x)
    got, res = run_on_isasim(prog, schedule="stores-first")
    ref = ops.avgpool(x[None], k, stride, pads, False, layer.zp_in, mult, shift, layer.zp_out)[0]
    np.testing.assert_array_equal(got, ref)
    assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
    if np.ndim(mult) and len(np.unique(mult)) > 1:
        pools = [i for i in prog.instructions if isinstance(i, isa.Pool)]
        assert len({i.prm_base for i in pools}) > 1


def test_pool_errors():
    x = np.zeros((4, 40, 40), np.int8)
    with pytest.raises(CompileError, match="31x31"):
        build_pool_program(CFG, PoolLayer("global_avg"), x)
    with pytest.raises(CompileError, match="divisor per window"):
        build_pool_program(CFG, PoolLayer("avg", 3, 1, 1, count_include_pad=False), x)
    with pytest.raises(CompileError, match="smaller than the kernel"):
        build_pool_program(CFG, PoolLayer("max", 2, 2, (2, 0, 0, 0)), x)
    with pytest.raises(CompileError, match="kind"):
        build_pool_program(CFG, PoolLayer("median", 2), x)
