"""One Hydra job at a time in a worker process, except while a job waits outside its pool.

Hydra's job context (``HydraConfig``) is a process-global singleton that ``run_job`` sets
before the task function runs and restores after it, so a worker process runs one job at a
time (:func:`one_hydra_job`, taken around ``run_job`` by :mod:`pipeline.sweep.execute`). A
``blocks=cluster`` fit leaves its worker's thread pool while it waits for the cluster
(Dask's ``worker_client``), and the worker starts its next task meanwhile: that task's actor,
or an ordinary job, must be able to run then, so the fit gives the lock back while it is out
of the pool (:func:`released_while_seceded`) — its task function has read Hydra's context by
then — and takes it again before ``run_job`` restores the context.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_HOLDER = threading.local()


@contextlib.contextmanager
def one_hydra_job() -> Iterator[None]:
    """Held around Hydra's ``run_job`` of one job in this process."""
    with _LOCK:
        _HOLDER.held = True
        try:
            yield
        finally:
            _HOLDER.held = False


@contextlib.contextmanager
def released_while_seceded() -> Iterator[None]:
    """Give the lock back while this thread is out of the worker's pool (a no-op where this
    thread does not hold it: a job run on its own, not by a sweep)."""
    if not getattr(_HOLDER, "held", False):
        yield
        return
    _HOLDER.held = False
    _LOCK.release()
    try:
        yield
    finally:
        _LOCK.acquire()
        _HOLDER.held = True
