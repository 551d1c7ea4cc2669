"""Estimators: performance (a cycle model driven by the instruction stream, in timing, bursts, bus,
engines, machine and report; ``performance`` is its front door), design-space exploration, and
resources (:mod:`dlproc.estimate.resources`)."""

from dlproc.estimate.machine import Timeline, simulate_program
from dlproc.estimate.performance import estimate_performance, load_for_estimate, synthetic_quantize
from dlproc.estimate.report import (
    LayerPerf,
    PerformanceReport,
    estimate_compiled,
    estimate_layer_program,
    layer_breakdown,
)
from dlproc.estimate.timing import EstimateError, TimingParams, timing_for

__all__ = [
    "EstimateError",
    "LayerPerf",
    "PerformanceReport",
    "Timeline",
    "TimingParams",
    "estimate_compiled",
    "estimate_layer_program",
    "estimate_performance",
    "layer_breakdown",
    "load_for_estimate",
    "simulate_program",
    "synthetic_quantize",
    "timing_for",
]


# MATLAB's estimatePerformance as dlproc.estimate(network, cfg): the package object is made
# callable (a module subclass with __call__), because a plain function named `estimate` in
# dlproc/__init__.py would be overwritten by this package whenever one of its modules is imported.
import sys as _sys
import types as _types


class _CallableModule(_types.ModuleType):
    def __call__(self, network, config, **options):  # noqa: ANN001 - see dlproc.api.estimate
        from dlproc.api import estimate

        return estimate(network, config, **options)


_sys.modules[__name__].__class__ = _CallableModule
