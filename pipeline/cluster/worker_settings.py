"""What the local workers this package starts are given (:data:`WORKER_SETTINGS`: the fork
server's environment and the LocalCluster's settings), and whether this process started a fork
server for them (:func:`started`; :mod:`pipeline.cluster.prestart` starts it). Standard
library only: the fork server's module imports it before anything else."""

from __future__ import annotations

_started: list[bool] = [False]

# Dask settings for the local workers this package starts (the fork server's environment
# and :mod:`pipeline.cluster.kinds.local`). Measured on one worker, one 80 ms SGMA job of
# bench_sweep_overhead (2 cores, median of 25):
WORKER_SETTINGS: dict[str, object] = {
    # Dask sets MALLOC_TRIM_THRESHOLD_=65536 in its workers' environment. Setting it also
    # fixes glibc's mmap threshold at 128 KiB, so every larger numpy array is mapped and
    # unmapped afresh (page faults at every allocation): the job took 138 ms instead of 89.
    # Unset, the workers have glibc's own adaptive thresholds, as a job run from the command
    # line has. (Where the variable reaches a worker all the same, from the user's shell or
    # another nanny, a worker plugin resets the thresholds: pipeline.cluster.connect.UnpinMalloc.)
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    # the worker's profiler samples every thread's stack each 10 ms by default: 89 → 81 ms
    # at 100 ms, and the dashboard's profile still fills
    "distributed.worker.profile.interval": "100ms",
}


def started() -> bool:
    """Whether this process started a fork server for its local workers."""
    return _started[0]


def mark_started() -> None:
    """Record that this process started the fork server (:func:`pipeline.cluster.prestart.
    prestart`)."""
    _started[0] = True
