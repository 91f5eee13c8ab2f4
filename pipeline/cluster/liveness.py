"""Workers that stop answering, and a cluster that keeps losing them, never hold a sweep for
ever. The sweep's client calls :meth:`Liveness.check` every :data:`POLL_SECONDS` while jobs
run (:mod:`pipeline.sweep.schedule`):

- **A frozen local worker is ended within** :data:`FROZEN_SECONDS`. A worker of a local
  cluster that has sent the scheduler no heartbeat for that long and whose process used no CPU
  time meanwhile (stopped by SIGSTOP, deadlocked) is killed; its nanny starts a fresh one, and
  Dask gives its tasks to the other workers (a job whose result is already on disk is not
  fitted again). A worker busy in a long native call that holds the GIL misses heartbeats too
  but uses CPU time: it is left alone (Dask's worker-ttl, which cannot tell the two apart, is
  off on a local cluster: :mod:`pipeline.cluster.connect`). Workers on other machines are
  removed by their scheduler after :data:`~pipeline.cluster.starting.WORKER_TTL` without a
  heartbeat (set on the slurm and pbs clusters a sweep starts; an ``address`` cluster's
  scheduler keeps its own setting, Dask's default being the same 5 minutes).
- **A cluster without workers stops the sweep.** No worker for :attr:`Liveness.no_worker_seconds`
  (:data:`NO_WORKER_SECONDS`, or ``cluster.start_timeout`` if longer) while jobs wait — every
  restart failed: workers that die as they start, a nanny that cannot start one —
  or, on a local cluster, :attr:`Liveness.storm` worker deaths with no job finished in between,
  raises :class:`ClusterLost`: one line, the jobs finished so far kept. On a local cluster a
  worker process that is alive and using CPU time is still starting (importing, on a machine
  other work keeps busy): the bound counts from the last time one was seen doing so, up to
  :data:`STARTING_SECONDS` without a worker in all.
  A loaded machine restarts workers slowly, so the bound is stretched by its load
  (:func:`load_factor`: the 1-minute load average per CPU, the highest seen while no worker
  was there, between 1 and :data:`MAX_LOAD_FACTOR`). A worker that registered with the
  scheduler while none was seen (its ``add-worker`` event: one that registered and died
  between two looks) starts the clock again, and before the verdict the scheduler is asked
  once more for its workers and its registrations: on a machine at load 15 on 2 cores a
  sweep was once stopped for "no worker for 61 s" 2 s after a restarted worker registered.
  The line says what was seen: the wait, the bound and the load it was stretched by, when a
  worker was last seen and last registered.

:meth:`Liveness.end_worker` is also how the sweep ends a worker whose job ran past its
``job_timeout`` without the worker stopping it (:mod:`pipeline.sweep.deadlines`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping

import psutil

from algorithms.errors import InputError
from pipeline.cluster.deaths import WorkerDeaths
from pipeline.cluster.kinds import kind_of
from pipeline.cluster.option_forms import seconds
from pipeline.cluster.options import check
from pipeline.cluster.starting import ALLOWED_FAILURES

POLL_SECONDS = 2.0
FROZEN_SECONDS = 30.0
NO_WORKER_SECONDS = 60.0
STARTING_SECONDS = 600.0  # the most a local cluster waits for workers that are still starting
MAX_LOAD_FACTOR = 10.0  # the most the no-worker bound is stretched on a loaded machine
# worker deaths per worker of a local cluster, with no job finished in between, that stop a
# sweep: twice what it takes every worker's task to end as KilledWorker
STORM_DEATHS_PER_WORKER = 2 * (ALLOWED_FAILURES + 1)


def scheduler_workers(client) -> dict[str, Mapping]:
    """The scheduler's workers now (address → its identity), asked of the scheduler itself.
    ``Client.scheduler_info()`` fetches them into a cache that the client's own periodic
    update (``distributed.client.scheduler-info-interval``, every 2 s) overwrites with an
    identity holding no workers (it asks for ``n_workers=0``): a read that races that update
    sees an empty cluster. A scheduler that cannot be reached falls back to that cache."""
    workers = fresh_workers(client)
    return workers if workers is not None else dict(client.scheduler_info().get("workers", {}))


def fresh_workers(client) -> dict[str, Mapping] | None:
    """The scheduler's workers now, asked of the scheduler itself; None if it cannot be
    reached (where :func:`scheduler_workers` falls back to the client's cache, which may
    hold none: no ground for a verdict that the cluster has no worker)."""
    try:
        identity = client.sync(client.scheduler.identity, n_workers=-1)
    except OSError:
        return None
    return dict(identity.get("workers", {}))


def last_registration(client) -> float | None:
    """When the scheduler last registered a worker (its time of the latest ``add-worker``
    event of topic ``all``, seconds since the epoch), or None: none logged, or the scheduler
    cannot be reached. A worker that registered and died between two looks at the worker
    list is seen here only."""
    try:
        events = client.sync(client.scheduler.events, topic="all")
    except OSError:
        return None
    return max((float(at) for at, msg in events
                if isinstance(msg, Mapping) and msg.get("action") == "add-worker"), default=None)


def machine_load() -> tuple[float, int]:
    """(the 1-minute load average, the number of CPUs) of this machine; a load of 0 where the
    platform has no load average."""
    cpus = os.cpu_count() or 1
    try:
        return float(os.getloadavg()[0]), cpus
    except OSError:
        return 0.0, cpus


def load_factor(load: float, cpus: int) -> float:
    """How many times longer than on an idle machine a worker may take to start: the runnable
    processes per CPU (a worker gets about one CPU's share in that many), at least 1, at most
    :data:`MAX_LOAD_FACTOR`."""
    return min(MAX_LOAD_FACTOR, max(1.0, load / max(cpus, 1)))


class ClusterLost(InputError):
    """The cluster lost its workers for good: the sweep stops with one line; the jobs finished
    so far are kept, the rest run when it is rerun."""


class Liveness:
    """What the sweep's client watches of its cluster (see the module's docstring)."""

    def __init__(self, client, cluster_cfg: Mapping, deaths: WorkerDeaths | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 load: Callable[[], tuple[float, int]] = machine_load) -> None:
        """``clock``, ``wall`` and ``load`` are this machine's (a test passes its own)."""
        opts = check(cluster_cfg)
        self.clock, self.wall, self.load = clock, wall, load
        self.client = client
        self.deaths = deaths
        cluster = getattr(client, "cluster", None)
        # the nannies of a local cluster run in this process: their workers' pids are known
        here = kind_of(opts).on_this_machine
        self.nannies = getattr(cluster, "workers", None) if here else None
        self.no_worker_seconds = max(NO_WORKER_SECONDS, seconds(opts["start_timeout"]))
        n_workers = (opts.get("n_workers") or os.cpu_count() or 1) if here else 1
        self.storm = max(20, STORM_DEATHS_PER_WORKER * n_workers)
        self.ended: dict[str, str] = {}  # worker address → why the sweep ended it
        self._cpu: dict[int, tuple[float, float]] = {}  # pid → (CPU seconds, since when)
        self._no_worker_since: float | None = None
        self._starting_seen: float | None = None  # when a local worker was last seen starting
        self._died_at_progress = deaths.died if deaths is not None else 0
        self._started = clock()
        self._worker_seen: float | None = None  # when a look last saw a worker (clock)
        self._registered: float | None = None  # the last registration known (scheduler time)
        self._spell_wall = 0.0  # when the present spell without workers began (wall)
        self._spell_load = (1.0, 0.0, 1)  # its highest (load factor, load, CPUs)

    def progressed(self) -> None:
        """A task finished: the deaths counted towards a storm start again from here."""
        if self.deaths is not None:
            self._died_at_progress = self.deaths.died

    def check(self) -> None:
        """End frozen local workers; raise :class:`ClusterLost` if the cluster has had no
        worker for too long, or keeps losing them."""
        workers = scheduler_workers(self.client)
        now = self.clock()
        if workers:
            self._saw_worker(now)
        else:
            self._no_worker(now)
        if self.deaths is not None and self.deaths.died - self._died_at_progress >= self.storm:
            raise ClusterLost(f"the cluster's workers keep dying: {self._deaths_text()[2:]} in "
                              f"{now - self._started:.0f} s with no job finished meanwhile")
        if self.nannies is not None:
            self._end_frozen(workers)

    def _saw_worker(self, now: float) -> None:
        self._no_worker_since = self._starting_seen = None
        self._worker_seen = now

    def _no_worker(self, now: float) -> None:
        """A look that found no worker: the spell without workers starts or goes on, and past
        its bound (stretched by the load) ends the sweep, unless the scheduler, asked once
        more, has a worker or registered one during the spell (the clock starts again)."""
        if self._no_worker_since is None:
            self._no_worker_since = self._starting_seen = now
            self._spell_wall = self.wall()
            self._registered = last_registration(self.client)
            self._spell_load = (1.0, 0.0, 1)
        elif self._registered_during_spell():
            self._saw_worker(now)
            return
        if self._a_worker_is_starting(now):
            self._starting_seen = now
        load, cpus = self.load()
        self._spell_load = max(self._spell_load, (load_factor(load, cpus), load, cpus))
        waited, alone = now - self._no_worker_since, now - self._starting_seen
        bound = self.no_worker_seconds * self._spell_load[0]
        limit = max(STARTING_SECONDS, bound)
        if alone <= bound and waited <= limit:
            return
        workers = fresh_workers(self.client)  # the verdict's own look, not the last one's
        if workers or self._registered_during_spell():
            self._saw_worker(self.clock())
            return
        if workers is None and waited <= limit:  # the scheduler did not answer: no verdict
            return
        raise ClusterLost(self._lost_text(now, waited, alone, bound, limit))

    def _registered_during_spell(self) -> bool:
        """Whether the scheduler registered a worker since the spell without workers began
        (later than the last registration known then, or than its start if none was)."""
        latest = last_registration(self.client)
        before = self._registered if self._registered is not None else self._spell_wall
        if latest is None or latest <= before:
            return False
        self._registered = latest
        return True

    def _lost_text(self, now: float, waited: float, alone: float, bound: float,
                   limit: float) -> str:
        """The verdict's line: the wait, the bound and the load that stretched it, when a
        worker was last seen and last registered, the deaths."""
        _, load, cpus = self._spell_load
        seen = (f"a worker last seen {now - self._worker_seen:.3g} s before"
                if self._worker_seen is not None else
                f"no worker seen in the {now - self._started:.3g} s watched")
        registered = ("" if self._registered is None else
                      ", last registered at "
                      + time.strftime("%H:%M:%S", time.localtime(self._registered)))
        starting = (f", a worker process seen starting {alone:.3g} s before (at most "
                    f"{limit:.3g} s in all)" if alone < waited else "")
        return (f"the cluster has had no worker for {waited:.3g} s (the bound {bound:.3g} s at "
                f"load {load:.3g} on {cpus} CPUs; {seen}{registered}{starting})"
                f"{self._deaths_text()}: none could be restarted")

    def _a_worker_is_starting(self, now: float) -> bool:
        """Whether a local nanny's worker process used CPU time since the last look: alive
        and starting, not yet known to the scheduler."""
        pids = [getattr(nanny, "pid", None) for nanny in list((self.nannies or {}).values())]
        # a list, not a generator: every pid's CPU time is read, so each look updates them all
        return any([self._used_cpu(pid, now) for pid in pids if pid])

    def _used_cpu(self, pid: int, now: float) -> bool | None:
        """Whether process ``pid`` used CPU time since the last look (True when first seen),
        None if it is gone."""
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            return None
        cpu = times.user + times.system
        before = self._cpu.get(pid)
        if before is not None and before[0] == cpu:
            return False
        self._cpu[pid] = (cpu, now)
        return True

    def _deaths_text(self) -> str:
        if self.deaths is None or not self.deaths.died:
            return ""
        return f"; {self.deaths.summary()}"

    def _end_frozen(self, workers: Mapping[str, Mapping]) -> None:
        now, wall = self.clock(), self.wall()
        for nanny in list(self.nannies.values()):
            pid, address = getattr(nanny, "pid", None), getattr(nanny, "worker_address", None)
            info = workers.get(address) if address else None
            if not pid or info is None:
                continue
            if self._used_cpu(pid, now) is not False:  # gone, or working
                continue
            since = self._cpu[pid][1]
            silent = wall - float(info.get("last_seen", wall))
            if silent > FROZEN_SECONDS and now - since > FROZEN_SECONDS:
                self.end_worker(address, f"sent no heartbeat and used no CPU time for "
                                         f"{FROZEN_SECONDS:g} s (frozen: stopped, or deadlocked)")

    def end_worker(self, address: str, why: str) -> None:
        """End the worker at ``address`` (a local one is killed, a remote one restarted by its
        nanny) so that its tasks go to the other workers, with a ``note:`` saying ``why``."""
        if address in self.ended:
            return
        self.ended[address] = why
        pid = self.pid_of(address)
        print(f"note: worker {address}{f' (pid {pid})' if pid else ''} {why}; it was ended and "
              "its jobs go to the other workers", file=sys.stderr, flush=True)
        if pid is not None:
            if self.deaths is not None:
                self.deaths.frozen.add(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            return
        with contextlib.suppress(Exception):  # its nanny kills it; else the scheduler drops it
            self.client.restart_workers([address], timeout=30, raise_for_error=False)

    def pid_of(self, address: str) -> int | None:
        for nanny in list((self.nannies or {}).values()):
            if getattr(nanny, "worker_address", None) == address:
                return getattr(nanny, "pid", None)
        return None

    def why_ended(self, address: str | None) -> str | None:
        """Why the sweep ended the worker at ``address``, or None if it did not."""
        return self.ended.get(address) if address else None
