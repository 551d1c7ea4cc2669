"""Small IR networks built by hand for the quantizer tests (no tests in this module).

The builders compute output shapes themselves, so the tests do not depend on a front end.
"""

from __future__ import annotations

import numpy as np

from dlproc.ir import Activation, Network
from dlproc.regress.generator import NetworkBuilder

RELU = Activation("relu")
LEAKY = Activation("leaky", alpha=0.1)


#: The tests build their networks with the library's builder (the regress generator's).
NetBuilder = NetworkBuilder


def rand_w(rng, *shape, scale=None) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * (scale or np.sqrt(2.0 / fan_in))).astype(np.float32)


def rand_b(rng, n, scale=0.1) -> np.ndarray:
    return (rng.standard_normal(n) * scale).astype(np.float32)


def tiny_net() -> Network:
    """input 1x4x4 -> conv 3x3 (1->2, pad 1, ReLU) -> fc (32 -> 3), fixed small weights."""
    b = NetBuilder("tiny", (1, 4, 4))
    w1 = np.array([[[[0.5, -0.25, 0.0], [1.0, 0.5, -0.5], [0.0, 0.25, 0.125]]],
                   [[[-0.5, 0.75, 0.25], [0.0, -1.0, 0.5], [0.25, 0.0, -0.125]]]], np.float32)
    b1 = np.array([0.1, -0.2], np.float32)
    b.conv("conv", "input", w1, b1, pads=(1, 1, 1, 1), act=RELU)
    w2 = (np.arange(3 * 32, dtype=np.float32).reshape(3, 32) % 7 - 3) / 8.0
    b2 = np.array([0.5, -0.5, 0.0], np.float32)
    b.fc("fc", "conv", w2, b2)
    return b.build(["fc"])


def conv_pool_fc_net(rng) -> Network:
    """Two convs (ReLU, leaky), max and average pooling, a fully connected layer."""
    b = NetBuilder("cpf", (3, 12, 12))
    b.conv("c1", "input", rand_w(rng, 6, 3, 3, 3), rand_b(rng, 6), pads=(1, 1, 1, 1), act=RELU)
    b.pool("p1", "c1", "maxpool", 2, 2)
    b.conv("c2", "p1", rand_w(rng, 8, 6, 3, 3), rand_b(rng, 8), stride=2, pads=(1, 1, 1, 1), act=LEAKY)
    b.pool("p2", "c2", "avgpool", 2, 1, pads=(0, 0, 1, 1), count_include_pad=True)
    b.fc("fc", "p2", rand_w(rng, 5, 8 * 3 * 3), rand_b(rng, 5))
    return b.build(["fc"])


def branch_net(rng) -> Network:
    """Residual add (with ReLU), a standalone leaky ReLU, concat of differently scaled tensors,
    grouped conv, LRN, nearest upsample, global average pooling, fc and softmax."""
    b = NetBuilder("branches", (4, 8, 8))
    b.conv("a", "input", rand_w(rng, 8, 4, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1), act=RELU)
    b.conv("bconv", "a", rand_w(rng, 8, 8, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1))
    b.eltwise_add("res", "a", "bconv", act=RELU)
    b.conv("c", "input", rand_w(rng, 4, 4, 1, 1, scale=2.0), rand_b(rng, 4))
    b.act("c_act", "c", LEAKY)
    b.conv("g", "res", rand_w(rng, 8, 2, 3, 3), None, pads=(1, 1, 1, 1), groups=4, act=RELU)
    b.pool("gp", "g", "maxpool", 2, 2)
    b.upsample("up", "gp", 2)
    b.concat("cat", ["res", "c_act", "up"])
    b.lrn("norm", "cat", size=3, alpha=1e-2, beta=0.75, bias=1.0)
    b.gap("gap", "norm")
    b.fc("fc", "gap", rand_w(rng, 6, 20), rand_b(rng, 6))
    b.softmax("prob", "fc")
    return b.build(["prob"])
