"""dlproc: an open generator of a parameterized int8 deep-learning inference processor for FPGAs.

The package reads in pipeline order (the map is at the top of ``docs/architecture.md``):
``frontends`` (ONNX, Darknet, QDQ ONNX, TFLite) -> ``quant`` (the quantizer) -> ``compiler``
(lowering, per-engine planners, memory map, program) -> ``targets`` (golden model, ISA simulator,
RTL simulation, boards), over ``hardware`` (the ISA, register and numerics contract and the
Amaranth gateware), with ``flow`` (headers, synthesis, board projects, firmware), ``estimate``,
``report`` and the CLI beside them.
"""

from dlproc.version import __version__  # noqa: E402,F401

from dlproc import errors  # noqa: E402,F401 - dlproc.errors.DlprocError without a separate import (tiny, no deps)

# The scripting API (dlproc.api), loaded on first use so that `dlproc --help` and modules that
# only need part of the package do not import NumPy, ONNX and the compiler.
_API = ("ProcessorConfig", "Workflow", "build_processor", "quantize")


def __getattr__(name: str):
    if name in _API:
        from dlproc import api

        return getattr(api, name)
    if name == "estimate":
        # The subpackage dlproc.estimate is itself callable (dlproc.estimate(network, cfg)), see
        # dlproc/estimate/__init__.py: a function of that name would be replaced by the package
        # as soon as any dlproc.estimate.* module is imported.
        import importlib

        return importlib.import_module(".estimate", __name__)
    raise AttributeError(f"module 'dlproc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API) + ["estimate"])
