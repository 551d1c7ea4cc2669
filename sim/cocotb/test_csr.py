"""cocotb bench: the processor's CSR block through cocotbext-avalon's AvalonMMMasterBFM.

Checks every register's reset value against ``dlproc.hardware.regmap``, the configuration-derived identity
registers against ``ProcessorConfig``/``HardwareParams``, read/write behaviour per access type
(RW reads back, RO ignores writes, W1S bits read as 0), and the irq/ACK protocol.
"""

from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles

from dlproc.hardware import isa, regmap
from dlproc.sim.cocotb.common import bench_config, get_field, mask, setup

MEM_SIZE = 1 << 16


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def reset_values_match_regmap(dut):
    bench = await setup(dut, MEM_SIZE)
    for r in regmap.REGISTERS:
        if r.reset is not None:
            got = await bench.csr.read(r.offset)
            assert got == r.reset, f"{r.name}: reset value 0x{got:08x}, regmap says 0x{r.reset:08x}"


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def identity_registers_match_config(dut):
    cfg = bench_config()
    hw = isa.HardwareParams.from_config(cfg)
    bench = await setup(dut, MEM_SIZE)
    lo, hi = await bench.read("CONFIG_HASH_LO"), await bench.read("CONFIG_HASH_HI")
    assert (hi << 32) | lo == cfg.hash64
    version = await bench.read("VERSION")
    assert get_field(version, "VERSION", "ISA") == isa.ISA_VERSION
    assert get_field(version, "VERSION", "MAJOR") == regmap.VERSION_MAJOR
    params = await bench.read("HW_PARAMS")
    assert get_field(params, "HW_PARAMS", "C") == cfg.conv_c
    assert get_field(params, "HW_PARAMS", "MEM_BYTES") == cfg.memory_data_bytes
    assert get_field(params, "HW_PARAMS", "MAX_BURST") == hw.max_burst
    for name, depth in (("HW_INP_DEPTH", hw.inp_depth), ("HW_WGT_DEPTH", hw.wgt_depth),
                        ("HW_PRM_DEPTH", hw.prm_depth), ("HW_OUT_DEPTH", hw.out_depth),
                        ("HW_PROFILE_DEPTH", hw.profile_depth)):
        assert await bench.read(name) == depth, name


@cocotb.test(timeout_time=4, timeout_unit="ms")
async def access_types_behave(dut):
    bench = await setup(dut, MEM_SIZE)
    rng = bench.rng
    # Whole-word RW registers read back exactly what was written.
    rw = [r for r in regmap.REGISTERS if r.access == "RW" and r.name != "CTRL"]
    assert rw, "regmap has no plain RW registers"
    for r in rw:
        for _ in range(3):
            value = rng.getrandbits(32)
            await bench.csr.write(r.offset, value)
            width_mask = sum(f.mask for f in r.fields)
            got = await bench.csr.read(r.offset)
            assert got == value & width_mask, f"{r.name}: wrote 0x{value:08x}, read 0x{got:08x}"
    # RO registers ignore writes.
    for r in regmap.REGISTERS:
        if r.access == "RO" and r.name not in ("CYCLES_LO", "CYCLES_HI", "STATUS"):
            before = await bench.csr.read(r.offset)
            await bench.csr.write(r.offset, before ^ 0xFFFFFFFF)
            assert await bench.csr.read(r.offset) == before, f"{r.name} changed after a write"
    # CTRL: IRQ_EN is RW, the W1S action bits read as 0.
    await bench.write("CTRL", mask("CTRL", "IRQ_EN"))
    assert await bench.read("CTRL") == mask("CTRL", "IRQ_EN")
    await bench.write("CTRL", 0)
    assert await bench.read("CTRL") == 0


@cocotb.test(timeout_time=4, timeout_unit="ms")
async def irq_follows_status_and_ack(dut):
    bench = await setup(dut, MEM_SIZE, wait_prob=0.2, latency=(1, 6))
    # A zeroed instruction is ILLEGAL_OPCODE: the processor stops with an error and raises irq.
    status, _ = await bench.run_program(0x100, 1, 0, MEM_SIZE, limit=5000)
    assert get_field(status, "STATUS", "ERROR") == 1
    assert get_field(status, "STATUS", "ERROR_CODE") == isa.ErrorCode.ILLEGAL_OPCODE
    assert get_field(status, "STATUS", "BUSY") == 0
    assert int(dut.irq.value) == 1
    assert await bench.read("ERR_INSN") == 0
    # irq is gated by IRQ_EN and cleared by ACK.
    await bench.write("CTRL", 0)
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0
    await bench.write("CTRL", mask("CTRL", "IRQ_EN"))
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 1
    await bench.write("CTRL", mask("CTRL", "IRQ_EN") | mask("CTRL", "ACK"))
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0
    assert get_field(await bench.read("STATUS"), "STATUS", "ERROR") == 0
    assert bench.mem.errors == [], bench.mem.errors
