"""A sweep directory's manifest (``manifest.json``: its points, dims, settings and timings,
and every command that made it, :mod:`pipeline.sweep.invocations`), written under the
directory's lock with its checksum (:mod:`pipeline.results.manifest_file`); a sweep with other
points or settings is refused unless ``merge=true``, and a refused sweep leaves Hydra's records
as they were. A damaged manifest (unreadable, failing its checksum, an entry
without its hash) is rebuilt from the sweep's points, with a ``note:`` naming it, when the
directory's results show the same sweep; else the sweep stops with one line.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from algorithms.errors import InputError
from pipeline import atomic
from pipeline.checksum import DamagedFile
from pipeline.config import lookup
from pipeline.config.overrides import override_keys
from pipeline.job.claims import claim
from pipeline.job.identity import job_config
from pipeline.job.numbers import coordinate_text
from pipeline.lines import note
from pipeline.results.manifest_file import FIXED_DIMS, MANIFEST, dump_manifest, load_manifest
from pipeline.sweep.compose import PlannedJob, swept_keys
from pipeline.sweep.invocations import (
    HYDRA_RECORD,
    HYDRA_RECORD_KEPT,
    RUN_ON,
    entry_invocation,
    history_text,
    invocation_index,
    invocations,
    ran_at,
    record_name,
    union_swept,
    updated,
)


def point_key(coords: Mapping) -> str:
    """A point's coordinates as one comparable text; a number as its float, so that the
    integer an older manifest recorded for a declared float (``lam: 1``) is the point it is now
    (``1.0``, :mod:`pipeline.job.numbers`)."""
    return json.dumps({k: coordinate_text(v) for k, v in coords.items()}, sort_keys=True)


def read_manifest(sweep_dir: Path) -> dict | None:
    """The manifest of ``sweep_dir``, verified (:func:`pipeline.results.manifest_file.
    load_manifest`), or None if there is none; :class:`DamagedFile` if it is damaged."""
    try:
        return load_manifest(sweep_dir / MANIFEST, FIXED_DIMS)
    except (FileNotFoundError, NotADirectoryError):
        return None


def old_dims(sweep_dir: Path) -> list[str]:
    try:
        old = read_manifest(sweep_dir)
    except DamagedFile:  # the launcher decides what to do with it
        return []
    return [] if old is None else list(old["extra_dims"])


def checked_manifest(sweep_dir: Path, jobs: list[PlannedJob], dims: list[str]) -> dict | None:
    """The manifest of ``sweep_dir`` for this sweep: None if there is none, or if it is
    damaged and the directory's verified ``results.zarr`` shows that it holds this very sweep
    (the same points over the same dims): this sweep's manifest then replaces it, said in a
    ``note:`` (the job results there are kept and found again by their hashes).

    Raises :class:`InputError` (one line) for a damaged manifest of a directory that may hold
    another sweep: nothing there is rewritten."""
    path = sweep_dir / MANIFEST
    try:
        return read_manifest(sweep_dir)
    except DamagedFile as err:
        if _holds(sweep_dir, jobs, dims):
            note(f"{path} {err}: rebuilt from this sweep's points, which its results.zarr "
                 "holds (the job results there are kept and found again)")
            return None
        raise InputError(f"{path} {err}, and {sweep_dir / 'results.zarr'} does not show that "
                         "it held this sweep; rerun the command that made that sweep to rebuild "
                         "it, pass sweep=<new name> for a new sweep directory, or delete that "
                         "file to make the directory this sweep's") from None


def _holds(sweep_dir: Path, jobs: list[PlannedJob], dims: list[str]) -> bool:
    """Whether ``sweep_dir/results.zarr`` verifies and holds exactly the points of ``jobs``
    over the fixed dims and ``dims``."""
    from pipeline.results.consolidate import load  # xarray: not for planning

    try:
        ds = load(sweep_dir / "results.zarr")
    except (InputError, OSError, ValueError):
        return False
    with ds:
        hashes = ds["job_hash"]
        if set(hashes.dims) != set(FIXED_DIMS) | set(dims):
            return False
        values = np.asarray(hashes.values)
        points = set()
        for index in zip(*np.nonzero(values != ""), strict=True):
            coords = {d: ds[d].values[i].item() for d, i in zip(hashes.dims, index,
                                                                  strict=True)}
            points.add(point_key(coords))
    return points == {point_key(job.coords) for job in jobs}


def entries_kept(sweep_dir: Path, old: dict | None, jobs: list[PlannedJob], dims: list[str],
                  merge: bool) -> list[dict]:
    """The entries of the sweep already in ``sweep_dir`` (its manifest ``old``) that this one
    keeps in its manifest.

    The same sweep points again, or some of them (a rerun: resume, or new results after data or
    code changed), keep the others; new points are refused unless ``merge=true`` adds them to
    the old ones (a key it sweeps that the old sweep did not is a new dim: ``old`` then has
    the old points along it, :func:`pipeline.sweep.plan.along_new_dims`), and points whose
    settings changed (a value that is not swept) are refused. Nothing is ever silently
    replaced. A refusal says which commands made the sweep and which of them resume its
    unfinished points (:func:`pipeline.sweep.invocations.history_text`)."""
    if old is None:
        return []
    check_run_on(sweep_dir, old, jobs, dims)
    old_entries, old_dims = old["entries"], list(old["extra_dims"])
    new_points = {point_key(job.coords): job.setting for job in jobs}
    old_points = {point_key(e["coords"]): e.get("setting") for e in old_entries}
    changed = [p for p, s in new_points.items() if old_points.get(p) not in (None, s)]
    if set(old_dims) == set(dims) and not changed and set(new_points) <= set(old_points):
        return [e for e in old_entries if point_key(e["coords"]) not in new_points]  # a rerun

    def what() -> str:
        return (f"{sweep_dir} holds another sweep ({len(old_points)} points over "
                f"{', '.join(list(FIXED_DIMS) + old_dims)}; {history_text(sweep_dir, old)}")

    if changed:
        raise InputError(f"{what()}; this sweep has the same points with other settings (a "
                         "changed value that is not swept); pass sweep=<new name> for a new "
                         "sweep directory")
    if not merge:
        raise InputError(f"{what()}; pass sweep=<new name> for a new sweep directory, or add "
                         "merge=true to add these points to it")
    refixed = fixed_values_changed(old_entries, jobs, [*FIXED_DIMS, *dims])
    if refixed:
        key, (was, now) = next(iter(refixed.items()))
        raise InputError(f"{what()}; merge=true cannot add points at {key}={now} to a sweep "
                         f"that fixed {key}={was}: a sweep keeps one value of a key that is "
                         f"not one of its dims, and would label these points with it; pass "
                         "sweep=<new name> for a new sweep directory")
    if set(old_dims) != set(dims):  # along_new_dims gave the old points every new dim
        raise InputError(f"{what()}; merge=true needs every dim of that sweep, but this one "
                         f"has {', '.join(list(FIXED_DIMS) + dims)}; pass sweep=<new name>")
    return [e for e in old_entries if point_key(e["coords"]) not in new_points]


def check_run_on(sweep_dir: Path, old: Mapping, jobs: Sequence[PlannedJob],
                 dims: Sequence[str]) -> None:
    """Raise InputError (one line) when this sweep's points run at another ``device`` or
    ``precision`` than the sweep in ``sweep_dir`` (its manifest ``old``) ran at, and that key
    is no dim of it. Those keys are in a job's identity but not in its point's coordinates,
    so such points would be the old points again under other job hashes: a merge or a rerun
    would replace or mix one device's results with another's under the same labels (and the
    store's config names the first). Refused before any job runs."""
    if not old.get("entries"):
        return
    for key in RUN_ON:
        if key in dims:
            continue
        was = sorted(ran_at(old, key))
        now = sorted({_run_on(job)[key] for job in jobs} - set(was))
        if now:
            raise InputError(
                f"the sweep in {sweep_dir} was run at {key}={'/'.join(was)}, and this command "
                f"runs its points at {key}={now[0]}: their results would replace or mix with "
                f"those under the same sweep points; pass sweep=<new name> for a new sweep "
                f"directory, or make {key} a swept dim of this one ({key}={was[0]},{now[0]} "
                "with merge=true)")


# command-line keys that set no job
NOT_SETTINGS = ("merge", "resume", "sweep", "dry_run", "relearn")


def _run_on(job: PlannedJob) -> dict[str, str]:
    """Where a planned job runs, by its :data:`~pipeline.sweep.invocations.RUN_ON` keys."""
    return {"device": job.spec.device.name, "precision": job.spec.device.precision}


def fixed_values_changed(old_entries: Sequence[Mapping], jobs: Sequence[PlannedJob],
                         dims: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``key → (old value, new value)`` for each key given on the command line that is no
    dim of the sweep, holds one value over every old point and another over every new one:
    the store records one config for the keys it does not sweep (the results table fills
    them from it), so such points would be labelled with the old value."""
    def values(overrides_lists) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for overrides in overrides_lists:
            for key, value in override_keys([str(a) for a in overrides or ()]).items():
                out.setdefault(key, set()).add(value)
        return out

    old = values(e.get("overrides") for e in old_entries)
    new = values(j.overrides for j in jobs)
    skip = set(dims) | set(NOT_SETTINGS)
    return {k: (next(iter(old[k])), next(iter(new[k]))) for k in old.keys() & new.keys()
            if k not in skip and len(old[k]) == len(new[k]) == 1 and old[k] != new[k]}


@contextlib.contextmanager
def sweep_lock(sweep_dir: Path):
    """Held while a sweep reads and writes its directory's manifest and results."""
    with claim(sweep_dir / SWEEP_LOCK):
        yield


def manifest_entries(jobs: list[PlannedJob], old: dict | None = None,
                     command: Sequence[str] = ()) -> list[dict]:
    """The entries of ``jobs``, each naming the invocation that added its point: that of
    ``old`` (the manifest they join) where it has the point, else that of ``command``."""
    index = invocation_index(invocations(old), command)
    first = {point_key(e["coords"]): entry_invocation(e) for e in (old or {}).get("entries", [])}
    return [{"overrides": j.overrides, "coords": j.coords, "hash": j.hash, "setting": j.setting,
             "invocation": first.get(point_key(j.coords), index)} for j in jobs]


def entry_set(entries: list[dict]) -> set[tuple[str, str]]:
    return {(point_key(e["coords"]), e["hash"]) for e in entries}


SWEEP_LOCK = "sweep.lock"


def write_bytes(path: Path, content: bytes | None) -> None:
    """Make ``path`` hold ``content`` (None: remove it), atomically."""
    if content is None:
        path.unlink(missing_ok=True)
        return
    atomic.write_bytes(path, content)  # a fresh temporary name, renamed onto path


def restore_hydra_record(sweep_dir: Path) -> None:
    """A refused sweep leaves the directory as it was: Hydra has already replaced its
    ``multirun.yaml``, so put back that of the sweep's first command."""
    kept = sweep_dir / HYDRA_RECORD_KEPT
    if kept.exists():
        write_bytes(sweep_dir / HYDRA_RECORD, kept.read_bytes())


def keep_hydra_record(sweep_dir: Path, old: dict | None, command: Sequence[str]) -> list[Path]:
    """Hydra's record of this command (the ``multirun.yaml`` it has just written) kept as that
    of its invocation: the first command's stays ``multirun.yaml`` (with a copy that puts it
    back), a later one's goes to ``multirun.<n>.yaml`` and ``multirun.yaml`` is the first's
    again. Returns the files made that were not there."""
    hydra = sweep_dir / HYDRA_RECORD
    if not hydra.exists():
        return []
    index = invocation_index(invocations(old), command)
    target = sweep_dir / (HYDRA_RECORD_KEPT if index == 0 else record_name(index))
    made = [] if target.exists() else [target]
    write_bytes(target, hydra.read_bytes())
    if index:
        restore_hydra_record(sweep_dir)
    return made


def run_config(master: DictConfig, jobs: Sequence[PlannedJob], swept: Sequence[str]) -> dict:
    """The run's config: the master's (:func:`~pipeline.job.identity.job_config`), with every
    key that the sweep's points all set to one value at that value (a sweep parameter of one
    value, ``protocol: own`` in an experiment's grid, is in no point's coordinates and not in
    the master config, so the store's attrs would otherwise hold the default); ``swept``: the
    keys that take several values (:func:`swept_keys` of the points)."""
    config = job_config(master)
    if not jobs:
        return config
    first = jobs[0].composed
    fixed = [key for key, _ in first.keys if key not in swept and "@" not in key]
    if fixed:
        composed = first.config()
        for key in fixed:
            parent, _, last = key.lstrip("+~").rpartition(".")
            node, value = lookup(config, parent), lookup(composed, key.lstrip("+~"))
            if isinstance(node, dict) and value is not None:
                node[last] = value
    return config


def write_manifest(sweep_dir: Path, master: DictConfig, jobs: list[PlannedJob], kept: list[dict],
                    extra_dims: list[str], timings: dict, n_workers: int,
                    old: dict | None = None, ran: Sequence[str] = ()) -> None:
    """Write the manifest of ``sweep_dir``: ``kept`` (the entries of ``old``, the manifest
    there, that stay) and the points of ``jobs``, with this command's invocation recorded
    (:mod:`pipeline.sweep.invocations`: its points, the jobs ``ran``, ``timings``,
    ``n_workers``) beside the others of ``old``. ``command``, ``config`` are the first
    command's, ``swept_keys`` the union of every command's, ``timings`` and ``n_workers``
    this run's."""
    command = [str(a) for a in master.hydra.overrides.task]
    records = invocations(old)
    index = invocation_index(records, command)
    entries = kept + manifest_entries(jobs, old, command)
    known = {point_key(e["coords"]) for e in (old or {}).get("entries", [])}
    swept = swept_keys([job.composed for job in jobs])
    records = updated(records, index, command=command, config=run_config(master, jobs, swept),
                      swept=swept, points=len(jobs),
                      added=sum(point_key(j.coords) not in known for j in jobs), ran=sorted(ran),
                      timings=timings, n_workers=n_workers)
    manifest = {
        "sweep": sweep_dir.name,
        "command": records[0]["command"],  # the first command's, as before invocations
        "config": records[0]["config"],
        "swept_keys": union_swept(records, entries, [*FIXED_DIMS, *extra_dims]),
        "extra_dims": extra_dims,
        "entries": entries,
        "timings": timings,  # this run's; each command's in its invocation
        "n_workers": n_workers,
        "invocations": records,
    }
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_bytes(sweep_dir / MANIFEST, dump_manifest(manifest))
