"""ADD with ``mul`` (the adder module's element-wise multiply, adder.Multiplication) on the compute
unit (Amaranth simulator, C = 4): tensor x tensor and tensor x broadcast vector (``b_repeat``),
mixed with plain ADDs, bit-exact with ``golden.ops.mul`` and the ISA-level simulator; the errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from test_gateware_blocks_eltwise import add_reference
from test_gateware_blocks_fc import isasim_out
from test_gateware_compute_harness import OUT_FILL, random_buffers, run_program, small_hw

C = 4
HW = dataclasses.replace(small_hw(c=C, inp_depth=256, wgt_depth=16, prm_depth=8, out_depth=256),
                         adder=True, multiply=True)


def mul_reference(inp: np.ndarray, insn: isa.Add) -> np.ndarray:
    """OUT words of a multiplying ADD from the golden op (b gathered by the broadcast rule)."""
    n = insn.count
    rows = np.arange(n) if insn.b_repeat == 0 else np.arange(n) // insn.b_repeat
    xa = inp[insn.inp_a:insn.inp_a + n]
    xb = inp[insn.inp_b + rows]
    return ops.mul(xa, insn.za, xb, insn.zb, insn.ma, insn.shift, insn.zp_out, insn.act_min, insn.act_max)


def _random_mul(rng: np.random.Generator, out_base: int, repeat: int) -> isa.Add:
    count = int(rng.integers(1, 24))
    zp_out = int(rng.integers(-20, 21))
    return isa.Add(inp_a=int(rng.integers(0, HW.inp_depth - count + 1)),
                   inp_b=int(rng.integers(0, HW.inp_depth - count + 1)), out_base=out_base, count=count,
                   za=int(rng.integers(-128, 128)), zb=int(rng.integers(-128, 128)),
                   ma=int(rng.integers(1, 2**15)), shift=int(rng.integers(14, 22)), zp_out=zp_out,
                   act_min=zp_out if rng.random() < 0.3 else -128, mul=1, b_repeat=repeat,
                   push_next=bool(rng.random() < 0.5))


@pytest.mark.parametrize("seed", [1, 2])
def test_mul_dense_and_broadcast_mixed_with_add(seed):
    rng = np.random.default_rng(950 + seed)
    buf = random_buffers(rng, HW)
    insns, base = [], 0
    for k in range(8):
        if k % 3 == 2:
            insn = isa.Add(inp_a=int(rng.integers(0, 200)), inp_b=int(rng.integers(0, 200)), out_base=base, count=9,
                           za=3, zb=-5, ma=20000, mb=9000, shift=15)
        else:
            insn = _random_mul(rng, base, [0, 1, 3, 7, 40][int(rng.integers(0, 5))])
        insn.validate(HW)
        insns.append(insn)
        base += insn.count
    res = run_program(HW, buf, insns + [isa.Finish()], max_cycles=20_000)
    assert res.finished and res.error_code == 0
    for insn in insns:
        ref = mul_reference(buf.inp, insn) if insn.mul else add_reference(buf.inp, insn)
        np.testing.assert_array_equal(res.out[insn.out_base:insn.out_base + insn.count], ref, err_msg=str(insn))
    assert (res.out[base:] == OUT_FILL).all()
    np.testing.assert_array_equal(isasim_out(HW, buf, insns + [isa.Finish()]), res.out)


def test_mul_throughput_is_the_adds():
    buf = random_buffers(np.random.default_rng(960), HW)
    add = isa.Add(inp_a=0, inp_b=100, out_base=0, count=100, za=1, zb=2, ma=100, mb=100, shift=10)
    mul = dataclasses.replace(add, mul=1, b_repeat=10)
    cycles = [run_program(HW, buf, [insn, isa.Finish()]).cycles for insn in (add, mul)]
    assert cycles[0] == cycles[1]


def test_mul_without_the_multiply_is_an_illegal_field():
    hw = dataclasses.replace(HW, multiply=False)
    buf = random_buffers(np.random.default_rng(961), hw)
    res = run_program(hw, buf, [isa.Add(count=4, mul=1), isa.Finish()])
    assert not res.finished and res.error_code == isa.ErrorCode.ILLEGAL_FIELD
    assert (res.out == OUT_FILL).all()
    with pytest.raises(isa.InstructionError, match="no element-wise multiply"):
        isa.Add(count=4, mul=1).validate(hw)
