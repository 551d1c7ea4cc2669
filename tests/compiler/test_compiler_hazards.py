"""The happens-before hazard checker (``dlproc.compiler.hazards``) and the weak joins of the linker
(``dlproc.compiler.program``): hand-made streams whose conflicts the checker must find or must not
find, every compiled test network checked (GoogLeNet at 32x32, a ResNet block, yolov3-tiny, the
digits net, a padded inception module, an inception block with LRN, an upsample/route net),
removed tokens reported, the footprints checked against the ISA-level simulator, and weakly
joined programs bit-exact on the ISA-level simulator under its adversarial schedules."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from dlproc.hardware import isa
from dlproc.compiler import compile_network
from dlproc.compiler import compile as compile_mod
from dlproc.compiler.hazards import HazardError, assert_no_hazards, check_program
from dlproc.compiler.program import link
from dlproc.config import ProcessorConfig
from dlproc.estimate import estimate_compiled
from dlproc.frontends import load_darknet
from dlproc.frontends.onnx import load_onnx
from dlproc.targets.golden.run import run_int8
from dlproc.hardware.geometry import Geometry
from dlproc.models import googlenet_onnx
from dlproc.quant import Quantizer
from dlproc.quant.data import DIGITS_MODEL
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config
from networks import DARKNET
from sim_fixture import blocks_config
from block_networks import quantize_random, resnet_block, upsample_route
from block_networks import mini_inception
from test_rtl_networks import inception_lrn_onnx
from block_networks import quantize_shape

CFG4 = small_config(4)
GEOM4 = Geometry.from_config(CFG4)


# -- hand-made streams ----------------------------------------------------------------------------
def _conv(**kw):
    return isa.Conv(inp_base=0, wgt_base=0, prm_base=0, out_base=0, in_w=4, in_plane=16, out_h=4, out_w=4, **kw)


def _load(buf=isa.Buf.INP, addr=0, **kw):
    return isa.Load(buf=buf, sram_base=0, dram_addr=addr, x_size=16, **kw)


def _store(addr=0x1000, **kw):
    return isa.Store(sram_base=0, dram_addr=addr, x_size=16, **kw)


def _kinds(problems):
    return {(p.kind, p.space) for p in problems}


def test_one_tile_with_tokens_is_clean():
    prog = [_load(push_next=True), _conv(pop_prev=True, push_next=True), _store(pop_prev=True), isa.Finish()]
    assert check_program(GEOM4, prog) == []


def test_partial_sum_chains_are_checked():
    """acc_in must continue the held tile of the CONV just before (same shape); nothing may start
    a new sum or FINISH while a tile is held."""
    tail = [_store(pop_prev=True), isa.Finish()]
    good = [_load(push_next=True), _conv(pop_prev=True, acc_keep=1), _conv(acc_in=1, acc_keep=1),
            _conv(acc_in=1, push_next=True)] + tail
    assert check_program(GEOM4, good) == []
    bad = {
        "no CONV before it holds any": [_load(push_next=True), _conv(pop_prev=True, acc_in=1, push_next=True)],
        "holds a 4x4 tile, not 4x2": [_load(push_next=True), _conv(pop_prev=True, acc_keep=1),
                                      dataclasses.replace(_conv(acc_in=1, push_next=True), out_w=2)],
        "starts a new sum while CONV 1's partial sums": [_load(push_next=True), _conv(pop_prev=True, acc_keep=1),
                                                        _conv(push_next=True)],
    }
    for text, prog in bad.items():
        problems = [p for p in check_program(GEOM4, prog + tail) if p.kind == "chain"]
        assert len(problems) == 1 and text in str(problems[0]), (text, problems)
    held_at_finish = [_load(push_next=True), _conv(pop_prev=True, acc_keep=1), isa.Finish()]
    assert [p.kind for p in check_program(GEOM4, held_at_finish)] == ["chain"]


def test_missing_tokens_are_reported_by_kind():
    # The CONV reads INP before the LOAD wrote it, the STORE reads OUT before the CONV wrote it.
    prog = [_load(), _conv(), _store(), isa.Finish()]
    assert _kinds(check_program(GEOM4, prog)) == {("RAW", "INP"), ("RAW", "OUT")}
    # A second tile's LOAD overwrites the INP words the first CONV reads: it must wait for a C2L.
    tile = [_load(push_next=True), _conv(pop_prev=True, push_next=True, push_prev=True), _store(pop_prev=True,
                                                                                                push_prev=True)]
    second = [_load(push_next=True, pop_next=True), _conv(pop_prev=True, pop_next=True, push_next=True),
              _store(pop_prev=True)]
    assert check_program(GEOM4, tile + second + [isa.Finish()]) == []
    second[0].pop_next = tile[1].push_prev = False
    assert _kinds(check_program(GEOM4, tile + second + [isa.Finish()])) == {("WAR", "INP")}
    second[0].pop_next = tile[1].push_prev = True
    second[1].pop_next = tile[2].push_prev = False  # the second CONV overwrites OUT before the STORE read it
    assert _kinds(check_program(GEOM4, tile + second + [isa.Finish()])) == {("WAR", "OUT")}


def test_dram_read_after_store_needs_the_store_to_compute_to_load_chain():
    a = [_load(push_next=True), _conv(pop_prev=True, push_next=True), _store(addr=0x2000, pop_prev=True)]
    b = [_load(addr=0x2000, push_next=True), _conv(pop_prev=True, push_next=True), _store(addr=0x3000, pop_prev=True)]
    problems = check_program(GEOM4, a + b + [isa.Finish()])
    assert ("RAW", "DRAM") in _kinds(problems)
    raw = next(p for p in problems if p.kind == "RAW" and p.space == "DRAM")
    assert (raw.first, raw.second, raw.where) == (2, 3, 0x2000)
    # The barrier: the STORE pushes S2C, a compute instruction pops it and pushes C2L for the LOAD.
    a[2].push_prev = True
    barrier = isa.Pool(inp_base=0, out_base=GEOM4.depth("OUT") - 1, in_w=1, in_plane=1, pop_next=True,
                       push_prev=True)
    b[0].pop_next = True
    assert check_program(GEOM4, a + [barrier] + b + [isa.Finish()]) == []


def test_unmatched_pops_and_leftover_tokens():
    prog = [_load(pop_next=True), isa.Finish()]
    assert [p.kind for p in check_program(GEOM4, prog)] == ["deadlock"]
    prog = [_load(push_next=True), isa.Finish()]
    assert [p.kind for p in check_program(GEOM4, prog)] == ["unbalanced"]
    with pytest.raises(HazardError, match="unbalanced"):
        assert_no_hazards(GEOM4, prog)


def test_a_consumer_fetched_before_its_producer_deadlocks_with_full_queues():
    # Five LOADs wait for C2L tokens that CONVs after them give: with 4-entry queues fetch stalls on
    # the fifth LOAD and never reaches the CONVs; with unbounded queues it runs.
    loads = [_load(buf=isa.Buf.WGT, addr=64 * k, pop_next=True) for k in range(5)]
    convs = [isa.Pool(inp_base=0, out_base=0, in_w=1, in_plane=1, push_prev=True) for _ in range(5)]
    prog = loads + convs + [isa.Finish()]
    assert GEOM4.hw.queue_depth == 4
    assert [p.kind for p in check_program(GEOM4, prog)] == ["deadlock"]
    assert check_program(GEOM4, prog, queue_depth=None) == []


def test_token_counter_bound():
    # Three loads may push before any CONV pops: the L2C counter can reach 3.
    prog = [isa.Load(buf=isa.Buf.INP, sram_base=16 * k, dram_addr=256 * k, x_size=16, push_next=True)
            for k in range(3)]
    prog += [dataclasses.replace(_conv(pop_prev=True), inp_base=16 * k) for k in range(3)] + [isa.Finish()]
    assert check_program(GEOM4, prog) == []
    small = Geometry.from_hw(dataclasses.replace(GEOM4.hw, token_bits=1))
    problems = check_program(small, prog)
    assert [p.kind for p in problems] == ["overflow"] and "reach 3" in str(problems[0])


# -- compiled networks ----------------------------------------------------------------------------
def _googlenet32():
    net = load_onnx(googlenet_onnx(size=32, classes=10))
    cfg = ProcessorConfig.preset("arria10soc_int8")
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    return quantize_shape(net, (3, 32, 32), n=2), cfg


def _digits():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    return q.quantize(), CFG4


def _yolo():
    net = load_darknet(str(DARKNET / "yolov3-tiny.cfg"), input_size=(64, 64))
    return quantize_random(net, np.random.default_rng(2301), 0.0, 1.0), blocks_config()


NETWORKS = {
    "googlenet32": _googlenet32,
    "inception": lambda: (quantize_shape(mini_inception(np.random.default_rng(3)), (4, 10, 10)), CFG4),
    "resnet": lambda: (quantize_random(resnet_block(np.random.default_rng(2201)), np.random.default_rng(2201)),
                       blocks_config()),
    "yolov3tiny": _yolo,
    "digits": _digits,
    "lrn": lambda: (quantize_random(inception_lrn_onnx(np.random.default_rng(2101)), np.random.default_rng(2101), 0.0, 1.0),
                    blocks_config()),
    "upsample": lambda: (quantize_random(upsample_route(np.random.default_rng(31)), np.random.default_rng(31)),
                         blocks_config()),
}


@functools.lru_cache(maxsize=None)
def _compiled(name):
    qnet, cfg = NETWORKS[name]()
    return qnet, cfg, compile_network(qnet, cfg)


def _cross_op_pairs(cn, q):
    """(push index, pop index) of the ``q`` tokens whose push and pop lie in different layers."""
    insns = isa.decode_program(cn.instructions)
    flags = {"C2L": ("push_prev", "compute", "pop_next", "load"), "S2C": ("push_prev", "store", "pop_next", "compute")}
    pf, prod, cf, cons = flags[q]
    pushes = [i for i, x in enumerate(insns) if x.UNIT == prod and getattr(x, pf)]
    pops = [i for i, x in enumerate(insns) if x.UNIT == cons and getattr(x, cf)]
    owner = {}
    for k, e in enumerate(cn.layers):
        for i in range(e.insn_first, e.insn_first + e.insn_count):
            owner[i] = k
    return insns, [(p, c) for p, c in zip(pushes, pops)
                   if owner.get(p) != owner.get(c) and not _is_barrier(insns[p]) and not _is_barrier(insns[c])]


def _is_barrier(x):
    """The full barrier's one-word max POOL (it pops S2C and pushes C2L)."""
    return (isinstance(x, isa.Pool) and x.pop_next and x.push_prev and x.in_w == 1 and x.out_h == 1
            and x.out_w == 1)


@pytest.mark.parametrize("name", list(NETWORKS))
def test_compiled_networks_have_no_hazards_and_weak_joins(name):
    qnet, cfg, cn = _compiled(name)
    geom = Geometry.from_config(cfg)
    insns = isa.decode_program(cn.instructions)
    assert check_program(geom, insns) == []
    note = next(n for n in cn.notes if n.startswith("linking:"))
    weak, total = (int(w) for w in note.split()[1:4:2])
    # The upsample net is a chain (every operation reads the previous one's output): all barriers.
    assert (0 if name == "upsample" else 1) <= weak <= total


@pytest.mark.parametrize("name", ["inception", "googlenet32", "lrn"])
def test_removing_a_cross_operation_token_is_reported(name):
    qnet, cfg, cn = _compiled(name)
    geom = Geometry.from_config(cfg)
    insns, pairs = _cross_op_pairs(cn, "C2L")
    assert pairs, "no operation boundary with a weak-join C2L token"
    for p, c in pairs[:6]:
        insns[p].push_prev = insns[c].pop_next = False
        problems = check_program(geom, insns)
        assert any(h.kind in ("RAW", "WAR", "WAW") for h in problems), (name, p, c)
        insns[p].push_prev = insns[c].pop_next = True
    # A full barrier's pair (STORE -> one-word POOL -> LOAD) is needed as well.
    barrier = next(i for i, x in enumerate(insns) if _is_barrier(x))
    store = max(i for i in range(barrier) if isinstance(insns[i], isa.Store))
    insns[store].push_prev = insns[barrier].pop_next = False
    assert ("RAW", "DRAM") in _kinds(check_program(geom, insns))


@pytest.mark.parametrize("schedule", ["loads-first", "stores-first"])
@pytest.mark.parametrize("name", ["inception", "yolov3tiny"])
def test_weakly_joined_programs_are_bit_exact_under_adversarial_schedules(name, schedule):
    qnet, cfg, cn = _compiled(name)
    c, h, w = qnet[qnet.inputs[0]].shape.as_tuple()
    x = np.random.default_rng(7).uniform(0, 1, (1, c, h, w)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    wf = Workflow(cn, cfg, target="golden")
    wf.deploy()
    wf._machine.schedule = schedule  # the machine Workflow created (what a debugger would do)
    wf.predict(x)
    for t in cn.outputs:
        np.testing.assert_array_equal(wf.last_hw_values[t.name], ref[t.name], err_msg=t.name)


def test_inception_pool_branch_runs_between_the_reduce_and_the_3x3_convs():
    _, _, cn = _compiled("inception")
    first = {e.name: e.insn_first for e in cn.layers if e.hw and e.insn_count}
    assert first["r3"] < first["pool"] < first["b3"] < first["b5"] < first["proj"]


def test_weak_joins_cut_the_estimate(monkeypatch):
    qnet, cfg, cn = _compiled("googlenet32")
    weak = estimate_compiled(cn).total_cycles
    monkeypatch.setattr(compile_mod, "link", functools.partial(link, weak=False))
    full = compile_network(qnet, cfg)
    assert not any(n.startswith("linking:") and not n.startswith("linking: 0 ") for n in full.notes)
    assert check_program(Geometry.from_config(cfg), isa.decode_program(full.instructions)) == []
    assert weak < estimate_compiled(full).total_cycles


# -- footprints against the ISA-level simulator ---------------------------------------------------
_STATE = ("inp", "wgt", "out", "dram", "prm")


def _random_prm(rng, shape):
    """PRM words of random but executable parameters (M, M_neg < 2**15, S in 8..20) per lane."""
    words, nbytes = shape
    lanes = np.zeros((words, nbytes // 9, 9), dtype=np.uint8)
    lanes[..., 0:4] = rng.integers(-5000, 5000, (words, nbytes // 9)).astype("<i4").view(np.uint8).reshape(
        words, nbytes // 9, 4)
    for lo in (4, 6):
        lanes[..., lo:lo + 2] = rng.integers(1, 1 << 15, (words, nbytes // 9)).astype("<u2").view(np.uint8).reshape(
            words, nbytes // 9, 2)
    lanes[..., 8] = rng.integers(8, 21, (words, nbytes // 9))
    return lanes.reshape(words, nbytes)


def _space_view(m, space):
    return {"INP": m.inp, "WGT": m.wgt, "PRM": m.prm, "OUT": m.out, "DRAM": m.dram}[space]


def _mask(m, geom, accesses):
    """Per buffer (and DRAM byte) a boolean mask of the words an access list covers."""
    masks = {s: np.zeros(len(_space_view(m, s)), dtype=bool) for s in ("INP", "WGT", "PRM", "OUT", "DRAM")}
    b = geom.bus_bytes
    for acc in accesses:
        if acc[0] == "DRAM":
            beats = acc[1]
            masks["DRAM"][(beats[:, None] * b + np.arange(b)[None, :]).reshape(-1)] = True
        else:
            masks[acc[0]][acc[1]:acc[2]] = True
    return masks


@pytest.mark.parametrize("name", ["inception", "resnet", "digits", "lrn", "upsample"])
def test_footprints_cover_what_the_isa_simulator_touches(name):
    """For every instruction of a compiled program: the words the ISA simulator changes lie in the
    write footprint, and the values it writes depend only on the words of the read footprint
    (everything else is randomised between two executions)."""
    from dlproc.compiler.hazards import footprint
    from dlproc.targets.isasim import Machine

    _, cfg, cn = _compiled(name)
    geom = Geometry.from_config(cfg)
    rng = np.random.default_rng(11)
    size = cn.base + cn.memory_map.end
    m = Machine(cfg, dram_size=size)

    def randomise(keep=None):
        for attr, space in zip(_STATE, ("INP", "WGT", "OUT", "DRAM", "PRM")):
            arr = getattr(m, attr)
            flat = arr.reshape(len(arr), -1) if attr != "dram" else arr
            if attr == "prm":
                new = _random_prm(rng, flat.shape)
            elif attr == "dram":
                new = rng.integers(0, 256, flat.shape).astype(np.uint8)
            else:
                new = rng.integers(-128, 128, flat.shape).astype(flat.dtype)
            if keep is not None:
                new[keep[space]] = flat[keep[space]]
            flat[...] = new

    kinds = set()
    for insn in isa.decode_program(cn.instructions):
        if isinstance(insn, (isa.Mark, isa.Finish)):
            continue
        kinds.add(insn.OPCODE.name)
        reads, writes = footprint(insn, geom)
        rmask, wmask = _mask(m, geom, reads), _mask(m, geom, writes)
        randomise()
        before = {s: _space_view(m, s).copy() for s in ("INP", "WGT", "PRM", "OUT", "DRAM")}
        m.execute_alone(insn)
        first = {}
        for s in before:
            view = _space_view(m, s)
            changed = np.any((view != before[s]).reshape(len(view), -1), axis=1)
            assert not (changed & ~wmask[s]).any(), f"{insn.OPCODE.name} writes {s} outside its footprint"
            first[s] = view[wmask[s]].copy()
        # Same read-footprint contents, everything else new: the written values must not change.
        # (A STORE writes C bytes of each element's beats; the other bytes of its DRAM footprint
        # keep their contents, so those are kept too.)
        for s in before:
            _space_view(m, s)[...] = before[s]
        randomise(keep={**rmask, "DRAM": rmask["DRAM"] | wmask["DRAM"]})
        m.execute_alone(insn)
        for s in before:
            np.testing.assert_array_equal(_space_view(m, s)[wmask[s]], first[s],
                                          err_msg=f"{insn.OPCODE.name} writes other {s} values when words outside "
                                                  "its read footprint change")
    assert {"LOAD", "STORE", "CONV"} <= kinds


def test_results_to_inp_need_wait_writes():
    """CONV.to_inp writes INP from the compute unit: the fused depthwise -> pointwise program of the
    RTL test is clean; without wait_writes its pointwise CONV's read of the fused words is a
    ``drain`` hazard; a LOAD over those words without a token from the CONV is a WAW on INP."""
    import dataclasses
    import sys
    from pathlib import Path

    from dlproc.compiler.hazards import check_program
    from dlproc.hardware.geometry import Geometry

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "targets"))
    from test_rtl_layers import CFG, fused_program

    geom = Geometry.from_config(CFG)
    prog, _, _ = fused_program(0)
    assert check_program(geom, prog) == []
    free = [dataclasses.replace(i, wait_writes=0) if isinstance(i, isa.Conv) else i for i in prog]
    problems = check_program(geom, free)
    assert [p.kind for p in problems] == ["drain", "drain"] and "to_inp" in str(problems[0])  # both pointwise CONVs
    first_dw = next(k for k, i in enumerate(prog) if isinstance(i, isa.Conv) and i.to_inp)
    late = isa.Load(buf=isa.Buf.INP, sram_base=prog[first_dw].out_base, dram_addr=0, x_size=4)
    problems = check_program(geom, prog[:-1] + [late, prog[-1]])
    assert any(p.kind in ("WAW", "WAR") and p.space == "INP" for p in problems), problems
