"""The RTL check of exploration's best candidates (``dlproc explore --verify-rtl K``).

The estimator ranks the design points; before a user commits to one, the K fastest that fit the
device are built and simulated: each candidate's processor is generated and Verilated, the
network compiled for it runs one frame on the RTL, bit for bit against the golden model, and the
RTL's cycle count is set beside the estimate. Each candidate is its own Verilator build (minutes
for a full-size configuration), so the K checks run in parallel on Ray workers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dlproc import progress
from dlproc.cluster.engine import session

__all__ = ["RtlCheck", "verify_best", "candidates", "rtl_frame"]


@dataclass
class RtlCheck:
    assignments: dict[str, str]
    estimate_cycles: int | None
    rtl_cycles: int | None = None
    bit_exact: bool | None = None
    error: str = ""

    @property
    def estimate_error(self) -> float | None:
        """(estimate - RTL) / RTL."""
        if not self.rtl_cycles or self.estimate_cycles is None:
            return None
        return (self.estimate_cycles - self.rtl_cycles) / self.rtl_cycles

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"estimate_error": self.estimate_error}


def candidates(points: list[Any], k: int) -> list[Any]:
    """The ``k`` fastest valid points that fit the device, fastest first."""
    fit = [p for p in points if p.valid and p.fits]
    return sorted(fit, key=lambda p: -(p.fps or 0.0))[:k]


def rtl_frame(qnet: Any, cn: Any, config: Any, seed: int = 0) -> tuple[int, bool]:
    """Run one random frame of compiled ``cn`` (of ``qnet``) on ``config``'s RTL: its cycles, and
    whether every hardware output equals the golden model's bit for bit."""
    from dlproc.targets.golden.run import run_int8
    from dlproc.targets.workflow import Workflow

    shape = qnet[qnet.inputs[0]].shape
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, (1, shape.c, shape.h, shape.w)).astype(np.float32)
    wf = Workflow(cn, config, target="sim")
    try:
        _, prof = wf.predict(x, profile=True, display=False)
    finally:
        wf.close()
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
    return int(prof.total_cycles), all(np.array_equal(wf.last_hw_values[t.name], ref[t.name]) for t in cn.outputs)


def _check(config_dict: dict[str, Any], assignments: dict[str, str], estimate: int | None, qnet: Any) -> RtlCheck:
    from dlproc.compiler import compile_network
    from dlproc.config import ProcessorConfig
    from dlproc.errors import DlprocError

    check = RtlCheck(dict(assignments), estimate)
    try:
        cfg = ProcessorConfig.from_dict(config_dict, source="explore candidate")
        check.rtl_cycles, check.bit_exact = rtl_frame(qnet, compile_network(qnet, cfg), cfg)
    except DlprocError as exc:
        check.error = str(exc).splitlines()[0]
    return check


def verify_best(qnet: Any, points: list[Any], k: int, *, workers: int | None = None,
                address: str | None = None) -> list[RtlCheck]:
    """Build and simulate the ``k`` best candidates of ``points`` in parallel (see the module
    docstring); ``qnet`` is the quantized network the points were estimated with."""
    chosen = candidates(points, k)
    if not chosen:
        return []
    with session(workers, address) as s:
        ray = s.ray
        net_ref = ray.put(qnet)
        task = ray.remote(max_retries=1)(_check)
        refs = [task.remote(p.config, p.assignments, p.cycles, net_ref) for p in chosen]
        with progress.bar(len(refs), f"RTL check of the {len(refs)} best configurations", "config") as shown:
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                shown.update(len(ready))
        return [ray.get(r) for r in refs]
