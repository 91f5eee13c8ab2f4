"""What a job needs to know of the cluster it may run on, without importing Dask (a single job
runs in a process that never loads it: ~0.4 s of CPU saved at its start)."""

from __future__ import annotations

import sys


class ClusterFitError(RuntimeError):
    """A worker holding training rows of a fit was lost (or restarted) during it, or stopped
    answering because its memory is full."""


def worker_name() -> str:
    """The name of the Dask worker running this code, or "client" outside a worker (a process
    that has not imported ``distributed`` is not one)."""
    if "distributed" not in sys.modules:
        return "client"
    from distributed import get_worker

    try:
        return str(get_worker().name)
    except ValueError:  # not on a worker
        return "client"


# glibc's mallopt parameters (malloc.h) and the values its adaptive scheme reaches at most on
# a 64-bit system (DEFAULT_MMAP_THRESHOLD_MAX; the trim threshold is twice the mmap threshold)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD, _TRIM_THRESHOLD = 32 << 20, 64 << 20
_malloc_checked = False


def unpin_malloc_thresholds() -> bool:
    """Undo the fixed malloc thresholds a Dask worker starts with, once per process; returns
    whether it did.

    Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``. Setting any
    threshold turns off glibc's adaptive one, and the mmap threshold stays at 128 KiB: every
    larger numpy array is mapped and unmapped afresh, a page fault per page each time. A job
    of bench_sweep_overhead took 128 ms instead of 81. Workers this package starts have no
    such setting (:data:`pipeline.cluster.prestart.WORKER_SETTINGS`). On workers started
    elsewhere (``cluster=address``, a batch system's nodes), a worker plugin registered by
    :func:`pipeline.cluster.connect.connect` calls this at once: it sets the thresholds to
    those the adaptive scheme would reach (mmap 32 MiB, trim 64 MiB). A no-op without the
    variable or outside glibc."""
    global _malloc_checked
    if _malloc_checked:
        return False
    _malloc_checked = True
    import os

    if "MALLOC_TRIM_THRESHOLD_" not in os.environ or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
