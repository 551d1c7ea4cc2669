"""The network compiler: quantized network + ProcessorConfig -> :class:`CompiledNetwork`.

Passes, in order (``docs/compiler.md`` explains each):

1. partition (:mod:`.partition`): every layer HW or SW, with notices;
2. lowering (:mod:`.lower`): HW layers -> conv/pool/add/upsample/lrn operations on DRAM tensors
   (FC as a conv, concat by strided stores, first-layer folding);
3. weight layout: each operation's weight and parameter images (layerprog's packing);
4. memory planning (:mod:`.memory`): the memory map and liveness-based activation placement;
5. tiling and emission of every operation (layerprog's planner, via :mod:`.layeremit`);
6. linking (:mod:`.program`): the tokens that join operations (a weak join where the next operation
   does not need the previous one's stores, else a full barrier), MARKs for the profiler, FINISH;
   the linked stream is then checked by :mod:`.hazards` (every conflicting pair of accesses ordered
   by the tokens), unless ``DLPROC_CHECK_HAZARDS=0``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlproc.hardware import isa
from dlproc.errors import CompileError
from dlproc.hardware.geometry import Geometry
from dlproc.compiler.planners.schedule import ConvAddrs

from dlproc.compiler import hazards, layeremit
from dlproc.compiler.lower import HwOp, lower
from dlproc.compiler.memory import REGION_ALIGN, TENSOR_ALIGN, MemoryMap, Region, align, place_tensors
from dlproc.compiler.partition import partition
from dlproc.compiler.program import LinkedProgram, link

__all__ = ["LayerEntry", "TensorEntry", "ProfileEntry", "CompiledNetwork", "compile_network"]


@dataclass
class LayerEntry:
    """One row of the layer table."""

    name: str
    op: str
    hw: bool
    shape: tuple[int, int, int]
    insn_first: int = 0
    insn_count: int = 0
    profile_index: int = -1  #: profile entry (MARK index) whose interval covers this layer; -1 none
    macs: int = 0
    note: str = ""
    inputs: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)  #: JSON-able attributes (SW layers run from these)
    scale: float = 1.0
    zero_point: int = 0


@dataclass
class TensorEntry:
    """A tensor exchanged with the host: where it lives and how to (de)quantize it."""

    name: str
    shape: tuple[int, int, int]  #: (C, H, W) of the network tensor
    scale: float
    zero_point: int
    offset: int  #: byte offset from the base address
    stored_shape: tuple[int, int, int] | None = None  #: shape in DRAM if the host transforms it (im2col)
    transform: dict[str, Any] | None = None

    @property
    def dram_shape(self) -> tuple[int, int, int]:
        return self.stored_shape or self.shape


@dataclass
class ProfileEntry:
    """Profile entry ``index`` (MARK index) covers ``layers``; its cycles end at that MARK."""

    index: int
    layers: list[str]
    macs: int


@dataclass
class CompiledNetwork:
    """Everything the processor and the host need to run a network (what the .dlnet file holds)."""

    name: str
    config: dict[str, Any]  #: ProcessorConfig.to_dict() of the target
    config_hash: str  #: ProcessorConfig.config_hash() (hex sha256)
    c: int
    bus_bytes: int
    clock_mhz: float
    memory_map: MemoryMap
    instructions: bytes
    conv_weights: bytes
    fc_weights: bytes
    layers: list[LayerEntry]
    profile: list[ProfileEntry]
    input: TensorEntry
    outputs: list[TensorEntry]  #: tensors the host reads back, in OutputResultOffset
    network_outputs: list[str]
    notices: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    groups: list[list[str]] = field(default_factory=list)

    @property
    def base(self) -> int:
        return self.memory_map.base

    @property
    def insn_count(self) -> int:
        return len(self.instructions) // isa.INSN_BYTES

    @property
    def hash64(self) -> int:
        return int(self.config_hash[:16], 16)

    def layer(self, name: str) -> LayerEntry:
        for entry in self.layers:
            if entry.name == name:
                return entry
        raise CompileError(f"compiled network {self.name!r} has no layer {name!r}")

    def dram_image(self) -> list[tuple[int, bytes]]:
        """(absolute address, bytes) pieces that deploy() writes: instructions and weights."""
        mm = self.memory_map
        pieces = [(mm.addr("InstructionDataOffset"), self.instructions),
                  (mm.addr("ConvWeightDataOffset"), self.conv_weights)]
        if "FCWeightDataOffset" in mm:
            pieces.append((mm.addr("FCWeightDataOffset"), self.fc_weights))
        return [(a, b) for a, b in pieces if b]

    def processor_config(self) -> Any:
        from dlproc.config import ProcessorConfig
        return ProcessorConfig.from_dict(self.config, source=f"compiled network {self.name!r}")

    def report(self) -> str:
        from dlproc.compiler.report import compile_report
        return compile_report(self)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "kind") and hasattr(v, "alpha"):  # ir.Activation
        return {"kind": v.kind, "alpha": v.alpha, "lo": v.lo, "hi": v.hi, "beta": v.beta}
    return v


def _boundary(qnet: Any, hw: set[str]) -> list[str]:
    """HW tensors the host reads: network outputs and inputs of SW layers (in network order)."""
    out = []
    for layer in qnet.layers:
        if layer.name in hw:
            continue
        for src in layer.inputs:
            if src in hw and src not in out:
                out.append(src)
    for name in qnet.outputs:
        if name in hw and name not in out:
            out.append(name)
    return out


def _weight_images(geom: Geometry, ops: list[HwOp]) -> tuple[list[dict[str, tuple[int, int]]], bytes, bytes]:
    """Per op {"wgt"/"prm": (region, offset)} and the two weight region images."""
    images = {"conv": bytearray(), "fc": bytearray()}
    where = []
    for op in ops:
        entry: dict[str, tuple[str, int]] = {}
        if op.kind == "conv":
            w, p = layeremit.conv_images(geom, op.spec, op.in_shape)
            blobs = [("wgt", w), ("prm", p)]
        elif op.kind == "pool":
            blobs = [("prm", layeremit.pool_param_image(geom, op.spec, op.in_shape))]
        elif op.kind == "lrn":
            blobs = [("prm", layeremit.lrn_table_image(geom, op.spec))]
        elif op.kind == "convtranspose":
            w, p = layeremit.convtranspose_images(geom, op.spec, op.in_shape)
            blobs = [("wgt", w), ("prm", p)]
        elif op.kind == "fc":
            blobs = list(zip(("wgt", "prm"), layeremit.fc_images(geom, op.spec, op.in_shape)))
        elif op.kind == "softmax":
            blobs = [("prm", layeremit.softmax_table_image(geom, op.spec))]
        else:  # add, upsample: no parameters
            blobs = []
        if getattr(op.spec, "act_table", None) is not None:
            blobs.append(("tab", layeremit.act_table_image(geom, op.spec.act_table)))
        img = images[op.weights]
        for key, data in blobs:
            if not data:
                continue
            entry[key] = (op.weights, len(img))
            img.extend(data)
            img.extend(bytes(align(len(img), TENSOR_ALIGN) - len(img)))
        where.append(entry)  # type: ignore[arg-type]
    return where, bytes(images["conv"]), bytes(images["fc"])  # type: ignore[return-value]


def _merge_streams(linked: LinkedProgram, owner: list[int]) -> LinkedProgram:
    """The linked program with one instruction range per op (a table load joins its op's range)
    and the joins between ops only."""
    ranges: list[tuple[int, int]] = []
    joins: list[str] = []
    for k, (lo, hi) in enumerate(linked.op_ranges):
        if k and owner[k] == owner[k - 1]:
            ranges[-1] = (ranges[-1][0], hi)
        else:
            if k:
                joins.append(linked.joins[k - 1])
            ranges.append((lo, hi))
    return LinkedProgram(linked.instructions, ranges, joins)


def _mark_groups(ops: list[HwOp], depth: int) -> list[list[int]]:
    """Operation indices per profile entry: one entry per layer, merged if they exceed the buffer."""
    units: list[list[int]] = []
    for i, op in enumerate(ops):
        if units and ops[units[-1][0]].layer == op.layer:
            units[-1].append(i)
        else:
            units.append([i])
    per = -(-len(units) // depth)
    return [sum(units[k:k + per], []) for k in range(0, len(units), per)]


def _layer_groups(qnet: Any, hw: set[str]) -> list[list[str]]:
    """MATLAB-style layer groups: a conv/fc with the pools that directly follow it."""
    groups: list[list[str]] = []
    for layer in qnet.layers:
        if layer.name not in hw or layer.op == "concat":
            continue
        prev = groups[-1] if groups else None
        consumers = [l for l in qnet.layers if prev and prev[-1] in l.inputs]
        if (prev and layer.op in ("maxpool", "avgpool", "global_avgpool") and layer.inputs[0] == prev[-1]
                and len(consumers) == 1):
            prev.append(layer.name)
        else:
            groups.append([layer.name])
    return groups


def compile_network(qnet: Any, config: Any, *, base: int = 0, fold_input: bool = True) -> CompiledNetwork:
    """Compile a :class:`dlproc.quant.QuantizedNetwork` for ``config`` (see the module docstring).

    ``base`` is the DRAM byte address of InputDataOffset (a multiple of 4 KiB); every DRAM address
    in the instructions is absolute. ``fold_input=False`` disables first-layer folding.
    """
    if base % REGION_ALIGN:
        raise CompileError(f"base address {base:#x} must be a multiple of {REGION_ALIGN}")
    if len(qnet.inputs) != 1:
        raise CompileError(f"network {qnet.name!r} has {len(qnet.inputs)} inputs; the compiler handles one")
    assignments = partition(qnet, config)
    hw = {a.name for a in assignments if a.hw}
    if not hw:
        raise CompileError(f"network {qnet.name!r} has no layer the processor can run")
    geom = Geometry.from_config(config)
    boundary = _boundary(qnet, hw)
    low = lower(qnet, hw, geom, set(boundary), fold_input)
    pitch = geom.pitch("INP")

    weights_at, conv_img, fc_img = _weight_images(geom, low.ops)
    where, in_bytes, out_bytes, act_bytes = place_tensors(low, geom.c, pitch, boundary)

    # Regions before the instructions are fixed now; the instruction size is known only after
    # emission, so the weights are first addressed as if they followed the activations directly and
    # the WGT/PRM loads are shifted once the instruction region is sized.
    offsets: dict[str, int] = {}
    sizes = {"InputDataOffset": in_bytes, "OutputResultOffset": out_bytes, "SchedulerDataOffset": act_bytes}
    at = 0
    for name in ("InputDataOffset", "OutputResultOffset", "SchedulerDataOffset"):
        offsets[name] = at
        at = align(at + sizes[name], REGION_ALIGN)
    provisional = at
    conv_rel = 0
    fc_rel = align(len(conv_img), REGION_ALIGN)

    def addr_of_tensor(name: str) -> int:
        region, off = where[name]
        return base + offsets[region] + off

    def addr_of_weights(entry: tuple[str, int] | None) -> int:
        if entry is None:
            return base + provisional
        region, off = entry
        return base + provisional + (conv_rel if region == "conv" else fc_rel) + off

    # Streams the linker joins: one per op, and the table load in front of an op with an
    # activation table as a stream of its own (planners/act_table.py); ``owner[k]`` is the op of
    # stream k.
    op_insns: list[list[isa.Instruction]] = []
    owner: list[int] = []
    plans = []
    for i, op in enumerate(low.ops):
        addrs = ConvAddrs(addr_of_tensor(op.src), addr_of_weights(weights_at[i].get("wgt")),
                          addr_of_weights(weights_at[i].get("prm")), addr_of_tensor(op.dst))
        try:
            if op.kind == "add":
                emitted = layeremit.emit_add(geom, op.spec, op.in_shape, addrs, addr_of_tensor(op.src2), config)
            else:
                emit = {"conv": layeremit.emit_conv, "pool": layeremit.emit_pool, "upsample": layeremit.emit_upsample,
                        "lrn": layeremit.emit_lrn, "convtranspose": layeremit.emit_convtranspose,
                        "fc": layeremit.emit_fc, "softmax": layeremit.emit_softmax}[op.kind]
                emitted = emit(geom, op.spec, op.in_shape, addrs, config)
        except CompileError as exc:
            # An FC that runs as a convolution says why it is not on the FC engine (its note).
            fallback = f" ({op.note})" if op.kind == "conv" and op.weights == "fc" and op.note else ""
            raise CompileError(f"layer {op.layer!r}: {exc}{fallback}") from None
        insns = emitted.instructions
        if getattr(op.spec, "act_table", None) is not None:
            try:
                op_insns.append(layeremit.act_table_load(geom, addr_of_weights(weights_at[i].get("tab"))))
            except CompileError as exc:
                raise CompileError(f"layer {op.layer!r}: {exc}") from None
            owner.append(i)
            insns = layeremit.with_table_flag(insns)
        op_insns.append(insns)
        owner.append(i)
        plans.append(emitted.plan)

    groups = _mark_groups(low.ops, geom.hw.profile_depth)
    last_stream = {i: k for k, i in enumerate(owner)}  # the op's own instructions come last
    mark_after = {last_stream[grp[-1]]: k for k, grp in enumerate(groups)}
    linked = _merge_streams(link(geom, op_insns, mark_after), owner)

    insn_bytes = len(linked.instructions) * isa.INSN_BYTES
    offsets["InstructionDataOffset"] = provisional
    offsets["ConvWeightDataOffset"] = align(provisional + insn_bytes, REGION_ALIGN)
    shift = offsets["ConvWeightDataOffset"] - provisional
    for insn in linked.instructions:
        if isinstance(insn, isa.Load) and insn.buf in (isa.Buf.WGT, isa.Buf.PRM):
            insn.dram_addr += shift
    regions = [Region(n, offsets[n], sizes[n]) for n in ("InputDataOffset", "OutputResultOffset",
                                                         "SchedulerDataOffset")]
    regions.append(Region("InstructionDataOffset", provisional, insn_bytes))
    regions.append(Region("ConvWeightDataOffset", offsets["ConvWeightDataOffset"], len(conv_img)))
    if fc_img:
        regions.append(Region("FCWeightDataOffset", offsets["ConvWeightDataOffset"] + fc_rel, len(fc_img)))
        end = align(offsets["ConvWeightDataOffset"] + fc_rel + len(fc_img), REGION_ALIGN)
    else:
        end = align(offsets["ConvWeightDataOffset"] + len(conv_img), REGION_ALIGN)
    regions.append(Region("EndOffset", end, end))
    mm = MemoryMap(base, regions)
    for insn in linked.instructions:
        try:
            insn.validate(geom.hw)
        except isa.InstructionError as exc:
            raise CompileError(f"internal error, an emitted instruction is invalid: {exc}") from None
        if isinstance(insn, (isa.Load, isa.Store)) and not base <= insn.dram_addr < base + end:
            raise CompileError(f"internal error: a {type(insn).__name__} addresses {insn.dram_addr:#x} outside the "
                               f"network's memory [{base:#x}, {base + end:#x})")

    if os.environ.get("DLPROC_CHECK_HAZARDS", "1") != "0":
        problems = hazards.check_program(geom, linked.instructions)
        if problems:
            raise CompileError(f"internal error: the program of {qnet.name!r} has hazards: "
                               + "; ".join(str(p) for p in problems[:3]))
    layers = _layer_table(qnet, assignments, low.ops, linked.op_ranges, groups)
    profile = [ProfileEntry(k, list(dict.fromkeys(low.ops[i].layer for i in grp)),
                            sum(low.ops[i].macs for i in grp)) for k, grp in enumerate(groups)]
    in_layer = qnet[qnet.inputs[0]]
    input_entry = TensorEntry(in_layer.name, in_layer.shape.as_tuple(), float(in_layer.scale),
                              int(in_layer.zero_point), offsets["InputDataOffset"] + where[low.input_tensor][1],
                              low.fold.shape if low.fold else None, low.fold.to_dict() if low.fold else None)
    outputs = []
    for name in boundary:
        q = qnet[name]
        region, off = where[name]
        outputs.append(TensorEntry(name, q.shape.as_tuple(), float(q.scale), int(q.zero_point), offsets[region] + off))
    notices = [a.notice for a in assignments if a.notice]  # software layers and hardware fallbacks
    return CompiledNetwork(
        name=qnet.name, config=config.to_dict(), config_hash=config.config_hash(), c=geom.c,
        bus_bytes=geom.bus_bytes, clock_mhz=float(config.target_frequency_mhz), memory_map=mm,
        instructions=isa.encode_program(linked.instructions), conv_weights=conv_img, fc_weights=fc_img,
        layers=layers, profile=profile, input=input_entry, outputs=outputs, network_outputs=list(qnet.outputs),
        notices=notices, notes=low.notes + _plan_notes(low.ops, plans) + _link_notes(linked.joins),
        groups=_layer_groups(qnet, hw))


def _link_notes(joins: list[str]) -> list[str]:
    if not joins:
        return []
    return [f"linking: {joins.count('weak')} of {len(joins)} operation boundaries joined without a full barrier "
            "(the next operation does not wait for the previous one's stores)"]


def _plan_notes(ops: list[HwOp], plans: list[Any]) -> list[str]:
    notes = []
    for op, plan in zip(ops, plans):
        notes.append(f"{op.layer}: {op.kind} {op.in_shape[0]}x{op.in_shape[1]}x{op.in_shape[2]} -> "
                     f"{op.out_shape[0]}x{op.out_shape[1]}x{op.out_shape[2]}, tile {plan.tile[0]}x{plan.tile[1]}, "
                     f"{plan.steps} step(s), {plan.order}, weights {plan.weights}, "
                     + (f"{plan.note}, " if plan.note else "")
                     + (f"reduction split into {plan.chunks} partial-sum CONVs per output block (its weights or "
                        "input do not fit the buffers), " if plan.chunks > 1 and not plan.note else "")
                     + f"estimated {plan.estimated_cycles} cycles")
    return notes


def _layer_table(qnet: Any, assignments: list, ops: list[HwOp], ranges: list[tuple[int, int]],
                 groups: list[list[int]]) -> list[LayerEntry]:
    entry_of_op = {i: k for k, grp in enumerate(groups) for i in grp}
    by_layer: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        by_layer.setdefault(op.layer, []).append(i)
    out = []
    for layer, a in zip(qnet.layers, assignments):
        idx = by_layer.get(layer.name, [])
        first = ranges[idx[0]][0] if idx else 0
        end = ranges[idx[-1]][1] if idx else 0
        notes = [ops[i].note for i in idx if ops[i].note]
        out.append(LayerEntry(
            name=layer.name, op=layer.op, hw=a.hw, shape=layer.shape.as_tuple(), insn_first=first,
            insn_count=end - first, profile_index=entry_of_op[idx[-1]] if idx else -1,
            macs=sum(ops[i].macs for i in idx), note="; ".join(dict.fromkeys(notes)) or a.notice,
            inputs=list(layer.inputs), attrs=_jsonable(layer.attrs), scale=float(layer.scale),
            zero_point=int(layer.zero_point)))
    return out
