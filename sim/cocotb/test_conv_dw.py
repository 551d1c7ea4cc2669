"""cocotb bench: the conv engine's depthwise mode (``CONV.dw``) against ``dlproc.targets.golden.ops.conv2d``
(groups = channels) + requantize.

Each case holds one or two random depthwise layers -- 1..3C channels (often not a multiple of C),
kernels 1..5 per side (not 1x1), strides 1..3, asymmetric padding (held in INP as zp_in, as LOAD
inserts it), input zero point, per-channel M/M_neg/S, fused clamps (ReLU, ReLU6-like bounds) --
laid out in INP/WGT/PRM with random gaps and garbage in the unused words, lanes and WGT bytes (a
depthwise WGT word uses only bytes ``[c][3*ky + 3 - kw + kx]``; the engine must ignore the rest).
The kernel is cut at random into links of at most ``dw_kh`` rows and 3 columns with two or more
taps each (the window the processor has), run as a partial-sum chain (``acc_keep`` ... ``acc_in``)
over each tile, so a 5 x 5 kernel takes up to nine CONVs per tile. Each layer's output is cut into
tiles of random, unequal sizes, each chain gets a random strip height ``dw_rows`` within the window's
eight rows (the same for its links: partial sums are held in strip order), and the CONVs of all tiles, channel blocks and layers are issued in random order.
Every OUT word must be written once, bit-exact with the golden model, with the last-word and push
flags on each chain's last word only; the MAC array must evaluate exactly one output pixel per
cycle of each CONV (sum of tile pixels over the links). Parameters: ``DLPROC_BENCH_HW``,
``DLPROC_BENCH_SEED``, ``DLPROC_BENCH_CASES``.
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
class DwLayer:
    """A random depthwise layer, its golden output, its links and buffer images."""

    desc: str
    blocks: int
    stride: tuple[int, int]
    ho: int
    wo: int
    in_w: int
    in_plane: int
    links: list[tuple[int, int, int, int]]  # (ky0, kh, kx0, kw) per CONV of a chain
    out: np.ndarray  # expected OUT lanes (blocks*C, ho, wo)
    inp: np.ndarray  # INP words
    wgt: np.ndarray  # WGT words [blocks * links, C, C]
    prm: tuple[np.ndarray, ...]  # bias, M, M_neg, S per lane [blocks, C]
    zp_out: int
    act: tuple[int, int]


def _pieces(rng: np.random.Generator, n: int, most: int) -> list[tuple[int, int]]:
    """Cut 0..n into random consecutive (start, length) pieces of at most ``most``."""
    out, at = [], 0
    while at < n:
        step = int(rng.integers(1, min(most, n - at) + 1))
        out.append((at, step))
        at += step
    return out


def _links(rng: np.random.Generator, kh: int, kw: int, dw_kh: int) -> list[tuple[int, int, int, int]]:
    """A random cut of the kernel into window-sized links of two or more taps each."""
    while True:
        links = [(y0, h, x0, w) for y0, h in _pieces(rng, kh, dw_kh) for x0, w in _pieces(rng, kw, isa.DW_WINDOW_COLS)]
        if all(h * w >= 2 for _, h, _, w in links):
            return links


def _layer(rng: np.random.Generator, hw: isa.HardwareParams, max_side: int, max_blocks: int) -> DwLayer:
    c = hw.c
    while True:
        ch = int(rng.integers(1, max_blocks * c + 1))
        kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
        if kh * kw == 1 or (hw.dw_kh == 1 and kw == 1):
            continue  # a one-tap link: the compiler runs such kernels on the dense array
        sy, sx = (int(v) for v in rng.integers(1, 4, size=2))
        pads = tuple(int(rng.integers(0, min(3, k))) for k in (kh, kw, kh, kw))
        h, w = (int(v) for v in rng.integers(1, max_side + 1, size=2))
        ho = (h + pads[0] + pads[2] - kh) // sy + 1
        wo = (w + pads[1] + pads[3] - kw) // sx + 1
        if ho >= 1 and wo >= 1 and ho * wo <= 48:
            break
    zp_in = int(rng.integers(-128, 128))
    x = rng.integers(-128, 128, size=(1, ch, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, size=(ch, 1, kh, kw)).astype(np.int8)
    bias = rng.integers(-(1 << 14), 1 << 14, size=ch).astype(np.int32)
    acc = ops.conv2d(x, wt, bias, stride=(sy, sx), pads=pads, groups=ch, zp_in=zp_in)[0]

    blocks = -(-ch // c)
    lanes = blocks * c
    mult = rng.integers(1 << 13, 1 << 15, size=lanes).astype(np.uint16)
    spread = float(np.std(acc)) + 1.0
    shift = np.clip(np.round(np.log2(mult * spread / 40)) + rng.integers(-1, 2, size=lanes), 0, 46).astype(np.uint8)
    mneg = np.where(rng.random(lanes) < 0.3, rng.integers(0, 1 << 15, size=lanes), mult).astype(np.uint16)
    zp_out = int(rng.integers(-20, 21))
    r = rng.random()
    act = (zp_out, 127) if r < 0.3 else (-128, 127) if r < 0.8 else (zp_out, min(127, zp_out + int(rng.integers(6, 60))))
    hw_bias = np.zeros(lanes, dtype=np.int32)
    hw_bias[:ch] = ops.fold_zero_point(bias, wt, zp_in)
    hw_bias[ch:] = rng.integers(-(1 << 14), 1 << 14, size=lanes - ch)
    out = np.empty((lanes, ho, wo), dtype=np.int8)
    out[:ch] = requantize(acc, mult[:ch, None, None], shift[:ch, None, None], zp_out, *act, mneg[:ch, None, None])

    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    in_w = wp + int(rng.integers(0, 3))
    in_plane = hp * in_w + int(rng.integers(0, 4))
    padded = np.full((ch, hp, wp), zp_in, dtype=np.int8)
    padded[:, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x[0]
    inp = plane_words(rng, padded, c, in_w, in_plane)

    # Lanes >= ch read garbage input with garbage taps: their outputs are computed from the
    # words actually in the buffers (the engine must keep lanes apart, so only lane c feeds lane c).
    full = np.zeros((lanes, hp, wp), dtype=np.int64)
    for b in range(blocks):
        for y in range(hp):
            full[b * c:(b + 1) * c, y] = inp[b * in_plane + y * in_w:b * in_plane + y * in_w + wp].T
    taps = rng.integers(-128, 128, size=(lanes, kh, kw)).astype(np.int8)
    taps[:ch] = wt[:, 0]
    links = _links(rng, kh, kw, hw.dw_kh)
    words = rng.integers(-128, 128, size=(blocks, len(links), c, c)).astype(np.int8)  # garbage bytes
    for k, (y0, lh, x0, lw) in enumerate(links):
        for ky in range(lh):
            for kx in range(lw):
                words[:, k, :, isa.DW_WINDOW_COLS * ky + isa.DW_WINDOW_COLS - lw + kx] = \
                    taps[:, y0 + ky, x0 + kx].reshape(blocks, c)
    extra = hw_bias[ch:].astype(np.int64)[:, None, None] + sum(
        taps[ch:, ky, kx].astype(np.int64)[:, None, None]
        * full[ch:, ky:ky + (ho - 1) * sy + 1:sy, kx:kx + (wo - 1) * sx + 1:sx]
        for ky in range(kh) for kx in range(kw))
    extra = ((extra + 2**31) % 2**32) - 2**31
    out[ch:] = requantize(extra, mult[ch:, None, None], shift[ch:, None, None], zp_out, *act, mneg[ch:, None, None])
    prm = tuple(a.reshape(blocks, c) for a in (hw_bias, mult, mneg, shift))
    desc = (f"ch={ch} k={kh}x{kw} links={len(links)} stride={sy},{sx} pads={pads} in={h}x{w} out={ho}x{wo} "
            f"zp_in={zp_in} zp_out={zp_out} clamp={act}")
    return DwLayer(desc, blocks, (sy, sx), ho, wo, in_w, in_plane, links, out, inp,
                   words.reshape(-1, c, c), prm, zp_out, act)


async def _case(bench: BlockBench, case: int, corrupt: bool = False) -> None:
    hw, c = bench.hw, bench.hw.c
    rng = bench.begin_case(case)
    two = rng.random() < 0.3
    layers = [_layer(rng, hw, 6 if two else 10, 2 if two else 3) for _ in range(2 if two else 1)]
    free_inp = hw.inp_depth - sum(len(L.inp) for L in layers)
    free_wgt = hw.wgt_depth - sum(len(L.wgt) for L in layers)
    assert free_inp >= 0 and free_wgt >= 0, "bench layers do not fit INP/WGT"
    slots = iter(int(v) for v in rng.permutation(hw.prm_depth))
    inp_at, wgt_at, prm_at, pos_i, pos_w = [], [], [], 0, 0
    for L in layers:
        gap_i = int(rng.integers(0, free_inp // len(layers) + 1))
        gap_w = int(rng.integers(0, free_wgt // len(layers) + 1))
        inp_at.append(pos_i + gap_i)
        wgt_at.append(pos_w + gap_w)
        pos_i, pos_w = pos_i + gap_i + len(L.inp), pos_w + gap_w + len(L.wgt)
        await bench.load("inp", inp_at[-1], pack_inp(L.inp))
        await bench.load("wgt", wgt_at[-1], pack_wgt(L.wgt))
        prm_at.append([next(slots) for _ in range(L.blocks)])
        for b, slot in enumerate(prm_at[-1]):
            await bench.load("prm", slot, pack_prm(*(a[b:b + 1] for a in L.prm)))

    jobs = []
    for li, L in enumerate(layers):
        rows, cols = random_cuts(rng, L.ho), random_cuts(rng, L.wo)
        jobs += [(li, b, r, cc) for b in range(L.blocks) for r in rows for cc in cols]
    insns, expected, last_words, out_next, evals = [], {}, {}, 0, 0
    for j in rng.permutation(len(jobs)):
        li, b, (y0, y1), (x0, x1) = jobs[j]
        L = layers[li]
        sy, sx = L.stride
        n = len(L.links)
        # One strip height per chain: the partial sums of a depthwise tile are held in strip
        # order, so every link must walk the same strips (a mismatch is ILLEGAL_FIELD).
        tallest = max(lh for _, lh, _, _ in L.links)
        rows = int(rng.integers(1, (isa.DW_COL - tallest) // sy + 2))
        for k, (ky0, lh, kx0, lw) in enumerate(L.links):
            insn = isa.Conv(
                inp_base=inp_at[li] + b * L.in_plane + (y0 * sy + ky0) * L.in_w + x0 * sx + kx0,
                wgt_base=wgt_at[li] + b * n + k, prm_base=prm_at[li][b],
                out_base=out_next if k == n - 1 else 0, in_w=L.in_w, in_plane=L.in_plane,
                out_h=y1 - y0, out_w=x1 - x0, kh=lh, kw=lw, stride_y=sy, stride_x=sx, cin_blocks=1,
                zp_out=L.zp_out, act_min=L.act[0], act_max=L.act[1], dw=1,
                dw_rows=rows,
                acc_in=int(k > 0), acc_keep=int(k < n - 1),
                push_prev=bool(k == n - 1 and rng.random() < 0.5), push_next=bool(k == n - 1 and rng.random() < 0.5))
            insn.validate(hw)
            insns.append(insn)
            evals += (y1 - y0) * (x1 - x0)
        tile = L.out[b * c:(b + 1) * c, y0:y1, x0:x1]
        for k, word in enumerate(tile.reshape(c, -1).T):
            expected[out_next + k] = word
        out_next += (y1 - y0) * (x1 - x0)
        last_words[out_next - 1] = push_tag(insns[-1])
    assert out_next <= hw.out_depth, "bench layers do not fit OUT"
    if corrupt:
        corrupt_one(expected, rng)
    bench.mac_cycles = 0
    await bench.run(insns)
    what = f"{bench.where(case)}: " + " + ".join(f"[{L.desc}]" for L in layers)
    check_writes(bench.take_writes(), expected, what, last_words)
    assert bench.mac_cycles == evals, f"{what}: MAC array active {bench.mac_cycles} cycles, expected {evals}"
    bench.dut._log.info(f"ok {what}: {len(insns)} depthwise CONVs, {len(expected)} words")


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def corrupted_expectation_is_caught(dut):
    """The comparison can fail: one case with one expected lane flipped must be reported."""
    bench = await BlockBench.start(dut)
    await expect_mismatch(_case(bench, 0, corrupt=True))


@cocotb.test(timeout_time=500, timeout_unit="ms")
async def random_depthwise_match_golden_conv2d(dut):
    bench = await BlockBench.start(dut)
    for case in BlockBench.cases(60):
        await _case(bench, case)
