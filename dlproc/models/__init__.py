"""Reference networks built in code (random weights) for benchmarks and tests."""

from dlproc.models.googlenet import INCEPTION, InceptionSpec, googlenet_macs, googlenet_onnx

__all__ = ["INCEPTION", "InceptionSpec", "googlenet_macs", "googlenet_onnx"]
