"""``cluster=local``: a LocalCluster in this process, ``n_workers`` worker processes on this
machine (their memory and cores are this machine's, their nannies run in this process)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pipeline.cluster.kinds.base import ClusterKind, timeout_text


@dataclass(frozen=True)
class LocalKind(ClusterKind):
    def options(self) -> dict[str, Any]:
        from algorithms.options import Option
        from pipeline.cluster.option_forms import (
            checked,
            common_options,
            dashboard_option,
            worker_memory,
        )

        return {
            **common_options(self.name, "60s", "how long each worker may take to start (a "
                                               "loaded machine starts them slowly)"),
            "n_workers": Option(None, "int", "worker processes (null = one per core)", lo=1,
                                none_ok=True, example=2),
            "threads_per_worker": Option(1, "int", "threads per worker process", lo=1),
            "memory_limit": Option("auto", "any", "memory limit per worker", parse=checked(
                self.name, "memory_limit", "auto or a size like 4GB (bytes or a string)",
                '"4GB"', worker_memory)),
            "dashboard_address": dashboard_option(self.name, "where the dashboard listens"),
        }

    @contextmanager
    def start(self, opts: Mapping, warm_tiles: bool, deadline: float) -> Iterator[tuple]:
        from pipeline.cluster.main_guard import check_main_guard
        from pipeline.cluster.option_forms import seconds
        from pipeline.cluster.starting import on_cluster

        check_main_guard()  # before any process starts: spawned workers import the script
        cluster = local_cluster(opts, warm_tiles, seconds(opts["start_timeout"]))
        with on_cluster(cluster, opts) as client:
            yield client, cluster

    def no_worker(self, opts: Mapping, cluster: Any) -> str:
        return (f"cluster local: no worker started within {timeout_text(opts)}; raise "
                "cluster.start_timeout or lower cluster.n_workers")

    def memory_hint(self, opts: Mapping) -> str:
        from dask.utils import format_bytes

        from pipeline.cluster.memory import memory_limit, worker_memory_limit

        machine = memory_limit()
        limit = worker_memory_limit(opts)
        n_workers = opts["n_workers"] or os.cpu_count() or 1
        return (f"each worker may use {format_bytes(limit) if limit else 'any amount'} "
                f"(cluster.memory_limit={opts['memory_limit']}, {n_workers} "
                f"worker{'s' if n_workers != 1 else ''} on "
                f"{format_bytes(machine)}); raise cluster.memory_limit, with fewer "
                f"cluster.n_workers so that together they fit in {format_bytes(machine)}")

    def worker_bytes(self, opts: Mapping) -> float | None:
        """The bytes at which a worker's nanny terminates it (``cluster.memory_limit`` × Dask's
        ``distributed.worker.memory.terminate``); None where the limit is off."""
        from pipeline.cluster.memory import distributed_setting, worker_memory_limit

        limit = worker_memory_limit(opts)
        terminate = distributed_setting("distributed.worker.memory.terminate")
        if not limit or not terminate:
            return None
        return float(limit) * float(terminate)


KIND = LocalKind("local", "worker processes on this machine (a Dask LocalCluster)",
                 on_this_machine=True)


def local_cluster(opts: Mapping, warm_tiles: bool, timeout: float):
    """A LocalCluster of ``cluster.n_workers`` worker processes, each given ``timeout``
    (``cluster.start_timeout``) to start. A start that fails (a nanny whose worker did not
    come up: a machine too loaded to start it in time, a worker that died as it started) is
    retried once; a second failure is one InputError line naming the load as a likely cause."""
    import dask
    from distributed import LocalCluster

    from algorithms.errors import InputError
    from pipeline.cluster.memory import worker_memory_limit
    from pipeline.cluster.starting import SCHEDULER_SETTINGS, brief, quiet
    from pipeline.cluster.worker_settings import WORKER_SETTINGS, started

    n_workers = opts["n_workers"] or os.cpu_count() or 1
    # A job holding the GIL for minutes (a long LAPACK call, e.g. the exact GP on kin40k)
    # misses the workers' heartbeats; Dask's default 5-minute worker-ttl then restarts a
    # healthy worker and kills the job. So the ttl is off here: a local worker that dies is
    # seen by its nanny, and one that is frozen (no heartbeat and no CPU time) is ended by
    # the sweep (pipeline.cluster.liveness).
    settings: dict[str, Any] = {**SCHEDULER_SETTINGS, "distributed.scheduler.worker-ttl": None,
                                **WORKER_SETTINGS}
    # each worker warms up the kernel tiles' compiled code at its start, on a thread
    settings["distributed.worker.preload"] = [
        *dask.config.get("distributed.worker.preload", default=[]),
        *(["pipeline.cluster.prestart"] if warm_tiles else [])]
    if started():  # workers forked from the command line's warm fork server
        settings["distributed.worker.multiprocessing-method"] = "forkserver"
    failures = []
    for _ in range(2):
        try:
            with quiet("distributed.deploy.spec"), dask.config.set(settings):
                # death_timeout: a nanny waits this long for its worker process to start
                # (else its start fails), and a worker this long for a lost scheduler
                return LocalCluster(n_workers=n_workers, threads_per_worker=opts[
                    "threads_per_worker"], processes=True, memory_limit=worker_memory_limit(opts),
                    dashboard_address=opts["dashboard_address"], death_timeout=timeout)
        except ValueError as err:  # a bad option: no retry helps
            raise InputError(f"cluster local could not start ({brief(err)}); check "
                             "cluster.n_workers, cluster.memory_limit and "
                             "cluster.dashboard_address") from None
        except (RuntimeError, OSError, TimeoutError) as err:
            failures.append(brief(err))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    raise InputError(f"cluster local could not start its {n_workers} worker"
                     f"{'s' if n_workers != 1 else ''}, twice ({failures[-1]}); a likely cause "
                     f"is a machine too loaded to start them within {timeout_text(opts)} "
                     f"(load average {load:.1f} on {os.cpu_count()} cores): raise "
                     "cluster.start_timeout or lower cluster.n_workers, or rerun when the "
                     "machine is less busy (the cause is in the sweep's dask.log)")
