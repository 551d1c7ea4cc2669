"""The activation table and the element-wise multiply on the Verilated processor (the every-block
C = 4 configuration of test_rtl_blocks, so the native build is shared): torch-style activations
(SiLU as Sigmoid + Mul, HardSwish, Sigmoid, Tanh, Softplus, HardSigmoid) fused into convs, an add
and an FC and run standalone, a squeeze-and-excitation block (channel-wise Mul) and ShuffleNet's
channel shuffle and chunk (channel views), and DenseNet's BatchNormalization after a Concat (a
depthwise conv over a padded concat), and VGG-16's first FC (25,088 inputs) as a partial-sum
chain of CONVs, are bit-exact
with the ISA-level simulator and ``golden.run.run_int8``; the estimate is within 5 % of the RTL
cycles."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.compiler import compile_network
from dlproc.hardware import isa
from dlproc.targets.golden.run import run_int8
from dlproc.targets.workflow import Workflow

from act_table_models import (quantized_activations, quantized_densenet, quantized_se, quantized_shuffle,
                              quantized_vgg_classifier)
from sim_fixture import blocks_config

pytestmark = pytest.mark.slow

CFG = blocks_config()  # one native build shared with test_rtl_blocks, test_rtl_fc and test_rtl_networks


BUILDERS = {"activations": quantized_activations, "se": quantized_se, "shuffle": quantized_shuffle,
            "densenet": quantized_densenet, "vgg_fc": quantized_vgg_classifier}


@pytest.mark.parametrize("which", sorted(BUILDERS))
def test_network_on_rtl_is_bit_exact_and_estimated(which):
    from dlproc.estimate import estimate_performance

    _, qnet, x = BUILDERS[which](CFG)
    cn = compile_network(qnet, CFG)
    insns = isa.decode_program(cn.instructions)
    if which in ("activations", "se"):
        assert isa.Opcode.ACTTAB in {insn.OPCODE for insn in insns}
    if which == "se":
        assert any(isinstance(i, isa.Add) and i.mul and i.b_repeat for i in insns)
    if which == "vgg_fc":
        assert any(isinstance(i, isa.Conv) and i.acc_keep for i in insns)
    ref = run_int8(qnet, qnet.quantize_input(x[:1]), collect=True)
    values = {}
    cycles = None
    for target in ("golden", "sim"):
        wf = Workflow(cn, CFG, target=target)
        try:
            _, prof = wf.predict(x[:1], profile=True, display=False)
        finally:
            wf.close()
        values[target] = dict(wf.last_hw_values)
        if target == "sim":
            cycles = prof.total_cycles
    for t in cn.outputs:
        np.testing.assert_array_equal(values["golden"][t.name], ref[t.name], err_msg=t.name)
        np.testing.assert_array_equal(values["sim"][t.name], ref[t.name], err_msg=t.name)
    est = estimate_performance(CFG, cn).cycles
    assert cycles and abs(est - cycles) / cycles <= 0.05, (est, cycles)
