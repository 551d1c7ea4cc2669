"""Result tables of the quantizer: calibration, validation and per-layer error.

Each table is a list of dataclass rows plus the column titles MATLAB's ``dlquantizer`` shows.
``str(table)`` prints an aligned text table, ``table.to_list()`` gives JSON-ready dictionaries
keyed by the column titles and ``table.to_json()`` the same as a JSON string.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Iterator, TypeVar

__all__ = [
    "CalibrationRow",
    "ValidationRow",
    "LayerErrorRow",
    "Table",
    "CalibrationTable",
    "ValidationTable",
    "LayerErrorTable",
]


@dataclass(frozen=True)
class CalibrationRow:
    """One learnable or activation range (MATLAB's calibrate columns)."""

    optimized_layer_name: str
    network_layer_name: str
    learnables_activations: str  # "Weights", "Bias" or "Activations"
    min_value: float
    max_value: float

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "Optimized Layer Name",
        "Network Layer Name",
        "Learnables / Activations",
        "MinValue",
        "MaxValue",
    )


@dataclass(frozen=True)
class ValidationRow:
    """The metric and learnable memory of one implementation (floating point or quantized)."""

    implementation: str  # "floating point" or "quantized"
    metric_name: str
    metric_value: float
    learnable_parameter_memory_bytes: int

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "Implementation",
        "Metric",
        "MetricValue",
        "LearnableParameterMemory (bytes)",
    )


@dataclass(frozen=True)
class LayerErrorRow:
    """How far one layer's dequantized int8 output is from the float one on the same data."""

    layer: str
    op: str
    sqnr_db: float
    max_abs_error: float
    output_scale: float  # one int8 step of the layer's output, for comparison with the error

    COLUMNS: ClassVar[tuple[str, ...]] = ("Layer", "Op", "SQNR (dB)", "MaxAbsError", "OutputScale")


R = TypeVar("R")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.6g}"
    return str(value)


def _jsonable(value: Any) -> Any:
    # JSON has no infinity; an exact (error-free) layer reports SQNR as the string "inf".
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@dataclass
class Table(Generic[R]):
    """An ordered list of rows of one dataclass type."""

    rows: list[R] = field(default_factory=list)
    title: str = ""

    def __iter__(self) -> Iterator[R]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> R:
        return self.rows[index]

    def columns(self) -> tuple[str, ...]:
        return self.rows[0].COLUMNS if self.rows else ()  # type: ignore[attr-defined]

    def to_list(self) -> list[dict[str, Any]]:
        out = []
        for row in self.rows:
            values = [_jsonable(v) for v in dataclasses.astuple(row)]  # type: ignore[arg-type]
            out.append(dict(zip(row.COLUMNS, values)))  # type: ignore[attr-defined]
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_list(), indent=indent)

    def __str__(self) -> str:
        if not self.rows:
            return f"{self.title}\n(empty)" if self.title else "(empty)"
        header = list(self.columns())
        cells = [[_fmt(v) for v in dataclasses.astuple(row)] for row in self.rows]  # type: ignore[arg-type]
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]

        def line(values: list[str]) -> str:
            # Numbers right-aligned, text left-aligned, as a spreadsheet shows them.
            parts = []
            for i, v in enumerate(values):
                numeric = isinstance(dataclasses.astuple(self.rows[0])[i], (int, float))  # type: ignore[arg-type]
                parts.append(v.rjust(widths[i]) if numeric else v.ljust(widths[i]))
            return "  ".join(parts).rstrip()

        lines = [self.title] if self.title else []
        lines += [line(header), "  ".join("-" * w for w in widths)]
        lines += [line(r) for r in cells]
        return "\n".join(lines)


class CalibrationTable(Table[CalibrationRow]):
    """The result of :meth:`Quantizer.calibrate`."""

    def range_of(self, layer: str, kind: str = "Activations") -> tuple[float, float]:
        for row in self.rows:
            if row.optimized_layer_name == layer and row.learnables_activations == kind:
                return row.min_value, row.max_value
        raise KeyError(f"no {kind} range for layer {layer!r}")


class ValidationTable(Table[ValidationRow]):
    """The result of :meth:`Quantizer.validate`."""

    def value(self, implementation: str) -> float:
        for row in self.rows:
            if row.implementation == implementation:
                return row.metric_value
        raise KeyError(implementation)


class LayerErrorTable(Table[LayerErrorRow]):
    """The result of :meth:`Quantizer.layer_errors`, in network order."""

    def worst(self) -> LayerErrorRow:
        """The layer with the lowest SQNR (where accuracy is lost first)."""
        return min(self.rows, key=lambda r: r.sqnr_db)
