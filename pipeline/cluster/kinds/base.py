"""The protocol of a cluster kind (:class:`ClusterKind`): its options, its start, and what is
said when it has no worker or a worker runs out of memory. Light: importing it (and the kinds'
modules) imports neither Dask nor distributed, which only :meth:`ClusterKind.start` needs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BatchSystem:
    """How a batch system's jobs are submitted and watched."""

    submit: str  # the command dask-jobqueue submits a job with
    status: str  # the command a user checks a job with, given the job ids
    jobqueue_class: str  # the dask_jobqueue class
    walltime: re.Pattern  # the forms of a job's time limit the command accepts
    walltime_form: str  # ... as the message says them
    gpu_directive: str = ""  # the header line asking for {gpus} GPUs per batch job


@dataclass(frozen=True)
class ClusterKind:
    """One cluster kind: its name, whether the sweep starts its workers (and closes them after),
    whether they run on this machine (memory, cores and nannies known here), and its batch
    system (None: workers are started otherwise). A kind's module subclasses it with the
    methods below."""

    name: str
    doc: str
    starts_workers: bool = True
    on_this_machine: bool = False
    batch: BatchSystem | None = None

    def options(self) -> dict[str, Any]:
        """The kind's options: name → :class:`~algorithms.options.Option` (its yaml in
        ``conf/cluster/`` is tested against them)."""
        raise NotImplementedError

    def check(self, opts: Mapping) -> None:
        """What the option table cannot say alone (one option against another): raise the
        one-line InputError."""

    def start(self, opts: Mapping, warm_tiles: bool, deadline: float
              ) -> AbstractContextManager[tuple[Any, Any]]:
        """A context giving (a distributed Client, the cluster this process started or None);
        what it started is closed after. ``deadline`` (``time.monotonic``) bounds the wait for
        a scheduler; :func:`pipeline.cluster.connect.connect` then waits for a worker."""
        raise NotImplementedError

    def refused(self, opts: Mapping) -> str | None:
        """The one line for a worker start the cluster refused outright (a batch submission
        that failed), or None."""
        return None

    def no_worker(self, opts: Mapping, cluster: Any) -> str:
        """The one line for a cluster with no worker by ``cluster.start_timeout``."""
        raise NotImplementedError

    def memory_hint(self, opts: Mapping) -> str:
        """How much memory one worker may use and which option changes it (for a job whose
        worker was killed for memory)."""
        raise NotImplementedError

    def worker_bytes(self, opts: Mapping) -> float | None:
        """The memory one job may use on a worker, where it is known here (else None)."""
        return None

    def job_script(self, opts: Mapping) -> str:
        """The batch script the kind would submit (``cluster.dry_run=true``)."""
        raise NotImplementedError


def timeout_text(opts: Mapping) -> str:
    """``cluster.start_timeout=<value>``, as the messages name it."""
    return f"cluster.start_timeout={opts['start_timeout']}"
