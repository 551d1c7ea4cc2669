"""cocotb bench: the processor's memory master against a randomized Avalon-MM memory.

The memory model (``avalon_mem.AvalonMemoryModel``) randomizes waitrequest, read latency and
readdatavalid bubbles and checks the master's protocol. Programs come from ``dlproc.compiler.layerprog``:
a 1x1 max pool (LOAD, POOL, STORE) must reproduce its input exactly, a random convolution must
match the golden model, and LOAD/STORE/fetch addresses outside the DMA window must stop the
processor with the right error code without any bus transaction to them. A ``MemoryPorts = 2``
processor gets one randomized model per master (reads on ``mem__``, writes on ``mem1__``, one
memory), and the benches check that each port carries only its own kind of command; two more
benches (two ports only, skipped otherwise) check that a STORE completes only when its write
responses have returned (MARK and DONE come after the last response, under long random response
latencies) and that an error response stops the processor with WRITE_RESPONSE.
"""

from __future__ import annotations

import os

import numpy as np

import cocotb

from dlproc.hardware import isa
from dlproc.targets.golden import ops
from dlproc.compiler.layerprog import ConvLayer, PoolLayer, build_conv_program, build_pool_program
from dlproc.hardware.numerics import requantize
from dlproc.sim.cocotb.common import CONFIG_ENV, bench_config, get_field, mask, setup

MEM_SIZE = 1 << 18
PROG = 0x200
#: the write-response benches need the write master of a MemoryPorts = 2 processor
ONE_PORT = CONFIG_ENV not in os.environ or bench_config().memory_ports != 2


def load_image(bench, prog) -> None:
    bench.memory[prog.dram_base:prog.dram_base + len(prog.image)] = prog.image


def read_output(bench, prog) -> np.ndarray:
    return prog.read_output(bytes(bench.memory[prog.output_addr:prog.output_addr + prog.output_bytes]),
                            base=prog.output_addr)


async def run_layer(bench, prog, limit: int) -> int:
    load_image(bench, prog)
    status, cycles = await bench.run_program(prog.insn_base, prog.insn_count, prog.dma_base, prog.dma_limit,
                                             limit=limit)
    assert get_field(status, "STATUS", "ERROR") == 0, f"error code {get_field(status, 'STATUS', 'ERROR_CODE')}"
    assert get_field(status, "STATUS", "DONE") == 1
    return cycles


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def load_pool_store_moves_bytes_under_random_timing(dut):
    cfg = bench_config()
    bench = await setup(dut, MEM_SIZE, wait_prob=0.4, latency=(1, 20), gap_prob=0.3, max_outstanding=3)
    rng = np.random.default_rng(bench.rng.getrandbits(32))
    for shape in ((5, 4, 7), (8, 3, 3)):
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        prog = build_pool_program(cfg, PoolLayer("max", 1, 1), x, dram_base=0x1000)
        await run_layer(bench, prog, limit=100_000)
        np.testing.assert_array_equal(read_output(bench, prog), x)
    assert bench.errors == [], bench.errors
    assert bench.total("wait_cycles") > 0 and bench.total("read_beats") > 0 and bench.total("write_beats") > 0
    check_port_split(bench)


def check_port_split(bench) -> None:
    """With two masters, port 0 only reads and port 1 only writes (and both were used)."""
    if bench.mem1 is None:
        return
    assert bench.mem.commands and all(c.kind == "read" for c in bench.mem.commands)
    assert bench.mem1.commands and all(c.kind == "write" for c in bench.mem1.commands)
    assert bench.mem.write_beats == 0 and bench.mem1.read_beats == 0


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def random_conv_matches_golden_under_random_timing(dut):
    cfg = bench_config()
    bench = await setup(dut, MEM_SIZE, wait_prob=0.3, latency=(1, 30), gap_prob=0.2)
    rng = np.random.default_rng(bench.rng.getrandbits(32))
    ci, co, h, w = 6, 5, 6, 5
    x = rng.integers(-128, 128, (ci, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ci, 3, 3), dtype=np.int8)
    bias = rng.integers(-5000, 5000, co).astype(np.int32)
    mult = rng.integers(1, 1 << 15, co)
    shift = rng.integers(12, 20, co)
    layer = ConvLayer(wt, bias, mult, shift, None, zp_in=3, zp_out=-2, stride=1, pads=1)
    prog = build_conv_program(cfg, layer, x, dram_base=0x1000)
    await run_layer(bench, prog, limit=300_000)
    acc = ops.conv2d(x[None], wt, bias, 1, 1, 1, 1, 3)[0]
    expected = requantize(acc, mult.reshape(-1, 1, 1), shift.reshape(-1, 1, 1), -2, -128, 127)
    np.testing.assert_array_equal(read_output(bench, prog), expected)
    assert bench.errors == [], bench.errors
    check_port_split(bench)


def _program(bench, insns) -> None:
    raw = isa.encode_program(insns)
    bench.memory[PROG:PROG + len(raw)] = raw


@cocotb.test(timeout_time=4, timeout_unit="ms")
async def dma_window_violations_issue_no_transaction(dut):
    bench = await setup(dut, MEM_SIZE, wait_prob=0.3, latency=(1, 8))
    window = (0x0, 0x10000)
    outside = 0x20000
    cases = [
        ("LOAD", isa.ErrorCode.DMA_LOAD,
         [isa.Load(buf=isa.Buf.INP, dram_addr=outside, x_size=4, y_stride=4, z_stride=4), isa.Finish()]),
        ("STORE", isa.ErrorCode.DMA_STORE,
         [isa.Store(dram_addr=outside, x_size=4, y_stride=4, z_stride=4), isa.Finish()]),
    ]
    for name, code, insns in cases:
        _program(bench, insns)
        before = [len(m.commands) for m in bench.ports]
        status, _ = await bench.run_program(PROG, len(insns), *window, limit=20_000)
        assert get_field(status, "STATUS", "ERROR_CODE") == code, name
        assert await bench.read("ERR_ADDR") == outside, name
        issued = [c for m, b in zip(bench.ports, before) for c in m.commands[b:]]
        assert all(c.kind == "read" and c.address < window[1] for c in issued), (name, issued)
    # An instruction fetch outside the window reads nothing at all.
    before = len(bench.commands)
    status, _ = await bench.run_program(0x30000, 1, *window, limit=20_000)
    assert get_field(status, "STATUS", "ERROR_CODE") == isa.ErrorCode.DMA_FETCH
    assert len(bench.commands) == before
    assert bench.errors == [], bench.errors


def _store_mark_finish(base: int) -> list:
    """A 64-beat STORE (several bursts) giving its token to FINISH, MARK 0 behind it."""
    return [isa.Store(sram_base=0, dram_addr=base, x_size=64, y_stride=64, z_stride=64, push_prev=True),
            isa.Mark(index=0), isa.Finish(pop_next=True)]


async def _start(bench, count: int, window: tuple[int, int]) -> int:
    """Start the program at PROG; return the write port's cycle at the START write."""
    await bench.write("CTRL", mask("CTRL", "ACK"))
    await bench.write("INSN_BASE", PROG)
    await bench.write("INSN_COUNT", count)
    await bench.write("DMA_BASE", window[0])
    await bench.write("DMA_LIMIT", window[1])
    await bench.write("CTRL", mask("CTRL", "START") | mask("CTRL", "IRQ_EN"))
    return bench.mem1._cycle


@cocotb.test(timeout_time=10, timeout_unit="ms", skip=ONE_PORT)
async def store_completes_only_after_its_write_responses(dut):
    """MARK (which runs once every earlier STORE is complete), the STORE's token (FINISH pops it)
    and DONE must all come after the last write response, which arrives 60..120 cycles after the
    last beat was accepted: taking completion at the acceptance would put them before it."""
    bench = await setup(dut, MEM_SIZE, wait_prob=0.3, latency=(1, 8), response_latency=(60, 120))
    w = bench.mem1
    for k in range(2):
        base = 0x8000 + k * 0x1000
        insns = _store_mark_finish(base)
        _program(bench, insns)
        first = len(w.responses)
        start = await _start(bench, len(insns), (0, MEM_SIZE))
        await bench.wait_irq(20_000)
        status = await bench.read("STATUS")
        assert get_field(status, "STATUS", "DONE") == 1, hex(status)
        responses = w.responses[first:]
        assert [a for _, a, _ in responses] == [c.address for c in w.commands[-len(responses):]]
        assert len(responses) >= 2 and all(code == 0 for _, _, code in responses)
        last_response = responses[-1][0] - start          # in CYCLES' time base, within a cycle or two
        assert responses[-1][0] - w.last_write_cycle >= 59
        await bench.write("PROF_INDEX", 0)
        mark = await bench.read("PROF_DATA_LO")
        cycles = await bench.read("CYCLES_LO")
        assert mark >= last_response - 2, (mark, last_response, w.last_write_cycle - start)
        assert cycles > mark
    assert bench.errors == [], bench.errors


@cocotb.test(timeout_time=10, timeout_unit="ms", skip=ONE_PORT)
async def write_error_response_stops_the_processor(dut):
    """SLVERR and DECODEERROR on the second burst of a STORE: WRITE_RESPONSE, ERR_ADDR names the
    burst, BUSY falls only once every response is back, the MARK never runs."""
    bench = await setup(dut, MEM_SIZE, wait_prob=0.3, latency=(1, 8), response_latency=(1, 40))
    w = bench.mem1
    burst_bytes = w.max_burst * w.bus_bytes
    for code in (2, 3):
        base = 0x8000
        insns = _store_mark_finish(base)
        _program(bench, insns)
        w.error_range, w.error_response = (base + burst_bytes, base + 2 * burst_bytes), code
        await _start(bench, len(insns), (0, MEM_SIZE))
        await bench.wait_irq(20_000)
        w.error_range = (0, 0)
        status = await bench.read("STATUS")
        assert get_field(status, "STATUS", "ERROR_CODE") == isa.ErrorCode.WRITE_RESPONSE, hex(status)
        assert get_field(status, "STATUS", "BUSY") == 0
        assert await bench.read("ERR_ADDR") == base + burst_bytes
        assert not w._pending_responses and not w._wr_left           # BUSY fell with the port quiet
        assert await bench.read("PROF_COUNT") == 0
    assert bench.errors == [], bench.errors
