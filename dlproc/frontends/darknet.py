"""The Darknet front end: reads a Darknet ``.cfg`` (and optionally its ``.weights``) into the IR.

Shapes follow Darknet's own rules (``parser.c`` and the layer sources), in particular

* convolutional: ``pad=1`` means ``padding = size // 2``; output ``(h + 2*padding - size) // stride + 1``;
* maxpool: ``stride`` defaults to 1, ``size`` to ``stride``, ``padding`` to ``size - 1``; output
  ``(h + padding - size) // stride + 1``, windows start at ``-padding // 2`` (so tiny YOLO's
  size-2 stride-1 maxpool keeps 13x13);
* deconvolutional (pjreddie's parser): ``pad=1`` means ``padding = size // 2``; output
  ``(h - 1)*stride + size - 2*padding``; weights stored (c, n, size, size) like a ConvTranspose;
* avgpool is global; route with one layer is that layer's output, with several a channel concat.

Layers are named ``<type>_<index>`` with Darknet's layer index (the ``[net]`` section is not a
layer; the first section after it is layer 0). Batch normalization is folded into the conv or
connected layer with Darknet's formula ``(x - mean) / (sqrt(var) + 1e-6) * scale + bias``.
Without a ``.weights`` file the parameters are drawn from a fixed-seed generator (see
:data:`RANDOM_SEED`) so that shapes, statistics and the tool chain work on any cfg.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlproc.errors import ModelError
from dlproc.ir import Activation, Layer, Network, Shape

__all__ = ["load_darknet", "darknet_weight_count", "RANDOM_SEED", "SECTIONS"]

# Seed of numpy.random.default_rng for the parameters of a cfg loaded without .weights.
RANDOM_SEED = 0

# Section names Darknet accepts (with its aliases) mapped to the canonical name used here.
SECTIONS = {
    "net": "net", "network": "net",
    "convolutional": "convolutional", "conv": "convolutional",
    "deconvolutional": "deconvolutional", "deconv": "deconvolutional",
    "maxpool": "maxpool", "max": "maxpool",
    "avgpool": "avgpool", "avg": "avgpool",
    "connected": "connected", "conn": "connected",
    "softmax": "softmax", "soft": "softmax",
    "route": "route",
    "shortcut": "shortcut",
    "upsample": "upsample",
    "dropout": "dropout",
    "yolo": "yolo",
    "region": "region",
    "cost": "cost",
    "crop": "crop",
}

# The short names layers get (``conv_3``), as in Darknet's printed network table.
_LAYER_PREFIX = {
    "convolutional": "conv", "maxpool": "maxpool", "avgpool": "avgpool", "connected": "connected",
    "softmax": "softmax", "route": "route", "shortcut": "shortcut", "upsample": "upsample",
    "yolo": "yolo", "region": "region", "deconvolutional": "deconv",
}

# Keys each section may carry. Keys listed here but not interpreted only matter for training
# (Darknet reads them for its optimizer or data augmentation), so ignoring them is exact.
_TRAINING_KEYS = {"learning_rate", "stopbackward", "probability"}
_KEYS = {
    "convolutional": {"filters", "size", "stride", "pad", "padding", "groups", "activation",
                      "batch_normalize"} | _TRAINING_KEYS,
    "deconvolutional": {"filters", "size", "stride", "pad", "padding", "activation",
                        "batch_normalize"} | _TRAINING_KEYS,
    "maxpool": {"size", "stride", "padding"},
    "avgpool": set(),
    "connected": {"output", "activation", "batch_normalize"} | _TRAINING_KEYS,
    "softmax": {"groups", "temperature"},
    "route": {"layers"},
    "shortcut": {"from", "activation"},
    "upsample": {"stride", "scale"},
    "dropout": {"probability"},
    "cost": {"type", "scale", "ratio", "noobject_scale", "thresh"},
    "crop": {"crop_height", "crop_width", "flip", "angle", "saturation", "exposure", "noadjust",
             "shift"},
}

_ACTIVATIONS = {
    "linear": None,
    "relu": Activation("relu"),
    "leaky": Activation("leaky", alpha=0.1),
    "relu6": Activation("clip", lo=0.0, hi=6.0),
    "hardtan": Activation("clip", lo=-1.0, hi=1.0),
    # Table activations (the output stage's activation table): a separate ``act`` layer after the
    # layer that names them, which the compiler fuses back (docs/numerics.md 10a).
    "logistic": Activation("sigmoid"),
    "tanh": Activation("tanh"),
    "mish": Activation("mish"),
    "swish": Activation("silu"),
    "elu": Activation("elu", alpha=1.0),
    "selu": Activation("selu", alpha=1.6732, beta=1.0507),
    "gelu": Activation("gelu_tanh"),  # Darknet's gelu is the tanh approximation
    "softplus": Activation("softplus"),
}

# Darknet's batch-norm epsilon is added to the standard deviation, not the variance.
_BN_EPS = 1e-6


def load_darknet(cfg_path: str | Path, weights_path: str | Path | None = None,
                 input_size: tuple[int, int] | None = None) -> Network:
    """Import a Darknet network.

    ``weights_path`` is a Darknet ``.weights`` file; without it the parameters are random with
    the fixed seed :data:`RANDOM_SEED` (``net.meta["random_weights"]`` is then True).
    ``input_size`` (height, width) overrides the ``[net]`` section's height and width.
    """
    cfg_path = Path(cfg_path)
    sections = _parse_cfg(cfg_path)
    builder = _Builder(cfg_path, sections, input_size)
    builder.build()
    if weights_path is not None:
        _WeightsReader(Path(weights_path), builder.weighted).read()
    else:
        builder.randomize()
    builder.finish_params()
    return builder.network(weights_path)



def darknet_weight_count(cfg_path: str | Path, input_size: tuple[int, int] | None = None) -> int:
    """How many float32 values the ``.weights`` file of this cfg holds after its header (every
    conv and connected layer's biases, batch-norm statistics and weights, in file order): a
    version 0.2+ file is ``20 + 4 * count`` bytes."""
    cfg_path = Path(cfg_path)
    builder = _Builder(cfg_path, _parse_cfg(cfg_path), input_size)
    builder.build()
    return sum(count for entry in builder.weighted for _, count in entry.counts())

# -- cfg parsing --------------------------------------------------------------------------------


@dataclass
class _Section:
    kind: str  # canonical section name
    line: int
    options: dict[str, tuple[str, int]] = field(default_factory=dict)


def _parse_cfg(path: Path) -> list[_Section]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the Darknet cfg ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ModelError(f"{path}: not a text file, so not a Darknet cfg") from None
    sections: list[_Section] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            match = re.fullmatch(r"\[\s*([A-Za-z0-9_]+)\s*\]", line)
            name = match.group(1).lower() if match else None
            if name not in SECTIONS:
                known = ", ".join(f"[{s}]" for s in sorted(set(SECTIONS.values())))
                raise ModelError(f"{path}:{number}: unknown section {line}; supported sections: {known}")
            sections.append(_Section(SECTIONS[name], number))
            continue
        if "=" not in line:
            raise ModelError(f"{path}:{number}: expected 'key=value' or a [section], got {line!r}")
        if not sections:
            raise ModelError(f"{path}:{number}: option {line!r} before the first [section]")
        key, value = (part.strip() for part in line.split("=", 1))
        sections[-1].options[key.lower()] = (value, number)
    if not sections or sections[0].kind != "net":
        raise ModelError(f"{path}: a Darknet cfg must start with a [net] section")
    return sections


class _Options:
    """Typed access to one section's options, with file:line in every error."""

    def __init__(self, path: Path, section: _Section):
        self.path, self.section = path, section

    def where(self, key: str | None = None) -> str:
        line = self.section.options[key][1] if key in self.section.options else self.section.line
        return f"{self.path}:{line}: [{self.section.kind}]"

    def has(self, key: str) -> bool:
        return key in self.section.options

    def raw(self, key: str, default: str | None = None) -> str | None:
        return self.section.options[key][0] if key in self.section.options else default

    def int(self, key: str, default: int | None = None, minimum: int | None = None) -> int:
        text = self.raw(key)
        if text is None:
            if default is None:
                raise ModelError(f"{self.where()}: the key '{key}' is required")
            return default
        try:
            value = int(text)
        except ValueError:
            raise ModelError(f"{self.where(key)} {key}={text!r} is not an integer") from None
        if minimum is not None and value < minimum:
            raise ModelError(f"{self.where(key)} {key}={value} must be at least {minimum}")
        return value

    def float(self, key: str, default: float) -> float:
        text = self.raw(key)
        if text is None:
            return default
        try:
            return float(text)
        except ValueError:
            raise ModelError(f"{self.where(key)} {key}={text!r} is not a number") from None

    def ints(self, key: str) -> list[int]:
        text = self.raw(key)
        if text is None:
            raise ModelError(f"{self.where()}: the key '{key}' is required")
        try:
            return [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise ModelError(f"{self.where(key)} {key}={text!r} is not a comma-separated list of integers") from None

    def floats(self, key: str) -> list[float]:
        text = self.raw(key, "")
        try:
            return [float(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise ModelError(f"{self.where(key)} {key}={text!r} is not a comma-separated list of numbers") from None

    def activation(self, default: str) -> Activation | None:
        name = self.raw("activation", default).lower()
        if name not in _ACTIVATIONS:
            raise ModelError(f"{self.where('activation')} activation={name!r} is not supported; "
                             f"supported: {', '.join(_ACTIVATIONS)}"
                             + (" (Darknet's default when none is given is 'logistic')"
                                if not self.has("activation") else ""))
        return _ACTIVATIONS[name]

    def check_keys(self, allowed: set[str]) -> None:
        for key, (value, line) in self.section.options.items():
            if key not in allowed:
                raise ModelError(f"{self.path}:{line}: [{self.section.kind}] unknown or unsupported key "
                                 f"{key}={value!r}; supported keys: {', '.join(sorted(allowed)) or 'none'}")


# -- graph building -----------------------------------------------------------------------------


@dataclass
class _Weighted:
    """A layer whose parameters come from the .weights file, in file order."""

    layer: Layer
    kind: str  # "convolutional", "deconvolutional" or "connected"
    batch_normalize: bool
    shape: tuple[int, ...]  # of the weight: OIHW for conv, (outputs, inputs) for connected
    raw: dict[str, np.ndarray] = field(default_factory=dict)

    def counts(self) -> list[tuple[str, int]]:
        """The float arrays Darknet stores for this layer, in file order, with their sizes."""
        n = self.layer.shape.c
        weights = int(np.prod(self.shape))
        bn = [("scales", n), ("mean", n), ("variance", n)] if self.batch_normalize else []
        if self.kind in ("convolutional", "deconvolutional"):  # Darknet loads both the same way
            return [("biases", n)] + bn + [("weights", weights)]
        return [("biases", n), ("weights", weights)] + bn


class _Builder:
    def __init__(self, path: Path, sections: list[_Section], input_size):
        self.path = path
        self.net_options = _Options(path, sections[0])
        self.sections = sections[1:]
        self.input_size = input_size
        self.layers: list[Layer] = []
        # Darknet layer index -> the IR layer that holds its output (dropped layers alias their input).
        self.outputs_by_index: list[Layer] = []
        self.weighted: list[_Weighted] = []
        self.meta: dict = {}

    def build(self) -> None:
        self.layers.append(Layer("input", "input", [], self._input_shape(), origin=["net"]))
        handlers = {
            "convolutional": self._conv, "maxpool": self._maxpool, "avgpool": self._avgpool,
            "connected": self._connected, "softmax": self._softmax, "route": self._route,
            "shortcut": self._shortcut, "upsample": self._upsample, "dropout": self._passthrough,
            "cost": self._passthrough, "yolo": self._yolo, "region": self._region, "crop": self._crop,
            "deconvolutional": self._deconv,
        }
        for index, section in enumerate(self.sections):
            opts = _Options(self.path, section)
            if section.kind == "net":
                raise ModelError(f"{opts.where()}: a second [net] section")
            if section.kind in _KEYS:
                opts.check_keys(_KEYS[section.kind])
            layer = handlers[section.kind](index, opts)
            self.outputs_by_index.append(self._split_table_activation(layer))

    def _split_table_activation(self, layer: Layer) -> Layer:
        """A layer whose activation is a table kind (mish, logistic, swish, ...) keeps no activation
        and gets an ``act`` layer after it, which is what the section's index then refers to."""
        act = layer.attrs.get("activation")
        if act is None or not act.needs_table:
            return layer
        layer.attrs["activation"] = None
        out = Layer(f"{layer.name}_{act.kind}", "act", [layer.name], layer.shape, attrs={"activation": act},
                    origin=[f"{layer.origin[0]} activation={act.kind}"])
        self.layers.append(out)
        return out

    def _input_shape(self) -> Shape:
        opts = self.net_options
        h, w = opts.int("height", 0), opts.int("width", 0)
        c = opts.int("channels", 0, minimum=1) if opts.has("channels") else 0
        if self.input_size is not None:
            h, w = (int(v) for v in self.input_size)
        if h < 1 or w < 1 or c < 1:
            raise ModelError(f"{opts.where()}: height, width and channels must be given and positive "
                             f"(got {h}x{w}x{c}); an input size can also be given (--input-size H,W)")
        return Shape(c, h, w)

    # -- helpers

    @property
    def previous(self) -> Layer:
        return self.outputs_by_index[-1] if self.outputs_by_index else self.layers[0]

    def _add(self, index: int, kind: str, op: str, inputs: list[Layer], shape: Shape, opts: _Options,
             attrs: dict | None = None) -> Layer:
        if shape.c < 1 or shape.h < 1 or shape.w < 1:
            raise ModelError(f"{opts.where()}: layer {index} would have an empty output "
                             f"{shape.h}x{shape.w}x{shape.c} (its input is {inputs[0].shape})")
        name = f"{_LAYER_PREFIX[kind]}_{index}"
        layer = Layer(name, op, [src.name for src in inputs], shape, attrs=attrs or {},
                      origin=[f"{kind} (layer {index}, {self.path.name}:{opts.section.line})"])
        self.layers.append(layer)
        return layer

    def _reference(self, index: int, ref: int, opts: _Options, key: str) -> Layer:
        """Darknet's layer reference: negative is relative to this layer, positive absolute."""
        target = index + ref if ref < 0 else ref
        if not 0 <= target < index:
            raise ModelError(f"{opts.where(key)} {key} refers to layer {target}, but layer {index} can only "
                             f"read layers 0..{index - 1}")
        return self.outputs_by_index[target]

    # -- sections

    def _conv(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        filters = opts.int("filters", 1, minimum=1)
        size = opts.int("size", 1, minimum=1)
        stride = opts.int("stride", 1, minimum=1)
        padding = opts.int("padding", 0, minimum=0)
        if opts.int("pad", 0):
            padding = size // 2
        groups = opts.int("groups", 1, minimum=1)
        if src.shape.c % groups or filters % groups:
            raise ModelError(f"{opts.where('groups')} groups={groups} must divide the input channels "
                             f"({src.shape.c}) and filters ({filters})")
        ho = (src.shape.h + 2 * padding - size) // stride + 1
        wo = (src.shape.w + 2 * padding - size) // stride + 1
        layer = self._add(index, "convolutional", "conv", [src], Shape(filters, ho, wo), opts, attrs={
            "kernel": (size, size), "stride": (stride, stride),
            "pads": (padding, padding, padding, padding), "dilation": (1, 1), "groups": groups,
            "activation": opts.activation("logistic"),
        })
        self._weighted(layer, "convolutional", opts, (filters, src.shape.c // groups, size, size))
        return layer

    def _deconv(self, index: int, opts: _Options) -> Layer:
        """[deconvolutional] -> ``convtranspose`` (ONNX ConvTranspose with pads = padding, no output_padding)."""
        src = self.previous
        filters = opts.int("filters", 1, minimum=1)
        size = opts.int("size", 1, minimum=1)
        stride = opts.int("stride", 1, minimum=1)
        padding = opts.int("padding", 0, minimum=0)
        if opts.int("pad", 0):
            padding = size // 2
        ho = (src.shape.h - 1) * stride + size - 2 * padding
        wo = (src.shape.w - 1) * stride + size - 2 * padding
        layer = self._add(index, "deconvolutional", "convtranspose", [src], Shape(filters, ho, wo), opts, attrs={
            "kernel": (size, size), "stride": (stride, stride), "pads": (padding,) * 4, "output_padding": (0, 0),
            "dilation": (1, 1), "groups": 1, "activation": opts.activation("logistic"),
        })
        self._weighted(layer, "deconvolutional", opts, (filters, src.shape.c, size, size))
        return layer

    def _weighted(self, layer: Layer, kind: str, opts: _Options, shape: tuple[int, ...]) -> None:
        self.weighted.append(_Weighted(layer, kind, bool(opts.int("batch_normalize", 0)), shape))

    def _maxpool(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        stride = opts.int("stride", 1, minimum=1)
        size = opts.int("size", stride, minimum=1)
        padding = opts.int("padding", size - 1, minimum=0)
        ho = (src.shape.h + padding - size) // stride + 1
        wo = (src.shape.w + padding - size) // stride + 1
        # Darknet starts the windows at -padding/2; positions outside the input never win the max.
        begin, end = padding // 2, padding - padding // 2
        return self._add(index, "maxpool", "maxpool", [src], Shape(src.shape.c, ho, wo), opts, attrs={
            "kernel": (size, size), "stride": (stride, stride), "pads": (begin, begin, end, end),
        })

    def _avgpool(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        return self._add(index, "avgpool", "global_avgpool", [src], Shape(src.shape.c, 1, 1), opts)

    def _connected(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        outputs = opts.int("output", 1, minimum=1)
        layer = self._add(index, "connected", "fc", [src], Shape(outputs, 1, 1), opts,
                          attrs={"activation": opts.activation("logistic")})
        self._weighted(layer, "connected", opts, (outputs, src.shape.size))
        return layer

    def _softmax(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        if opts.int("groups", 1) != 1:
            raise ModelError(f"{opts.where('groups')} groups={opts.raw('groups')} is not supported (only 1)")
        if opts.float("temperature", 1.0) != 1.0:
            raise ModelError(f"{opts.where('temperature')} temperature={opts.raw('temperature')} is not supported (only 1)")
        if src.shape.h * src.shape.w != 1:
            raise ModelError(f"{opts.where()}: softmax over a {src.shape} map is not supported; Darknet "
                             "normalizes all values at once, the IR softmax normalizes channels of a 1x1 map")
        return self._add(index, "softmax", "softmax", [src], src.shape, opts)

    def _route(self, index: int, opts: _Options) -> Layer:
        refs = opts.ints("layers")
        if not refs:
            raise ModelError(f"{opts.where('layers')} layers= lists no layer")
        sources = [self._reference(index, ref, opts, "layers") for ref in refs]
        if len(sources) == 1:
            # A route of one layer just re-reads that layer's output; no IR layer is needed.
            return sources[0]
        if len({(s.shape.h, s.shape.w) for s in sources}) != 1:
            raise ModelError(f"{opts.where('layers')} routed layers differ in size: "
                             + ", ".join(f"{s.name} {s.shape}" for s in sources))
        shape = Shape(sum(s.shape.c for s in sources), sources[0].shape.h, sources[0].shape.w)
        return self._add(index, "route", "concat", sources, shape, opts)

    def _shortcut(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        other = self._reference(index, opts.int("from"), opts, "from")
        for key in ("alpha", "beta"):
            if opts.has(key):
                raise ModelError(f"{opts.where(key)} {key}= is not supported (Darknet's default 1 only)")
        if other.shape != src.shape:
            other = self._shortcut_resample(index, other, src, opts)
        return self._add(index, "shortcut", "add", [src, other], src.shape, opts,
                         attrs={"activation": opts.activation("linear")})

    def _shortcut_resample(self, index: int, other: Layer, src: Layer, opts: _Options) -> Layer:
        """Darknet's shortcut between different shapes, as an explicit 1x1 conv.

        Darknet (``shortcut_cpu``) then reads the ``from`` layer every ``stride`` pixels and adds
        its first min(C_from, C_out) channels, leaving the other output channels as they are. A
        1x1 convolution with that stride and 0/1 weights selecting those channels computes exactly
        that operand, so the shortcut becomes this conv followed by an ordinary add. (Darknet's
        published operation counts do not include this conv.)
        """
        stride = other.shape.w // src.shape.w
        if (stride < 1 or other.shape.h // src.shape.h != stride
                or (other.shape.h - 1) // stride + 1 != src.shape.h
                or (other.shape.w - 1) // stride + 1 != src.shape.w):
            raise ModelError(f"{opts.where('from')} shortcut adds {other.name} {other.shape} to "
                             f"{src.name} {src.shape}; only equal shapes or a 'from' layer larger by an "
                             "integer stride are supported")
        weight = np.zeros((src.shape.c, other.shape.c, 1, 1), np.float32)
        channels = min(src.shape.c, other.shape.c)
        weight[np.arange(channels), np.arange(channels), 0, 0] = 1.0
        layer = Layer(
            f"shortcut_{index}_resample", "conv", [other.name], src.shape,
            attrs={"kernel": (1, 1), "stride": (stride, stride), "pads": (0, 0, 0, 0),
                   "dilation": (1, 1), "groups": 1, "activation": None},
            params={"weight": weight, "bias": np.zeros(src.shape.c, np.float32)},
            origin=[f"shortcut (layer {index}, {self.path.name}:{opts.section.line}) stride/channel resampling"],
        )
        self.layers.append(layer)
        return layer

    def _upsample(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        stride = opts.int("stride", 2)
        if stride < 1:
            raise ModelError(f"{opts.where('stride')} stride={stride}: downsampling upsample layers are not supported")
        if opts.float("scale", 1.0) != 1.0:
            raise ModelError(f"{opts.where('scale')} scale={opts.raw('scale')} is not supported (only 1)")
        shape = Shape(src.shape.c, src.shape.h * stride, src.shape.w * stride)
        return self._add(index, "upsample", "upsample", [src], shape, opts, attrs={"scale": stride})

    def _passthrough(self, index: int, opts: _Options) -> Layer:
        # Dropout is the identity at inference and cost only computes a training loss, so both
        # keep their index (later references count them) but add no layer.
        if opts.section.kind == "cost":
            self.meta.setdefault("dropped", []).append(f"cost (layer {index})")
        return self.previous

    def _crop(self, index: int, opts: _Options) -> Layer:
        if index != 0:
            raise ModelError(f"{opts.where()}: a crop layer is supported only as the first layer (it is "
                             "treated as input preprocessing)")
        height = opts.int("crop_height", 1, minimum=1)
        width = opts.int("crop_width", 1, minimum=1)
        source = self.layers[0].shape
        if height > source.h or width > source.w:
            raise ModelError(f"{opts.where()}: crop {height}x{width} is larger than the input {source.h}x{source.w}")
        adjust = not opts.int("noadjust", 0)
        # At test time Darknet's crop takes the centre and maps pixels x -> 2x - 1 (unless
        # noadjust). That is preprocessing, so the network input becomes the cropped image and
        # the transform is recorded for whoever feeds the network.
        self.meta["preprocess"] = {"center_crop": (height, width), "from_size": (source.h, source.w),
                                   "scale": 2.0 if adjust else 1.0, "shift": -1.0 if adjust else 0.0}
        self.layers[0] = Layer("input", "input", [], Shape(source.c, height, width), origin=["net", "crop (layer 0)"])
        return self.layers[0]

    def _yolo(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        classes = opts.int("classes", 20, minimum=1)
        num = opts.int("num", 1, minimum=1)
        mask = opts.ints("mask") if opts.has("mask") else list(range(num))
        anchors = self._anchors(opts, num)
        if src.shape.c != len(mask) * (classes + 5):
            raise ModelError(f"{opts.where()}: its input has {src.shape.c} channels, but {len(mask)} masked "
                             f"anchors x ({classes} classes + 5) = {len(mask) * (classes + 5)} are needed")
        return self._add(index, "yolo", "yolo", [src], src.shape, opts, attrs={
            "anchors": anchors, "mask": mask, "classes": classes, "num": num, "options": self._all(opts),
        })

    def _region(self, index: int, opts: _Options) -> Layer:
        src = self.previous
        classes = opts.int("classes", 20, minimum=1)
        num = opts.int("num", 1, minimum=1)
        coords = opts.int("coords", 4, minimum=1)
        if src.shape.c != num * (coords + 1 + classes):
            raise ModelError(f"{opts.where()}: its input has {src.shape.c} channels, but num {num} x (coords "
                             f"{coords} + 1 + classes {classes}) = {num * (coords + 1 + classes)} are needed")
        return self._add(index, "region", "region", [src], src.shape, opts, attrs={
            "anchors": self._anchors(opts, num), "classes": classes, "num": num, "coords": coords,
            "options": self._all(opts),
        })

    def _anchors(self, opts: _Options, num: int) -> list[tuple[float, float]]:
        values = opts.floats("anchors")
        if len(values) != 2 * num and values:
            raise ModelError(f"{opts.where('anchors')} {len(values)} anchor values given, {2 * num} expected "
                             f"(num={num} width/height pairs)")
        return [(values[2 * i], values[2 * i + 1]) for i in range(len(values) // 2)]

    @staticmethod
    def _all(opts: _Options) -> dict[str, str]:
        # Detection heads run in software; keep every option for its decoder (thresholds etc.).
        return {key: value for key, (value, _) in opts.section.options.items()}

    # -- parameters

    def randomize(self) -> None:
        rng = np.random.default_rng(RANDOM_SEED)
        for entry in self.weighted:
            fan_in = int(np.prod(entry.shape[1:]))
            # He-normal weights keep activations of deep random networks in a sane range.
            weight = rng.standard_normal(entry.shape, dtype=np.float32)
            weight *= np.float32(np.sqrt(2.0 / fan_in))
            entry.raw = {"weights": weight,
                         "biases": np.float32(0.01) * rng.standard_normal(entry.shape[0], dtype=np.float32)}
            entry.batch_normalize = False
        self.meta["random_weights"] = True
        self.meta["random_seed"] = RANDOM_SEED

    def finish_params(self) -> None:
        for entry in self.weighted:
            weight = entry.raw["weights"].reshape(entry.shape)
            if entry.kind == "deconvolutional":
                # The file holds (c, n, size, size) (Darknet's deconv gemm reads the weights transposed);
                # the IR wants output channels first.
                n, c = entry.shape[:2]
                weight = entry.raw["weights"].reshape((c, n) + entry.shape[2:]).transpose(1, 0, 2, 3)
            bias = entry.raw["biases"]
            if entry.batch_normalize:
                # Fold in float64 so that the float32 result is the correctly rounded product.
                factor = entry.raw["scales"] / (np.sqrt(entry.raw["variance"].astype(np.float64)) + _BN_EPS)
                weight = weight * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
                bias = bias - entry.raw["mean"] * factor
                entry.layer.origin.append("batch_normalize (folded)")
            entry.layer.params = {"weight": weight.astype(np.float32, copy=False),
                                  "bias": bias.astype(np.float32, copy=False)}

    def network(self, weights_path) -> Network:
        outputs = [layer.name for layer in self.layers if layer.op in ("yolo", "region")]
        last = self.previous
        if last.name not in outputs and last.op not in ("yolo", "region"):
            outputs.append(last.name)
        self.meta["weights"] = str(weights_path) if weights_path is not None else None
        net = Network(name=self.path.stem, layers=self.layers, inputs=["input"], outputs=outputs,
                      source_format="darknet", source_path=str(self.path), meta=self.meta)
        net.validate()
        return net


# -- .weights -----------------------------------------------------------------------------------


class _WeightsReader:
    """Darknet's .weights: a header, then each conv/connected layer's float32 arrays in order."""

    def __init__(self, path: Path, weighted: list[_Weighted]):
        self.path, self.weighted = path, weighted

    def read(self) -> None:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ModelError(f"{self.path}: cannot read the Darknet weights ({exc.strerror or exc})") from None
        if len(data) < 16:
            raise ModelError(f"{self.path}: {len(data)} bytes is too short for a Darknet weights header")
        major, minor, revision = (int(v) for v in np.frombuffer(data, "<i4", 3))
        # Darknet stores the "seen" counter as size_t from version 0.2 on, as int before.
        wide_seen = (major * 10 + minor) >= 2 and major < 1000 and minor < 1000
        header = 12 + (8 if wide_seen else 4)
        transpose = major > 1000 or minor > 1000
        floats = sum(count for entry in self.weighted for _, count in entry.counts())
        expected = header + 4 * floats
        if len(data) != expected:
            raise ModelError(
                f"{self.path}: expected {expected} bytes ({header}-byte header of version {major}.{minor}."
                f"{revision} + {floats} float32 parameters of {len(self.weighted)} conv/connected layers), "
                f"but the file has {len(data)} bytes; does it belong to this cfg?"
            )
        values = np.frombuffer(data, "<f4", floats, header)
        offset = 0
        for entry in self.weighted:
            for name, count in entry.counts():
                entry.raw[name] = values[offset:offset + count].copy()
                offset += count
            if transpose and entry.kind == "connected":
                # Files written with a transposed flag store connected weights as (inputs, outputs).
                outputs, inputs = entry.shape
                entry.raw["weights"] = entry.raw["weights"].reshape(inputs, outputs).T.copy()
