"""Random layer generators and reference results shared by the layer-program and RTL-layer tests.

The references are the golden model (``dlproc.targets.golden.ops`` + ``dlproc.hardware.numerics.requantize``),
never the ISA simulator, so a test that compares a program's output with them checks the builder
and the simulator together against the independent definition of the arithmetic.
"""

from __future__ import annotations

import numpy as np

from dlproc.config import ProcessorConfig
from dlproc.targets.golden import ops
from dlproc.compiler.layerprog import ConvLayer, PoolLayer
from dlproc.hardware.numerics import requantize


def small_config(c: int = 4, inp=(16, 16, 4), out=(10, 10, 4), wgt: int = 4096, prm: int = 32,
                 width: int = 128) -> ProcessorConfig:
    """A configuration with small buffers, so that modest layers need several tiles."""
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", c * c)
    cfg.set_module_property("conv", "InputMemorySize", list(inp))
    cfg.set_module_property("conv", "OutputMemorySize", list(out))
    cfg.set_module_property("conv", "WeightMemorySize", wgt)
    cfg.set_module_property("conv", "ParameterMemorySize", prm)
    if width != 128:
        cfg.update([("top", "MemoryDataWidth", width), ("top", "DDRBytesPerCycle", min(16, width // 8))])
    return cfg


def random_conv(rng: np.random.Generator, *, max_ch: int = 20, max_hw: int = 20) -> tuple[ConvLayer, np.ndarray]:
    """A random conv layer: kernel 1..7, stride 1..3, dilation 1..2, pads 0..k-1 per side, groups."""
    while True:
        kh, kw = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        sy, sx = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        dy, dx = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        pads = tuple(int(rng.integers(0, k)) for k in (kh, kw, kh, kw))
        g = int(rng.choice([1, 1, 1, 2, 3, 4]))
        ci = g * int(rng.integers(1, max(2, max_ch // g) + 1))
        co = g * int(rng.integers(1, max(2, max_ch // g) + 1))
        h, w = int(rng.integers(1, max_hw + 1)), int(rng.integers(1, max_hw + 1))
        eff_h, eff_w = (kh - 1) * dy + 1, (kw - 1) * dx + 1
        if h + pads[0] + pads[2] < eff_h or w + pads[1] + pads[3] < eff_w:
            continue
        # Every output window must read at least one real row/column (LOAD cannot make an
        # all-padding block); with pads < kernel extent that holds except for tiny inputs.
        if pads[0] >= eff_h or pads[2] >= eff_h or pads[1] >= eff_w or pads[3] >= eff_w:
            continue
        break
    x = rng.integers(-128, 128, (ci, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ci // g, kh, kw), dtype=np.int8)
    bias = rng.integers(-20000, 20000, co).astype(np.int32)
    mult = rng.integers(1, 1 << 15, co)
    mneg = np.where(rng.random(co) < 0.5, mult, rng.integers(0, 1 << 15, co))
    shift = rng.integers(12, 24, co)
    zp_in, zp_out = int(rng.integers(-20, 21)), int(rng.integers(-20, 21))
    lo = int(rng.choice([-128, zp_out]))
    hi = int(rng.choice([127, min(127, zp_out + 100)]))
    layer = ConvLayer(wt, bias, mult, shift, mneg, zp_in, zp_out, lo, hi, (sy, sx), pads, (dy, dx), g)
    return layer, x


def random_depthwise(rng: np.random.Generator, c: int, *, max_hw: int = 16) -> tuple[ConvLayer, np.ndarray]:
    """A random depthwise layer for a C-lane processor: 2..3C+1 channels (often not a multiple of
    C), kernels 1..5 per side (never 1x1), strides 1..2, pads below the kernel, ReLU or none."""
    ch = int(rng.integers(2, 3 * c + 2))
    kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
    kh = 3 if kh * kw == 1 else kh
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    pads = tuple(int(rng.integers(0, min(k, 3))) for k in (kh, kw, kh, kw))
    h, w_ = int(rng.integers(kh, max_hw)), int(rng.integers(kw, max_hw))
    x = rng.integers(-128, 128, (ch, h, w_), dtype=np.int8)
    w = rng.integers(-128, 128, (ch, 1, kh, kw), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-3000, 3000, ch).astype(np.int32), rng.integers(1 << 12, 1 << 15, ch),
                      rng.integers(12, 17, ch), zp_in=int(rng.integers(-5, 6)), zp_out=int(rng.integers(-9, 9)),
                      act_min=int(rng.choice([-128, 0])), stride=stride, pads=pads, groups=ch)
    return layer, x


def conv_reference(layer: ConvLayer, x: np.ndarray) -> np.ndarray:
    acc = ops.conv2d(x[None], layer.weight, layer.bias, layer.stride, layer.pads, layer.dilation, layer.groups,
                     layer.zp_in)[0]
    col = lambda a: np.asarray(a).reshape(-1, 1, 1)  # noqa: E731
    mneg = None if layer.mult_neg is None else col(layer.mult_neg)
    return requantize(acc, col(layer.mult), col(layer.shift), layer.zp_out, layer.act_min, layer.act_max, mneg)


def random_pool(rng: np.random.Generator, kind: str, *, max_ch: int = 20, max_hw: int = 24) -> tuple[PoolLayer, np.ndarray]:
    ch = int(rng.integers(1, max_ch + 1))
    if kind == "global_avg":
        h, w = int(rng.integers(1, 16)), int(rng.integers(1, 16))
        n = h * w
        layer = PoolLayer("global_avg", zp_in=int(rng.integers(-10, 11)), zp_out=int(rng.integers(-10, 11)))
    else:
        while True:
            kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
            sy, sx = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            pads = tuple(int(rng.integers(0, k)) for k in (kh, kw, kh, kw))
            h, w = int(rng.integers(1, max_hw + 1)), int(rng.integers(1, max_hw + 1))
            if h + pads[0] + pads[2] >= kh and w + pads[1] + pads[3] >= kw:
                break
        n = kh * kw
        layer = PoolLayer(kind, (kh, kw), (sy, sx), pads, zp_in=int(rng.integers(-10, 11)) if kind == "avg" else 0,
                          zp_out=int(rng.integers(-10, 11)) if kind == "avg" else 0)
    if layer.kind != "max":
        m, s = ops.pool_multiplier(1.0, float(rng.uniform(0.5, 2.0)), n)
        layer.mult, layer.shift = m, s
        if rng.random() < 0.3:
            layer.act_min = layer.zp_out  # fused ReLU
    x = rng.integers(-128, 128, (ch, h, w), dtype=np.int8)
    return layer, x


def pool_reference(layer: PoolLayer, x: np.ndarray) -> np.ndarray:
    xb = x[None]
    if layer.kind == "max":
        return ops.maxpool(xb, layer.kernel, layer.stride, layer.pads)[0]
    if layer.kind == "avg":
        return ops.avgpool(xb, layer.kernel, layer.stride, layer.pads, True, layer.zp_in, layer.mult, layer.shift,
                           layer.zp_out, layer.act_min, layer.act_max)[0]
    return ops.global_avgpool(xb, layer.zp_in, layer.mult, layer.shift, layer.zp_out, layer.act_min,
                              layer.act_max)[0]


def chained_conv_pool(cfg: ProcessorConfig, seed: int = 21) -> dict:
    """A two-layer program (conv 3x3 pad 1, then 2x2 max pool of its output) joined with
    ``layerprog.chain_streams``; returns the DRAM segments, the instructions, where the result
    lands and the golden result."""
    from dlproc.hardware.geometry import Geometry
    from dlproc.compiler.planners.schedule import ConvAddrs, chain_streams, emit_instructions
    from dlproc.compiler.planners.conv import conv_shape, pack_conv_params, pack_conv_weights, plan_conv
    from dlproc.compiler.planners.packing import pack_input
    from dlproc.compiler.planners.pool import plan_pool

    geom = Geometry.from_config(cfg)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (7, 16, 14), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 7, 3, 3), dtype=np.int8)
    conv = ConvLayer(w, rng.integers(-999, 999, 9).astype(np.int32), rng.integers(1, 1 << 15, 9),
                     rng.integers(14, 18, 9), zp_in=1, pads=1)
    pool = PoolLayer("max", 2, 2)
    s = conv_shape(conv, x.shape)
    wimg, _ = pack_conv_weights(geom, conv, s)
    a_in, a_w, a_p, a_mid, a_out, a_insn = 0x0, 0x4000, 0x8000, 0x10000, 0x20000, 0x30000
    steps_a, plan_a = plan_conv(geom, conv, x.shape, ConvAddrs(a_in, a_w, a_p, a_mid), cfg)
    steps_b, plan_b = plan_pool(geom, pool, (9, s.ho, s.wo), ConvAddrs(a_mid, 0, 0, a_out), cfg)
    streams = [emit_instructions(steps_a, plan_a, mark_index=0, finish=False),
               emit_instructions(steps_b, plan_b, mark_index=1, finish=False)]
    return {
        "geom": geom, "conv": conv, "pool": pool, "x": x, "steps": (steps_a, plan_a, steps_b, plan_b),
        "segments": [(a_in, pack_input(geom, x)), (a_w, wimg), (a_p, pack_conv_params(geom, conv, s))],
        "streams": streams, "program": chain_streams(geom, streams), "insn_base": a_insn,
        "out_addr": a_out, "out_shape": (9, 8, 7), "out_bytes": 3 * 8 * 7 * geom.pitch("OUT"),
        "window": (0, a_insn + 0x10000),
        "expected": pool_reference(pool, conv_reference(conv, x)),
    }
