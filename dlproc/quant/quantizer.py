"""``Quantizer``: dlproc's ``dlquantizer`` — calibrate, quantize and validate an IR network.

    q = Quantizer(network)                  # an ir.Network or a model file path
    print(q.calibrate(data))                # ranges of weights, biases and activations
    qnet = q.quantize()                     # QuantizedNetwork (int8), qnet.save("net.dlq")
    print(q.validate(val_data))             # float vs quantized metric and learnable memory
    print(q.layer_errors(val_data))         # where the int8 network drifts from the float one

The quantization scheme (docs/quantizer.md, arithmetic in docs/numerics.md):

* weights int8 symmetric per output channel, bias int32 at scale s_in * s_w;
* every activation tensor int8 per tensor: a tensor whose calibrated minimum is >= 0 (post-ReLU,
  images in [0, 1]) uses zero point -128 and scale max / 255, so all 256 codes cover [0, max];
  a signed tensor uses zero point 0 and scale max(|min|, |max|) / 127;
* max pooling and nearest upsampling keep their input's scale and zero point (they only move
  codes around); every other layer requantizes to its own calibrated output range, except that
  a concat and the producers of its inputs share one scale (the union of their ranges);
* softmax, yolo and region run in float32 in software -- except softmax when the quantizer is given
  a processor configuration with the softmax block (``Quantizer(net, config=cfg)`` with
  fc.SoftmaxBlockGeneration on): then the softmax layer is int8 (output scale 1/256, zero point
  -128, its exp table ``ops.softmax_exp_table(s_in)`` in ``params["exp_table"]``), run by the
  hardware's SMXTAB/SOFTMAX and by ``run_int8`` with ``ops.softmax_int8``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from dlproc.errors import QuantizationError
from dlproc.targets.golden import ops
from dlproc.targets.golden.run import run_float, run_int8
from dlproc import progress
from dlproc.ir import Layer, Network
from dlproc.hardware.numerics import INT8_MIN, MULT_BITS
from dlproc.quant.calibrate import METHODS, RangeCollector
from dlproc.quant.data import Dataset, load_data, resolve_model
from dlproc.quant.qnet import SOFTWARE_OPS, QLayer, QuantizedNetwork
from dlproc.quant.report import (
    CalibrationRow,
    CalibrationTable,
    LayerErrorRow,
    LayerErrorTable,
    ValidationRow,
    ValidationTable,
)

__all__ = ["Quantizer", "choose_qparams", "fill_hardware_params", "top1_accuracy", "BATCH"]

#: Samples per forward pass while calibrating and validating (bounds the memory of collected
#: activations; results do not depend on it).
BATCH = 16

# Ops whose output keeps the input's scale and zero point.
_PASSTHROUGH_OPS = ("maxpool", "upsample", "channels")

#: Output quantization of the int8 softmax (probabilities 0..1 in 256 steps: docs/numerics.md section 10).
SOFTMAX_OUT_SCALE, SOFTMAX_OUT_ZP = 1.0 / 256.0, -128


def _has_softmax_block(config: Any) -> bool:
    if config is None:
        return False
    from dlproc.hardware.isa import HardwareParams, Opcode

    try:
        return HardwareParams.from_config(config).has_block(Opcode.SOFTMAX)
    except Exception:  # a configuration the hardware cannot be derived from has no blocks
        return False


def choose_qparams(lo: float, hi: float) -> tuple[float, int]:
    """Scale and zero point of an activation tensor with calibrated range [lo, hi].

    Non-negative tensors (lo >= 0): zero point -128, scale hi / 255. Others: zero point 0,
    scale max(|lo|, |hi|) / 127. Zero is always exactly representable. An all-zero tensor gets
    scale 1 (any scale represents it).
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise QuantizationError(f"activation range [{lo}, {hi}] is not finite")
    if lo >= 0:
        return (hi / 255.0 if hi > 0 else 1.0), INT8_MIN
    peak = max(-lo, hi)
    return peak / 127.0, 0


def top1_accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of samples whose largest output is the label (the default metric)."""
    scores = np.asarray(outputs).reshape(len(labels), -1)
    return float(np.mean(scores.argmax(axis=1) == np.asarray(labels)))


def _batches(x: np.ndarray, size: int = BATCH) -> Iterator[np.ndarray]:
    for start in range(0, x.shape[0], size):
        yield x[start : start + size]


class Quantizer:
    """Calibrates, quantizes and validates one network (like MATLAB's ``dlquantizer``)."""

    def __init__(self, network: Network | str | Path, config: Any = None):
        #: softmax layers become int8 (the softmax block's arithmetic) when the configuration has the block
        self.int8_softmax = _has_softmax_block(config)
        if not isinstance(network, Network):
            from dlproc.frontends import load_network

            network = load_network(resolve_model(network))
        self.network = network
        self.calibration: CalibrationTable | None = None
        self.method: str | None = None
        self.qnet: QuantizedNetwork | None = None
        self._ranges: dict[str, tuple[float, float]] = {}
        self._shared: dict[str, tuple[float, int]] = {}
        if len(network.inputs) != 1:
            raise QuantizationError(
                f"network {network.name!r} has {len(network.inputs)} inputs; the quantizer handles one"
            )
        self._check_weights()

    # -- checks ---------------------------------------------------------------------------------

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return self.network[self.network.inputs[0]].shape.as_tuple()

    def _check_weights(self) -> None:
        for layer in self.network:
            for pname, value in layer.params.items():
                arr = np.asarray(value)
                if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
                    n_nan = int(np.isnan(arr).sum())
                    raise QuantizationError(
                        f"layer {layer.name!r}: {pname} contains {n_nan} NaN and "
                        f"{int((~np.isfinite(arr)).sum()) - n_nan} Inf value(s); weights must be finite"
                    )

    def _data(self, data: Any, layout: str, labels: Any = None) -> Dataset:
        return load_data(data, self.input_shape, layout=layout, labels=labels)

    # -- calibration ----------------------------------------------------------------------------

    def calibrate(
        self, data: Any, method: str = "minmax", percentile: float = 99.99, layout: str = "NCHW"
    ) -> CalibrationTable:
        """Run the float network on ``data`` and record every learnable's and activation's range.

        ``data``: a float32 array (``layout`` "NCHW" or "NHWC"), a Dataset, a ``.npy`` file, an
        image folder or a built-in data set name (see :func:`dlproc.quant.data.load_data`).
        ``method``: "minmax", "percentile" (with ``percentile``) or "entropy"; the method
        shapes the activation ranges, learnables always report their exact min and max.
        """
        if method not in METHODS:
            raise QuantizationError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
        if method == "percentile" and not 50.0 < percentile <= 100.0:
            raise QuantizationError(f"percentile must be in (50, 100], got {percentile}")
        ds = self._data(data, layout)
        collectors = {layer.name: RangeCollector() for layer in self.network}
        batches = -(-ds.x.shape[0] // BATCH)
        passes = 1 if method == "minmax" else 2
        what = f"calibrating {self.network.name} on {ds.x.shape[0]} samples"
        for batch in progress.track(_batches(ds.x), f"{what}, ranges (pass 1/{passes})", batches, "batch"):
            for name, value in self._float_activations(batch).items():
                collectors[name].update_minmax(value)
        if method != "minmax":
            for c in collectors.values():
                c.start_histogram(method)
            for batch in progress.track(_batches(ds.x), f"{what}, {method} histograms (pass 2/2)", batches, "batch"):
                for name, value in self._float_activations(batch).items():
                    collectors[name].update_histogram(value, method)
        self._ranges = {name: c.result(method, percentile) for name, c in collectors.items()}
        self.method = method
        self.qnet = None
        self.calibration = self._calibration_table()
        return self.calibration

    def _float_activations(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        values = run_float(self.network, batch, collect=True)
        for name, value in values.items():
            if not np.all(np.isfinite(value)):
                raise QuantizationError(
                    f"layer {name!r} produced NaN or Inf on the calibration data; the float network "
                    "overflows or the data is out of range"
                )
        return values

    def _calibration_table(self) -> CalibrationTable:
        rows = []
        for layer in self.network:
            source = layer.origin[0] if layer.origin else layer.name
            for pname, kind in (("weight", "Weights"), ("bias", "Bias")):
                if layer.params.get(pname) is not None:
                    arr = layer.params[pname]
                    rows.append(CalibrationRow(layer.name, source, kind, float(arr.min()), float(arr.max())))
            lo, hi = self._ranges[layer.name]
            rows.append(CalibrationRow(layer.name, source, "Activations", float(lo), float(hi)))
        return CalibrationTable(rows, title=f"Calibration ({self.method}) of {self.network.name}")

    # -- quantization ---------------------------------------------------------------------------

    def quantize(self, share_concat_scales: bool = True) -> QuantizedNetwork:
        """Quantize the calibrated network (see the module docstring for the scheme).

        With ``share_concat_scales`` (the default) every concat and the layers producing its
        inputs get one common scale, so the hardware concatenates for free by storing each
        branch into its channel slice; otherwise each concat input of another scale is rescaled.
        """
        if self.calibration is None:
            raise QuantizationError("quantize() needs calibration first: call calibrate(data)")
        self._shared = self._concat_scale_groups() if share_concat_scales else {}
        #: what the quantization changed to make the network representable (printed by the CLI)
        self.notes: list[str] = []
        qlayers: dict[str, QLayer] = {}
        for layer in self.network:
            try:
                qlayers[layer.name] = self._quantize_layer(layer, qlayers)
            except (ValueError, QuantizationError) as exc:
                raise QuantizationError(f"layer {layer.name!r} ({layer.op}): {exc}") from None
        net = self.network
        self.qnet = QuantizedNetwork(
            name=net.name,
            layers=list(qlayers.values()),
            inputs=list(net.inputs),
            outputs=list(net.outputs),
            source_format=net.source_format,
            source_path=net.source_path,
            meta={"calibration_method": self.method, "share_concat_scales": share_concat_scales,
                  "notes": list(self.notes)},
        )
        return self.qnet

    def _scale_owner(self, name: str) -> str:
        """The layer whose scale ``name``'s output carries (max pools and upsamples pass it on)."""
        layer = self.network[name]
        while layer.op in _PASSTHROUGH_OPS:
            layer = self.network[layer.inputs[0]]
        return layer.name

    def _concat_scale_groups(self) -> dict[str, tuple[float, int]]:
        """Shared (scale, zero point) of every concat and the layers that own its inputs' scales.

        Concats that share a producer (directly or through another concat) end up in one group
        (union-find); the group's range is the union of its members' calibrated ranges.
        """
        parent: dict[str, str] = {}

        def find(a: str) -> str:
            parent.setdefault(a, a)
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        for layer in self.network:
            if layer.op == "concat":
                for src in layer.inputs:
                    parent[find(self._scale_owner(src))] = find(layer.name)
        groups: dict[str, list[str]] = {}
        for name in parent:
            groups.setdefault(find(name), []).append(name)
        shared: dict[str, tuple[float, int]] = {}
        for members in groups.values():
            lo = min(self._ranges[m][0] for m in members)
            hi = max(self._ranges[m][1] for m in members)
            qparams = choose_qparams(lo, hi)
            shared.update({m: qparams for m in members})
        return shared

    def _quantize_layer(self, layer: Layer, done: dict[str, QLayer]) -> QLayer:
        srcs = [done[name] for name in layer.inputs]
        if layer.op in _PASSTHROUGH_OPS:
            scale, zp = srcs[0].scale, srcs[0].zero_point
        elif layer.name in self._shared:
            scale, zp = self._shared[layer.name]
        elif layer.op == "concat" and len({(s.scale, s.zero_point) for s in srcs}) == 1:
            # All inputs already agree: keep their scale and no input needs rescaling.
            scale, zp = srcs[0].scale, srcs[0].zero_point
        else:
            scale, zp = choose_qparams(*self._ranges[layer.name])
        int8_softmax = layer.op == "softmax" and self.int8_softmax
        if int8_softmax:
            scale, zp = SOFTMAX_OUT_SCALE, SOFTMAX_OUT_ZP
        q = QLayer(
            name=layer.name,
            op=layer.op,
            inputs=list(layer.inputs),
            shape=layer.shape,
            scale=float(scale),
            zero_point=int(zp),
            hardware=layer.op not in SOFTWARE_OPS or int8_softmax,
            attrs=dict(layer.attrs),
            origin=list(layer.origin),
            tensor=layer.tensor,
        )
        builder = _BUILDERS.get(layer.op)
        if builder is not None and q.hardware:
            builder(self, layer, q, srcs)
        return q

    def _conv_fc(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        s_in = srcs[0].scale
        w_q, s_w = ops.quantize_weights(layer.weight)
        bias = layer.bias if layer.bias is not None else np.zeros(w_q.shape[0], np.float32)
        safe = ops.bias_safe_weight_scale(bias, s_in, s_w)
        raised = np.flatnonzero(safe > s_w)
        if raised.size:
            # A channel whose weights are tiny next to its bias: its weight scale is raised so that
            # the quantized bias fits int32 (see ops.bias_safe_weight_scale), and the report says so.
            w_q, s_w = ops.quantize_weights_with_scale(layer.weight, safe), safe
            k = int(raised[0])
            self.notes.append(
                f"layer {layer.name!r}: the weight scale of {raised.size} output channel(s) ({raised.tolist()[:8]}"
                f"{', ...' if raised.size > 8 else ''}) was raised so that the quantized bias fits int32 "
                f"(channel {k}: bias {float(bias[k]):.3g} against weights of at most "
                f"{float(np.abs(np.asarray(layer.weight)[k]).max()):.3g}; scale {float(safe[k]):.3g})")
        b_q = ops.quantize_bias(bias, s_in, s_w)
        rq = ops.requant_params(s_in, s_w, q.scale, q.zero_point, layer.activation)
        q.params.update(
            weight=w_q,
            weight_scale=np.asarray(s_w, dtype=np.float32),
            bias=b_q.astype(np.int32),
            mult=rq.mult.astype(np.int32),
            mult_neg=rq.mult_neg.astype(np.int32),
            shift=rq.shift.astype(np.int32),
        )
        q.act_min, q.act_max = rq.act_min, rq.act_max

    def _softmax(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        """int8 softmax (softmax block): the exp table of the input scale (docs/numerics.md section 10)."""
        axis = int(layer.attrs.get("axis", 1))
        if axis not in (1, -3):
            raise QuantizationError(f"the softmax block works over channels (axis 1), got axis {axis}")
        q.params["exp_table"] = ops.softmax_exp_table(srcs[0].scale).astype(np.int32)

    def _act(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        act = layer.activation
        if act is not None and act.needs_table:
            # Any other unary function: the 256-entry table from the input's codes to the output's
            # (exact at int8); the compiler fuses it into the layer in front where it can.
            q.params["act_table"] = ops.activation_table(act, srcs[0].scale, srcs[0].zero_point, q.scale,
                                                         q.zero_point)
            return
        mult, shift = ops.rescale_params(srcs[0].scale, q.scale)
        mult_neg = mult
        if act is not None and act.kind == "leaky":
            mult_neg = int(math.floor(act.alpha * mult + 0.5))
            if not 0 <= mult_neg < 2**MULT_BITS:
                raise QuantizationError(
                    f"leaky ReLU slope {act.alpha} needs a negative multiplier outside 0..2**{MULT_BITS}-1"
                )
        q.q.update(mult=int(mult), shift=int(shift), mult_neg=int(mult_neg))
        q.act_min, q.act_max = ops.activation_bounds(act, q.scale, q.zero_point)

    def _avgpool(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        a = layer.attrs
        in_shape = self.network[layer.inputs[0]].shape
        mult, shift = ops.avgpool_multipliers(
            srcs[0].scale, q.scale, (in_shape.h, in_shape.w), a["kernel"], a.get("stride", 1),
            a.get("pads", 0), bool(a.get("count_include_pad", False)),
        )
        if np.ndim(mult) == 0:
            q.q.update(mult=int(mult), shift=int(shift))
        else:  # per-window divisors; the compiler must run this layer another way (see docs)
            q.params.update(mult=np.asarray(mult, np.int32), shift=np.asarray(shift, np.int32))

    def _global_avgpool(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        in_shape = self.network[layer.inputs[0]].shape
        mult, shift = ops.pool_multiplier(srcs[0].scale, q.scale, in_shape.h * in_shape.w)
        q.q.update(mult=int(mult), shift=int(shift))

    def _add(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        ma, mb, shift = ops.add_params(srcs[0].scale, srcs[1].scale, q.scale)
        q.q.update(ma=int(ma), mb=int(mb), shift=int(shift))
        q.act_min, q.act_max = ops.activation_bounds(layer.activation, q.scale, q.zero_point)
        if layer.activation is not None and layer.activation.kind == "leaky":
            raise QuantizationError("a leaky ReLU fused into an add is not supported by the hardware add")

    def _mul(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        mult, shift = ops.mul_params(srcs[0].scale, srcs[1].scale, q.scale)
        q.q.update(mult=int(mult), shift=int(shift))
        q.act_min, q.act_max = ops.activation_bounds(layer.activation, q.scale, q.zero_point)
        if layer.activation is not None and layer.activation.kind == "leaky":
            raise QuantizationError("a leaky ReLU fused into a multiply is not supported by the hardware multiply")

    def _concat(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        rescale: list[list[int] | None] = []
        for src in srcs:
            if (src.scale, src.zero_point) == (q.scale, q.zero_point):
                rescale.append(None)
            else:
                mult, shift = ops.rescale_params(src.scale, q.scale)
                rescale.append([int(mult), int(shift)])
        q.q["rescale"] = rescale

    def _lrn(self, layer: Layer, q: QLayer, srcs: list[QLayer]) -> None:
        a = layer.attrs
        p = ops.lrn_params(
            int(a["size"]), float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)),
            float(a.get("bias", 1.0)), srcs[0].scale, q.scale,
        )
        q.params["lrn_mult"] = np.asarray(p.mult)
        q.params["lrn_shift"] = np.asarray(p.shift)

    # -- validation -----------------------------------------------------------------------------

    def validate(
        self,
        data: Any,
        labels: Any = None,
        metric: Callable[[np.ndarray, np.ndarray], float] | None = None,
        layout: str = "NCHW",
        metric_name: str | None = None,
    ) -> ValidationTable:
        """Compare the float and the quantized network on ``data`` (quantizing first if needed).

        ``metric(outputs, labels) -> float`` gets the network output of all samples (float32,
        N x C x H x W; software layers included, int8 outputs dequantized), or the list of them
        for a network with several outputs. The default metric is top-1 accuracy of the first
        output against the labels (from ``labels``, an image folder or a built-in set).
        The float reference is ONNX Runtime for ONNX networks and :func:`run_float` otherwise.
        """
        ds = self._data(data, layout, labels)
        y = ds.y
        if metric is None:
            if y is None:
                raise QuantizationError(
                    "validate() with the default top-1 metric needs labels (give labels=..., an "
                    "image folder or a labelled built-in data set)"
                )
            metric, metric_name = top1_accuracy, metric_name or "top-1 accuracy"
        metric_name = metric_name or getattr(metric, "__name__", "metric")
        if self.qnet is None:
            self.quantize()
        assert self.qnet is not None
        # A single-output network's metric gets that output, a multi-output one the list.
        float_out: Any = self.float_reference(ds.x)
        quant_out: Any = self.quantized_outputs(ds.x)
        if metric is top1_accuracy or len(float_out) == 1:
            float_out, quant_out = float_out[0], quant_out[0]
        rows = [
            ValidationRow("floating point", metric_name, float(metric(float_out, y)), self.float_learnable_bytes()),
            ValidationRow("quantized", metric_name, float(metric(quant_out, y)), self.qnet.learnable_bytes()),
        ]
        return ValidationTable(rows, title=f"Validation of {self.network.name} ({len(ds)} samples)")

    def float_learnable_bytes(self) -> int:
        """Bytes of the float32 weights and biases of conv and fc layers."""
        return sum(
            4 * np.asarray(v).size
            for layer in self.network
            if layer.op in ("conv", "fc", "convtranspose")
            for k, v in layer.params.items()
            if k in ("weight", "bias") and v is not None
        )

    def float_reference(self, x: np.ndarray) -> list[np.ndarray]:
        """Every network output (in ``network.outputs`` order) of the float network on ``x``.

        ONNX networks run their source file in ONNX Runtime; others run :func:`run_float`.
        """
        net = self.network
        if net.source_format == "onnx" and net.source_path:
            return _onnx_runtime_outputs(net, x)
        runs = [run_float(net, b) for b in _batches(x)]
        return [np.concatenate([r[name] for r in runs]) for name in net.outputs]

    def quantized_outputs(self, x: np.ndarray) -> list[np.ndarray]:
        """Every network output of the int8 network on float input ``x`` (dequantized float32)."""
        assert self.qnet is not None
        qnet = self.qnet
        runs = [run_int8(qnet, qnet.quantize_input(b)) for b in _batches(x)]
        return [np.concatenate([qnet.dequantize(name, r[name]) for r in runs]) for name in qnet.outputs]

    # -- per-layer error ------------------------------------------------------------------------

    def layer_errors(self, data: Any, layout: str = "NCHW") -> LayerErrorTable:
        """Per layer: SQNR and max abs error of the dequantized int8 output vs the float output.

        Both networks run on the same float input (the int8 one quantizes it first); errors
        accumulate, so the first layer whose SQNR drops sharply is where accuracy is lost.
        """
        ds = self._data(data, layout)
        if self.qnet is None:
            self.quantize()
        assert self.qnet is not None
        signal: dict[str, float] = {}
        noise: dict[str, float] = {}
        peak: dict[str, float] = {}
        for batch in _batches(ds.x):
            ref = run_float(self.network, batch, collect=True)
            got = run_int8(self.qnet, self.qnet.quantize_input(batch), collect=True)
            for name, f in ref.items():
                err = self.qnet.dequantize(name, got[name]).astype(np.float64) - f
                signal[name] = signal.get(name, 0.0) + float(np.sum(f.astype(np.float64) ** 2))
                noise[name] = noise.get(name, 0.0) + float(np.sum(err**2))
                peak[name] = max(peak.get(name, 0.0), float(np.max(np.abs(err))))
        rows = []
        for layer in self.qnet:
            n = noise[layer.name]
            s = signal[layer.name]
            sqnr = math.inf if n == 0 else (10.0 * math.log10(s / n) if s > 0 else -math.inf)
            rows.append(LayerErrorRow(layer.name, layer.op, sqnr, peak[layer.name], layer.scale))
        return LayerErrorTable(rows, title=f"Quantization error per layer of {self.network.name}")


_BUILDERS: dict[str, Callable[[Quantizer, Layer, QLayer, list[QLayer]], None]] = {
    "conv": Quantizer._conv_fc,
    "fc": Quantizer._conv_fc,
    "convtranspose": Quantizer._conv_fc,  # IR weights are (Cout, ...) like conv: per-output-channel scales
    "act": Quantizer._act,
    "avgpool": Quantizer._avgpool,
    "global_avgpool": Quantizer._global_avgpool,
    "add": Quantizer._add,
    "mul": Quantizer._mul,
    "concat": Quantizer._concat,
    "lrn": Quantizer._lrn,
    "softmax": Quantizer._softmax,
}



def fill_hardware_params(network: Network, layer: Layer, q: QLayer, srcs: list[QLayer], *,
                         int8_softmax: bool = False) -> None:
    """Fill the hardware parameters of ``q`` (int8 weights, int32 biases, requantization,
    tables) from the float ``layer`` and the scales already on ``q`` and its sources ``srcs``:
    the quantizer's own formulas, for importers that bring the scales from a file
    (``dlproc.quant.imported``). Layers without parameters are left as they are.

    The builders need nothing of a quantizer but the float network (for input shapes) and the
    softmax choice, so a bare Quantizer holding those stands in for a calibrated one."""
    builder = _BUILDERS.get(layer.op)
    if builder is None:
        return
    host = Quantizer.__new__(Quantizer)
    host.network = network
    host.int8_softmax = int8_softmax
    builder(host, layer, q, srcs)

def _onnx_runtime_outputs(net: Network, x: np.ndarray) -> list[np.ndarray]:
    """Run the network's ONNX file in ONNX Runtime; its outputs in ``net.outputs`` order, NCHW."""
    import onnxruntime as ort

    path = Path(net.source_path or "")
    if not path.is_file():
        raise QuantizationError(f"the float reference needs the ONNX file {str(path)!r}, which does not exist")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the machine is shared; one thread keeps results reproducible
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    available = [o.name for o in sess.get_outputs()]
    layers = [net[name] for name in net.outputs]
    wanted = [layer.tensor for layer in layers]
    if not all(name in available for name in wanted):
        if len(available) != len(layers):
            raise QuantizationError(
                f"cannot match the network outputs {net.outputs} to the ONNX graph outputs {available}"
            )
        wanted = available  # the importer renamed them; the graph's order is the network's
    fixed_batch = inp.shape[0] if isinstance(inp.shape[0], int) else None
    size = fixed_batch or BATCH
    parts: list[list[np.ndarray]] = [[] for _ in wanted]
    for start in range(0, x.shape[0], size):
        chunk = x[start : start + size]
        n = chunk.shape[0]
        if fixed_batch and n != fixed_batch:  # pad the last chunk to the model's fixed batch
            pad = np.zeros((fixed_batch - n,) + chunk.shape[1:], np.float32)
            chunk = np.concatenate([chunk, pad])
        for i, out in enumerate(sess.run(wanted, {inp.name: chunk})):
            parts[i].append(out[:n])
    return [
        np.concatenate(p).astype(np.float32).reshape((x.shape[0],) + layer.shape.as_tuple())
        for p, layer in zip(parts, layers)
    ]
