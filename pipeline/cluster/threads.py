"""The threads a job's numerics use: ``threads=auto`` resolved against the cores of the machine
and the jobs running on it at once, and what the BLAS of this process uses now.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import psutil

from algorithms.kernel_threads import blas_controller, use_kernel_threads


def resolve_threads(threads: Any, jobs_at_once: int = 1) -> int | str | None:
    """``threads=auto`` for ``jobs_at_once`` jobs on this machine: several (a sweep's
    workers), the cores this process may use (its affinity) shared among them, as a count; one
    (a single job, or a sweep that runs one job at a time), ``auto``, left to the job to
    resolve when it starts (:func:`free_threads`). ``all`` alike, but for one job at a time
    every core, whatever else runs. Anything else as given."""
    if threads not in ("auto", "all"):
        return threads
    if jobs_at_once <= 1:
        return usable_cores() if threads == "all" else threads
    return max(1, usable_cores() // jobs_at_once)


def free_threads(threads: Any) -> int | None:
    """The threads a job starting now uses: ``auto`` is the cores of its affinity that no
    other runnable thread holds (:func:`runnable_others`; at least 1), so that a machine busy
    with other work (CI, a neighbour's job) gets one thread rather than two that wait on each
    other; ``all`` every core of its affinity; anything else as given."""
    if threads == "all":
        return usable_cores()
    if threads != "auto":
        return threads
    cores = usable_cores()
    others = runnable_others()
    return cores if others is None else max(1, min(cores, cores - others))


@contextlib.contextmanager
def numeric_threads(threads: Any):
    """Run the block with ``threads`` (:func:`free_threads`: ``auto`` resolved now) for the
    BLAS (threadpoolctl) and the kernel blocks' tiles, as a job's fit runs
    (:func:`pipeline.job.run.run`): a sweep's learning task, on a Dask worker whose nanny
    started it with one BLAS thread, learns on the job's cores too (None: as the process is)."""
    threads = free_threads(threads)
    limit = (blas_controller().limit(limits=threads, user_api="blas") if threads is not None
             else contextlib.nullcontext())
    with limit, use_kernel_threads(threads):
        yield threads


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; every CPU where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def runnable_others(samples: int = 7, interval: float = 0.003) -> int | None:
    """Threads of other processes runnable now: the kernel's count of runnable threads
    (``/proc/loadavg``'s fourth field) less the sweep's own (:func:`own_runnable`: this
    process's, e.g. the BLAS threads of the job before, which spin a while after their last
    call, and its parents', e.g. a local sweep's scheduler filing the job before: counted as
    others, they gave a sweep's next job one thread of two), the median of ``samples`` readings
    ``interval`` seconds apart (a count of this instant, unlike the load average's minute-long
    mean); None where the OS does not tell."""
    pids = [os.getpid(), *ancestors()]
    counts = []
    for k in range(samples):
        try:
            runnable = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return None
        counts.append(runnable - max(1, own_runnable(pids)))
        if k + 1 < samples:
            time.sleep(interval)
    return max(0, int(statistics.median(counts)))


def ancestors() -> list[int]:
    """The process ids of this process's parents up to init (none where psutil cannot say)."""
    try:
        return [p.pid for p in psutil.Process().parents() if p.pid > 1]
    except psutil.Error:
        return []


def own_runnable(pids: list[int] | None = None) -> int:
    """Threads in the running state of the processes ``pids`` (this one by default), from
    ``/proc/<pid>/task/*/stat``; 0 where the OS does not tell."""
    running = 0
    for pid in [os.getpid()] if pids is None else pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:  # the thread ended meanwhile
                continue
            running += stat[stat.rindex(")") + 2: stat.rindex(")") + 3] == "R"
    return running


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def blas_threads() -> int:
    """Threads the BLAS of this process may use now (threadpoolctl): the fewest of its BLAS
    libraries (numpy's GEMMs and scipy's factorisations are two)."""
    return min((int(info.get("num_threads", 1)) for info in blas_controller().info()
                if info.get("user_api") == "blas"), default=1)

