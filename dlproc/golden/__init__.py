"""The golden model: the bit-exact integer reference of the processor and its float counterpart.

``dlproc.golden.ops`` implements each hardware operation exactly as ``docs/numerics.md`` defines it;
``dlproc.golden.float_ops`` is the float32 reference of the same operations (ONNX semantics).
"""

from . import float_ops, ops

__all__ = ["float_ops", "ops"]
