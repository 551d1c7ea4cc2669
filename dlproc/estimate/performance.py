"""The performance estimator's front door: a network in any form (a path, a float, quantized or
compiled network, a single-layer program) -> :class:`PerformanceReport`, without RTL.

The cycle model itself is :mod:`dlproc.estimate.machine` (it replays the instruction stream unit
by unit); its parts are the timing parameters (:mod:`~dlproc.estimate.timing`), DRAM bursts
(:mod:`~dlproc.estimate.bursts`), the shared bus (:mod:`~dlproc.estimate.bus`) and the compute
engines' durations (:mod:`~dlproc.estimate.engines`); :mod:`~dlproc.estimate.report` makes the
tables.
"""

from __future__ import annotations

from typing import Any

from dlproc.estimate.report import PerformanceReport, estimate_compiled, estimate_layer_program
from dlproc.estimate.timing import EstimateError, TimingParams


def synthetic_quantize(network: Any, *, samples: int = 2, seed: int = 0) -> Any:
    """Quantize a float IR network with synthetic calibration data (fixed seed).

    The estimate only depends on shapes, so the calibration data only has to make the quantizer
    produce valid parameters: ``samples`` standard-normal inputs.
    """
    import numpy as np

    from dlproc.quant import Quantizer

    q = Quantizer(network)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, *q.input_shape)).astype(np.float32)
    q.calibrate(x)
    return q.quantize()


def load_for_estimate(model: Any, *, input_size: tuple[int, int] | None = None,
                      purpose: str = "dlproc estimate") -> Any:
    """The network in the file ``model``, recognised by its content (not its name): a ``.dlnet``
    (compiled), a ``.dlq``, a QDQ ONNX or int8 ``.tflite`` model (quantized, keeping the file's
    own quantization), or a float ONNX model or Darknet ``.cfg`` (a float network, which
    :func:`estimate_performance` quantizes with synthetic calibration). Shipped networks may be
    named without a path. Anything else is a ModelError that says what the file is; ``purpose``
    names the command in it."""
    from dlproc.errors import ModelError
    from dlproc.frontends import load_network, resolve_model_path
    from dlproc.frontends.filetype import FileKind, detect
    from dlproc.quant.imported import QUANTIZED_KINDS, load_quantized_model

    kind = detect(model)
    if kind == FileKind.MISSING:
        model = resolve_model_path(model)
        kind = detect(model)
    if kind in QUANTIZED_KINDS:
        return load_quantized_model(model, purpose)
    if kind == FileKind.DLNET:
        from dlproc.compiler import netfile

        return netfile.load(model)
    if kind in (FileKind.NPY, FileKind.ZIP, FileKind.EMPTY, FileKind.DIRECTORY):
        raise ModelError(f"{model}: this is {kind.value}; {purpose} expects a model (.onnx, .tflite, Darknet "
                         ".cfg), a .dlq or a .dlnet")
    return load_network(model, input_size=input_size)


def estimate_performance(config: Any, network: Any, *, frames: int = 1, seed: int = 0,
                         timing: TimingParams | None = None, **compile_options: Any) -> PerformanceReport:
    """Estimate ``network`` on the processor ``config`` describes, without RTL.

    ``network``: a :class:`dlproc.compiler.CompiledNetwork`, a
    :class:`dlproc.quant.QuantizedNetwork`, a float :class:`dlproc.ir.Network` (quantized with
    synthetic calibration data, int8 assumed), a :class:`dlproc.compiler.layerprog.LayerProgram`, or a
    path to any of those (``.dlnet``, ``.dlq``, ``.onnx``, Darknet ``.cfg``). The network is
    compiled for ``config`` and its instruction stream is timed by :func:`simulate_program`.
    """
    from dlproc.compiler import CompiledNetwork, compile_network
    from dlproc.ir import Network

    if isinstance(network, (str,)) or hasattr(network, "__fspath__"):
        network = load_for_estimate(network)
    if isinstance(network, CompiledNetwork):
        if config is not None and network.config_hash != config.config_hash():
            raise EstimateError(f"network {network.name!r} was compiled for configuration {network.config_hash[:12]}, "
                                f"not for this one ({config.config_hash()[:12]}); recompile it")
        return estimate_compiled(network, config, frames=frames, timing=timing)
    if hasattr(network, "instructions") and hasattr(network, "plan"):
        return estimate_layer_program(config, network, timing=timing)
    if isinstance(network, Network):
        network = synthetic_quantize(network, seed=seed)
    cn = compile_network(network, config, **compile_options)
    return estimate_compiled(cn, config, frames=frames, timing=timing)
