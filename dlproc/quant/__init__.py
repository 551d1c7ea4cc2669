"""dlproc's quantizer: calibrate a float network, quantize it to int8, validate it.

See :mod:`dlproc.quant.quantizer` for the workflow and ``docs/quantizer.md`` for the scheme.
"""

from dlproc.quant.calibrate import METHODS
from dlproc.quant.data import Dataset, digits_dataset, load_data
from dlproc.quant.qnet import FORMAT_VERSION, QLayer, QuantizedNetwork
from dlproc.quant.quantizer import Quantizer, choose_qparams, top1_accuracy
from dlproc.quant.report import CalibrationTable, LayerErrorTable, ValidationTable

__all__ = [
    "Quantizer",
    "QuantizedNetwork",
    "QLayer",
    "FORMAT_VERSION",
    "METHODS",
    "Dataset",
    "load_data",
    "digits_dataset",
    "choose_qparams",
    "top1_accuracy",
    "CalibrationTable",
    "ValidationTable",
    "LayerErrorTable",
]
