"""ISA simulator: hand-written programs, and every error condition the hardware reports.

Each error test builds the smallest program that provokes the condition and checks the exception
class *and* the hardware STATUS code it carries (``dlproc.hardware.isa.ErrorCode``), since RTL tests compare
those codes with the simulator's.
"""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.targets.isasim import (
    DeadlockError,
    DmaFetchError,
    DmaLoadError,
    DmaStoreError,
    Geometry,
    IllegalFieldError,
    IllegalOpcodeError,
    Machine,
    SCHEDULES,
    RanOffEndError,
    SramRangeError,
    TokenOverflowError,
)
from dlproc.compiler.planners.packing import pack_input, unpack_output
from dlproc.hardware.numerics import requantize

from layerprog_cases import small_config

CFG = small_config()
GEOM = Geometry.from_config(CFG)
B = GEOM.bus_bytes
INSN = 0x8000  # instructions live above the data in these programs


def machine(**kw) -> Machine:
    return Machine(CFG, dram_size=1 << 16, **kw)


def prm_bytes(c: int, bias, m, mneg, s) -> bytes:
    rec = np.zeros(c, dtype=[("b", "<i4"), ("m", "<u2"), ("n", "<u2"), ("s", "u1")])
    rec["b"], rec["m"], rec["n"], rec["s"] = bias, m, mneg, s
    raw = rec.tobytes()
    return raw + bytes(GEOM.pitch("PRM") - len(raw))


def test_hand_written_conv_program_matches_golden():
    """A 3x3 conv, 4->4 channels, pad 1, written instruction by instruction from the contract."""
    c = GEOM.c
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (4, 5, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8)
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    m, s = rng.integers(1, 1 << 15, 4), rng.integers(10, 20, 4)
    zp_in = 5
    folded = ops.fold_zero_point(bias, w, zp_in)
    mach = machine()
    mach.mem_write(0x0000, pack_input(GEOM, x))
    wp = GEOM.pitch("WGT")
    words = b"".join(bytes(w[:, :, ky, kx].astype(np.int8).tobytes()).ljust(wp, b"\0")
                     for ky in range(3) for kx in range(3))  # word [co][ci] for tap (ky, kx)
    mach.mem_write(0x1000, words)
    mach.mem_write(0x2000, prm_bytes(c, folded, m, m, s))
    prog = [
        isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=0, x_size=6, y_size=5, y_stride=6, z_stride=30,
                 pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, pad_value=zp_in),
        isa.Load(buf=isa.Buf.WGT, sram_base=0, dram_addr=0x1000, x_size=9),
        isa.Load(buf=isa.Buf.PRM, sram_base=0, dram_addr=0x2000, x_size=1, push_next=True),
        isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=8, in_plane=56, out_h=5, out_w=6, kh=3, kw=3,
                 cin_blocks=1, zp_out=-3, act_min=-128, act_max=127, pop_prev=True, push_next=True),
        isa.Store(sram_base=0, dram_addr=0x3000, x_size=6, y_size=5, y_stride=6, pop_prev=True),
        isa.Mark(index=3),
        isa.Finish(),
    ]
    res = mach.run(prog, insn_base=INSN)
    got = unpack_output(GEOM, mach.mem_read(0x3000, 30 * GEOM.pitch("OUT")), (4, 5, 6))
    acc = ops.conv2d(x[None], w, bias, 1, 1, 1, 1, zp_in)[0]
    ref = requantize(acc, m.reshape(-1, 1, 1), s.reshape(-1, 1, 1), -3)
    np.testing.assert_array_equal(got, ref)
    assert res.marks == [3]
    assert res.executed == {"load": 3, "compute": 2, "store": 2}
    assert res.tokens_left == {"L2C": 0, "C2L": 0, "C2S": 0, "S2C": 0}
    assert res.dma_read_bytes == 30 * GEOM.pitch("INP") + 9 * wp + GEOM.pitch("PRM")
    assert res.dma_write_bytes == 30 * GEOM.pitch("OUT")


def test_store_enables_only_the_valid_lanes():
    """STORE writes C bytes per element; the rest of the bus beat keeps its old contents."""
    mach = machine()
    mach.mem_write(0x100, bytes([0xEE]) * B)
    mach.mem_write(0x0, bytes(range(1, 5)) + bytes(B - 4))
    prog = [isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=0, x_size=1, push_next=True),
            isa.Pool(inp_base=0, out_base=0, in_w=1, in_plane=1, kh=1, kw=1, z_size=1, mode=isa.PoolMode.MAX,
                     pop_prev=True, push_next=True),
            isa.Store(sram_base=0, dram_addr=0x100, x_size=1, pop_prev=True), isa.Finish()]
    mach.run(prog, insn_base=INSN)
    assert mach.mem_read(0x100, B) == bytes([1, 2, 3, 4]) + bytes([0xEE]) * (B - 4)


def test_pool_max_and_avg_lanes():
    c = GEOM.c
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (4, 4, 4), dtype=np.int8)
    mach = machine()
    mach.mem_write(0, pack_input(GEOM, x))
    mach.mem_write(0x1000, prm_bytes(c, 0, 12345, 12345, 17))
    prog = [
        isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=0, x_size=4, y_size=4, y_stride=4, z_stride=16),
        isa.Load(buf=isa.Buf.PRM, sram_base=0, dram_addr=0x1000, x_size=1, push_next=True),
        isa.Pool(inp_base=0, out_base=0, in_w=4, in_plane=16, out_h=2, out_w=2, kh=2, kw=2, stride_y=2, stride_x=2,
                 mode=isa.PoolMode.MAX, pop_prev=True, push_next=True),
        isa.Pool(inp_base=0, out_base=4, prm_base=0, in_w=4, in_plane=16, out_h=1, out_w=1, kh=4, kw=4,
                 mode=isa.PoolMode.AVG, zp_in=3, zp_out=-1, push_next=True),
        isa.Store(sram_base=0, dram_addr=0x2000, x_size=2, y_size=2, y_stride=2, pop_prev=True),
        isa.Store(sram_base=4, dram_addr=0x3000, x_size=1, pop_prev=True),
        isa.Finish(),
    ]
    mach.run(prog, insn_base=INSN)
    got_max = unpack_output(GEOM, mach.mem_read(0x2000, 4 * B), (4, 2, 2))
    got_avg = unpack_output(GEOM, mach.mem_read(0x3000, B), (4, 1, 1))
    np.testing.assert_array_equal(got_max, ops.maxpool(x[None], 2, 2, 0)[0])
    np.testing.assert_array_equal(got_avg, ops.global_avgpool(x[None], 3, 12345, 17, -1)[0])


# ---- errors ----------------------------------------------------------------------------------------
def run_expect(prog, error, *, code, window=(0, 1 << 16), **kw):
    with pytest.raises(error) as info:
        machine(**kw).run(prog, insn_base=INSN, dma_base=window[0], dma_limit=window[1])
    assert info.value.code == code
    return info.value


def test_illegal_opcode_from_zeroed_memory():
    """Opcode 0 is illegal, so a count beyond the program fetches zeros and stops."""
    mach = machine()
    with pytest.raises(IllegalOpcodeError) as info:
        mach.run(None, insn_base=INSN, count=1)
    assert info.value.code == isa.ErrorCode.ILLEGAL_OPCODE and info.value.insn_index == 0
    raw = bytearray(isa.Finish().encode())
    raw[0] = (raw[0] & 0xF0) | 0xC  # opcode 12 (never assigned)
    with pytest.raises(IllegalOpcodeError):
        machine().run(bytes(raw), insn_base=INSN)


def test_ran_off_end():
    prog = [isa.Mark(index=0), isa.Mark(index=1)]
    err = run_expect(prog, RanOffEndError, code=isa.ErrorCode.RAN_OFF_END)
    assert err.insn_index == 2


def test_dma_window_fetch_load_store():
    finish = [isa.Finish()]
    run_expect(finish, DmaFetchError, code=isa.ErrorCode.DMA_FETCH, window=(0, INSN))
    run_expect(finish, DmaFetchError, code=isa.ErrorCode.DMA_FETCH, window=(INSN, INSN + 16))
    # Window: the program plus 4 KiB of data above it.
    lo, hi = INSN, INSN + 0x2000
    data = INSN + 0x1000
    load = [isa.Load(buf=isa.Buf.INP, dram_addr=data - B, x_size=4), isa.Finish()]
    machine().run([isa.Load(buf=isa.Buf.INP, dram_addr=data, x_size=4), isa.Finish()], insn_base=INSN,
                  dma_base=lo, dma_limit=hi)
    load_low = [isa.Load(buf=isa.Buf.INP, dram_addr=lo - B, x_size=4), isa.Finish()]
    run_expect(load_low, DmaLoadError, code=isa.ErrorCode.DMA_LOAD, window=(lo, hi))  # starts below
    load_high = [isa.Load(buf=isa.Buf.INP, dram_addr=hi - 3 * B, x_size=4), isa.Finish()]
    run_expect(load_high, DmaLoadError, code=isa.ErrorCode.DMA_LOAD, window=(lo, hi))  # ends above
    machine().run(load, insn_base=INSN, dma_base=lo, dma_limit=hi)
    # A strided store whose last row lies beyond the limit.
    store = [isa.Store(dram_addr=data, x_size=2, y_size=2, y_stride=(hi - data) // B), isa.Finish()]
    run_expect(store, DmaStoreError, code=isa.ErrorCode.DMA_STORE, window=(lo, hi))
    store_ok = [isa.Store(dram_addr=data, x_size=2, y_size=2, y_stride=(hi - data) // B - 2), isa.Finish()]
    machine().run(store_ok, insn_base=INSN, dma_base=lo, dma_limit=hi)


def test_dma_error_writes_nothing():
    """The store's second element is beyond the limit: the first must not be written either."""
    mach = machine()
    mach.mem_write(0x1000 - B, b"\x55" * B)
    with pytest.raises(DmaStoreError):
        mach.run([isa.Store(dram_addr=0x1000 - B, x_size=2), isa.Finish()], insn_base=0x800, dma_base=0,
                 dma_limit=0x1000)
    assert mach.mem_read(0x1000 - B, B) == b"\x55" * B


def test_sram_range_errors():
    depth = GEOM.depth("INP")
    run_expect([isa.Load(buf=isa.Buf.INP, sram_base=depth - 2, x_size=3), isa.Finish()], SramRangeError,
               code=isa.ErrorCode.SRAM_RANGE)
    run_expect([isa.Load(buf=isa.Buf.INP, sram_base=depth - 8, x_size=1, pad_top=1, pad_bottom=1, pad_left=1,
                         pad_right=1), isa.Finish()], SramRangeError, code=isa.ErrorCode.SRAM_RANGE)
    run_expect([isa.Conv(inp_base=0, in_w=10, in_plane=100, out_h=1, out_w=1, kh=3, kw=3,
                         wgt_base=GEOM.depth("WGT") - 8), isa.Finish()], SramRangeError,
               code=isa.ErrorCode.SRAM_RANGE)
    run_expect([isa.Store(sram_base=GEOM.depth("OUT"), x_size=1), isa.Finish()], SramRangeError,
               code=isa.ErrorCode.SRAM_RANGE)
    big = GEOM.acc_depth + 1
    run_expect([isa.Pool(out_h=1, out_w=big, in_w=big, in_plane=big), isa.Finish()], SramRangeError,
               code=isa.ErrorCode.SRAM_RANGE)


def test_illegal_fields():
    # Misaligned DRAM address.
    run_expect([isa.Load(buf=isa.Buf.INP, dram_addr=4, x_size=1), isa.Finish()], IllegalFieldError,
               code=isa.ErrorCode.ILLEGAL_FIELD)
    # Zero size, encoded by hand (the dataclass refuses to encode it).
    raw = bytearray(isa.Load(buf=isa.Buf.INP, x_size=1).encode())
    word = int.from_bytes(raw, "little")
    spec = next(f for f in isa.Load.field_specs() if f.name == "x_size")
    word &= ~(((1 << spec.bits) - 1) << spec.offset)
    run_expect(word.to_bytes(32, "little") + isa.Finish().encode(), IllegalFieldError,
               code=isa.ErrorCode.ILLEGAL_FIELD)
    # A flag the unit has no neighbour for (load has no "prev").
    raw = bytearray(isa.Load(buf=isa.Buf.INP, x_size=1).encode())
    raw[0] |= 1 << (isa.OPCODE_BITS + 0)  # pop_prev
    run_expect(bytes(raw) + isa.Finish().encode(), IllegalFieldError, code=isa.ErrorCode.ILLEGAL_FIELD)
    # MARK index beyond the profile buffer.
    run_expect([isa.Mark(index=GEOM.hw.profile_depth), isa.Finish()], IllegalFieldError,
               code=isa.ErrorCode.ILLEGAL_FIELD)


def test_deadlock_pop_without_producer():
    """A CONV waits for a LOAD token that no LOAD gives: every unit stuck, fetch done."""
    prog = [isa.Conv(pop_prev=True), isa.Finish()]
    err = run_expect(prog, DeadlockError, code=isa.ErrorCode.DEADLOCK)
    assert "L2C" in str(err)


def test_deadlock_store_waits_forever_after_finish():
    prog = [isa.Store(x_size=1, pop_prev=True), isa.Finish()]
    run_expect(prog, DeadlockError, code=isa.ErrorCode.DEADLOCK)


def test_deadlock_from_finite_queues_only():
    """Producer after consumer in the stream: fine with unbounded queues, a deadlock in hardware.

    Five LOADs wait for C2L tokens that only the CONV after them gives; with 4-entry queues the
    fifth LOAD cannot be dispatched, so fetch never reaches the CONV."""
    n = GEOM.hw.queue_depth + 1
    loads = [isa.Load(buf=isa.Buf.INP, x_size=1, pop_next=True) for _ in range(n)]
    convs = [isa.Conv(push_prev=True) for _ in range(n)]
    prog = loads + convs + [isa.Finish()]
    machine(queue_depth=None).run(prog, insn_base=INSN)  # unbounded queues: runs
    err = run_expect(prog, DeadlockError, code=isa.ErrorCode.DEADLOCK)
    assert "fetch is stalled" in str(err)


def test_token_overflow():
    cap = (1 << GEOM.hw.token_bits) - 1
    prog = [isa.Load(buf=isa.Buf.INP, x_size=1, push_next=True) for _ in range(cap + 1)] + [isa.Finish()]
    err = run_expect(prog, TokenOverflowError, code=isa.ErrorCode.TOKEN_OVERFLOW, queue_depth=None)
    assert err.insn_index == cap
    # At capacity exactly it is fine (the tokens are simply left over).
    res = machine(queue_depth=None).run(prog[:cap] + [isa.Finish()], insn_base=INSN)
    assert res.tokens_left["L2C"] == cap


def test_bad_requant_params_refused():
    mach = machine()
    mach.mem_write(0x1000, prm_bytes(GEOM.c, 0, 1, 1, 47))  # S = 47 > MAX_SHIFT
    prog = [isa.Load(buf=isa.Buf.PRM, dram_addr=0x1000, x_size=1, push_next=True), isa.Conv(pop_prev=True),
            isa.Finish()]
    with pytest.raises(IllegalFieldError):
        mach.run(prog, insn_base=INSN)


def test_adversarial_schedule_exposes_a_missing_wait():
    """A STORE that does not wait for its CONV: in program order (greedy) and loads-first the
    result is right by luck; stores-first runs the store early and stores stale OUT contents."""
    mach_kw = dict(dram_size=1 << 16)
    x = bytes([7, 7, 7, 7]) + bytes(B - 4)
    prog = [isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=0, x_size=1, push_next=True),
            isa.Pool(inp_base=0, out_base=0, in_w=1, in_plane=1, mode=isa.PoolMode.MAX, pop_prev=True),
            isa.Store(sram_base=0, dram_addr=0x100, x_size=1),  # missing pop_prev
            isa.Finish()]
    results = {}
    for schedule in SCHEDULES:
        m = Machine(CFG, schedule=schedule, **mach_kw)
        m.mem_write(0, x)
        m.run(prog, insn_base=INSN)
        results[schedule] = m.mem_read(0x100, 4)
    assert results["greedy"] == results["loads-first"] == bytes([7, 7, 7, 7])
    assert results["stores-first"] == bytes(4)


def test_avg_pool_ignores_bias_and_m_neg():
    """AVG uses M for both signs and no bias (the pool engine does the same), so a PRM word with
    a bias and an out-of-range M_neg is still a valid AVG parameter word."""
    c = GEOM.c
    x = np.array([[-100, -50, 3, 90]] * c, dtype=np.int8).T.reshape(4, 1, c)  # 4 pixels in one row
    img = pack_input(GEOM, np.ascontiguousarray(x.transpose(2, 1, 0)))  # (C, 1, 4)
    mach = machine()
    mach.mem_write(0, img)
    mach.mem_write(0x1000, prm_bytes(c, 12345, 20000, 0xFFFF, 16))
    prog = [isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=0, x_size=4),
            isa.Load(buf=isa.Buf.PRM, sram_base=0, dram_addr=0x1000, x_size=1, push_next=True),
            isa.Pool(inp_base=0, out_base=0, prm_base=0, in_w=4, in_plane=4, out_h=1, out_w=2, kh=1, kw=2,
                     stride_x=2, mode=isa.PoolMode.AVG, pop_prev=True, push_next=True),
            isa.Store(sram_base=0, dram_addr=0x2000, x_size=2, pop_prev=True), isa.Finish()]
    mach.run(prog, insn_base=INSN)
    got = unpack_output(GEOM, mach.mem_read(0x2000, 2 * B), (c, 1, 2))
    ref = ops.avgpool(np.ascontiguousarray(x.transpose(2, 1, 0))[None], (1, 2), (1, 2), 0, True, 0, 20000, 16, 0)[0]
    np.testing.assert_array_equal(got, ref)
    with pytest.raises(IllegalFieldError):  # the same word is refused by CONV (M_neg >= 2**15)
        m2 = machine()
        m2.mem_write(0x1000, prm_bytes(c, 12345, 20000, 0xFFFF, 16))
        m2.run([isa.Load(buf=isa.Buf.PRM, dram_addr=0x1000, x_size=1, push_next=True), isa.Conv(pop_prev=True),
                isa.Finish()], insn_base=INSN)


@pytest.mark.parametrize("preset", [None, "de10nano_int8", "arria10soc_int8"])
def test_geometry_agrees_with_the_gateware(preset):
    """The simulator's buffer depths and accumulator depth are the ones the gateware builds."""
    from dlproc.config import ProcessorConfig
    from dlproc.hardware.gateware.compute import default_acc_depth
    from dlproc.hardware.gateware.top import hardware_params

    cfg = ProcessorConfig() if preset is None else ProcessorConfig.preset(preset)
    geom = Geometry.from_config(cfg)
    hw = hardware_params(cfg)
    assert geom.hw == hw
    assert geom.acc_depth == default_acc_depth(hw)
    from dlproc.hardware.gateware.top import DlprocTop
    assert DlprocTop(cfg).compute.acc_depth == geom.acc_depth
