"""One entry point for every already-quantized model: ``.dlq``, QDQ ONNX and int8 TFLite.

``load_quantized_model(path)`` looks at the file's content (:mod:`dlproc.frontends.filetype`),
not its name, and returns a :class:`~dlproc.quant.QuantizedNetwork`; a float model or any other
file is a :class:`~dlproc.errors.ModelError` that says what the file is.
"""

from __future__ import annotations

from pathlib import Path

from .filetype import FileKind, detect, expect

__all__ = ["load_quantized_model", "QUANTIZED_KINDS"]

#: File kinds that hold an int8 network without calibration.
QUANTIZED_KINDS = (FileKind.DLQ, FileKind.ONNX_QDQ, FileKind.TFLITE)


def load_quantized_model(path: str | Path, purpose: str = "this command"):
    """The QuantizedNetwork in ``path`` (a .dlq, a QDQ ONNX or an int8 .tflite, by content)."""
    kind = expect(path, QUANTIZED_KINDS, purpose)
    if kind == FileKind.DLQ:
        from ..quant.qnet import QuantizedNetwork

        return QuantizedNetwork.load(path)
    if kind == FileKind.ONNX_QDQ:
        from .qdq import load_qdq

        return load_qdq(path)
    from .tflite import load_tflite

    return load_tflite(path)


def kind_of(path: str | Path) -> FileKind:
    return detect(path)
