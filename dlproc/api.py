"""The scripting API in the shape of MATLAB's Deep Learning HDL Toolbox.

    import dlproc
    cfg = dlproc.ProcessorConfig.preset("de10nano_int8")          # dlhdl.ProcessorConfig
    cfg.set_module_property("conv", "LRNBlockGeneration", "on")    # setModuleProperty
    dlproc.build_processor(cfg, board="de10-nano", out="build/x")  # dlhdl.buildProcessor
    qnet = dlproc.quantize("digits.onnx", calibration="digits")    # dlquantizer + calibrate
    print(dlproc.estimate(qnet, cfg))                              # estimatePerformance
    hw = dlproc.Workflow(qnet, cfg, target="sim")                  # dlhdl.Workflow
    hw.compile(); y, prof = hw.predict(x, profile=True)

This module is a thin facade: every name here is the existing implementation
(:class:`dlproc.config.ProcessorConfig`, :class:`dlproc.targets.workflow.Workflow`,
:func:`dlproc.flow.build.build_processor`, :func:`dlproc.estimate.performance.estimate_performance`,
:class:`dlproc.quant.Quantizer`) with MATLAB's argument names and checks that name the bad
argument. ``import dlproc`` loads it lazily (see ``dlproc/__init__.py``), so the CLI does not pay
for NumPy and ONNX imports it does not need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlproc.config import ProcessorConfig
from dlproc.errors import ConfigError, DlprocError
from dlproc.targets.workflow import Workflow

__all__ = ["ProcessorConfig", "Workflow", "build_processor", "estimate", "quantize", "BOARDS"]

#: Board names build_processor accepts (the recipes under boards/).
BOARDS: tuple[str, ...] = ("de10-nano", "arria10-soc")


def _config(config: Any, what: str = "config") -> ProcessorConfig:
    """A ProcessorConfig from a ProcessorConfig, a preset name or a TOML file."""
    if isinstance(config, ProcessorConfig):
        return config
    if isinstance(config, (str, Path)):
        text = str(config)
        if text in ProcessorConfig.presets():
            return ProcessorConfig.preset(text)
        if Path(text).is_file():
            return ProcessorConfig.load(text)
        raise ConfigError(f"{what} {text!r} is neither a preset ({', '.join(ProcessorConfig.presets())}) nor an "
                          "existing configuration file")
    raise ConfigError(f"{what} must be a dlproc.ProcessorConfig, a preset name or a .toml file, "
                      f"not {type(config).__name__}")


def build_processor(config: Any, board: str | None = None, out: str | Path | None = None, *,
                    override_resource_check: bool = False, run_quartus: bool | None = None,
                    synthesize: bool = True, verbose: bool = True) -> Any:
    """MATLAB's ``dlhdl.buildProcessor``: validate, check resources, generate the Verilog and the
    board project into ``out``, synthesize with Yosys (Cyclone V) and run Quartus when installed.

    Returns :class:`dlproc.flow.build.BuildResult` (``.output_dir``, ``.files``, ``.resources``,
    ``.synthesis``, ``.fits``). ``verbose=False`` keeps the build log off stdout.
    """
    from dlproc.flow.build import build_processor as _build

    cfg = _config(config)
    if board is not None and (not isinstance(board, str) or board.strip().lower() not in BOARDS):
        raise ConfigError(f"board {board!r} is not one of {', '.join(BOARDS)}")
    log = print if verbose else (lambda _text: None)
    return _build(cfg, board=board, output_dir=out, override_resource_check=override_resource_check,
                  run_quartus=run_quartus, synthesize=synthesize, log=log)


def estimate(network: Any, config: Any, *, frames: int = 1) -> Any:
    """MATLAB's ``estimatePerformance``: per-layer cycles, frames/s and MAC utilization without RTL.

    ``network``: a compiled, quantized or float network object, or a ``.dlnet``/``.dlq``/``.onnx``/
    Darknet ``.cfg`` path (float networks are quantized with synthetic data; only shapes matter).
    Returns :class:`dlproc.estimate.performance.PerformanceReport` (``print()`` shows the table).
    """
    from dlproc.estimate.performance import estimate_performance

    if isinstance(network, (str, Path)):
        from dlproc.quant.data import resolve_model

        network = resolve_model(network)  # a shipped name (digits.onnx); the loader names a missing file
    if not isinstance(frames, int) or frames < 1:
        raise DlprocError(f"frames must be a positive integer, got {frames!r}")
    return estimate_performance(_config(config), network, frames=frames)


def quantize(model: Any, calibration: Any, *, method: str = "minmax", validate: Any = None) -> Any:
    """MATLAB's ``dlquantizer`` + ``calibrate`` + ``quantize``: a float model (a path, a shipped
    model name such as ``"digits.onnx"``, or a :class:`dlproc.ir.Network`) calibrated on
    ``calibration`` (an array, a .npy file, an image folder or ``"digits"``). Returns the
    :class:`dlproc.quant.QuantizedNetwork`; with ``validate`` data it also prints the validation
    table (float against int8 metric)."""
    from dlproc.quant import METHODS, Quantizer
    from dlproc.quant.data import resolve_model

    if method not in METHODS:
        raise DlprocError(f"method {method!r} is not one of {', '.join(METHODS)}")
    if isinstance(model, (str, Path)):
        model = resolve_model(str(model))
    quantizer = Quantizer(model)
    quantizer.calibrate(calibration, method=method)
    qnet = quantizer.quantize()
    if validate is not None:
        print(quantizer.validate(validate))
    return qnet

