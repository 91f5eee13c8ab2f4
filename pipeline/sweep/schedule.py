"""The client's side of a sweep on Dask: the cluster, one ingest (and learning) task per
dataset, the jobs in batches sized to their measured time, progress, and the records.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from distributed import KilledWorker, as_completed
from hydra.types import HydraContext, TaskFunction

from algorithms.errors import InputError
from algorithms.kernels import FUSED_KERNELS, takes_numpy_exp
from pipeline.cluster.connect import connect, register_plugin
from pipeline.cluster.deaths import WorkerDeaths, watching_worker_deaths
from pipeline.cluster.kinds import kind_of
from pipeline.cluster.liveness import POLL_SECONDS, ClusterLost, Liveness, scheduler_workers
from pipeline.cluster.options import memory_hint
from pipeline.cluster.starting import ALLOWED_FAILURES
from pipeline.datasets.spec import train_shape
from pipeline.job.claims import FITS_FILE
from pipeline.job.hyper import cache_key, with_hyper
from pipeline.job.spec import JobSpec
from pipeline.results.job_file import (
    JOB_FILE,
    job_path,
    write_job_failure,
)
from pipeline.sweep.compose import PlannedJob
from pipeline.sweep.deadlines import CLOCK_SKEW_SECONDS, JobDeadlines
from pipeline.sweep.directory import OUT_OF_SPACE, RERUN, OutOfSpace
from pipeline.sweep.execute import execute_batch, ingest_task, learn_task
from pipeline.sweep.progress import Progress
from pipeline.sweep.quiet_workers import (
    LOG_FILE,
    DaskLogToFile,
    QuietCancellations,
    dask_log_to_file,
)
from pipeline.sweep.signals import check_interrupt, quiet_dask_logging, silent_on_interrupt
from pipeline.watch import signal_cause


class SweepCluster:
    """The sweep's Dask cluster: connected when the first job is submitted (bad input stops a
    sweep before any cluster starts), closed on a thread while the results are consolidated
    (:meth:`close` with ``wait=False``), so that its shutdown overlaps the client's own work."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.closer: threading.Thread | None = None
        self.sys_path = list(sys.path)

    def connect(self, cfg: Mapping, warm_tiles: bool = True, log: Path | None = None):
        """A client on the cluster ``cfg``; with ``log``, Dask's log records of this process
        and of the workers go to that file (:class:`DaskLogToFile`) until the cluster closes."""
        self.sys_path = list(sys.path)
        if log is not None:
            self.stack.enter_context(dask_log_to_file(log))
        client = self.stack.enter_context(connect(cfg, warm_tiles))
        register_plugin(client, QuietCancellations())
        if log is not None:
            # workers the sweep did not start outlive it: their logging is restored after
            register_plugin(client, DaskLogToFile(str(log),
                                                  restore=not kind_of(cfg).starts_workers))
        return client

    def close(self, wait: bool = True) -> None:
        """Close the cluster (on a thread unless ``wait``); waits for a close under way.

        A Dask scheduler or nanny in this process puts its scratch directory first on
        ``sys.path`` and takes it off when it closes (if it is still first). Taken off here,
        before the closing thread starts, so that the thread never changes ``sys.path`` while
        this one imports (an import walking the list as an entry is removed skips one:
        zarr's ``typing_extensions`` was then not found during consolidation)."""
        if self.closer is None:
            for entry in [p for p in sys.path if p not in self.sys_path]:
                sys.path.remove(entry)
            self.closer = threading.Thread(target=self._close, name="sweep-cluster-close",
                                           daemon=True)
            self.closer.start()
        if wait:
            self.closer.join()

    def _close(self) -> None:
        with contextlib.suppress(Exception), silent_on_interrupt():
            self.stack.close()


def uses_compiled_tiles(jobs: list[PlannedJob]) -> bool:
    """Whether any of ``jobs`` will load the kernel tiles' compiled code: a kernel with
    compiled tiles whose fit does not take numpy's exp (:func:`algorithms.kernels.
    takes_numpy_exp`; a training set of unknown size counts as large)."""
    for job in jobs:
        kernel = job.spec.kernel.name
        if kernel not in FUSED_KERNELS:
            continue
        shape = train_shape(dict(job.spec.dataset))
        if not takes_numpy_exp(kernel, shape and shape[0]):
            return True
    return False


def run_on_dask(to_run: list[PlannedJob], cluster_cfg: Mapping, sweep_dir: Path,
                hydra_context: HydraContext, task_function: TaskFunction, retries: int,
                timings: dict, cluster: SweepCluster) -> tuple[dict[str, dict], int]:
    """Submit one ingest task per dataset (and learning task per hyperparameter setting),
    then the jobs in batches (:class:`Batches`); show progress; collect. While tasks run the
    client watches the cluster (frozen local workers ended, a cluster without workers stopped:
    :mod:`pipeline.cluster.liveness`) and the jobs' ``job_timeout`` (:mod:`pipeline.sweep.
    deadlines`); a task whose workers died ``ALLOWED_FAILURES + 1`` times ends as KilledWorker,
    recorded with its cause (:func:`killed_worker_hint`)."""
    records: dict[str, dict] = {}
    if not to_run:
        return records, 0
    quiet_dask_logging()
    t0 = time.perf_counter()
    with silent_on_interrupt(), watching_worker_deaths() as deaths:
        client = cluster.connect(cluster_cfg, uses_compiled_tiles(to_run),
                                 sweep_dir / LOG_FILE)
        timings["cluster_start_seconds"] = time.perf_counter() - t0  # the wait for it
        n_workers = len(scheduler_workers(client))
        if cluster_cfg.get("dashboard_address", "") is not None:  # null: none was started
            print(f"dask dashboard: {client.dashboard_link}", flush=True)
        t1 = time.perf_counter()
        # as tasks, not scattered data: a task's result is recomputed if the worker holding
        # it dies, where scattered data would be lost with it (and every job with it)
        task = client.submit(_same, task_function, pure=False)
        context = client.submit(_same, hydra_context, pure=False)
        since = time.time()
        needs = _prerequisites(client, to_run, retries)

        def submit(jobs: list[PlannedJob]):
            return client.submit(execute_batch, task, context, jobs, sweep_dir,
                                 needs[jobs[0].hash], since, retries=retries, pure=False,
                                 key=f"job-{jobs[0].hash}-x{len(jobs)}-{time.time_ns()}")

        try:
            out_of_space = _dispatch(client, to_run, needs, submit, records,
                                     _Context(cluster_cfg, sweep_dir, since, deaths))
        except ClusterLost as err:
            done = sum(r["status"] == "ok" for r in records.values())
            raise ClusterLost(f"{err}; the sweep stopped after {done} of {len(to_run)} jobs, "
                              "whose results are kept (a likely cause: a machine too loaded to "
                              "start workers, or workers that crash as they start; see "
                              f"{sweep_dir / LOG_FILE}): {RERUN}") from None
        # release every future (and the errors that reference them) while the client is open
        needs.clear()
        task = context = None
        gc.collect()
        timings["jobs_seconds"] = time.perf_counter() - t1
    if out_of_space is not None:
        done = sum(r["status"] == "ok" for r in records.values())
        raise OutOfSpace(f"the disk filled up ({out_of_space.split(';')[0]}); the sweep stopped "
                         f"after {done} of {len(to_run)} jobs, whose results are kept: free "
                         f"space and {RERUN}")
    cluster.close(wait=False)  # while the results are consolidated
    return records, n_workers


def _prerequisites(client, to_run: list[PlannedJob], retries: int) -> dict[str, object]:
    """Per job, the task it waits for: its dataset's ingest, or its hyperparameters' learning
    (after the ingest). Every ingest and learning is submitted first and at a higher
    priority: a worker's queue holding one behind a long job would keep the jobs needing it
    waiting."""
    stores: dict[str, object] = {}
    for job in to_run:
        if _dataset_key(job) not in stores:
            stores[_dataset_key(job)] = client.submit(
                ingest_task, dict(job.spec.dataset), job.spec.store_root, retries=retries,
                pure=False, priority=1)
    learnings: dict[str, object] = {}

    def learning(job: JobSpec, key: str, store: object) -> object:
        """The learning task of ``job``; one that starts from another learning's optimum
        too (``hyper.shared_start``) runs after it, so that one is learned once."""
        if key not in learnings:
            shared = _shared_key(job)
            before = store if shared is None else learning(
                with_hyper(job, job.hyper.shared()), shared, store)
            learnings[key] = client.submit(learn_task, job, before, retries=retries,
                                           pure=False, priority=1)
        return learnings[key]

    needs: dict[str, object] = {}
    for job in to_run:
        key = _hyper_key(job)
        store = stores[_dataset_key(job)]
        needs[job.hash] = learning(job.spec, key, store) if key is not None else store
    return needs


@dataclass(frozen=True)
class _Context:
    """What collecting a job's outcome needs to know of the sweep."""

    cluster_cfg: Mapping
    sweep_dir: Path
    since: float
    deaths: WorkerDeaths


def _dispatch(client, to_run: list[PlannedJob], needs: dict, submit, records: dict,
              sweep: _Context) -> str | None:
    """Keep about two batches a worker in flight (every job at once for an adaptive cluster)
    until every job has a record in ``records``; returns why the sweep stopped for a full
    disk, or None. A batch whose task failed outside its jobs (its workers died) fails the
    jobs whose fit started and did not finish, with the cause, and reruns the others each
    alone (finished ones are found on disk); a lone job whose workers died while it waited
    behind another runs again once (:func:`_rerun_alone`)."""
    batches = Batches(to_run, needs)
    progress = Progress(len(to_run))
    running = as_completed(loop=client.loop)
    in_flight: dict[object, list[PlannedJob]] = {}
    adaptive = _adaptive_workers(sweep.cluster_cfg)
    out_of_space: str | None = None  # a job's result could not be written: stop
    liveness = Liveness(client, sweep.cluster_cfg, sweep.deaths)
    watch = _Watch(liveness, JobDeadlines(sweep.sweep_dir, sweep.since, liveness), in_flight)
    resubmitted: set[str] = set()  # jobs run alone again after their task failed

    def collect(future, job: PlannedJob) -> dict:
        return _collect(future, needs[job.hash], job, sweep.sweep_dir, sweep.cluster_cfg,
                        sweep.deaths, liveness)

    try:
        while True:
            check_interrupt()  # a Ctrl-C lost in a finalizer (a Future's __del__) stops here
            workers = max(1, len(scheduler_workers(client)))
            # an adaptive cluster grows with the work the scheduler sees queued: it is shown
            # every job at once, in batches sized for its largest size
            window = 2 * workers if adaptive is None else math.inf
            while len(in_flight) < window and batches and out_of_space is None:
                jobs = batches.take(workers if adaptive is None else adaptive)
                future = submit(jobs)
                in_flight[future] = jobs
                running.add(future)
            if not in_flight:
                break
            future = watch.next_finished(running)
            jobs = in_flight.pop(future)
            liveness.progressed()
            if future.status == "finished":
                for job, record in zip(jobs, future.result(), strict=True):
                    if record["status"] == OUT_OF_SPACE:  # no record: it runs on a rerun
                        out_of_space = out_of_space or record["error"]
                        continue
                    records[job.hash] = record
                    batches.measured(record["seconds"])
            elif _rerun_alone(future, jobs, needs, sweep, resubmitted):
                for job in jobs:
                    if _died_fitting(future, job, sweep.sweep_dir, sweep.since):
                        records[job.hash] = collect(future, job)
                        progress.advance(1)
                        continue
                    resubmitted.add(job.hash)
                    alone = submit([job])
                    in_flight[alone] = [job]
                    running.add(alone)
                continue
            else:
                for job in jobs:
                    records[job.hash] = collect(future, job)
            progress.advance(len(jobs))
    finally:
        progress.close()
        in_flight.clear()  # the futures go while the client is open
    return out_of_space


def _adaptive_workers(cluster_cfg: Mapping) -> int | None:
    """The most workers an adaptive batch cluster may start (cluster.adapt.maximum batch jobs
    × cluster.processes), or None for a cluster of fixed size."""
    adapt = cluster_cfg.get("adapt") or {}
    if kind_of(cluster_cfg).batch is None or adapt.get("maximum") is None:
        return None
    return int(adapt["maximum"]) * int(cluster_cfg.get("processes") or 1)


class Batches:
    """The jobs still to submit, taken in batches sized to the measured job time.

    Guided self-scheduling: a batch holds about :data:`TASK_SECONDS` of jobs (by the median
    time of the jobs finished so far: a worker's first job, which loads the code paths and the
    data, is several times slower; one job until a time is known) and never more than a
    1/(2·workers) share of those left, so batches shrink towards the end and the workers
    finish together. A batch holds jobs that wait for the same ingest or learning task."""

    def __init__(self, jobs: list[PlannedJob], needs: Mapping[str, object]) -> None:
        self.left = list(reversed(jobs))  # popped from the end: submission in sweep order
        self.needs = needs
        self.seconds: list[float] = []

    def __bool__(self) -> bool:
        return bool(self.left)

    def measured(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def size(self, workers: int) -> int:
        if not self.seconds:
            return 1
        by_time = TASK_SECONDS / max(float(np.median(self.seconds[-200:])), 1e-9)
        return max(1, min(int(by_time), math.ceil(len(self.left) / (2 * workers))))

    def take(self, workers: int) -> list[PlannedJob]:
        size = self.size(workers)
        batch = [self.left.pop()]
        need = self.needs[batch[0].hash]
        while self.left and len(batch) < size and self.needs[self.left[-1].hash] is need:
            batch.append(self.left.pop())
        return batch


TASK_SECONDS = 0.5  # a batch's target duration: Dask's ~ms per task is then a fraction of 1 %


def _shared_key(job: JobSpec) -> str | None:
    """The key of the learning whose optimum ``job``'s learning also starts from
    (``hyper.shared_start``), or None."""
    try:
        options = job.hyper.options
        return (cache_key(with_hyper(job, job.hyper.shared()))
                if options and options["shared_start"] else None)
    except InputError:
        return None  # a bad hyper block: the job itself reports it


def _hyper_key(job: PlannedJob) -> str | None:
    """Jobs learning the same hyperparameters share one learning task (None: none learned)."""
    try:
        return cache_key(job.spec) if job.spec.hyper.learns else None
    except InputError:
        return None  # a bad hyper block: the job itself reports it


def _dataset_key(job: PlannedJob) -> str:
    """Jobs with equal dataset specs share one ingest task."""
    return json.dumps(dict(job.spec.dataset), sort_keys=True, default=str)


def _same(value):
    return value


class _Watch:
    """The client's watch over its cluster and its running jobs while it waits for a task
    to finish (:class:`~pipeline.cluster.liveness.Liveness`,
    :class:`~pipeline.sweep.deadlines.JobDeadlines`), every
    :data:`~pipeline.cluster.liveness.POLL_SECONDS`, whether tasks finish meanwhile or not."""

    def __init__(self, liveness: Liveness, deadlines: JobDeadlines,
                 in_flight: Mapping[object, list[PlannedJob]]) -> None:
        self.liveness, self.deadlines, self.in_flight = liveness, deadlines, in_flight
        self.last = time.monotonic()

    def next_finished(self, running: as_completed):
        """The next task of ``running`` to finish, watching until there is one; raises
        :class:`~pipeline.cluster.liveness.ClusterLost`."""
        while True:
            if time.monotonic() - self.last >= POLL_SECONDS:
                self.last = time.monotonic()
                self.liveness.check()
                self.deadlines.check(list(self.in_flight.values()))
            if running.has_ready():
                return next(running)
            with running.thread_condition:  # as as_completed's own __next__ waits
                running.thread_condition.wait(timeout=0.1)


def _rerun_alone(future, jobs: list[PlannedJob], needs: Mapping, sweep: _Context,
                 resubmitted: set[str]) -> bool:
    """Whether a task that failed outside its jobs has its jobs run again, each alone: a batch
    of several (the job its workers died fitting is failed, the others run again), or a lone
    job ended as KilledWorker without dying in its own fit — queued on a worker that died
    running another job, as Dask counts every task a dead worker held — once; never a task
    whose ingest or learning failed."""
    if needs[jobs[0].hash].status == "error":
        return False
    if len(jobs) > 1:
        return True
    job, = jobs
    return (job.hash not in resubmitted and isinstance(_exception(future), KilledWorker)
            and not _died_fitting(future, job, sweep.sweep_dir, sweep.since))


def _died_fitting(future, job: PlannedJob, sweep_dir: Path, since: float) -> bool:
    """Whether ``job``, of a batch whose workers kept dying (KilledWorker), had its fit
    started in this sweep and has no result since: the job the workers died running."""
    if not isinstance(_exception(future), KilledWorker):
        return False
    job_dir = job_path(sweep_dir, job.hash).parent
    try:
        fit = json.loads((job_dir / FITS_FILE).read_text().splitlines()[-1])["time"]
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return False
    if fit < since - CLOCK_SKEW_SECONDS:
        return False
    try:
        return (job_dir / JOB_FILE).stat().st_mtime < fit - 1.0
    except OSError:
        return True


def _exception(future) -> BaseException | None:
    try:
        return future.exception()
    except Exception as err:  # cancelled
        return err


def _collect(future, need, job: PlannedJob, sweep_dir: Path, cluster_cfg: Mapping,
             deaths: WorkerDeaths | None = None, liveness: Liveness | None = None) -> dict:
    """The job's record; an error raised outside the job (in the ingest or hyperparameter
    learning it needed, ``need``; lost workers) is recorded."""
    if future.status == "finished":
        return future.result()
    before_fit = need.status == "error"
    if before_fit:  # the job never ran: say why its data or learning failed
        future = need
    try:
        exc = future.exception()
        error = f"{type(exc).__name__}: {exc}"
    except Exception as err:  # cancelled
        exc, error = err, f"{type(err).__name__}: {err}"
    if isinstance(exc, KilledWorker):
        ended = liveness.why_ended(_last_address(exc)) if liveness is not None else None
        error = (f"KilledWorker: the workers running this job died {ALLOWED_FAILURES + 1} "
                 f"times; the last one {ended}, and was ended by the sweep" if ended else
                 killed_worker_hint(cluster_cfg, deaths))
    write_job_failure(job.spec.config(), error, job_path(sweep_dir, job.hash),
                      {"config_hash": job.hash, "worker": ""})
    return {"status": "failed", "error": error, **({"before_fit": True} if before_fit else {})}


def _last_address(exc: KilledWorker) -> str | None:
    try:
        return exc.last_worker.address
    except Exception:  # an older Dask's KilledWorker carries no worker
        return None


def killed_worker_hint(cluster_cfg: Mapping, deaths: WorkerDeaths | None = None) -> str:
    """What to say when the workers running a job kept dying: killed by a signal that is not
    the memory monitor's (a crash in native code, the OOM killer: :func:`signal_cause`), or
    (the usual case, and what is said when nothing was seen) for exceeding their memory."""
    sig = None if deaths is None or deaths.memory_terminations else deaths.signal()
    if sig is None:
        return ("KilledWorker: the workers running this job died (usually killed for "
                f"exceeding their memory): {memory_hint(cluster_cfg)}; or use a sparse "
                "algorithm")
    memory = f"; {memory_hint(cluster_cfg)}" if sig == signal.SIGKILL else ""
    return f"KilledWorker: the workers running this job were {signal_cause(sig)}{memory}"

