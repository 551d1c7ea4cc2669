"""Estimators: performance (a cycle model driven by the instruction stream) and design-space
exploration. The resource estimator is :mod:`dlproc.estimate.resources`."""

from dlproc.estimate.performance import (
    EstimateError,
    LayerPerf,
    PerformanceReport,
    Timeline,
    TimingParams,
    estimate_compiled,
    estimate_layer_program,
    estimate_performance,
    layer_breakdown,
    simulate_program,
)

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
    "simulate_program",
]
