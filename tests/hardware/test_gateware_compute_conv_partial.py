"""Partial sums on the conv engine (CONV.acc_keep / acc_in, Amaranth simulator): chains of CONVs
over slices of a reduction give the contract's result for the whole reduction, bit for bit (and
the ISA simulator's), interleaved with ordinary CONVs; a held tile writes nothing; an acc_in that
does not continue a held tile of its shape stops the engine with ILLEGAL_FIELD, in the RTL and in
the ISA simulator alike."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.isasim import IllegalFieldError
from test_gateware_blocks_fc import isasim_out
from test_gateware_compute_harness import OUT_FILL, conv_chain_reference, random_buffers, run_program, small_hw

HW = small_hw(c=4, inp_depth=2048, wgt_depth=256, prm_depth=8, out_depth=256)


def _chain(rng: np.random.Generator, hw: isa.HardwareParams, out_base: int, links: int,
           tiny: bool) -> list[isa.Conv]:
    """``links`` CONVs of one tile shape, each over its own input blocks and weights."""
    kh, kw = (int(v) for v in rng.integers(1, 4, size=2))
    sy, sx = (int(v) for v in rng.integers(1, 3, size=2))
    dy, dx = (int(v) for v in rng.integers(1, 3, size=2))
    out_h, out_w = (1, 1) if tiny else (int(v) for v in rng.integers(1, 5, size=2))
    in_w = (out_w - 1) * sx + (kw - 1) * dx + 1 + int(rng.integers(0, 2))
    in_h = (out_h - 1) * sy + (kh - 1) * dy + 1
    zp, lo, hi = int(rng.integers(-20, 21)), *sorted(int(v) for v in rng.integers(-128, 128, size=2))
    chain = []
    for k in range(links):
        cin_blocks = int(rng.integers(1, 3))
        in_plane = in_h * in_w + int(rng.integers(0, 3))
        span = (cin_blocks - 1) * in_plane + in_h * in_w
        taps = cin_blocks * kh * kw
        chain.append(isa.Conv(
            inp_base=int(rng.integers(0, hw.inp_depth - span + 1)),
            wgt_base=int(rng.integers(0, hw.wgt_depth - taps + 1)),
            prm_base=int(rng.integers(0, hw.prm_depth)), out_base=out_base if k == links - 1 else 0,
            in_w=in_w, in_plane=in_plane, out_h=out_h, out_w=out_w, kh=kh, kw=kw, stride_y=sy, stride_x=sx,
            dil_y=dy, dil_x=dx, cin_blocks=cin_blocks, zp_out=zp, act_min=lo, act_max=hi,
            acc_in=int(k > 0), acc_keep=int(k < links - 1), push_next=k == links - 1,
            push_prev=bool(rng.random() < 0.5)))
    return chain


@pytest.mark.parametrize("seed", [11, 12])
def test_partial_sum_chains_equal_the_whole_reduction(seed: int) -> None:
    rng = np.random.default_rng(seed)
    buf = random_buffers(rng, HW, scale_taps=30)
    chains, insns, base = [], [], 0
    for k in range(6):
        links = int(rng.integers(1, 4))
        chain = _chain(rng, HW, base, links, tiny=k % 3 == 2)
        for insn in chain:
            insn.validate(HW)
        chains.append(chain)
        insns += chain
        base += chain[-1].out_h * chain[-1].out_w
    res = run_program(HW, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    for chain in chains:
        last = chain[-1]
        got = res.out[last.out_base:last.out_base + last.out_h * last.out_w]
        np.testing.assert_array_equal(got, conv_chain_reference(buf, chain), err_msg=str(chain))
    assert (res.out[base:] == OUT_FILL).all()  # the held tiles wrote nothing
    np.testing.assert_array_equal(isasim_out(HW, buf, insns + [isa.Finish()]), res.out)
    # Every CONV gives its tokens once it has completed, held or not.
    assert res.c2l_pushes == sum(i.push_prev for i in insns)
    assert res.c2s_pushes == sum(i.push_next for i in insns)
    assert res.mac_cycles == sum(i.out_h * i.out_w * i.cin_blocks * i.kh * i.kw for i in insns)


def test_single_pixel_single_tap_chain_back_to_back() -> None:
    """1 x 1 tiles with one tap per link: the held tile's last write and the next link's first
    read at their closest."""
    rng = np.random.default_rng(3)
    buf = random_buffers(rng, HW, scale_taps=8)
    insns = [isa.Conv(inp_base=k, wgt_base=k, prm_base=0, out_base=5, in_w=1, in_plane=1,
                      acc_in=int(k > 0), acc_keep=int(k < 7)) for k in range(8)]
    res = run_program(HW, buf, insns + [isa.Finish()])
    assert res.finished and res.error_code == 0
    np.testing.assert_array_equal(res.out[5:6], conv_chain_reference(buf, insns))
    assert (np.delete(res.out, 5, axis=0) == OUT_FILL).all()


def _bad_chains() -> dict[str, list[isa.Conv]]:
    one = dict(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=2, in_plane=4, out_h=2, out_w=2)
    return {
        "nothing held": [isa.Conv(**one, acc_in=1)],
        "other shape": [isa.Conv(**one, acc_keep=1), isa.Conv(**(one | {"out_w": 1}), acc_in=1)],
        "released": [isa.Conv(**one, acc_keep=1), isa.Conv(**one), isa.Conv(**one, acc_in=1)],
    }


@pytest.mark.parametrize("case", sorted(_bad_chains()))
def test_acc_in_without_a_matching_held_tile_is_illegal(case: str) -> None:
    insns = _bad_chains()[case] + [isa.Finish()]
    buf = random_buffers(np.random.default_rng(1), HW)
    res = run_program(HW, buf, insns)
    assert not res.finished and res.error_code == isa.ErrorCode.ILLEGAL_FIELD
    with pytest.raises(IllegalFieldError, match="acc_in"):
        isasim_out(HW, buf, insns)
