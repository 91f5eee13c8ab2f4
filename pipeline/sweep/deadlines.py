"""``job_timeout`` as the sweep's client measures it, for a worker that cannot stop its job.

A worker stops its own job at ``job_timeout`` (:mod:`pipeline.job.deadline`), and ends its
process when the job is still inside a native call :data:`~pipeline.job.deadline.GRACE_SECONDS`
later. A worker that is frozen (SIGSTOP, a deadlock) or whose job holds the GIL in a native
call does neither: its timer cannot run. So the client measures each running job too, from
when it first sees the job's fit start (the line :func:`pipeline.job.claims.record_fit`
appends to ``fits.log``, looked at every :data:`~pipeline.cluster.liveness.POLL_SECONDS`):
at ``job_timeout`` + ``GRACE_SECONDS`` + :data:`SLACK_SECONDS` it records the job as timed
out (one line) and ends the worker (:meth:`pipeline.cluster.liveness.Liveness.end_worker`);
Dask gives the worker's task to another worker, which finds the job's failure on disk and
goes on with the other jobs of its batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from pipeline.cluster.liveness import Liveness, scheduler_workers
from pipeline.job.claims import FITS_FILE
from pipeline.job.deadline import GRACE_SECONDS, timeout_message
from pipeline.results.job_file import JOB_FILE, WriteError, write_job_failure
from pipeline.sweep.compose import PlannedJob

SLACK_SECONDS = 20.0  # beyond the worker's own limit: a loaded machine runs its timer late
CLOCK_SKEW_SECONDS = 5.0  # a fit line this much older than the sweep's start is this sweep's


def client_limit(timeout: float) -> float:
    """The seconds after which the client ends a job with ``job_timeout=timeout``."""
    return timeout + GRACE_SECONDS + SLACK_SECONDS


class JobDeadlines:
    """The running jobs' deadlines, checked by the sweep's client (module docstring)."""

    def __init__(self, sweep_dir: Path, since: float, liveness: Liveness) -> None:
        self.sweep_dir = sweep_dir
        self.since = since
        self.liveness = liveness
        self.seen: dict[tuple[str, float], float] = {}  # (job, its fit's time) → first seen
        self.expired: set[str] = set()

    def check(self, batches: Iterable[list[PlannedJob]]) -> None:
        """Look at the running job of each batch in flight; end the one past its limit."""
        for jobs in batches:
            job, fit = self._running(jobs)
            if job is None or job.hash in self.expired:
                continue
            timeout = job.spec.job_timeout
            if timeout is None:
                continue
            first = self.seen.setdefault((job.hash, fit["time"]), time.monotonic())
            if time.monotonic() - first > client_limit(float(timeout)):
                self._expire(job, fit, float(timeout))

    def _running(self, jobs: list[PlannedJob]) -> tuple[PlannedJob | None, dict]:
        """The job of ``jobs`` (run one after another by one task) whose fit has started in
        this sweep and has no result since, with its ``fits.log`` line; (None, {}) if none."""
        for job in jobs:
            job_dir = self.sweep_dir / "jobs" / job.hash
            fit = _last_fit(job_dir / FITS_FILE)
            started = fit is not None and fit["time"] >= self.since - CLOCK_SKEW_SECONDS
            result = _mtime(job_dir / JOB_FILE)
            if result is not None and (not started or result >= fit["time"] - 1.0):
                continue  # done (or found done)
            return (job, fit) if started else (None, {})
        return None, {}

    def _expire(self, job: PlannedJob, fit: dict, timeout: float) -> None:
        address = self._address(str(fit.get("worker", "")))
        pid = self.liveness.pid_of(address) if address is not None else None
        if address is None or address in self.liveness.ended or (
                pid is not None and pid != fit.get("pid")):
            return  # that worker is gone (or going): its task, and the job, go elsewhere
        self.expired.add(job.hash)
        limit = client_limit(timeout)
        error = (f"JobTimedOut: {timeout_message(timeout)} (its worker did not stop it: the "
                 f"sweep ended the worker {limit:g} s after the job started)")
        with contextlib.suppress(OSError, WriteError):  # then the job runs again elsewhere
            write_job_failure(job.spec.config(), error,
                              self.sweep_dir / "jobs" / job.hash / JOB_FILE,
                              {"config_hash": job.hash, "worker": str(fit.get("worker", "")),
                               "pid": int(fit.get("pid", -1))})
        self.liveness.end_worker(address, f"ran job {job.hash[:12]} past job_timeout="
                                          f"{timeout:g} s without stopping it ({limit:g} s)")

    def _address(self, name: str) -> str | None:
        workers = scheduler_workers(self.liveness.client)
        return next((a for a, w in workers.items() if str(w.get("name")) == name), None)


def _last_fit(path: Path) -> dict | None:
    """The last line of a job's ``fits.log`` (time, host, pid, worker), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            line = f.read().splitlines()[-1]
        fit = json.loads(line)
        return fit if isinstance(fit, dict) and isinstance(fit.get("time"), (int, float)) \
            else None
    except (OSError, IndexError, ValueError):
        return None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
