"""Random networks for differential campaigns, reproducible from (seed, index).

Network ``index`` of campaign ``seed`` is drawn from ``numpy.random.default_rng([seed, index])``,
so any one of a thousand networks can be rebuilt alone, on any machine, from two integers. The
shapes stay small (inputs of 1..6 channels, 8..16 pixels square) so that a network takes about a
second through quantization, compilation and three targets; the layer mix covers what the
compiler maps to hardware:

* convolutions with random kernels (1..5), strides (1, 2), asymmetric paddings, dilations
  (1, 2), groups (plain, grouped, depthwise) and activations (none, ReLU, leaky ReLU, clip);
* max and average pools (with and without the padding in the divisor), standalone activations;
* a residual add (when the configuration has the adder module), a concat of two branches;
* the optional blocks the configuration has: LRN, nearest upsample, softmax;
* a global average pool and a fully connected head.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.ir import Activation, Layer, Network, Shape

__all__ = ["NetworkBuilder", "random_network", "network_rng", "random_input", "KINDS"]

ACTIVATIONS = (None, Activation("relu"), Activation("leaky", alpha=0.1), Activation("clip", lo=0.0, hi=2.0))


def network_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of network ``index`` of campaign ``seed`` (independent streams per index)."""
    return np.random.default_rng([int(seed), int(index)])


class NetworkBuilder:
    """Appends layers to a float network, tracking shapes (the IR's ``Layer``/``Network``)."""

    def __init__(self, name: str, in_shape: tuple[int, int, int]):
        self.name = name
        self.layers = [Layer("input", "input", [], Shape(*in_shape), origin=["input"], tensor="input")]

    def shape(self, name: str) -> Shape:
        return next(layer.shape for layer in self.layers if layer.name == name)

    def add(self, name: str, op: str, inputs: list[str], shape: Shape, **kw: Any) -> str:
        self.layers.append(Layer(name, op, inputs, shape, origin=[f"src_{name}"], tensor=name, **kw))
        return name

    def conv(self, name: str, src: str, w: np.ndarray, b: np.ndarray | None = None, stride: int = 1,
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), act: Activation | None = None, groups: int = 1,
             dilation: int = 1) -> str:
        s = self.shape(src)
        co, _, kh, kw = w.shape
        ho = (s.h + pads[0] + pads[2] - dilation * (kh - 1) - 1) // stride + 1
        wo = (s.w + pads[1] + pads[3] - dilation * (kw - 1) - 1) // stride + 1
        attrs = {"kernel": (kh, kw), "stride": (stride, stride), "pads": tuple(pads),
                 "dilation": (dilation, dilation), "groups": groups, "activation": act}
        params = {"weight": w.astype(np.float32)}
        if b is not None:
            params["bias"] = b.astype(np.float32)
        return self.add(name, "conv", [src], Shape(co, ho, wo), attrs=attrs, params=params)

    def fc(self, name: str, src: str, w: np.ndarray, b: np.ndarray | None = None,
           act: Activation | None = None) -> str:
        params = {"weight": w.astype(np.float32)}
        if b is not None:
            params["bias"] = b.astype(np.float32)
        return self.add(name, "fc", [src], Shape(w.shape[0]), attrs={"activation": act}, params=params)

    def pool(self, name: str, src: str, op: str, k: int, stride: int, pads: tuple[int, int, int, int] = (0, 0, 0, 0),
             count_include_pad: bool = False) -> str:
        s = self.shape(src)
        ho = (s.h + pads[0] + pads[2] - k) // stride + 1
        wo = (s.w + pads[1] + pads[3] - k) // stride + 1
        attrs: dict[str, Any] = {"kernel": (k, k), "stride": (stride, stride), "pads": tuple(pads)}
        if op == "avgpool":
            attrs["count_include_pad"] = count_include_pad
        return self.add(name, op, [src], Shape(s.c, ho, wo), attrs=attrs)

    def gap(self, name: str, src: str) -> str:
        return self.add(name, "global_avgpool", [src], Shape(self.shape(src).c))

    def act(self, name: str, src: str, act: Activation) -> str:
        return self.add(name, "act", [src], self.shape(src), attrs={"activation": act})

    def eltwise_add(self, name: str, a: str, b: str, act: Activation | None = None) -> str:
        return self.add(name, "add", [a, b], self.shape(a), attrs={"activation": act})

    def concat(self, name: str, srcs: list[str]) -> str:
        s = self.shape(srcs[0])
        return self.add(name, "concat", list(srcs), Shape(sum(self.shape(x).c for x in srcs), s.h, s.w))

    def lrn(self, name: str, src: str, size: int = 5, alpha: float = 1e-4, beta: float = 0.75,
            bias: float = 1.0) -> str:
        return self.add(name, "lrn", [src], self.shape(src),
                        attrs={"size": size, "alpha": alpha, "beta": beta, "bias": bias})

    def upsample(self, name: str, src: str, scale: int = 2) -> str:
        s = self.shape(src)
        return self.add(name, "upsample", [src], Shape(s.c, s.h * scale, s.w * scale), attrs={"scale": scale})

    def softmax(self, name: str, src: str) -> str:
        return self.add(name, "softmax", [src], self.shape(src))

    def build(self, outputs: list[str]) -> Network:
        net = Network(self.name, self.layers, ["input"], outputs)
        net.validate()
        return net


def _weights(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * (scale or np.sqrt(2.0 / fan_in))).astype(np.float32)


def _bias(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.standard_normal(n) * 0.1).astype(np.float32)


def _random_conv(b: NetworkBuilder, rng: np.random.Generator, name: str, src: str) -> str:
    s = b.shape(src)
    k = int(rng.integers(1, min(5, s.h, s.w) + 1))
    dilation = 2 if k > 1 and rng.random() < 0.25 and 2 * (k - 1) + 1 <= min(s.h, s.w) else 1
    stride = int(rng.integers(1, 3))
    pads = tuple(int(rng.integers(0, k)) for _ in range(4))
    kind = rng.random()
    if kind < 0.15 and s.c > 1:  # depthwise
        groups, co = s.c, s.c
    elif kind < 0.3 and s.c % 2 == 0:  # grouped, two groups
        groups, co = 2, 2 * int(rng.integers(1, 6))
    else:
        groups, co = 1, int(rng.integers(2, 11))
    act = ACTIVATIONS[int(rng.integers(0, len(ACTIVATIONS)))]
    return b.conv(name, src, _weights(rng, co, s.c // groups, k, k), _bias(rng, co), stride=stride, pads=pads,
                  act=act, groups=groups, dilation=dilation)


#: What a campaign's networks look like: "full" (the mix of the module docstring) or "tiny" (one
#: convolution: next to no work per case, so a campaign of them measures the engine's own cost).
KINDS = ("full", "tiny")


def random_network(seed: int, index: int, config: Any = None, kind: str = "full") -> Network:
    """Network ``index`` of campaign ``seed``; with ``config``, only layers its processor runs
    (an optional block is drawn only when the configuration generates it)."""
    from dlproc.hardware.geometry import Geometry

    if kind not in KINDS:
        raise ValueError(f"network kind {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "tiny":
        rng = network_rng(seed, index)
        b = NetworkBuilder(f"regress_tiny_{seed}_{index}", (int(rng.integers(1, 5)), 8, 8))
        return b.build([_random_conv(b, rng, "conv0", "input")])

    hw = Geometry.from_config(config).hw if config is not None else None

    def has(opcode: isa.Opcode) -> bool:
        return hw is None or hw.has_block(opcode)

    rng = network_rng(seed, index)
    cin = int(rng.integers(1, 7))
    size = int(rng.integers(8, 17))
    b = NetworkBuilder(f"regress_{seed}_{index}", (cin, size, size))
    src = "input"
    for i in range(int(rng.integers(1, 4))):
        src = _random_conv(b, rng, f"conv{i}", src)
        s = b.shape(src)
        choice = int(rng.integers(0, 6))
        if choice == 1 and s.h >= 4 and s.w >= 4:
            src = b.pool(f"pool{i}", src, "maxpool", 2, 2)
        elif choice == 2 and s.h >= 3 and s.w >= 3:
            src = b.pool(f"pool{i}", src, "avgpool", 3, 1, pads=(1, 1, 1, 1),
                         count_include_pad=bool(rng.integers(0, 2)))
        elif choice == 3:
            src = b.act(f"act{i}", src, Activation("leaky", alpha=0.2))
        elif choice == 4 and has(isa.Opcode.LRN):
            src = b.lrn(f"lrn{i}", src, size=int(rng.choice([3, 5])), alpha=1e-2, beta=0.75, bias=1.0)
        elif choice == 5 and has(isa.Opcode.UPSAMPLE) and s.h * s.w <= 64:
            src = b.upsample(f"up{i}", src, 2)
    s = b.shape(src)
    branch = int(rng.integers(0, 3))
    if branch == 1:
        left = b.conv("left", src, _weights(rng, 4, s.c, 1, 1), _bias(rng, 4), act=Activation("relu"))
        right = b.conv("right", src, _weights(rng, 3, s.c, 3, 3), _bias(rng, 3), pads=(1, 1, 1, 1))
        src = b.concat("cat", [left, right])
    elif branch == 2 and has(isa.Opcode.ADD):
        res = b.conv("res", src, _weights(rng, s.c, s.c, 3, 3), _bias(rng, s.c), pads=(1, 1, 1, 1))
        src = b.eltwise_add("sum", src, res, act=ACTIVATIONS[int(rng.integers(0, 2))])
    s = b.shape(src)
    if s.h * s.w > 16 or rng.integers(0, 2):
        src = b.gap("gap", src)
        s = b.shape(src)
    n_out = int(rng.integers(2, 11))
    out = b.fc("fc", src, _weights(rng, n_out, s.c * s.h * s.w), _bias(rng, n_out))
    if rng.integers(0, 2):
        out = b.softmax("prob", out)
    return b.build([out])


def random_input(seed: int, index: int, shape: tuple[int, ...], frames: int) -> np.ndarray:
    """The float input batch of network ``index`` (its own stream, apart from the weights')."""
    rng = np.random.default_rng([int(seed), int(index), 1])
    return rng.uniform(-1.0, 1.0, (frames, *shape)).astype(np.float32)
