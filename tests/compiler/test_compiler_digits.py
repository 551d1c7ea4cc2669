"""The digits example through the compiler: partition, report, memory map, first-layer folding, and
bit-exact agreement of the ISA-level simulator running the compiled stream with run_int8."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.compiler import compile_network
from dlproc.config import ProcessorConfig
from dlproc.targets.golden.run import run_int8
from dlproc.quant import Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_MODEL
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config


@pytest.fixture(scope="module")
def qnet():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    return q.quantize()


@pytest.fixture(scope="module")
def images():
    x, y = digits_dataset("heldout")
    return x[:24], y[:24]


@pytest.mark.parametrize("config", [small_config(4), ProcessorConfig.preset("de10nano_int8")], ids=["c4", "de10nano"])
def test_digits_golden_target_is_bit_exact(qnet, images, config):
    x, _ = images
    wf = Workflow(qnet, config, target="golden")
    cn = wf.compile()
    probs = wf.predict(x)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    np.testing.assert_array_equal(wf.last_hw_values["fc"], ref["fc"])
    np.testing.assert_array_equal(probs, ref["softmax"])
    assert [t.name for t in cn.outputs] == ["fc"]


def test_partition_and_report(qnet):
    cn = compile_network(qnet, ProcessorConfig.preset("de10nano_int8"))
    hw = {l.name: l.hw for l in cn.layers}
    assert hw == {"input": False, "conv1": True, "pool1": True, "conv2": True, "pool2": True, "fc": True,
                  "softmax": False}
    text = cn.report()
    assert "'conv1'" in text and "(HW Layer)" in text and "(SW Layer)" in text
    assert "softmax (softmax) runs in software because SoftmaxBlockGeneration is off" in text
    assert "### Compiling layer group: conv1>>pool1 ..." in text
    for name in ("InputDataOffset", "OutputResultOffset", "InstructionDataOffset", "ConvWeightDataOffset",
                 "FCWeightDataOffset", "EndOffset"):
        assert f'"{name}"' in text
    # Regions are 4 KiB aligned, in MATLAB's order, and do not overlap.
    regions = cn.memory_map.regions
    assert [r.name for r in regions][-1] == "EndOffset"
    for a, b in zip(regions, regions[1:]):
        assert a.offset % 4096 == 0 and a.offset + a.size <= b.offset
    # The instruction stream ends with FINISH and has one MARK per profiled layer.
    insns = isa.decode_program(cn.instructions)
    assert isinstance(insns[-1], isa.Finish)
    assert [i.index for i in insns if isinstance(i, isa.Mark)] == [0, 1, 2, 3, 4]
    assert [p.layers for p in cn.profile] == [["conv1"], ["pool1"], ["conv2"], ["pool2"], ["fc"]]
    # Layer instruction ranges tile the program (up to the final FINISH).
    ranges = [(l.insn_first, l.insn_first + l.insn_count) for l in cn.layers if l.insn_count]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(insns) - 1
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_first_layer_folding_cuts_conv1_work(qnet, images):
    cfg = ProcessorConfig.preset("de10nano_int8")
    folded = compile_network(qnet, cfg)
    plain = compile_network(qnet, cfg, fold_input=False)
    assert folded.input.transform["kind"] == "im2col" and folded.input.dram_shape == (9, 16, 16)
    assert plain.input.transform is None and plain.input.dram_shape == (1, 16, 16)
    # conv1: 9 taps over one channel block become one 1x1 tap over one block of 9 channels.
    conv1 = lambda cn: [i for i in isa.decode_program(cn.instructions) if isinstance(i, isa.Conv)][0]
    assert (conv1(plain).kh, conv1(plain).kw) == (3, 3) and (conv1(folded).kh, conv1(folded).kw) == (1, 1)
    x, _ = images
    wf = Workflow(qnet, cfg, target="golden")
    wf.compile(fold_input=False)
    np.testing.assert_array_equal(wf.predict(x), run_int8(qnet, qnet.quantize_input(x))["softmax"])


def test_base_address_relocates_every_dram_access(qnet, images):
    cfg = small_config(4)
    cn = compile_network(qnet, cfg, base=0x10000)
    lo, hi = cn.base, cn.base + cn.memory_map.end
    for insn in isa.decode_program(cn.instructions):
        if isinstance(insn, (isa.Load, isa.Store)):
            assert lo <= insn.dram_addr < hi
    x, _ = images
    wf = Workflow(cn, cfg, target="golden")
    np.testing.assert_array_equal(wf.predict(x[:4]), run_int8(qnet, qnet.quantize_input(x[:4]))["softmax"])
