"""A differential campaign on Ray: N random networks, each on the golden model, the ISA simulator
and the RTL, spread over workers; results streamed to a JSONL file; mismatches saved as
reproducers.

Why Ray: a campaign is thousands of independent, second-long tasks whose only shared input is
the processor configuration, and whose workers each need a Verilator build of it. Ray gives that
shape directly: remote tasks retried when their worker dies (``max_retries``), an embedded local
cluster when no address is given (``ray.init(num_cpus=K)``), the same code on a real cluster
(``--address``), and no shared file system: the configuration travels through the object store
once, and each worker process builds (or finds in its machine's cache, by configuration hash,
under a file lock) the Verilated processor on its first case and keeps it loaded for the rest.

The build is tried once before any case (:func:`_prepare`), so a configuration that cannot be
built stops the campaign with that one error instead of failing N cases with it.

Results file: the first line is a header (seed, configuration hash, what the file is); then one
JSON object per finished case, flushed as it arrives, so an interrupted campaign keeps every case
that finished and ``--resume`` runs only the others (a header that does not match the campaign is
refused: resuming another campaign's file would mix results).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dlproc import progress
from dlproc.cluster.engine import session
from dlproc.errors import DlprocError
from dlproc.regress.case import CaseResult, run_case, save_reproducer

__all__ = ["CampaignSummary", "run_campaign", "FAULT_ENV"]

#: Fault injection for the tests: ``kill:INDEX:FLAGFILE`` makes the worker running case INDEX kill
#: its own process (SIGKILL, as a crash or an out-of-memory kill would) if FLAGFILE exists,
#: removing the file first, so the retry of the case runs normally; ``corrupt:INDEX`` flips bit 6 of the first 16
#: weight bytes the RTL of case INDEX loads, so the RTL disagrees.
FAULT_ENV = "DLPROC_REGRESS_FAULT"
RESULTS_KIND = "dlproc regress results"
#: Tasks in flight per worker: enough to keep every worker busy while results stream back.
IN_FLIGHT_PER_WORKER = 2
#: Cases per task: a few, so that Ray's cost per task (about 40 ms measured here, against 0.1 to
#: 0.3 s per case) is shared, while results still stream back every second or so.
CASES_PER_TASK = 4
TASK_RETRIES = 3


@dataclass
class CampaignSummary:
    networks: int
    mismatches: int
    errors: int
    seconds: float
    workers: int
    skipped: int = 0  #: cases found done in the results file (--resume)
    interrupted: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"networks": self.networks, "mismatches": self.mismatches, "errors": self.errors,
                "seconds": round(self.seconds, 2), "workers": self.workers, "skipped": self.skipped,
                "interrupted": self.interrupted, "failures": self.failures}


def _kill_fault(index: int) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith("kill:"):
        return
    _, which, flag = spec.split(":", 2)
    if int(which) == index and os.path.exists(flag):
        os.remove(flag)
        os.kill(os.getpid(), signal.SIGKILL)


def _corrupt_fault(index: int) -> Callable[[Any, Any], None] | None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith("corrupt:") or int(spec.split(":")[1]) != index:
        return None

    def corrupt(sim: Any, cn: Any) -> None:
        from dlproc.hardware import isa

        load = next(i for i in isa.decode_program(cn.instructions) if isinstance(i, isa.Load) and i.buf == isa.Buf.WGT)
        # The first 16 bytes: a depthwise word's unused tap bytes are ignored by the hardware, so one
        # byte may not matter.
        data = bytearray(sim.mem_read(load.dram_addr, 16))
        for k in range(len(data)):
            data[k] ^= 0x40
        sim.mem_write(load.dram_addr, bytes(data))

    return corrupt


def _cases_task(config: Any, seed: int, indices: list[int], kind: str) -> list[CaseResult]:
    results = []
    for index in indices:
        _kill_fault(index)
        results.append(run_case(seed, index, config, _corrupt_fault(index), kind))
    return results


def _prepare(config: Any) -> float:
    """Build (or find) the Verilated processor of ``config`` on this worker's machine."""
    from dlproc.sim.harness import NativeSim

    with NativeSim(config, ddr_size=1 << 20) as sim:
        return float(sim.build.seconds)


def _header(seed: int, config: Any, networks: str) -> dict[str, Any]:
    return {"kind": RESULTS_KIND, "seed": int(seed), "config_hash": config.config_hash(), "networks": networks}


def _read_done(path: Path, header: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The finished cases of a results file (a torn last line, from a kill, is ignored)."""
    lines = path.read_text().splitlines()
    if not lines:
        return {}
    try:
        head = json.loads(lines[0])
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("kind") != RESULTS_KIND:
        raise DlprocError(f"{path}: not a dlproc regress results file (its first line is not the header)")
    if (head.get("seed"), head.get("config_hash"), head.get("networks", "full")) != \
            (header["seed"], header["config_hash"], header["networks"]):
        raise DlprocError(f"{path}: holds campaign seed {head.get('seed')} on configuration "
                          f"{str(head.get('config_hash'))[:16]}, this one is seed {header['seed']} on "
                          f"{header['config_hash'][:16]} ({header['networks']} networks); give another --results file "
                          "or the same campaign")
    done: dict[int, dict[str, Any]] = {}
    for line in lines[1:]:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "index" in rec:
            done[int(rec["index"])] = rec
    return done


def run_campaign(config: Any, count: int, seed: int, *, workers: int | None = None, address: str | None = None,
                 results: Path | None = None, resume: bool = False, reproducers: Path | None = None,
                 rerun_command: Callable[[int], str] | None = None, kind: str = "full") -> CampaignSummary:
    """Run cases 0..count-1 of campaign ``seed`` on ``config`` over Ray (see the module docstring);
    ``kind`` is the generator's network kind (``dlproc.regress.generator.KINDS``)."""

    if count < 1:
        raise DlprocError(f"--count {count}: a campaign has at least one network")
    header = _header(seed, config, kind)
    done: dict[int, dict[str, Any]] = {}
    if results is not None:
        results = Path(results)
        if resume and results.exists():
            done = _read_done(results, header)
        elif results.exists() and results.stat().st_size and not resume:
            raise DlprocError(f"{results} exists: give --resume to continue that campaign, or another file")
    todo = [i for i in range(count) if i not in done]
    start = time.monotonic()
    summary = CampaignSummary(0, 0, 0, 0.0, 0, skipped=count - len(todo))
    for rec in done.values():
        if rec["index"] < count:
            _count(summary, rec)
    with session(workers, address) as s:
        summary.workers = s.workers
        _campaign(s.ray, s.workers, config, seed, header, done, todo, results, reproducers, rerun_command, summary)
    summary.seconds = time.monotonic() - start
    return summary


def _campaign(ray: Any, n_workers: int, config: Any, seed: int, header: dict[str, Any], done: dict[int, dict[str, Any]],
              todo: list[int], results: Path | None, reproducers: Path | None,
              rerun_command: Callable[[int], str] | None, summary: CampaignSummary) -> None:
    out = None
    try:
        config_ref = ray.put(config)
        if todo:
            try:
                ray.get(ray.remote(max_retries=0)(_prepare).remote(config_ref))
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                raise DlprocError(f"the processor of configuration {config.config_hash()[:16]} cannot be built, so "
                                  f"no case ran: {str(cause).strip().splitlines()[0]}") from None
        if results is not None:
            # The file restarts from its header and the cases it holds: a line torn by a kill is
            # dropped, so the next case starts on a line of its own.
            results.parent.mkdir(parents=True, exist_ok=True)
            out = results.open("w")
            out.write(json.dumps(header) + "\n")
            for index in sorted(done):
                out.write(json.dumps(done[index]) + "\n")
            out.flush()
        task = ray.remote(max_retries=TASK_RETRIES)(_cases_task)
        per_task = max(1, min(CASES_PER_TASK, len(todo) // (IN_FLIGHT_PER_WORKER * n_workers)))
        queue = [todo[i:i + per_task] for i in range(0, len(todo), per_task)][::-1]
        pending: dict[Any, list[int]] = {}
        with progress.bar(len(todo), f"regress seed {seed}: {len(todo)} networks on {n_workers} workers",
                          "net") as shown:
            while queue or pending:
                while queue and len(pending) < IN_FLIGHT_PER_WORKER * n_workers:
                    indices = queue.pop()
                    pending[task.remote(config_ref, seed, indices, header["networks"])] = indices
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    indices = pending.pop(ref)
                    try:
                        results = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # retries exhausted: the worker kept dying
                        why = (f"the task failed {TASK_RETRIES + 1} times: "
                               f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                        results = [CaseResult(seed, index, "error", detail=why) for index in indices]
                    for result in results:
                        _record(result, config, reproducers, rerun_command, out, summary)
                        shown.update(1)
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if out is not None:
            out.close()


def _record(result: CaseResult, config: Any, reproducers: Path | None, rerun_command: Callable[[int], str] | None,
            out: Any, summary: CampaignSummary) -> None:
    """Save a failing case's reproducer, write the case's line, count it."""
    rec = result.record()
    if result.status != "ok" and reproducers is not None:
        cmd = rerun_command(result.index) if rerun_command else ""
        rec["reproducer"] = str(save_reproducer(result, reproducers, config, cmd))
        rec["rerun"] = cmd
    if out is not None:
        out.write(json.dumps(rec) + "\n")
        out.flush()
    _count(summary, rec)


def _count(summary: CampaignSummary, rec: dict[str, Any]) -> None:
    summary.networks += 1
    if rec["status"] == "mismatch":
        summary.mismatches += 1
    elif rec["status"] == "error":
        summary.errors += 1
    if rec["status"] != "ok":
        summary.failures.append({k: rec[k] for k in ("index", "status", "detail", "reproducer", "rerun") if k in rec})
