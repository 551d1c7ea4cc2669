"""The CSR slave of DlprocTop in the Amaranth simulator: reset values, read/write, latency."""

from __future__ import annotations

from amaranth.sim import Simulator

from dlproc.hardware import isa, regmap
from dlproc.hardware.gateware import DlprocTop

from test_gateware_core_support import REG, csr_read, csr_write, small_hw

HW = small_hw()


def _run(testbench):
    dut = DlprocTop(HW)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    out = {}

    async def bench(ctx):
        await testbench(ctx, dut, out)

    sim.add_testbench(bench)
    sim.run()
    return out


def expected_reset() -> dict[str, int]:
    return {
        "ID": 0x444C5052,
        "VERSION": (regmap.VERSION_MAJOR << 16) | (regmap.VERSION_MINOR << 8) | isa.ISA_VERSION,
        "CONFIG_HASH_LO": 0x89ABCDEF,
        "CONFIG_HASH_HI": 0x01234567,
        "HW_PARAMS": 4 | (8 << 8) | (HW.max_burst << 16) | (HW.queue_depth << 24),
        "HW_INP_DEPTH": 64,
        "HW_WGT_DEPTH": 16,
        "HW_PRM_DEPTH": 4,
        "HW_OUT_DEPTH": 64,
        "HW_PROFILE_DEPTH": 4,
    }


def test_reset_values_of_every_register():
    async def bench(ctx, dut, out):
        out["values"] = {r.name: await csr_read(ctx, dut, r.name) for r in regmap.REGISTERS}
        out["unmapped"] = [await csr_read(ctx, dut, off) for off in (0x0A, 0x1F, 0x3F)]

    out = _run(bench)
    expected = {r.name: 0 for r in regmap.REGISTERS} | expected_reset()
    assert out["values"] == expected
    assert out["unmapped"] == [0, 0, 0]


def test_read_write_registers_and_w1s_bits():
    values = {"INSN_BASE": 0x1000, "INSN_COUNT": 77, "DMA_BASE": 0x800, "DMA_LIMIT": 0xFFFF_FFFF,
              "PROF_INDEX": 3}

    async def bench(ctx, dut, out):
        for name, value in values.items():
            await csr_write(ctx, dut, name, value)
        # IRQ_EN is the only stored CTRL bit; ACK (W1S) reads back as 0.
        irq_en = 1 << REG["CTRL"].field("IRQ_EN").lsb
        ack = 1 << REG["CTRL"].field("ACK").lsb
        await csr_write(ctx, dut, "CTRL", irq_en | ack)
        # Writes to read-only registers are ignored.
        await csr_write(ctx, dut, "ID", 0)
        await csr_write(ctx, dut, "STATUS", 0xFFFF_FFFF)
        out["values"] = {name: await csr_read(ctx, dut, name) for name in values}
        out["ctrl"] = await csr_read(ctx, dut, "CTRL")
        out["id"] = await csr_read(ctx, dut, "ID")
        out["status"] = await csr_read(ctx, dut, "STATUS")
        out["irq"] = ctx.get(dut.irq)

    out = _run(bench)
    assert out["values"] == values
    assert out["ctrl"] == 1 << REG["CTRL"].field("IRQ_EN").lsb
    assert out["id"] == regmap.MAGIC
    assert out["status"] == 0
    assert out["irq"] == 0


def test_read_latency_is_exactly_one_cycle():
    async def bench(ctx, dut, out):
        ctx.set(dut.csr.address, REG["ID"].offset)
        ctx.set(dut.csr.read, 1)
        out["before"] = ctx.get(dut.csr.readdata)  # nothing read yet
        await ctx.tick()
        ctx.set(dut.csr.read, 0)
        out["after"] = ctx.get(dut.csr.readdata)
        ctx.set(dut.csr.address, REG["HW_INP_DEPTH"].offset)
        await ctx.tick()
        out["held"] = ctx.get(dut.csr.readdata)  # no read: readdata keeps the last value

    out = _run(bench)
    assert out == {"before": 0, "after": regmap.MAGIC, "held": regmap.MAGIC}


def test_status_read_right_after_start_shows_busy():
    from dlproc.hardware.isa import ErrorCode

    from test_gateware_core_support import ctrl, status_fields

    async def bench(ctx, dut, out):
        await csr_write(ctx, dut, "INSN_COUNT", 1)  # DMA_LIMIT stays 0: the fetch is refused
        await csr_write(ctx, dut, "CTRL", ctrl(start=1))
        out["first"] = status_fields(await csr_read(ctx, dut, "STATUS"))
        for _ in range(20):
            status = status_fields(await csr_read(ctx, dut, "STATUS"))
            if not status["busy"]:
                break
        out["end"] = status
        await csr_write(ctx, dut, "CTRL", ctrl(ack=1))
        out["acked"] = status_fields(await csr_read(ctx, dut, "STATUS"))

    out = _run(bench)
    assert out["first"]["busy"] == 1
    assert out["end"] == {"busy": 0, "done": 0, "error": 1, "error_code": ErrorCode.DMA_FETCH}
    assert out["acked"] == {"busy": 0, "done": 0, "error": 0, "error_code": 0}
