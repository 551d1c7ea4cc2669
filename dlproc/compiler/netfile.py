"""The compiled-network file (``.dlnet``): what the Workflow, the simulators and the firmware load.

The layout (little endian; byte offsets in ``docs/netfile.md``, which the C firmware follows):

* a 64-byte header: magic ``b"DLPRNET\\0"``, format version, header size, the 64-bit configuration
  hash (the value of the processor's CONFIG_HASH registers), the full sha256 configuration hash,
  the section count and a CRC32 of the header;
* a section table, one 64-byte entry per section: name, file offset, size, CRC32, sha256;
* the sections, each on a 64-byte boundary:

  ``META``  UTF-8 JSON: everything below plus notices, notes, configuration and layer attributes
  ``MMAP``  the memory map (binary records)
  ``IOQ``   input and output tensors: shapes, quantization, DRAM offsets, host input transform
  ``LAYR``  the layer table: names, HW/SW, instruction ranges, profile (MARK) entries, MACs
  ``INSN``  the instruction stream (written at InstructionDataOffset)
  ``CWGT``  the ConvWeightDataOffset image
  ``FWGT``  the FCWeightDataOffset image (present only when the network has FC layers)

:func:`load` checks the magic, the version, the header CRC and every section's CRC32 and sha256
before it interprets anything, and raises :class:`NetFileError` naming what is wrong.
:func:`check_config` refuses a configuration other than the one the network was compiled for.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from dlproc.hardware import isa
from dlproc.compiler.compile import CompiledNetwork, LayerEntry, ProfileEntry, TensorEntry
from dlproc.compiler.memory import MemoryMap, Region
from dlproc.errors import DlprocError

__all__ = ["MAGIC", "FORMAT_VERSION", "NetFileError", "ConfigMismatchError", "save", "load", "check_config",
           "to_bytes", "from_bytes"]

MAGIC = b"DLPRNET\0"
FORMAT_VERSION = 1
HEADER_SIZE = 64
SECTION_ENTRY_SIZE = 64
SECTION_ALIGN = 64
HEADER = struct.Struct("<8sII Q 32s I I")  # magic, version, header size, hash64, sha256, sections, crc
SECTION = struct.Struct("<8sQQII32s")  # name, offset, size, crc32, flags, sha256
MMAP_HEAD = struct.Struct("<QII")  # base, count, record size
MMAP_REC = struct.Struct("<32sQQ")
IOQ_HEAD = struct.Struct("<II")  # count, record size
IOQ_REC = struct.Struct("<48sI3I3IidQI10Bb x")
LAYR_HEAD = struct.Struct("<II")
LAYR_REC = struct.Struct("<48s16sIIIiQ3II")
assert HEADER.size == HEADER_SIZE and SECTION.size == SECTION_ENTRY_SIZE
assert IOQ_REC.size == 112 and LAYR_REC.size == 104 and MMAP_REC.size == 48


class NetFileError(DlprocError):
    """A compiled-network file that is not one, is corrupted, or has another format version."""


class ConfigMismatchError(NetFileError):
    """The compiled network was compiled for another processor configuration."""


def _name(text: str, n: int) -> bytes:
    return text.encode()[: n - 1].ljust(n, b"\0")


def _align(n: int, a: int = SECTION_ALIGN) -> int:
    return -(-n // a) * a


# -- binary sections --------------------------------------------------------------------------
def _mmap_bytes(cn: CompiledNetwork) -> bytes:
    regs = cn.memory_map.regions
    out = MMAP_HEAD.pack(cn.base, len(regs), MMAP_REC.size)
    return out + b"".join(MMAP_REC.pack(_name(r.name, 32), r.offset, r.size) for r in regs)


def _ioq_record(t: TensorEntry, role: int) -> bytes:
    tr = t.transform or {}
    geo = (list(tr.get("kernel", (0, 0))) + list(tr.get("stride", (0, 0))) + list(tr.get("dilation", (0, 0)))
           + list(tr.get("pads", (0, 0, 0, 0))))
    return IOQ_REC.pack(_name(t.name, 48), role, *t.shape, *t.dram_shape, t.zero_point, t.scale, t.offset,
                        1 if tr else 0, *geo, int(tr.get("pad_value", 0)))


def _ioq_bytes(cn: CompiledNetwork) -> bytes:
    recs = [_ioq_record(cn.input, 0)] + [_ioq_record(t, 1) for t in cn.outputs]
    return IOQ_HEAD.pack(len(recs), IOQ_REC.size) + b"".join(recs)


def _layr_bytes(cn: CompiledNetwork) -> bytes:
    recs = [LAYR_REC.pack(_name(l.name, 48), _name(l.op, 16), int(l.hw), l.insn_first, l.insn_count,
                          l.profile_index, l.macs, *l.shape, 0) for l in cn.layers]
    return LAYR_HEAD.pack(len(recs), LAYR_REC.size) + b"".join(recs)


def _meta(cn: CompiledNetwork) -> dict[str, Any]:
    from dlproc.version import __version__

    def tensor(t: TensorEntry) -> dict[str, Any]:
        return {"name": t.name, "shape": list(t.shape), "scale": t.scale, "zero_point": t.zero_point,
                "offset": t.offset, "stored_shape": list(t.stored_shape) if t.stored_shape else None,
                "transform": t.transform}

    return {
        "format": "dlproc-compiled-network", "format_version": FORMAT_VERSION, "dlproc_version": __version__,
        "isa_version": isa.ISA_VERSION, "name": cn.name, "config": cn.config, "config_hash": cn.config_hash,
        "c": cn.c, "bus_bytes": cn.bus_bytes, "clock_mhz": cn.clock_mhz, "base": cn.base,
        "memory_map": cn.memory_map.to_list(), "insn_count": cn.insn_count,
        "layers": [{"name": l.name, "op": l.op, "hw": l.hw, "shape": list(l.shape), "insn_first": l.insn_first,
                    "insn_count": l.insn_count, "profile_index": l.profile_index, "macs": l.macs, "note": l.note,
                    "inputs": l.inputs, "attrs": l.attrs, "scale": l.scale, "zero_point": l.zero_point}
                   for l in cn.layers],
        "profile": [{"index": p.index, "layers": p.layers, "macs": p.macs} for p in cn.profile],
        "input": tensor(cn.input), "outputs": [tensor(t) for t in cn.outputs],
        "network_outputs": cn.network_outputs, "notices": cn.notices, "notes": cn.notes, "groups": cn.groups,
    }


# -- writing ----------------------------------------------------------------------------------
def to_bytes(cn: CompiledNetwork) -> bytes:
    """The file contents of ``cn`` (deterministic)."""
    sections = [("META", json.dumps(_meta(cn), sort_keys=True, indent=1).encode()), ("MMAP", _mmap_bytes(cn)),
                ("IOQ", _ioq_bytes(cn)), ("LAYR", _layr_bytes(cn)), ("INSN", cn.instructions),
                ("CWGT", cn.conv_weights)]
    if "FCWeightDataOffset" in cn.memory_map:
        sections.append(("FWGT", cn.fc_weights))
    at = _align(HEADER_SIZE + SECTION_ENTRY_SIZE * len(sections))
    table, body = [], bytearray()
    for name, data in sections:
        table.append(SECTION.pack(_name(name, 8), at + len(body), len(data), zlib.crc32(data), 0,
                                  hashlib.sha256(data).digest()))
        body.extend(data)
        body.extend(bytes(_align(len(body)) - len(body)))
    head = HEADER.pack(MAGIC, FORMAT_VERSION, HEADER_SIZE, cn.hash64, bytes.fromhex(cn.config_hash), len(sections), 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
    prefix = head + b"".join(table)
    return prefix + bytes(at - len(prefix)) + bytes(body)


def save(cn: CompiledNetwork, path: str | Path) -> Path:
    """Write ``cn`` to ``path`` (conventionally ``.dlnet``)."""
    path = Path(path)
    path.write_bytes(to_bytes(cn))
    return path


# -- reading ----------------------------------------------------------------------------------
def _sections(data: bytes, source: str) -> dict[str, bytes]:
    if len(data) < HEADER_SIZE or data[:8] != MAGIC:
        raise NetFileError(f"{source} is not a dlproc compiled network (.dlnet) file: the magic bytes are "
                           f"{data[:8]!r}, expected {MAGIC!r}")
    magic, version, hsize, _h64, _sha, count, crc = HEADER.unpack_from(data, 0)
    if version != FORMAT_VERSION:
        raise NetFileError(f"{source} has compiled-network format version {version}; this dlproc reads version "
                           f"{FORMAT_VERSION} (recompile the network with this dlproc)")
    if zlib.crc32(data[:HEADER_SIZE - 4]) != crc or hsize != HEADER_SIZE:
        raise NetFileError(f"{source} is corrupted: the header checksum does not match")
    if HEADER_SIZE + count * SECTION_ENTRY_SIZE > len(data):
        raise NetFileError(f"{source} is corrupted or truncated: its section table is cut off")
    out = {}
    for k in range(count):
        raw_name, off, size, crc32, _flags, sha = SECTION.unpack_from(data, HEADER_SIZE + k * SECTION_ENTRY_SIZE)
        name = raw_name.rstrip(b"\0").decode(errors="replace")
        if off + size > len(data):
            raise NetFileError(f"{source} is truncated: section {name} needs bytes {off}..{off + size}, the file has "
                               f"{len(data)}")
        body = data[off:off + size]
        if zlib.crc32(body) != crc32 or hashlib.sha256(body).digest() != sha:
            raise NetFileError(f"{source} is corrupted: the checksum of section {name} does not match")
        out[name] = body
    for required in ("META", "INSN", "CWGT"):
        if required not in out:
            raise NetFileError(f"{source} has no {required} section")
    return out


def from_bytes(data: bytes, source: str = "compiled network") -> CompiledNetwork:
    sec = _sections(data, source)
    try:
        meta = json.loads(sec["META"])
        mm = MemoryMap(int(meta["base"]), [Region(r["name"], int(r["offset"]), int(r["size"]))
                                          for r in meta["memory_map"]])

        def tensor(d: dict[str, Any]) -> TensorEntry:
            return TensorEntry(d["name"], tuple(d["shape"]), float(d["scale"]), int(d["zero_point"]), int(d["offset"]),
                               tuple(d["stored_shape"]) if d["stored_shape"] else None, d["transform"])

        layers = [LayerEntry(l["name"], l["op"], bool(l["hw"]), tuple(l["shape"]), l["insn_first"], l["insn_count"],
                             l["profile_index"], l["macs"], l["note"], list(l["inputs"]), l["attrs"], l["scale"],
                             l["zero_point"]) for l in meta["layers"]]
        cn = CompiledNetwork(
            name=meta["name"], config=meta["config"], config_hash=meta["config_hash"], c=int(meta["c"]),
            bus_bytes=int(meta["bus_bytes"]), clock_mhz=float(meta["clock_mhz"]), memory_map=mm,
            instructions=sec["INSN"], conv_weights=sec["CWGT"], fc_weights=sec.get("FWGT", b""), layers=layers,
            profile=[ProfileEntry(p["index"], list(p["layers"]), p["macs"]) for p in meta["profile"]],
            input=tensor(meta["input"]), outputs=[tensor(t) for t in meta["outputs"]],
            network_outputs=list(meta["network_outputs"]), notices=list(meta["notices"]),
            notes=list(meta["notes"]), groups=[list(g) for g in meta["groups"]])
    except (KeyError, TypeError, ValueError) as exc:
        raise NetFileError(f"{source}: the META section is not a valid compiled-network description ({exc})") from None
    if cn.insn_count != meta["insn_count"]:
        raise NetFileError(f"{source}: INSN holds {cn.insn_count} instructions, META says {meta['insn_count']}")
    if meta.get("isa_version") != isa.ISA_VERSION:
        raise NetFileError(f"{source} was compiled for instruction-set version {meta.get('isa_version')}; this "
                           f"dlproc's processor implements version {isa.ISA_VERSION} (recompile the network)")
    return cn


def load(path: str | Path) -> CompiledNetwork:
    """Read and verify a compiled-network file (see the module docstring for the checks)."""
    path = Path(path)
    if not path.is_file():
        raise NetFileError(f"compiled network file {str(path)!r} does not exist")
    return from_bytes(path.read_bytes(), repr(str(path)))


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    for module in sorted(set(a) | set(b)):
        ma, mb = a.get(module, {}), b.get(module, {})
        for prop in sorted(set(ma) | set(mb)):
            if ma.get(prop) != mb.get(prop):
                out.append(f"{module}.{prop}: compiled for {ma.get(prop)!r}, given {mb.get(prop)!r}")
    return out


def check_config(cn: CompiledNetwork, config: Any) -> None:
    """Raise :class:`ConfigMismatchError` unless ``config`` is the configuration ``cn`` was compiled for."""
    given = config.config_hash()
    if given == cn.config_hash:
        return
    diff = _diff(cn.config, config.to_dict())
    detail = ("; differences: " + "; ".join(diff[:8])) if diff else ""
    raise ConfigMismatchError(
        f"compiled network {cn.name!r} was compiled for configuration {cn.config_hash[:16]}, but the processor "
        f"configuration is {given[:16]}{detail}; recompile the network for this configuration")
