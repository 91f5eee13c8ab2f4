"""Multirun sweeps on Dask: the work behind the ``hydra/launcher=dask`` plugin.

The client composes every job's config (Hydra's own sweep expansion), names each job by the
hash of what it computes (:func:`pipeline.job.config_hash`), skips jobs whose result file is
already there with status ok (resume), and submits the rest as Dask tasks, one task per job,
after one ingest task per dataset. Each task runs Hydra's task function through Hydra's own
``run_job`` (the job's output directory is ``<sweep>/jobs/<hash>/``), as Hydra's own launchers
do: the launcher runs whatever task function the Hydra app gives it. Workers read the dataset
from its zarr store path; only configs and paths travel through the task graph. A job that
raises is recorded as failed; a worker that dies is replaced by Dask and its job rerun (results
are written atomically under the job's hash, so a rerun never duplicates one). Each task claims
its job's directory (:mod:`pipeline.claims`) and looks at the disk before fitting, so sweeps
sharing a directory, and tasks Dask reruns, never fit a finished job again. A directory holds one
sweep: its points are claimed in ``manifest.json`` (under a lock) before the jobs run, and a
sweep with other points or settings is refused unless ``merge=true``. The sweep ends with
:func:`pipeline.results.consolidate` into ``<sweep dir>/results.zarr``, and every sweep point's
JobReturn carries a record (status, job hash, error, results path) that the caller summarises
with :meth:`SweepOutcome.from_returns`.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import logging
import math
import os
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dask
from distributed import KilledWorker, WorkerPlugin, as_completed
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.utils import JobReturn, JobStatus, run_job
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from algorithms.errors import InputError, TooLarge
from algorithms.registry import get
from pipeline.claims import claim, claim_job, record_fit
from pipeline.clock import startup_seconds
from pipeline.cluster import check, connect, job_script, memory_hint, worker_name
from pipeline.datasets import ingest
from pipeline.hyper import cache_key, hyper_options, learned
from pipeline.job import (
    check_config,
    config_hash,
    drop_inapplicable_options,
    job_config,
    setting_hash,
)
from pipeline.results import (
    FIXED_DIMS,
    JOB_FILE,
    consolidate,
    job_path,
    job_status,
    load_job_result,
    write_job_failure,
)

CONFIG_GROUPS = ("algorithm", "dataset", "kernel", "hyper", "cluster", "experiment")
# Hydra's job context (HydraConfig) is process-global: a worker process runs one job at a time
_HYDRA_JOB = threading.Lock()


@dataclass
class SweepOutcome:
    """What a sweep did, from the JobReturns it gave back (one per sweep point)."""

    results_path: Path
    n_points: int
    n_jobs: int
    n_cached: int
    n_run: int
    failed: list[tuple[str, str]] = field(default_factory=list)  # (overrides, error)
    too_large: list[tuple[str, str]] = field(default_factory=list)  # refused, not failed

    @classmethod
    def from_returns(cls, returns: Sequence[JobReturn]) -> SweepOutcome:
        records = [ret.return_value for ret in returns]
        jobs = {r["config_hash"]: r["status"] for r in records}

        def points(keep) -> list[tuple[str, str]]:
            return [(" ".join(o.removeprefix("++") for o in ret.overrides), r["error"])
                    for ret, r in zip(returns, records, strict=True) if keep(r["status"])]

        return cls(Path(records[0]["results"]), len(records), len(jobs),
                   sum(s == "cached" for s in jobs.values()),
                   sum(s not in ("cached", "too_large") for s in jobs.values()),
                   points(lambda s: s not in ("ok", "cached", "too_large")),
                   points(lambda s: s == "too_large"))

    def text(self) -> str:
        lines = [f"{self.n_points} sweep points, {self.n_jobs} distinct jobs: "
                 f"{self.n_cached} already finished, {self.n_run} run, "
                 f"{len(self.failed)} failed"
                 + (f", {len(self.too_large)} too large" if self.too_large else "")]
        lines += [f"failed: {overrides}: {error}" for overrides, error in self.failed]
        lines += [f"too large (not run): {overrides}: {error}"
                  for overrides, error in self.too_large]
        lines.append(f"results: {self.results_path}")
        return "\n".join(lines)


@dataclass
class _Job:
    overrides: list[str]
    cfg: DictConfig   # the full config Hydra's run_job receives (hydra node included)
    config: dict      # the resolved job config
    hash: str
    coords: dict
    setting: str      # hash of the job's settings (its identity without data and code)


def _parse_override(text: str) -> tuple[str, str]:
    key, _, value = text.partition("=")
    return key.lstrip("+~"), value


def swept_keys(job_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Override keys that take more than one value across the sweep, in command-line order."""
    values: dict[str, set[str]] = {}
    for overrides in job_overrides:
        for text in overrides:
            key, value = _parse_override(text)
            values.setdefault(key, set()).add(value)
    return [k for k, v in values.items() if len(v) > 1]


def _coordinate_value(config: Mapping, key: str):
    if key in ("algorithm", "dataset"):
        return config[key]["name"]
    if key in CONFIG_GROUPS:
        node = config.get(key)
        return node.get("name", str(node)) if isinstance(node, Mapping) else str(node)
    value = OmegaConf.select(OmegaConf.create(config), key)
    return value if isinstance(value, (int, float, str)) else json.dumps(value, default=str)


def _maybe_leaf(override: Override) -> bool:
    """``a.b=value`` or ``seed=value``: a plain change, not a group choice, add or delete."""
    key = override.key_or_group
    return (override.type == OverrideType.CHANGE and override.package is None
            and "/" not in key and key not in CONFIG_GROUPS)


def _is_leaf(cfg: DictConfig, key: str) -> bool:
    node = OmegaConf.select(cfg, key, throw_on_missing=False, default=_ABSENT)
    return node is not _ABSENT and not OmegaConf.is_config(node)


_ABSENT = object()


def compose_jobs(master: DictConfig, config_loader,
                 job_overrides: Sequence[Sequence[str]]) -> list[DictConfig]:
    """Each job's config, as Hydra's ``load_sweep_config`` composes it.

    Composition takes ~80 ms a job, so jobs that differ only in leaf values (seed=3,
    kernel.width=5) share one composition of their other overrides (group choices, +/~ keys),
    and the leaf values are set on a copy. A job whose leaf key is not an existing leaf of that
    composition is composed by Hydra in full.
    """
    parser = OverridesParser.create()
    bases: dict[tuple[str, ...], DictConfig] = {}
    out = []
    for overrides in job_overrides:
        parsed = parser.parse_overrides(list(overrides))
        leaves = [o for o in parsed if _maybe_leaf(o)]
        structural = tuple(o.input_line for o in parsed if not _maybe_leaf(o))
        if structural not in bases:
            bases[structural] = config_loader.load_sweep_config(master, list(structural))
        base = bases[structural]
        if not all(_is_leaf(base, o.key_or_group) for o in leaves):
            out.append(config_loader.load_sweep_config(master, list(overrides)))
            continue
        cfg = copy.deepcopy(base)
        with open_dict(cfg):
            for o in leaves:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
            cfg.hydra.overrides.task = list(overrides)
        out.append(cfg)
    return out


def execute(task_function: TaskFunction, hydra_context: HydraContext, cfg: DictConfig,
            store: str | None = None, since: float = 0.0) -> dict:
    """Run one job where this is called (a Dask worker) through Hydra's ``run_job``, and
    record its failure if it fails. ``store`` is the result of the dataset's ingest task:
    taking it makes the job wait for it. Never raises for an error of the job itself.

    The job first claims its directory (:func:`pipeline.claims.claim_job`: another sweep on
    the same directory fitting it makes this wait), then looks at the disk: a result written
    with status ok (or a failure recorded since this sweep started at ``since``) is returned
    as it is, so a task Dask reruns after a worker died, or a job another sweep just fitted,
    is never fitted again."""
    out_dir = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
    h = out_dir.name
    here = config_hash(job_config(cfg))
    if here != h:  # the job would be filed under a name the client never looks up
        return {"status": "failed", "config_hash": h,
                "error": f"the worker names this job {here}, the client {h}: they run different "
                         "code or data (restart workers started before a change; give them the "
                         "client's Python, package and files)"}
    with claim_job(out_dir):
        done = _finished(out_dir / JOB_FILE, h, since)
        if done is not None:
            return done
        record_fit(out_dir, worker_name())
        return _execute(task_function, hydra_context, cfg, h)


def _finished(path: Path, h: str, since: float) -> dict | None:
    status = job_status(path)
    if status == ("ok", h):
        return {"status": "cached", "error": "", "config_hash": h}
    if status == ("failed", h) and path.stat().st_mtime >= since:
        error = str(load_job_result(path).attrs.get("error", ""))
        return {"status": "failed", "error": error, "config_hash": h}
    return None


def _execute(task_function: TaskFunction, hydra_context: HydraContext, cfg: DictConfig,
             h: str) -> dict:
    start = time.perf_counter()
    with _HYDRA_JOB, dask.config.set(scheduler="synchronous"):
        # the job's own dask arrays (zarr reads) compute in this task, not as new cluster tasks
        ret = run_job(hydra_context=hydra_context, task_function=task_function, config=cfg,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
                      configure_logging=False)
    if ret.status == JobStatus.COMPLETED:
        return ret.return_value
    config = job_config(cfg)
    err = ret._return_value
    error = f"{type(err).__name__}: {err}"
    write_job_failure(config, error, Path(cfg.hydra.runtime.output_dir) / JOB_FILE,
                      {"config_hash": h, "worker": worker_name(), "pid": os.getpid(),
                       "job_seconds": time.perf_counter() - start,
                       "traceback": "".join(traceback.format_exception(err))})
    return {"status": "failed", "error": error, "config_hash": h}


@contextlib.contextmanager
def _silent_on_interrupt():
    """On Ctrl-C the cluster is torn down mid-conversation; what Dask and asyncio log about
    the broken connections is noise beside the one line the CLI prints."""
    try:
        yield
    except KeyboardInterrupt:
        for name in ("distributed", "tornado", "asyncio"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        raise


class _QuietCancellations(WorkerPlugin):
    """On the workers: the state machine's warning for each task cancelled by Ctrl-C ("Async
    instruction ... ended with CancelledError", one per running task) would follow the CLI's
    one error line on the terminal the workers share; only its errors are kept."""

    name = "sgp-quiet-cancellations"

    def setup(self, worker) -> None:
        logging.getLogger("distributed.worker.state_machine").setLevel(logging.ERROR)


def _quiet_dask_logging() -> None:
    # Hydra configures the root logger at INFO: keep Dask's connection chatter out of the console
    for name in ("distributed", "dask", "tornado"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("bokeh").setLevel(logging.ERROR)  # the dashboard's host-wildcard notice


def _dry_run(cluster_cfg: Mapping) -> None:
    print(job_script(cluster_cfg))
    print("dry run: nothing submitted")
    raise SystemExit(0)


def launch(master: DictConfig, hydra_context: HydraContext, task_function: TaskFunction,
           job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
           retries: int) -> list[JobReturn]:
    """Run a batch of Hydra multirun jobs on Dask; see the module docstring."""
    t_start = time.perf_counter()
    startup = startup_seconds()  # process start → here (None when not the command line)
    sweep_dir = Path(str(master.hydra.sweep.dir)).resolve()
    try:
        cluster_cfg, jobs, dims, too_large = _prepare(master, hydra_context, job_overrides,
                                                      initial_job_idx, sweep_dir)
        manifest = sweep_dir / "manifest.json"
        with _sweep_lock(sweep_dir):  # the directory now holds (also) this sweep's points
            before = manifest.read_bytes() if manifest.exists() else None
            old = _read_manifest(sweep_dir)
            kept = _entries_kept(sweep_dir, old, jobs, dims, bool(master.get("merge", False)))
            if old is None or _entry_set(old["entries"]) != _entry_set(kept + _entries(jobs)):
                _write_manifest(sweep_dir, master, jobs, kept, dims, job_overrides, {}, 0)
    except BaseException:
        _restore_hydra_record(sweep_dir)  # Hydra replaced it before the launcher ran
        raise
    unique: dict[str, _Job] = {}
    for job in jobs:
        unique.setdefault(job.hash, job)
    cached = {h for h in unique if job_status(job_path(sweep_dir, h)) == ("ok", h)}
    refused = {h: f"TooLarge: {why}" for h, why in too_large.items() if h not in cached}
    to_run = [job for h, job in unique.items() if h not in cached and h not in refused]
    print(f"sweep {sweep_dir}: {len(jobs)} points, {len(unique)} distinct jobs, "
          f"{len(cached)} already finished, {len(to_run)} to run"
          + (f", {len(refused)} too large (recorded as failed)" if refused else ""), flush=True)
    for why in refused.values():
        print(f"  {why}", flush=True)
    timings = {} if startup is None else {"startup_seconds": startup}
    timings["compose_seconds"] = time.perf_counter() - t_start
    try:
        records, n_workers = _run_on_dask(to_run, cluster_cfg, sweep_dir, hydra_context,
                                          task_function, retries, timings)
    except InputError:  # the cluster did not start: no job ran, leave the directory as it was
        with _sweep_lock(sweep_dir):
            _write_bytes(manifest, before)
            _restore_hydra_record(sweep_dir)
        raise
    for h, why in refused.items():  # no result of theirs exists: record why there is none
        write_job_failure(unique[h].config, why, job_path(sweep_dir, h),
                          {"config_hash": h, "worker": ""})
        records[h] = {"status": "too_large", "error": why}
    timings["wall_seconds"] = time.perf_counter() - t_start

    with _sweep_lock(sweep_dir):  # points another sweep merged meanwhile are kept
        kept = _entries_kept(sweep_dir, _read_manifest(sweep_dir), jobs, dims, merge=True)
        _write_manifest(sweep_dir, master, jobs, kept, dims, job_overrides, timings, n_workers)
        t_consolidate = time.perf_counter()
        results_path = consolidate(sweep_dir)
        if startup is not None:
            print(f"whole process so far: {startup_seconds():.1f} s (start-up {startup:.1f} s, "
                  f"launcher {timings['wall_seconds']:.1f} s, consolidation "
                  f"{time.perf_counter() - t_consolidate:.1f} s)", flush=True)
        if (sweep_dir / "report").exists():  # a report describes the results beside it
            from pipeline.report import render

            print(f"report: {render(results_path)}", flush=True)
    returns = []
    for job in jobs:
        record = {"status": "cached", "error": ""} if job.hash in cached else records[job.hash]
        status = job_status(job_path(sweep_dir, job.hash))
        if record["status"] == "ok" and (status is None or status[0] != "ok"):
            record = {"status": "failed", "error": "no result file"}
        record = {**record, "config_hash": job.hash, "results": str(results_path)}
        # COMPLETED even for a failed job: the failure is recorded, and Hydra's sweeper would
        # raise on the first FAILED return before the others are reported
        returns.append(JobReturn(overrides=job.overrides, cfg=job.cfg,
                                 working_dir=str(job_path(sweep_dir, job.hash).parent),
                                 task_name=str(master.hydra.job.name),
                                 status=JobStatus.COMPLETED, _return_value=record))
    return returns


def _prepare(master: DictConfig, hydra_context: HydraContext,
             job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
             sweep_dir: Path) -> tuple[dict, list[_Job], list[str], dict[str, str]]:
    """Check the cluster options and every job's config, and name the jobs: (cluster config,
    jobs, the swept dims beside the fixed ones, the jobs too large to fit with the reason).
    Raises InputError before anything runs; a job too large for its ``max_n`` or the memory
    (e.g. the exact GP at the largest n of a scaling sweep) is only refused when every job
    of the sweep is."""
    cluster_cfg = job_config(master)["cluster"]
    check(cluster_cfg)  # bad cluster options stop the sweep even when every job is cached
    if cluster_cfg.get("kind") in ("slurm", "pbs") and cluster_cfg.get("dry_run"):
        _dry_run(cluster_cfg)

    extra_dims = [k for k in swept_keys(job_overrides) if k not in FIXED_DIMS]
    # a rerun of part of a sweep is expressed in that sweep's dims (a dim it sweeps, fixed now)
    dims = extra_dims + [d for d in _old_dims(sweep_dir) if d not in extra_dims]
    jobs: list[_Job] = []
    sweep_configs = compose_jobs(master, hydra_context.config_loader, job_overrides)
    ignored: dict[str, set[str]] = {}
    checked: set[str] = set()
    too_large: dict[str, str] = {}
    # the memory a fit may have is known here only when the workers run on this machine
    here = None if cluster_cfg.get("kind") == "local" else math.inf
    for idx, (overrides, cfg) in enumerate(zip(job_overrides, sweep_configs, strict=True)):
        config = job_config(cfg)
        coords = {d: _coordinate_value(config, d) for d in (*FIXED_DIMS, *dims)}
        dropped = drop_inapplicable_options(config)
        ignored.setdefault(config["algorithm"]["name"], set()).update(dropped)
        config["store_root"] = str(Path(config["store_root"]).resolve())
        h = config_hash(config)
        if h not in checked:  # bad input stops the sweep before any cluster starts
            try:
                check_config(config, available=here)
            except TooLarge as err:
                too_large[h] = str(err)
            checked.add(h)
        with open_dict(cfg):
            cfg.algorithm = config["algorithm"]  # resolved, without the dropped options
            cfg.store_root = config["store_root"]
            cfg.hydra.sweep.dir = str(sweep_dir)
            cfg.hydra.sweep.subdir = f"jobs/{h}"
            cfg.hydra.job.num = initial_job_idx + idx
            cfg.hydra.job.id = f"{cfg.hydra.job.name}_{initial_job_idx + idx}"
        jobs.append(_Job(list(overrides), cfg, config, h, coords, setting_hash(config)))
    _check_options_taken(ignored)
    for name, keys in sorted(ignored.items()):
        if keys:
            print(f"note: {name} takes no option {', '.join(sorted(keys))}: ignored for its "
                  "jobs, which are repeated along those dims", flush=True)
    _check_distinct_coordinates(jobs)
    if too_large and len(too_large) == len(checked):
        raise TooLarge(next(iter(too_large.values())))
    return cluster_cfg, jobs, dims, too_large


def _run_on_dask(to_run: list[_Job], cluster_cfg: Mapping, sweep_dir: Path,
                 hydra_context: HydraContext, task_function: TaskFunction, retries: int,
                 timings: dict) -> tuple[dict[str, dict], int]:
    """Submit one ingest task per dataset and one task per job; show progress; collect."""
    records: dict[str, dict] = {}
    if not to_run:
        return records, 0
    _quiet_dask_logging()
    t0 = time.perf_counter()
    with connect(cluster_cfg) as client, _silent_on_interrupt():
        timings["cluster_start_seconds"] = time.perf_counter() - t0
        n_workers = len(client.scheduler_info().get("workers", {}))
        print(f"dask dashboard: {client.dashboard_link}", flush=True)
        client.register_plugin(_QuietCancellations())
        t1 = time.perf_counter()
        # as tasks, not scattered data: a task's result is recomputed if the worker holding
        # it dies, where scattered data would be lost with it (and every job with it)
        task = client.submit(_same, task_function, pure=False)
        context = client.submit(_same, hydra_context, pure=False)
        since = time.time()
        stores: dict[str, object] = {}
        needs: dict[str, object] = {}  # per job: what it waits for (ingest, or learning)
        futures = {}
        # every ingest (and hyperparameter learning) first and at a higher priority: a
        # worker's queue holding one behind a long job would keep the jobs needing it waiting
        for job in to_run:
            if _dataset_key(job) not in stores:
                stores[_dataset_key(job)] = client.submit(
                    ingest, job.config["dataset"], job.config["store_root"], retries=retries,
                    pure=False, priority=1)
        learnings: dict[str, object] = {}
        for job in to_run:
            store = stores[_dataset_key(job)]
            key = _hyper_key(job)
            if key is not None and key not in learnings:
                learnings[key] = client.submit(_learn, job.config, store, retries=retries,
                                               pure=False, priority=1)
            needs[job.hash] = learnings[key] if key is not None else store
        for job in to_run:
            futures[job.hash] = client.submit(
                execute, task, context, job.cfg, needs[job.hash], since,
                key=f"job-{job.hash}-{time.time_ns()}", retries=retries, pure=False)
        _show_progress(list(futures.values()))
        for job in to_run:
            records[job.hash] = _collect(futures[job.hash], needs[job.hash], job, sweep_dir,
                                         cluster_cfg)
        # release every future (and the errors that reference them) while the client is open
        futures.clear()
        stores.clear()
        learnings.clear()
        needs.clear()
        del task, context
        gc.collect()
        timings["jobs_seconds"] = time.perf_counter() - t1
    return records, n_workers


def _hyper_key(job: _Job) -> str | None:
    """Jobs learning the same hyperparameters share one learning task (None: none learned)."""
    try:
        return cache_key(job.config) if hyper_options(job.config) is not None else None
    except InputError:
        return None  # a bad hyper block: the job itself reports it


def _learn(config: Mapping, store: str) -> str:
    """A sweep's hyperparameter-learning task: learn (or find cached) and return the store."""
    learned(config, store)
    return store


def _dataset_key(job: _Job) -> str:
    """Jobs with equal dataset specs share one ingest task."""
    return json.dumps(job.config["dataset"], sort_keys=True, default=str)


def _show_progress(futures: list, width: int = 40) -> None:
    """A text bar over the jobs, advanced as each finishes (or fails) on the client's side;
    returns when every future is done."""
    start, n = time.perf_counter(), len(futures)
    for done, _ in enumerate(as_completed(futures), start=1):
        filled = width * done // n
        print(f"\r[{'#' * filled}{' ' * (width - filled)}] | {100 * done // n:3d}% Completed | "
              f"{time.perf_counter() - start:.1f}s", end="", flush=True)
    print(flush=True)


def _same(value):
    return value


def _collect(future, need, job: _Job, sweep_dir: Path, cluster_cfg: Mapping) -> dict:
    """The job's record; an error raised outside the job (in the ingest or hyperparameter
    learning it needed, ``need``; lost workers) is recorded."""
    if future.status == "finished":
        return future.result()
    if need.status == "error":  # the job never ran: say why its data or learning failed
        future = need
    try:
        exc = future.exception()
        error = f"{type(exc).__name__}: {exc}"
    except Exception as err:  # cancelled
        exc, error = err, f"{type(err).__name__}: {err}"
    if isinstance(exc, KilledWorker):
        error = killed_worker_hint(cluster_cfg)
    write_job_failure(job.config, error, job_path(sweep_dir, job.hash),
                      {"config_hash": job.hash, "worker": ""})
    return {"status": "failed", "error": error}


def killed_worker_hint(cluster_cfg: Mapping) -> str:
    """What to say when the workers running a job kept dying (most often: out of memory)."""
    return ("KilledWorker: the workers running this job died (usually killed for exceeding "
            f"their memory): {memory_hint(cluster_cfg)}; or use a sparse algorithm")


def _check_options_taken(ignored: Mapping[str, set[str]]) -> None:
    """An ``algorithm.<option>`` that no algorithm of the sweep takes is a typo."""
    if not ignored:
        return
    nobody = set.intersection(*ignored.values())
    if nobody:
        key = sorted(nobody)[0]
        valid = sorted({o for name in ignored for o in get(name).options})
        raise InputError(f"no algorithm of this sweep ({', '.join(sorted(ignored))}) takes "
                         f"algorithm.{key}; their options: {', '.join(valid) or '(none)'}")


def _check_distinct_coordinates(jobs: list[_Job]) -> None:
    seen: dict[tuple, _Job] = {}
    for job in jobs:
        key = tuple(sorted((k, str(v)) for k, v in job.coords.items()))
        other = seen.setdefault(key, job)
        if other is not job and other.hash != job.hash:
            raise InputError(f"sweep points '{' '.join(other.overrides)}' and "
                             f"'{' '.join(job.overrides)}' differ but have the same coordinates; "
                             "sweep the differing key explicitly")


def _point(coords: Mapping) -> str:
    return json.dumps({k: str(v) for k, v in coords.items()}, sort_keys=True)


def _read_manifest(sweep_dir: Path) -> dict | None:
    path = sweep_dir / "manifest.json"
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text())
        for entry in old["entries"]:
            _point(entry["coords"])
        list(old["extra_dims"])
        return old
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path} is unreadable ({type(exc).__name__}); pass sweep=<new name> "
                         "for a new sweep directory, or delete that file to start this one "
                         "afresh") from None


def _old_dims(sweep_dir: Path) -> list[str]:
    old = _read_manifest(sweep_dir)
    return [] if old is None else list(old["extra_dims"])


def _entries_kept(sweep_dir: Path, old: dict | None, jobs: list[_Job], dims: list[str],
                  merge: bool) -> list[dict]:
    """The entries of the sweep already in ``sweep_dir`` (its manifest ``old``) that this one
    keeps in its manifest.

    The same sweep points again, or some of them (a rerun: resume, or new results after data or
    code changed), keep the others; new points are refused unless ``merge=true`` adds them to
    the old ones (same dims only), and points whose settings changed (a value that is not
    swept) are refused. Nothing is ever silently replaced."""
    if old is None:
        return []
    old_entries, old_dims = old["entries"], list(old["extra_dims"])
    new_points = {_point(job.coords): job.setting for job in jobs}
    old_points = {_point(e["coords"]): e.get("setting") for e in old_entries}
    command = " ".join(a.removeprefix("++") for a in old.get("command", [])) or "(unknown)"
    what = (f"{sweep_dir} holds another sweep ({len(old_points)} points over "
            f"{', '.join(list(FIXED_DIMS) + old_dims)}; started with: {command})")
    changed = [p for p, s in new_points.items() if old_points.get(p) not in (None, s)]
    if set(old_dims) == set(dims) and not changed and set(new_points) <= set(old_points):
        return [e for e in old_entries if _point(e["coords"]) not in new_points]  # a rerun
    if changed:
        raise InputError(f"{what}; this sweep has the same points with other settings (a changed "
                         "value that is not swept); pass sweep=<new name> for a new sweep "
                         "directory, or rerun that command to resume it")
    if not merge:
        raise InputError(f"{what}; pass sweep=<new name> for a new sweep directory, rerun that "
                         "command to resume it, or add merge=true to add these points to it")
    if set(old_dims) != set(dims):
        raise InputError(f"{what}; merge=true needs the same swept dims, but this sweep has "
                         f"{', '.join(list(FIXED_DIMS) + dims)}; pass sweep=<new name>")
    return [e for e in old_entries if _point(e["coords"]) not in new_points]


@contextlib.contextmanager
def _sweep_lock(sweep_dir: Path):
    """Held while a sweep reads and writes its directory's manifest and results."""
    with claim(sweep_dir / SWEEP_LOCK):
        yield


def _entries(jobs: list[_Job]) -> list[dict]:
    return [{"overrides": j.overrides, "coords": j.coords, "hash": j.hash, "setting": j.setting}
            for j in jobs]


def _entry_set(entries: list[dict]) -> set[tuple[str, str]]:
    return {(_point(e["coords"]), e["hash"]) for e in entries}


SWEEP_LOCK = "sweep.lock"
HYDRA_RECORD = "multirun.yaml"  # Hydra's record of the sweep, written before the launcher runs
HYDRA_RECORD_KEPT = "manifest.multirun.yaml"  # that of the sweep the manifest describes


def _write_bytes(path: Path, content: bytes | None) -> None:
    """Make ``path`` hold ``content`` (None: remove it), atomically."""
    if content is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_bytes(content)
    os.replace(tmp, path)


def _restore_hydra_record(sweep_dir: Path) -> None:
    """A refused sweep leaves the directory as it was: Hydra has already replaced its
    ``multirun.yaml``, so put back that of the sweep the directory holds."""
    kept = sweep_dir / HYDRA_RECORD_KEPT
    if kept.exists():
        _write_bytes(sweep_dir / HYDRA_RECORD, kept.read_bytes())


def _write_manifest(sweep_dir: Path, master: DictConfig, jobs: list[_Job], kept: list[dict],
                    extra_dims: list[str], job_overrides: Sequence[Sequence[str]], timings: dict,
                    n_workers: int) -> None:
    manifest = {
        "sweep": sweep_dir.name,
        "command": list(master.hydra.overrides.task),
        "config": job_config(master),
        "swept_keys": swept_keys(job_overrides),
        "extra_dims": extra_dims,
        "entries": kept + _entries(jobs),
        "timings": timings,
        "n_workers": n_workers,
    }
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_bytes(sweep_dir / "manifest.json",
                 json.dumps(manifest, indent=1, sort_keys=True, default=str).encode())
    if (sweep_dir / HYDRA_RECORD).exists():
        _write_bytes(sweep_dir / HYDRA_RECORD_KEPT, (sweep_dir / HYDRA_RECORD).read_bytes())
