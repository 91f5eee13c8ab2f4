"""Result files: one small netCDF file per job, consolidated into one zarr Dataset per sweep.

A job's ``result.nc`` holds trace variables over dim ``step`` (objective, dual_objective, gap,
test_rmse, n_basis, seconds, ...), the solution over dim ``basis`` (``basis`` indices in
selection order and ``coef``), and attrs ``status`` (ok | failed), ``error``, ``config``
(resolved job config, JSON), ``config_hash`` (the job's identity), ``summary`` (final scalars,
JSON), ``versions``, ``git_sha``, ``host``, ``worker``, ``run_id``, ``job_seconds``. netCDF (scipy
engine) writes in ~3 ms where a zarr directory of a dozen arrays takes ~70 ms, which matters for
sweeps of many small jobs; xarray opens both the same way. Every job file carries the sha256 of
its payload (:mod:`pipeline.checksum`), as the manifest carries its own: consolidation
verifies both, and a job file that is unreadable, fails its checksum or does not parse is left
out (status ``missing``, its error saying why, a ``note:`` naming it), never consolidated.

:func:`consolidate` turns a sweep directory (``manifest.json`` + ``jobs/<hash>.nc``) into
``results.zarr`` with dims ``algorithm, dataset, lam, kappa, seed`` (+ one per other swept key)
and ``step`` (and ``hyper_eval`` when hyperparameters were learned); :func:`load` opens
it. Every file is written to a temporary sibling and renamed into
place, so a failing job never leaves a half-written result and never damages an earlier one; a
write that fails (a full disk, an unwritable directory) is an InputError naming the path and the
OS's reason. ``results.zarr`` is swapped in recoverably (:mod:`pipeline.results.store_swap`: a
kill between its renames is finished by the next run, and a reader meanwhile says so) and
records the files it wrote, so that a rerun refuses, rather than removes, anything else put
inside it (:mod:`pipeline.results.ownership`). ``results.zarr`` uses zarr format 2, which every
zarr reader understands, strings included. Like a dataset store it carries content hashes:
attrs ``content_sha256`` (JSON, the sha256 of every variable, coordinates included) and
``attrs_sha256`` (of the other attrs); :func:`load` checks them, so a damaged store is
reported (with how to rebuild it), never read.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np
import xarray as xr

from algorithms.errors import InputError
from pipeline.checksum import DamagedFile
from pipeline.datasets.store import ATTRS_DIGEST, attrs_digest
from pipeline.lines import note
from pipeline.results.access import SweepAccessor  # noqa: F401  (registers ds.sgp)
from pipeline.results.job_file import (
    DamagedResult,
    JobFile,
    git_sha,
    job_path,
    package_versions,
    parsed_attrs,
    read_job,
)
from pipeline.results.manifest_file import FIXED_DIMS, MANIFEST, load_manifest
from pipeline.results.ownership import not_a_file
from pipeline.results.store_swap import replace_store
from pipeline.results.variables import describe_dataset
from pipeline.results.verify import (
    check_is_results_store,
    check_metadata_files,
    damaged_store,
    error_text,
    hash_values,
    read_back,
    verify_store,
)

# 1-d job variables gathered into the sweep Dataset, NaN-padded: a fit's trace over ``step``,
# the hyperparameter optimiser's over ``hyper_eval`` (every evaluation of every run)
PADDED_DIMS = ("step", "hyper_eval")


def _coordinate(values: list) -> np.ndarray:
    """Sorted unique coordinate values: numeric (int64 or float64) when all are numbers that
    such an array holds distinctly, else strings (e.g. a seed beyond int64, which no zarr
    dtype holds)."""
    unique = list(dict.fromkeys(values))
    if unique and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in unique):
        try:
            coord = np.array(sorted(unique))
        except OverflowError:
            coord = np.array([], dtype=object)
        if coord.dtype.kind in "if" and len(np.unique(coord)) == len(unique):
            return coord
    return np.array(sorted(str(v) for v in unique))


def _coord_key(value, coord: np.ndarray):
    return value if coord.dtype.kind in "iuf" else str(value)


def consolidate(sweep_dir: str | os.PathLike, statuses: dict | None = None) -> Path:
    """Build ``<sweep_dir>/results.zarr`` from the manifest and the per-job files.

    Idempotent: the same job files always give the same Dataset (it is rewritten atomically).
    Jobs shared by several sweep points (κ for algorithms that ignore it, the seed for
    deterministic ones) are repeated along those dims. Traces are NaN-padded along ``step``.
    ``statuses``, where given, is filled with each job's status as read here (``ok`` or
    ``failed``; None for a job with no file or a damaged one, left out of the store), by
    hash: the sweep's report of its jobs without reading and verifying every file again.
    """
    sweep_dir = Path(sweep_dir)
    manifest = _manifest(sweep_dir)
    entries = manifest["entries"]
    dims = list(FIXED_DIMS) + list(manifest["extra_dims"])
    coords = {d: _coordinate([e["coords"][d] for e in entries]) for d in dims}
    jobs, summaries, damaged = _read_jobs(sweep_dir, entries)
    if statuses is not None:
        statuses.update({h: None if job is None else job.attrs["status"]
                         for h, job in jobs.items()})
    data_vars, padded = _variables(entries, dims, coords, jobs, summaries, damaged)
    ds = describe_dataset(xr.Dataset(data_vars, coords={**coords, **padded},
                                     attrs=_attrs(manifest, entries)))
    return replace_store(seal(ds), sweep_dir / "results.zarr", check=read_back)


def _manifest(sweep_dir: Path) -> dict:
    """The sweep's manifest, verified; a missing or damaged one is the one-line error."""
    try:
        return load_manifest(sweep_dir / MANIFEST, FIXED_DIMS)
    except (OSError, DamagedFile) as err:
        what = "does not exist" if isinstance(err, FileNotFoundError) else str(err)
        raise InputError(f"{sweep_dir / MANIFEST} {what}; rerun the sweep command that made "
                         f"{sweep_dir.name} to rebuild it (finished jobs are not refitted)"
                         ) from None


def _read_jobs(sweep_dir: Path, entries: list[dict]) -> tuple[dict, dict, dict]:
    """(job file or None, its summary, why it is left out) of each distinct job, by hash."""
    jobs: dict[str, JobFile | xr.Dataset | None] = {}
    summaries: dict[str, dict] = {}
    damaged: dict[str, str] = {}
    for entry in entries:
        h = entry["hash"]
        if h not in jobs:
            jobs[h], summaries[h], why = _job(sweep_dir, h)
            if why:
                damaged[h] = why
    return jobs, summaries, damaged


def _variables(entries: list[dict], dims: list[str], coords: dict, jobs: dict, summaries: dict,
               damaged: dict) -> tuple[dict, dict]:
    """The Dataset's variables over the sweep's dims (traces padded along their own dim) and
    the padded dims' coordinates."""
    shape = tuple(len(coords[d]) for d in dims)
    loaded = [ds for ds in jobs.values() if ds is not None]
    lengths = {dim: max([ds.sizes.get(dim, 0) for ds in loaded] + [1]) for dim in PADDED_DIMS}
    trace_dims = {v: da.dims[0] for ds in loaded for v, da in ds.data_vars.items()
                  if len(da.dims) == 1 and da.dims[0] in PADDED_DIMS}
    # numbers, and yes/no values as 1/0 (e.g. own_converged: publish counts the caps hit)
    final_keys = sorted({k for s in summaries.values() for k, v in s.items()
                         if isinstance(v, (int, float))})
    text_keys = sorted({k for s in summaries.values() for k, v in s.items()
                        if isinstance(v, str)} - set(final_keys))
    traces = {v: np.full(shape + (lengths[trace_dims[v]],), np.nan) for v in sorted(trace_dims)}
    finals = {k: np.full(shape, np.nan) for k in final_keys}
    texts = {k: np.full(shape, "", dtype=object) for k in text_keys}
    job_seconds = np.full(shape, np.nan)
    labels = {name: np.full(shape, "missing" if name == "status" else "", dtype=object)
              for name in ("status", "error", "worker", "job_hash")}
    for entry in entries:
        index = tuple(int(np.flatnonzero(coords[d] == _coord_key(entry["coords"][d], coords[d]))[0])
                      for d in dims)
        labels["job_hash"][index] = entry["hash"]
        ds = jobs[entry["hash"]]
        if ds is None:
            labels["error"][index] = damaged.get(entry["hash"], "")
            continue
        labels["status"][index] = ds.attrs["status"]
        labels["error"][index] = str(ds.attrs.get("error", ""))
        labels["worker"][index] = str(ds.attrs.get("worker", ""))
        job_seconds[index] = _number(ds.attrs.get("job_seconds", np.nan))
        for v, trace in traces.items():
            if v in ds and tuple(ds[v].dims) == (trace_dims[v],):
                values = ds[v].values.astype(np.float64)
                trace[index][: len(values)] = values
        for k, value in summaries[entry["hash"]].items():
            if k in finals and isinstance(value, (int, float)):
                finals[k][index] = _number(value)
            elif k in texts and isinstance(value, str):
                texts[k][index] = value

    data_vars = {v: (dims + [trace_dims[v]], a) for v, a in traces.items()}
    data_vars.update({f"final_{k}": (dims, a) for k, a in finals.items()})
    data_vars.update({f"final_{k}": (dims, a.astype(str)) for k, a in texts.items()})
    data_vars["job_seconds"] = (dims, job_seconds)
    for name, values in labels.items():
        data_vars[name] = (dims, values.astype(str))
    padded = {dim: np.arange(1, lengths[dim] + 1) for dim in PADDED_DIMS
              if dim == "step" or dim in trace_dims.values()}
    return data_vars, padded


def _attrs(manifest: dict, entries: list[dict]) -> dict:
    """The sweep's attrs: its config, swept keys, versions, host, timings and invocations."""
    return {
        "sweep": manifest["sweep"],
        "config": json.dumps(manifest.get("config", {}), sort_keys=True, default=str),
        "swept_keys": json.dumps(manifest.get("swept_keys", []), default=str),
        "versions": json.dumps(package_versions(), sort_keys=True),
        "git_sha": git_sha(),
        "host": platform.node(),
        "timings": json.dumps(manifest.get("timings", {})),  # of the sweep's last run
        "n_workers": int(_number(manifest.get("n_workers", 0), 0)),
        "invocations": json.dumps(_invocations(manifest, entries), default=str),
        "step_meaning": "iteration number (1-based); the basis size is the n_basis variable",
        "Conventions": "CF-1.10",
        "comment": "long_name on every variable and coordinate; units where UDUNITS can say "
                   "them, else a comment naming the data's units",
    }


def _invocations(manifest: dict, entries: list[dict]) -> list[dict]:
    """Every command that made the sweep (the manifest's ``invocations``; one, its
    ``command``, for a manifest written before they were kept), each with the points it added
    that the results hold (``entries``)."""
    found = manifest.get("invocations")
    if not isinstance(found, list) or not found:
        found = [{"command": manifest.get("command", []), "timings": manifest.get("timings", {}),
                  "n_workers": manifest.get("n_workers", 0), "swept_keys":
                  manifest.get("swept_keys", []), "hydra_record": "multirun.yaml"}]
    counts = [0] * len(found)
    for entry in entries:
        index = entry.get("invocation", 0)
        if isinstance(index, int) and 0 <= index < len(found):
            counts[index] += 1
    base = _flat(found[0].get("config") or manifest.get("config") or {})
    out = []
    for inv, n in zip(found, counts, strict=True):
        record = {k: v for k, v in dict(inv).items() if k != "config"}
        if "config" in inv:  # the first command's config is the store's; the others' changes
            flat = _flat(inv["config"] or {})
            record["config_changes"] = {k: flat.get(k) for k in sorted(set(flat) | set(base))
                                        if flat.get(k) != base.get(k)}
        out.append({**record, "entries": n})
    return out


def _flat(config, prefix: str = "") -> dict:
    """A nested config as ``dotted.key → value``."""
    if not isinstance(config, dict):
        return {prefix: config}
    out = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict)
                   else {f"{prefix}{key}": value})
    return out


def seal(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with the hashes :func:`load` verifies: attrs ``content_sha256`` (JSON, of every
    variable, coordinates included) and ``attrs_sha256`` (of the other attrs)."""
    ds.attrs.pop(ATTRS_DIGEST, None)
    ds.attrs["content_sha256"] = json.dumps(
        {name: hash_values(var.values) for name, var in ds.variables.items()}, sort_keys=True)
    ds.attrs[ATTRS_DIGEST] = attrs_digest(ds.attrs)  # as for a dataset store
    return ds


def _job(sweep_dir: Path, h: str) -> tuple[JobFile | xr.Dataset | None, dict, str]:
    """(job file, its summary, why it is left out) of the job ``h`` of a sweep: (None, {}, "")
    if it has not run; (None, {}, the reason) if its file is damaged (unreadable, failing its
    checksum, a summary that does not parse, filed under another job's name), which a
    ``note:`` names: it is never consolidated, and the sweep's next run refits it."""
    path = job_path(sweep_dir, h)
    try:
        odd = not_a_file(path)  # a directory there: never read as a result, never served
        if odd is not None:
            raise DamagedResult(path, odd)
        ds = read_job(path)
        attrs = parsed_attrs(path, ds.attrs)
        if attrs.get("status") not in ("ok", "failed"):
            raise DamagedResult(path, f"has status {attrs.get('status')!r}")
        if attrs.get("config_hash") != h:
            raise DamagedResult(path, f"names job {attrs.get('config_hash')!r}, not {h}")
    except (FileNotFoundError, NotADirectoryError):
        return None, {}, ""
    except DamagedResult as err:
        note(f"result file {err.path} {err.what}: left out of {sweep_dir / 'results.zarr'} "
             "(rerun the sweep command to refit its job)")
        return None, {}, str(err)
    return ds, attrs.get("summary", {}), ""


def _number(value, default: float = np.nan) -> float:
    """``value`` as a float (a number beyond float64 is inf); ``default`` if it is none."""
    try:
        return float(value)
    except OverflowError:
        return float(np.inf if value > 0 else -np.inf)
    except (TypeError, ValueError):
        return default


# encodings of the store's zarr format 2 codecs, which a zarr format 3 store (to_zarr's
# default) cannot take: dropped from what load returns, so that it writes to either format
STORE_CODECS = ("compressors", "compressor", "filters", "shards")


def load(path: str | os.PathLike, *, verify: bool = True) -> xr.Dataset:
    """Open a sweep's ``results.zarr`` lazily.

    With ``verify`` (the default) the metadata files, the attrs and every variable are checked
    against the hashes consolidation recorded (this reads the store once).

    The Dataset writes as it is with ``ds.to_netcdf(path)`` and ``ds.to_zarr(path)`` (zarr
    format 2 or 3: the store's codecs are not carried over): its attrs are text and numbers,
    those holding structures (``config``, ``versions``, ``swept_keys``, ``timings``,
    ``invocations``, ``content_sha256``, a combined store's ``sources``) JSON text, as in the
    store;
    ``ds.sgp.attrs`` (or :func:`pipeline.results.access.decoded_attrs`) gives them decoded,
    e.g. ``ds.sgp.attrs["config"]["kernel"]["width"]``.

    Raises
    ------
    StoreError
        ``path`` is missing or not a results store (a plain directory, a file, a dataset
        store), or the store is damaged (a deleted, truncated or changed chunk, an edited attr
        or metadata file, no .zmetadata); the message says what and how to rebuild it.
    """
    path = Path(path).expanduser()
    check_is_results_store(path, consolidated=verify)
    if verify:
        check_metadata_files(path)
    try:
        ds = xr.open_zarr(path, consolidated=verify or (path / ".zmetadata").exists())
    except Exception as err:  # any zarr/JSON/decoding failure means an unusable store
        if not verify:
            raise
        raise damaged_store(path, f"cannot be opened ({error_text(err)})") from None
    if verify:
        try:
            verify_store(path)
        except BaseException:
            ds.close()
            raise
    for var in ds.variables.values():
        for key in STORE_CODECS:
            var.encoding.pop(key, None)
    return ds
