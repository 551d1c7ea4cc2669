"""A small ONNX graph builder for the zoo: the layers the classic CNNs are made of, with random
He-scaled weights from one generator, and the channel count of every tensor tracked so that a
builder reads like the network's table.

He scaling (std = sqrt(2 / fan_in)) keeps the activations' spread roughly constant through the
depth, so every layer's int8 range is used after calibration; batch normalizations get random
but well-conditioned statistics, so the importer's folding is exercised as in a trained model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["OnnxGraph"]


class OnnxGraph:
    """Nodes, initializers and channel counts of an ONNX graph being built (opset 13)."""

    def __init__(self, name: str, input_shape: tuple[int, int, int], seed: int = 0, input_name: str = "data"):
        from onnx import helper

        self.helper = helper
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.input_name = input_name
        self.input_shape = tuple(input_shape)
        self.nodes: list = []
        self.inits: list = []
        self.channels: dict[str, int] = {input_name: int(input_shape[0])}

    def _init(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def _node(self, op: str, inputs: Sequence[str], out: str, channels: int, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op, list(inputs), [out], name=out, **attrs))
        self.channels[out] = channels
        return out

    def conv(self, name: str, x: str, cout: int, k: int, stride: int = 1, pad: int | Sequence[int] | None = None,
             groups: int = 1, bias: bool = True, bn: bool = False, act: str | None = "relu") -> str:
        """Conv (``pad`` None: "same" for odd k), then batch norm if ``bn``, then ``act``:
        "relu", "relu6" (Clip 0..6), "leaky" (0.1) or None."""
        cin = self.channels[x]
        if cin % groups or cout % groups:
            raise ValueError(f"{name}: {cin} -> {cout} channels do not split into {groups} groups")
        pads = [k // 2] * 4 if pad is None else ([pad] * 4 if isinstance(pad, int) else list(pad))
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / (cin // groups * k * k))
        inputs = [x, self._init(f"{name}_w", w)]
        if bias and not bn:
            inputs.append(self._init(f"{name}_b", self.rng.standard_normal(cout) * 0.05))
        out = self._node("Conv", inputs, f"{name}", cout, kernel_shape=[k, k], strides=[stride, stride], pads=pads,
                         group=groups)
        if bn:
            out = self.batchnorm(f"{name}_bn", out)
        return self.activation(out, act)

    def batchnorm(self, name: str, x: str) -> str:
        c = self.channels[x]
        params = [self._init(f"{name}_scale", self.rng.uniform(0.5, 1.5, c)),
                  self._init(f"{name}_bias", self.rng.normal(0.0, 0.1, c)),
                  self._init(f"{name}_mean", self.rng.normal(0.0, 0.1, c)),
                  self._init(f"{name}_var", self.rng.uniform(0.5, 1.5, c))]
        return self._node("BatchNormalization", [x, *params], name, c, epsilon=1e-5)

    def activation(self, x: str, act: str | None) -> str:
        c = self.channels[x]
        if act is None:
            return x
        if act == "relu":
            return self._node("Relu", [x], f"{x}_relu", c)
        if act == "relu6":
            lo, hi = self._init(f"{x}_lo", np.array(0.0)), self._init(f"{x}_hi", np.array(6.0))
            return self._node("Clip", [x, lo, hi], f"{x}_relu6", c)
        if act == "leaky":
            return self._node("LeakyRelu", [x], f"{x}_leaky", c, alpha=0.1)
        raise ValueError(f"activation {act!r} is not relu, relu6, leaky or None")

    def maxpool(self, name: str, x: str, k: int, stride: int, pads: Sequence[int] = (0, 0, 0, 0),
                ceil: bool = False) -> str:
        return self._node("MaxPool", [x], name, self.channels[x], kernel_shape=[k, k], strides=[stride, stride],
                          pads=list(pads), ceil_mode=int(ceil))

    def avgpool(self, name: str, x: str, k: int, stride: int = 1) -> str:
        return self._node("AveragePool", [x], name, self.channels[x], kernel_shape=[k, k], strides=[stride, stride])

    def global_avgpool(self, name: str, x: str) -> str:
        return self._node("GlobalAveragePool", [x], name, self.channels[x])

    def lrn(self, name: str, x: str, size: int = 5) -> str:
        return self._node("LRN", [x], name, self.channels[x], size=size, alpha=1e-4, beta=0.75, bias=1.0)

    def add(self, name: str, a: str, b: str, act: str | None = None) -> str:
        return self.activation(self._node("Add", [a, b], name, self.channels[a]), act)

    def concat(self, name: str, xs: Sequence[str]) -> str:
        return self._node("Concat", list(xs), name, sum(self.channels[x] for x in xs), axis=1)

    def upsample(self, name: str, x: str, scale: int = 2) -> str:
        empty = self._init(f"{name}_roi", np.zeros(0))
        scales = self._init(f"{name}_scales", np.array([1.0, 1.0, scale, scale]))
        return self._node("Resize", [x, empty, scales], name, self.channels[x], mode="nearest")

    def fc(self, name: str, x: str, cout: int, cin: int | None = None, act: str | None = None) -> str:
        """Flatten (if needed), then Gemm; ``cin`` is the flattened width (channels x H x W)."""
        cin = cin or self.channels[x]
        flat = self._node("Flatten", [x], f"{name}_flat", cin, axis=1)
        w = self.rng.standard_normal((cout, cin)) * np.sqrt(1.0 / cin)
        out = self._node("Gemm", [flat, self._init(f"{name}_w", w), self._init(f"{name}_b",
                                                                              self.rng.standard_normal(cout) * 0.05)],
                         name, cout, transB=1)
        return self.activation(out, act)

    def softmax(self, name: str, x: str) -> str:
        return self._node("Softmax", [x], name, self.channels[x], axis=1)

    def model(self, outputs: Sequence[str]):
        """The checked ``onnx.ModelProto`` with ``outputs`` as graph outputs (shapes inferred)."""
        import onnx
        from onnx import TensorProto

        def make(output_infos: list):
            graph = self.helper.make_graph(
                self.nodes, self.name,
                [self.helper.make_tensor_value_info(self.input_name, TensorProto.FLOAT, [1, *self.input_shape])],
                output_infos, initializer=self.inits)
            model = self.helper.make_model(graph, opset_imports=[self.helper.make_opsetid("", 13)],
                                           producer_name="dlproc zoo")
            model.ir_version = 8
            return model

        # The outputs' shapes come from ONNX's shape inference on the graph itself.
        draft = make([self.helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
        done = onnx.shape_inference.infer_shapes(draft).graph
        inferred = {v.name: v for v in [*done.value_info, *done.output] if v.type.tensor_type.HasField("shape")}
        infos = []
        for o in outputs:
            dims = [d.dim_value for d in inferred[o].type.tensor_type.shape.dim] if o in inferred else None
            infos.append(self.helper.make_tensor_value_info(o, TensorProto.FLOAT, dims))
        model = make(infos)
        onnx.checker.check_model(model)
        return model
