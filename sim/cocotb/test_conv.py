"""cocotb bench: ``dlproc.hardware.gateware.conv.ConvEngine`` against ``dlproc.targets.golden.ops.conv2d`` + requantize.

Each case holds one or two random convolution layers -- input/output channels, groups (dense,
grouped and depthwise, mapped onto the C x C array with zero weights between groups as the
compiler does), kernel size, stride, dilation, asymmetric padding (held in INP as zp_in, as LOAD
inserts it), input zero point, per-channel M/M_neg/S, fused clamps, sometimes biases near the int32
limits (the accumulators wrap) -- laid out in INP/WGT/PRM with random gaps and garbage in the
unused words and lanes. Each layer's output is cut into tiles of random, unequal sizes (down to
1 x 1 pixel, the tightest accumulator hand-over), and the CONVs of all tiles, output blocks and
layers are issued in random order with random gaps, so tiles of different sizes and tap counts
follow each other. A tile whose output block reads two or more input blocks is sometimes run as a
partial-sum chain (``acc_keep`` ... ``acc_in``: two or three CONVs over random slices of its input
blocks, issued back to back), which must give the same words and write nothing before its last
CONV. Every OUT word must be written once, bit-exact with the golden model, with the
last-word and push flags on each CONV's last word only; the MAC array must be active exactly
sum(taps x pixels) cycles. Parameters: ``DLPROC_BENCH_HW``, ``DLPROC_BENCH_SEED``,
``DLPROC_BENCH_CASES``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.hardware.numerics import requantize
from dlproc.sim.cocotb.benches import (BlockBench, check_writes, corrupt_one, expect_mismatch, pack_inp, pack_prm,
                                       pack_wgt, plane_words, push_tag, random_cuts)


@dataclass
class Layer:
    """A random conv layer, its golden output and its buffer images (addresses relative)."""

    desc: str
    ci: int
    co: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dil: tuple[int, int]
    ho: int
    wo: int
    in_w: int
    in_plane: int
    ranges: list[tuple[int, int]]  # input blocks [lo, hi) per output block
    out: np.ndarray  # expected OUT lanes (n_ob*C, ho, wo); lanes >= co: zero weights, own bias
    inp: np.ndarray  # INP words
    wgt: np.ndarray  # WGT words [n, C, C]
    wstart: list[int]  # first WGT word per output block
    prm: tuple[np.ndarray, ...]  # bias, M, M_neg, S per lane [n_ob, C]
    zp_out: int
    act: tuple[int, int]


def _shape(rng: np.random.Generator, c: int, max_side: int) -> dict:
    """Random channels, groups, kernel, stride, dilation, padding with at most 48 output pixels."""
    while True:
        kind = rng.choice(["dense", "dense", "grouped", "depthwise"])
        if kind == "depthwise":
            ci = co = int(rng.integers(1, 2 * c + 1))
            groups = ci
        elif kind == "grouped":
            groups = int(rng.integers(2, 4))
            ci = groups * int(rng.integers(1, (3 * c) // groups + 1))
            co = groups * int(rng.integers(1, (2 * c) // groups + 1))
        else:
            groups, ci, co = 1, int(rng.integers(1, 3 * c + 1)), int(rng.integers(1, 2 * c + 1))
        kh, kw = (int(v) for v in rng.integers(1, 5, size=2))
        r = rng.random()
        if r < 0.15:
            kh, kw = (7, 1) if rng.random() < 0.5 else (1, 6)
        elif r < 0.3:
            kh = kw = 1  # pointwise: with ci <= C a single tap per tile, the tightest RMW timing
        sy, sx = (int(v) for v in rng.integers(1, 4 if rng.random() < 0.75 else 8, size=2))
        dy, dx = (int(v) for v in rng.integers(1, 3 if rng.random() < 0.75 else 8, size=2))
        pads = tuple(int(v) for v in rng.integers(0, 3, size=4))  # top, left, bottom, right
        h, w = (int(v) for v in rng.integers(1, max_side + 1, size=2))
        ho = (h + pads[0] + pads[2] - ((kh - 1) * dy + 1)) // sy + 1
        wo = (w + pads[1] + pads[3] - ((kw - 1) * dx + 1)) // sx + 1
        if 1 <= ho and 1 <= wo and ho * wo <= 48:
            return dict(ci=ci, co=co, groups=groups, kh=kh, kw=kw, stride=(sy, sx), dil=(dy, dx), pads=pads,
                        h=h, w=w, ho=ho, wo=wo)


def _block_ranges(ci: int, co: int, groups: int, c: int) -> list[tuple[int, int]]:
    """Input blocks [lo, hi) each output block reads (the union over the groups of its channels)."""
    cig, cog = ci // groups, co // groups
    out = []
    for ob in range(-(-co // c)):
        g_lo, g_hi = (ob * c) // cog, (min(co, ob * c + c) - 1) // cog
        out.append(((g_lo * cig) // c, -(-((g_hi + 1) * cig) // c)))
    return out


def _layer(rng: np.random.Generator, c: int, max_side: int) -> Layer:
    S = _shape(rng, c, max_side)
    ci, co, groups, kh, kw = S["ci"], S["co"], S["groups"], S["kh"], S["kw"]
    (sy, sx), (dy, dx), pads = S["stride"], S["dil"], S["pads"]
    zp_in = int(rng.integers(-128, 128))
    x = rng.integers(-128, 128, size=(1, ci, S["h"], S["w"])).astype(np.int8)
    wt = rng.integers(-128, 128, size=(co, ci // groups, kh, kw)).astype(np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, size=co).astype(np.int64)
    if rng.random() < 0.1:  # near the int32 limits: the accumulators wrap, as the contract says
        bias = np.where(rng.random(co) < 0.5, 2**31 - 1 - bias % 5000, -(2**31) + bias % 5000)
    bias = bias.astype(np.int32)
    acc = ops.conv2d(x, wt, bias, stride=(sy, sx), pads=pads, dilation=(dy, dx), groups=groups, zp_in=zp_in)[0]

    # Requantization per output lane (lanes beyond co too: zero weights, random bias); M/2**S maps
    # the accumulators' spread to about +-40, so that few outputs sit at a clamp bound.
    n_ob = -(-co // c)
    lanes = n_ob * c
    mult = rng.integers(1 << 13, 1 << 15, size=lanes).astype(np.uint16)
    spread = float(np.std(acc)) + 1.0
    shift = np.clip(np.round(np.log2(mult * spread / 40)) + rng.integers(-1, 2, size=lanes), 0, 46).astype(np.uint8)
    mneg = np.where(rng.random(lanes) < 0.3, rng.integers(0, 1 << 15, size=lanes), mult).astype(np.uint16)
    zp_out = int(rng.integers(-20, 21))
    r = rng.random()
    act = (zp_out, 127) if r < 0.25 else (-128, 127) if r < 0.85 else (
        int(rng.integers(-128, -20)), int(rng.integers(20, 128)))
    hw_bias = np.zeros(lanes, dtype=np.int32)
    hw_bias[:co] = ops.fold_zero_point(bias, wt, zp_in)
    hw_bias[co:] = rng.integers(-(1 << 16), 1 << 16, size=lanes - co)
    out = np.empty((lanes, S["ho"], S["wo"]), dtype=np.int8)
    out[:co] = requantize(acc, mult[:co, None, None], shift[:co, None, None], zp_out, *act, mneg[:co, None, None])
    out[co:] = requantize(hw_bias[co:].astype(np.int64), mult[co:], shift[co:], zp_out, *act, mneg[co:])[:, None, None]

    # INP: padded planes (padding = zp_in, as LOAD writes it), random row and plane gaps, garbage
    # in the unused words and in the lanes of channels >= ci (their weights are zero).
    hp, wp = S["h"] + pads[0] + pads[2], S["w"] + pads[1] + pads[3]
    in_w = wp + int(rng.integers(0, 3))
    in_plane = hp * in_w + int(rng.integers(0, 4))
    padded = np.full((ci, hp, wp), zp_in, dtype=np.int8)
    padded[:, pads[0]:pads[0] + S["h"], pads[1]:pads[1] + S["w"]] = x[0]
    inp = plane_words(rng, padded, c, in_w, in_plane)

    # WGT: per output block, words (cb, ky, kx) of [co lane][ci lane], zero between groups.
    ranges = _block_ranges(ci, co, groups, c)
    cig, cog = ci // groups, co // groups
    wwords, wstart = [], []
    for ob, (lo, hi) in enumerate(ranges):
        words = np.zeros((hi - lo, kh, kw, c, c), dtype=np.int8)
        for lane in range(c):
            o = ob * c + lane
            if o >= co:
                break
            g = o // cog
            for k in range(cig):
                cb, cl = divmod(g * cig + k, c)
                words[cb - lo, :, :, lane, cl] = wt[o, k]
        wstart.append(len(wwords))
        wwords.extend(words.reshape(-1, c, c))
    prm = tuple(a.reshape(n_ob, c) for a in (hw_bias, mult, mneg, shift))
    desc = (f"ci={ci} co={co} groups={groups} k={kh}x{kw} stride={sy},{sx} dil={dy},{dx} pads={pads} "
            f"in={S['h']}x{S['w']} out={S['ho']}x{S['wo']} zp_in={zp_in} zp_out={zp_out} clamp={act}")
    return Layer(desc, ci, co, kh, kw, (sy, sx), (dy, dx), S["ho"], S["wo"], in_w, in_plane, ranges, out, inp,
                 np.array(wwords), wstart, prm, zp_out, act)


async def _case(bench: BlockBench, case: int, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    two = rng.random() < 0.3
    layers = [_layer(rng, c, 6 if two else 10) for _ in range(2 if two else 1)]
    # Place the layers one after the other in each buffer, with random gaps.
    inp_at, wgt_at, slots = [], [], iter(int(v) for v in rng.permutation(hw.prm_depth))
    free_inp = hw.inp_depth - sum(len(L.inp) for L in layers)
    free_wgt = hw.wgt_depth - sum(len(L.wgt) for L in layers)
    assert free_inp >= 0 and free_wgt >= 0, "bench layers do not fit INP/WGT"
    pos_i = pos_w = 0
    prm_at = []
    for L in layers:
        gap_i = int(rng.integers(0, free_inp // len(layers) + 1))
        gap_w = int(rng.integers(0, free_wgt // len(layers) + 1))
        inp_at.append(pos_i + gap_i)
        wgt_at.append(pos_w + gap_w)
        pos_i, pos_w = pos_i + gap_i + len(L.inp), pos_w + gap_w + len(L.wgt)
        await bench.load("inp", inp_at[-1], pack_inp(L.inp))
        await bench.load("wgt", wgt_at[-1], pack_wgt(L.wgt))
        prm_at.append([next(slots) for _ in L.ranges])
        for ob, slot in enumerate(prm_at[-1]):
            await bench.load("prm", slot, pack_prm(*(a[ob:ob + 1] for a in L.prm)))

    jobs = []
    for li, L in enumerate(layers):
        rows, cols = random_cuts(rng, L.ho), random_cuts(rng, L.wo)
        if rng.random() < 0.2:
            rows, cols = [(y, y + 1) for y in range(L.ho)], [(x, x + 1) for x in range(L.wo)]
        jobs += [(li, ob, r, cc) for ob in range(len(L.ranges)) for r in rows for cc in cols]
    insns, expected, last_words, out_next, macs = [], {}, {}, 0, 0
    for j in rng.permutation(len(jobs)):
        li, ob, (y0, y1), (x0, x1) = jobs[j]
        L = layers[li]
        lo, hi = L.ranges[ob]
        (sy, sx), (dy, dx) = L.stride, L.dil
        oh_, ow_ = y1 - y0, x1 - x0
        # Slices of the input blocks: one CONV, or a partial-sum chain of two or three.
        links = int(rng.integers(2, min(3, hi - lo) + 1)) if hi - lo >= 2 and rng.random() < 0.35 else 1
        cuts = [lo] + sorted(int(v) for v in rng.choice(np.arange(lo + 1, hi), links - 1, replace=False)) + [hi]
        for k in range(links):
            b0, b1 = cuts[k], cuts[k + 1]
            insn = isa.Conv(
                inp_base=inp_at[li] + b0 * L.in_plane + y0 * sy * L.in_w + x0 * sx,
                wgt_base=wgt_at[li] + L.wstart[ob] + (b0 - lo) * L.kh * L.kw,
                prm_base=prm_at[li][ob], out_base=out_next if k == links - 1 else 0, in_w=L.in_w,
                in_plane=L.in_plane, out_h=oh_, out_w=ow_, kh=L.kh, kw=L.kw, stride_y=sy, stride_x=sx, dil_y=dy,
                dil_x=dx, cin_blocks=b1 - b0, zp_out=L.zp_out, act_min=L.act[0], act_max=L.act[1],
                acc_in=int(k > 0), acc_keep=int(k < links - 1),
                push_prev=bool(k == links - 1 and rng.random() < 0.5),
                push_next=bool(k == links - 1 and rng.random() < 0.5))
            if k < links - 1:
                insns.append(insn)
        tile = L.out[ob * c:(ob + 1) * c, y0:y1, x0:x1]  # (C, oh, ow)
        for k, word in enumerate(tile.reshape(c, -1).T):
            expected[out_next + k] = word
        out_next += oh_ * ow_
        last_words[out_next - 1] = push_tag(insn)
        macs += oh_ * ow_ * (hi - lo) * L.kh * L.kw
        insns.append(insn)
    assert out_next <= hw.out_depth, "bench layers do not fit OUT"
    if corrupt:
        corrupt_one(expected, rng)
    bench.mac_cycles = 0
    await bench.run(insns)
    what = f"{bench.where(case)}: " + " + ".join(f"[{L.desc}]" for L in layers)
    check_writes(bench.take_writes(), expected, what, last_words)
    assert bench.mac_cycles == macs, f"{what}: MAC array active {bench.mac_cycles} cycles, expected {macs}"
    sat = np.mean([np.mean((L.out == L.act[0]) | (L.out == L.act[1])) for L in layers])
    bench.dut._log.info(f"ok {what}: {len(insns)} CONVs, {len(expected)} words, {sat:.0%} at a clamp bound")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, corrupt=True))


@cocotb.test(timeout_time=500, timeout_unit="ms")
async def random_layers_match_golden_conv2d(dut):
    bench = await BlockBench.start(dut)
    for case in BlockBench.cases(80):
        await _case(bench, case)
