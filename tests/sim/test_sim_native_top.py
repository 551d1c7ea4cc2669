"""The native harness on the real processor (``dlproc_top``), C = 4 with a 64-bit memory bus.

One Verilator build serves the whole module (cached by configuration and Verilog hash). Layer
programs come from ``dlproc.compiler.layerprog``; their results are compared bit-exactly with the golden
model (``dlproc.targets.golden.ops`` + ``dlproc.hardware.numerics``), not with the ISA simulator.
"""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.hardware import isa, regmap
from dlproc.errors import SimulationError
from dlproc.hardware.isa import ErrorCode
from dlproc.compiler.layerprog import PoolLayer, build_conv_program, build_pool_program
from dlproc.sim.harness import NativeSim, SimTimeout

from layerprog_cases import conv_reference, pool_reference, random_conv, random_pool, small_config

pytestmark = pytest.mark.slow  # the first use builds the processor (about a minute or two)

DDR_SIZE = 1 << 22
PROG = 0x1000          # where the hand-written programs live


@pytest.fixture(scope="module")
def cfg():
    return small_config(4, width=64)


@pytest.fixture()
def sim(cfg):
    with NativeSim(cfg, ddr_size=DDR_SIZE) as s:
        yield s


def reg(name: str) -> int:
    return regmap.offset(name)


def field(value: int, register: str, name: str) -> int:
    f = regmap.REG[register].field(name)
    return (value & f.mask) >> f.lsb


def run_insns(sim: NativeSim, insns: list[bytes], **kw):
    sim.mem_write(PROG, b"".join(insns))
    return sim.run_program(PROG, len(insns), **kw)


def test_identity_and_hardware_registers(sim, cfg):
    hw = isa.HardwareParams.from_config(cfg)
    assert sim.csr_read(reg("ID")) == regmap.MAGIC
    version = sim.csr_read(reg("VERSION"))
    assert field(version, "VERSION", "ISA") == isa.ISA_VERSION
    assert field(version, "VERSION", "MAJOR") == regmap.VERSION_MAJOR
    assert field(version, "VERSION", "MINOR") == regmap.VERSION_MINOR
    assert sim.csr_read(reg("CONFIG_HASH_LO")) | (sim.csr_read(reg("CONFIG_HASH_HI")) << 32) == cfg.hash64
    params = sim.csr_read(reg("HW_PARAMS"))
    assert field(params, "HW_PARAMS", "C") == 4
    assert field(params, "HW_PARAMS", "MEM_BYTES") == 8
    assert field(params, "HW_PARAMS", "MAX_BURST") == hw.max_burst
    assert field(params, "HW_PARAMS", "QUEUE_DEPTH") == hw.queue_depth
    for name, depth in (("HW_INP_DEPTH", hw.inp_depth), ("HW_WGT_DEPTH", hw.wgt_depth),
                        ("HW_PRM_DEPTH", hw.prm_depth), ("HW_OUT_DEPTH", hw.out_depth),
                        ("HW_PROFILE_DEPTH", hw.profile_depth)):
        assert sim.csr_read(reg(name)) == depth, name
    for r in regmap.REGISTERS:
        if r.reset is not None:
            assert sim.csr_read(r.offset) == r.reset, r.name
    assert not sim.irq


def test_maxpool_1x1_moves_the_bytes(sim, cfg):
    x = np.random.default_rng(3).integers(-128, 128, (7, 5, 9), dtype=np.int8)
    prog = build_pool_program(cfg, PoolLayer("max", 1, 1), x)
    out, res = sim.run_layer_program(prog, max_cycles=200_000)
    assert res.ok and res.error_code == 0 and sim.irq
    np.testing.assert_array_equal(out, x)
    # Input, output and instructions all crossed the bus; output bytes are C valid lanes per element.
    assert res.ddr.write_bytes == 2 * 5 * 9 * 4
    assert res.ddr.read_bytes >= len(prog.instructions) * isa.INSN_BYTES + 2 * 5 * 9 * 8
    assert 0 < res.hw_cycles <= res.cycles


@pytest.mark.parametrize("seed", range(4))
def test_random_conv_matches_golden(sim, cfg, seed):
    layer, x = random_conv(np.random.default_rng(100 + seed), max_ch=9, max_hw=9)
    prog = build_conv_program(cfg, layer, x)
    out, res = sim.run_layer_program(prog, max_cycles=3_000_000)
    assert res.ok, res
    np.testing.assert_array_equal(out, conv_reference(layer, x))


@pytest.mark.parametrize("kind", ["max", "avg", "global_avg"])
def test_random_pool_matches_golden(sim, cfg, kind):
    layer, x = random_pool(np.random.default_rng(7), kind, max_ch=9, max_hw=10)
    prog = build_pool_program(cfg, layer, x)
    out, res = sim.run_layer_program(prog, max_cycles=1_000_000)
    assert res.ok, res
    np.testing.assert_array_equal(out, pool_reference(layer, x))


def test_ddr_latency_and_bandwidth_change_cycles(cfg):
    layer, x = random_conv(np.random.default_rng(5), max_ch=8, max_hw=8)
    prog = build_conv_program(cfg, layer, x)
    expected = conv_reference(layer, x)
    cycles = {}
    for latency, bpc in ((10, 8), (100, 8), (10, 1)):
        with NativeSim(cfg, ddr_size=DDR_SIZE, ddr_latency_cycles=latency, ddr_bytes_per_cycle=bpc) as s:
            assert s.build.cached                     # DDR timing is a run-time parameter
            out, res = s.run_layer_program(prog, max_cycles=3_000_000)
            np.testing.assert_array_equal(out, expected)
            cycles[latency, bpc] = res.cycles
    assert cycles[100, 8] > cycles[10, 8] + 90       # every dependent read waits longer
    beats = res.ddr.read_beats + res.ddr.write_beats
    assert cycles[10, 1] >= beats * 8 - 16            # one 8-byte beat per 8 cycles at 1 byte/cycle


def test_illegal_opcode_stops_with_error(sim):
    res = run_insns(sim, [bytes(isa.INSN_BYTES)])      # opcode 0 is illegal
    assert res.error_code == ErrorCode.ILLEGAL_OPCODE and sim.irq
    assert field(res.status, "STATUS", "ERROR") == 1 and field(res.status, "STATUS", "BUSY") == 0
    sim.csr_write(reg("CTRL"), regmap.REG["CTRL"].field("ACK").mask)
    sim.step(2)
    assert not sim.irq and field(sim.csr_read(reg("STATUS")), "STATUS", "ERROR") == 0


def test_program_running_off_its_end(sim):
    res = run_insns(sim, [isa.Mark(index=0).encode()])
    assert res.error_code == ErrorCode.RAN_OFF_END


def test_dma_window_violation_issues_no_transaction(sim):
    # The LOAD's source lies beyond the 4 MiB DDR model: had the processor issued the burst, the
    # model would have flagged an out-of-range access and run_program would raise.
    load = isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=DDR_SIZE + 0x10000, x_size=4, y_stride=4, z_stride=4)
    res = run_insns(sim, [load.encode(), isa.Finish().encode()], dma_base=0, dma_limit=DDR_SIZE)
    assert res.error_code == ErrorCode.DMA_LOAD
    assert sim.csr_read(reg("ERR_ADDR")) == DDR_SIZE + 0x10000
    assert sim.ddr_error is None
    assert res.ddr.write_beats == 0


def test_fetch_outside_window_reads_nothing(sim):
    res = run_insns(sim, [isa.Finish().encode()], dma_base=0x100000, dma_limit=0x200000)
    assert res.error_code == ErrorCode.DMA_FETCH
    assert res.ddr.read_cmds == 0 and res.ddr.read_beats == 0


def test_run_timeout_then_completion(sim, cfg):
    layer, x = random_conv(np.random.default_rng(9), max_ch=8, max_hw=8)
    prog = build_conv_program(cfg, layer, x)
    sim.mem_write(prog.dram_base, prog.image)
    sim.start(prog.insn_base, prog.insn_count, prog.dma_base, prog.dma_limit)
    with pytest.raises(SimTimeout):
        sim.run(20)
    assert sim.run(20, raise_on_timeout=False) == 20 and sim.last_status == "timeout"
    sim.run(3_000_000)
    assert sim.last_status == "irq"
    out = prog.read_output(sim.mem_read(prog.output_addr, prog.output_bytes), base=prog.output_addr)
    np.testing.assert_array_equal(out, conv_reference(layer, x))


def test_ddr_model_error_is_reported(cfg):
    # A DDR model smaller than the program's DMA window: the LOAD reaches past the model.
    x = np.zeros((4, 8, 8), dtype=np.int8)
    prog = build_pool_program(cfg, PoolLayer("max", 1, 1), x)
    with NativeSim(cfg, ddr_size=prog.dram_base + len(prog.image) + 0x1000) as s:
        s.mem_write(prog.dram_base, prog.image)
        load = isa.Load(buf=isa.Buf.INP, sram_base=0, dram_addr=s.ddr_size, x_size=2, y_stride=2, z_stride=2)
        s.mem_write(PROG, load.encode() + isa.Finish().encode())
        with pytest.raises(SimulationError, match="outside the DDR model"):
            s.run_program(PROG, 2)
