"""Layer programs on the Verilated processor (small configuration, C = 4): the RTL's DRAM output
must equal the ISA-level simulator's and the golden model's bit for bit, and programs that stop
the processor must stop it with the same STATUS error code as the simulator raises.

One build of the native harness serves the whole module (it is cached on disk by configuration
and source hash, so later runs skip it)."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.hardware.geometry import Geometry
from dlproc.targets.isasim import IsaSimError, Machine
from dlproc.compiler.layerprog import ConvLayer, build_conv_program, build_pool_program
from dlproc.targets.isasim import run_on_isasim

from layerprog_cases import conv_reference, pool_reference, random_conv, random_depthwise, random_pool, small_config

pytestmark = pytest.mark.slow

CFG = small_config(4)


@pytest.fixture(scope="module")
def sim():
    from dlproc.sim.harness import NativeSim

    with NativeSim(CFG, ddr_size=1 << 20) as s:
        yield s


def run_both(sim, prog):
    out, res = sim.run_layer_program(prog, max_cycles=5_000_000)
    assert res.error_code == 0, f"processor stopped with error code {res.error_code}"
    isa_out, _ = run_on_isasim(prog)
    return out, isa_out, res


@pytest.mark.parametrize("seed", range(6))
def test_random_conv_rtl_matches_isasim_and_golden(sim, seed):
    layer, x = random_conv(np.random.default_rng(500 + seed), max_ch=10, max_hw=12)
    prog = build_conv_program(CFG, layer, x)
    out, isa_out, res = run_both(sim, prog)
    np.testing.assert_array_equal(isa_out, conv_reference(layer, x))
    np.testing.assert_array_equal(out, isa_out)
    assert res.hw_cycles > 0


@pytest.mark.parametrize("seed", range(6))
def test_random_depthwise_rtl_matches_isasim_and_golden(sim, seed):
    """Random depthwise layers in the conv engine's depthwise mode (on C = 4 the window is one row of
    three taps, so most kernels run as partial-sum chains of links): RTL = ISA simulator = golden."""
    layer, x = random_depthwise(np.random.default_rng(900 + seed), CFG.conv_c, max_hw=14)
    prog = build_conv_program(CFG, layer, x)
    out, isa_out, res = run_both(sim, prog)
    np.testing.assert_array_equal(isa_out, conv_reference(layer, x))
    np.testing.assert_array_equal(out, isa_out)
    assert prog.plan.note.startswith("depthwise mode"), prog.plan.note
    assert all(i.dw for i in prog.instructions if isinstance(i, isa.Conv))


def test_multi_tile_conv_with_streamed_weights_on_rtl(sim):
    rng = np.random.default_rng(99)
    x = rng.integers(-128, 128, (9, 21, 13), dtype=np.int8)
    w = rng.integers(-128, 128, (30, 9, 3, 3), dtype=np.int8)
    layer = ConvLayer(w, rng.integers(-999, 999, 30).astype(np.int32), rng.integers(1, 1 << 15, 30),
                      rng.integers(14, 20, 30), mult_neg=rng.integers(1, 1 << 15, 30), zp_in=-4, zp_out=2,
                      stride=(1, 2), pads=(1, 1, 1, 1))
    prog = build_conv_program(CFG, layer, x)
    assert prog.plan.steps > 4
    out, isa_out, res = run_both(sim, prog)
    # Loads overlap compute and stores: the RTL stays close to the planner's pipelined estimate
    # (a generous bound, so that it only trips when the overlap is lost, e.g. a serialising token).
    assert res.hw_cycles <= 1.3 * prog.plan.estimated_cycles
    np.testing.assert_array_equal(isa_out, conv_reference(layer, x))
    np.testing.assert_array_equal(out, isa_out)


@pytest.mark.parametrize("kind", ["max", "avg", "global_avg"])
def test_pools_rtl_matches_isasim_and_golden(sim, kind):
    layer, x = random_pool(np.random.default_rng(77), kind, max_ch=9, max_hw=14)
    prog = build_pool_program(CFG, layer, x)
    out, isa_out, _ = run_both(sim, prog)
    np.testing.assert_array_equal(isa_out, pool_reference(layer, x))
    np.testing.assert_array_equal(out, isa_out)


def test_avg_pool_excluding_padding_on_rtl(sim):
    """Per-window divisors: several POOLs per tile with different PRM words."""
    from dlproc.targets.golden import ops
    from dlproc.compiler.layerprog import PoolLayer

    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (6, 11, 9), dtype=np.int8)
    mult, shift = ops.avgpool_multipliers(1.0, 1.3, (11, 9), 3, 2, (1, 1, 1, 1), False)
    layer = PoolLayer("avg", 3, 2, (1, 1, 1, 1), zp_in=-3, zp_out=2, mult=mult, shift=shift, count_include_pad=False)
    prog = build_pool_program(CFG, layer, x)
    out, isa_out, _ = run_both(sim, prog)
    np.testing.assert_array_equal(isa_out, ops.avgpool(x[None], 3, 2, 1, False, -3, mult, shift, 2)[0])
    np.testing.assert_array_equal(out, isa_out)


def test_two_layers_chained_on_rtl(sim):
    """conv -> max pool joined by ``chain_streams``' barrier: the RTL honours the store -> compute
    -> load token chain, so the pool reads the conv's finished output."""
    from dlproc.compiler.planners.packing import unpack_output
    from layerprog_cases import chained_conv_pool

    case = chained_conv_pool(CFG)
    for addr, data in case["segments"]:
        sim.mem_write(addr, data)
    prog = isa.encode_program(case["program"])
    sim.mem_write(case["insn_base"], prog)
    res = sim.run_program(case["insn_base"], len(prog) // 32, *case["window"], max_cycles=2_000_000)
    assert res.error_code == 0
    out = unpack_output(case["geom"], sim.mem_read(case["out_addr"], case["out_bytes"]), case["out_shape"])
    np.testing.assert_array_equal(out, case["expected"])


def isa_error_code(prog_bytes: bytes, insn_base: int, count: int, window: tuple[int, int]) -> int:
    m = Machine(CFG, dram_size=1 << 20)
    try:
        m.run(prog_bytes, insn_base=insn_base, count=count, dma_base=window[0], dma_limit=window[1])
    except IsaSimError as exc:
        return int(exc.code)
    return 0


ERROR_PROGRAMS = {
    "deadlock": [isa.Conv(pop_prev=True), isa.Finish()],
    "ran_off_end": [isa.Mark(index=0)],
    "dma_load": [isa.Load(buf=isa.Buf.INP, dram_addr=0x8_0000, x_size=2), isa.Finish()],
    "dma_store": [isa.Store(dram_addr=0x8_0000, x_size=1), isa.Finish()],
    "sram_range": [isa.Load(buf=isa.Buf.INP, sram_base=(1 << 20) - 1, x_size=4), isa.Finish()],
}


@pytest.mark.parametrize("name", list(ERROR_PROGRAMS))
def test_error_codes_match_isasim(sim, name):
    insn_base, window = 0x1000, (0x1000, 0x4000)
    prog = isa.encode_program(ERROR_PROGRAMS[name])
    expected = isa_error_code(prog, insn_base, len(prog) // 32, window)
    assert expected == int(getattr(isa.ErrorCode, name.upper()))
    sim.mem_write(insn_base, prog)
    res = sim.run_program(insn_base, len(prog) // 32, *window, max_cycles=200_000)
    assert res.error_code == expected


def test_illegal_opcode_code_matches(sim):
    insn_base, window = 0x2000, (0x2000, 0x3000)
    sim.mem_write(insn_base, bytes(64))
    res = sim.run_program(insn_base, 2, *window, max_cycles=200_000)
    assert res.error_code == isa_error_code(bytes(64), insn_base, 2, window) == isa.ErrorCode.ILLEGAL_OPCODE


def test_layer_program_outside_window_stops_with_dma_error(sim):
    """The window starts at the instructions, so the input region is outside: the first LOAD
    faults, on both."""
    layer, x = random_conv(np.random.default_rng(3), max_ch=6, max_hw=8)
    prog = build_conv_program(CFG, layer, x)
    window = (prog.insn_base, prog.dma_limit)
    m = Machine(CFG, dram_size=1 << 20)
    m.mem_write(prog.dram_base, prog.image)
    with pytest.raises(IsaSimError) as info:
        m.run(None, insn_base=prog.insn_base, count=prog.insn_count, dma_base=window[0], dma_limit=window[1])
    assert info.value.code == isa.ErrorCode.DMA_LOAD
    sim.mem_write(prog.dram_base, prog.image)
    res = sim.run_program(prog.insn_base, prog.insn_count, *window, max_cycles=200_000)
    assert res.error_code == isa.ErrorCode.DMA_LOAD


def fused_program(seed: int) -> tuple[list[isa.Instruction], bytes, tuple[int, int]]:
    """Depthwise CONVs with results to INP feeding a pointwise CONV (wait_writes), while a second,
    long LOAD writes other INP words (the load unit yields INP's write port to the conv drain) for
    a dense CONV after them; both results are stored. Returns the program, the DRAM image at 0
    and the (address, bytes) of the outputs."""
    rng = np.random.default_rng(seed)
    c, geom = CFG.conv_c, Geometry.from_config(CFG)
    pitch = geom.pitch("OUT")
    oh, ow = 6, 7
    in_h, in_w = oh, ow + 2  # depthwise 1x3 (C = 4: a one-row window), no vertical halo
    px = oh * ow
    blocks = 2
    dw_in, big = 0x0000, 0x4000  # DRAM: depthwise input, the second LOAD's tensor
    wgt, prm, out = 0x20000, 0x30000, 0x40000
    image = bytearray(0x50000)
    image[:0x20000] = rng.integers(0, 256, 0x20000, dtype=np.uint8).tobytes()
    wgt_words = blocks + 2 * blocks + 9  # depthwise (one per block), pointwise (2 output blocks), dense 3x3
    wp = geom.pitch("WGT")
    image[wgt:wgt + wgt_words * wp] = rng.integers(-128, 128, wgt_words * wp, dtype=np.int8).tobytes()
    lanes = np.zeros((8, c), dtype=[("b", "<i4"), ("m", "<u2"), ("n", "<u2"), ("s", "u1")])
    lanes["b"], lanes["m"] = rng.integers(-3000, 3000, (8, c)), rng.integers(1 << 13, 1 << 15, (8, c))
    lanes["n"], lanes["s"] = lanes["m"], rng.integers(19, 23, (8, c))
    for k in range(8):
        image[prm + k * geom.pitch("PRM"):prm + k * geom.pitch("PRM") + 9 * c] = lanes[k].tobytes()
    F = 300  # INP words of the fused tile (away from both LOADs' words)
    big_h, big_w = 12, 12
    prog = [
        isa.Load(buf=isa.Buf.WGT, dram_addr=wgt, x_size=wgt_words),
        isa.Load(buf=isa.Buf.PRM, dram_addr=prm, x_size=8),
        isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=dw_in, x_size=in_w, y_size=in_h, z_size=blocks,
                 y_stride=in_w, z_stride=in_w * in_h, push_next=True),
        isa.Load(buf=isa.Buf.INP, sram_base=120, dram_addr=big, x_size=big_w, y_size=big_h, y_stride=big_w,
                 z_stride=big_w * big_h, push_next=True),
    ]
    for b in range(blocks):
        prog.append(isa.Conv(inp_base=b * in_w * in_h, wgt_base=b, prm_base=b, out_base=F + b * px, in_w=in_w,
                             in_plane=in_w * in_h, out_h=oh, out_w=ow, kh=1, kw=3, dw=1, dw_rows=int(rng.integers(1, 8)),
                             act_min=0, to_inp=1, pop_prev=b == 0))
    for ob in range(2):
        prog.append(isa.Conv(inp_base=F, wgt_base=blocks + ob * blocks, prm_base=2 + ob, out_base=ob * px, in_w=ow,
                             in_plane=px, out_h=oh, out_w=ow, kh=1, kw=1, cin_blocks=blocks, wait_writes=ob == 0,
                             push_next=ob == 1))
    dense_at = 2 * px
    prog.append(isa.Conv(inp_base=120, wgt_base=3 * blocks, prm_base=4, out_base=dense_at, in_w=big_w,
                         in_plane=big_w * big_h, out_h=big_h - 2, out_w=big_w - 2, kh=3, kw=3, pop_prev=True,
                         push_next=True))
    prog += [
        isa.Store(sram_base=0, dram_addr=out, x_size=2 * px, pop_prev=True),
        isa.Store(sram_base=dense_at, dram_addr=out + 2 * px * pitch, x_size=(big_h - 2) * (big_w - 2), pop_prev=True),
        isa.Finish(),
    ]
    return prog, bytes(image), (out, (2 * px + (big_h - 2) * (big_w - 2)) * pitch)


@pytest.mark.parametrize("seed", range(3))
def test_results_to_inp_while_a_load_writes_inp_on_rtl(sim, seed):
    """CONV.to_inp on the whole processor: the conv drain and the load unit share INP's write
    port (the load yields); the fused depthwise -> pointwise results and the dense conv over the
    concurrently loaded words are bit-exact with the ISA simulator."""
    prog, image, (out, n) = fused_program(seed)
    insn_base, window = 0x60000, (0, 0x80000)
    for insn in prog:
        insn.validate(CFG_HW)
    code = isa.encode_program(prog)
    m = Machine(CFG, dram_size=1 << 20)
    m.mem_write(0, image)
    m.run(code, insn_base=insn_base, count=len(prog), dma_base=window[0], dma_limit=window[1])
    sim.mem_write(0, image)
    sim.mem_write(insn_base, code)
    res = sim.run_program(insn_base, len(prog), *window, max_cycles=2_000_000)
    assert res.error_code == 0
    want = m.mem_read(out, n)
    assert sim.mem_read(out, n) == want
    assert len(set(want)) > 50  # not a constant region


CFG_HW = isa.HardwareParams.from_config(CFG)
