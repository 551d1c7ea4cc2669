"""FC layers on the FC engine and softmax on the softmax block, compiled for a C = 4 configuration:
on the ISA-level simulator (golden target) every tensor the host reads back equals
``golden.run.run_int8`` bit for bit (the int8 softmax included); with fc.ModuleGeneration off the
FC layer falls back to the conv module and the report says so; with the softmax block off the host
computes softmax in float and the report says so."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden.run import run_int8
from dlproc.ir import Activation
from dlproc.quant import Quantizer

from layerprog_cases import small_config
from test_compiler_random import check_golden
from test_quant_nets import NetBuilder, rand_b, rand_w


def fc_config(fc: bool = True, softmax: bool = True, lanes: int = 8):
    cfg = small_config(4)
    cfg.set_module_property("fc", "ModuleGeneration", fc)
    cfg.set_module_property("fc", "SoftmaxBlockGeneration", softmax)
    cfg.set_module_property("fc", "FCThreadNumber", lanes)
    cfg.set_module_property("fc", "InputMemorySize", 512)
    return cfg


def gemm_softmax_net(rng):
    """conv 3x3 -> maxpool -> fc (ReLU) -> fc -> softmax over 10 classes."""
    b = NetBuilder("gemm_softmax", (3, 8, 8))
    b.conv("c1", "input", rand_w(rng, 6, 3, 3, 3), rand_b(rng, 6), pads=(1, 1, 1, 1), act=Activation("relu"))
    b.pool("p1", "c1", "maxpool", 2, 2)
    b.fc("fc1", "p1", rand_w(rng, 37, 6 * 4 * 4), rand_b(rng, 37), act=Activation("relu"))
    b.fc("fc2", "fc1", rand_w(rng, 10, 37), rand_b(rng, 10))
    b.softmax("prob", "fc2")
    return b.build(["prob"])


def quantize(net, rng, config=None):
    q = Quantizer(net, config=config)
    q.calibrate(rng.uniform(-1, 1, (12, 3, 8, 8)).astype(np.float32))
    return q.quantize()


def _opcodes(cn) -> list[isa.Opcode]:
    return [insn.OPCODE for insn in isa.decode_program(cn.instructions)]


def test_gemm_and_int8_softmax_on_their_blocks_match_golden():
    rng = np.random.default_rng(700)
    cfg = fc_config()
    qnet = quantize(gemm_softmax_net(rng), rng, cfg)
    assert qnet["prob"].hardware and qnet["prob"].zero_point == -128
    x = rng.uniform(-1, 1, (3, 3, 8, 8)).astype(np.float32)
    cn = check_golden(qnet, cfg, x)
    ops = _opcodes(cn)
    assert ops.count(isa.Opcode.FC) >= 2 and isa.Opcode.SOFTMAX in ops and isa.Opcode.SMXTAB in ops
    text = cn.report()
    assert "prob (softmax) runs in software" not in text and "fallback" not in text
    # run_int8 runs the block's integer softmax: the output is int8 with scale 1/256.
    ref = run_int8(qnet, qnet.quantize_input(x))["prob"]
    assert ref.dtype == np.int8


def test_fc_off_falls_back_to_conv_and_softmax_off_runs_on_host():
    rng = np.random.default_rng(701)
    cfg = fc_config(fc=False, softmax=False)
    qnet = quantize(gemm_softmax_net(rng), rng, cfg)
    assert not qnet["prob"].hardware
    x = rng.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    cn = check_golden(qnet, cfg, x)
    ops = _opcodes(cn)
    assert isa.Opcode.FC not in ops and isa.Opcode.SOFTMAX not in ops
    text = cn.report()
    assert "fc1 (fc) runs on the conv module as a convolution (hardware fallback) because fc.ModuleGeneration is off" in text
    assert "prob (softmax) runs in software because SoftmaxBlockGeneration is off" in text


def test_softmax_block_on_but_float_quantized_network_runs_on_host():
    rng = np.random.default_rng(702)
    cfg = fc_config()
    qnet = quantize(gemm_softmax_net(rng), rng)  # quantized without the configuration: float softmax
    cn = check_golden(qnet, cfg, rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32))
    assert isa.Opcode.FC in _opcodes(cn) and isa.Opcode.SOFTMAX not in _opcodes(cn)
    assert "quantize it with this configuration" in cn.report()


def test_int8_softmax_without_the_block_names_the_property():
    from dlproc.compiler import compile_network
    from dlproc.errors import CompileError

    rng = np.random.default_rng(703)
    qnet = quantize(gemm_softmax_net(rng), rng, fc_config())
    with pytest.raises(CompileError, match="turn on fc.SoftmaxBlockGeneration"):
        compile_network(qnet, fc_config(softmax=False))


@pytest.mark.parametrize("preset, per_insn", [("de10nano_int8", 2), ("arria10soc_int8", 8)])
def test_vgg_fc6_inputs_run_as_sub_word_fc_tiles_on_the_presets(preset, per_insn):
    """VGG-16's first FC reads 512x7x7 = 25,088 inputs: the weights of C outputs do not fit a WGT
    half of either preset, so each FC instruction computes ``per_insn`` < C outputs starting inside
    its OUT word (``Fc.lane0``); the ISA-level simulator's result is the golden one."""
    from dlproc.compiler.layerprog import FcLayer, build_fc_program
    from dlproc.config import ProcessorConfig
    from dlproc.hardware.numerics import requantize
    from dlproc.targets.golden import ops
    from dlproc.targets.isasim import run_on_isasim

    cfg = ProcessorConfig.preset(preset)
    c = cfg.conv_c
    rng = np.random.default_rng(715)
    co = 2 * c + 3
    x = rng.integers(-128, 128, (512, 7, 7), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, 512 * 49), dtype=np.int8)
    bias = rng.integers(-30000, 30000, co).astype(np.int32)
    mult, shift = rng.integers(1 << 12, 1 << 14, co), rng.integers(30, 32, co)
    layer = FcLayer(wt, bias, mult, shift, None, zp_in=-2, zp_out=6, act_min=6, act_max=127)
    prog = build_fc_program(cfg, layer, x)
    fcs = [i for i in prog.instructions if isinstance(i, isa.Fc)]
    starts = list(range(0, co, per_insn))
    assert [(i.lane0, i.out_base, i.n_out) for i in fcs] == [(o % c, o // c, min(per_insn, co - o)) for o in starts]
    ref = requantize(ops.fully_connected(x.reshape(1, -1), wt, bias, -2)[0], mult, shift, 6, 6, 127)
    assert np.unique(ref).size > 5
    np.testing.assert_array_equal(run_on_isasim(prog)[0].reshape(-1), ref)


def test_fc_that_fits_neither_engine_runs_as_a_partial_sum_conv():
    """An FC too large for the x buffer falls back to a convolution; when one output block's
    weights do not fit WGT either (16 blocks x 64 taps = 1024 words, WGT holds 512), the conv's
    reduction is split into a partial-sum chain: bit-exact, and the notes say both."""
    rng = np.random.default_rng(716)
    cfg = fc_config()  # x buffer of 512 elements, WGT of 512 words
    b = NetBuilder("big_fc", (64, 8, 8))
    b.fc("fc1", "input", rand_w(rng, 8, 64 * 64), rand_b(rng, 8))
    q = Quantizer(b.build(["fc1"]), config=cfg)
    q.calibrate(rng.uniform(-1, 1, (4, 64, 8, 8)).astype(np.float32))
    cn = check_golden(q.quantize(), cfg, rng.uniform(-1, 1, (2, 64, 8, 8)).astype(np.float32))
    text = "\n".join(cn.notes)
    assert "fc1: does not fit the FC engine (fc over 64x8x8 inputs (4096 lanes): the x buffer holds 512" in text
    assert "reduction split into 4 partial-sum CONVs per output block" in text
    convs = [i for i in isa.decode_program(cn.instructions) if isinstance(i, isa.Conv)]
    assert [(c.cin_blocks, c.acc_in, c.acc_keep) for c in convs] == [(4, 0, 1), (4, 1, 1), (4, 1, 1), (4, 1, 0)] * 2


