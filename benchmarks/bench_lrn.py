"""GoogLeNet's LRN layers on ``arria10soc_int8`` with the LRN block, in cycle-accurate RTL simulation.

    python benchmarks/bench_lrn.py                  # both GoogLeNet LRN layers (56x56x64, 56x56x192)
    python benchmarks/bench_lrn.py --channels 192   # only conv2/norm2

GoogLeNet has two LRN layers (size 5, alpha 1e-4, beta 0.75, bias 1): ``pool1/norm1`` on 56x56x64 and
``conv2/norm2`` on 56x56x192. Each is built as a layer program (``layerprog.build_lrn_program``: the
LOAD PRM / LRNTAB table load, then tiles of LOAD, LRN, STORE) and run on the Verilated processor
(``NativeSim``; the first run builds it, cached by configuration). The output must equal
``golden.ops.lrn`` and the ISA-level simulator bit for bit.

Three RTL runs per layer, on the same processor: the whole program; its table stream alone
(followed by FINISH); and the program without its table stream (the LRN block keeps its table, so
the output must again be exact) -- the tiles alone. The table load overlaps the first tile's LOAD,
so the whole program costs less than the sum; "+table" is what the table adds (whole minus
tiles). Printed next to the LRN engine's formula (``n_pix * cin_blocks + 18`` per LRN instruction,
the table 1792 * (1 + 2/C) cycles), the layer program's cost model, the instruction-stream
estimator (``dlproc.estimate``) and MATLAB's 1.26 M cycles for GoogLeNet's two LRN layers together
(int8, Arria 10 SoC, 150 MHz).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from dlproc.hardware import isa
from dlproc.config import ProcessorConfig
from dlproc.estimate.report import estimate_layer_program
from dlproc.targets.golden import ops
from dlproc.compiler.layerprog import LrnLayer, build_lrn_program
from dlproc.compiler.planners.lrn import lrn_table_stream
from dlproc.targets.isasim import run_on_isasim

MATLAB_TWO_LRN_CYCLES = 1_260_000  # GoogLeNet int8 on the Arria 10 SoC, both LRN layers (design brief, section 8)
LAYERS = {64: "pool1/norm1", 192: "conv2/norm2"}


def lrn_config(preset: str) -> ProcessorConfig:
    cfg = ProcessorConfig.preset(preset)
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    return cfg


def formula_cycles(prog, c: int) -> tuple[int, int]:
    """(compute, table) cycles by the engine's documented rates (docs/compute.md, LRN engine)."""
    from dlproc.hardware.numerics import LRN_TABLE_SIZE

    compute = sum(i.n_pix * i.cin_blocks + 18 for i in prog.instructions if isinstance(i, isa.Lrn))
    table = round(LRN_TABLE_SIZE * (1 + 2 / c))
    return compute, table


def run_layer(sim, cfg: ProcessorConfig, ch: int, hw: int, rng: np.random.Generator) -> dict:
    s_in, s_out = 0.05, 0.02
    params = ops.lrn_params(5, 1e-4, 0.75, 1.0, s_in, s_out)
    layer = LrnLayer(size=5, zp_in=-7, table_mult=params.mult, table_shift=params.shift, zp_out=3)
    x = rng.integers(-128, 128, (ch, hw, hw), dtype=np.int8)
    ref = ops.lrn(x[None], 5, layer.zp_in, params.mult, params.shift, layer.zp_out)[0]
    prog = build_lrn_program(cfg, layer, x)

    t0 = time.monotonic()
    out, res = sim.run_layer_program(prog, max_cycles=50_000_000)
    wall = time.monotonic() - t0
    if not res.ok:
        raise SystemExit(f"the processor stopped with error {res.error_code} (STATUS {res.status:#x})")
    isa_out, _ = run_on_isasim(prog)

    # The table stream (the program's first instructions) alone, then FINISH, from a free DRAM area.
    n_table = len(lrn_table_stream(prog.geometry, 0))
    table_insns = prog.instructions[:n_table]
    assert all(isinstance(i, (isa.Load, isa.LrnTab)) for i in table_insns)
    assert not any(isinstance(i, isa.LrnTab) for i in prog.instructions[n_table:])
    table_prog = isa.encode_program([*table_insns, isa.Finish()])
    table_at = -(-prog.dma_limit // 4096) * 4096
    sim.mem_write(table_at, table_prog)
    res_table = sim.run_program(table_at, n_table + 1, prog.dma_base, table_at + len(table_prog),
                                max_cycles=1_000_000)

    # The program without its table stream: clear the output region so that it must be rewritten.
    sim.mem_write(prog.output_addr, bytes(prog.output_bytes))
    res2 = sim.run_program(prog.insn_base + n_table * isa.INSN_BYTES, prog.insn_count - n_table, prog.dma_base,
                           prog.dma_limit, max_cycles=50_000_000)
    out2 = prog.read_output(sim.mem_read(prog.output_addr, prog.output_bytes), base=prog.output_addr)
    compute, table = formula_cycles(prog, cfg.conv_c)
    return {
        "name": LAYERS.get(ch, f"LRN {ch}"), "shape": (ch, hw, hw), "cycles": res.hw_cycles,
        "table_alone": res_table.hw_cycles, "tiles": res2.hw_cycles, "table": res.hw_cycles - res2.hw_cycles,
        "exact": bool(np.array_equal(out, ref) and np.array_equal(isa_out, ref) and np.array_equal(out2, ref)
                      and res2.ok and res_table.ok),
        "formula": compute, "formula_table": table, "estimate": prog.plan.estimated_cycles,
        "model": estimate_layer_program(cfg, prog, name="lrn", kind="lrn").cycles,
        "lrn_insns": sum(isinstance(i, isa.Lrn) for i in prog.instructions), "insns": prog.insn_count,
        "dma_bytes": prog.plan.dma_bytes, "wall": wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="arria10soc_int8")
    ap.add_argument("--channels", type=int, nargs="*", default=[64, 192])
    ap.add_argument("--size", type=int, default=56, help="height and width (GoogLeNet: 56)")
    args = ap.parse_args(argv)

    from dlproc.sim.harness import NativeSim

    cfg = lrn_config(args.preset)
    rng = np.random.default_rng(0)
    print(f"{args.preset} + LRNBlockGeneration: C = {cfg.conv_c}, {cfg.memory_data_width}-bit bus, "
          f"{cfg.target_frequency_mhz:g} MHz")
    t0 = time.monotonic()
    sim = NativeSim(cfg, ddr_size=16 << 20)
    print(f"native build/load {time.monotonic() - t0:.1f} s\n")
    rows = []
    try:
        for ch in args.channels:
            rows.append(run_layer(sim, cfg, ch, args.size, rng))
    finally:
        sim.close()

    head = (f"{'layer':<13}{'shape':>11}{'RTL cycles':>12}{'table alone':>13}{'tiles alone':>13}{'+table':>8}"
            f"{'formula':>14}{'plan est.':>11}{'estimator':>11}{'bit-exact':>11}")
    print(head)
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        formula = f"{r['formula']:,}+{r['formula_table']:,}"
        print(f"{r['name']:<13}{shape:>11}{r['cycles']:>12,}{r['table_alone']:>13,}{r['tiles']:>13,}{r['table']:>8,}"
              f"{formula:>14}{r['estimate']:>11,}{r['model']:>11,}{str(r['exact']):>11}")
    for r in rows:
        print(f"  {r['name']}: {r['insns']} instructions ({r['lrn_insns']} LRN), {r['dma_bytes']:,} DMA bytes, "
              f"{r['cycles'] / (cfg.target_frequency_mhz * 1e6) * 1e3:.3f} ms at {cfg.target_frequency_mhz:g} MHz, "
              f"{r['cycles'] / r['wall'] / 1e3:.0f} kcycles/s simulated")
    total = sum(r["cycles"] for r in rows)
    print("\nRTL cycles, table alone, tiles alone: measured (the processor's CYCLES counter); +table = RTL cycles "
          "- tiles alone (the table load overlaps the first tile's LOAD).\nEstimates: formula = LRN compute "
          "(n_pix*cin_blocks + 18 per instruction) + table (1792*(1 + 2/C)); plan est. = the layer program's cost "
          "model (without the table); estimator = dlproc.estimate on the whole instruction stream.")
    if {r["shape"][0] for r in rows} == {64, 192}:
        print(f"GoogLeNet's two LRN layers: {total:,} cycles in RTL simulation vs MATLAB's {MATLAB_TWO_LRN_CYCLES:,} "
              f"({MATLAB_TWO_LRN_CYCLES / total:.1f}x fewer)")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
