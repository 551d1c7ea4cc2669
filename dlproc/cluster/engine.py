"""The Ray engine every distributed command shares.

``session(workers, address)`` starts an embedded local cluster of ``workers`` CPUs (or joins the
cluster at ``address``), hands the ``DLPROC_*`` environment to the workers (the build folder, the
native-code switch, fault injection in tests), and shuts Ray down when the block ends, whatever
happens inside. Ray reports dead workers and the like by printing to stdout from its own threads;
stdout is the command's result (``--json``), so inside the session those lines go to stderr.

A worker process keeps what it loaded between tasks: the Verilator build of a configuration is
built once per machine (the on-disk cache is keyed by the configuration hash and locked, see
``dlproc.sim.build``) and loaded once per worker process, never per task.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dlproc.errors import DlprocError

__all__ = ["Session", "session", "require_ray"]


def require_ray() -> Any:
    """The ``ray`` module, or a clear error naming the extra that installs it."""
    try:
        import ray
    except ModuleNotFoundError:
        raise DlprocError("this runs on Ray, which is not installed: pip install -e '.[cluster]' "
                          "(or pip install ray)") from None
    return ray


@dataclass(frozen=True)
class Session:
    ray: Any
    workers: int  #: CPUs of the cluster: how many tasks run at once


@contextlib.contextmanager
def session(workers: int | None = None, address: str | None = None) -> Iterator[Session]:
    """A Ray session: local with ``workers`` CPUs (default: this machine's), or the cluster at
    ``address``. The two are exclusive."""
    if workers is not None and address is not None:
        raise DlprocError("give --workers (a local cluster) or --address (an existing one), not both")
    if workers is not None and workers < 1:
        raise DlprocError(f"--workers {workers}: at least one worker")
    ray = require_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env = {k: v for k, v in os.environ.items() if k.startswith("DLPROC_")}
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                               "runtime_env": {"env_vars": env} if env else None}
    with contextlib.redirect_stdout(sys.stderr):
        try:
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=workers or os.cpu_count() or 1, **options)
        except ConnectionError as exc:
            raise DlprocError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
        try:
            yield Session(ray, int(ray.cluster_resources().get("CPU", workers or 1)))
        finally:
            ray.shutdown()
