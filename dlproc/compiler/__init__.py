"""The dlproc network compiler: quantized network + ProcessorConfig -> compiled network.

    from dlproc.compiler import compile_network
    cn = compile_network(qnet, config)      # CompiledNetwork
    print(cn.report())                      # layer list, notices, layer groups, memory map

See :mod:`dlproc.compiler.compile` for the passes and ``docs/compiler.md`` for the details.
"""

from dlproc.compiler.compile import CompiledNetwork, LayerEntry, ProfileEntry, TensorEntry, compile_network
from dlproc.compiler.memory import MemoryMap, Region
from dlproc.compiler.partition import Assignment, partition

__all__ = ["compile_network", "CompiledNetwork", "LayerEntry", "ProfileEntry", "TensorEntry", "MemoryMap",
           "Region", "Assignment", "partition"]
