"""The C compiled-network parser (ctypes on libdlproc_net.so) against the real digits .dlnet and
against files made hostile in every field: each is refused with a message naming what is wrong."""

from __future__ import annotations

import ctypes
import struct

import pytest

from dlproc.hardware import isa

from dlproc.compiler import netfile
from dlproc.flow.firmware import build_program

from firmware_fixture import digits, rebuild, section

E_OK, E_FORMAT, E_VERSION = 0, 3, 4


@pytest.fixture(scope="module")
def lib():
    so = ctypes.CDLL(str(build_program("libdlproc_net.so", werror=True).artifact))
    so.dlproc_capi_parse.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64),
                                     ctypes.c_char_p, ctypes.c_size_t]
    so.dlproc_capi_check.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint32,
                                     ctypes.c_char_p, ctypes.c_size_t]
    so.dlproc_capi_layer.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_char_p,
                                     ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32)]
    so.dlproc_capi_hw_error_name.restype = ctypes.c_char_p
    so.dlproc_capi_status_name.restype = ctypes.c_char_p
    return so


def parse(lib, data: bytes) -> tuple[int, list[int], str]:
    summary = (ctypes.c_uint64 * 16)()
    err = ctypes.create_string_buffer(512)
    # A private copy of exactly len(data) bytes, so the parser can only see the file itself.
    buf = ctypes.create_string_buffer(data, len(data)) if data else None
    rc = lib.dlproc_capi_parse(buf, len(data), summary, err, 512)
    return rc, list(summary), err.value.decode()


def test_real_netfile_parses_like_python(lib):
    d = digits()
    cn = netfile.from_bytes(d.blob)
    rc, s, err = parse(lib, d.blob)
    assert rc == E_OK, err
    regions = {r["name"]: r for r in cn.memory_map.to_list()}
    assert s[0] == cn.hash64 and s[1] == cn.base and s[2] == cn.memory_map.end
    assert s[3] == cn.insn_count and s[4] == len(cn.layers) and s[5] == 1 + len(cn.outputs)
    assert s[6] == len(cn.profile)
    assert (s[7], s[8]) == (regions["InputDataOffset"]["offset"], regions["InputDataOffset"]["size"])
    assert (s[9], s[10]) == (regions["OutputResultOffset"]["offset"], regions["OutputResultOffset"]["size"])
    assert s[11] == len(cn.conv_weights) and s[12] == len(cn.fc_weights)
    assert s[13] == round(cn.clock_mhz * 1000) and s[14] == netfile.FORMAT_VERSION and s[15] == len(regions)
    name = ctypes.create_string_buffer(64)
    idx = ctypes.c_int32()
    for i, layer in enumerate(cn.layers):
        assert lib.dlproc_capi_layer(d.blob, len(d.blob), i, name, 64, ctypes.byref(idx)) == 0
        assert (name.value.decode(), idx.value) == (layer.name, layer.profile_index)
    err = ctypes.create_string_buffer(512)
    assert lib.dlproc_capi_check(d.blob, len(d.blob), cn.c, cn.bus_bytes, err, 512) == 0, err.value


def test_error_names_match_the_isa(lib):
    for code in isa.ErrorCode:
        assert lib.dlproc_capi_hw_error_name(int(code)).decode() == code.name
    assert lib.dlproc_capi_hw_error_name(200) == b"UNKNOWN"
    assert lib.dlproc_capi_status_name(5) == b"E_CONFIG" and lib.dlproc_capi_status_name(9) == b"E_TIMEOUT"


def _header_crc_fixed(data: bytearray) -> bytes:
    import zlib
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    return bytes(data)


def test_header_errors(lib):
    blob = digits().blob
    assert parse(lib, b"")[0] == E_FORMAT
    rc, _, err = parse(lib, b"GIF89a" + blob[6:])
    assert rc == E_FORMAT and "magic" in err
    rc, _, err = parse(lib, rebuild(blob, version=2))
    assert rc == E_VERSION and "version 2" in err
    bad = bytearray(blob)
    bad[20] ^= 1  # inside hash64, covered by the header CRC
    rc, _, err = parse(lib, bytes(bad))
    assert rc == E_FORMAT and "header checksum" in err
    many = bytearray(blob)
    struct.pack_into("<I", many, 56, 10_000)
    rc, _, err = parse(lib, _header_crc_fixed(many))
    assert rc == E_FORMAT and "sections" in err


def test_every_truncation_is_refused(lib):
    blob = digits().blob
    for n in list(range(0, 200, 7)) + list(range(200, len(blob), 97)) + [len(blob) - 1]:
        rc, _, err = parse(lib, blob[:n])
        assert rc == E_FORMAT, (n, err)


def test_corrupted_section_is_named(lib):
    blob = digits().blob
    count = struct.unpack_from("<I", blob, 56)[0]
    for k in range(count):
        name, off, size = struct.unpack_from("<8sQQ", blob, 64 + 64 * k)
        if size == 0:
            continue
        bad = bytearray(blob)
        bad[off + size // 2] ^= 0x40
        rc, _, err = parse(lib, bytes(bad))
        assert rc == E_FORMAT and "checksum of section " + name.rstrip(b"\0").decode() in err


def test_section_table_entries_outside_the_file(lib):
    blob = digits().blob
    for field_at, value in ((8, 1 << 62), (16, 1 << 62), (8, len(blob) - 10), (16, (1 << 64) - 1), (8, 0)):
        bad = bytearray(blob)
        struct.pack_into("<Q", bad, 64 + 64 * 4 + field_at, value)  # the INSN entry
        rc, _, err = parse(lib, bytes(bad))
        assert rc == E_FORMAT and "INSN" in err, err


def _mmap(base: int, regions: list[tuple[str, int, int]], rec: int = 48, count: int | None = None) -> bytes:
    head = struct.pack("<QII", base, len(regions) if count is None else count, rec)
    return head + b"".join(struct.pack("<32sQQ", n.encode().ljust(32, b"\0"), o, s) + bytes(rec - 48)
                           for n, o, s in regions)


def _regions(blob: bytes) -> tuple[int, list[tuple[str, int, int]]]:
    body = section(blob, "MMAP")
    base, count, rec = struct.unpack_from("<QII", body)
    out = []
    for i in range(count):
        n, o, s = struct.unpack_from("<32sQQ", body, 16 + i * rec)
        out.append((n.rstrip(b"\0").decode(), o, s))
    return base, out


@pytest.mark.parametrize("case", ["region_past_end", "offset_overflow", "huge_count", "short_record", "no_end",
                                  "no_input", "above_4g", "unterminated_name", "insn_too_big"])
def test_hostile_memory_maps(lib, case):
    blob = digits().blob
    base, regs = _regions(blob)
    end = next(o for n, o, s in regs if n == "EndOffset")
    edit = {r[0]: list(r) for r in regs}
    body = None
    if case == "region_past_end":
        edit["ConvWeightDataOffset"][2] = end
    elif case == "offset_overflow":
        edit["ConvWeightDataOffset"][1:] = [(1 << 64) - 8, 16]
    elif case == "huge_count":
        body = _mmap(base, regs, count=0xFFFFFFFF)
    elif case == "short_record":
        body = _mmap(base, regs)[:16] + _mmap(base, regs)[16:]
        body = struct.pack("<QII", base, len(regs), 40) + body[16:]
    elif case == "no_end":
        del edit["EndOffset"]
    elif case == "no_input":
        del edit["InputDataOffset"]
    elif case == "above_4g":
        base = 0xFFFFF000
    elif case == "unterminated_name":
        body = bytearray(_mmap(base, regs))
        body[16:48] = b"X" * 32
        body = bytes(body)
    elif case == "insn_too_big":
        edit["InstructionDataOffset"][2] = 32
    if body is None:
        body = _mmap(base, [tuple(v) for v in edit.values()])
    rc, _, err = parse(lib, rebuild(blob, {"MMAP": body}))
    assert rc == E_FORMAT, (case, err)
    assert err


@pytest.mark.parametrize("case", ["count", "role", "shape_zero", "shape_huge", "offset", "zero_point", "scale",
                                  "rec_size"])
def test_hostile_tensor_tables(lib, case):
    blob = digits().blob
    body = bytearray(section(blob, "IOQ"))
    count, rec = struct.unpack_from("<II", body)
    first = 8
    if case == "count":
        struct.pack_into("<I", body, 0, 0x7FFFFFFF)
    elif case == "role":
        struct.pack_into("<I", body, first + 48, 1)
    elif case == "shape_zero":
        struct.pack_into("<I", body, first + 52, 0)
    elif case == "shape_huge":
        struct.pack_into("<I", body, first + rec + 64, 0xFFFFFFFF)
    elif case == "offset":
        struct.pack_into("<Q", body, first + rec + 88, 1 << 40)
    elif case == "zero_point":
        struct.pack_into("<i", body, first + 76, 1000)
    elif case == "scale":
        struct.pack_into("<d", body, first + 80, float("nan"))
    elif case == "rec_size":
        struct.pack_into("<I", body, 4, 100)
    rc, _, err = parse(lib, rebuild(blob, {"IOQ": bytes(body)}))
    assert rc == E_FORMAT, (case, err)


def test_tensor_outside_its_region_fails_the_geometry_check(lib):
    blob = digits().blob
    cn = netfile.from_bytes(blob)
    body = bytearray(section(blob, "IOQ"))
    rec = struct.unpack_from("<I", body, 4)[0]
    out_region = next(r for r in cn.memory_map.to_list() if r["name"] == "OutputResultOffset")
    struct.pack_into("<Q", body, 8 + rec + 88, out_region["offset"] + out_region["size"] - 16)
    bad = rebuild(blob, {"IOQ": bytes(body)})
    assert parse(lib, bad)[0] == E_OK  # only the geometry knows the tensor's size
    err = ctypes.create_string_buffer(512)
    assert lib.dlproc_capi_check(bad, len(bad), cn.c, cn.bus_bytes, err, 512) == E_FORMAT
    assert b"OutputResultOffset" in err.value


@pytest.mark.parametrize("case", ["insn_overflow", "profile_index", "hw_flag", "count"])
def test_hostile_layer_tables(lib, case):
    blob = digits().blob
    body = bytearray(section(blob, "LAYR"))
    if case == "insn_overflow":
        struct.pack_into("<II", body, 8 + 68, 0xFFFFFFF0, 0x20)
    elif case == "profile_index":
        struct.pack_into("<i", body, 8 + 76, -7)
    elif case == "hw_flag":
        struct.pack_into("<I", body, 8 + 64, 3)
    elif case == "count":
        struct.pack_into("<I", body, 0, 1 << 30)
    rc, _, err = parse(lib, rebuild(blob, {"LAYR": bytes(body)}))
    assert rc == E_FORMAT, (case, err)


def test_missing_and_odd_sections(lib):
    blob = digits().blob
    for name in ("META", "MMAP", "IOQ", "LAYR", "INSN", "CWGT"):
        rc, _, err = parse(lib, rebuild(blob, drop=(name,)))
        assert rc == E_FORMAT and f"no {name} section" in err
    rc, _, err = parse(lib, rebuild(blob, {"INSN": section(blob, "INSN")[:-5]}))
    assert rc == E_FORMAT and "32-byte instruction" in err
    rc, _, err = parse(lib, rebuild(blob, {"CWGT": section(blob, "CWGT") + bytes(1 << 16)}))
    assert rc == E_FORMAT and "CWGT" in err


def test_program_addresses_outside_the_network_are_refused(lib):
    blob = digits().blob
    program = isa.decode_program(section(blob, "INSN"))
    k = next(i for i, insn in enumerate(program) if isinstance(insn, isa.Load))
    program[k].dram_addr = 0x7FFF0000
    rc, _, err = parse(lib, rebuild(blob, {"INSN": isa.encode_program(program)}))
    assert rc == E_FORMAT and f"instruction {k} addresses DRAM 0x7fff0000" in err
