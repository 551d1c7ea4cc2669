"""GoogLeNet (Inception v1) as an ONNX model built in code, with random weights.

The topology is the one of the BVLC/ONNX model zoo ``googlenet`` (Szegedy et al. 2014, the
network MATLAB's ``googlenet`` also imports): 224x224 RGB input,

    conv1 7x7/2 (64) - ReLU - maxpool 3x3/2 - LRN(5) - conv2 1x1 (64) - ReLU - conv2 3x3 (192) - ReLU
    - LRN(5) - maxpool 3x3/2 - inception 3a, 3b - maxpool 3x3/2 - inception 4a..4e - maxpool 3x3/2
    - inception 5a, 5b - avgpool 7x7 - (dropout) - FC 1024->1000 - softmax

with Caffe's ceil-mode pooling (the zoo model's ``pads`` [0, 0, 1, 1] on the stride-2 pools),
so the maps are 112, 56, 28, 14 and 7 pixels wide. Every inception module is four branches
(1x1; 1x1 reduce + 3x3; 1x1 reduce + 5x5; 3x3/1 maxpool + 1x1 projection), each ending in a ReLU,
concatenated along the channels. 1.58 G multiply-accumulates, 7.0 M weights.

The weights are random (He-scaled normal, fixed seed), so the model exercises the performance
and bit-exactness of the processor, not accuracy. The benchmarks and tests share this builder:
``benchmarks/bench_googlenet.py``, ``tests/compiler/test_googlenet.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["INCEPTION", "InceptionSpec", "googlenet_onnx", "googlenet_macs"]


@dataclass(frozen=True)
class InceptionSpec:
    """Channel counts of one inception module (the columns of table 1 of the paper)."""

    name: str
    c1x1: int
    c3x3_reduce: int
    c3x3: int
    c5x5_reduce: int
    c5x5: int
    pool_proj: int

    @property
    def out_channels(self) -> int:
        return self.c1x1 + self.c3x3 + self.c5x5 + self.pool_proj


#: The nine modules; a 3x3/2 max pool follows 3b and 4e.
INCEPTION: tuple[InceptionSpec, ...] = (
    InceptionSpec("3a", 64, 96, 128, 16, 32, 32),
    InceptionSpec("3b", 128, 128, 192, 32, 96, 64),
    InceptionSpec("4a", 192, 96, 208, 16, 48, 64),
    InceptionSpec("4b", 160, 112, 224, 24, 64, 64),
    InceptionSpec("4c", 128, 128, 256, 24, 64, 64),
    InceptionSpec("4d", 112, 144, 288, 32, 64, 64),
    InceptionSpec("4e", 256, 160, 320, 32, 128, 128),
    InceptionSpec("5a", 256, 160, 320, 32, 128, 128),
    InceptionSpec("5b", 384, 192, 384, 48, 128, 128),
)
_POOL_AFTER = {"3b", "4e"}


class _Graph:
    """Accumulates nodes and initializers; tracks the channel count of each tensor."""

    def __init__(self, rng: np.random.Generator):
        from onnx import helper

        self.helper = helper
        self.rng = rng
        self.nodes: list = []
        self.inits: list = []
        self.channels: dict[str, int] = {}

    def _init(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv(self, name: str, x: str, cout: int, k: int, stride: int = 1, pad: int = 0, relu: bool = True) -> str:
        cin = self.channels[x]
        # He-scaled weights keep the activations' spread roughly constant through the depth, so
        # every layer's int8 range is used (a fixed-scale random net would saturate or vanish).
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        b = self.rng.standard_normal(cout) * 0.1
        out = f"{name}_conv"
        self.nodes.append(self.helper.make_node(
            "Conv", [x, self._init(f"{name}_w", w), self._init(f"{name}_b", b)], [out], name=name,
            kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4))
        if relu:
            self.nodes.append(self.helper.make_node("Relu", [out], [f"{name}_relu"], name=f"{name}_relu"))
            out = f"{name}_relu"
        self.channels[out] = cout
        return out

    def maxpool(self, name: str, x: str, k: int, stride: int, pads: list[int], ceil: bool = False) -> str:
        self.nodes.append(self.helper.make_node("MaxPool", [x], [name], name=name, kernel_shape=[k, k],
                                                strides=[stride, stride], pads=pads, ceil_mode=int(ceil)))
        self.channels[name] = self.channels[x]
        return name

    def lrn(self, name: str, x: str) -> str:
        self.nodes.append(self.helper.make_node("LRN", [x], [name], name=name, size=5, alpha=1e-4,
                                                beta=0.75, bias=1.0))
        self.channels[name] = self.channels[x]
        return name

    def inception(self, spec: InceptionSpec, x: str) -> str:
        p = f"inception_{spec.name}"
        b1 = self.conv(f"{p}_1x1", x, spec.c1x1, 1)
        b2 = self.conv(f"{p}_3x3", self.conv(f"{p}_3x3_reduce", x, spec.c3x3_reduce, 1), spec.c3x3, 3, pad=1)
        b3 = self.conv(f"{p}_5x5", self.conv(f"{p}_5x5_reduce", x, spec.c5x5_reduce, 1), spec.c5x5, 5, pad=2)
        b4 = self.conv(f"{p}_pool_proj", self.maxpool(f"{p}_pool", x, 3, 1, [1, 1, 1, 1]), spec.pool_proj, 1)
        out = f"{p}_output"
        self.nodes.append(self.helper.make_node("Concat", [b1, b2, b3, b4], [out], name=out, axis=1))
        self.channels[out] = spec.out_channels
        return out


def googlenet_onnx(path: str | Path | None = None, *, seed: int = 0, size: int = 224, classes: int = 1000,
                   softmax: bool = True):
    """Build GoogLeNet as an ``onnx.ModelProto`` (opset 13); save it to ``path`` if given.

    ``size`` other than 224 gives a smaller input (the final average pool covers whatever map is
    left, as a global average pool would); ``classes`` sets the FC width.
    """
    import onnx
    from onnx import TensorProto, helper

    if size < 32 or size % 32:
        raise ValueError(f"size {size} is not supported; GoogLeNet needs a multiple of 32 (>= 32), e.g. 224")
    g = _Graph(np.random.default_rng(seed))
    g.channels["data"] = 3
    x = g.conv("conv1_7x7_s2", "data", 64, 7, stride=2, pad=3)
    x = g.maxpool("pool1_3x3_s2", x, 3, 2, [0, 0, 1, 1])
    x = g.lrn("pool1_norm1", x)
    x = g.conv("conv2_3x3_reduce", x, 64, 1)
    x = g.conv("conv2_3x3", x, 192, 3, pad=1)
    x = g.lrn("conv2_norm2", x)
    x = g.maxpool("pool2_3x3_s2", x, 3, 2, [0, 0, 1, 1])
    for spec in INCEPTION:
        x = g.inception(spec, x)
        if spec.name in _POOL_AFTER:
            x = g.maxpool(f"pool_{spec.name}_3x3_s2", x, 3, 2, [0, 0, 1, 1])
    final = size // 32
    g.nodes.append(helper.make_node("AveragePool", [x], ["pool5_7x7_s1"], name="pool5_7x7_s1",
                                    kernel_shape=[final, final], strides=[1, 1]))
    g.nodes.append(helper.make_node("Flatten", ["pool5_7x7_s1"], ["pool5_flat"], name="pool5_flat", axis=1))
    w = g.rng.standard_normal((classes, 1024)) * np.sqrt(1.0 / 1024)
    g.nodes.append(helper.make_node("Gemm", ["pool5_flat", g._init("loss3_classifier_w", w),
                                             g._init("loss3_classifier_b", g.rng.standard_normal(classes) * 0.1)],
                                    ["loss3_classifier"], name="loss3_classifier", transB=1))
    out = "loss3_classifier"
    if softmax:
        g.nodes.append(helper.make_node("Softmax", [out], ["prob"], name="prob", axis=1))
        out = "prob"
    graph = helper.make_graph(
        g.nodes, "googlenet",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])], initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="dlproc")
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model


def googlenet_macs(size: int = 224, classes: int = 1000) -> int:
    """Multiply-accumulates of the conv and FC layers, computed from the topology (no ONNX needed)."""
    h = size // 2
    macs = 64 * 3 * 49 * h * h
    h //= 2
    macs += 64 * 64 * h * h + 192 * 64 * 9 * h * h
    h //= 2
    cin = 192
    for spec in INCEPTION:
        hw = h * h
        macs += hw * (cin * (spec.c1x1 + spec.c3x3_reduce + spec.c5x5_reduce + spec.pool_proj)
                      + spec.c3x3_reduce * spec.c3x3 * 9 + spec.c5x5_reduce * spec.c5x5 * 25)
        cin = spec.out_channels
        if spec.name in _POOL_AFTER:
            h //= 2
    return macs + 1024 * classes
