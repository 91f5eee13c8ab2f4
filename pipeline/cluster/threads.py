"""The threads a job's numerics use: ``threads=auto`` resolved against the cores of the machine
and the jobs running on it at once, and what the BLAS of this process uses now.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Any

from threadpoolctl import ThreadpoolController


def resolve_threads(threads: Any, jobs_at_once: int = 1) -> int | None:
    """``threads=auto`` as a count: this machine's cores shared among the ``jobs_at_once``
    running on it (a single job: every core, so its GEMMs use them all); else as given."""
    if threads != "auto":
        return threads
    return max(1, (os.cpu_count() or 1) // max(1, jobs_at_once))


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@functools.cache
def _blas() -> ThreadpoolController:
    """The BLAS libraries of this process, found once (a scan of the loaded libraries costs
    ~3 ms: a sweep's worker runs thousands of jobs)."""
    return ThreadpoolController()


def blas_threads() -> int:
    """Threads the BLAS of this process may use now (threadpoolctl)."""
    return max((int(info.get("num_threads", 1)) for info in _blas().info()
                if info.get("user_api") == "blas"), default=1)

