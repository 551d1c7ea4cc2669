"""Benchmark: differential campaigns on Ray (``dlproc regress``, issue 21).

    python benchmarks/bench_regress.py [--count 1000] [--speedup-count 500] [--overhead-count 300] [--json]

Each campaign runs as its own ``dlproc regress`` process (a fresh Ray cluster, as a user runs it),
on the C = 4 configuration with every optional block (``tests/sim_fixture.blocks_config``; its
Verilator build is cached after the first run). Prints

* the full campaign on 2 workers: networks, mismatches, errors, wall time;
* the speed-up from 1 to 2 workers on the same campaign (target >= 1.7x on this 2-core machine),
  from the campaigns' own wall times (Ray's start included) and from the work rate;
* the engine's per-task cost, from a campaign of one-convolution networks (``--kind tiny``):
  the wall time the workers were given minus the time the cases measured themselves, per task.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from sim_fixture import blocks_config  # noqa: E402


def campaign(config: Path, count: int, seed: int, workers: int, results: Path, kind: str = "full") -> dict:
    cmd = [sys.executable, "-m", "dlproc", "regress", "--config", str(config), "--count", str(count), "--seed",
           str(seed), "--workers", str(workers), "--results", str(results), "--kind", kind, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    cases = [json.loads(line) for line in results.read_text().splitlines()[1:]]
    summary["case_seconds"] = sum(c["seconds"] for c in cases)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--speedup-count", type=int, default=500)
    ap.add_argument("--overhead-count", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config = tmp / "blocks.toml"
        blocks_config().save(config)
        campaign(config, 2, 0, 1, tmp / "warm.jsonl")  # the Verilator build, out of the timings
        full = campaign(config, args.count, 1, 2, tmp / "full.jsonl")
        one = campaign(config, args.speedup_count, 2, 1, tmp / "one.jsonl")
        two = campaign(config, args.speedup_count, 2, 2, tmp / "two.jsonl")
        tiny = campaign(config, args.overhead_count, 3, 2, tmp / "tiny.jsonl", kind="tiny")
    speedup_wall = one["seconds"] / two["seconds"]
    rate = lambda s: s["case_seconds"] / s["seconds"]  # noqa: E731 - busy worker-seconds per second
    overhead = (tiny["seconds"] * tiny["workers"] - tiny["case_seconds"]) / tiny["networks"]
    out = {
        "full": {k: full[k] for k in ("networks", "mismatches", "errors", "seconds", "workers")},
        "speedup": {"networks": args.speedup_count, "seconds_1": one["seconds"], "seconds_2": two["seconds"],
                    "wall_speedup": round(speedup_wall, 3), "work_rate_1": round(rate(one), 3),
                    "work_rate_2": round(rate(two), 3)},
        "overhead": {"networks": tiny["networks"], "seconds": tiny["seconds"],
                     "case_seconds_mean": round(tiny["case_seconds"] / tiny["networks"], 4),
                     "engine_seconds_per_task": round(overhead, 4)},
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        f, s, o = out["full"], out["speedup"], out["overhead"]
        print(f"campaign: {f['networks']} networks on {f['workers']} workers: {f['mismatches']} mismatches, "
              f"{f['errors']} errors, {f['seconds']:.1f} s ({f['networks'] / f['seconds']:.1f} networks/s)")
        print(f"speed-up 1 -> 2 workers ({s['networks']} networks): {s['seconds_1']:.1f} s -> {s['seconds_2']:.1f} s = "
              f"{s['wall_speedup']:.2f}x wall (target >= 1.7x); busy workers {s['work_rate_1']:.2f} -> "
              f"{s['work_rate_2']:.2f}")
        print(f"engine cost ({o['networks']} one-convolution networks): {o['case_seconds_mean'] * 1e3:.1f} ms of work "
              f"per case, {o['engine_seconds_per_task'] * 1e3:.1f} ms of engine time per case (Ray start and the driver included)")
    ok = out["full"]["mismatches"] == 0 and out["full"]["errors"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
