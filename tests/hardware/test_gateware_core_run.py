"""Whole-processor runs in the Amaranth simulator against a Python Avalon memory model.

The memory answers with random waitrequest and random read latency and checks the Avalon
protocol on every cycle (see test_gateware_core_support.AvalonMemory). Each test asserts on the
bytes that landed in the buffers or in memory, on STATUS, and on the bus transactions.
"""

from __future__ import annotations

import random

import pytest

from dlproc.hardware import isa
from dlproc.hardware.isa import ErrorCode

from test_gateware_core_support import Case, run_batch, small_hw

DATA = bytes(random.Random(3).randrange(256) for _ in range(4096))


def ref_load(hw: isa.HardwareParams, ld: isa.Load, dram: bytes) -> dict[int, int]:
    """Expected buffer words of a LOAD (the contract's semantics, written independently)."""
    name = isa.Buf(ld.buf).name
    eb, pitch = hw.elem_bytes(name), hw.pitch(name)
    hp = ld.y_size + ld.pad_top + ld.pad_bottom
    wp = ld.x_size + ld.pad_left + ld.pad_right
    words = {}
    for z in range(ld.z_size):
        for yp in range(hp):
            for xp in range(wp):
                y, x = yp - ld.pad_top, xp - ld.pad_left
                if 0 <= y < ld.y_size and 0 <= x < ld.x_size:
                    off = ld.dram_addr + (z * ld.z_stride + y * ld.y_stride + x) * pitch
                    value = dram[off : off + eb]
                else:
                    value = bytes([ld.pad_value & 0xFF]) * eb
                words[ld.sram_base + (z * hp + yp) * wp + xp] = int.from_bytes(value, "little")
    return words


def assert_inside(mem, lo: int, hi: int, nbytes: int) -> None:
    for kind, addr, count in mem.commands:
        assert lo <= addr and addr + count * nbytes <= hi, (kind, hex(addr), count)


_rng = random.Random(9)
OUT_INIT = {i: _rng.getrandbits(32) for i in range(64)}

LOADS = [
    isa.Load(buf=isa.Buf.INP, sram_base=3, dram_addr=0x400, x_size=3, y_size=2, z_size=2,
             y_stride=5, z_stride=17, pad_top=1, pad_left=2, pad_right=1, pad_value=-7),
    isa.Load(buf=isa.Buf.WGT, sram_base=1, dram_addr=0x800, x_size=5),
    isa.Load(buf=isa.Buf.PRM, sram_base=0, dram_addr=0xA00, x_size=2, y_size=2, y_stride=3),
]
STORE = isa.Store(sram_base=5, dram_addr=0x400, x_size=3, y_size=2, z_size=2, y_stride=4, z_stride=10)
ABORT_LOADS = [isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=0x400, x_size=16, y_size=4, y_stride=16)] * 3


def P(*insns) -> bytes:
    return isa.encode_program(list(insns))


def load_cases() -> dict[str, Case]:
    return {"load": Case(P(*LOADS, isa.Finish()), seed=5, preload={0x400: DATA[0x400:0xC00]})}


def store_cases() -> dict[str, Case]:
    return {"store": Case(P(STORE, isa.Mark(index=2), isa.Finish()), out_init=OUT_INIT)}


#: Every run on the default small configuration (C = 4, 64-bit bus), simulated in one session.
CASES_64: dict[str, Case] = {
    "finish-0.0": Case(P(isa.Finish()), seed=1, wait_prob=0.0),
    "finish-0.8": Case(P(isa.Finish()), seed=3, wait_prob=0.8),
    **load_cases(),
    **store_cases(),
    "fetch-window": Case(P(isa.Finish()), insn_base=0x100, dma_base=0x200),
    "load-window": Case(P(isa.Load(buf=isa.Buf.INP, dram_addr=0x7E0, x_size=3, y_size=2, y_stride=3),
                          isa.Finish()), dma_limit=0x800),
    "store-window": Case(P(isa.Store(dram_addr=0x7F0, x_size=4), isa.Finish()), dma_limit=0x800),
    "store-clip": Case(P(isa.Store(dram_addr=0x7E0, x_size=4), isa.Finish()), dma_limit=0x7F8,
                       out_init=OUT_INIT),
    "fetch-window-after-finish": Case(P(isa.Mark(index=0), isa.Finish()), insn_count=8, dma_limit=0x140),
    "fetch-window-needed": Case(P(isa.Mark(index=0), isa.Mark(index=1), isa.Finish()), dma_limit=0x140),
    "illegal-opcode": Case(P(isa.Mark(index=0)) + bytes([0x0C]) + bytes(31) + P(isa.Finish())),
    "illegal-flag": Case(bytes([isa.Load().encode()[0] | 1 << 4]) + isa.Load().encode()[1:] + P(isa.Finish())),
    "ran-off-end": Case(P(isa.Mark(index=0), isa.Mark(index=1))),
    "count-zero": Case(P(isa.Finish()), insn_count=0),
    "abort": Case(P(*ABORT_LOADS, isa.Finish()), wait_prob=0.7, abort_after=40, preload={0x400: DATA[:0x400]}),
    "deadlock": Case(P(isa.Store(pop_prev=True), isa.Finish())),
    "tokens": Case(P(isa.Load(buf=isa.Buf.INP, dram_addr=0x400, x_size=4, push_next=True),
                     isa.Store(sram_base=0, dram_addr=0x600, x_size=2, pop_prev=True),
                     isa.Finish(pop_prev=True, push_next=True)),
                   out_init=OUT_INIT, preload={0x400: DATA[:64]}),
    "load-sram": Case(P(isa.Load(buf=isa.Buf.INP, sram_base=62, x_size=4, dram_addr=0x400), isa.Finish())),
    "load-misaligned": Case(P(isa.Load(buf=isa.Buf.INP, dram_addr=0x404), isa.Finish())),
    "store-sram": Case(P(isa.Store(sram_base=63, x_size=2, dram_addr=0x400), isa.Finish())),
    "mark-index": Case(P(isa.Mark(index=4), isa.Finish())),
}

def random_program(seed: int, hw: isa.HardwareParams, count: int = 6) -> list[isa.Instruction]:
    """Constrained-random LOADs (from 0x400..0xC00) and STOREs (to 0xC00..0x1000)."""
    rng = random.Random(seed)
    insns = []
    for _ in range(count):
        if rng.random() < 0.6:
            buf = rng.choice(list(isa.Buf))
            name, pitch = buf.name, hw.pitch(buf.name)
            while True:
                ld = isa.Load(buf=buf, x_size=rng.randint(1, 5), y_size=rng.randint(1, 3),
                              z_size=rng.randint(1, 2), pad_top=rng.randint(0, 2),
                              pad_bottom=rng.randint(0, 1), pad_left=rng.randint(0, 2),
                              pad_right=rng.randint(0, 2), pad_value=rng.randint(-128, 127))
                ld.y_stride = ld.x_size + rng.randint(0, 3)
                ld.z_stride = ld.y_stride * ld.y_size + rng.randint(0, 5)
                if ld.padded_words > hw.depth(name):
                    continue
                ld.sram_base = rng.randint(0, hw.depth(name) - ld.padded_words)
                extent = ((ld.z_size - 1) * ld.z_stride + (ld.y_size - 1) * ld.y_stride + ld.x_size) * pitch
                if extent > 0x800:
                    continue
                ld.dram_addr = 0x400 + rng.randrange(0, 0x800 - extent + 1, hw.bytes_per_beat)
                break
            ld.validate(hw)
            insns.append(ld)
        else:
            pitch = hw.pitch("OUT")
            st = isa.Store(x_size=rng.randint(1, 6), y_size=rng.randint(1, 3), z_size=rng.randint(1, 2))
            st.y_stride = st.x_size + rng.randint(0, 2)
            st.z_stride = st.y_stride * st.y_size + rng.randint(0, 3)
            st.sram_base = rng.randint(0, hw.out_depth - st.x_size * st.y_size * st.z_size)
            extent = ((st.z_size - 1) * st.z_stride + (st.y_size - 1) * st.y_stride + st.x_size) * pitch
            st.dram_addr = 0xC00 + rng.randrange(0, 0x400 - extent + 1, hw.bytes_per_beat)
            st.validate(hw)
            insns.append(st)
    return insns + [isa.Finish()]


def ref_store(hw: isa.HardwareParams, st: isa.Store, out: dict[int, int], dram: bytearray) -> None:
    pitch, word = hw.pitch("OUT"), st.sram_base
    for z in range(st.z_size):
        for y in range(st.y_size):
            for x in range(st.x_size):
                off = st.dram_addr + (z * st.z_stride + y * st.y_stride + x) * pitch
                dram[off : off + hw.c] = out[word].to_bytes(hw.c, "little")
                word += 1


RANDOM_SEEDS = {64: (101, 102), 16: (103,)}


def random_cases(width: int) -> dict[str, Case]:
    hw = small_hw(mem_data_width=width)
    return {
        f"random-{seed}": Case(P(*random_program(seed, hw)), seed=seed, wait_prob=0.4,
                               preload={0x400: DATA[0x400:0xC00]}, out_init=OUT_INIT, max_cycles=6000)
        for seed in RANDOM_SEEDS[width]
    }


CASES_64.update(random_cases(64))

CASES_BY_WIDTH = {
    64: CASES_64,
    16: {**load_cases(), **store_cases(), **random_cases(16)},
    256: load_cases(),
    512: {"wide-fetch": Case(P(isa.Mark(index=1), isa.Finish()))},
}

_results: dict[int, dict] = {}


def result(name: str, width: int = 64):
    """The run ``name`` of the batch for bus width ``width`` (each batch is simulated once)."""
    if width not in _results:
        _results[width] = run_batch(small_hw(mem_data_width=width), CASES_BY_WIDTH[width])
    return _results[width][name]


DONE = {"busy": 0, "done": 1, "error": 0, "error_code": 0}


def failed(code) -> dict:
    return {"busy": 0, "done": 0, "error": 1, "error_code": code}


@pytest.mark.parametrize("name", ["finish-0.0", "finish-0.8"])
def test_finish_only_sets_done_and_irq(name):
    r = result(name)
    assert r.status == DONE
    assert r.irq == 1
    assert r.regs["FETCHED"] == 1
    assert 0 < r.regs["CYCLES_LO"] < r.cycles_waited + 8
    # The fetch read exactly the one instruction (32 bytes = 4 beats of 8 bytes).
    assert r.mem.commands == [("read", 0x100, 4)]


@pytest.mark.parametrize("width", [64, 16, 256])
def test_load_padding_strides_multibeat(width):
    hw = small_hw(mem_data_width=width)
    for ld in LOADS:
        ld.validate(hw)
    r = result("load", width)
    assert r.status == DONE
    dram = bytes(0x400) + DATA[0x400:0xC00]
    for ld in LOADS:
        name = isa.Buf(ld.buf).name
        expected = ref_load(hw, ld, dram)
        assert {a: r.buffers[name][a] for a in expected} == expected, name
        # Words outside the block are untouched (the buffers start at zero).
        assert all(r.buffers[name][a] == 0 for a in range(hw.depth(name)) if a not in expected)
    assert_inside(r.mem, 0x100, 0xC00, hw.bytes_per_beat)


@pytest.mark.parametrize("width", [64, 16])
def test_store_strided_with_byteenable(width):
    hw = small_hw(mem_data_width=width)
    r = result("store", width)
    assert r.status == DONE
    st, pitch, nbytes = STORE, hw.pitch("OUT"), hw.bytes_per_beat
    expected = bytearray(4096)
    word = st.sram_base
    for z in range(st.z_size):
        for y in range(st.y_size):
            for x in range(st.x_size):
                off = st.dram_addr + (z * st.z_stride + y * st.y_stride + x) * pitch
                expected[off : off + 4] = OUT_INIT[word].to_bytes(4, "little")
                word += 1
    assert r.mem.data[0x400:0x800] == expected[0x400:0x800]
    # Byte enables: exactly the C = 4 element bytes of each element are written.
    for addr, _, be in r.mem.write_beats:
        assert be == (0x0F if nbytes >= 4 else (1 << nbytes) - 1), (hex(addr), be)
        assert (addr - st.dram_addr) % pitch < 4
    # MARK latched the cycle counter after the store finished.
    assert r.regs["PROF_COUNT"] == 1
    assert 0 < r.profile[2] <= r.regs["CYCLES_LO"] and r.regs["CYCLES_HI"] == 0
    assert r.profile[0] == r.profile[1] == r.profile[3] == 0
    # ... and the host reads the same entries through PROF_INDEX / PROF_DATA_LO/HI.
    assert r.regs["PROF"] == r.profile


def test_fetch_outside_window_issues_nothing():
    r = result("fetch-window")
    assert r.status == failed(ErrorCode.DMA_FETCH)
    assert r.irq == 1
    assert r.regs["ERR_ADDR"] == 0x100
    assert r.mem.commands == []


def test_load_outside_window_stops_before_the_burst():
    r = result("load-window")
    # Row 0 (0x7E0..0x7F8) is inside [0, 0x800). Row 1 starts at 0x7F8: its first burst is the
    # one beat up to the 4-beat boundary at 0x800 (inside), the next one starts at the limit.
    assert r.status == failed(ErrorCode.DMA_LOAD)
    assert r.regs["ERR_ADDR"] == 0x800
    assert r.regs["ERR_INSN"] == 0
    assert_inside(r.mem, 0, 0x800, 8)
    assert [c for c in r.mem.commands if c[1] >= 0x400] == [("read", 0x7E0, 3), ("read", 0x7F8, 1)]


def test_store_outside_window_writes_nothing_outside():
    r = result("store-window")
    assert r.status == failed(ErrorCode.DMA_STORE)
    # 0x7F0..0x800 is a 2-beat burst up to the 4-beat boundary (inside, written); the next
    # burst would start at the limit and is never issued.
    assert r.regs["ERR_ADDR"] == 0x800
    assert [c for c in r.mem.commands if c[0] == "write"] == [("write", 0x7F0, 2)]
    assert_inside(r.mem, 0, 0x800, 8)


def test_window_limit_clips_a_burst_and_names_the_first_refused_byte():
    r = result("store-clip")
    # The aligned 4-beat burst at 0x7E0 would end at 0x800; the limit 0x7F8 clips it to 3 beats.
    assert r.status == failed(ErrorCode.DMA_STORE)
    assert r.regs["ERR_ADDR"] == 0x7F8
    assert [c for c in r.mem.commands if c[0] == "write"] == [("write", 0x7E0, 3)]
    assert r.mem.data[0x7E0:0x7E4] == OUT_INIT[0].to_bytes(4, "little")
    assert r.mem.data[0x7F0:0x7F4] == OUT_INIT[2].to_bytes(4, "little")


def test_fetch_window_matters_only_for_instructions_needed():
    # INSN_COUNT says 8, but FINISH is the second instruction and the window ends right after it.
    r = result("fetch-window-after-finish")
    assert r.status == DONE
    assert_inside(r.mem, 0, 0x140, 8)
    # Without FINISH inside the window the third instruction is the one that cannot be fetched.
    r = result("fetch-window-needed")
    assert r.status == failed(ErrorCode.DMA_FETCH)
    assert (r.regs["ERR_INSN"], r.regs["ERR_ADDR"], r.regs["FETCHED"]) == (2, 0x140, 2)
    assert_inside(r.mem, 0, 0x140, 8)


def test_illegal_opcode_reports_index():
    r = result("illegal-opcode")
    assert r.status == failed(ErrorCode.ILLEGAL_OPCODE)
    assert r.regs["ERR_INSN"] == 1
    assert r.regs["FETCHED"] == 1


def test_illegal_dependency_flag():
    r = result("illegal-flag")  # pop_prev on a LOAD: the load unit has no previous unit
    assert r.status == failed(ErrorCode.ILLEGAL_FIELD)
    assert r.regs["ERR_INSN"] == 0


def test_ran_off_end():
    r = result("ran-off-end")
    assert r.status == failed(ErrorCode.RAN_OFF_END)
    assert r.regs["ERR_INSN"] == 2
    assert r.regs["FETCHED"] == 2


def test_zero_instruction_count_is_ran_off_end():
    r = result("count-zero")
    assert r.status == failed(ErrorCode.RAN_OFF_END)
    assert r.mem.commands == []


def test_abort_stops_and_leaves_bus_quiet():
    r = result("abort")
    assert r.status == failed(ErrorCode.ABORTED)
    assert r.irq == 1
    # The run was cut short (the loads alone need far longer) and every read burst accepted was
    # answered before BUSY dropped; run_batch checked that the bus stayed quiet afterwards.
    assert r.cycles_waited < 400
    assert len(r.mem.commands) < 1 + 3 * 16


def test_deadlock_is_detected():
    # The store waits for a compute->store token that no instruction ever gives.
    assert result("deadlock").status == failed(ErrorCode.DEADLOCK)


def test_tokens_order_load_finish_store():
    r = result("tokens")
    assert r.status == DONE
    # The store ran only after FINISH gave its token, and DONE waited for it.
    assert r.mem.data[0x600:0x604] == OUT_INIT[0].to_bytes(4, "little")
    assert r.mem.data[0x608:0x60C] == OUT_INIT[1].to_bytes(4, "little")
    assert r.buffers["INP"][:4] == [int.from_bytes(DATA[i * 8 : i * 8 + 4], "little") for i in range(4)]


@pytest.mark.parametrize(
    "name, code",
    [("load-sram", ErrorCode.SRAM_RANGE), ("load-misaligned", ErrorCode.ILLEGAL_FIELD),
     ("store-sram", ErrorCode.SRAM_RANGE), ("mark-index", ErrorCode.ILLEGAL_FIELD)],
)
def test_run_time_field_checks(name, code):
    r = result(name)
    assert r.status == failed(code)
    assert r.regs["ERR_INSN"] == 0


@pytest.mark.parametrize("width, seed", [(w, s) for w, seeds in RANDOM_SEEDS.items() for s in seeds])
def test_random_loads_and_stores_match_sequential_reference(width, seed):
    hw = small_hw(mem_data_width=width)
    r = result(f"random-{seed}", width)
    assert r.status == DONE
    buffers = {name: [0] * hw.depth(name) for name in ("INP", "WGT", "PRM")}
    dram = bytearray(4096)
    dram[0x400:0xC00] = DATA[0x400:0xC00]
    for insn in random_program(seed, hw):
        if isinstance(insn, isa.Load):
            for addr, value in ref_load(hw, insn, bytes(dram)).items():
                buffers[isa.Buf(insn.buf).name][addr] = value
        elif isinstance(insn, isa.Store):
            ref_store(hw, insn, OUT_INIT, dram)
    for name, words in buffers.items():
        assert r.buffers[name] == words, name
    assert r.mem.data[0xC00:0x1000] == dram[0xC00:0x1000]
    assert_inside(r.mem, 0x100, 0x1000, hw.bytes_per_beat)


def test_wide_bus_two_instructions_per_beat():
    r = result("wide-fetch", 512)
    assert r.status == DONE
    assert r.regs["FETCHED"] == 2 and r.regs["PROF_COUNT"] == 1
    assert r.mem.commands == [("read", 0x100, 1)]


def test_restart_after_error_and_ack():
    """A second START after an error runs cleanly (the datapath is cleared on START)."""
    from amaranth.sim import Simulator

    from dlproc.hardware.gateware import DlprocTop
    from test_gateware_core_support import AvalonMemory, csr_read, csr_write, ctrl, status_fields

    hw = small_hw()
    dut = DlprocTop(hw)
    mem = AvalonMemory(4096, seed=5)
    mem.load(0x100, isa.encode_program([isa.Mark(index=0)]))  # ran off end
    mem.load(0x200, isa.encode_program([isa.Finish()]))
    seen = []

    async def memory(ctx):
        await mem.serve(ctx, dut.mem, hw.mem_data_width)

    async def host(ctx):
        await csr_write(ctx, dut, "DMA_LIMIT", 4096)
        for base in (0x100, 0x200):
            await csr_write(ctx, dut, "INSN_BASE", base)
            await csr_write(ctx, dut, "INSN_COUNT", 1)
            await csr_write(ctx, dut, "CTRL", ctrl(start=1, irq_en=1))
            for _ in range(100):
                await ctx.tick().repeat(4)
                status = status_fields(await csr_read(ctx, dut, "STATUS"))
                if not status["busy"]:
                    break
            seen.append((status, ctx.get(dut.irq)))
        await csr_write(ctx, dut, "CTRL", ctrl(ack=1, irq_en=1))
        seen.append((status_fields(await csr_read(ctx, dut, "STATUS")), ctx.get(dut.irq)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(host)
    sim.run()
    assert seen == [
        ({"busy": 0, "done": 0, "error": 1, "error_code": ErrorCode.RAN_OFF_END}, 1),
        ({"busy": 0, "done": 1, "error": 0, "error_code": 0}, 1),
        ({"busy": 0, "done": 0, "error": 0, "error_code": 0}, 0),
    ]
