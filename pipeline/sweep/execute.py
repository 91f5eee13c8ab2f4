"""What runs on a Dask worker: a batch of jobs, each claimed, looked up on disk and run with
its ``.hydra/`` record (:mod:`pipeline.sweep.job_files`, or through Hydra's ``run_job``, as
Hydra's own launchers run a job, when its Hydra settings need more), its failure recorded; the
ingest and hyperparameter-learning tasks the jobs wait for.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

import dask
from hydra.core.utils import JobStatus, run_job
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from algorithms.errors import InputError
from pipeline.cluster.here import worker_name
from pipeline.cluster.hydra_job import one_hydra_job
from pipeline.cluster.threads import numeric_threads
from pipeline.config.keys import planned_keys
from pipeline.datasets import ingest
from pipeline.job.claims import claim_job, record_fit
from pipeline.job.hyper import learned
from pipeline.job.spec import JobSpec
from pipeline.job.task import run_task
from pipeline.results.job_file import (
    JOB_FILE,
    WriteError,
    job_status,
    load_job_result,
    write_job_failure,
)
from pipeline.sweep.compose import PlannedJob
from pipeline.sweep.directory import OUT_OF_SPACE, out_of_space
from pipeline.sweep.job_files import HydraRecords, writes_only_files
from pipeline.task_functions import is_job_task


def execute(task_function: TaskFunction, hydra_context: HydraContext, job: PlannedJob,
            sweep_dir: Path, since: float = 0.0, hydra_records: HydraRecords | None = None) -> dict:
    """Run one job where this is called (a Dask worker), through Hydra's ``run_job`` on the
    job's full config or with the same files written beside it, and record its failure if it
    fails. Never raises for an error of the job itself.

    The job first claims its directory (:func:`pipeline.job.claims.claim_job`: another sweep on
    the same directory fitting it makes this wait), then looks at the disk: a result written
    with status ok (or a failure recorded since this sweep started at ``since``) is returned
    as it is, so a task Dask reruns after a worker died, or a job another sweep just fitted,
    is never fitted again.

    A job for which ``run_job`` would only write the job's ``.hydra/`` files around the task
    function (:func:`pipeline.sweep.job_files.writes_only_files`) has them written by
    ``hydra_records`` and its resolved config run by :func:`pipeline.job.task.run_task` (when the
    task function is one that runs it: :func:`pipeline.task_functions.runs_jobs`), without
    ``run_job``'s config copies."""
    out_dir = sweep_dir / "jobs" / job.hash
    try:
        here = job.spec.identity()
    except InputError as err:  # its data cannot be had here (a damaged source, no store root)
        return {"status": "failed", "config_hash": job.hash, "error": str(err)}
    if here != job.hash:  # the job would be filed under a name the client never looks up
        return {"status": "failed", "config_hash": job.hash,
                "error": f"the worker names this job {here}, the client {job.hash}: they run "
                         "different code or data (restart workers started before a change; "
                         "give them the client's Python, package and files)"}
    with claim_job(out_dir):
        done = _finished(out_dir / JOB_FILE, job.hash, since)
        if done is not None:
            return done
        record_fit(out_dir, worker_name())
        start = time.perf_counter()
        with dask.config.set(scheduler="synchronous"):
            # the job's own dask arrays (zarr reads) compute in this task, not as cluster tasks
            if hydra_records is not None and is_job_task(task_function) and writes_only_files(
                    hydra_context, job):
                # what run_job would do for this job, without its config copies (job_files)
                try:
                    hydra_records.write(job, sweep_dir)
                    return run_task(job.spec, out_dir, False)
                except Exception as err:
                    return _record_failure(job, out_dir, err, start)
            with one_hydra_job():  # Hydra's job context is process-global
                ret = run_job(hydra_context=hydra_context, task_function=task_function,
                              config=_hydra_job_config(job, sweep_dir),
                              job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
                              configure_logging=False)
        if ret.status == JobStatus.COMPLETED:
            return ret.return_value
        return _record_failure(job, out_dir, ret._return_value, start)


def execute_batch(task_function: TaskFunction, hydra_context: HydraContext, jobs: list[PlannedJob],
                  sweep_dir: Path, need: object, since: float) -> list[dict]:
    """One Dask task: ``jobs`` one after another on this worker (:func:`execute`), each
    record with the seconds it took here. ``need`` (the result of the ingest or learning task
    the jobs need) makes the task wait for it."""
    records = []
    hydra_records = HydraRecords()
    for job in jobs:
        start = time.perf_counter()
        try:
            record = execute(task_function, hydra_context, job, sweep_dir, since, hydra_records)
        except (OSError, WriteError) as err:  # the job's bookkeeping (claim, fits.log, .hydra/)
            if not out_of_space(err):
                raise
            record = _out_of_space(job, f"cannot write in {sweep_dir}: "
                                        f"{getattr(err, 'strerror', None) or err}")
        records.append({**record, "seconds": time.perf_counter() - start})
    return records


def _hydra_job_config(job: PlannedJob, sweep_dir: Path) -> DictConfig:
    cfg = job.composed.hydra_config()
    record = job.spec.resolved  # Hydra's record of the job holds what the sweep settled
    with open_dict(cfg):
        cfg.algorithm = record["algorithm"]  # resolved, without the dropped options
        cfg.store_root = job.spec.store_root
        for key in planned_keys():  # as the sweep resolved them (threads, blocks)
            if key in record:
                cfg[key] = record[key]
        cfg.hydra.sweep.dir = str(sweep_dir)
        cfg.hydra.sweep.subdir = f"jobs/{job.hash}"
        cfg.hydra.job.num = job.num
        cfg.hydra.job.id = f"{cfg.hydra.job.name}_{job.num}"
    return cfg


def _record_failure(job: PlannedJob, out_dir: Path, err: BaseException, start: float) -> dict:
    """Record the job's failure in its result file; a full disk is no failure of the job
    (nothing is recorded: the job runs again when the sweep is rerun) and returns the record
    status ``out_of_space``, on which the sweep stops (:mod:`pipeline.sweep.schedule`)."""
    if out_of_space(err):
        return _out_of_space(job, str(err))
    error = f"{type(err).__name__}: {err}"
    try:
        write_job_failure(job.spec.config(), error, out_dir / JOB_FILE,
                          {"config_hash": job.hash, "worker": worker_name(), "pid": os.getpid(),
                           "job_seconds": time.perf_counter() - start,
                           "traceback": "".join(traceback.format_exception(err))})
    except (OSError, WriteError) as failed:
        if not out_of_space(failed):
            raise
        return _out_of_space(job, str(failed))
    return {"status": "failed", "error": error, "config_hash": job.hash}


def _out_of_space(job: PlannedJob, error: str) -> dict:
    """The record of a job whose files could not be written for a full disk: not a failure of
    the job (nothing is recorded; it runs when the sweep is rerun)."""
    return {"status": OUT_OF_SPACE, "error": error, "config_hash": job.hash}


def _finished(path: Path, h: str, since: float) -> dict | None:
    status = job_status(path)
    if status == ("ok", h):
        return {"status": "cached", "error": "", "config_hash": h}
    if status == ("failed", h) and path.stat().st_mtime >= since:
        error = str(load_job_result(path).attrs.get("error", ""))
        return {"status": "failed", "error": error, "config_hash": h}
    return None


def ingest_task(spec: Mapping, store_root: str) -> Path:
    """A sweep's ingest task: :func:`pipeline.datasets.ingest` with its dask arrays computed in
    this task (on a worker dask's default is the cluster: every chunk read would be a round
    trip through the scheduler, 0.5 s for a small store's checksums)."""
    with dask.config.set(scheduler="synchronous"):
        return ingest(spec, store_root)


def learn_task(job: JobSpec, store: str) -> str:
    """A sweep's hyperparameter-learning task: learn (or find cached) ``job``'s learning and
    return the store, on the threads the job's fit would use (``threads``: every core of a
    worker that runs one job at a time)."""
    with dask.config.set(scheduler="synchronous"), numeric_threads(job.threads):
        learned(job, store)
    return store

