"""Progress bars for the steps that can take more than a few seconds: calibration, Verilator
builds, RTL batches, exploration, synthesis.

One library draws them (``tqdm``), on stderr, so that stdout stays the command's result. They
show only where a person watches:

* not when stderr is not a terminal (a pipe, a CI log, a test's captured output);
* not inside :func:`quiet` (the CLI enters it for ``--json``, whose output a program reads);
* ``DLPROC_PROGRESS=0`` turns them off everywhere, ``DLPROC_PROGRESS=1`` on even without a
  terminal (``--json`` still wins).

A step with a known number of parts (frames, batches, design points) counts them; a step that is
one external tool run (a Verilator build, Yosys) shows the time it has been running, ticking once
a second, since neither tool reports how far along it is.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

__all__ = ["enabled", "quiet", "bar", "track", "running"]

T = TypeVar("T")

_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("dlproc_progress_quiet", default=False)
_OFF, _ON = {"0", "no", "off", "false"}, {"1", "yes", "on", "true", "always"}


def enabled() -> bool:
    """Whether a progress bar would be drawn here and now (see the module docstring)."""
    env = os.environ.get("DLPROC_PROGRESS", "").strip().lower()
    if env in _OFF or _QUIET.get():
        return False
    if env in _ON:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No progress bars inside this block (in this thread or task)."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def bar(total: int | None, desc: str, unit: str = "it") -> tqdm:
    """A bar of ``total`` parts (``None``: unknown), disabled where bars do not show; use it as a
    context manager and call ``update()``."""
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled(), file=sys.stderr, leave=False,
                dynamic_ncols=True, mininterval=0.5)


def track(items: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items``, counted on a bar as they are consumed."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit) as b:
        for item in items:
            yield item
            b.update(1)


@contextlib.contextmanager
def running(desc: str) -> Iterator[None]:
    """The elapsed time of the block on a bar that ticks once a second, for one long external
    run (a compiler, a synthesis tool) that reports no progress of its own."""
    if not enabled():
        yield
        return
    done = threading.Event()
    with tqdm(total=None, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True,
              bar_format="{desc}: {elapsed}") as b:
        def tick() -> None:
            while not done.wait(1.0):
                b.refresh()

        ticker = threading.Thread(target=tick, name="dlproc-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()
