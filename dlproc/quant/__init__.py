"""dlproc's quantizer: calibrate a float network, quantize it to int8, validate it.

See :mod:`dlproc.quant.quantizer` for the workflow and ``docs/quantizer.md`` for the scheme.
"""

from .calibrate import METHODS
from .data import Dataset, digits_dataset, load_data
from .qnet import FORMAT_VERSION, QLayer, QuantizedNetwork
from .quantizer import Quantizer, choose_qparams, top1_accuracy
from .report import CalibrationTable, LayerErrorTable, ValidationTable

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
