"""Bad input to the quantizer: each error names what is wrong (and what was expected)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dlproc.errors import QuantizationError
from dlproc.quant import Quantizer
from dlproc.quant.data import from_array, load_data, load_image_folder

from test_quant_nets import tiny_net


@pytest.fixture
def quantizer():
    return Quantizer(tiny_net())


def test_wrong_dtype(quantizer):
    with pytest.raises(QuantizationError, match="expected dtype float32, got float64"):
        quantizer.calibrate(np.zeros((2, 1, 4, 4)))
    with pytest.raises(QuantizationError, match="expected dtype float32, got uint8"):
        quantizer.calibrate(np.zeros((2, 1, 4, 4), np.uint8))


def test_wrong_shape(quantizer):
    with pytest.raises(QuantizationError, match=r"expected shape \(N, 1, 4, 4\) in NCHW layout .* got \(2, 1, 8, 8\)"):
        quantizer.calibrate(np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(QuantizationError, match=r"expected shape \(N, 4, 4, 1\) in NHWC layout .* got \(2, 1, 4, 4\)"):
        quantizer.calibrate(np.zeros((2, 1, 4, 4), np.float32), layout="NHWC")
    with pytest.raises(QuantizationError, match=r"expected a 4-D array in NCHW layout, got shape \(1, 4, 4\)"):
        quantizer.calibrate(np.zeros((1, 4, 4), np.float32))
    with pytest.raises(QuantizationError, match="layout 'CHW' is not one of NCHW, NHWC"):
        quantizer.calibrate(np.zeros((1, 1, 4, 4), np.float32), layout="CHW")


def test_empty_data_set(quantizer, tmp_path):
    with pytest.raises(QuantizationError, match=r"empty \(0 samples\)"):
        quantizer.calibrate(np.zeros((0, 1, 4, 4), np.float32))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("not an image")
    with pytest.raises(QuantizationError, match="the data set is empty"):
        quantizer.calibrate(tmp_path)
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(QuantizationError, match="has no class sub-folders"):
        quantizer.calibrate(empty)


def test_nan_and_inf_in_data(quantizer):
    x = np.zeros((3, 1, 4, 4), np.float32)
    x[1, 0, 2, 3] = np.nan
    x[2, 0, 0, 0] = np.inf
    with pytest.raises(QuantizationError, match=r"1 NaN and 1 Inf value\(s\) \(first at index \(1, 0, 2, 3\)\)"):
        quantizer.calibrate(x)


def test_nan_in_weights():
    net = tiny_net()
    net["fc"].params["weight"][1, 5] = np.nan
    with pytest.raises(QuantizationError, match="layer 'fc': weight contains 1 NaN and 0 Inf"):
        Quantizer(net)
    net = tiny_net()
    net["conv"].params["bias"][0] = -np.inf
    with pytest.raises(QuantizationError, match="layer 'conv': bias contains 0 NaN and 1 Inf"):
        Quantizer(net)


def test_bad_method_and_percentile(quantizer):
    x = np.ones((1, 1, 4, 4), np.float32)
    with pytest.raises(QuantizationError, match="method 'kl' is not one of minmax, percentile, entropy"):
        quantizer.calibrate(x, method="kl")
    with pytest.raises(QuantizationError, match=r"percentile must be in \(50, 100\], got 120"):
        quantizer.calibrate(x, method="percentile", percentile=120)


def test_labels(quantizer):
    x = np.ones((3, 1, 4, 4), np.float32)
    quantizer.calibrate(x)
    with pytest.raises(QuantizationError, match="needs labels"):
        quantizer.validate(x)
    with pytest.raises(QuantizationError, match=r"expected labels of shape \(3,\), got \(2,\)"):
        quantizer.validate(x, labels=np.array([0, 1]))
    with pytest.raises(QuantizationError, match="expected integer labels, got dtype float64"):
        quantizer.validate(x, labels=np.array([0.0, 1.0, 2.0]))


def test_missing_and_unknown_data_paths(quantizer, tmp_path):
    with pytest.raises(QuantizationError, match="data file .*missing.npy' does not exist"):
        quantizer.calibrate(tmp_path / "missing.npy")
    with pytest.raises(QuantizationError, match="does not exist"):
        quantizer.calibrate(tmp_path / "nothing")
    with pytest.raises(QuantizationError, match="digits split 'test' is not one of"):
        quantizer.calibrate("digits:test")
    with pytest.raises(QuantizationError, match="gives 1 x S x S images; the network input is 3x16x16"):
        load_data("digits", (3, 16, 16))
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"garbage")
    with pytest.raises(QuantizationError, match="not a readable .npy file"):
        quantizer.calibrate(bad)


def _write_images(root, classes, size, mode):
    rng = np.random.default_rng(0)
    arrays = {}
    for name in classes:
        (root / name).mkdir()
        for i in range(2):
            shape = (size[1], size[0]) if mode == "L" else (size[1], size[0], 3)
            arr = rng.integers(0, 256, shape, dtype=np.uint8)
            Image.fromarray(arr, mode).save(root / name / f"img{i}.png")
            arrays[(name, i)] = arr
    return arrays


def test_image_folder_labels_resize_and_scaling(tmp_path):
    arrays = _write_images(tmp_path, ["zebra", "apple"], (4, 4), "L")
    ds = load_image_folder(tmp_path, (1, 4, 4))
    assert ds.classes == ["apple", "zebra"]  # sorted folder names, like imageDatastore
    np.testing.assert_array_equal(ds.y, [0, 0, 1, 1])
    assert ds.x.dtype == np.float32 and ds.x.shape == (4, 1, 4, 4)
    np.testing.assert_allclose(ds.x[2, 0], arrays[("zebra", 0)] / 255.0, rtol=1e-6)
    # RGB images resized to an 8x6 network input, channels first.
    rgb = tmp_path / "rgb"
    rgb.mkdir()
    _write_images(rgb, ["c0"], (12, 10), "RGB")
    ds = load_image_folder(rgb, (3, 6, 8))
    assert ds.x.shape == (2, 3, 6, 8) and 0.0 <= ds.x.min() and ds.x.max() <= 1.0
    with pytest.raises(QuantizationError, match="has 2 channels; images can feed only 1"):
        load_image_folder(rgb, (2, 6, 8))


def test_image_folder_does_not_take_labels(tmp_path):
    _write_images(tmp_path, ["a"], (4, 4), "L")
    labels = tmp_path / "y.npy"
    np.save(labels, np.array([0, 0]))
    with pytest.raises(QuantizationError, match="labels come from its sub-folder names"):
        load_data(tmp_path, (1, 4, 4), labels=labels)


def test_from_array_nhwc_is_transposed():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)  # N, H, W, C
    ds = from_array(x, "NHWC", (5, 3, 4))
    np.testing.assert_array_equal(ds.x, x.transpose(0, 3, 1, 2))
