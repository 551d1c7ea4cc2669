"""The digits example end to end: committed model, data split, calibrate / quantize / validate."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from dlproc.quant import Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_HELDOUT, DIGITS_MODEL


def test_digits_dataset_split():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x_tr, y_tr = digits_dataset("train")
    x_ho, y_ho = digits_dataset("heldout")
    assert x_tr.shape == (1797 - DIGITS_HELDOUT, 1, 16, 16) and x_ho.shape == (DIGITS_HELDOUT, 1, 16, 16)
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int64
    np.testing.assert_array_equal(np.concatenate([y_tr, y_ho]), digits.target)
    # Nearest upsampling of the 8x8 image scaled to [0, 1]: every 2x2 block is one source pixel.
    np.testing.assert_array_equal(x_ho[-1, 0, ::2, ::2], digits.images[-1] / 16.0)
    np.testing.assert_array_equal(x_ho[-1, 0, 1::2, 1::2], digits.images[-1] / 16.0)
    assert x_tr.min() == 0.0 and x_tr.max() == 1.0
    assert digits_dataset("all", size=8)[0].shape == (1797, 1, 8, 8)


def test_committed_model_accuracy_with_onnx_runtime():
    x, y = digits_dataset("heldout")
    sess = ort.InferenceSession(str(DIGITS_MODEL), providers=["CPUExecutionProvider"])
    prob = sess.run(None, {"input": x})[0]
    assert prob.shape == (DIGITS_HELDOUT, 10)
    assert np.mean(prob.argmax(axis=1) == y) >= 0.95
    assert DIGITS_MODEL.stat().st_size < 64 * 1024


@pytest.fixture(scope="module")
def digits_quantizer():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    q.quantize()
    return q


def test_validate_int8_within_one_point_of_float(digits_quantizer):
    table = digits_quantizer.validate("digits:heldout")
    f, i = table.value("floating point"), table.value("quantized")
    assert f >= 0.95
    assert abs(f - i) <= 0.01
    rows = {r.implementation: r for r in table}
    # conv1 8*9+8, conv2 16*72+16, fc 10*256+10 parameters.
    n_w, n_b = 8 * 9 + 16 * 72 + 10 * 256, 8 + 16 + 10
    assert rows["floating point"].learnable_parameter_memory_bytes == 4 * (n_w + n_b)
    assert rows["quantized"].learnable_parameter_memory_bytes == n_w + 4 * n_b
    assert rows["quantized"].metric_name == "top-1 accuracy"
    text = str(table)
    assert "floating point" in text and "quantized" in text and "LearnableParameterMemory" in text


def test_validate_with_a_custom_metric_and_explicit_arrays(digits_quantizer):
    x, y = digits_dataset("heldout")
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    def errors(outputs, labels):
        return float(np.sum(outputs.reshape(len(labels), -1).argmax(axis=1) != labels))

    table = digits_quantizer.validate(x_nhwc, labels=y, metric=errors, layout="NHWC")
    default = digits_quantizer.validate(x, labels=y)
    assert table[0].metric_name == "errors"
    assert table.value("quantized") == pytest.approx(round((1 - default.value("quantized")) * len(y)))
    assert table.value("floating point") == pytest.approx(round((1 - default.value("floating point")) * len(y)))


def test_layer_errors_on_digits(digits_quantizer):
    table = digits_quantizer.layer_errors("digits:heldout")
    names = [r.layer for r in table]
    assert names == ["input", "conv1", "pool1", "conv2", "pool2", "fc", "softmax"]
    rows = {r.layer: r for r in table}
    # The input is only rounded: at most half a step of 1/255.
    assert rows["input"].max_abs_error <= 0.5 / 255 + 1e-7
    assert all(r.sqnr_db > 25 for r in table)
    assert table.worst().sqnr_db == min(r.sqnr_db for r in table)
    assert "SQNR" in str(table)
