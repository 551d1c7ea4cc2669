"""Shared pieces of the firmware tests: the digits network compiled for the small C = 4
configuration (the same one the RTL layer tests use, so the Verilator build is shared), the
native harness library, the firmware binaries and a helper that rewrites sections of a
compiled-network file with valid checksums (to craft hostile files the checksums do not catch)."""

from __future__ import annotations

import functools
import hashlib
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerprog_cases import small_config

CFG = small_config(4)
TOKEN = "firmware-test-token-7d1c"
FRAMES = 6


@dataclass(frozen=True)
class Digits:
    qnet: object
    cn: object          # CompiledNetwork
    blob: bytes         # the .dlnet file
    x: np.ndarray       # float32 held-out images
    y: np.ndarray


@functools.lru_cache(maxsize=None)
def digits(config_key: str = "c4") -> Digits:
    from dlproc.compiler import netfile
    from dlproc.compiler import compile_network
    from dlproc.quant import Quantizer, digits_dataset
    from dlproc.quant.data import DIGITS_MODEL

    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    qnet = q.quantize()
    cfg = CFG if config_key == "c4" else other_config()
    cn = compile_network(qnet, cfg)
    x, y = digits_dataset("heldout")
    return Digits(qnet, cn, netfile.to_bytes(cn), x[:FRAMES], y[:FRAMES])


def other_config():
    """The same geometry (C = 4, 16-byte bus) but another configuration hash."""
    cfg = small_config(4)
    cfg.set_property("TargetFrequency", 150)
    assert cfg.config_hash() != CFG.config_hash()
    return cfg


def packed_frames(cn) -> list[bytes]:
    from dlproc.targets import host

    d = digits()
    geom = host.geometry(cn)
    xq = host.fold_batch(cn, host.quantize_input(cn, d.x))
    return [host.pack_frame(geom, f) for f in xq]


def decode_outputs(cn, region: bytes) -> dict[str, np.ndarray]:
    """The output tensors inside an OutputResultOffset region image."""
    from dlproc.targets import host

    geom = host.geometry(cn)
    base = cn.memory_map.to_list()
    out_off = next(r["offset"] for r in base if r["name"] == "OutputResultOffset")
    return {t.name: host.unpack_tensor(geom, region[t.offset - out_off:t.offset - out_off + host.tensor_nbytes(
        geom, t.shape)], tuple(t.shape)) for t in cn.outputs}


@functools.lru_cache(maxsize=None)
def harness_lib() -> Path:
    from dlproc.sim.build import build_native
    from dlproc.sim.harness import processor_verilog

    return build_native(processor_verilog(CFG), "dlproc_top", CFG.memory_data_bytes,
                        config_hash=CFG.config_hash()).artifact


def sim_hal_args(ddr_size: int = 1 << 20, clock_mhz: float | None = None) -> list[str]:
    mhz = CFG.target_frequency_mhz if clock_mhz is None else clock_mhz
    opts = [f"lib={harness_lib()}", f"ddr_size={ddr_size}", f"bytes_per_cycle={CFG.ddr_bytes_per_cycle}",
            f"latency={CFG.ddr_latency_cycles}", f"clock_mhz={mhz}"]
    return [a for o in opts for a in ("--hal", o)]


# -- rewriting compiled-network files ------------------------------------------------------------
def sections(blob: bytes) -> list[tuple[str, bytes]]:
    from dlproc.compiler import netfile

    count = struct.unpack_from("<I", blob, 56)[0]
    out = []
    for k in range(count):
        name, off, size, _crc, _flags, _sha = netfile.SECTION.unpack_from(blob, 64 + 64 * k)
        out.append((name.rstrip(b"\0").decode(), blob[off:off + size]))
    return out


def rebuild(blob: bytes, replace: dict[str, bytes] | None = None, *, hash64: int | None = None,
            version: int | None = None, drop: tuple[str, ...] = ()) -> bytes:
    """The file with some section bodies replaced (or dropped), every checksum recomputed."""
    from dlproc.compiler import netfile

    secs = [(n, (replace or {}).get(n, b)) for n, b in sections(blob) if n not in drop]
    magic, ver, hsize, h64, sha, _count, _crc = netfile.HEADER.unpack_from(blob, 0)
    at = -(-(64 + 64 * len(secs)) // 64) * 64
    table, body = [], bytearray()
    for name, data in secs:
        table.append(netfile.SECTION.pack(name.encode().ljust(8, b"\0"), at + len(body), len(data), zlib.crc32(data), 0,
                                          hashlib.sha256(data).digest()))
        body.extend(data)
        body.extend(bytes(-len(body) % 64))
    head = netfile.HEADER.pack(magic, ver if version is None else version, hsize, h64 if hash64 is None else hash64,
                               sha, len(secs), 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
    prefix = head + b"".join(table)
    return prefix + bytes(at - len(prefix)) + bytes(body)


def section(blob: bytes, name: str) -> bytes:
    return dict(sections(blob))[name]
