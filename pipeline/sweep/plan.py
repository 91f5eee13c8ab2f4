"""A sweep's plan: every point composed, checked and named by its job hash before anything
runs; ``dry_run=true`` stops here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil
from hydra.types import HydraContext
from omegaconf import DictConfig

from algorithms.errors import InputError, TooLarge
from algorithms.registry import get
from pipeline.cluster.kinds import kind_of
from pipeline.cluster.options import check, local_worker_bytes, memory_hint
from pipeline.job.identity import job_config, planning, setting_hash
from pipeline.job.numbers import declared_floats
from pipeline.job.spec import JobSpec
from pipeline.lines import note
from pipeline.outputs import OPT_OUT, check_store_root
from pipeline.results.job_file import (
    DamagedResult,
    job_path,
    verified_status,
)
from pipeline.results.manifest_file import FIXED_DIMS
from pipeline.results.ownership import not_a_file
from pipeline.sweep.clock import startup_seconds
from pipeline.sweep.compose import (
    PlannedJob,
    compose_jobs,
    coordinate_value,
    swept_keys,
)
from pipeline.sweep.manifest import HYDRA_RECORD, old_dims, point_key, restore_hydra_record

PLAN_PROGRESS_SECONDS = 5.0  # a planning sweep says how far it is at most this often


class PlanProgress:
    """``planning: <k> of <n> points composed, checked and named (<s> s)``, at most every
    :data:`PLAN_PROGRESS_SECONDS`: a large sweep's planning is never silent for longer. Each
    point counts twice (composed, then checked and named), so the count reaches ``n`` once."""

    def __init__(self, n: int) -> None:
        self.n, self.steps = n, 0
        self.start = self.said = time.monotonic()

    def __call__(self) -> None:
        self.steps += 1
        now = time.monotonic()
        if now - self.said >= PLAN_PROGRESS_SECONDS:
            self.said = now
            print(f"planning: {self.steps // 2} of {self.n} points composed, checked and named "
                  f"({now - self.start:.0f} s)", flush=True)


def finished_jobs(sweep_dir: Path, hashes) -> set[str]:
    """The jobs among ``hashes`` whose result in ``sweep_dir`` is there with status ok and
    verifies (:func:`pipeline.results.job_file.verified_status`); a result file that is there
    but damaged (unreadable, no checksum or a wrong one) is never served: a ``note:`` names it
    and its job runs again."""
    done = set()
    for h in hashes:
        try:
            status = verified_status(job_path(sweep_dir, h))
        except DamagedResult as err:
            note(f"result file {err.path} {err.what}: its job runs again")
            continue
        if status == ("ok", h):
            done.add(h)
    return done


def plan_only(jobs: list[PlannedJob], sweep_dir: Path, t_start: float) -> None:
    """``dry_run=true``: every point composed, named and checked, the cache looked up; say
    what would run, how long planning took and the client's peak memory, and stop without
    writing anything (Hydra's record of the sweep is put back)."""
    unique = {job.hash for job in jobs}
    cached = len(finished_jobs(sweep_dir, unique))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    whole = startup_seconds()
    print(f"dry run: {len(jobs)} sweep points, {len(unique)} distinct jobs: {cached} already "
          f"finished, {len(unique) - cached} would run; planned in "
          f"{time.perf_counter() - t_start:.1f} s"
          + (f" (whole process {whole:.1f} s)" if whole is not None else "")
          + f", client peak memory {peak:.0f} MiB; nothing submitted", flush=True)
    restore_hydra_record(sweep_dir)
    if not (sweep_dir / "manifest.json").exists():  # a new directory: Hydra's record goes too
        (sweep_dir / HYDRA_RECORD).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            sweep_dir.rmdir()
    raise SystemExit(0)


def along_new_dims(old: dict | None, dims: Sequence[str], master: DictConfig,
                   hydra_context: HydraContext) -> dict | None:
    """``old`` (the manifest of the sweep a ``merge=true`` joins) with its points along the
    dims of ``dims`` it lacks (keys this sweep sweeps that it did not): each point at the value
    its own config has there, composed again from its overrides (the default the first sweep
    used, say). Raises InputError (one line) when a point's overrides are not recorded."""
    if old is None:
        return None
    new = [d for d in dims if d not in old["extra_dims"]]
    if not new:
        return old
    if any(not e.get("overrides") for e in old["entries"]):
        raise InputError(f"merge=true cannot add {', '.join(new)} to this sweep: its manifest "
                         "does not record its points' overrides; pass sweep=<new name>")
    composed = compose_jobs(master, hydra_context.config_loader,
                            [list(e["overrides"]) for e in old["entries"]])
    entries = []
    for entry, point in zip(old["entries"], composed, strict=True):
        entries.append({**entry, "coords": {**entry["coords"],
                                            **_coordinates(point.config(), new)}})
    return {**old, "extra_dims": [*old["extra_dims"], *new], "entries": entries}


def _coordinates(config: Mapping, dims: Sequence[str]) -> dict:
    """A point's values along ``dims``; an integer given for a declared float as that float
    (``kernel.width=10`` is the point ``kernel.width=10.0``, :mod:`pipeline.job.numbers`)."""
    floats = declared_floats(config)
    return {d: coordinate_value(floats, d) for d in dims}


def print_job_script(cluster_cfg: Mapping) -> None:
    from pipeline.cluster.connect import job_script  # imports distributed: not for a plan

    print(job_script(cluster_cfg))
    print("dry run: nothing submitted")
    raise SystemExit(0)


def prepare(master: DictConfig, hydra_context: HydraContext,
             job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
             sweep_dir: Path) -> tuple[dict, list[PlannedJob], list[str], dict[str, str]]:
    """Check the cluster options and every job's config, and name the jobs: (cluster config,
    jobs, the swept dims beside the fixed ones, the jobs too large to fit with the reason).
    Raises InputError before anything runs; a job too large for its ``max_n`` or the memory
    (e.g. the exact GP at the largest n of a scaling sweep) is only refused when every job
    of the sweep is."""
    cluster_cfg = job_config(master)["cluster"]
    dry_run = bool(master.dry_run)
    check(cluster_cfg)  # bad cluster options stop the sweep even when every job is cached
    kind = kind_of(cluster_cfg)
    if kind.batch is not None and cluster_cfg.get("dry_run"):
        print_job_script(cluster_cfg)

    progress = PlanProgress(len(job_overrides))
    composed = compose_jobs(master, hydra_context.config_loader, job_overrides, progress)
    extra_dims = [k for k in swept_keys(composed) if k not in FIXED_DIMS]
    # a rerun of part of a sweep is expressed in that sweep's dims (a dim it sweeps, fixed now)
    dims = extra_dims + [d for d in old_dims(sweep_dir) if d not in extra_dims]
    jobs: list[PlannedJob] = []
    ignored: dict[str, set[str]] = {}
    in_memory: set[str] = set()  # algorithms whose blocks=cluster jobs run in memory
    specs: dict[str, JobSpec] = {}  # config → its job (the same config checked once)
    too_large: dict[str, str] = {}
    here, worker_bytes = _fit_memory(cluster_cfg)
    jobs_at_once = _jobs_at_once(cluster_cfg)
    roots: dict[tuple, str] = {}  # (store_root, allow_outside_outputs) → its path, checked
    with planning():  # each dataset's content digest taken once
        for idx, point in enumerate(composed):
            progress()
            config = point.config()  # as typed: a bad value is named as the user gave it
            coords = _coordinates(config, (*FIXED_DIMS, *dims))
            config["store_root"] = _store_root(config, roots)
            key = json.dumps(config, sort_keys=True, default=str)
            if key not in specs:  # bad input stops the sweep before any data is read
                specs[key] = JobSpec.from_config(config, here, jobs_at_once)
            spec = specs[key]
            ignored.setdefault(spec.algorithm, set()).update(spec.dropped)
            if spec.blocks_moved:
                in_memory.add(spec.algorithm)
            # a dry run writes nothing: a dataset not ingested yet is built in memory
            h = spec.identity(write_data=not dry_run)
            if spec.too_large is not None:
                limited = here == worker_bytes and "is available" in spec.too_large
                too_large[h] = spec.too_large + (f" ({memory_hint(cluster_cfg)})" if limited
                                                 else "")
            jobs.append(PlannedJob(point.overrides, point, spec, h, coords,
                                   setting_hash(spec.resolved), initial_job_idx + idx))
    _check_options_taken(ignored)
    _say_what_changed(ignored, in_memory)
    _check_distinct_coordinates(jobs)
    _check_result_paths(sweep_dir, jobs)
    if specs and all(spec.too_large is not None for spec in specs.values()):
        raise TooLarge(next(iter(too_large.values())))
    return cluster_cfg, jobs, dims, too_large


def _check_result_paths(sweep_dir: Path, jobs: Sequence[PlannedJob]) -> None:
    """Raise InputError (one line naming it and the fix) when something other than a file
    (a directory, a FIFO) is where a job's ``result.nc`` goes: no job wrote it, the job's
    result could not replace it, and it is never read as a result; the sweep stops before
    anything runs, and once it is removed the job counts as not finished and runs again."""
    for h in dict.fromkeys(job.hash for job in jobs):
        path = job_path(sweep_dir, h)
        odd = not_a_file(path)
        if odd is not None:
            raise InputError(f"{path} {odd}, then rerun the sweep: that job is not finished "
                             "and runs again; nothing was run")


def _fit_memory(cluster_cfg: Mapping) -> tuple[float, int | None]:
    """(the bytes a fit may have, a local worker's limit or None). Known here only when the
    workers run on this machine: what it has free, and at most what a worker may hold before
    its nanny terminates it; elsewhere unlimited here (the worker checks)."""
    here, worker_bytes = math.inf, None
    if kind_of(cluster_cfg).on_this_machine:
        here = float(psutil.virtual_memory().available)
        worker_bytes = local_worker_bytes(cluster_cfg)
        if worker_bytes is not None and worker_bytes < here:
            here = worker_bytes
    return here, worker_bytes


def _jobs_at_once(cluster_cfg: Mapping) -> int:
    """How many jobs share this machine's cores (threads=auto): its workers' jobs when they
    run here; elsewhere (workers on other machines, cores unknown here) one thread a job."""
    if kind_of(cluster_cfg).on_this_machine:
        return ((cluster_cfg.get("n_workers") or os.cpu_count() or 1)
                * (cluster_cfg.get("threads_per_worker") or 1))
    return os.cpu_count() or 1


def _store_root(config: Mapping, roots: dict[tuple, str]) -> str:
    """The job's store root, resolved and checked (under outputs/, or allowed outside) once
    per (store_root, allow_outside_outputs) in ``roots``."""
    root = config["store_root"]
    seen = (root, repr(config.get(OPT_OUT))) if isinstance(root, str) else None
    if seen in roots:  # checked for an earlier point
        return roots[seen]
    check_store_root(config)
    resolved = str(Path(root).resolve())
    if seen is not None:
        roots[seen] = resolved
    return resolved


def _say_what_changed(ignored: Mapping[str, set[str]], in_memory: set[str]) -> None:
    """A note for the algorithms whose blocks=cluster jobs run in memory and for the options
    an algorithm does not take (dropped from its jobs)."""
    if in_memory:
        print(f"note: {', '.join(sorted(in_memory))} cannot spread a fit over the cluster: its "
              "blocks=cluster jobs run with blocks=memory", flush=True)
    for name, keys in sorted(ignored.items()):
        if keys:
            print(f"note: {name} takes no option {', '.join(sorted(keys))}: ignored for its "
                  "jobs, which are repeated along those dims", flush=True)


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


def _check_distinct_coordinates(jobs: list[PlannedJob]) -> None:
    seen: dict[str, PlannedJob] = {}
    for job in jobs:
        key = point_key(job.coords)  # 10 and 10.0 are one value (for an undeclared key too)
        other = seen.setdefault(key, job)
        if other is not job and other.hash != job.hash:
            raise InputError(f"sweep points '{' '.join(other.overrides)}' and "
                             f"'{' '.join(job.overrides)}' differ but have the same coordinates; "
                             "sweep the differing key explicitly")

