"""Fuzzing the C compiled-network parser: hypothesis throws mutated and hostile files at a
persistent AddressSanitizer + UndefinedBehaviorSanitizer build of it (fuzz/fuzz_netfile.c). Any
out-of-bounds access, integer overflow, use of uninitialized allocations or hang would kill or
stall the driver; the test asserts it answers every file with one of the parser's codes.

Three kinds of input: blind byte edits of the real digits file (stopped by the checksums), edits
of one section with every checksum recomputed (so they reach the MMAP/IOQ/LAYR interpretation), and
edits of the unchecksummed section table with the header CRC fixed up."""

from __future__ import annotations

import os
import struct
import subprocess
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlproc.compiler import netfile
from dlproc.flow.firmware import build_program

from firmware_fixture import digits, rebuild, sections

EXAMPLES = int(os.environ.get("DLPROC_FUZZ_EXAMPLES", "150"))
OK_CODES = {0, 2, 3, 4, 0x80}
INTERESTING = [0, 1, 2, 7, 8, 31, 32, 48, 64, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 0x100000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF]


class Driver:
    def __init__(self, tmp):
        exe = build_program("fuzz-netfile", sanitize=True, werror=True).artifact
        self.err = open(tmp / "fuzz.stderr", "w+")
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
                   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     env=env)

    def parse(self, data: bytes) -> int:
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
            out = self.proc.stdout.read(1)
        except BrokenPipeError:
            out = b""
        if len(out) != 1:
            self.err.seek(0)
            pytest.fail(f"the parser driver died on a {len(data)}-byte input:\n{self.err.read()[-4000:]}")
        return out[0]

    def close(self) -> str:
        self.proc.stdin.close()
        code = self.proc.wait(30)
        self.err.seek(0)
        text = self.err.read()
        self.err.close()
        assert code == 0, text[-4000:]
        return text


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = Driver(tmp_path_factory.mktemp("fuzz"))
    yield d
    text = d.close()  # leak check at exit
    assert "ERROR" not in text and "runtime error" not in text, text[-4000:]


def python_accepts(data: bytes) -> bool:
    try:
        netfile.from_bytes(data)
        return True
    except Exception:  # noqa: BLE001 - any refusal counts
        return False


def test_driver_accepts_the_real_file_and_rejects_the_obvious(driver):
    blob = digits().blob
    assert driver.parse(blob) & 0x7F == 0
    assert driver.parse(b"") == 3 and driver.parse(blob[:63]) == 3 and driver.parse(blob[:-1]) == 3


_edit = st.tuples(st.integers(0, 1 << 20), st.integers(1, 255))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_edit, min_size=1, max_size=8), st.one_of(st.none(), st.integers(0, 1 << 20)))
def test_blind_byte_edits(driver, edits, cut):
    data = bytearray(digits().blob)
    for pos, xor in edits:
        data[pos % len(data)] ^= xor
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    rc = driver.parse(bytes(data))
    assert rc in OK_CODES
    if rc & 0x7F == 0:
        assert python_accepts(bytes(data)), "the C parser accepted a file the Python loader refuses"


_section = st.sampled_from(["MMAP", "IOQ", "LAYR", "INSN", "CWGT", "FWGT", "META"])
_field = st.tuples(st.integers(0, 4096), st.sampled_from([1, 2, 4, 8]), st.sampled_from(INTERESTING))


def _put(body: bytearray, at: int, width: int, value: int) -> None:
    if not body:
        return
    at %= len(body)
    raw = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    body[at:at + width] = raw[: len(body) - at]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_section, st.lists(_field, max_size=6), st.one_of(st.none(), st.integers(0, 1 << 16)),
       st.binary(max_size=64))
def test_section_edits_with_valid_checksums(driver, name, fields, cut, tail):
    blob = digits().blob
    body = bytearray(dict(sections(blob))[name])
    # Aim most edits at the record headers and the first records, where the counts live.
    for at, width, value in fields:
        _put(body, at if at < 256 else at % 64, width, value)
    if cut is not None:
        body = body[: cut % (len(body) + 1)]
    body += tail
    data = rebuild(blob, {name: bytes(body)})
    assert driver.parse(data) in OK_CODES


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 6), st.sampled_from([8, 16, 24, 56]), st.sampled_from(INTERESTING), st.integers(0, 64))
def test_section_table_edits(driver, entry, field_at, value, count):
    data = bytearray(digits().blob)
    n = struct.unpack_from("<I", data, 56)[0]
    at = 64 + 64 * (entry % n)
    if field_at == 56:
        struct.pack_into("<I", data, 56, count)  # the section count, then the header CRC
    elif field_at == 24:
        struct.pack_into("<I", data, at + 24, value & 0xFFFFFFFF)
    else:
        struct.pack_into("<Q", data, at + field_at, value & 0xFFFFFFFFFFFFFFFF)
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    rc = driver.parse(bytes(data))
    assert rc in OK_CODES


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=0, max_size=2048), st.integers(1, 64))
def test_random_files_with_a_valid_header(driver, body, count):
    head = bytearray(netfile.HEADER.pack(netfile.MAGIC, 1, 64, 0, bytes(32), count, 0))
    struct.pack_into("<I", head, 60, zlib.crc32(bytes(head[:60])))
    assert driver.parse(bytes(head) + body) in OK_CODES
