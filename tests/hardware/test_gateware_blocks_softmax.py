"""SMXTAB and SOFTMAX (fc module's softmax block) on the compute unit (Amaranth simulator, C = 4):
bit-exact against the golden ``ops.softmax_int8`` on random data and channel counts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from test_gateware_compute_harness import OUT_FILL, random_buffers, run_program, small_hw

C = 4
TAB_WORDS = isa.SOFTMAX_TABLE_SIZE // C
HW = dataclasses.replace(small_hw(c=C, inp_depth=256, wgt_depth=16, prm_depth=TAB_WORDS, out_depth=256),
                         softmax=True)


def _buffers(seed: int, s_in: float):
    rng = np.random.default_rng(seed)
    buf = random_buffers(rng, HW)
    buf.bias[:TAB_WORDS] = ops.softmax_exp_table(s_in).astype(np.int64).reshape(TAB_WORDS, C)
    return rng, buf


def softmax_reference(buf, insn: isa.Softmax, s_in: float) -> np.ndarray:
    nb, n = insn.cin_blocks, insn.n_pix
    rows = insn.inp_base + np.arange(nb)[:, None] * insn.in_plane + np.arange(n)[None, :]
    x = buf.inp[rows].transpose(0, 2, 1).reshape(nb * C, n)[:insn.channels]
    return ops.softmax_int8(x[None, :, None, :], ops.softmax_exp_table(s_in))[0, :, 0, :]


@pytest.mark.parametrize("s_in", [0.04, 0.25])
def test_softmax_random(s_in):
    rng, buf = _buffers(81, s_in)
    insns, base = [], 0
    for nb, ch in ((3, 10), (1, 1), (5, 20), (2, 5)):
        n = int(rng.integers(1, 4))
        insn = isa.Softmax(inp_base=int(rng.integers(0, 30)), out_base=base, in_plane=n + 1, n_pix=n,
                           cin_blocks=nb, channels=ch, push_next=True)
        insn.validate(HW)
        insns.append(insn)
        base += nb * n
    res = run_program(HW, buf, [isa.SmxTab(prm_base=0, count=TAB_WORDS)] + insns + [isa.Finish()],
                      max_cycles=20_000)
    assert res.finished and res.error_code == 0
    for insn in insns:
        nb, n = insn.cin_blocks, insn.n_pix
        got = res.out[insn.out_base:insn.out_base + nb * n].reshape(nb, n, C).transpose(0, 2, 1).reshape(nb * C, n)
        np.testing.assert_array_equal(got[:insn.channels], softmax_reference(buf, insn, s_in), err_msg=str(insn))
        assert (got[insn.channels:] == -128).all()
    assert (res.out[base:] == OUT_FILL).all()
    assert res.c2s_pushes == len(insns)


def test_smxtab_refuses_values_above_two_to_the_twenty_and_absent_block():
    _, buf = _buffers(82, 0.1)
    buf.bias[5, 1] = 2**20 + 1
    res = run_program(HW, buf, [isa.SmxTab(prm_base=0, count=8), isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.ILLEGAL_FIELD
    res = run_program(dataclasses.replace(HW, softmax=False), buf, [isa.Softmax(), isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.BLOCK_ABSENT
