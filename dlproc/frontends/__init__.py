"""Front ends: read ONNX models and Darknet cfg/weights files into the IR (:mod:`dlproc.ir`).

``load_network`` picks the importer from the file type; ``load_onnx`` and ``load_darknet`` are the
importers themselves. See ``docs/frontends.md`` for the supported operators and the rules they apply.
"""

from __future__ import annotations

from pathlib import Path

from dlproc.errors import ModelError
from dlproc.ir import Network
from dlproc.frontends.darknet import load_darknet
from dlproc.frontends.onnx import load_onnx

__all__ = ["load_network", "load_onnx", "load_darknet", "resolve_model_path", "NETWORKS_DIR"]

# Networks shipped inside the package; a bare file name that does not exist resolves here.
NETWORKS_DIR = Path(__file__).resolve().parents[1] / "data" / "networks"


def resolve_model_path(model: str | Path) -> Path:
    """The file ``model`` names: the path itself if it exists, else a network shipped with dlproc."""
    path = Path(model)
    if path.exists():
        return path
    shipped = NETWORKS_DIR / path.name
    if path.parent == Path(".") and shipped.is_file():
        return shipped
    available = ", ".join(sorted(p.name for p in NETWORKS_DIR.glob("*") if p.suffix in (".cfg", ".onnx")))
    raise ModelError(f"{model}: no such file, and not a network shipped with dlproc (shipped: {available or 'none'})")


def load_network(path: str | Path, input_size: tuple[int, int] | None = None,
                 weights: str | Path | None = None) -> Network:
    """Import a network, choosing the front end from the file type.

    ``.onnx`` files go to :func:`load_onnx`; ``.cfg`` files to :func:`load_darknet`, which also reads
    ``weights`` or, if not given, a ``.weights`` file of the same stem next to the cfg when present.
    ``input_size`` is (height, width).
    """
    path = resolve_model_path(path)
    suffix = path.suffix.lower()
    # Quantized models are recognised by content (an int8 QDQ model is an .onnx file too); their
    # float IR has the file's structure with dequantized weights.
    from dlproc.frontends.filetype import FileKind, detect

    kind = detect(path)
    if kind in (FileKind.ONNX_QDQ, FileKind.TFLITE) and weights is not None:
        raise ModelError(f"{path}: a weights file only applies to Darknet .cfg networks")
    if kind == FileKind.ONNX_QDQ:
        from dlproc.frontends.qdq import load_qdq_float

        return load_qdq_float(path, input_size=input_size)
    if kind == FileKind.TFLITE:
        from dlproc.frontends.tflite import load_tflite_float

        return load_tflite_float(path, input_size=input_size)
    if kind in (FileKind.DLQ, FileKind.DLNET, FileKind.NPY, FileKind.ZIP, FileKind.EMPTY, FileKind.DIRECTORY):
        raise ModelError(f"{path}: this is {kind.value}, not a network model (expected ONNX, TFLite or a Darknet .cfg)")
    if suffix == ".onnx":
        if weights is not None:
            raise ModelError(f"{path}: a weights file only applies to Darknet .cfg networks")
        return load_onnx(path, input_size=input_size)
    if suffix == ".cfg":
        if weights is None and path.with_suffix(".weights").is_file():
            weights = path.with_suffix(".weights")
        return load_darknet(path, weights, input_size)
    if kind == FileKind.ONNX_FLOAT:
        return load_onnx(path, input_size=input_size)
    if kind == FileKind.DARKNET_CFG:
        return load_darknet(path, weights, input_size)
    raise ModelError(f"{path}: unknown network file type {suffix or '(none)'!r}; use .onnx or a Darknet .cfg, "
                     f"or an int8 .tflite (this file is {kind.value})")
