"""The quantized network: what the quantizer produces and the compiler and golden model consume.

A :class:`QuantizedNetwork` mirrors the IR graph layer for layer. Each :class:`QLayer` carries
the quantization of its *output* tensor (``scale``, ``zero_point``: real = scale * (q - zp)) and,
for layers that run in int8 hardware, the integer parameters of its operation:

* conv / fc: ``weight`` int8 (per-output-channel symmetric, values in -127..127),
  ``weight_scale`` float64 (Cout,), ``bias`` int32 = round(b / (s_in * s_w)) (the pure bias;
  :meth:`QLayer.folded_bias` adds the ``-zp_in * sum(w)`` term the hardware's bias holds),
  ``mult``, ``mult_neg``, ``shift`` per output channel (int32 arrays) and ``act_min``/``act_max``.
* convtranspose: the same as conv (its IR weight is (Cout, Cin/groups, kh, kw) too, so the
  per-output-channel scales are along axis 0); the hardware folds ``-zp_in * sum(w)`` per output
  phase, not over the whole kernel (``layerprog.convtranspose_phases``).
* act (a standalone activation): ``mult``/``mult_neg``/``shift`` per channel; it runs as a 1x1
  depthwise convolution with unit weights.
* avgpool / global_avgpool: ``q["mult"]``, ``q["shift"]``.
* add: ``q["ma"]``, ``q["mb"]``, ``q["shift"]`` and the clamp.
* concat: ``q["rescale"]``, one entry per input: ``None`` when the input already has the
  output's scale and zero point, else ``[mult, shift]`` for :func:`dlproc.targets.golden.ops.rescale`.
* lrn: ``lrn_mult`` (uint16) and ``lrn_shift`` (uint8) tables of docs/numerics.md.
* maxpool / upsample: no parameters; their output has the input's scale and zero point.

Layers with ``hardware == False`` (softmax, yolo, region) run in float32 in software; they still
record the scale and zero point of their output for a hardware layer that might consume it.

Files (``.dlq``) are zip archives holding ``header.json`` (format version, graph, scalar
parameters) and one ``.npy`` member per array. Members are written in a fixed order with a
fixed timestamp, so the same network always gives the same bytes.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlproc.errors import QuantizationError
from dlproc.targets.golden import ops
from dlproc.ir import Activation, Shape
from dlproc.hardware.numerics import INT8_MAX, INT8_MIN

__all__ = ["FORMAT_VERSION", "QLayer", "QuantizedNetwork", "SOFTWARE_OPS"]

#: Version of the .dlq file layout; bump it whenever the header or the arrays change meaning.
FORMAT_VERSION = 1
FORMAT_NAME = "dlproc-quantized-network"

#: Operators that never run in the int8 datapath (they stay float, on the host).
SOFTWARE_OPS = ("softmax", "yolo", "region")

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass
class QLayer:
    """One layer of a quantized network (see the module docstring for its parameters)."""

    name: str
    op: str
    inputs: list[str]
    shape: Shape
    scale: float
    zero_point: int
    hardware: bool = True
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    q: dict[str, Any] = field(default_factory=dict)
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX
    origin: list[str] = field(default_factory=list)
    tensor: str | None = None

    @property
    def activation(self) -> Activation | None:
        return self.attrs.get("activation")

    def folded_bias(self, zp_in: int) -> np.ndarray:
        """The int32 bias the hardware adds: bias - zp_in * sum(w) per output channel, wrapped.

        The MAC array never subtracts the input zero point, so its contribution to every
        accumulator is folded into the bias (docs/numerics.md).
        """
        return ops.fold_zero_point(self.params["bias"], self.params["weight"], zp_in).astype(np.int32)


@dataclass
class QuantizedNetwork:
    """An int8 network: QLayers in topological order plus the graph's inputs and outputs."""

    name: str
    layers: list[QLayer]
    inputs: list[str]
    outputs: list[str]
    source_format: str = "builtin"
    source_path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {layer.name: layer for layer in self.layers}

    def __iter__(self):
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, name: str) -> QLayer:
        try:
            return self._index[name]
        except KeyError:
            raise QuantizationError(f"quantized network {self.name!r} has no layer {name!r}") from None

    def producer(self, name: str, index: int = 0) -> QLayer:
        """The layer feeding input ``index`` of layer ``name`` (its scale and zero point are the
        input quantization: e.g. a conv pads with ``producer(name).zero_point``)."""
        return self[self[name].inputs[index]]

    # -- conversion between float and int8 tensors ----------------------------------------------

    def quantize_input(self, x: np.ndarray, name: str | None = None) -> np.ndarray:
        """float32 input -> int8 with the input layer's scale and zero point.

        q = clamp(rint(x / scale) + zp, -128, 127) (half to even, as ONNX QuantizeLinear; see
        dlproc.targets.golden.ops.quantize_tensor).
        """
        layer = self[name or self.inputs[0]]
        return ops.quantize_tensor(x, layer.scale, layer.zero_point)

    def dequantize(self, name: str, q: np.ndarray) -> np.ndarray:
        """int8 tensor of layer ``name`` -> float32 (software layers' outputs pass through)."""
        layer = self[name]
        if q.dtype != np.int8:
            return np.asarray(q, dtype=np.float32)
        return ops.dequantize(q, layer.scale, layer.zero_point)

    def learnable_bytes(self) -> int:
        """Bytes of int8 weights plus int32 biases (the quantized learnable parameter memory)."""
        total = 0
        for layer in self.layers:
            if "weight" in layer.params:
                total += layer.params["weight"].size * 1 + layer.params["bias"].size * 4
        return total

    # -- files ----------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the network to a ``.dlq`` file (deterministic bytes)."""
        path = Path(path)
        arrays: list[tuple[str, np.ndarray]] = []
        header_layers = []
        for layer in self.layers:
            keys = {}
            for pname in sorted(layer.params):
                key = f"a{len(arrays)}"
                arrays.append((key, np.ascontiguousarray(layer.params[pname])))
                keys[pname] = key
            header_layers.append(
                {
                    "name": layer.name,
                    "op": layer.op,
                    "inputs": list(layer.inputs),
                    "shape": list(layer.shape.as_tuple()),
                    "scale": float(layer.scale),
                    "zero_point": int(layer.zero_point),
                    "hardware": bool(layer.hardware),
                    "attrs": _attrs_to_json(layer.attrs),
                    "params": keys,
                    "q": layer.q,
                    "act_min": int(layer.act_min),
                    "act_max": int(layer.act_max),
                    "origin": list(layer.origin),
                    "tensor": layer.tensor,
                }
            )
        header = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "source_format": self.source_format,
            "source_path": self.source_path,
            "meta": self.meta,
            "layers": header_layers,
        }
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            _write_member(zf, "header.json", json.dumps(header, indent=1, sort_keys=True).encode())
            for key, arr in arrays:
                buf = io.BytesIO()
                np.lib.format.write_array(buf, arr, allow_pickle=False)
                _write_member(zf, f"{key}.npy", buf.getvalue())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "QuantizedNetwork":
        """Read a ``.dlq`` file; a file of another format version is a QuantizationError."""
        path = Path(path)
        if not path.is_file():
            raise QuantizationError(f"quantized network file {str(path)!r} does not exist")
        try:
            with zipfile.ZipFile(path) as zf:
                header = json.loads(zf.read("header.json"))
                if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
                    raise QuantizationError(
                        f"{str(path)!r} is not a dlproc quantized network (.dlq) file"
                    )
                version = header.get("format_version")
                if version != FORMAT_VERSION:
                    raise QuantizationError(
                        f"{str(path)!r} has .dlq format version {version}; this dlproc reads "
                        f"format version {FORMAT_VERSION} only (re-run dlproc quantize)"
                    )
                layers = []
                for entry in header["layers"]:
                    params = {
                        pname: np.lib.format.read_array(io.BytesIO(zf.read(f"{key}.npy")), allow_pickle=False)
                        for pname, key in entry["params"].items()
                    }
                    layers.append(
                        QLayer(
                            name=entry["name"],
                            op=entry["op"],
                            inputs=list(entry["inputs"]),
                            shape=Shape(*entry["shape"]),
                            scale=float(entry["scale"]),
                            zero_point=int(entry["zero_point"]),
                            hardware=bool(entry["hardware"]),
                            attrs=_attrs_from_json(entry["attrs"]),
                            params=params,
                            q=entry["q"],
                            act_min=int(entry["act_min"]),
                            act_max=int(entry["act_max"]),
                            origin=list(entry["origin"]),
                            tensor=entry["tensor"],
                        )
                    )
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise QuantizationError(
                f"{str(path)!r} is not a readable dlproc quantized network (.dlq) file: {exc}"
            ) from None
        return cls(
            name=header["name"],
            layers=layers,
            inputs=list(header["inputs"]),
            outputs=list(header["outputs"]),
            source_format=header["source_format"],
            source_path=header["source_path"],
            meta=header["meta"],
        )


def _write_member(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _attrs_to_json(attrs: dict[str, Any]) -> dict[str, Any]:
    return {key: _encode(value) for key, value in attrs.items()}


def _attrs_from_json(attrs: dict[str, Any]) -> dict[str, Any]:
    return {key: _decode(value) for key, value in attrs.items()}


# JSON knows lists and string-keyed objects only; IR attributes also hold tuples (kernel, pads,
# anchors), Activations and occasionally NumPy values. They are tagged so that loading rebuilds
# the same Python types at any nesting depth and attrs compare equal after a round trip.


def _encode(value: Any) -> Any:
    if isinstance(value, Activation):
        fields = [value.kind, value.alpha, value.lo, value.hi]
        # beta is written only when it is used, so files of networks without it keep their bytes.
        return {"__activation__": fields + [value.beta] if value.beta else fields}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__activation__" in value:
        # Files written before the table kinds had no beta (the fifth entry).
        return Activation(*value["__activation__"])
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    if "__dict__" in value:
        return {_decode(k): _decode(v) for k, v in value["__dict__"]}
    if "__array__" in value:
        return np.asarray(value["__array__"], dtype=value["dtype"])
    raise QuantizationError(f"unknown attribute encoding {sorted(value)} in a .dlq header")
