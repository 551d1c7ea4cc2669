"""A full Darknet network with random weights in cycle-accurate RTL simulation.

    python benchmarks/bench_network_rtl.py [--cfg tiny.cfg] [--size 64] [--preset de10nano_int8] [--frames 1]

Loads a network from tests/data/darknet (random weights, input reduced to --size),
calibrates and quantizes it on random images, compiles it, runs --frames frames on the Verilated
processor (NativeSim) and on the ISA-level simulator, checks that both agree bit for bit with the
layer-level golden model, and prints the profiler table (cycles and MAC utilization per layer), the
simulation speed and the compile/plan figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from dlproc.compiler import compile_network
from dlproc.config import ProcessorConfig
from dlproc.frontends import load_network
from dlproc.targets.golden.run import run_int8
from dlproc.quant import Quantizer
from dlproc.targets.workflow import Workflow

NETWORKS = Path(__file__).resolve().parents[1] / "tests" / "data" / "darknet"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cfg", default="tiny.cfg", help="a .cfg in tests/data/darknet (default tiny.cfg)")
    ap.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    ap.add_argument("--preset", default="de10nano_int8")
    ap.add_argument("--frames", type=int, default=1)
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    net = load_network(NETWORKS / args.cfg, input_size=(args.size, args.size))
    rng = np.random.default_rng(0)
    c, h, w = net[net.inputs[0]].shape.as_tuple()
    q = Quantizer(net)
    q.calibrate(rng.uniform(0, 1, (8, c, h, w)).astype(np.float32))
    qnet = q.quantize()
    t1 = time.monotonic()
    config = ProcessorConfig.preset(args.preset)
    cn = compile_network(qnet, config)
    t2 = time.monotonic()
    print(cn.report())
    print(f"\nquantize {t1 - t0:.1f} s, compile {t2 - t1:.1f} s, {cn.insn_count} instructions\n")

    x = rng.uniform(0, 1, (args.frames, c, h, w)).astype(np.float32)
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    golden = Workflow(cn, config, target="golden")
    t3 = time.monotonic()
    golden.predict(x)
    t4 = time.monotonic()
    sim = Workflow(cn, config, target="sim")
    sim.deploy()  # the Verilator build (cached by configuration and sources)
    t5 = time.monotonic()
    _, prof = sim.predict(x, profile=True)
    t6 = time.monotonic()
    sim.close()
    exact = all(np.array_equal(sim.last_hw_values[t.name], ref[t.name]) and
                np.array_equal(golden.last_hw_values[t.name], ref[t.name]) for t in cn.outputs)
    macs = sum(l.macs for l in cn.layers)
    print(f"\nRTL == ISA simulator == golden model (bit-exact): {exact}")
    print(f"network MACs {macs:,}; peak {cn.c * cn.c} MAC/cycle; overall utilization "
          f"{100 * macs / (prof.last_frame_cycles * cn.c * cn.c):.1f}%")
    print(f"ISA-level simulator: {t4 - t3:.2f} s for {args.frames} frame(s)")
    print(f"RTL: build/load {t5 - t4:.1f} s; {prof.total_cycles:,} cycles in {t6 - t5:.2f} s = "
          f"{prof.total_cycles / (t6 - t5) / 1e3:.0f} kcycles/s simulated")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
