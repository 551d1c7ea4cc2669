"""ISA encoding (dlproc.hardware.isa) and register map (dlproc.hardware.regmap): round trips, ranges, layouts."""

from __future__ import annotations

import random

import pytest

from dlproc.hardware import isa, regmap
from dlproc.errors import DlprocError

HW = isa.HardwareParams(c=4, mem_data_width=64, inp_depth=64, wgt_depth=16, prm_depth=4,
                        out_depth=64, profile_depth=4)


def random_instruction(cls, rng: random.Random) -> isa.Instruction:
    kwargs = {}
    for flag in ("pop_prev", "pop_next", "push_prev", "push_next"):
        kwargs[flag] = flag not in cls.FORBIDDEN_FLAGS and rng.random() < 0.5
    for spec in cls.field_specs():
        kwargs[spec.name] = rng.randint(spec.lo, spec.hi)
    if "act_min" in kwargs and kwargs["act_min"] > kwargs["act_max"]:
        kwargs["act_min"], kwargs["act_max"] = kwargs["act_max"], kwargs["act_min"]
    return cls(**kwargs)


@pytest.mark.parametrize("cls", list(isa.INSTRUCTION_CLASSES.values()), ids=lambda c: c.__name__)
def test_round_trip_random(cls):
    rng = random.Random(cls.__name__)
    for _ in range(200):
        insn = random_instruction(cls, rng)
        raw = insn.encode()
        assert len(raw) == isa.INSN_BYTES
        assert raw[0] & 0xF == cls.OPCODE
        assert isa.decode(raw) == insn


def test_known_encoding_bits():
    raw = isa.Load(buf=isa.Buf.WGT, sram_base=5, dram_addr=0x1000, x_size=3, pad_value=-3,
                   pop_next=True, push_next=True).encode()
    word = int.from_bytes(raw, "little")
    assert word & 0xF == isa.Opcode.LOAD
    assert (word >> 4) & 0xF == 0b1010  # pop_next (bit 5) and push_next (bit 7)
    specs = {s.name: s for s in isa.Load.field_specs()}
    assert specs["buf"].offset == 8
    assert (word >> specs["sram_base"].offset) & 0xFFFFF == 5
    assert (word >> specs["dram_addr"].offset) & 0xFFFFFFFF == 0x1000
    assert (word >> specs["pad_value"].offset) & 0xFF == 0xFD


@pytest.mark.parametrize("cls", list(isa.INSTRUCTION_CLASSES.values()), ids=lambda c: c.__name__)
def test_amaranth_layout_matches_python_encoding(cls):
    rng = random.Random(7)
    insn = random_instruction(cls, rng)
    view = isa.INSN_LAYOUT.from_bits(int.from_bytes(insn.encode(), "little"))
    assert view.header.opcode == cls.OPCODE
    for flag in ("pop_prev", "pop_next", "push_prev", "push_next"):
        assert view.header[flag] == int(getattr(insn, flag))
    sub = view[cls.OPCODE.name.lower()]
    for spec in cls.field_specs():
        assert sub[spec.name] == getattr(insn, spec.name), spec.name


def test_layouts_fit_and_do_not_overlap():
    for cls in isa.INSTRUCTION_CLASSES.values():
        used = (1 << isa.HEADER_BITS) - 1
        for spec in cls.field_specs():
            mask = ((1 << spec.bits) - 1) << spec.offset
            assert not used & mask, (cls.__name__, spec.name)
            used |= mask
        assert used < 1 << isa.INSN_BITS
        assert cls.layout().size == isa.INSN_BITS


@pytest.mark.parametrize(
    "insn, message",
    [
        (isa.Conv(kh=0), "CONV.kh = 0 is out of range; allowed 1..31"),
        (isa.Conv(stride_x=8), "CONV.stride_x = 8 is out of range; allowed 1..7"),
        (isa.Load(pad_top=16), "LOAD.pad_top = 16 is out of range; allowed 0..15"),
        (isa.Load(buf=3), "LOAD.buf = 3 is out of range; allowed 0..2"),
        (isa.Load(pad_value=128), "LOAD.pad_value = 128 is out of range; allowed -128..127"),
        (isa.Store(dram_addr=1 << 32), "STORE.dram_addr = 4294967296 is out of range"),
        (isa.Store(x_size=0), "STORE.x_size = 0 is out of range; allowed 1..65535"),
        (isa.Pool(act_min=5, act_max=4), "POOL.act_min = 5 > act_max = 4"),
        (isa.Load(push_prev=True), "LOAD.push_prev is set, but the load unit has no such neighbour"),
        (isa.Mark(pop_next=True), "MARK.pop_next is set, but the store unit has no such neighbour"),
        (isa.Mark(index="x"), "MARK.index = 'x' is not an integer"),
    ],
)
def test_field_errors_name_field_value_and_range(insn, message):
    with pytest.raises(isa.InstructionError) as info:
        insn.encode()
    assert message in str(info.value)
    assert isinstance(info.value, DlprocError)


def test_decode_errors():
    with pytest.raises(isa.InstructionError, match="opcode 0 is illegal; allowed: 1 LOAD"):
        isa.decode(bytes(32))
    with pytest.raises(isa.InstructionError, match="opcode 12 is illegal"):
        isa.decode(b"\x0c" + bytes(31))
    with pytest.raises(isa.InstructionError, match="32 bytes, got 31"):
        isa.decode(bytes(31))
    with pytest.raises(isa.InstructionError, match="multiple of 32 bytes"):
        isa.decode_program(bytes(40))


def test_program_round_trip():
    prog = [isa.Load(x_size=2, push_next=True), isa.Conv(pop_prev=True, push_next=True),
            isa.Store(pop_prev=True), isa.Mark(index=1), isa.Finish()]
    assert isa.decode_program(isa.encode_program(prog)) == prog


def test_validate_against_hardware():
    isa.Load(buf=isa.Buf.INP, sram_base=60, x_size=2, y_size=2).validate(HW)  # words 60..63
    with pytest.raises(isa.InstructionError, match=r"LOAD.sram_base: words 61..64 exceed the INP buffer \(depth 64"):
        isa.Load(buf=isa.Buf.INP, sram_base=61, x_size=2, y_size=2).validate(HW)
    with pytest.raises(isa.InstructionError, match="exceed the WGT buffer"):
        isa.Load(buf=isa.Buf.WGT, x_size=2, y_size=3, pad_left=4).validate(HW)  # 3 x 6 = 18 > 16
    with pytest.raises(isa.InstructionError, match="not a multiple of the bus width"):
        isa.Load(dram_addr=4).validate(HW)
    with pytest.raises(isa.InstructionError, match="exceed the OUT buffer"):
        isa.Store(sram_base=63, x_size=2).validate(HW)
    with pytest.raises(isa.InstructionError, match=r"MARK.index = 4 is out of range; allowed 0..3"):
        isa.Mark(index=4).validate(HW)
    with pytest.raises(isa.InstructionError, match="exceed the INP buffer"):
        isa.Conv(in_w=8, out_h=8, out_w=8, kh=3, kw=3).validate(HW)
    isa.Conv(in_w=8, out_h=6, out_w=6, kh=3, kw=3).validate(HW)


def test_hardware_params_from_config():
    from dlproc.config import ProcessorConfig

    cfg = ProcessorConfig.preset("de10nano_int8")
    hw = isa.HardwareParams.from_config(cfg)
    shapes = cfg.buffer_shapes()
    assert hw.c == cfg.conv_c
    assert hw.mem_data_width == cfg.memory_data_width
    assert (hw.inp_depth, hw.wgt_depth, hw.prm_depth, hw.out_depth) == tuple(
        shapes[b].depth for b in ("INP", "WGT", "PRM", "OUT"))
    assert hw.config_hash64 == cfg.hash64
    assert hw.pitch("PRM") == -(-9 * hw.c // hw.bytes_per_beat) * hw.bytes_per_beat


def test_error_codes_are_stable():
    assert {e.name: e.value for e in isa.ErrorCode} == {
        "NONE": 0, "ILLEGAL_OPCODE": 1, "RAN_OFF_END": 2, "DMA_FETCH": 3, "DMA_LOAD": 4,
        "DMA_STORE": 5, "SRAM_RANGE": 6, "DEADLOCK": 7, "ABORTED": 8, "ILLEGAL_FIELD": 9,
        "TOKEN_OVERFLOW": 10, "COMPUTE": 11, "BLOCK_ABSENT": 12, "WRITE_RESPONSE": 13,
    }


def test_regmap_is_consistent():
    offsets = [r.offset for r in regmap.REGISTERS]
    assert len(offsets) == len(set(offsets))
    assert max(offsets) < 1 << regmap.CSR_ADDR_BITS
    assert regmap.REG["ID"].reset == regmap.MAGIC == 0x444C5052
    for name in ("CTRL", "STATUS", "INSN_BASE", "INSN_COUNT", "DMA_BASE", "DMA_LIMIT", "CYCLES_LO",
                 "CYCLES_HI", "PROF_COUNT", "PROF_INDEX", "PROF_DATA_LO", "PROF_DATA_HI"):
        assert name in regmap.REG
    assert regmap.REG["STATUS"].field("ERROR_CODE").width == 8
