"""Benchmark: single pool layers on the Verilated processor (C = 4 test configuration).

Layer programs (``dlproc.compiler.layerprog.build_pool_program``: LOAD, POOL, STORE tiles) run on
``NativeSim``; prints the RTL cycles, the estimate and whether the output is bit-exact with the
golden model (``tests/layerprog_cases.pool_reference``).

    python benchmarks/bench_pool.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# The test folders (tests/ and its per-stage folders) hold the shared network builders.
sys.path[:0] = [str(ROOT / "tests")] + sorted(str(d) for d in (ROOT / "tests").iterdir() if d.is_dir() and d.name != "data")

from dlproc.estimate import simulate_program  # noqa: E402
from dlproc.compiler.layerprog import PoolLayer, build_pool_program  # noqa: E402


def main() -> int:
    from layerprog_cases import pool_reference, small_config

    from dlproc.sim.harness import NativeSim

    cfg = small_config(4)
    rng = np.random.default_rng(5)
    cases = {
        "maxpool 3x3 s1 p1 16x14x14": (PoolLayer("max", 3, 1, 1), (16, 14, 14)),
        "maxpool 3x3 s2 p1 16x28x28": (PoolLayer("max", 3, 2, 1), (16, 28, 28)),
        "maxpool 2x2 s2 8x16x16": (PoolLayer("max", 2, 2, 0), (8, 16, 16)),
        "global avg 7x7 16ch": (PoolLayer("global_avg", zp_in=3, zp_out=-2, mult=1337, shift=16), (16, 7, 7)),
    }
    xs = {k: rng.integers(-128, 128, size=shape).astype(np.int8) for k, (_, shape) in cases.items()}
    progs = {k: build_pool_program(cfg, layer, xs[k]) for k, (layer, _) in cases.items()}
    size = max(p.dma_limit for p in progs.values())
    ok = True
    with NativeSim(cfg, ddr_size=max(1 << 20, -(-size // (1 << 20)) * (1 << 20))) as sim:
        for name, prog in progs.items():
            out, res = sim.run_layer_program(prog, max_cycles=50_000_000)
            exact = res.error_code == 0 and np.array_equal(out, pool_reference(cases[name][0], xs[name]))
            est = simulate_program(cfg, prog.instructions, insn_base=prog.insn_base).cycles
            ok &= exact
            print(f"  {name:28s} RTL {res.hw_cycles:>8,}  est {est:>8,} ({100 * (est / res.hw_cycles - 1):+.2f} %)"
                  f"  {'bit-exact' if exact else 'MISMATCH'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
