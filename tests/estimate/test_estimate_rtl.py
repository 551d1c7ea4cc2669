"""The performance estimator against the Verilated processor (small configuration, C = 4, the
same configuration and harness build as ``test_rtl_layers.py``): estimated cycles of layer
programs (DMA-bound pools included) within 5 % of the simulated CYCLES register, a STORE
interleaving a LOAD, small compiled networks within 3 % (per profiled layer within 5 %; one with
a DMA-bound pool weakly joined after a conv); LRN layers and LRNTAB on the C = 4 processor with
the LRN block (``sim_fixture.blocks_config``). See ``docs/estimator.md`` for the measured
figures."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.estimate import estimate_compiled, simulate_program
from dlproc.estimate.performance import synthetic_quantize
from dlproc.compiler.layerprog import ConvLayer, PoolLayer, build_conv_program, build_pool_program

from layerprog_cases import random_conv, random_depthwise, random_pool, small_config

pytestmark = pytest.mark.slow

CFG = small_config(4)


@pytest.fixture(scope="module")
def sim():
    from dlproc.sim.harness import NativeSim

    with NativeSim(CFG, ddr_size=1 << 20) as s:
        yield s


def _conv(ci: int, co: int, h: int, w: int, k: int, stride: int = 1, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (ci, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (co, ci, k, k), dtype=np.int8)
    layer = ConvLayer(wt, rng.integers(-999, 999, co).astype(np.int32), rng.integers(1, 1 << 15, co),
                      rng.integers(14, 20, co), stride=stride, pads=k // 2)
    return layer, x


def _programs():
    progs = {}
    for seed in (0, 2, 4):
        layer, x = random_conv(np.random.default_rng(500 + seed), max_ch=10, max_hw=12)
        progs[f"random{seed}"] = build_conv_program(CFG, layer, x)
    for name, args in {"3x3_8to8_16x16": (8, 8, 16, 16, 3), "1x1_16to32_12x12": (16, 32, 12, 12, 1),
                       "3x3s2_8to16_21x21": (8, 16, 21, 21, 3, 2), "7x7s2_3to8_30x30": (3, 8, 30, 30, 7, 2)}.items():
        progs[name] = build_conv_program(CFG, *_conv(*args))
    # Depthwise layers in the conv engine's depthwise mode (chains of 1 x kw links on C = 4).
    for seed in (0, 1, 6):
        layer, x = random_depthwise(np.random.default_rng(900 + seed), CFG.conv_c, max_hw=14)
        progs[f"depthwise{seed}"] = build_conv_program(CFG, layer, x)
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (12, 28, 28), dtype=np.int8)
    dw = ConvLayer(rng.integers(-128, 128, (12, 1, 3, 3), dtype=np.int8), rng.integers(-999, 999, 12).astype(np.int32),
                   rng.integers(1, 1 << 15, 12), rng.integers(14, 20, 12), pads=1, groups=12)
    progs["dw3x3_12ch_28x28"] = build_conv_program(CFG, dw, x)
    for kind in ("max", "avg", "global_avg"):
        layer, x = random_pool(np.random.default_rng(77), kind, max_ch=9, max_hw=14)
        progs[f"pool_{kind}"] = build_pool_program(CFG, layer, x)
    x = np.random.default_rng(5).integers(-128, 128, (16, 20, 20), dtype=np.int8)
    progs["maxpool3s2_16x20x20"] = build_pool_program(CFG, PoolLayer("max", 3, 2, 1), x)
    # DMA-bound pools (the column-reusing engine is faster than its tiles' loads and stores,
    # which share the bus): GoogLeNet's stride-1 and stride-2 max pools in small.
    x = np.random.default_rng(6).integers(-128, 128, (16, 14, 14), dtype=np.int8)
    progs["maxpool3s1_16x14x14"] = build_pool_program(CFG, PoolLayer("max", 3, 1, 1), x)
    x = np.random.default_rng(7).integers(-128, 128, (16, 28, 28), dtype=np.int8)
    progs["maxpool3s2_16x28x28"] = build_pool_program(CFG, PoolLayer("max", 3, 2, 1), x)
    return progs


PROGRAMS = _programs()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_layer_program_cycles_within_5_percent(sim, name):
    prog = PROGRAMS[name]
    _, res = sim.run_layer_program(prog, max_cycles=20_000_000)
    assert res.error_code == 0
    est = simulate_program(CFG, prog.instructions, insn_base=prog.insn_base).cycles
    assert est == pytest.approx(res.hw_cycles, rel=0.05), f"{name}: estimated {est}, RTL {res.hw_cycles}"


def _run_micro(sim, insns: list) -> int:
    """RTL cycles of a micro program (placed above the data it reads and writes)."""
    from dlproc.hardware import isa

    base = 0x80000
    code = isa.encode_program(insns)
    sim.mem_write(base, code)
    res = sim.run_program(base, len(insns), 0, base + len(code), max_cycles=1_000_000)
    assert res.ok, f"error {res.error_code}"
    return res.hw_cycles


@pytest.mark.parametrize("store_beats", [64, 128, 192])
def test_store_interleaving_a_load_within_5_percent(sim, store_beats):
    """A STORE that starts while a long LOAD streams: the arbiter alternates their bursts (one
    write burst between two read bursts, the first write burst waits for the read data in
    flight), so the LOAD takes about the STORE's beats longer, plus the cycles the alternation
    loses (RTL: 737, 796, 855 cycles against 632 for the LOAD alone)."""
    from dlproc.hardware import isa

    I = isa.Buf.INP
    insns = [isa.Load(buf=I, sram_base=0, dram_addr=0, x_size=1, push_next=True),
             isa.Load(buf=I, sram_base=16, dram_addr=4096, x_size=480),
             isa.Pool(inp_base=0, out_base=0, in_w=1, in_plane=1, pop_prev=True, push_next=True),
             isa.Store(sram_base=0, dram_addr=65536, x_size=store_beats, pop_prev=True), isa.Finish()]
    rtl = _run_micro(sim, insns)
    est = simulate_program(CFG, insns, insn_base=0x80000).cycles
    alone = simulate_program(CFG, insns[:2] + [isa.Finish()], insn_base=0x80000).cycles
    assert est == pytest.approx(rtl, rel=0.05), f"estimated {est}, RTL {rtl}"
    assert est - alone >= store_beats  # the write beats take the bus from the LOAD


#: (with the DMA-bound 3x3 s1 pool: below the bus rate the DDR's credit bucket hides the
#: alternation's dead cycles, see dlproc.estimate.bus.pair_cycles; without that it was +9 % at 8 B/cycle)
DDR_SUBSET = ["random0", "1x1_16to32_12x12", "3x3s2_8to16_21x21", "pool_max", "maxpool3s2_16x20x20",
              "maxpool3s1_16x14x14"]


@pytest.mark.parametrize("bytes_per_cycle,latency", [(8, 40), (16, 80)])
def test_other_ddr_timing_within_5_percent(bytes_per_cycle, latency):
    """The DDR model's rate and latency are run-time parameters of the harness (no rebuild); the
    estimator takes the same figures."""
    import dataclasses

    from dlproc.estimate import TimingParams
    from dlproc.sim.harness import NativeSim

    tp = dataclasses.replace(TimingParams.from_config(CFG), ddr_rate=bytes_per_cycle / 16, ddr_latency=latency)
    with NativeSim(CFG, ddr_size=1 << 20, ddr_bytes_per_cycle=bytes_per_cycle, ddr_latency_cycles=latency) as sim:
        for name in DDR_SUBSET:
            prog = PROGRAMS[name]
            _, res = sim.run_layer_program(prog, max_cycles=20_000_000)
            est = simulate_program(CFG, prog.instructions, insn_base=prog.insn_base, timing=tp).cycles
            assert est == pytest.approx(res.hw_cycles, rel=0.05), f"{name}: estimated {est}, RTL {res.hw_cycles}"


def _network():
    from test_quant_nets import RELU, NetBuilder, rand_b, rand_w

    rng = np.random.default_rng(2)
    b = NetBuilder("branchy", (8, 16, 16))
    x = b.conv("c1", "input", rand_w(rng, 16, 8, 3, 3), rand_b(rng, 16), pads=(1, 1, 1, 1), act=RELU)
    y = b.conv("b1", x, rand_w(rng, 8, 16, 1, 1), rand_b(rng, 8), act=RELU)
    z = b.conv("b2", x, rand_w(rng, 8, 16, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1), act=RELU)
    c = b.concat("cat", [y, z])
    x = b.conv("c2", c, rand_w(rng, 16, 16, 3, 3), rand_b(rng, 16), stride=2, pads=(1, 1, 1, 1), act=RELU)
    b.pool("p", x, "maxpool", 2, 2)
    return b.build(["p"])


def _assert_rtl_within(cn, rep, shape: tuple[int, ...]):
    """Run the compiled network once on the RTL (profiled) and check the estimate ``rep``
    against it: 3 % for the network, 5 % for every layer; returns the RTL profile."""
    from dlproc.targets.workflow import Workflow

    wf = Workflow(cn, CFG, target="sim")
    wf.deploy()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _, prof = wf.predict(x, profile=True, display=False)
    wf.close()
    assert rep.cycles == pytest.approx(prof.last_frame_cycles, rel=0.03)
    for est, rtl in zip(rep.layers, prof.layers, strict=True):
        assert est.cycles == pytest.approx(rtl.cycles, rel=0.05), f"{est.name}: estimated {est.cycles}, RTL {rtl.cycles}"
    return prof


def test_compiled_network_within_3_percent():
    from dlproc.compiler import compile_network

    net = _network()
    cn = compile_network(synthetic_quantize(net), CFG)
    rep = estimate_compiled(cn, CFG)
    prof = _assert_rtl_within(cn, rep, (1, 8, 16, 16))
    assert [l.name for l in rep.layers] == [l.name for l in prof.layers]
    # The 3x3 convolutions of this network keep the MAC array busy: the estimate says so.
    assert rep.layers[0].bound == "compute" and rep.layers[0].utilization > 0.9


def test_inception_like_network_within_3_percent():
    """Padding channels of an unaligned concat, a stride-1 max pool, merged sibling 1x1 convs and
    weights prefetched across barriers (tests/test_googlenet.py): the estimate follows the RTL."""
    from dlproc.compiler import compile_network
    from dlproc.targets.workflow import Workflow

    from block_networks import mini_inception

    net = mini_inception(np.random.default_rng(3))
    cn = compile_network(synthetic_quantize(net), CFG)
    assert any("sibling 1x1 convs" in n for n in cn.notes)
    rep = estimate_compiled(cn, CFG)
    wf = Workflow(cn, CFG, target="sim")
    wf.deploy()
    x = np.random.default_rng(0).standard_normal((1, 4, 10, 10)).astype(np.float32)
    _, prof = wf.predict(x, profile=True, display=False)
    wf.close()
    assert rep.cycles == pytest.approx(prof.last_frame_cycles, rel=0.03)
    # The merged reduce convs (r3) are weakly joined to the pool that follows them (the pool's
    # first LOADs overlap r3's last STOREs on the one port): every row within 5 % all the same.
    for est, rtl in zip(rep.layers, prof.layers):
        assert est.cycles == pytest.approx(rtl.cycles, rel=0.05), f"{est.name}: estimated {est.cycles}, RTL {rtl.cycles}"


def _conv_then_pool():
    """The folded RGB first conv and a 2x2 max pool on its output (like ``plain``'s c1 and p1 in
    ``benchmarks/bench_estimator.py``), then a conv."""
    from test_quant_nets import RELU, NetBuilder, rand_b, rand_w

    rng = np.random.default_rng(1)
    b = NetBuilder("conv_pool", (3, 24, 24))
    x = b.conv("c1", "input", rand_w(rng, 16, 3, 3, 3), rand_b(rng, 16), pads=(1, 1, 1, 1), act=RELU)
    x = b.pool("p1", x, "maxpool", 2, 2)
    b.conv("c2", x, rand_w(rng, 8, 16, 3, 3), rand_b(rng, 8), pads=(1, 1, 1, 1), act=RELU)
    return b.build(["c2"])


def test_dma_bound_pool_weakly_joined_after_a_conv_within_5_percent():
    """A DMA-bound max pool weakly joined after a conv on the one memory port: the pool's first
    LOADs start while the conv's last STOREs write, and each pool tile's STORE meets the next
    tile's LOAD, early in it or late in its data. The estimator decides each such overlap when
    both transfers are known, in one pass; with the two passes before (the LOADs kept the
    bubbles of a first pass in which the STOREs met them elsewhere) the pool was +13.6 % (RTL
    3,477 cycles, estimate 3,951; now 3,454)."""
    from dlproc.compiler import compile_network

    cn = compile_network(synthetic_quantize(_conv_then_pool()), CFG)
    assert any("joined without a full barrier" in n for n in cn.notes)
    rep = estimate_compiled(cn, CFG)
    tl = rep.timeline
    pool = next(l for l in cn.layers if l.name == "p1")
    first_load = next(i for i in range(pool.insn_first, pool.insn_first + pool.insn_count) if tl.unit[i] == "load")
    assert tl.start[first_load] < tl.marks[cn.profile[0].index]  # (weakly joined: it overlaps c1)
    prof = _assert_rtl_within(cn, rep, (1, 3, 24, 24))
    assert [l.name for l in rep.layers] == ["c1", "p1", "c2"] == [l.name for l in prof.layers]
    assert rep.layers[1].bound == "memory"


@pytest.fixture(scope="module")
def lrn_sim():
    """The C = 4 processor with the LRN block (sim_fixture.blocks_config: the same build as the
    RTL tests of the optional blocks)."""
    from dlproc.sim.harness import NativeSim

    from sim_fixture import blocks_config

    with NativeSim(blocks_config(), ddr_size=4 << 20) as s:
        yield s


def _lrn_layer():
    from dlproc.targets.golden import ops
    from dlproc.compiler.layerprog import LrnLayer

    params = ops.lrn_params(5, 1e-4, 0.75, 1.0, 0.05, 0.02)
    return LrnLayer(size=5, zp_in=-7, table_mult=params.mult, table_shift=params.shift, zp_out=3)


@pytest.mark.parametrize("shape", [(16, 28, 28), (64, 14, 14), (8, 12, 12)])
def test_lrn_programs_within_5_percent(lrn_sim, shape):
    """LRN layers (the table load, then DDR-bound tiles whose STOREs interleave the next tiles'
    LOADs). Before the LRNTAB cost (C + 2 cycles per PRM word) and the load/store alternation were
    modelled, these were 8-15 % low."""
    from sim_fixture import blocks_config

    from dlproc.compiler.layerprog import build_lrn_program

    cfg = blocks_config()
    x = np.random.default_rng(sum(shape)).integers(-128, 128, shape, dtype=np.int8)
    prog = build_lrn_program(cfg, _lrn_layer(), x)
    _, res = lrn_sim.run_layer_program(prog, max_cycles=5_000_000)
    assert res.ok
    est = simulate_program(cfg, prog.instructions, insn_base=prog.insn_base).cycles
    assert est == pytest.approx(res.hw_cycles, rel=0.05), f"LRN {shape}: estimated {est}, RTL {res.hw_cycles}"


@pytest.mark.parametrize("words", [1, 8, 16])
def test_lrntab_cycles(lrn_sim, words):
    """LOAD PRM then LRNTAB of ``words`` PRM words: the estimate is within 2 cycles of the RTL."""
    from sim_fixture import blocks_config

    from dlproc.hardware import isa

    cfg = blocks_config()
    lrn_sim.mem_write(0x70000, bytes(4096))  # legal table entries (M = 0, S = 0)
    insns = [isa.Load(buf=isa.Buf.PRM, sram_base=0, dram_addr=0x70000, x_size=16, push_next=True),
             isa.LrnTab(prm_base=0, tab_base=0, count=words, pop_prev=True), isa.Finish()]
    rtl = _run_micro(lrn_sim, insns)
    est = simulate_program(cfg, insns, insn_base=0x80000).cycles
    assert abs(est - rtl) <= 2, f"estimated {est}, RTL {rtl}"


@pytest.mark.parametrize("seed", range(2))
def test_results_to_inp_and_wait_writes_within_5_percent(sim, seed):
    """Depthwise CONVs with results to INP, a pointwise CONV with wait_writes and a LOAD into INP
    overlapping the drains (``test_rtl_layers.fused_program``): the estimate is within 5 % of the
    RTL, and so is the cost of the wait (the same program without wait_writes; its result may
    differ, its timing is what is compared). Measured: 1852 / 1848 and 1800 / 1796 cycles."""
    import dataclasses
    import sys
    from pathlib import Path

    from dlproc.hardware import isa

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "targets"))
    from test_rtl_layers import fused_program

    prog, image, _ = fused_program(seed)
    free = [dataclasses.replace(i, wait_writes=0) if isinstance(i, isa.Conv) else i for i in prog]
    cycles = {}
    for name, p in (("wait", prog), ("free", free)):
        code = isa.encode_program(p)
        sim.mem_write(0, image)
        sim.mem_write(0x60000, code)
        res = sim.run_program(0x60000, len(p), 0, 0x80000, max_cycles=2_000_000)
        assert res.ok, f"error {res.error_code}"
        est = simulate_program(CFG, p, insn_base=0x60000).cycles
        assert est == pytest.approx(res.hw_cycles, rel=0.05), f"{name}: estimated {est}, RTL {res.hw_cycles}"
        cycles[name] = (est, res.hw_cycles)
    est_wait = cycles["wait"][0] - cycles["free"][0]
    rtl_wait = cycles["wait"][1] - cycles["free"][1]
    assert rtl_wait > 0 and est_wait == pytest.approx(rtl_wait, rel=0.05)
