"""A sweep, start to end: the work behind the ``hydra/launcher=dask`` plugin.

The client composes every job's config (:mod:`~pipeline.sweep.compose`), names each job by
the hash of what it computes (:func:`pipeline.job.identity.config_hash`), skips jobs whose
result file is already there with status ok (resume), and submits the rest as Dask tasks
(:mod:`~pipeline.sweep.schedule`), after one ingest task per dataset. Each task runs Hydra's
task function in the job's output directory ``<sweep>/jobs/<hash>/``, with the ``.hydra/``
record Hydra's own ``run_job`` writes (:mod:`~pipeline.sweep.execute`).
Workers read the dataset from its zarr store path; only configs and paths travel through the
task graph. A job that raises is recorded as failed; a worker that dies is replaced by Dask and
its job rerun (results are written atomically under the job's hash, so a rerun never
duplicates one). Each task claims its job's directory (:mod:`pipeline.job.claims`) and looks
at the disk before fitting, so sweeps sharing a directory, and tasks Dask reruns, never fit a
finished job again. A directory holds one sweep: its points are claimed in ``manifest.json``
(under a lock, :mod:`~pipeline.sweep.manifest`) before the jobs run, and a sweep with other
points or settings is refused unless ``merge=true``, and every command that adds points or
runs jobs is recorded there (:mod:`~pipeline.sweep.invocations`). The sweep ends with
:func:`pipeline.results.consolidate.consolidate` into ``<sweep dir>/results.zarr``, and every
sweep point's JobReturn carries a record (status, job hash, error, results path) that the
caller summarises with :meth:`pipeline.sweep.outcome.SweepOutcome.from_returns`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from algorithms.errors import InputError
from pipeline.cluster.liveness import ClusterLost
from pipeline.outputs import check_run_directories
from pipeline.results.job_file import (
    job_path,
    job_status,
    write_job_failure,
)
from pipeline.sweep.clock import startup_seconds
from pipeline.sweep.directory import OutOfSpace
from pipeline.sweep.invocations import invocation_index, invocations
from pipeline.sweep.manifest import (
    checked_manifest,
    entries_kept,
    entry_set,
    keep_hydra_record,
    manifest_entries,
    restore_hydra_record,
    sweep_lock,
    write_bytes,
    write_manifest,
)
from pipeline.sweep.naming import announce
from pipeline.sweep.naming import record as record_last
from pipeline.sweep.plan import PlannedJob, along_new_dims, finished_jobs, plan_only, prepare


def check_inputs_held(records: dict[str, dict], sweep_dir: Path) -> None:
    """Raise InputError (one line) when a job of this run failed before fitting (its dataset
    or its hyperparameter learning failed) and the directory holds a finished sweep's
    ``results.zarr``: that store is kept as it was, not rewritten with the failures. The
    jobs that finished are on disk and are not fitted again on the rerun."""
    failed = [r["error"] for r in records.values() if r.get("before_fit")]
    results = sweep_dir / "results.zarr"
    if failed and results.exists():
        raise InputError(f"{len(failed)} job(s) of this run failed before fitting, on their "
                         f"input ({' '.join(str(failed[0]).split())}); {results} is kept as it "
                         "was; fix the input (e.g. rebuild a damaged dataset store: remove it "
                         "and it is ingested again) and resume with python -m pipeline resume=last")


def relearn(to_run: Sequence[PlannedJob], finished: Sequence[PlannedJob]) -> None:
    """``relearn=true``: set aside the cached learnings of the jobs about to run, so that they
    are learned again (a rerun of a unit whose learning was timed on a busy machine), except a
    learning a finished job of the sweep used: those jobs are not run again, and a learning
    changed under them would leave the sweep on two kernels. Says what it did."""
    from datetime import datetime, timezone

    from pipeline.job.hyper import learning_keys, set_aside

    def keys(jobs: Sequence[PlannedJob]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for job in jobs:
            try:
                found = learning_keys(job.spec)
            except InputError:
                continue  # a bad hyper block: the job itself reports it
            out.setdefault(str(job.spec.store_root), set()).update(found)
        return out

    used = keys(finished)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    moved, kept = [], 0
    for root, wanted in keys(to_run).items():
        kept += len(wanted & used.get(root, set()))
        moved += set_aside(root, wanted - used.get(root, set()), stamp)
    said = ([f"{len(moved)} cached learning(s) set aside into {moved[0].parent}, to be "
             "learned again"] if moved else ["no cached learning set aside"])
    if kept:
        said.append(f"{kept} kept, as finished jobs of this sweep used them")
    print("relearn=true: " + "; ".join(said), flush=True)


def launch(master: DictConfig, hydra_context: HydraContext, task_function: TaskFunction,
           job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
           retries: int) -> list[JobReturn]:
    """Run a batch of Hydra multirun jobs on Dask; see the module docstring."""
    t_start = time.perf_counter()
    startup = startup_seconds()  # process start → here (None when not the command line)
    check_run_directories(master, "sweep")  # whichever sweeper ran: under outputs/
    sweep_dir = Path(str(master.hydra.sweep.dir)).resolve()
    try:
        cluster_cfg, jobs, dims, too_large = prepare(master, hydra_context, job_overrides,
                                                      initial_job_idx, sweep_dir)
        if master.dry_run:
            plan_only(jobs, sweep_dir, t_start)
        before, made = _add_points(master, hydra_context, jobs, dims, sweep_dir)
    except BaseException:
        restore_hydra_record(sweep_dir)  # Hydra replaced it before the launcher ran
        raise
    unique: dict[str, PlannedJob] = {}
    for job in jobs:
        unique.setdefault(job.hash, job)
    cached = finished_jobs(sweep_dir, unique)
    refused = {h: f"TooLarge: {why}" for h, why in too_large.items() if h not in cached}
    to_run = [job for h, job in unique.items() if h not in cached and h not in refused]
    print(f"sweep {sweep_dir}: {len(jobs)} points, {len(unique)} distinct jobs, "
          f"{len(cached)} already finished, {len(to_run)} to run"
          + (f", {len(refused)} too large (recorded as failed)" if refused else ""), flush=True)
    for why in refused.values():
        print(f"  {why}", flush=True)
    if master.relearn:
        relearn(to_run, [unique[h] for h in cached])
    announce(master)  # how to resume an unnamed sweep
    timings = {} if startup is None else {"startup_seconds": startup}
    timings["compose_seconds"] = time.perf_counter() - t_start
    # Dask's distributed (~1 s of import) only once there is something to run: a dry run and
    # the plan before it do without
    from pipeline.sweep.schedule import SweepCluster, run_on_dask

    cluster = SweepCluster()
    try:  # the cluster closes while results are consolidated; waited for here
        try:
            records, n_workers = run_on_dask(to_run, cluster_cfg, sweep_dir, hydra_context,
                                             task_function, retries, timings, cluster)
        except (OutOfSpace, ClusterLost, KeyboardInterrupt):  # jobs ran: the manifest keeps
            record_last(sweep_dir, master)  # the points for a rerun, resume=last reruns it
            raise
        except InputError:  # the cluster did not start: no job ran, leave the directory as it was
            with sweep_lock(sweep_dir):
                write_bytes(sweep_dir / "manifest.json", before)
                restore_hydra_record(sweep_dir)
                for path in made:  # this command's record, or the first's kept copy
                    path.unlink(missing_ok=True)
            raise
        record_last(sweep_dir, master)  # for resume=last
        for h, why in refused.items():  # no result of theirs exists: record why there is none
            write_job_failure(unique[h].spec.config(), why, job_path(sweep_dir, h),
                              {"config_hash": h, "worker": ""})
            records[h] = {"status": "too_large", "error": why}
        timings["wall_seconds"] = time.perf_counter() - t_start

        check_inputs_held(records, sweep_dir)
        with sweep_lock(sweep_dir):  # points another sweep merged meanwhile are kept
            old = along_new_dims(checked_manifest(sweep_dir, jobs, dims), dims, master,
                                 hydra_context)
            kept = entries_kept(sweep_dir, old, jobs, dims, merge=True)
            write_manifest(sweep_dir, master, jobs, kept, dims, timings, n_workers, old,
                           ran=[h for h in records if h not in refused])
            t_consolidate = time.perf_counter()
            results_path, statuses = _consolidate(sweep_dir)
            if startup is not None:
                print(f"whole process so far: {startup_seconds():.1f} s (start-up {startup:.1f} s, "
                      f"launcher {timings['wall_seconds']:.1f} s, consolidation "
                      f"{time.perf_counter() - t_consolidate:.1f} s)", flush=True)
            if (sweep_dir / "report").exists():  # a report describes the results beside it
                from pipeline.report.build import render

                print(f"report: {render(results_path, results_path.parent / 'report')}",
                      flush=True)
        return _returns(master, jobs, cached, records, sweep_dir, results_path, statuses)
    finally:
        cluster.close()


def _consolidate(sweep_dir: Path) -> tuple[Path, dict[str, str | None]]:
    """The sweep's results.zarr, and each job's status as consolidation read and verified it
    (xarray is imported here, not for planning)."""
    from pipeline.results.consolidate import consolidate

    statuses: dict[str, str | None] = {}
    return consolidate(sweep_dir, statuses), statuses


def _add_points(master: DictConfig, hydra_context: HydraContext, jobs: list[PlannedJob],
                dims: list[str], sweep_dir: Path) -> tuple[bytes | None, list[Path]]:
    """Under the directory's lock, add this sweep's points to its manifest (the directory now
    holds (also) this sweep's points) and keep this command's Hydra record; returns (the
    manifest's bytes before, the records made), for an undo if the cluster does not start."""
    manifest = sweep_dir / "manifest.json"
    command = [str(a) for a in master.hydra.overrides.task]
    with sweep_lock(sweep_dir):
        before = manifest.read_bytes() if manifest.is_file() else None
        old = checked_manifest(sweep_dir, jobs, dims)
        if master.merge:  # a key the old sweep did not sweep: its points at their value
            old = along_new_dims(old, dims, master, hydra_context)
        kept = entries_kept(sweep_dir, old, jobs, dims, bool(master.merge))
        history = invocations(old)
        if (old is None or invocation_index(history, command) == len(history)
                or entry_set(old["entries"]) != entry_set(kept + manifest_entries(jobs))):
            write_manifest(sweep_dir, master, jobs, kept, dims, {}, 0, old)
        return before, keep_hydra_record(sweep_dir, old, command)


def _returns(master: DictConfig, jobs: list[PlannedJob], cached: set, records: dict,
             sweep_dir: Path, results_path: Path, statuses: dict) -> list[JobReturn]:
    """One JobReturn a point, COMPLETED even for a failed job: the failure is recorded, and
    Hydra's sweeper would raise on the first FAILED return before the others are reported.
    No per-point cfg (a DictConfig costs ~2 ms a point): the record names the job, whose
    config is in its result file and in the consolidated store. ``statuses``: each job's
    result file as consolidation read and verified it (a job it did not read is read here)."""
    returns = []
    for job in jobs:
        record = {"status": "cached", "error": ""} if job.hash in cached else records[job.hash]
        if job.hash in statuses:
            status = statuses[job.hash]
        else:
            found = job_status(job_path(sweep_dir, job.hash))
            status = None if found is None else found[0]
        if record["status"] == "ok" and status != "ok":
            record = {"status": "failed", "error": "no result file"}
        record = {**record, "config_hash": job.hash, "results": str(results_path)}
        returns.append(JobReturn(overrides=job.overrides, cfg=None,
                                 working_dir=str(job_path(sweep_dir, job.hash).parent),
                                 task_name=str(master.hydra.job.name),
                                 status=JobStatus.COMPLETED, _return_value=record))
    return returns

