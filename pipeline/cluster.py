"""Dask clusters for sweeps: an embedded LocalCluster, an existing scheduler, or SLURM/PBS.

``cluster.kind`` selects one (conf/cluster/*.yaml):

- ``local``: a LocalCluster in this process, ``n_workers`` single-threaded worker processes;
- ``address``: an existing scheduler, ``scheduler=tcp://host:port`` on the command line;
- ``slurm`` / ``pbs``: dask-jobqueue, ``n_jobs`` batch jobs; ``cluster.dry_run=true`` prints the
  job script and runs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from distributed import Client, LocalCluster

from algorithms.errors import InputError

JOBQUEUE_KEYS = ("cores", "memory", "processes", "walltime", "queue", "account",
                 "job_extra_directives", "local_directory", "log_directory", "interface")


def _jobqueue_cluster(cfg: Mapping):
    try:
        import dask_jobqueue
    except ImportError:  # pragma: no cover - dask-jobqueue is a declared dependency
        raise InputError("cluster.kind=" + cfg["kind"] + " needs dask-jobqueue; "
                         "pip install dask-jobqueue") from None
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[cfg["kind"]]
    kwargs = {k: cfg[k] for k in JOBQUEUE_KEYS if cfg.get(k) is not None}
    kwargs["job_extra_directives"] = list(kwargs.get("job_extra_directives", []))
    return cls(**kwargs)


def job_script(cfg: Mapping) -> str:
    """The batch script a slurm/pbs cluster would submit (for ``cluster.dry_run=true``)."""
    cluster = _jobqueue_cluster(cfg)
    try:
        return cluster.job_script()
    finally:
        cluster.close()


@contextmanager
def connect(cfg: Mapping) -> Iterator[Client]:
    """A Client on the cluster ``cfg`` describes; local and batch clusters are closed after."""
    kind = cfg.get("kind")
    if kind == "local":
        n_workers = cfg.get("n_workers") or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=cfg["threads_per_worker"],
                               processes=True, memory_limit=cfg["memory_limit"],
                               dashboard_address=cfg["dashboard_address"])
    elif kind == "address":
        address = cfg.get("address")
        if not address:
            raise InputError("cluster=address needs the scheduler's address; pass "
                             "scheduler=tcp://host:8786")
        cluster = None
        with Client(address, timeout=cfg.get("timeout", "30s")) as client:
            yield client
        return
    elif kind in ("slurm", "pbs"):
        cluster = _jobqueue_cluster(cfg)
        cluster.scale(jobs=cfg["n_jobs"])
    else:
        raise InputError(f"unknown cluster.kind {kind!r}; choose one of: local, address, "
                         "slurm, pbs")
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()


def worker_name() -> str:
    """The name of the Dask worker running this code, or "client" outside a worker."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except ValueError:  # not on a worker
        return "client"
