"""Per-layer statistics of a network: parameters, activations, multiply-accumulates.

The figures follow Darknet's network table. MACs count only the multiply-accumulates of
convolutions (``Cout * Ho * Wo * Cin / groups * kh * kw``) and fully connected layers
(``Cout * Cin``), and transposed convolutions (``Cin * H * W * Cout / groups * kh * kw``, every
input pixel times every tap); pooling, additions, concatenation, LRN, softmax and the detection heads count 0,
as in Darknet, whose BFLOPs figure is ``2 * MACs / 1e9`` of the same layers. Parameters are the
weights plus one bias per output channel, after batch normalization has been folded.
With a MAC rate (MACs per cycle) and a clock, each layer also gets its ideal cycle count
``ceil(MACs / rate)``: the lower bound of an accelerator that does nothing but MACs at full rate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from dlproc.errors import ModelError
from dlproc.ir import Layer, Network

__all__ = ["LayerStats", "NetworkStats", "layer_macs", "layer_params", "network_stats"]


@dataclass
class LayerStats:
    index: int
    name: str
    op: str
    shape: tuple[int, int, int]  # output C, H, W
    params: int
    activations: int
    macs: int
    cycles: int | None = None


@dataclass
class NetworkStats:
    name: str
    layers: list[LayerStats]
    macs_per_cycle: int | None = None
    clock_mhz: float | None = None

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def activations(self) -> int:
        return sum(layer.activations for layer in self.layers)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def gop(self) -> float:
        """Giga-operations per inference, counting a MAC as two operations (Darknet's BFLOPs)."""
        return 2 * self.macs / 1e9

    @property
    def cycles(self) -> int | None:
        if self.macs_per_cycle is None:
            return None
        return sum(layer.cycles for layer in self.layers)

    @property
    def frames_per_second(self) -> float | None:
        if self.cycles is None or self.clock_mhz is None or self.cycles == 0:
            return None
        return self.clock_mhz * 1e6 / self.cycles

    def to_dict(self) -> dict:
        total = {"params": self.params, "activations": self.activations, "macs": self.macs,
                 "gop": self.gop}
        if self.macs_per_cycle is not None:
            total.update(macs_per_cycle=self.macs_per_cycle, cycles=self.cycles)
        if self.clock_mhz is not None:
            total.update(clock_mhz=self.clock_mhz, frames_per_second=self.frames_per_second)
        layers = []
        for layer in self.layers:
            row = asdict(layer)
            row["shape"] = list(layer.shape)
            if row["cycles"] is None:
                del row["cycles"]
            layers.append(row)
        return {"layers": layers, "total": total}


def layer_macs(layer: Layer, net: Network) -> int:
    """Multiply-accumulates of one layer (0 for everything but conv, convtranspose and fc)."""
    if layer.op == "conv":
        kh, kw = layer.attrs["kernel"]
        cin = net[layer.inputs[0]].shape.c
        return layer.shape.size * (cin // layer.attrs.get("groups", 1)) * kh * kw
    if layer.op == "fc":
        return layer.shape.c * net[layer.inputs[0]].shape.size
    if layer.op == "convtranspose":
        # Every input pixel meets every tap once: Cin x H x W x Cout/groups x kh x kw (the products
        # that pads crop away are counted too, as frameworks count them).
        kh, kw = layer.attrs["kernel"]
        return net[layer.inputs[0]].shape.size * (layer.shape.c // layer.attrs.get("groups", 1)) * kh * kw
    return 0


def layer_params(layer: Layer) -> int:
    """Weights plus biases (one per output channel) of a conv or fc layer, else 0."""
    if layer.op not in ("conv", "fc", "convtranspose"):
        return 0
    weight = layer.params.get("weight")
    if weight is None:
        raise ModelError(f"layer {layer.name!r} ({layer.op}) has no weight")
    return int(weight.size) + layer.shape.c


def network_stats(net: Network, macs_per_cycle: int | None = None, clock_mhz: float | None = None) -> NetworkStats:
    """Statistics of every non-input layer of ``net``, in topological order."""
    if macs_per_cycle is not None and macs_per_cycle < 1:
        raise ModelError(f"the MAC rate must be a positive integer, got {macs_per_cycle}")
    if clock_mhz is not None and not clock_mhz > 0:
        raise ModelError(f"the clock must be positive (MHz), got {clock_mhz}")
    if clock_mhz is not None and macs_per_cycle is None:
        raise ModelError("a clock needs a MAC rate too (--macs-per-cycle) to give cycles and frames/s")
    rows = []
    for layer in net.layers:
        if layer.op == "input":
            continue
        macs = layer_macs(layer, net)
        rows.append(LayerStats(
            index=len(rows), name=layer.name, op=layer.op, shape=layer.shape.as_tuple(),
            params=layer_params(layer), activations=layer.shape.size, macs=macs,
            cycles=math.ceil(macs / macs_per_cycle) if macs_per_cycle else None,
        ))
    return NetworkStats(net.name, rows, macs_per_cycle, clock_mhz)
