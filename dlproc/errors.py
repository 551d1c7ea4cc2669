"""Exceptions that dlproc raises for bad input.

Every error a user can provoke with a bad file, property value or network derives from
:class:`DlprocError`. The CLI catches exactly this class and prints its message without a
traceback, so each message must say what was wrong and what is allowed.
"""


class DlprocError(Exception):
    """Base class of all user-facing dlproc errors."""


class ConfigError(DlprocError):
    """An impossible or malformed processor configuration (names module, property, value, allowed)."""


class ModelError(DlprocError):
    """A malformed or unsupported network description (ONNX, Darknet cfg/weights, IR)."""


class UnsupportedOperatorError(ModelError):
    """One or more operators of a model cannot be imported; the message lists all of them."""

    def __init__(self, nodes: list[tuple[str, str]], source: str = "model", needs: dict[str, str] | None = None):
        self.nodes = list(nodes)
        needs = needs or {}
        listing = ", ".join(f"{op} '{name}'" + (f" (needs {needs[op]})" if op in needs else "") for op, name in self.nodes)
        super().__init__(f"{source}: {len(self.nodes)} unsupported node(s): {listing}")


class QuantizationError(DlprocError):
    """Bad calibration data, NaN/Inf values, or a quantized-network file of another format."""


class CompileError(DlprocError):
    """A network that the chosen configuration cannot run."""


class SimulationError(DlprocError):
    """The simulated processor reported an error or could not be built."""


class ToolchainError(DlprocError):
    """A required external tool (Verilator, Yosys, a C++ compiler) is missing or failed."""
