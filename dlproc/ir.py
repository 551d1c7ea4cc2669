"""The network intermediate representation shared by front ends, golden model, quantizer and compiler.

A :class:`Network` is a directed acyclic graph of :class:`Layer` objects kept in topological
order. Each layer names its producers in ``inputs``, so branches, concatenations and residual
additions are explicit. Shapes exclude the batch dimension and are channel-major
(:class:`Shape` is C, H, W), the layout the processor computes in.

Conventions that every consumer relies on:

* ``conv`` weights are float32 ``(Cout, Cin // groups, KH, KW)`` (ONNX's OIHW), bias ``(Cout,)``.
  Batch normalization has already been folded into them by the importer.
* ``convtranspose`` (ONNX ConvTranspose, Darknet deconvolutional) weights are float32
  ``(Cout, Cin // groups, KH, KW)`` like ``conv`` -- the importers swap the source's
  ``(Cin, Cout // groups, ...)`` channel axes per group -- and not flipped; ``pads`` crop the full
  output ``(H-1)*stride + (K-1)*dilation + 1``, ``output_padding`` (y, x) adds to its bottom/right.
* ``fc`` weights are float32 ``(Cout, Cin)`` where Cin flattens the input in C, H, W order;
  bias ``(Cout,)``. Flatten/Reshape in front of a fully connected layer are absorbed into it.
* ``pads`` are ``(top, left, bottom, right)``; ``kernel``, ``stride`` and ``dilation`` are
  ``(y, x)`` pairs.
* An activation is either fused into a ``conv``/``fc``/``add`` layer (``attrs["activation"]``) or
  a standalone ``act`` layer; both use :class:`Activation`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from dlproc.errors import ModelError

__all__ = ["Shape", "Activation", "TABLE_KINDS", "Layer", "Network", "OPS"]


@dataclass(frozen=True)
class Shape:
    """A tensor shape without the batch dimension: channels, height, width."""

    c: int
    h: int = 1
    w: int = 1

    @property
    def size(self) -> int:
        return self.c * self.h * self.w

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.c, self.h, self.w)

    def __str__(self) -> str:
        return f"{self.h}x{self.w}x{self.c}"


@dataclass(frozen=True)
class Activation:
    """A pointwise activation.

    ``kind`` is one of ``"relu"``, ``"leaky"`` (slope ``alpha`` for negative inputs) or ``"clip"``
    (clipped ReLU between ``lo`` and ``hi``, e.g. ReLU6 is ``clip`` with 0 and 6): these three the
    requantization itself computes (a clamp, a second multiplier for negative values). The
    *table kinds* (:data:`TABLE_KINDS`) are any other unary function; at int8 they are exact as a
    256-entry lookup from the input code to the output code (the output stage's activation table,
    ``docs/numerics.md``), so they always stay ``act`` layers in the IR and the compiler fuses the
    table into the layer in front. Their parameters: ``hardsigmoid`` max(0, min(1, alpha*x + beta)),
    ``elu`` and ``celu`` alpha, ``selu`` alpha and beta = gamma, ``gelu_tanh`` GELU's tanh
    approximation (``gelu`` is the erf form).
    """

    kind: str
    alpha: float = 0.0
    lo: float = 0.0
    hi: float = 0.0
    beta: float = 0.0

    KINDS = ("relu", "leaky", "clip", "sigmoid", "tanh", "silu", "hardswish", "hardsigmoid", "gelu", "gelu_tanh",
             "mish", "elu", "selu", "celu", "softplus", "softsign")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ModelError(f"activation kind {self.kind!r} is not one of {', '.join(self.KINDS)}")
        if self.kind == "celu" and self.alpha == 0.0:
            raise ModelError("a CELU activation needs alpha != 0")

    @property
    def needs_table(self) -> bool:
        """Whether the int8 form of this activation is the activation table (not the clamp)."""
        return self.kind in TABLE_KINDS

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The float semantics of the activation (the reference the quantized one approximates).

        Evaluated in float64 and returned in ``x``'s dtype, so the table that
        :func:`dlproc.targets.golden.ops.activation_table` builds from it rounds the exact value.
        """
        if self.kind == "relu":
            return np.maximum(x, 0)
        if self.kind == "leaky":
            return np.where(x >= 0, x, x * np.float32(self.alpha)).astype(x.dtype)
        if self.kind == "clip":
            return np.clip(x, self.lo, self.hi)
        v = np.asarray(x, dtype=np.float64)
        return _TABLE_FUNCTIONS[self.kind](v, self).astype(np.asarray(x).dtype)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    # exp of a large positive argument overflows; split by sign so both halves stay finite.
    e = np.exp(-np.abs(v))
    return np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(v: np.ndarray) -> np.ndarray:
    return np.maximum(v, 0.0) + np.log1p(np.exp(-np.abs(v)))


_ERF = np.vectorize(math.erf, otypes=[np.float64])

_TABLE_FUNCTIONS = {
    "sigmoid": lambda v, a: _sigmoid(v),
    "tanh": lambda v, a: np.tanh(v),
    "silu": lambda v, a: v * _sigmoid(v),
    "hardswish": lambda v, a: v * np.clip(v / 6.0 + 0.5, 0.0, 1.0),
    "hardsigmoid": lambda v, a: np.clip(a.alpha * v + a.beta, 0.0, 1.0),
    "gelu": lambda v, a: 0.5 * v * (1.0 + _ERF(v / math.sqrt(2.0))),
    "gelu_tanh": lambda v, a: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3))),
    "mish": lambda v, a: v * np.tanh(_softplus(v)),
    "elu": lambda v, a: np.where(v > 0, v, a.alpha * np.expm1(np.minimum(v, 0.0))),
    "selu": lambda v, a: a.beta * np.where(v > 0, v, a.alpha * np.expm1(np.minimum(v, 0.0))),
    "celu": lambda v, a: np.maximum(v, 0.0) + np.minimum(0.0, a.alpha * np.expm1(np.minimum(v, 0.0) / a.alpha)),
    "softplus": lambda v, a: _softplus(v),
    "softsign": lambda v, a: v / (1.0 + np.abs(v)),
}

#: Activation kinds whose int8 form is the activation table.
TABLE_KINDS = tuple(_TABLE_FUNCTIONS)


# Every operator of the IR and the attributes it carries. Front ends must produce only these;
# ``Network.validate`` checks it. "yolo" and "region" are detection heads that always run in software.
OPS: dict[str, tuple[str, ...]] = {
    "input": (),
    "conv": ("kernel", "stride", "pads", "dilation", "groups", "activation"),
    "convtranspose": ("kernel", "stride", "pads", "output_padding", "dilation", "groups", "activation"),
    "fc": ("activation",),
    "maxpool": ("kernel", "stride", "pads"),
    "avgpool": ("kernel", "stride", "pads", "count_include_pad"),
    "global_avgpool": (),
    "act": ("activation",),
    "add": ("activation",),
    # Element-wise multiply; input 1 is the same shape as input 0 or a (C, 1, 1) per-channel vector.
    "mul": ("activation",),
    "concat": (),
    # A selection/permutation of the input's channels: output channel k is input channel index[k]
    # (channel shuffle, Split and Slice along the channels). The compiler makes it an address remap.
    "channels": ("index",),
    "lrn": ("size", "alpha", "beta", "bias"),
    "softmax": (),
    "upsample": ("scale",),
    "yolo": ("anchors", "mask", "classes"),
    "region": ("anchors", "classes", "num", "coords"),
}


@dataclass
class Layer:
    """One node of the network graph.

    ``name`` is unique in the network and comes from the source model where it has one (ONNX node
    or output names; Darknet layers are named ``<type>_<index>`` after Darknet's own numbering).
    ``origin`` lists the source-model nodes merged into this layer (a conv with its batch norm and
    ReLU, say), main node first; the quantizer's calibration table reports it.
    ``tensor`` is the source model's name for this layer's output tensor, when it has one (ONNX),
    so the float reference can be probed at the same point.
    """

    name: str
    op: str
    inputs: list[str]
    shape: Shape
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    origin: list[str] = field(default_factory=list)
    tensor: str | None = None

    @property
    def activation(self) -> Activation | None:
        return self.attrs.get("activation")

    @property
    def weight(self) -> np.ndarray | None:
        return self.params.get("weight")

    @property
    def bias(self) -> np.ndarray | None:
        return self.params.get("bias")


@dataclass
class Network:
    """A network graph in topological order, with its named inputs and outputs.

    ``source_format`` is ``"onnx"``, ``"darknet"`` or ``"builtin"``; ``source_path`` the file it
    was read from (the float reference of an ONNX network runs that file in ONNX Runtime).
    """

    name: str
    layers: list[Layer]
    inputs: list[str]
    outputs: list[str]
    source_format: str = "builtin"
    source_path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {layer.name: layer for layer in self.layers}

    # -- access ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def __getitem__(self, name: str) -> Layer:
        try:
            return self._index[name]
        except KeyError:
            raise ModelError(f"network {self.name!r} has no layer named {name!r}") from None

    def consumers(self, name: str) -> list[Layer]:
        """The layers that read the output of layer ``name``, in topological order."""
        return [layer for layer in self.layers if name in layer.inputs]

    def input_shapes(self) -> list[Shape]:
        return [self[name].shape for name in self.inputs]

    # -- construction ---------------------------------------------------------------------------

    def replace_layers(self, layers: Iterable[Layer]) -> "Network":
        """A copy of this network with another layer list (re-validated)."""
        net = dataclasses.replace(self, layers=list(layers))
        net.validate()
        return net

    def validate(self) -> None:
        """Check names, operators, references and topological order; raise ModelError if broken."""
        self._index = {}
        for layer in self.layers:
            if layer.op not in OPS:
                raise ModelError(f"layer {layer.name!r}: operator {layer.op!r} is not an IR operator")
            if layer.name in self._index:
                raise ModelError(f"layer name {layer.name!r} is used twice")
            for src in layer.inputs:
                if src not in self._index:
                    raise ModelError(
                        f"layer {layer.name!r} reads {src!r}, which is not defined before it"
                    )
            if layer.op == "input" and layer.inputs:
                raise ModelError(f"input layer {layer.name!r} must not have inputs")
            if layer.op != "input" and not layer.inputs:
                raise ModelError(f"layer {layer.name!r} ({layer.op}) has no inputs")
            self._index[layer.name] = layer
        for name in self.inputs + self.outputs:
            if name not in self._index:
                raise ModelError(f"network input/output {name!r} is not a layer")
        for name in self.inputs:
            if self._index[name].op != "input":
                raise ModelError(f"network input {name!r} is not an input layer")
