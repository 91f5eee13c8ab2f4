"""Multirun sweeps on Dask: the work behind the ``hydra/launcher=dask`` plugin.

The client composes every job's config (Hydra's own sweep expansion), names each job by the
hash of what it computes (:func:`pipeline.results.config_hash`), skips jobs whose result file is
already there with status ok (resume), and submits the rest as Dask tasks, one task per job,
after one ingest task per dataset. Workers read the dataset from its zarr store path; only
configs and paths travel through the task graph. A job that raises is recorded as failed;
a worker that dies is replaced by Dask and its job rerun (results are written atomically under
the job's hash, so a rerun never duplicates one). The sweep ends with
:func:`pipeline.results.consolidate` into ``<sweep dir>/results.zarr``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dask
from distributed import progress
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf, open_dict

from algorithms import REGISTRY
from algorithms.base import InputError
from pipeline.app import algorithm_options, job_config, run_job
from pipeline.cluster import connect, job_script
from pipeline.datasets import ingest
from pipeline.results import FIXED_DIMS, config_hash, consolidate, job_status, write_job_failure

CONFIG_GROUPS = ("algorithm", "dataset", "kernel", "cluster", "experiment")


@dataclass
class SweepOutcome:
    """What the last sweep in this process did (read by ``python -m pipeline``)."""

    results_path: Path
    n_points: int
    n_jobs: int
    n_cached: int
    n_run: int
    failed: list[tuple[str, str]] = field(default_factory=list)  # (overrides, error)


LAST_SWEEP: SweepOutcome | None = None


@dataclass
class _Job:
    overrides: list[str]
    config: dict
    hash: str
    coords: dict


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


def execute(config: dict, result_path: str, store: str | None = None) -> dict:
    """Run one job where this is called (a Dask worker) and record its result or failure.

    ``store`` is the result of the dataset's ingest task: taking it makes the job wait for it.
    Never raises for an error of the job itself; returns a small record for the client.
    """
    try:
        from distributed import get_worker

        worker = str(get_worker().name)
    except ValueError:  # not on a worker (direct call)
        worker = "client"
    attrs = {"worker": worker, "pid": os.getpid()}
    start = time.perf_counter()
    try:
        # the job's own dask arrays (zarr reads) compute in this task, not as new cluster tasks
        with dask.config.set(scheduler="synchronous"):
            outcome = run_job(config, result_path, attrs)
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
        write_job_failure(config, error, result_path,
                          {**attrs, "job_seconds": time.perf_counter() - start,
                           "traceback": traceback.format_exc()})
        return {"status": "failed", "error": error, "worker": worker}
    return {"status": "ok", "worker": worker, "summary": outcome.fit.summary}


class _DropShutdownCancellation(logging.Filter):
    """The in-process scheduler logs the progress bar's feed being cancelled at shutdown."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and record.exc_info[0] is asyncio.CancelledError)


def _quiet_dask_logging() -> None:
    # Hydra configures the root logger at INFO: keep Dask's connection chatter out of the console
    for name in ("distributed", "dask", "tornado"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("bokeh").setLevel(logging.ERROR)  # the dashboard's host-wildcard notice
    scheduler_log = logging.getLogger("distributed.scheduler")
    if not any(isinstance(f, _DropShutdownCancellation) for f in scheduler_log.filters):
        scheduler_log.addFilter(_DropShutdownCancellation())


def _dry_run(cluster_cfg: Mapping) -> None:
    print(job_script(cluster_cfg))
    print("dry run: nothing submitted")
    raise SystemExit(0)


def launch(master: DictConfig, config_loader, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int, retries: int) -> list[JobReturn]:
    """Run a batch of Hydra multirun jobs on Dask; see the module docstring."""
    global LAST_SWEEP
    t_start = time.perf_counter()
    sweep_dir = Path(str(master.hydra.sweep.dir)).resolve()
    jobs_dir = sweep_dir / "jobs"
    cluster_cfg = job_config(master)["cluster"]
    if cluster_cfg.get("kind") in ("slurm", "pbs") and cluster_cfg.get("dry_run"):
        _dry_run(cluster_cfg)

    extra_dims = [k for k in swept_keys(job_overrides) if k not in FIXED_DIMS]
    jobs: list[_Job] = []
    sweep_configs = compose_jobs(master, config_loader, job_overrides)
    ignored: dict[str, set[str]] = {}
    for overrides, cfg in zip(job_overrides, sweep_configs, strict=True):
        config = job_config(cfg)
        config["store_root"] = str(Path(config["store_root"]).resolve())
        coords = {d: _coordinate_value(config, d) for d in (*FIXED_DIMS, *extra_dims)}
        _drop_inapplicable_options(config, ignored)
        jobs.append(_Job(list(overrides), config, config_hash(config), coords))
    for name, keys in sorted(ignored.items()):
        print(f"note: {name} takes no option {', '.join(sorted(keys))}: ignored for its jobs, "
              "which are repeated along those dims", flush=True)
    _check_distinct_coordinates(jobs)

    unique: dict[str, _Job] = {}
    for job in jobs:
        unique.setdefault(job.hash, job)
    cached = {h for h in unique if job_status(jobs_dir / f"{h}.nc") == ("ok", h)}
    to_run = [job for h, job in unique.items() if h not in cached]
    print(f"sweep {sweep_dir}: {len(jobs)} points, {len(unique)} distinct jobs, "
          f"{len(cached)} already finished, {len(to_run)} to run", flush=True)
    timings = {"compose_seconds": time.perf_counter() - t_start}
    records, n_workers = _run_on_dask(to_run, cluster_cfg, jobs_dir, retries, timings)
    timings["wall_seconds"] = time.perf_counter() - t_start

    _write_manifest(sweep_dir, master, jobs, extra_dims, job_overrides, timings, n_workers)
    results_path = consolidate(sweep_dir)
    failed = []
    for job in jobs:
        status = job_status(jobs_dir / f"{job.hash}.nc")
        if status is None or status[0] != "ok":
            error = records.get(job.hash, {}).get("error", "no result file")
            failed.append((" ".join(job.overrides), error))
    LAST_SWEEP = SweepOutcome(results_path, len(jobs), len(unique), len(cached), len(to_run),
                              failed)
    return [JobReturn(overrides=job.overrides, cfg=cfg, working_dir=str(sweep_dir),
                      task_name=str(master.hydra.job.name), status=JobStatus.COMPLETED,
                      _return_value=records.get(job.hash, {"status": "cached"}))
            for job, cfg in zip(jobs, sweep_configs, strict=True)]


def _run_on_dask(to_run: list[_Job], cluster_cfg: Mapping, jobs_dir: Path, retries: int,
                 timings: dict) -> tuple[dict[str, dict], int]:
    """Submit one ingest task per dataset and one task per job; show progress; collect."""
    records: dict[str, dict] = {}
    if not to_run:
        return records, 0
    _quiet_dask_logging()
    t0 = time.perf_counter()
    with connect(cluster_cfg) as client:
        timings["cluster_start_seconds"] = time.perf_counter() - t0
        n_workers = len(client.scheduler_info().get("workers", {}))
        print(f"dask dashboard: {client.dashboard_link}", flush=True)
        t1 = time.perf_counter()
        stores: dict[str, object] = {}
        futures = {}
        for job in to_run:
            spec = job.config["dataset"]
            key = json.dumps(spec, sort_keys=True, default=str)
            if key not in stores:
                stores[key] = client.submit(ingest, spec, job.config["store_root"],
                                            retries=retries, pure=False)
            futures[job.hash] = client.submit(
                execute, job.config, str(jobs_dir / f"{job.hash}.nc"), stores[key],
                key=f"job-{job.hash}-{time.time_ns()}", retries=retries, pure=False)
        progress(list(futures.values()), notebook=False, interval="1s")
        print(flush=True)
        for job in to_run:
            records[job.hash] = _collect(futures[job.hash], job, jobs_dir)
        timings["jobs_seconds"] = time.perf_counter() - t1
    return records, n_workers


def _collect(future, job: _Job, jobs_dir: Path) -> dict:
    """The job's record; an error raised outside the job (ingest, lost workers) is recorded."""
    if future.status == "finished":
        return future.result()
    try:
        exc = future.exception()
        error = f"{type(exc).__name__}: {exc}"
    except Exception as err:  # cancelled
        error = f"{type(err).__name__}: {err}"
    write_job_failure(job.config, error, jobs_dir / f"{job.hash}.nc", {"worker": ""})
    return {"status": "failed", "error": error}


def _drop_inapplicable_options(config: dict, ignored: dict[str, set[str]]) -> None:
    """In a sweep over several algorithms, an option one of them does not take (SGMA's eps for
    the exact GP, say) is dropped from that algorithm's jobs, as κ is for algorithms that do
    not use it; a single job with such an option is still an error (pipeline.app.run_job)."""
    name = config["algorithm"]["name"]
    if name not in REGISTRY:
        return  # reported by the job itself
    for key in set(config["algorithm"]) - {"name"} - algorithm_options(name):
        del config["algorithm"][key]
        ignored.setdefault(name, set()).add(key)


def _check_distinct_coordinates(jobs: list[_Job]) -> None:
    seen: dict[tuple, _Job] = {}
    for job in jobs:
        key = tuple(sorted((k, str(v)) for k, v in job.coords.items()))
        other = seen.setdefault(key, job)
        if other is not job and other.hash != job.hash:
            raise InputError(f"sweep points '{' '.join(other.overrides)}' and "
                             f"'{' '.join(job.overrides)}' differ but have the same coordinates; "
                             "sweep the differing key explicitly")


def _write_manifest(sweep_dir: Path, master: DictConfig, jobs: list[_Job], extra_dims: list[str],
                    job_overrides: Sequence[Sequence[str]], timings: dict,
                    n_workers: int) -> None:
    manifest = {
        "sweep": sweep_dir.name,
        "config": job_config(master),
        "swept_keys": swept_keys(job_overrides),
        "extra_dims": extra_dims,
        "entries": [{"overrides": j.overrides, "coords": j.coords, "hash": j.hash} for j in jobs],
        "timings": timings,
        "n_workers": n_workers,
    }
    sweep_dir.mkdir(parents=True, exist_ok=True)
    tmp = sweep_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))
    os.replace(tmp, sweep_dir / "manifest.json")
