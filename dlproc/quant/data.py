"""Calibration and validation data: NumPy arrays, image folders and the built-in digits set.

Every loader returns a :class:`Dataset`: float32 inputs in NCHW layout (the layout the IR and the
processor use) plus optional integer labels. Nothing is guessed: a NumPy array must come with an
explicit layout (``"NCHW"`` or ``"NHWC"``), and shapes are checked against the network input so a
transposed or mis-sized array is an error naming what was expected instead of silent garbage.

Image folders follow MATLAB's ``imageDatastore`` with ``LabelSource="foldernames"``: one
sub-folder per class, classes numbered in sorted folder-name order. Images are loaded with
Pillow, converted to grayscale (one input channel) or RGB (three), resized to the network input
size with bilinear filtering and scaled to ``[0, 1]`` by dividing by 255.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlproc.errors import QuantizationError

__all__ = [
    "Dataset",
    "LAYOUTS",
    "IMAGE_SUFFIXES",
    "from_array",
    "load_image_folder",
    "load_data",
    "digits_dataset",
    "DIGITS_HELDOUT",
    "MODELS_DIR",
    "DIGITS_MODEL",
    "resolve_model",
]

LAYOUTS = ("NCHW", "NHWC")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".pgm", ".ppm")

#: The digits set has 1797 images; the last DIGITS_HELDOUT of them (in load_digits order) are
#: held out from training, the rest train the example network.
DIGITS_HELDOUT = 360

#: Models shipped with dlproc, and the digits example network trained by examples/digits/train.py.
MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"
DIGITS_MODEL = MODELS_DIR / "digits.onnx"


def resolve_model(model: str | Path) -> str:
    """A bare file name of a model shipped in dlproc/data/models (e.g. "digits.onnx") resolves
    there when no such file exists in the working directory; anything else is returned as is."""
    path = Path(model)
    if not path.exists() and path.parent == Path(".") and (MODELS_DIR / path.name).is_file():
        return str(MODELS_DIR / path.name)
    return str(model)


@dataclass
class Dataset:
    """Inputs ``x`` (float32, N x C x H x W), optional labels ``y`` (int64, N) and class names."""

    x: np.ndarray
    y: np.ndarray | None = None
    classes: list[str] = field(default_factory=list)
    source: str = "array"

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _check_finite(x: np.ndarray, source: str) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        n_nan = int(np.isnan(x).sum())
        n_inf = int(bad.sum()) - n_nan
        raise QuantizationError(
            f"{source}: data contains {n_nan} NaN and {n_inf} Inf value(s) (first at index {first}); "
            "calibration and validation data must be finite"
        )


def from_array(
    x: np.ndarray,
    layout: str,
    input_shape: tuple[int, int, int] | None = None,
    labels: np.ndarray | None = None,
    source: str = "array",
) -> Dataset:
    """Wrap a float32 array of layout ``layout`` as a Dataset, checking shape, dtype and values.

    ``input_shape`` is the network input as (C, H, W); a single sample without the batch
    dimension is not accepted, because a 3-D array is ambiguous between one sample and a batch
    of single-channel images.
    """
    if layout not in LAYOUTS:
        raise QuantizationError(f"{source}: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise QuantizationError(
            f"{source}: expected dtype float32, got {x.dtype} (convert with x.astype(np.float32))"
        )
    if x.ndim != 4:
        raise QuantizationError(
            f"{source}: expected a 4-D array in {layout} layout, got shape {tuple(x.shape)}"
        )
    if x.shape[0] == 0:
        raise QuantizationError(f"{source}: the data set is empty (0 samples)")
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if input_shape is not None and tuple(x.shape[1:]) != tuple(input_shape):
        c, h, w = input_shape
        want = f"(N, {c}, {h}, {w})" if layout == "NCHW" else f"(N, {h}, {w}, {c})"
        got = tuple(x.shape) if layout == "NCHW" else tuple(x.transpose(0, 2, 3, 1).shape)
        raise QuantizationError(
            f"{source}: expected shape {want} in {layout} layout for the network input, got {got}"
        )
    _check_finite(x, source)
    y = None
    if labels is not None:
        y = _check_labels(labels, x.shape[0], source)
    return Dataset(x=x, y=y, source=source)


def _check_labels(labels: np.ndarray, n: int, source: str) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != n:
        raise QuantizationError(
            f"{source}: expected labels of shape ({n},), got {tuple(y.shape)}"
        )
    if not np.issubdtype(y.dtype, np.integer):
        raise QuantizationError(f"{source}: expected integer labels, got dtype {y.dtype}")
    return y.astype(np.int64)


def load_image_folder(folder: str | Path, input_shape: tuple[int, int, int]) -> Dataset:
    """Load ``folder/<class>/<image>`` files, labels from sorted class folder names."""
    from PIL import Image

    folder = Path(folder)
    if not folder.is_dir():
        raise QuantizationError(f"image folder {str(folder)!r} does not exist or is not a folder")
    c, h, w = input_shape
    if c not in (1, 3):
        raise QuantizationError(
            f"image folder {str(folder)!r}: the network input has {c} channels; images can feed "
            "only 1 (grayscale) or 3 (RGB) channels"
        )
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise QuantizationError(
            f"image folder {str(folder)!r} has no class sub-folders (expected folder/<class>/<image>)"
        )
    images, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((folder / name).iterdir()):
            if path.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            try:
                with Image.open(path) as img:
                    img = img.convert("L" if c == 1 else "RGB")
                    img = img.resize((w, h), Image.BILINEAR)
                    arr = np.asarray(img, dtype=np.float32) / np.float32(255.0)
            except OSError as exc:
                raise QuantizationError(f"cannot read image {str(path)!r}: {exc}") from None
            images.append(arr[None] if c == 1 else arr.transpose(2, 0, 1))
            labels.append(label)
    if not images:
        raise QuantizationError(
            f"image folder {str(folder)!r}: the data set is empty (no {'/'.join(IMAGE_SUFFIXES)} "
            "files in its class sub-folders)"
        )
    x = np.stack(images).astype(np.float32)
    return Dataset(x=x, y=np.asarray(labels, dtype=np.int64), classes=classes, source=str(folder))


def digits_dataset(split: str = "train", size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's handwritten digits as (x float32 N x 1 x size x size in [0, 1], y int64).

    The 8 x 8 images (values 0..16) are divided by 16 and upsampled by nearest-neighbour
    repetition to ``size`` (a multiple of 8). ``split`` is ``"train"`` (the first
    1797 - DIGITS_HELDOUT images in load_digits order), ``"heldout"`` (the last DIGITS_HELDOUT)
    or ``"all"``.
    """
    if split not in ("train", "heldout", "all"):
        raise QuantizationError(f"digits split {split!r} is not one of train, heldout, all")
    if size <= 0 or size % 8:
        raise QuantizationError(f"digits size {size} must be a positive multiple of 8")
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - scikit-learn is in the demo extra
        raise QuantizationError(
            "the digits data set needs scikit-learn (pip install 'dlproc[demo]')"
        ) from None
    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(16.0))[:, None]
    factor = size // 8
    x = np.repeat(np.repeat(x, factor, axis=2), factor, axis=3)
    y = digits.target.astype(np.int64)
    n_train = len(y) - DIGITS_HELDOUT
    if split == "train":
        x, y = x[:n_train], y[:n_train]
    elif split == "heldout":
        x, y = x[n_train:], y[n_train:]
    return np.ascontiguousarray(x), y


def load_data(
    spec: str | Path | np.ndarray | Dataset,
    input_shape: tuple[int, int, int],
    layout: str = "NCHW",
    labels: str | Path | np.ndarray | None = None,
) -> Dataset:
    """Load data from any of the accepted forms.

    ``spec`` is a Dataset (checked and returned), a float32 array (in ``layout``), a ``.npy``
    file of such an array, an image folder, or a built-in data set name: ``"digits"`` (the
    training split) or ``"digits:heldout"`` / ``"digits:train"`` / ``"digits:all"``, sized to the
    network input. ``labels`` (array or ``.npy`` file) go with array inputs.
    """
    if isinstance(spec, Dataset):
        ds = from_array(spec.x, "NCHW", input_shape, spec.y, spec.source)
        ds.classes = list(spec.classes)
        return ds
    label_array = None
    if labels is not None:
        label_array = _load_npy(labels, "labels") if not isinstance(labels, np.ndarray) else labels
    if isinstance(spec, np.ndarray):
        return from_array(spec, layout, input_shape, label_array)
    text = str(spec)
    if text == "digits" or text.startswith("digits:"):
        split = text.partition(":")[2] or "train"
        c, h, w = input_shape
        if c != 1 or h != w:
            raise QuantizationError(
                f"built-in data set {text!r} gives 1 x S x S images; the network input is {c}x{h}x{w}"
            )
        x, y = digits_dataset(split, size=h)
        ds = from_array(x, "NCHW", input_shape, y, source=text)
        ds.classes = [str(i) for i in range(10)]
        return ds
    path = Path(text)
    if path.is_dir():
        if label_array is not None:
            raise QuantizationError(
                f"{text!r} is an image folder, whose labels come from its sub-folder names; "
                "do not give labels with it"
            )
        return load_image_folder(path, input_shape)
    if path.suffix == ".npy":
        return from_array(_load_npy(path, "data"), layout, input_shape, label_array, source=text)
    if not path.exists():
        raise QuantizationError(
            f"data {text!r} does not exist (expected a .npy file, an image folder, or 'digits[:split]')"
        )
    raise QuantizationError(
        f"data {text!r} is neither a .npy file nor an image folder nor a built-in data set name"
    )


def _load_npy(path: str | Path, what: str) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise QuantizationError(f"{what} file {str(path)!r} does not exist")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise QuantizationError(f"{what} file {str(path)!r} is not a readable .npy file: {exc}") from None
