"""Reference networks built in code (random weights) for benchmarks and tests."""

from dlproc.models.googlenet import INCEPTION, InceptionSpec, googlenet_macs, googlenet_onnx
from dlproc.models.zoo import ZOO, ZooEntry, build_zoo_model, zoo_entry

__all__ = ["INCEPTION", "InceptionSpec", "googlenet_macs", "googlenet_onnx", "ZOO", "ZooEntry", "build_zoo_model",
           "zoo_entry"]
