"""Two memory ports (``top.MemoryPorts = 2``): a read-only master for fetch and load, a
write-only master for store, on the Verilated processor (C = 4, 64-bit bus; one Verilator build
serves the module).

Checked here: layer programs and a small chained network are bit-exact against the golden model
and the ISA-level simulator (every DRAM byte), each port carries only its own traffic, a STORE
outside the DMA window stops with DMA_STORE before any write burst, ABORT drains both ports (and
waits for every write response), a STORE completes (MARK, its token, DONE) only when the write
responses of its bursts have returned, an error response stops the processor with WRITE_RESPONSE,
and the estimator's two-port bus model follows the RTL. The configuration rules (allowed values,
hash of one-port configurations unchanged) and the gateware's port lists need no build.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from dlproc.hardware import isa, regmap
from dlproc.config import ProcessorConfig
from dlproc.errors import ConfigError
from dlproc.estimate import simulate_program
from dlproc.hardware.isa import ErrorCode
from dlproc.compiler.layerprog import PoolLayer, build_conv_program, build_pool_program

from layerprog_cases import conv_reference, random_conv, small_config

DDR_SIZE = 1 << 22
PROG = 0x1000


def two_port_config() -> ProcessorConfig:
    cfg = small_config(4, width=64)
    cfg.set_property("MemoryPorts", 2)
    return cfg


CFG2 = two_port_config()


# ---- configuration (no build) ------------------------------------------------------------------
def test_memory_ports_values():
    cfg = ProcessorConfig()
    assert cfg.memory_ports == 1 and cfg.get_property("memoryports") == 1
    cfg.set_property("MemoryPorts", "2")
    assert cfg.memory_ports == 2
    for bad in (0, 3, 4):
        with pytest.raises(ConfigError, match=rf"top\.MemoryPorts = {bad} is not allowed: allowed values are 1 or 2"):
            ProcessorConfig().set_property("MemoryPorts", bad)
    for bad in ("two", 1.5):
        with pytest.raises(ConfigError, match=r"top\.MemoryPorts = .* is not allowed: it must be an integer"):
            ProcessorConfig().set_property("MemoryPorts", bad)
    with pytest.raises(ConfigError, match="MemoryPorts"):
        ProcessorConfig.from_dict({"top": {"MemoryPorts": 3}})


def test_one_port_hash_is_unchanged_and_two_ports_differ(tmp_path):
    cfg = small_config(4, width=64)
    assert "MemoryPorts" not in cfg.canonical_json()   # configurations from before the property
    two = cfg.copy()
    two.set_property("MemoryPorts", 2)
    assert '"MemoryPorts":2' in two.canonical_json() and two.config_hash() != cfg.config_hash()
    path = tmp_path / "two.toml"
    two.save(path)
    assert ProcessorConfig.load(path) == two and ProcessorConfig.load(path).config_hash() == two.config_hash()
    assert ProcessorConfig.preset("arria10soc_int8").memory_ports == 2
    assert ProcessorConfig.preset("de10nano_int8").memory_ports == 1


def test_gateware_port_lists():
    from dlproc.hardware.gateware import DlprocTop

    one = DlprocTop(isa.HardwareParams.from_config(small_config(4, width=64))).signature.members
    assert set(one) == {"csr", "mem", "irq"}
    assert set(one["mem"].signature.members) == {"address", "burstcount", "read", "write", "writedata",
                                                 "byteenable", "waitrequest", "readdata", "readdatavalid"}
    two = DlprocTop(isa.HardwareParams.from_config(CFG2)).signature.members
    assert set(two) == {"csr", "mem", "mem1", "irq"}
    assert set(two["mem"].signature.members) == {"address", "burstcount", "read", "waitrequest", "readdata",
                                                 "readdatavalid"}
    assert set(two["mem1"].signature.members) == {"address", "burstcount", "write", "writedata", "byteenable",
                                                  "waitrequest", "writeresponsevalid", "response"}


@pytest.mark.slow
def test_two_port_verilog_lints_clean_and_matches_the_manifest():
    from dlproc.boards.common.ports import processor_ports
    from dlproc.commands.generate import manifest
    from dlproc.hardware.gateware import lint
    from dlproc.sim.harness import processor_verilog

    verilog = processor_verilog(CFG2)
    report = lint(verilog)
    assert "%Warning" not in report and "%Error" not in report
    ports = processor_ports(verilog, 64, 2)
    assert {p.name: p.width for p in ports.ports} == manifest(CFG2, verilog)["ports"]


# ---- the Verilated two-port processor ------------------------------------------------------------
@pytest.fixture(scope="module")
def sim():
    from dlproc.sim.harness import NativeSim

    with NativeSim(CFG2, ddr_size=DDR_SIZE) as s:
        yield s


def _maxpool_1x1(seed: int = 5):
    x = np.random.default_rng(seed).integers(-128, 128, (16, 20, 20), dtype=np.int8)
    return x, build_pool_program(CFG2, PoolLayer("max", 1, 1), x)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_random_conv_bit_exact_with_split_traffic(sim, seed):
    layer, x = random_conv(np.random.default_rng(300 + seed), max_ch=9, max_hw=9)
    prog = build_conv_program(CFG2, layer, x)
    out, res = sim.run_layer_program(prog, max_cycles=3_000_000)
    assert res.ok, res
    np.testing.assert_array_equal(out, conv_reference(layer, x))
    rd, wr = res.ddr_ports
    assert rd.write_cmds == 0 and rd.write_beats == 0 and rd.read_beats > 0
    assert wr.read_cmds == 0 and wr.read_beats == 0 and wr.write_beats > 0
    co, h, w = out.shape
    assert wr.write_bytes == res.ddr.write_bytes == -(-co // 4) * 4 * h * w  # C lanes per element


@pytest.mark.slow
def test_store_outside_window_on_the_write_port(sim):
    store = isa.Store(sram_base=0, dram_addr=DDR_SIZE + 0x20000, x_size=4, y_stride=4, z_stride=4)
    sim.mem_write(PROG, isa.encode_program([store, isa.Finish()]))
    res = sim.run_program(PROG, 2, dma_base=0, dma_limit=DDR_SIZE)
    assert res.error_code == ErrorCode.DMA_STORE
    assert sim.csr_read(regmap.offset("ERR_ADDR")) == DDR_SIZE + 0x20000
    assert sim.ddr_error is None and res.ddr_ports[1].write_cmds == 0 and res.ddr.write_beats == 0


@pytest.mark.slow
def test_abort_drains_both_ports_then_runs_again(sim):
    x, prog = _maxpool_1x1()
    sim.mem_write(prog.dram_base, prog.image)
    sim.clear_ddr_stats()
    sim.start(prog.insn_base, prog.insn_count, prog.dma_base, prog.dma_limit)
    sim.run(900, raise_on_timeout=False)                  # reads and writes both in flight
    assert sim.ddr_stats(0).read_beats > 0 and sim.ddr_stats(1).write_beats > 0
    ctrl = regmap.REG["CTRL"]
    sim.csr_write(regmap.offset("CTRL"), ctrl.field("ABORT").mask | ctrl.field("IRQ_EN").mask)
    sim.run(2000)                                         # to the irq: BUSY has just fallen
    before = sim.ddr_stats()
    assert sim.ddr_outstanding_beats == 0                 # BUSY fell only with both ports quiet:
    assert sim.ddr_outstanding_responses == 0             # no read beat or write response due,
    sim.step(50)                                          # no write burst open
    assert sim.ddr_stats() == before
    status = sim.csr_read(regmap.offset("STATUS"))
    code = regmap.REG["STATUS"].field("ERROR_CODE")
    assert (status & code.mask) >> code.lsb == ErrorCode.ABORTED
    assert status & regmap.REG["STATUS"].field("BUSY").mask == 0
    out, res = sim.run_layer_program(prog, max_cycles=200_000)
    assert res.ok
    np.testing.assert_array_equal(out, x)


@pytest.mark.slow
def test_abort_inside_a_write_burst_waits_for_its_end():
    """Only the write master is busy (STOREs, 1 byte/cycle: a 16-beat burst takes 128 cycles), so
    the abort lands inside a write burst: BUSY may fall only after its last beat."""
    from dlproc.sim.harness import NativeSim

    stores = [isa.Store(sram_base=0, dram_addr=0x10000 + k * 0x1000, x_size=64, y_stride=64, z_stride=64)
              for k in range(3)]
    with NativeSim(CFG2, ddr_size=DDR_SIZE, ddr_bytes_per_cycle=1) as s:
        s.mem_write(PROG, isa.encode_program([*stores, isa.Finish()]))
        s.start(PROG, len(stores) + 1, 0, DDR_SIZE)
        s.run(300, raise_on_timeout=False)
        assert s.ddr_stats(1).write_beats > 0
        ctrl = regmap.REG["CTRL"]
        s.csr_write(regmap.offset("CTRL"), ctrl.field("ABORT").mask | ctrl.field("IRQ_EN").mask)
        s.run(5000)
        before = s.ddr_stats(1)
        assert before.write_beats % 16 == 0               # whole bursts only (64 beats per STORE)
        assert s.ddr_outstanding_responses == 0 and before.write_responses == before.write_cmds
        s.step(300)
        assert s.ddr_stats(1) == before and s.ddr_error is None


def _store_mark_finish(sim, dram_addr: int = 0x10000) -> tuple[isa.Instruction, ...]:
    """64-beat STORE (4 bursts) giving its token to FINISH, then MARK 0 behind it."""
    prog = (isa.Store(sram_base=0, dram_addr=dram_addr, x_size=64, y_stride=64, z_stride=64, push_prev=True),
            isa.Mark(index=0), isa.Finish(pop_next=True))
    sim.mem_write(PROG, isa.encode_program(list(prog)))
    return prog


def _mark(sim, index: int = 0) -> int:
    sim.csr_write(regmap.offset("PROF_INDEX"), index)
    return sim.csr_read(regmap.offset("PROF_DATA_LO")) | sim.csr_read(regmap.offset("PROF_DATA_HI")) << 32


@pytest.mark.slow
def test_store_completes_only_when_its_write_responses_returned():
    """The write master must wait for the write responses: with the response latency raised by
    D cycles, the MARK behind the STORE, the STORE's token (FINISH pops it) and DONE all move by
    D. Taking completion at the acceptance of the last beat again would leave them unchanged."""
    from dlproc.sim.harness import NativeSim

    times = {}
    for latency in (1, 300):
        with NativeSim(CFG2, ddr_size=DDR_SIZE, ddr_write_response_latency=latency) as s:
            prog = _store_mark_finish(s)
            res = s.run_program(PROG, len(prog), 0, DDR_SIZE)
            assert res.ok, res
            assert res.ddr_ports[1].write_cmds == res.ddr_ports[1].write_responses == 4
            assert s.ddr_outstanding_responses == 0
            times[latency] = (_mark(s), res.hw_cycles)
    (mark1, done1), (mark300, done300) = times[1], times[300]
    assert mark300 - mark1 >= 299 and done300 - done1 >= 299, times


@pytest.mark.slow
@pytest.mark.parametrize("response", [2, 3], ids=["SLVERR", "DECODEERROR"])
def test_write_error_response_stops_with_write_response(sim, response):
    """The second burst of the STORE (128 bytes per burst) gets an error response: the processor
    stops with WRITE_RESPONSE, ERR_ADDR names that burst, BUSY falls only after every response,
    and the next run (error range off) is clean."""
    base = 0x20000
    prog = _store_mark_finish(sim, base)
    sim.set_write_error(base + 128, base + 256, response)
    try:
        res = sim.run_program(PROG, len(prog), 0, DDR_SIZE)
    finally:
        sim.set_write_error(0, 0)
    assert res.error_code == ErrorCode.WRITE_RESPONSE, res
    assert ErrorCode(res.error_code).name == "WRITE_RESPONSE"
    assert sim.csr_read(regmap.offset("ERR_ADDR")) == base + 128
    assert sim.csr_read(regmap.offset("ERR_INSN")) == 0
    assert sim.csr_read(regmap.offset("STATUS")) & regmap.REG["STATUS"].field("BUSY").mask == 0
    assert sim.ddr_outstanding_responses == 0 and sim.ddr_error is None
    assert sim.csr_read(regmap.offset("PROF_COUNT")) == 0             # the MARK never ran
    with pytest.raises(ValueError, match="SLVERR"):
        sim.set_write_error(0, 1, 1)
    res = sim.run_program(PROG, len(prog), 0, DDR_SIZE)
    assert res.ok, res


@pytest.mark.slow
def test_estimate_follows_the_two_port_rtl(sim):
    """A max pool 1x1 moves as many bytes out as in: with two ports the stores take no read
    bandwidth. The two-port estimate must follow the RTL; the one-port model (stores sharing the
    read bandwidth) would be over 20 % above it (26 % here), so the test fails if the estimator
    ignores the ports."""
    _, pool = _maxpool_1x1()
    layer, x = random_conv(np.random.default_rng(501), max_ch=10, max_hw=12)
    one = CFG2.copy()
    one.set_property("MemoryPorts", 1)
    for name, prog in (("maxpool1x1", pool), ("conv", build_conv_program(CFG2, layer, x))):
        _, res = sim.run_layer_program(prog, max_cycles=3_000_000)
        est = simulate_program(CFG2, prog.instructions, insn_base=prog.insn_base).cycles
        assert est == pytest.approx(res.hw_cycles, rel=0.05), f"{name}: estimated {est}, RTL {res.hw_cycles}"
        if name == "maxpool1x1":
            est_one = simulate_program(one, prog.instructions, insn_base=prog.insn_base).cycles
            assert est_one > 1.2 * res.hw_cycles, (est_one, res.hw_cycles)


def _chain_onnx(rng):
    """conv 3x3 (relu) -> max pool 2x2 -> conv 1x1: layers that read what the previous one stored."""
    from block_networks import onnx_model

    from dlproc.frontends import load_onnx

    inits = {"w1": rng.normal(0, 0.3, (8, 4, 3, 3)), "b1": rng.normal(0, 0.1, 8), "w2": rng.normal(0, 0.3, (8, 8, 1, 1))}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["y"], name="conv2"),
    ]
    return load_onnx(onnx_model(nodes, [1, 4, 12, 12], inits))


@pytest.mark.slow
def test_chained_network_matches_isa_simulator(sim):
    from block_networks import quantize_random
    from test_rtl_networks import check_same_dram

    from dlproc.targets.golden.run import run_int8
    from dlproc.targets.workflow import Workflow

    rng = np.random.default_rng(4401)
    qnet = quantize_random(_chain_onnx(rng), rng, 0.0, 1.0)
    x = rng.uniform(0, 1, (2, 4, 12, 12)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    golden = Workflow(qnet, CFG2, target="golden")
    y_golden = golden.predict(x)
    rtl = Workflow(golden.compiled, CFG2, target="sim")
    try:
        y_rtl = rtl.predict(x)
        for t in rtl.compiled.outputs:
            np.testing.assert_array_equal(rtl.last_hw_values[t.name], ref[t.name], err_msg=t.name)
        check_same_dram(rtl.compiled, golden, rtl)
    finally:
        rtl.close()
    np.testing.assert_array_equal(y_rtl, y_golden)
