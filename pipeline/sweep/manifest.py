"""A sweep directory's manifest (``manifest.json``: its points, dims, settings and timings),
written under the directory's lock with its checksum (:mod:`pipeline.results.manifest_file`);
a sweep with other points or settings is refused unless ``merge=true``, and a refused sweep
leaves Hydra's record as it was. A damaged manifest (unreadable, failing its checksum, an entry
without its hash) is rebuilt from the sweep's points, with a ``note:`` naming it, when the
directory's results show the same sweep; else the sweep stops with one line.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from algorithms.errors import InputError
from pipeline import atomic
from pipeline.job.identity import job_config
from pipeline.results.checksum import DamagedFile, note
from pipeline.results.manifest_file import FIXED_DIMS, MANIFEST, dump_manifest, load_manifest
from pipeline.sweep.claims import claim
from pipeline.sweep.compose import PlannedJob, swept_keys


def _point(coords: Mapping) -> str:
    return json.dumps({k: str(v) for k, v in coords.items()}, sort_keys=True)


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
            points.add(_point(coords))
    return points == {_point(job.coords) for job in jobs}


def entries_kept(sweep_dir: Path, old: dict | None, jobs: list[PlannedJob], dims: list[str],
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
def sweep_lock(sweep_dir: Path):
    """Held while a sweep reads and writes its directory's manifest and results."""
    with claim(sweep_dir / SWEEP_LOCK):
        yield


def manifest_entries(jobs: list[PlannedJob]) -> list[dict]:
    return [{"overrides": j.overrides, "coords": j.coords, "hash": j.hash, "setting": j.setting}
            for j in jobs]


def entry_set(entries: list[dict]) -> set[tuple[str, str]]:
    return {(_point(e["coords"]), e["hash"]) for e in entries}


SWEEP_LOCK = "sweep.lock"


HYDRA_RECORD = "multirun.yaml"  # Hydra's record of the sweep, written before the launcher runs


HYDRA_RECORD_KEPT = "manifest.multirun.yaml"  # that of the sweep the manifest describes


def write_bytes(path: Path, content: bytes | None) -> None:
    """Make ``path`` hold ``content`` (None: remove it), atomically."""
    if content is None:
        path.unlink(missing_ok=True)
        return
    atomic.write_bytes(path, content)  # a fresh temporary name, renamed onto path


def restore_hydra_record(sweep_dir: Path) -> None:
    """A refused sweep leaves the directory as it was: Hydra has already replaced its
    ``multirun.yaml``, so put back that of the sweep the directory holds."""
    kept = sweep_dir / HYDRA_RECORD_KEPT
    if kept.exists():
        write_bytes(sweep_dir / HYDRA_RECORD, kept.read_bytes())


def write_manifest(sweep_dir: Path, master: DictConfig, jobs: list[PlannedJob], kept: list[dict],
                    extra_dims: list[str], timings: dict,
                    n_workers: int) -> None:
    manifest = {
        "sweep": sweep_dir.name,
        "command": list(master.hydra.overrides.task),
        "config": job_config(master),
        "swept_keys": swept_keys([job.composed for job in jobs]),
        "extra_dims": extra_dims,
        "entries": kept + manifest_entries(jobs),
        "timings": timings,
        "n_workers": n_workers,
    }
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_bytes(sweep_dir / MANIFEST, dump_manifest(manifest))
    if (sweep_dir / HYDRA_RECORD).exists():
        write_bytes(sweep_dir / HYDRA_RECORD_KEPT, (sweep_dir / HYDRA_RECORD).read_bytes())

