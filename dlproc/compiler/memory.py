"""External-memory planning: the memory map and the DRAM place of every tensor.

Regions, in MATLAB's order, each starting on a 4 KiB boundary (offsets relative to the network's
base address):

``InputDataOffset``        the network input (after host-side folding), one frame
``OutputResultOffset``     the tensors the host reads back (network outputs, inputs of SW layers)
``SchedulerDataOffset``    intermediate activations (MATLAB's name for the hand-off between kernels)
``InstructionDataOffset``  the instruction stream
``ConvWeightDataOffset``   conv weights and parameters (bias + requantization), avg-pool parameters
``FCWeightDataOffset``     fully connected layers' weights and parameters (only if the network has FC)
``EndOffset``              end of the buffers (the total size)

Activations are placed by liveness: a tensor lives from the operation that first writes it to the
last operation that reads it (a concat tensor from its first slice's writer to its last reader),
and tensors whose lifetimes do not overlap share addresses (first fit, in order of definition).
A tensor read last by operation i can be overwritten from operation i + 1 on: operation i+1's
STOREs follow its compute instructions, which follow operation i's, which follow operation i's
LOADs (each compute waits for its loads), with or without a barrier between the two. The linker
(:mod:`dlproc.compiler.program`) does not rely on this argument alone: its hazard tracker sees
every DRAM beat each LOAD and STORE touches and orders (or refuses) any reuse conflict.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlproc.compiler.lower import Lowered

__all__ = ["REGION_ALIGN", "TENSOR_ALIGN", "Region", "MemoryMap", "tensor_bytes", "place_tensors", "align"]

REGION_ALIGN = 4096
TENSOR_ALIGN = 64

REGION_NAMES = ("InputDataOffset", "OutputResultOffset", "SchedulerDataOffset", "InstructionDataOffset",
                "ConvWeightDataOffset", "FCWeightDataOffset", "EndOffset")


def align(n: int, a: int) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class Region:
    name: str
    offset: int
    size: int


@dataclass
class MemoryMap:
    """Named regions (offsets relative to ``base``); EndOffset's size is the total."""

    base: int
    regions: list[Region]

    def __getitem__(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return any(r.name == name for r in self.regions)

    def addr(self, name: str) -> int:
        return self.base + self[name].offset

    @property
    def end(self) -> int:
        return self["EndOffset"].offset

    def to_list(self) -> list[dict]:
        return [{"name": r.name, "offset": r.offset, "size": r.size} for r in self.regions]

    def table(self) -> str:
        """MATLAB's external memory buffer table."""
        lines = ["### Allocating external memory buffers:", "",
                 f"          {'offset_name':<24}{'offset_address':<18}{'allocated_space':>16}",
                 f"    {'_' * 24:<30}{'_' * 16:<18}{'_' * 18:>16}", ""]
        for r in self.regions:
            size = f"Total: {r.size / 1024:.1f} kB" if r.name == "EndOffset" else f"{r.size / 1024:.1f} kB"
            lines.append(f"    \"{r.name}\"{'':<{max(1, 26 - len(r.name))}}\"0x{self.base + r.offset:08x}\"      "
                         f"\"{size}\"")
        return "\n".join(lines)


def tensor_bytes(shape: tuple[int, int, int], c: int, pitch: int) -> int:
    ch, h, w = shape
    return -(-ch // c) * h * w * pitch


def _roots(low: Lowered) -> dict[str, tuple[str, int]]:
    """Tensor name -> (root tensor, channel-block offset in it), following concat aliases."""
    out = {}
    for name in low.tensors:
        root, block = name, 0
        while low.tensors[root].alias is not None:
            parent, b = low.tensors[root].alias  # type: ignore[misc]
            root, block = parent, block + b
        out[name] = (root, block)
    return out


def place_tensors(low: Lowered, c: int, pitch: int, boundary: list[str]) -> tuple[dict[str, tuple[str, int]], int,
                                                                                   int, int]:
    """Place every tensor; returns ({tensor: (region name, offset in region)}, input bytes,
    output-region bytes, activation-region bytes)."""
    roots = _roots(low)
    size = {name: tensor_bytes(t.shape, c, pitch) for name, t in low.tensors.items()}
    n_ops = len(low.ops)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, op in enumerate(low.ops):
        for name in (op.src, op.dst) + ((op.src2,) if op.src2 else ()):
            r = roots[name][0]
            first[r] = min(first.get(r, i), i)
            last[r] = max(last.get(r, i), i)
    placed: dict[str, tuple[str, int]] = {}
    input_root = roots[low.input_tensor][0]
    placed[input_root] = ("InputDataOffset", 0)
    out_size = 0
    for name in boundary:
        r = roots[name][0]
        if r in placed:
            continue
        placed[r] = ("OutputResultOffset", out_size)
        out_size = align(out_size + size[r], TENSOR_ALIGN)
    # Liveness-based first fit for everything else.
    live: list[tuple[int, int, int, int]] = []  # (start, end, first op, last op)
    act_size = 0
    pending = sorted((r for r in set(v[0] for v in roots.values()) if r not in placed and r in first),
                     key=lambda r: (first[r], r))
    for r in pending:
        lo, hi = first[r], last.get(r, n_ops)
        busy = sorted((s, e) for s, e, f, l in live if not (l < lo or f > hi))
        offset = 0
        for s, e in busy:
            if offset + size[r] <= s:
                break
            offset = max(offset, align(e, TENSOR_ALIGN))
        live.append((offset, offset + size[r], lo, hi))
        placed[r] = ("SchedulerDataOffset", offset)
        act_size = max(act_size, align(offset + size[r], TENSOR_ALIGN))
    where = {}
    for name, (root, block) in roots.items():
        if root not in placed:
            continue  # a tensor no operation touches (e.g. the unfolded input when the host folds it)
        region, off = placed[root]
        h, w = low.tensors[root].shape[1:]
        where[name] = (region, off + block * h * w * pitch)
    return where, size[input_root], out_size, act_size
