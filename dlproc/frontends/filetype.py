"""Recognise dlproc's input files by their content, not by their extension.

A ``.dlq`` saved as ``net.q`` is still a quantized network, and an int8 QDQ model is an ``.onnx``
file like a float one, so every command asks :func:`detect` what a file *is* before choosing how
to read it. :func:`expect` turns a mismatch into one clear :class:`~dlproc.errors.ModelError`
naming what the file is and what the command wanted.

Detection reads at most the first few kilobytes (and, for ONNX, the node list):

* ``.dlq``: a zip archive whose ``header.json`` names the dlproc quantized-network format;
* ``.dlnet``: the compiled-network magic ``DLPRNET\\0``;
* ``.tflite``: a FlatBuffer with the TFLite file identifier ``TFL3`` at bytes 4..8;
* ONNX: a protobuf that parses as an ``onnx.ModelProto`` with a graph; *quantized* (QDQ) when its
  graph has QuantizeLinear/DequantizeLinear (or QLinear*) nodes, *float* otherwise;
* a Darknet cfg: text whose first section header is ``[net]`` or ``[network]``;
* ``.npy`` (``\\x93NUMPY``) and other zip files are named so that the message can say so.
"""

from __future__ import annotations

import enum
import json
import zipfile
from pathlib import Path

from dlproc.errors import ModelError

__all__ = ["FileKind", "detect", "expect", "QUANTIZED_ONNX_OPS"]

#: ONNX operators that mark a model as already quantized.
QUANTIZED_ONNX_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearAdd",
    "QLinearConcat", "QLinearAveragePool", "QLinearGlobalAveragePool", "ConvInteger", "MatMulInteger",
})

_DLQ_FORMAT = "dlproc-quantized-network"  # dlproc.quant.qnet.FORMAT_NAME (not imported: no cycle)
_DLNET_MAGIC = b"DLPRNET\0"
_TFLITE_ID = b"TFL3"
_NPY_MAGIC = b"\x93NUMPY"


class FileKind(enum.Enum):
    """What a file is; the value is the phrase used in messages."""

    DLQ = "a dlproc quantized network (.dlq)"
    DLNET = "a dlproc compiled network (.dlnet)"
    ONNX_FLOAT = "a float ONNX model"
    ONNX_QDQ = "a quantized (QDQ) ONNX model"
    TFLITE = "a TensorFlow Lite model (.tflite)"
    DARKNET_CFG = "a Darknet network description (.cfg)"
    NPY = "a NumPy array file (.npy)"
    ZIP = "a zip archive that is not a dlproc quantized network"
    EMPTY = "an empty file"
    MISSING = "a path that does not exist"
    DIRECTORY = "a directory"
    UNKNOWN = "not a file type dlproc knows"

    @property
    def is_float_model(self) -> bool:
        return self in (FileKind.ONNX_FLOAT, FileKind.DARKNET_CFG)

    @property
    def is_quantized_model(self) -> bool:
        """A model that already carries int8 quantization and imports without calibration."""
        return self in (FileKind.ONNX_QDQ, FileKind.TFLITE)


def detect(path: str | Path) -> FileKind:
    """The kind of the file at ``path``, from its content."""
    path = Path(path)
    if not path.exists():
        return FileKind.MISSING
    if path.is_dir():
        return FileKind.DIRECTORY
    with path.open("rb") as f:
        head = f.read(4096)
    if not head:
        return FileKind.EMPTY
    if head.startswith(_DLNET_MAGIC):
        return FileKind.DLNET
    if head.startswith(_NPY_MAGIC):
        return FileKind.NPY
    if head.startswith(b"PK\x03\x04"):
        return FileKind.DLQ if _is_dlq(path) else FileKind.ZIP
    if len(head) >= 8 and head[4:8] == _TFLITE_ID:
        return FileKind.TFLITE
    if _is_darknet_cfg(head):
        return FileKind.DARKNET_CFG
    onnx_kind = _onnx_kind(path)
    return onnx_kind or FileKind.UNKNOWN


def expect(path: str | Path, allowed: tuple[FileKind, ...], purpose: str) -> FileKind:
    """The kind of ``path`` if it is one of ``allowed``, else a ModelError saying what it is.

    ``purpose`` completes "expected ... for <purpose>", e.g. "dlproc compile".
    """
    kind = detect(path)
    if kind in allowed:
        return kind
    wanted = ", ".join(k.value for k in allowed[:-1])
    wanted = f"{wanted} or {allowed[-1].value}" if wanted else allowed[-1].value
    raise ModelError(f"{path}: this is {kind.value}; {purpose} expects {wanted}")


def _is_dlq(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            header = json.loads(zf.read("header.json"))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError):
        return False
    return isinstance(header, dict) and header.get("format") == _DLQ_FORMAT


def _is_darknet_cfg(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        return line.lower() in ("[net]", "[network]")
    return False


def _onnx_kind(path: Path) -> FileKind | None:
    """ONNX_QDQ / ONNX_FLOAT if the file parses as an ONNX model with a graph, else None."""
    import onnx

    try:
        # External data is not needed to tell the kind, and may live elsewhere.
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # protobuf raises several unrelated types for non-ONNX bytes
        return None
    if not proto.HasField("graph") or not (proto.graph.node or proto.graph.input):
        return None
    ops = {node.op_type for node in proto.graph.node}
    return FileKind.ONNX_QDQ if ops & QUANTIZED_ONNX_OPS else FileKind.ONNX_FLOAT
