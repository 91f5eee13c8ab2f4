"""A client on the Dask cluster a config describes (:func:`connect`), whichever its kind
(:mod:`pipeline.cluster.kinds`: an embedded LocalCluster, an existing scheduler, SLURM/PBS
batch jobs), with at least one worker.

Every kind declares its options once (the yaml files are tested against them), and
:func:`~pipeline.cluster.options.check` validates a cluster config against its kind's table
before anything starts. :func:`connect` never waits for ever: the first worker must arrive
within ``cluster.start_timeout``, and the kind stops at once what cannot start (a batch
cluster without its submit command or with a refused submission, an unreachable scheduler);
each of these is an :class:`~algorithms.errors.InputError` with one line naming the value and
the fix.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from distributed import Client
from distributed.diagnostics.plugin import WorkerPlugin

from algorithms.errors import InputError
from pipeline.cluster.here import unpin_malloc_thresholds
from pipeline.cluster.kinds import BATCH_KINDS, ClusterKind, kind_of
from pipeline.cluster.options import check

_POLL_SECONDS = 0.25


@contextmanager
def connect(cfg: Mapping, warm_tiles: bool = True) -> Iterator[Client]:
    """A Client on the cluster ``cfg`` describes, with at least one worker; what the kind
    started (a local or batch cluster) is closed after. ``warm_tiles``: local workers load the
    kernel tiles' compiled code at their start (:func:`pipeline.cluster.prestart.dask_setup`);
    a sweep whose jobs will not use it passes False (the load would take CPU from its first
    jobs). Raises :class:`InputError` (one line) for bad options, a kind that cannot start,
    or no worker within ``cluster.start_timeout``."""
    from pipeline.cluster.option_forms import seconds

    opts = check(cfg)
    kind = kind_of(opts)
    deadline = time.monotonic() + seconds(opts["start_timeout"])
    with kind.start(opts, warm_tiles, deadline) as (client, cluster):
        _wait_for_first_worker(client, kind, opts, deadline, cluster)
        register_plugin(client, UnpinMalloc())
        yield client


def _wait_for_first_worker(client: Client, kind: ClusterKind, opts: Mapping, deadline: float,
                           cluster) -> None:
    """Return when a worker has joined; raise the kind's InputError at ``deadline`` or as
    soon as it refused to start one (a failed batch submission)."""
    while True:
        remaining = deadline - time.monotonic()
        try:
            client.wait_for_workers(1, timeout=max(0.01, min(_POLL_SECONDS, remaining)))
            return
        except TimeoutError:
            pass
        refused = kind.refused(opts)
        if refused:
            raise InputError(refused)
        if time.monotonic() >= deadline:
            raise InputError(kind.no_worker(opts, cluster))


def job_script(cfg: Mapping) -> str:
    """The batch script a slurm/pbs cluster would submit (for ``cluster.dry_run=true``); needs
    no submit command, submits nothing."""
    opts = check(cfg)
    kind = kind_of(opts)
    if kind.batch is None:
        raise InputError(f"cluster {opts['kind']} has no job script; cluster.dry_run is for "
                         f"{' and '.join(f'cluster={kind}' for kind in BATCH_KINDS)}")
    return kind.job_script(opts)


def register_plugin(client: Client, plugin: WorkerPlugin) -> None:
    """Register a worker plugin on the cluster's workers, those there now and those that join
    later. A worker that dies while the plugin is sent to it (its connection closes: Dask's
    ``CommClosedError``, an OSError with no errno) makes the registration raise, although the
    scheduler keeps the plugin for every worker that joins: it is sent once more to the
    workers there then; a second failure is raised (the cluster is losing its workers)."""
    try:
        client.register_plugin(plugin)
    except OSError as err:
        if err.errno is not None:  # not a closed connection
            raise
        client.register_plugin(plugin)


class UnpinMalloc(WorkerPlugin):
    """Resets the malloc thresholds of every worker of the cluster, those there now and those
    that join later (:func:`pipeline.cluster.here.unpin_malloc_thresholds`: a worker started
    with Dask's ``MALLOC_TRIM_THRESHOLD_`` maps every array above 128 KiB afresh), before it
    runs any task of ours: ingest, learning, jobs, shards."""

    name = "sgp-bench-unpin-malloc"

    def setup(self, worker) -> None:
        unpin_malloc_thresholds()
