"""Add and upsample layer programs (adder module, segmentation block) on the ISA-level simulator,
bit-exact against the golden ops on random shapes, tiled and untiled, and the BLOCK_ABSENT paths."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.targets.golden import ops
from dlproc.hardware.geometry import Geometry
from dlproc.targets.isasim import BlockAbsentError, Machine
from dlproc.compiler.layerprog import AddLayer, UpsampleLayer, build_add_program, build_upsample_program
from dlproc.targets.isasim import run_on_isasim
from layerprog_cases import small_config

CFG = small_config(4, inp=(12, 12, 4), out=(10, 10, 2), wgt=1024, prm=32)


def _random_add(rng: np.random.Generator):
    ch, h, w = int(rng.integers(1, 14)), int(rng.integers(1, 20)), int(rng.integers(1, 20))
    xa = rng.integers(-128, 128, size=(ch, h, w), dtype=np.int8)
    xb = rng.integers(-128, 128, size=(ch, h, w), dtype=np.int8)
    ma, mb, shift = ops.add_params(float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.01, 0.1)),
                                   float(rng.uniform(0.02, 0.2)))
    zp_out = int(rng.integers(-20, 21))
    relu = bool(rng.random() < 0.5)
    layer = AddLayer(za=int(rng.integers(-30, 31)), ma=ma, zb=int(rng.integers(-30, 31)), mb=mb, shift=shift,
                     zp_out=zp_out, act_min=zp_out if relu else -128, act_max=127)
    return layer, xa, xb


@pytest.mark.parametrize("seed", range(6))
def test_random_add_matches_golden(seed):
    rng = np.random.default_rng(700 + seed)
    layer, xa, xb = _random_add(rng)
    prog = build_add_program(CFG, layer, xa, xb)
    out, res = run_on_isasim(prog)
    ref = ops.add(xa[None], layer.za, layer.ma, xb[None], layer.zb, layer.mb, layer.shift, layer.zp_out,
                  layer.act_min, layer.act_max)[0]
    np.testing.assert_array_equal(out, ref)
    assert res.executed["compute"] == prog.plan.steps + 1  # the ADDs and FINISH


@pytest.mark.parametrize("seed", range(6))
def test_random_upsample_matches_golden(seed):
    rng = np.random.default_rng(800 + seed)
    ch, h, w = int(rng.integers(1, 14)), int(rng.integers(1, 16)), int(rng.integers(1, 16))
    scale = (int(rng.integers(1, 4)), int(rng.integers(1, 4))) if seed % 2 else 2  # YOLOv3: 2
    x = rng.integers(-128, 128, size=(ch, h, w), dtype=np.int8)
    prog = build_upsample_program(CFG, UpsampleLayer(scale), x)
    out, _ = run_on_isasim(prog)
    np.testing.assert_array_equal(out, ops.upsample_nearest(x[None], scale)[0])


def test_large_layers_are_tiled_and_exact():
    rng = np.random.default_rng(900)
    x = rng.integers(-128, 128, size=(9, 26, 26), dtype=np.int8)
    prog = build_upsample_program(CFG, UpsampleLayer(2), x)
    assert prog.plan.steps > 4
    out, _ = run_on_isasim(prog, schedule="loads-first")
    np.testing.assert_array_equal(out, ops.upsample_nearest(x[None], 2)[0])
    layer, xa, xb = _random_add(rng)
    xa = rng.integers(-128, 128, size=(9, 30, 30), dtype=np.int8)
    xb = rng.integers(-128, 128, size=(9, 30, 30), dtype=np.int8)
    prog = build_add_program(CFG, layer, xa, xb)
    assert prog.plan.steps > 4
    for schedule in ("loads-first", "stores-first"):
        out, _ = run_on_isasim(prog, schedule=schedule)
        ref = ops.add(xa[None], layer.za, layer.ma, xb[None], layer.zb, layer.mb, layer.shift, layer.zp_out,
                      layer.act_min, layer.act_max)[0]
        np.testing.assert_array_equal(out, ref)


def _without(module: str, prop: str):
    cfg = CFG.copy()
    cfg.set_module_property(module, prop, False)
    return cfg


def test_builders_refuse_absent_blocks():
    x = np.zeros((4, 4, 4), dtype=np.int8)
    with pytest.raises(CompileError, match="adder.ModuleGeneration"):
        build_add_program(_without("adder", "ModuleGeneration"), AddLayer(0, 1, 0, 1, 0, 0), x, x)
    with pytest.raises(CompileError, match="conv.SegmentationBlockGeneration"):
        build_upsample_program(_without("conv", "SegmentationBlockGeneration"), UpsampleLayer(2), x)


def test_isasim_block_absent():
    geom = Geometry.from_config(_without("adder", "ModuleGeneration"))
    assert not geom.hw.adder and geom.hw.upsample
    mach = Machine(geometry=geom, dram_size=1 << 16)
    with pytest.raises(BlockAbsentError, match="adder.ModuleGeneration") as info:
        mach.run([isa.Add(count=1), isa.Finish()], insn_base=0)
    assert info.value.code == isa.ErrorCode.BLOCK_ABSENT and info.value.insn_index == 0


# ------------------------------------------------------------------------------------------------
# LRN
def _lrn_cfg():
    cfg = CFG.copy()
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    return cfg


def _random_lrn(rng: np.random.Generator, ch: int, h: int, w: int):
    from dlproc.compiler.layerprog import LrnLayer

    size = int(rng.choice([3, 5, 5, 9, 16, 1, 2]))
    params = ops.lrn_params(size, float(rng.uniform(1e-5, 1e-3)), float(rng.uniform(0.5, 0.9)),
                            float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.05, 0.5)), float(rng.uniform(0.05, 0.5)))
    zp_out = int(rng.integers(-10, 11))
    layer = LrnLayer(size=size, zp_in=int(rng.integers(-20, 21)), table_mult=params.mult, table_shift=params.shift,
                     zp_out=zp_out, act_min=-128, act_max=127)
    x = rng.integers(-128, 128, size=(ch, h, w), dtype=np.int8)
    return layer, x


def _lrn_ref(layer, x):
    return ops.lrn(x[None], layer.size, layer.zp_in, layer.table_mult, layer.table_shift, layer.zp_out,
                   layer.act_min, layer.act_max)[0]


@pytest.mark.parametrize("seed", range(5))
def test_random_lrn_matches_golden(seed):
    from dlproc.compiler.layerprog import build_lrn_program

    rng = np.random.default_rng(1000 + seed)
    layer, x = _random_lrn(rng, int(rng.integers(1, 30)), int(rng.integers(1, 12)), int(rng.integers(1, 12)))
    prog = build_lrn_program(_lrn_cfg(), layer, x)
    schedule = ("greedy", "loads-first", "stores-first")[seed % 3]
    out, _ = run_on_isasim(prog, schedule=schedule)
    np.testing.assert_array_equal(out, _lrn_ref(layer, x))


def test_lrn_table_clips_the_last_word_for_c_not_dividing_1792():
    from dlproc.compiler.layerprog import build_lrn_program

    cfg = small_config(3, inp=(12, 12, 3), out=(10, 10, 3), wgt=1024, prm=32)
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    rng = np.random.default_rng(1100)
    layer, x = _random_lrn(rng, 11, 5, 7)
    out, _ = run_on_isasim(build_lrn_program(cfg, layer, x))
    np.testing.assert_array_equal(out, _lrn_ref(layer, x))


def test_lrn_refused_without_the_block():
    from dlproc.compiler.layerprog import build_lrn_program

    layer, x = _random_lrn(np.random.default_rng(1101), 4, 2, 2)
    with pytest.raises(CompileError, match="conv.LRNBlockGeneration"):
        build_lrn_program(CFG, layer, x)


# ------------------------------------------------------------------------------------------------
# Softmax
@pytest.mark.parametrize("seed", range(4))
def test_random_softmax_matches_golden(seed):
    from dlproc.compiler.layerprog import SoftmaxLayer, build_softmax_program

    # A 1000-class vector is 250 channel blocks at C = 4: one pixel must fit an INP half and OUT.
    cfg = small_config(4, inp=(16, 16, 4), out=(16, 16, 4), wgt=1024, prm=32)
    cfg.set_module_property("fc", "SoftmaxBlockGeneration", True)
    rng = np.random.default_rng(1300 + seed)
    ch, h, w = ((1000, 1, 1), (int(rng.integers(1, 40)), int(rng.integers(1, 6)), int(rng.integers(1, 6))))[seed % 2]
    x = rng.integers(-128, 128, size=(ch, h, w), dtype=np.int8)
    table = ops.softmax_exp_table(float(rng.uniform(0.02, 0.3)))
    prog = build_softmax_program(cfg, SoftmaxLayer(table), x)
    out, _ = run_on_isasim(prog, schedule=("greedy", "loads-first", "stores-first")[seed % 3])
    np.testing.assert_array_equal(out, ops.softmax_int8(x[None], table)[0])


def test_softmax_refused_without_the_block():
    from dlproc.compiler.layerprog import SoftmaxLayer, build_softmax_program

    with pytest.raises(CompileError, match="fc.SoftmaxBlockGeneration"):
        build_softmax_program(CFG, SoftmaxLayer(ops.softmax_exp_table(0.1)), np.zeros((10, 1, 1), np.int8))


def test_block_streams_chain_like_the_compiler_does():
    """LRN (with its table prologue) -> UPSAMPLE -> ADD(upsampled, itself) joined by chain_streams:
    the streams the compiler would emit from plan_* + emit_instructions, on all schedules."""
    from dlproc.compiler.planners.schedule import ConvAddrs, chain_streams, emit_instructions
    from dlproc.compiler.planners.lrn import lrn_table_stream, pack_lrn_table, plan_lrn
    from dlproc.compiler.planners.packing import pack_input, unpack_output
    from dlproc.compiler.planners.add import plan_add
    from dlproc.compiler.planners.upsample import plan_upsample

    cfg = _lrn_cfg()
    geom = Geometry.from_config(cfg)
    rng = np.random.default_rng(1400)
    layer, x = _random_lrn(rng, 9, 5, 6)
    up = UpsampleLayer(2)
    ma, mb, shift = ops.add_params(0.05, 0.05, 0.08)
    add = AddLayer(za=1, ma=ma, zb=1, mb=mb, shift=shift, zp_out=0, act_min=0)
    pitch = geom.pitch("INP")
    nb = -(-9 // geom.c)
    a_x, a_tab, a_lrn, a_up, a_out, a_insn = 0x1000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000
    s1, p1 = plan_lrn(geom, layer, (9, 5, 6), ConvAddrs(a_x, 0, a_tab, a_lrn), cfg)
    s2, p2 = plan_upsample(geom, up, (9, 5, 6), ConvAddrs(a_lrn, 0, 0, a_up), cfg)
    s3, p3 = plan_add(geom, add, (9, 10, 12), ConvAddrs(a_up, 0, 0, a_out), a_up, cfg)
    streams = [lrn_table_stream(geom, a_tab) + emit_instructions(s1, p1, mark_index=None, finish=False),
               emit_instructions(s2, p2, mark_index=None, finish=False),
               emit_instructions(s3, p3, mark_index=None, finish=False)]
    prog = chain_streams(geom, streams)
    y1 = _lrn_ref(layer, x)
    y2 = ops.upsample_nearest(y1[None], 2)[0]
    ref = ops.add(y2[None], 1, ma, y2[None], 1, mb, shift, 0, 0, 127)[0]
    for schedule in ("greedy", "loads-first", "stores-first"):
        mach = Machine(geometry=geom, dram_size=1 << 20, schedule=schedule)
        mach.mem_write(a_x, pack_input(geom, x))
        mach.mem_write(a_tab, pack_lrn_table(geom, layer))
        mach.run(prog, insn_base=a_insn)
        out = unpack_output(geom, mach.mem_read(a_out, nb * 10 * 12 * pitch), (9, 10, 12))
        np.testing.assert_array_equal(out, ref, err_msg=schedule)
