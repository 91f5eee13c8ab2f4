"""What starting any cluster kind shares: the settings the scheduler of every cluster a sweep
starts is given, Dask's start-up warnings kept quiet, a failure in one line, and a client on a
started cluster that closes the cluster after (:func:`on_cluster`)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import dask
from distributed import Client

# a task whose worker dies is given to another worker; when the workers running it have died
# ALLOWED_FAILURES + 1 times, Dask ends it as KilledWorker (distributed.scheduler.allowed-
# failures, set on every cluster a sweep starts; an address cluster's scheduler keeps its own)
ALLOWED_FAILURES = 3

# a worker of a batch cluster (slurm, pbs) that sends its scheduler no heartbeat for this long
# (frozen, its node partitioned) is removed and its tasks go to the other workers
# (distributed.scheduler.worker-ttl, set on the batch clusters a sweep starts; a local
# cluster's frozen workers are found sooner: pipeline.cluster.liveness)
WORKER_TTL = "5 minutes"

# what the scheduler of every cluster a sweep starts is given: how often a task's worker may
# die before the task ends as KilledWorker, and when a silent worker is removed (a local
# cluster turns the ttl off: pipeline.cluster.kinds.local)
SCHEDULER_SETTINGS: dict[str, Any] = {
    "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
    "distributed.scheduler.worker-ttl": WORKER_TTL,
}


class _DropStartWarnings(logging.Filter):
    """"Cluster closed without starting up": the cluster's failure is our error line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    """``logger_name``'s start-up warnings dropped, and Dask's 4-line UserWarning that the
    dashboard's port is busy (it takes another port: the link the sweep prints shows which)."""
    logger, flt = logging.getLogger(logger_name), _DropStartWarnings()
    logger.addFilter(flt)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Port \d+ is already in use",
                                    category=UserWarning)
            yield
    finally:
        logger.removeFilter(flt)


def brief(err: BaseException) -> str:
    """An exception in one short line, with the cause Dask wraps ("Cluster failed to start"
    around "Nanny failed to start" around what happened)."""
    texts = []
    while err is not None and len(texts) < 3:
        text = " ".join(str(err).split()) or type(err).__name__
        if text not in texts:
            texts.append(text)
        err = err.__cause__ or err.__context__
    return ": ".join(texts)[:240]


@contextmanager
def on_cluster(cluster, opts: Mapping) -> Iterator[Client]:
    """A client on a cluster this process started (not dask's default scheduler: the
    client's own dask work, consolidation, stays local while the cluster closes; tasks are
    submitted to it by name); the cluster is closed after, also when its start or the work
    fails (:func:`_close_after_failure`)."""
    try:
        with Client(cluster, set_as_default=False) as client, \
                _dashboard_link(opts["dashboard_address"]):
            yield client
    except BaseException:
        _close_after_failure(cluster)
        raise
    cluster.close()


def _close_after_failure(cluster) -> None:
    """Close a cluster whose start failed without hiding why it failed: a batch job whose
    submission was refused never leaves the "created" state, which SpecCluster.close asserts
    against, so such jobs are marked failed first, and a failure to close is not reported over
    the error that is already being raised."""
    from distributed.core import Status

    for job in list(getattr(cluster, "workers", {}).values()):
        if getattr(job, "status", None) == Status.created and not getattr(job, "job_id", 1):
            job.status = Status.failed
    with contextlib.suppress(Exception), quiet("distributed.deploy.spec"):
        cluster.close()


def _dashboard_link(dashboard_address: str | None):
    """Dask formats the dashboard link with the scheduler's host; a dashboard bound to one
    address (127.0.0.1 by default) is linked at that address instead."""
    if dashboard_address is None:  # no dashboard
        return nullcontext()
    host = dashboard_address.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]"):
        return nullcontext()
    return dask.config.set({"distributed.dashboard.link": f"http://{host}:{{port}}/status"})
