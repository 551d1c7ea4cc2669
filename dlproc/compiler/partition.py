"""Hardware/software partition: which layers the processor runs, which the host runs, and why.

Every layer of a quantized network is tagged HW or SW. A SW layer gets a notice that says why it
runs on the host (MATLAB prints the same after its layer list). A layer that the configuration
cannot run and that has no software fallback is a :class:`CompileError` naming the property to
turn on: ``add``, ``upsample`` and ``lrn`` run on optional blocks (adder.ModuleGeneration,
conv.SegmentationBlockGeneration, conv.LRNBlockGeneration), decided by
``isa.HardwareParams.has_block``. ``fc`` runs on the FC engine when fc.ModuleGeneration is on, else
on the conv module as a convolution (a hardware fallback with a notice); ``softmax`` runs on the
softmax block (SMXTAB/SOFTMAX) when the configuration has it and the network was quantized for it
(an int8 softmax layer), else on the host in float with a notice.

A transposed convolution (``convtranspose``) runs on the conv engine as stride-1 convolutions
of its output phases (``docs/compiler.md``), so it needs only conv.ModuleGeneration, not the
segmentation block; the lowering notes this where conv.SegmentationBlockGeneration is off.

The processor runs one instruction stream per frame, so software layers can only come *after*
the hardware part: a SW layer whose output a HW layer consumes is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlproc.hardware import isa
from dlproc.errors import CompileError

__all__ = ["Assignment", "partition", "HW_OPS"]

#: Operators the instruction set executes (conv-format layers, FC as a convolution, memory-level concat).
HW_OPS = ("conv", "fc", "maxpool", "avgpool", "global_avgpool", "act", "concat", "convtranspose", "channels")

#: Operators that need an optional block: (opcode, what it needs); the property to turn on is
#: ``isa.OPTIONAL_BLOCKS[opcode]``'s (adder.ModuleGeneration, conv.SegmentationBlockGeneration,
#: conv.LRNBlockGeneration).
_BLOCK_OPS = {
    "add": (isa.Opcode.ADD, "the adder module"),
    "mul": (isa.Opcode.ADD, "the adder module"),
    "upsample": (isa.Opcode.UPSAMPLE, "the segmentation block"),
    "lrn": (isa.Opcode.LRN, "the LRN block"),
}


@dataclass
class Assignment:
    """One layer's placement: ``hw`` True for the processor; ``notice`` why it runs in software."""

    name: str
    op: str
    hw: bool
    notice: str = ""


def _switch(config: Any, module: str, prop: str) -> bool:
    try:
        return bool(config.get_module_property(module, prop))
    except Exception:  # a property this configuration schema does not have counts as off
        return False


def _has_block(config: Any, opcode: isa.Opcode) -> bool:
    try:
        return isa.HardwareParams.from_config(config).has_block(opcode)
    except Exception:  # a configuration the hardware parameters cannot be derived from has no blocks
        return False


def _assign(layer: Any, config: Any) -> Assignment:
    op = layer.op
    name = layer.name
    if op == "input":
        return Assignment(name, op, False, f"{name} (input) runs in software: the host quantizes the float "
                                           "input (and folds the first layer's taps, if any) before the run")
    if op == "softmax":
        int8 = bool(getattr(layer, "hardware", False)) and "exp_table" in getattr(layer, "params", {})
        if int8 and not _has_block(config, isa.Opcode.SOFTMAX):
            # The host has only the float softmax, which is not what this network was quantized to.
            raise CompileError(f"layer {name!r} (softmax) was quantized as the softmax block's int8 softmax; turn on "
                               "fc.SoftmaxBlockGeneration and fc.ModuleGeneration, or quantize the network without "
                               "the block for a float softmax on the host")
        if _has_block(config, isa.Opcode.SOFTMAX):
            if int8:
                return Assignment(name, op, True)  # SMXTAB + SOFTMAX on the softmax block
            why = ("the network was quantized without the softmax block (float softmax); quantize it with "
                   "this configuration (Quantizer(net, config=...)) to run the int8 softmax on the block, "
                   "so the host computes it in float")
        elif _switch(config, "fc", "SoftmaxBlockGeneration"):
            why = "fc.ModuleGeneration is off, which removes the softmax block (the host computes it in float)"
        else:
            why = "SoftmaxBlockGeneration is off (the host computes it in float)"
        return Assignment(name, op, False, f"{name} (softmax) runs in software because {why}")
    if op in ("yolo", "region"):
        return Assignment(name, op, False, f"{name} ({op}) runs in software: detection heads always run on "
                                           "the host, as in MATLAB")
    if op in HW_OPS:
        if not config.module_enabled("conv"):
            raise CompileError(f"layer {name!r} ({op}) runs on the conv module, which is disabled; "
                               "turn on conv.ModuleGeneration")
        if op == "act" and "act_table" in getattr(layer, "params", {}) and not _has_block(config, isa.Opcode.ACTTAB):
            kind = layer.activation.kind if layer.activation is not None else "table"
            raise CompileError(f"layer {name!r} (act, {kind}) needs the activation table; turn on "
                               "conv.ActivationTableGeneration (or fc.SigmoidBlockGeneration)")
        if op == "fc" and not _has_block(config, isa.Opcode.FC):
            return Assignment(name, op, True, f"{name} (fc) runs on the conv module as a convolution (hardware "
                                              "fallback) because fc.ModuleGeneration is off")
        return Assignment(name, op, True)
    if op in _BLOCK_OPS:
        opcode, what = _BLOCK_OPS[op]
        _, module, prop = isa.OPTIONAL_BLOCKS[opcode]
        if not _has_block(config, opcode):
            raise CompileError(f"layer {name!r} ({op}) needs {what}; turn on {module}.{prop}")
        if not config.module_enabled("conv"):
            raise CompileError(f"layer {name!r} ({op}) runs on the conv module's buffers, which is disabled; "
                               "turn on conv.ModuleGeneration")
        if op == "mul" and not isa.HardwareParams.from_config(config).multiply:
            raise CompileError(f"layer {name!r} (mul) needs the adder's element-wise multiply; turn on "
                               "adder.Multiplication")
        return Assignment(name, op, True)
    raise CompileError(f"layer {name!r}: operator {op!r} has neither a hardware nor a software implementation")


def partition(qnet: Any, config: Any) -> list[Assignment]:
    """Assign every layer of ``qnet`` to HW or SW; raise CompileError for layers nothing can run."""
    out = [_assign(layer, config) for layer in qnet.layers]
    by_name = {a.name: a for a in out}
    for layer in qnet.layers:
        a = by_name[layer.name]
        if not a.hw:
            continue
        for src in layer.inputs:
            s = by_name[src]
            if not s.hw and s.op != "input":
                raise CompileError(
                    f"hardware layer {layer.name!r} ({layer.op}) consumes the output of software layer {src!r} "
                    f"({s.op}); software layers can only follow the hardware part of the network")
    return out
