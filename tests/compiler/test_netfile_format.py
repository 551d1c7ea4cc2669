"""The compiled-network file: round trip, documented header layout, and clear errors for corruption,
truncation, wrong magic or version and configuration mismatch."""

from __future__ import annotations

import hashlib
import struct
import zlib

import numpy as np
import pytest

from dlproc.compiler import netfile
from dlproc.compiler import compile_network
from dlproc.config import ProcessorConfig
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from test_compiler_random import quantize, random_network

CFG = small_config(4)


@pytest.fixture(scope="module")
def compiled():
    rng = np.random.default_rng(11)
    net = random_network(rng, "nf")
    qnet = quantize(net, rng)
    return qnet, compile_network(qnet, CFG)


def test_round_trip_is_identical(compiled, tmp_path):
    _, cn = compiled
    path = netfile.save(cn, tmp_path / "n.dlnet")
    back = netfile.load(path)
    assert back.instructions == cn.instructions and back.conv_weights == cn.conv_weights
    assert back.fc_weights == cn.fc_weights and back.report() == cn.report()
    assert back.memory_map.to_list() == cn.memory_map.to_list()
    assert [vars(l) for l in back.layers] == [vars(l) for l in cn.layers]
    assert netfile.to_bytes(back) == path.read_bytes()  # deterministic


def test_header_and_sections_follow_the_documented_layout(compiled):
    _, cn = compiled
    data = netfile.to_bytes(cn)
    assert data[0:8] == b"DLPRNET\0"
    version, hsize, hash64 = struct.unpack_from("<IIQ", data, 8)
    assert (version, hsize, hash64) == (1, 64, CFG.hash64)
    assert data[24:56] == bytes.fromhex(CFG.config_hash())
    count, crc = struct.unpack_from("<II", data, 56)
    assert crc == zlib.crc32(data[:60])
    names = {}
    for k in range(count):
        name, off, size, c32, _flags, sha = struct.unpack_from("<8sQQII32s", data, 64 + 64 * k)
        body = data[off:off + size]
        assert off % 64 == 0 and zlib.crc32(body) == c32 and hashlib.sha256(body).digest() == sha
        names[name.rstrip(b"\0").decode()] = body
    assert set(names) >= {"META", "MMAP", "IOQ", "LAYR", "INSN", "CWGT"}
    assert names["INSN"] == cn.instructions
    base, n, rec = struct.unpack_from("<QII", names["MMAP"], 0)
    first = struct.unpack_from("<32sQQ", names["MMAP"], 16)
    assert (base, n, rec) == (cn.base, len(cn.memory_map.regions), 48)
    assert first[0].rstrip(b"\0") == b"InputDataOffset"
    n_io, rec = struct.unpack_from("<II", names["IOQ"], 0)
    assert (n_io, rec) == (1 + len(cn.outputs), 112)
    zp, scale, offset = struct.unpack_from("<idQ", names["IOQ"], 8 + 76)
    assert (zp, scale, offset) == (cn.input.zero_point, cn.input.scale, cn.input.offset)
    n_l, rec = struct.unpack_from("<II", names["LAYR"], 0)
    assert (n_l, rec) == (len(cn.layers), 104)
    hw, first_insn, count_insn, prof = struct.unpack_from("<IIIi", names["LAYR"], 8 + 104 + 64)
    l1 = cn.layers[1]
    assert (hw, first_insn, count_insn, prof) == (int(l1.hw), l1.insn_first, l1.insn_count, l1.profile_index)


@pytest.mark.parametrize("section", ["META", "INSN", "CWGT", "LAYR"])
def test_corrupted_section_is_detected(compiled, section):
    _, cn = compiled
    data = bytearray(netfile.to_bytes(cn))
    count = struct.unpack_from("<I", data, 56)[0]
    for k in range(count):
        name, off, size = struct.unpack_from("<8sQQ", data, 64 + 64 * k)
        if name.rstrip(b"\0").decode() == section:
            data[off + size // 2] ^= 0x40
    with pytest.raises(netfile.NetFileError, match=f"corrupted: the checksum of section {section}"):
        netfile.from_bytes(bytes(data))


def test_bad_magic_version_header_and_truncation(compiled, tmp_path):
    _, cn = compiled
    data = netfile.to_bytes(cn)
    with pytest.raises(netfile.NetFileError, match="not a dlproc compiled network"):
        netfile.from_bytes(b"PK\3\4" + data[4:])
    wrong = bytearray(data)
    struct.pack_into("<I", wrong, 8, 99)
    with pytest.raises(netfile.NetFileError, match="format version 99; this dlproc reads version 1"):
        netfile.from_bytes(bytes(wrong))
    wrong = bytearray(data)
    wrong[20] ^= 1  # inside the config hash: the header CRC catches it
    with pytest.raises(netfile.NetFileError, match="header checksum"):
        netfile.from_bytes(bytes(wrong))
    with pytest.raises(netfile.NetFileError, match="truncated"):
        netfile.from_bytes(data[: len(data) - 100])
    with pytest.raises(netfile.NetFileError, match="does not exist"):
        netfile.load(tmp_path / "missing.dlnet")


def test_config_mismatch_is_refused_before_anything_runs(compiled, tmp_path):
    _, cn = compiled
    other = small_config(4, wgt=2048)
    netfile.check_config(cn, CFG)
    with pytest.raises(netfile.ConfigMismatchError, match="conv.WeightMemorySize: compiled for 4096, given 2048"):
        netfile.check_config(cn, other)
    with pytest.raises(netfile.ConfigMismatchError, match="recompile"):
        Workflow(cn, other, target="golden")
    with pytest.raises(netfile.ConfigMismatchError):
        Workflow(netfile.save(cn, tmp_path / "n.dlnet"), ProcessorConfig.preset("de10nano_int8"))
