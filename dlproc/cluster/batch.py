"""A batch of frames spread over Ray workers (``Workflow(..., workers=K | address=A)``,
``dlproc predict --target sim --workers K``).

The batch is cut into contiguous chunks, a few per worker so that a slow chunk does not leave the
others idle; each task deploys the compiled network on its own target (the ISA simulator or the
Verilated processor, loaded once per worker process) and runs its frames in order. The driver
puts the outputs back in frame order, so the result is the one a single machine gives; the
profile is that of the batch's last frame, as on one machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dlproc import progress
from dlproc.cluster.engine import session

__all__ = ["run_frames", "CHUNKS_PER_WORKER"]

CHUNKS_PER_WORKER = 2


def run_frames(run_chunk: Callable[..., tuple[dict[str, np.ndarray], list]], cn: Any, config: Any, target: str,
               xq: np.ndarray, workers: int | None, address: str | None) -> tuple[dict[str, np.ndarray], list]:
    """Run the quantized, folded frames ``xq`` of compiled network ``cn`` on ``target`` over Ray.

    ``run_chunk(cn_bytes, config, target, frames)`` runs one chunk on a worker and returns its
    hardware outputs by tensor name and its frame runs (``Workflow.run_chunk``, passed in so that
    this module does not import the workflow that calls it); the result is the same for the
    whole batch, in frame order."""
    from dlproc.compiler import netfile

    with session(workers, address) as s:
        ray = s.ray
        cn_ref = ray.put(netfile.to_bytes(cn))
        task = ray.remote(max_retries=3)(run_chunk)
        chunks = np.array_split(np.arange(len(xq)), min(len(xq), CHUNKS_PER_WORKER * s.workers))
        refs = [task.remote(cn_ref, config, target, xq[idx]) for idx in chunks if len(idx)]
        results: dict[Any, Any] = {}
        with progress.bar(len(xq), f"{cn.name} on {target}, {s.workers} workers", "frame") as shown:
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    results[ref] = ray.get(ref)
                    shown.update(len(next(iter(results[ref][0].values()))))
    values = {name: np.concatenate([results[r][0][name] for r in refs]) for name in results[refs[0]][0]}
    runs = [run for r in refs for run in results[r][1]]
    return values, runs
