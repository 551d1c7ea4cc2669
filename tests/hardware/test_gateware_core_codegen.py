"""Generated firmware headers and docs are current, and the C helpers encode like dlproc.hardware.isa."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dlproc.flow import codegen

from dlproc.hardware import isa


def test_generated_files_are_current():
    stale = codegen.stale()
    assert not stale, f"run `python -m dlproc.flow.codegen`; stale: {[str(p) for p in stale]}"
    assert codegen.main(["--check"]) == 0


def test_check_reports_stale_files(tmp_path):
    assert codegen.main(["--check", "--root", str(tmp_path)]) == 1
    assert codegen.main(["--root", str(tmp_path)]) == 0
    assert codegen.main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / "docs" / "isa.md").write_text("edited")
    assert codegen.stale(tmp_path) == [tmp_path / "docs" / "isa.md"]


def test_headers_name_every_register_and_field():
    regs = codegen.regs_header()
    assert "#define DLPROC_REG_STATUS 0x11u" in regs
    assert "#define DLPROC_STATUS_ERROR_CODE_SHIFT 8" in regs
    assert "#define DLPROC_ERR_DMA_LOAD 4" in regs
    hdr = codegen.isa_header()
    for op, cls in isa.INSTRUCTION_CLASSES.items():
        assert f"#define DLPROC_OP_{op.name} {op.value}" in hdr
        for spec in cls.field_specs():
            assert f"#define DLPROC_{op.name}_{spec.name.upper()}_OFFSET {spec.offset}\n" in hdr


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_c_helpers_encode_like_python(tmp_path):
    insn = isa.Load(buf=isa.Buf.PRM, sram_base=0xABCDE, dram_addr=0xDEADBEE0, x_size=513, y_size=7,
                    z_size=3, y_stride=0x12345678, z_stride=0x9ABCDEF0, pad_top=15, pad_left=3,
                    pad_value=-2, pop_next=True, push_next=True)
    fields = ["buf", "sram_base", "dram_addr", "x_size", "y_size", "z_size", "y_stride", "z_stride",
              "pad_top", "pad_bottom", "pad_left", "pad_right"]
    sets = "\n".join(
        f"    dlproc_insn_set(w, DLPROC_LOAD_{f.upper()}_OFFSET, DLPROC_LOAD_{f.upper()}_BITS, {getattr(insn, f)}u);"
        for f in fields
    )
    src = tmp_path / "enc.c"
    src.write_text(f"""
#include <stdio.h>
#include "dlproc_isa.h"
int main(void) {{
    uint32_t w[DLPROC_INSN_WORDS] = {{0}};
    dlproc_insn_set(w, DLPROC_HDR_OPCODE_OFFSET, DLPROC_HDR_OPCODE_BITS, DLPROC_OP_LOAD);
    dlproc_insn_set(w, DLPROC_HDR_POP_NEXT_OFFSET, 1, 1);
    dlproc_insn_set(w, DLPROC_HDR_PUSH_NEXT_OFFSET, 1, 1);
{sets}
    dlproc_insn_set(w, DLPROC_LOAD_PAD_VALUE_OFFSET, DLPROC_LOAD_PAD_VALUE_BITS, (uint32_t)(int32_t){insn.pad_value});
    if (dlproc_insn_get(w, DLPROC_LOAD_X_SIZE_OFFSET, DLPROC_LOAD_X_SIZE_BITS) != {insn.x_size}u) return 2;
    for (int i = 0; i < DLPROC_INSN_WORDS; i++) printf("%08x", w[DLPROC_INSN_WORDS - 1 - i]);
    return 0;
}}
""")
    exe = tmp_path / "enc"
    include = codegen.ROOT / "firmware" / "include"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-I{include}", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert int(out, 16) == int.from_bytes(insn.encode(), "little")
