"""The FC engine and the softmax block on the Verilated processor (C = 4, F = 4: the every-block
configuration of test_rtl_blocks, so the native build is shared): an FC layer program and a
compiled network with Gemm + softmax (Workflow sim target) are bit-exact with the ISA-level
simulator and ``golden.run.run_int8``."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa, regmap
from dlproc.targets.golden import ops
from dlproc.targets.golden.run import run_int8
from dlproc.compiler.layerprog import FcLayer, build_fc_program
from dlproc.targets.isasim import run_on_isasim
from dlproc.hardware.numerics import requantize
from dlproc.targets.workflow import Workflow

from test_compiler_fc import gemm_softmax_net, quantize
from sim_fixture import blocks_config

pytestmark = pytest.mark.slow

CFG = blocks_config()  # one native build shared with test_rtl_blocks and test_rtl_networks


def sim_hw() -> isa.HardwareParams:
    return isa.HardwareParams.from_config(CFG)


@pytest.fixture(scope="module")
def sim():
    from dlproc.sim.harness import NativeSim

    with NativeSim(CFG, ddr_size=1 << 20) as s:
        yield s


def test_fc_layer_program_rtl_matches_isasim_and_golden(sim):
    rng = np.random.default_rng(710)
    ch, h, w, co = 7, 3, 3, 45  # 72 lanes of input, several tiles of outputs
    x = rng.integers(-128, 128, (ch, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ch * h * w), dtype=np.int8)
    bias = rng.integers(-30000, 30000, co).astype(np.int32)
    mult, shift = rng.integers(1, 1 << 15, co), rng.integers(15, 21, co)
    layer = FcLayer(wt, bias, mult, shift, None, zp_in=4, zp_out=-7, act_min=-7, act_max=127)
    prog = build_fc_program(CFG, layer, x)
    assert prog.plan.steps >= 2
    out, res = sim.run_layer_program(prog, max_cycles=2_000_000)
    assert res.error_code == 0
    ref = requantize(ops.fully_connected(x.reshape(1, -1), wt, bias, 4)[0], mult, shift, -7, -7, 127)
    np.testing.assert_array_equal(run_on_isasim(prog)[0].reshape(-1), ref)
    np.testing.assert_array_equal(out.reshape(-1), ref)
    # The MAC counters: FC_MAC_ACTIVE is one cycle per weight slice (n_out * ceil(n_in / F) per FC),
    # and the conv array did nothing.
    f = sim_hw().fc_lanes
    slices = sum(i.n_out * -(-i.n_in // f) for i in prog.instructions if isinstance(i, isa.Fc))
    assert slices > 0
    assert sim.csr_read(regmap.offset("FC_MAC_ACTIVE")) == slices
    assert sim.csr_read(regmap.offset("MAC_ACTIVE")) == 0


def test_gemm_softmax_network_on_rtl_is_bit_exact():
    rng = np.random.default_rng(711)
    qnet = quantize(gemm_softmax_net(rng), rng, CFG)
    x = rng.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    wf = Workflow(qnet, CFG, target="sim")
    try:
        y, prof = wf.predict(x, profile=True, display=False)
    finally:
        wf.close()
    # The profile carries the measured MAC counters of the last frame: the conv layer on the array,
    # the two Gemm layers on the FC engine's lanes.
    act = prof.mac_activity
    assert act is not None and act.fc_lanes == sim_hw().fc_lanes
    assert act.conv_cycles > 0 and act.fc_cycles > 0
    assert 0 < prof.issued_utilization <= 1
    assert "FC_MAC_ACTIVE" in prof.table()
    opcodes = {insn.OPCODE for insn in isa.decode_program(wf.compiled.instructions)}
    assert {isa.Opcode.FC, isa.Opcode.SMXTAB, isa.Opcode.SOFTMAX} <= opcodes
    for t in wf.compiled.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)
    np.testing.assert_array_equal(y, qnet.dequantize("prob", ref["prob"]))


def test_an_fc_output_larger_than_out_reuses_the_ring_with_store_tokens():
    """3,000 outputs are 750 channel blocks, more than OUT's 512 words: every tile stores and the
    OUT ring wraps. Its STOREs must give the S2C token back to the FC that overwrites their slot
    (the zoo's VGG-16 and AlexNet found them not doing so: the linker refused the program)."""
    from dlproc.compiler import compile_network
    from dlproc.quant import Quantizer
    from dlproc.regress.generator import NetworkBuilder

    rng = np.random.default_rng(3000)
    b = NetworkBuilder("wide_fc", (128, 1, 1))
    y = b.fc("fc", "input", (rng.standard_normal((3000, 128)) * 0.1).astype(np.float32),
             (rng.standard_normal(3000) * 0.1).astype(np.float32))
    q = Quantizer(b.build([y]))
    x = rng.uniform(-1, 1, (4, 128, 1, 1)).astype(np.float32)
    q.calibrate(x)
    qnet = q.quantize()
    cn = compile_network(qnet, CFG)
    ref = run_int8(qnet, qnet.quantize_input(x[:2]), collect=True)
    for target in ("golden", "sim"):
        wf = Workflow(cn, CFG, target=target)
        wf.predict(x[:2], display=False)
        wf.close()
        np.testing.assert_array_equal(wf.last_hw_values["fc"], ref["fc"], err_msg=target)


def vgg_fc_config():
    """C = 4 with an INP half that holds a 512x7x7 input (25,088 elements) and a WGT half of
    32 KB: the weights of one output (25,088 bytes) fit it, those of C = 4 outputs do not, so the
    layer runs as one FC instruction per output (``Fc.lane0``), four per OUT word."""
    from layerprog_cases import small_config

    return small_config(4, inp=(28, 28, 32), out=(10, 10, 4), wgt=32768)


def test_fc_25088_inputs_runs_sub_word_tiles_bit_exact():
    """VGG-16's first FC in miniature (25,088 inputs, 10 outputs) on a buffer too small for C
    outputs: RTL = ISA-level simulator = golden model, and the program really uses sub-word tiles."""
    from dlproc.sim.harness import NativeSim

    cfg = vgg_fc_config()
    rng = np.random.default_rng(712)
    ch, h, w, co = 512, 7, 7, 10
    x = rng.integers(-128, 128, (ch, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ch * h * w), dtype=np.int8)
    bias = rng.integers(-30000, 30000, co).astype(np.int32)
    mult, shift = rng.integers(1 << 12, 1 << 14, co), rng.integers(30, 32, co)
    layer = FcLayer(wt, bias, mult, shift, None, zp_in=3, zp_out=-5, act_min=-128, act_max=127)
    prog = build_fc_program(cfg, layer, x)
    fcs = [i for i in prog.instructions if isinstance(i, isa.Fc)]
    assert [(i.n_out, i.lane0, i.out_base) for i in fcs] == [(1, o % 4, o // 4) for o in range(co)]
    ref = requantize(ops.fully_connected(x.reshape(1, -1), wt, bias, 3)[0], mult, shift, -5, -128, 127)
    assert np.unique(ref).size > 5  # the outputs are not all saturated
    np.testing.assert_array_equal(run_on_isasim(prog)[0].reshape(-1), ref)
    with NativeSim(cfg, ddr_size=1 << 20) as s:
        out, res = s.run_layer_program(prog, max_cycles=2_000_000)
    assert res.error_code == 0
    np.testing.assert_array_equal(out.reshape(-1), ref)
