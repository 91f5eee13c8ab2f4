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
import re
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dask
import numpy as np
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
    blocks_in_memory_unless_declared,
    check_config,
    config_hash,
    drop_inapplicable_options,
    job_config,
    resolve_threads,
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
class Composition:
    """One Hydra composition that the sweep points differing from it only in leaf values
    share (``seed=3``, ``kernel.width=5``): composing takes ~60 ms, setting a leaf microseconds."""

    cfg: DictConfig     # Hydra's composition, hydra node included
    job_part: dict      # its job keys (no hydra node), unresolved
    resolved: dict      # the same, resolved
    interpolations: list[str]  # every value of job_part holding an interpolation

    @classmethod
    def of(cls, cfg: DictConfig) -> Composition:
        part = job_config(cfg, resolve=False)
        found: list[str] = []
        _interpolations(part, found)
        return cls(cfg, part, job_config(cfg) if found else part, found)

    def refers_to(self, key: str) -> bool:
        """Whether an interpolation may read ``key`` (by its name anywhere in one: a leaf
        that nothing refers to is set on the resolved config directly)."""
        last = key.rpartition(".")[2]
        return any(key in text or re.search(rf"\b{re.escape(last)}\b", text)
                   for text in self.interpolations)


def _interpolations(node, found: list[str]) -> None:
    if isinstance(node, dict):
        for value in node.values():
            _interpolations(value, found)
    elif isinstance(node, list):
        for value in node:
            _interpolations(value, found)
    elif isinstance(node, str) and "${" in node:
        found.append(node)


@dataclass
class ComposedJob:
    """A sweep point: its overrides, and its config as a shared composition plus leaf values."""

    overrides: list[str]
    base: Composition
    leaves: list[tuple[str, Any]] = field(default_factory=list)  # (dotted key, value)

    def config(self) -> dict:
        """The resolved job config (no hydra node): :func:`pipeline.job.job_config` of
        :meth:`hydra_config`."""
        if not any(self.base.refers_to(key) or (isinstance(v, str) and "${" in v)
                   for key, v in self.leaves):
            config = copy.deepcopy(self.base.resolved)
            for key, value in self.leaves:
                _set_leaf(config, key, copy.deepcopy(value))
            return config
        node = OmegaConf.create(self.base.job_part)
        for key, value in self.leaves:
            OmegaConf.update(node, key, value, merge=False)
        return OmegaConf.to_container(node, resolve=True)

    def hydra_config(self) -> DictConfig:
        """The full config Hydra's ``run_job`` receives (Hydra's ``load_sweep_config``)."""
        cfg = copy.deepcopy(self.base.cfg)
        with open_dict(cfg):
            for key, value in self.leaves:
                OmegaConf.update(cfg, key, value, merge=False)
            cfg.hydra.overrides.task = list(self.overrides)
        return cfg


def _lookup(config, key: str):
    """The value at dotted ``key`` (list items by index) in plain containers, or None."""
    value = config
    for part in key.split(".") if key else ():
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, Mapping):
            value = value.get(part)
        else:
            return None
    return value


def _set_leaf(config: dict, key: str, value) -> None:
    """Set dotted ``key``, an existing leaf (:func:`_is_leaf` of the composition), to ``value``."""
    parent, _, last = key.rpartition(".")
    node = _lookup(config, parent)
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


@dataclass
class _Job:
    overrides: list[str]
    composed: ComposedJob | None  # for Hydra's run_job; None where the config is enough
    config: dict      # the resolved job config
    hash: str
    coords: dict
    setting: str      # hash of the job's settings (its identity without data and code)
    num: int          # Hydra's job number


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
    value = _lookup(config, key)
    return value if isinstance(value, (int, float, str)) else json.dumps(value, default=str)


def _maybe_leaf(override: Override, groups: Collection[str]) -> bool:
    """``a.b=value`` or ``seed=value``: a plain change, not a choice of one of the config
    ``groups``, an add or a delete."""
    key = override.key_or_group
    return (override.type == OverrideType.CHANGE and override.package is None
            and "/" not in key and key not in groups)


def _is_leaf(cfg: DictConfig, key: str) -> bool:
    node = OmegaConf.select(cfg, key, throw_on_missing=False, default=_ABSENT)
    return node is not _ABSENT and not OmegaConf.is_config(node)


_ABSENT = object()


def compose_jobs(master: DictConfig, config_loader,
                 job_overrides: Sequence[Sequence[str]]) -> list[ComposedJob]:
    """Each sweep point's config, as Hydra's ``load_sweep_config`` composes it.

    Points that differ only in leaf values (seed=3, kernel.width=5) share one composition of
    their other overrides (group choices, +/~ keys) and carry the leaf values; a point whose
    leaf key is not an existing leaf of that composition is composed by Hydra in full. Raises
    Hydra's error for a point that does not compose.
    """
    parser = OverridesParser.create()
    groups = {*CONFIG_GROUPS, *(OmegaConf.select(master, "hydra.runtime.choices") or {})}
    # an override every point has is composed into the base, not set on each point
    common = set.intersection(*(set(o) for o in job_overrides)) if job_overrides else set()
    bases: dict[tuple[str, ...], Composition] = {}
    out = []
    for overrides in job_overrides:
        parsed = parser.parse_overrides(list(overrides))
        leaves = [o for o in parsed if _maybe_leaf(o, groups) and o.input_line not in common]
        structural = tuple(o.input_line for o in parsed if o not in leaves)
        if structural not in bases:
            bases[structural] = Composition.of(
                config_loader.load_sweep_config(master, list(structural)))
        base = bases[structural]
        if all(_is_leaf(base.cfg, o.key_or_group) for o in leaves):
            out.append(ComposedJob(list(overrides), base,
                                   [(o.key_or_group, o.value()) for o in leaves]))
        else:
            full = config_loader.load_sweep_config(master, list(overrides))
            out.append(ComposedJob(list(overrides), Composition.of(full)))
    return out


def execute(task_function: TaskFunction, hydra_context: HydraContext, job: _Job,
            sweep_dir: Path, direct: bool, since: float = 0.0) -> dict:
    """Run one job where this is called (a Dask worker), and record its failure if it fails.
    Never raises for an error of the job itself.

    ``direct``: call the task function's ``run_config(config, output_dir)`` with the job's
    resolved config; else Hydra's ``run_job`` runs the task function on the job's full config
    (as Hydra's own launchers do; ~10–20 ms of config copies and YAML a job, so taken only for
    task functions without ``run_config``, or with Hydra callbacks or ``hydra.job.env_set``).

    The job first claims its directory (:func:`pipeline.claims.claim_job`: another sweep on
    the same directory fitting it makes this wait), then looks at the disk: a result written
    with status ok (or a failure recorded since this sweep started at ``since``) is returned
    as it is, so a task Dask reruns after a worker died, or a job another sweep just fitted,
    is never fitted again."""
    out_dir = sweep_dir / "jobs" / job.hash
    here = config_hash(job.config)
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
            if direct:
                try:
                    return task_function.run_config(job.config, out_dir)
                except Exception as err:
                    return _record_failure(job, out_dir, err, start)
            with _HYDRA_JOB:
                ret = run_job(hydra_context=hydra_context, task_function=task_function,
                              config=_hydra_job_config(job, sweep_dir),
                              job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
                              configure_logging=False)
        if ret.status == JobStatus.COMPLETED:
            return ret.return_value
        return _record_failure(job, out_dir, ret._return_value, start)


def execute_batch(task_function: TaskFunction, hydra_context: HydraContext, jobs: list[_Job],
                  sweep_dir: Path, direct: bool, need: object, since: float) -> list[dict]:
    """One Dask task: ``jobs`` one after another on this worker (:func:`execute`), each
    record with the seconds it took here. ``need`` (the result of the ingest or learning task
    the jobs need) makes the task wait for it."""
    records = []
    for job in jobs:
        start = time.perf_counter()
        record = execute(task_function, hydra_context, job, sweep_dir, direct, since)
        records.append({**record, "seconds": time.perf_counter() - start})
    return records


def _hydra_job_config(job: _Job, sweep_dir: Path) -> DictConfig:
    cfg = job.composed.hydra_config()
    with open_dict(cfg):
        cfg.algorithm = job.config["algorithm"]  # resolved, without the dropped options
        cfg.store_root = job.config["store_root"]
        for key in ("blocks", "threads"):  # as the sweep resolved them (execution keys)
            if key in job.config:
                cfg[key] = job.config[key]
        cfg.hydra.sweep.dir = str(sweep_dir)
        cfg.hydra.sweep.subdir = f"jobs/{job.hash}"
        cfg.hydra.job.num = job.num
        cfg.hydra.job.id = f"{cfg.hydra.job.name}_{job.num}"
    return cfg


def _record_failure(job: _Job, out_dir: Path, err: BaseException, start: float) -> dict:
    error = f"{type(err).__name__}: {err}"
    write_job_failure(job.config, error, out_dir / JOB_FILE,
                      {"config_hash": job.hash, "worker": worker_name(), "pid": os.getpid(),
                       "job_seconds": time.perf_counter() - start,
                       "traceback": "".join(traceback.format_exception(err))})
    return {"status": "failed", "error": error, "config_hash": job.hash}


def _finished(path: Path, h: str, since: float) -> dict | None:
    status = job_status(path)
    if status == ("ok", h):
        return {"status": "cached", "error": "", "config_hash": h}
    if status == ("failed", h) and path.stat().st_mtime >= since:
        error = str(load_job_result(path).attrs.get("error", ""))
        return {"status": "failed", "error": error, "config_hash": h}
    return None


def _silence_dask_logging() -> None:
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _interrupted(signum, frame) -> None:
    # silenced before the KeyboardInterrupt exists: Dask reacts to it on its event-loop thread
    # at once (distributed's sync() schedules a cancel that can fail with a NameError when the
    # call had not started yet, logged by tornado with a traceback), racing an except clause
    _silence_dask_logging()
    raise KeyboardInterrupt


@contextlib.contextmanager
def _silent_on_interrupt():
    """On Ctrl-C the cluster is torn down mid-conversation; what Dask and asyncio log about
    the broken connections is noise beside the one line the CLI prints."""
    handler = None
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        handler = signal.signal(signal.SIGINT, _interrupted)
    try:
        yield
    except KeyboardInterrupt:
        _silence_dask_logging()
        raise
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


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


def _finished_jobs(sweep_dir: Path, hashes) -> set[str]:
    """The jobs among ``hashes`` whose result in ``sweep_dir`` is there with status ok."""
    return {h for h in hashes if job_status(job_path(sweep_dir, h)) == ("ok", h)}


def _plan_only(jobs: list[_Job], sweep_dir: Path, t_start: float) -> None:
    """``dry_run=true``: every point composed, named and checked, the cache looked up; say
    what would run, how long planning took and the client's peak memory, and stop without
    writing anything (Hydra's record of the sweep is put back)."""
    unique = {job.hash for job in jobs}
    cached = len(_finished_jobs(sweep_dir, unique))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    whole = startup_seconds()
    print(f"dry run: {len(jobs)} sweep points, {len(unique)} distinct jobs: {cached} already "
          f"finished, {len(unique) - cached} would run; planned in "
          f"{time.perf_counter() - t_start:.1f} s"
          + (f" (whole process {whole:.1f} s)" if whole is not None else "")
          + f", client peak memory {peak:.0f} MiB; nothing submitted", flush=True)
    _restore_hydra_record(sweep_dir)
    if not (sweep_dir / "manifest.json").exists():  # a new directory: Hydra's record goes too
        (sweep_dir / HYDRA_RECORD).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            sweep_dir.rmdir()
    raise SystemExit(0)


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
        if master.get("dry_run", False):
            _plan_only(jobs, sweep_dir, t_start)
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
    cached = _finished_jobs(sweep_dir, unique)
    refused = {h: f"TooLarge: {why}" for h, why in too_large.items() if h not in cached}
    to_run = [job for h, job in unique.items() if h not in cached and h not in refused]
    print(f"sweep {sweep_dir}: {len(jobs)} points, {len(unique)} distinct jobs, "
          f"{len(cached)} already finished, {len(to_run)} to run"
          + (f", {len(refused)} too large (recorded as failed)" if refused else ""), flush=True)
    for why in refused.values():
        print(f"  {why}", flush=True)
    timings = {} if startup is None else {"startup_seconds": startup}
    timings["compose_seconds"] = time.perf_counter() - t_start
    cluster = _Cluster()
    try:  # the cluster closes while results are consolidated; waited for here
        try:
            records, n_workers = _run_on_dask(to_run, cluster_cfg, sweep_dir, hydra_context,
                                              task_function, retries, timings,
                                              _direct(task_function, master), cluster)
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
            # no per-point cfg (a DictConfig costs ~2 ms a point): the record names the job, whose
            # config is in its result file and in the consolidated store
            returns.append(JobReturn(overrides=job.overrides, cfg=None,
                                     working_dir=str(job_path(sweep_dir, job.hash).parent),
                                     task_name=str(master.hydra.job.name),
                                     status=JobStatus.COMPLETED, _return_value=record))
        return returns
    finally:
        cluster.close()


def _direct(task_function: TaskFunction, master: DictConfig) -> bool:
    """Whether jobs call the task function's ``run_config`` with their resolved config
    (:func:`execute`): it has one, and no Hydra callback or ``hydra.job.env_set`` expects
    Hydra's ``run_job`` around each job."""
    return (callable(getattr(task_function, "run_config", None))
            and not OmegaConf.select(master, "hydra.callbacks")
            and not OmegaConf.select(master, "hydra.job.env_set"))


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
    composed = compose_jobs(master, hydra_context.config_loader, job_overrides)
    ignored: dict[str, set[str]] = {}
    in_memory: set[str] = set()  # algorithms whose blocks=cluster jobs run in memory
    checked: set[str] = set()
    too_large: dict[str, str] = {}
    # the memory a fit may have is known here only when the workers run on this machine
    here = None if cluster_cfg.get("kind") == "local" else math.inf
    # threads=auto: the cores of this machine shared among its workers' jobs; elsewhere
    # (workers on other machines, cores unknown here) one thread a job
    jobs_at_once = ((cluster_cfg.get("n_workers") or os.cpu_count() or 1)
                    * (cluster_cfg.get("threads_per_worker") or 1)
                    if cluster_cfg.get("kind") == "local" else os.cpu_count() or 1)
    for idx, point in enumerate(composed):
        config = point.config()
        coords = {d: _coordinate_value(config, d) for d in (*FIXED_DIMS, *dims)}
        dropped = drop_inapplicable_options(config)
        ignored.setdefault(config["algorithm"]["name"], set()).update(dropped)
        if blocks_in_memory_unless_declared(config):
            in_memory.add(config["algorithm"]["name"])
        config["store_root"] = str(Path(config["store_root"]).resolve())
        config["threads"] = resolve_threads(config.get("threads", 1), jobs_at_once)
        h = config_hash(config)
        if h not in checked:  # bad input stops the sweep before any cluster starts
            try:
                check_config(config, available=here)
            except TooLarge as err:
                too_large[h] = str(err)
            checked.add(h)
        jobs.append(_Job(point.overrides, point, config, h, coords, setting_hash(config),
                         initial_job_idx + idx))
    _check_options_taken(ignored)
    if in_memory:
        print(f"note: {', '.join(sorted(in_memory))} cannot spread a fit over the cluster: its "
              "blocks=cluster jobs run with blocks=memory", flush=True)
    for name, keys in sorted(ignored.items()):
        if keys:
            print(f"note: {name} takes no option {', '.join(sorted(keys))}: ignored for its "
                  "jobs, which are repeated along those dims", flush=True)
    _check_distinct_coordinates(jobs)
    if too_large and len(too_large) == len(checked):
        raise TooLarge(next(iter(too_large.values())))
    return cluster_cfg, jobs, dims, too_large


class _Cluster:
    """The sweep's Dask cluster: connected when the first job is submitted (bad input stops a
    sweep before any cluster starts), closed on a thread while the results are consolidated
    (:meth:`close` with ``wait=False``), so that its shutdown overlaps the client's own work."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.closer: threading.Thread | None = None
        self.sys_path = list(sys.path)

    def connect(self, cfg: Mapping):
        self.sys_path = list(sys.path)
        client = self.stack.enter_context(connect(cfg))
        client.register_plugin(_QuietCancellations())
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
        with contextlib.suppress(Exception), _silent_on_interrupt():
            self.stack.close()


def _run_on_dask(to_run: list[_Job], cluster_cfg: Mapping, sweep_dir: Path,
                 hydra_context: HydraContext, task_function: TaskFunction, retries: int,
                 timings: dict, direct: bool, cluster: _Cluster) -> tuple[dict[str, dict], int]:
    """Submit one ingest task per dataset (and learning task per hyperparameter setting),
    then the jobs in batches (:class:`_Batches`); show progress; collect."""
    records: dict[str, dict] = {}
    if not to_run:
        return records, 0
    _quiet_dask_logging()
    t0 = time.perf_counter()
    with _silent_on_interrupt():
        client = cluster.connect(cluster_cfg)
        timings["cluster_start_seconds"] = time.perf_counter() - t0  # the wait for it
        n_workers = len(client.scheduler_info().get("workers", {}))
        print(f"dask dashboard: {client.dashboard_link}", flush=True)
        t1 = time.perf_counter()
        # as tasks, not scattered data: a task's result is recomputed if the worker holding
        # it dies, where scattered data would be lost with it (and every job with it)
        task = client.submit(_same, task_function, pure=False)
        context = client.submit(_same, hydra_context, pure=False)
        since = time.time()
        stores: dict[str, object] = {}
        needs: dict[str, object] = {}  # per job: what it waits for (ingest, or learning)
        # every ingest (and hyperparameter learning) first and at a higher priority: a
        # worker's queue holding one behind a long job would keep the jobs needing it waiting
        for job in to_run:
            if _dataset_key(job) not in stores:
                stores[_dataset_key(job)] = client.submit(
                    _ingest, job.config["dataset"], job.config["store_root"], retries=retries,
                    pure=False, priority=1)
        learnings: dict[str, object] = {}
        for job in to_run:
            store = stores[_dataset_key(job)]
            key = _hyper_key(job)
            if key is not None and key not in learnings:
                learnings[key] = client.submit(_learn, job.config, store, retries=retries,
                                               pure=False, priority=1)
            needs[job.hash] = learnings[key] if key is not None else store
        if direct:  # the workers need the resolved configs only
            to_run = [replace(job, composed=None) for job in to_run]

        def submit(jobs: list[_Job]):
            return client.submit(execute_batch, task, context, jobs, sweep_dir, direct,
                                 needs[jobs[0].hash], since, retries=retries, pure=False,
                                 key=f"job-{jobs[0].hash}-x{len(jobs)}-{time.time_ns()}")

        batches = _Batches(to_run, needs)
        progress = _Progress(len(to_run))
        running = as_completed(loop=client.loop)
        in_flight: dict[object, list[_Job]] = {}
        adaptive = _adaptive_workers(cluster_cfg)
        while True:
            workers = max(1, len(client.scheduler_info().get("workers", {})))
            # an adaptive cluster grows with the work the scheduler sees queued: it is shown
            # every job at once, in batches sized for its largest size
            window = 2 * workers if adaptive is None else math.inf
            while len(in_flight) < window and batches:
                jobs = batches.take(workers if adaptive is None else adaptive)
                future = submit(jobs)
                in_flight[future] = jobs
                running.add(future)
            if not in_flight:
                break
            future = next(running)
            jobs = in_flight.pop(future)
            if future.status == "finished":
                for job, record in zip(jobs, future.result(), strict=True):
                    records[job.hash] = record
                    batches.measured(record["seconds"])
            elif len(jobs) > 1 and needs[jobs[0].hash].status != "error":
                # the task failed outside its jobs (workers died): rerun each job alone, so
                # that only a job that kills its worker fails (finished ones are found on disk)
                for job in jobs:
                    alone = submit([job])
                    in_flight[alone] = [job]
                    running.add(alone)
                continue
            else:
                for job in jobs:
                    records[job.hash] = _collect(future, needs[job.hash], job, sweep_dir,
                                                 cluster_cfg)
            progress.advance(len(jobs))
        progress.close()
        # release every future (and the errors that reference them) while the client is open
        in_flight.clear()
        stores.clear()
        learnings.clear()
        needs.clear()
        task = context = running = future = None
        gc.collect()
        timings["jobs_seconds"] = time.perf_counter() - t1
    cluster.close(wait=False)  # while the results are consolidated
    return records, n_workers


def _adaptive_workers(cluster_cfg: Mapping) -> int | None:
    """The most workers an adaptive batch cluster may start (cluster.adapt.maximum batch jobs
    × cluster.processes), or None for a cluster of fixed size."""
    adapt = cluster_cfg.get("adapt") or {}
    if cluster_cfg.get("kind") not in ("slurm", "pbs") or adapt.get("maximum") is None:
        return None
    return int(adapt["maximum"]) * int(cluster_cfg.get("processes") or 1)


class _Batches:
    """The jobs still to submit, taken in batches sized to the measured job time.

    Guided self-scheduling: a batch holds about :data:`TASK_SECONDS` of jobs (by the median
    time of the jobs finished so far: a worker's first job, which loads the code paths and the
    data, is several times slower; one job until a time is known) and never more than a
    1/(2·workers) share of those left, so batches shrink towards the end and the workers
    finish together. A batch holds jobs that wait for the same ingest or learning task."""

    def __init__(self, jobs: list[_Job], needs: Mapping[str, object]) -> None:
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

    def take(self, workers: int) -> list[_Job]:
        size = self.size(workers)
        batch = [self.left.pop()]
        need = self.needs[batch[0].hash]
        while self.left and len(batch) < size and self.needs[self.left[-1].hash] is need:
            batch.append(self.left.pop())
        return batch


TASK_SECONDS = 0.5  # a batch's target duration: Dask's ~ms per task is then a fraction of 1 %


class _Progress:
    """A text bar over the jobs, advanced as batches finish (or fail) on the client's side."""

    def __init__(self, n: int, width: int = 40) -> None:
        self.n, self.done, self.width, self.start = n, 0, width, time.perf_counter()

    def advance(self, k: int) -> None:
        self.done += k
        filled = self.width * self.done // self.n
        print(f"\r[{'#' * filled}{' ' * (self.width - filled)}] | "
              f"{100 * self.done // self.n:3d}% Completed | "
              f"{time.perf_counter() - self.start:.1f}s", end="", flush=True)

    def close(self) -> None:
        print(flush=True)


def _hyper_key(job: _Job) -> str | None:
    """Jobs learning the same hyperparameters share one learning task (None: none learned)."""
    try:
        return cache_key(job.config) if hyper_options(job.config) is not None else None
    except InputError:
        return None  # a bad hyper block: the job itself reports it


def _ingest(spec: Mapping, store_root: str) -> Path:
    """A sweep's ingest task: :func:`pipeline.datasets.ingest` with its dask arrays computed in
    this task (on a worker dask's default is the cluster: every chunk read would be a round
    trip through the scheduler, 0.5 s for a small store's checksums)."""
    with dask.config.set(scheduler="synchronous"):
        return ingest(spec, store_root)


def _learn(config: Mapping, store: str) -> str:
    """A sweep's hyperparameter-learning task: learn (or find cached) and return the store."""
    with dask.config.set(scheduler="synchronous"):
        learned(config, store)
    return store


def _dataset_key(job: _Job) -> str:
    """Jobs with equal dataset specs share one ingest task."""
    return json.dumps(job.config["dataset"], sort_keys=True, default=str)


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
