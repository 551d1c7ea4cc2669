"""Transposed-conv layer programs (sub-pixel phases on the conv engine, scattered STOREs) on the ISA
simulator, bit-exact with the golden model (``golden.ops.conv_transpose2d`` + ``numerics.requantize``)."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.targets.golden import ops
from dlproc.targets.isasim import SCHEDULES
from dlproc.compiler.layerprog import ConvTransposeLayer, build_convtranspose_program
from dlproc.compiler.planners.convtranspose import convtranspose_phases
from dlproc.targets.isasim import run_on_isasim
from dlproc.hardware.numerics import requantize

from layerprog_cases import small_config

CONFIGS = {
    "c4": small_config(4),
    "c4-tiny": small_config(4, inp=(10, 10, 8), out=(10, 10, 1), wgt=2048, prm=32),
    "c3-64bit": small_config(3, inp=(12, 12, 4), out=(10, 10, 2), wgt=1024, prm=32, width=64),
}


def reference(layer: ConvTransposeLayer, x: np.ndarray) -> np.ndarray:
    acc = ops.conv_transpose2d(x[None], layer.weight, layer.bias, layer.stride, layer.pads, layer.output_padding,
                               layer.dilation, layer.groups, layer.zp_in)[0]
    co = acc.shape[0]
    col = (co, 1, 1)
    mneg = layer.mult if layer.mult_neg is None else layer.mult_neg
    return requantize(acc, np.reshape(layer.mult, col), np.reshape(layer.shift, col), layer.zp_out, layer.act_min,
                      layer.act_max, np.reshape(mneg, col))


def random_layer(rng: np.random.Generator, max_ch: int = 10, max_hw: int = 9):
    while True:
        g = int(rng.choice([1, 1, 1, 2]))
        ci, co = g * int(rng.integers(1, max_ch // g + 1)), g * int(rng.integers(1, max_ch // g + 1))
        h, w = int(rng.integers(1, max_hw + 1)), int(rng.integers(1, max_hw + 1))
        k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        d = (int(rng.choice([1, 1, 2, 3])), int(rng.choice([1, 1, 2])))
        p = tuple(int(rng.integers(0, kk)) for kk in (k[0], k[1], k[0], k[1]))
        op = tuple(int(rng.integers(0, max(si, di))) for si, di in zip(s, d))
        ho = (h - 1) * s[0] + (k[0] - 1) * d[0] + 1 - p[0] - p[2] + op[0]
        wo = (w - 1) * s[1] + (k[1] - 1) * d[1] + 1 - p[1] - p[3] + op[1]
        if ho >= 1 and wo >= 1:
            break
    x = rng.integers(-128, 128, (ci, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ci // g, *k), dtype=np.int8)
    mult = rng.integers(1, 1 << 15, co)
    zp_out = int(rng.integers(-20, 21))
    layer = ConvTransposeLayer(wt, rng.integers(-20000, 20000, co).astype(np.int32), mult, rng.integers(12, 22, co),
                               np.where(rng.random(co) < 0.5, mult, rng.integers(0, 1 << 15, co)),
                               int(rng.integers(-20, 21)), zp_out, int(rng.choice([-128, zp_out])), 127,
                               s, p, op, d, g)
    return layer, x


def check(cfg, layer, x, schedules=SCHEDULES):
    prog = build_convtranspose_program(cfg, layer, x)
    ref = reference(layer, x)
    for schedule in schedules:
        got, res = run_on_isasim(prog, schedule=schedule)
        np.testing.assert_array_equal(got, ref)
        assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
        assert res.marks == [0]
    return prog


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("seed", range(10))
def test_random_convtranspose_matches_golden(name, seed):
    layer, x = random_layer(np.random.default_rng(7000 + 31 * seed + len(name)))
    check(CONFIGS[name], layer, x)


def test_edge_phases_read_only_padding():
    """Dilation 3 with stride 2 and output_padding: some outputs get no tap at all (bias only)."""
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (3, 2, 5), dtype=np.int8)
    wt = rng.integers(-128, 128, (5, 3, 2, 3), dtype=np.int8)
    layer = ConvTransposeLayer(wt, rng.integers(-9999, 9999, 5).astype(np.int32), rng.integers(1, 1 << 15, 5),
                               rng.integers(12, 20, 5), zp_in=3, zp_out=-2, stride=(2, 3), pads=(0, 1, 0, 0),
                               output_padding=(2, 1), dilation=(3, 2))
    assert any(not ph.real for ph in convtranspose_phases(layer, x.shape))
    check(CONFIGS["c4"], layer, x)


def test_upsampling_layer_tiles_and_scatters():
    """The usual 2x learned upsampling (4x4 kernel, stride 2, pad 1) on a layer that needs several tiles."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (9, 14, 13), dtype=np.int8)
    wt = rng.integers(-128, 128, (6, 9, 4, 4), dtype=np.int8)
    layer = ConvTransposeLayer(wt, rng.integers(-9999, 9999, 6).astype(np.int32), rng.integers(1, 1 << 15, 6),
                               rng.integers(14, 20, 6), zp_in=-5, zp_out=1, act_min=1, stride=2, pads=1)
    prog = check(CONFIGS["c4"], layer, x, schedules=("greedy",))
    assert prog.output_shape == (6, 28, 26)
    assert len(convtranspose_phases(layer, x.shape)) == 4
    assert prog.plan.steps > 4  # each phase is tiled
    stores = [i for i in prog.instructions if isinstance(i, isa.Store)]
    assert stores and all(st.x_size == 1 and st.y_stride == 2 and st.z_stride == 2 * 26 for st in stores)


def test_bad_layers_are_refused():
    x = np.zeros((2, 4, 4), np.int8)
    w = np.zeros((3, 2, 3, 3), np.int8)
    ones = np.ones(3, np.int64)
    with pytest.raises(CompileError, match="crop the whole"):
        build_convtranspose_program(CONFIGS["c4"], ConvTransposeLayer(w, ones, ones, ones, pads=6), x)
    with pytest.raises(CompileError, match="groups=2"):
        build_convtranspose_program(CONFIGS["c4"], ConvTransposeLayer(w, ones, ones, ones, groups=2), x)
    with pytest.raises(CompileError, match="output_padding"):
        build_convtranspose_program(CONFIGS["c4"], ConvTransposeLayer(w, ones, ones, ones, output_padding=-1), x)
