"""The golden model: the bit-exact integer reference of the processor and its float counterpart.

``dlproc.targets.golden.ops`` implements each hardware operation exactly as ``docs/numerics.md`` defines it;
``dlproc.targets.golden.float_ops`` is the float32 reference of the same operations (ONNX semantics).
"""

from dlproc.targets.golden import float_ops, ops

__all__ = ["float_ops", "ops"]
