"""GoogLeNet support: the in-code builder, concats whose inputs are not multiples of C (padding
channels), stride-1 max pools (no longer split: the pool engine reuses window columns) and the
weight prefetch across barriers -- bit-exact on the ISA simulator and (slow) the RTL;
the full 224x224 run is ``benchmarks/bench_googlenet.py``."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.compiler import compile_network
from dlproc.config import ProcessorConfig
from dlproc.frontends.onnx import load_onnx
from dlproc.targets.golden.run import run_int8
from dlproc.models import INCEPTION, googlenet_macs, googlenet_onnx
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from block_networks import mini_inception, quantize_shape


def test_builder_topology_and_macs():
    model = googlenet_onnx(size=32, classes=10)
    net = load_onnx(model)
    ops = [layer.op for layer in net.layers]
    assert ops.count("lrn") == 2 and ops.count("concat") == len(INCEPTION) == 9
    assert ops.count("conv") == 3 + 6 * 9 and ops.count("fc") == 1
    assert net["inception_5b_output"].shape.c == 1024
    assert googlenet_macs() == 1_582_671_872  # 1.58 G, the figure MATLAB's table is based on
    conv_fc_224 = sum(np.prod(n.params["weight"].shape) for n in load_onnx(googlenet_onnx()).layers
                      if n.op in ("conv", "fc"))
    assert 6.9e6 < conv_fc_224 < 7.1e6
    with pytest.raises(ValueError, match="multiple of 32"):
        googlenet_onnx(size=100)


def test_unaligned_concat_pads_channels_and_is_bit_exact():
    net = mini_inception(np.random.default_rng(3))
    qnet = quantize_shape(net, (4, 10, 10))
    cfg = small_config(4)
    cn = compile_network(qnet, cfg)
    assert any("padding channels" in n for n in cn.notes)
    # The column-reusing pool engine makes the separable split of a max pool never pay.
    assert not any("row pass" in n for n in cn.notes)
    x = np.random.default_rng(4).uniform(0, 1, (2, 4, 10, 10)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    wf = Workflow(cn, cfg, target="golden")
    wf.predict(x)
    np.testing.assert_array_equal(wf.last_hw_values["fc"], ref["fc"])


def test_weight_prefetch_moves_loads_in_front_of_barriers():
    net = mini_inception(np.random.default_rng(3))
    cn = compile_network(quantize_shape(net, (4, 10, 10)), small_config(4))
    insns = isa.decode_program(cn.instructions)
    # "after" follows the max pool "down" (which it reads, so through a full barrier): its first
    # WGT load now precedes the pool's barrier, so the first LOAD of "after" (which takes the
    # barrier's token) is not a WGT load.
    after = cn.layer("after")
    loads = [i for i in insns[after.insn_first:after.insn_first + after.insn_count] if isinstance(i, isa.Load)]
    assert loads[0].pop_next and loads[0].buf != isa.Buf.WGT
    pool = cn.layer("down")
    before = insns[pool.insn_first:pool.insn_first + pool.insn_count]
    assert isinstance(before[-1], isa.Pool) and before[-1].pop_next and before[-1].push_prev  # the barrier
    assert any(isinstance(i, isa.Load) and i.buf == isa.Buf.WGT for i in before)


def test_googlenet_32_on_the_arria10_preset_is_bit_exact_on_the_isa_simulator():
    net = load_onnx(googlenet_onnx(size=32, classes=10))
    qnet = quantize_shape(net, (3, 32, 32), n=2)
    cfg = ProcessorConfig.preset("arria10soc_int8")
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    cn = compile_network(qnet, cfg)
    x = np.random.default_rng(5).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    wf = Workflow(cn, cfg, target="golden")
    wf.predict(x)
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)


@pytest.mark.slow
def test_unaligned_concat_on_rtl_is_bit_exact():
    net = mini_inception(np.random.default_rng(3))
    qnet = quantize_shape(net, (4, 10, 10))
    cfg = small_config(4)
    x = np.random.default_rng(6).uniform(0, 1, (1, 4, 10, 10)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    rtl = Workflow(qnet, cfg, target="sim")
    try:
        rtl.predict(x, profile=True, display=False)
        np.testing.assert_array_equal(rtl.last_hw_values["fc"], ref["fc"])
    finally:
        rtl.close()
