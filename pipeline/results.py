"""Result files: one small netCDF file per job, consolidated into one zarr Dataset per sweep.

A job's ``result.nc`` holds trace variables over dim ``step`` (objective, dual_objective, gap,
test_rmse, n_basis, seconds, ...), the solution over dim ``basis`` (``basis`` indices in
selection order and ``coef``), and attrs ``status`` (ok | failed), ``error``, ``config``
(resolved job config, JSON), ``config_hash`` (the job's identity), ``summary`` (final scalars,
JSON), ``versions``, ``git_sha``, ``host``, ``worker``, ``run_id``, ``job_seconds``. netCDF (scipy
engine) writes in ~3 ms where a zarr directory of a dozen arrays takes ~70 ms, which matters for
sweeps of many small jobs; xarray opens both the same way.

:func:`consolidate` turns a sweep directory (``manifest.json`` + ``jobs/<hash>.nc``) into
``results.zarr`` with dims ``algorithm, dataset, lam, kappa, seed`` (+ one per other swept key)
and ``step`` (and ``hyper_eval`` when hyperparameters were learned); :func:`load` opens
it. Every file is written to a temporary sibling and renamed into
place, so a failing job never leaves a half-written result and never damages an earlier one; a
write that fails (a full disk, an unwritable directory) is an InputError naming the path and the
OS's reason. ``results.zarr`` uses zarr format 2, which every zarr reader understands, strings
included. Like a dataset store it carries content hashes: attrs ``content_sha256`` (JSON, the
sha256 of every variable, coordinates included) and ``attrs_sha256`` (of the other attrs);
:func:`load` checks them, so a damaged store is reported (with how to rebuild it), never read.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import json
import math
import os
import platform
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import xarray as xr
from scipy.io import netcdf_file

import pipeline.access  # noqa: F401  (registers the ds.sgp accessor on every loaded Dataset)
from algorithms.contract import Result
from algorithms.errors import InputError
from pipeline.datasets.spec import StoreError
from pipeline.datasets.store import ATTRS_DIGEST, attrs_digest
from pipeline.variables import describe_dataset

PACKAGES = ("numpy", "scipy", "dask", "distributed", "xarray", "zarr", "hydra-core")
FIXED_DIMS = ("algorithm", "dataset", "lam", "kappa", "seed")
# 1-d job variables gathered into the sweep Dataset, NaN-padded: a fit's trace over ``step``,
# the hyperparameter optimiser's over ``hyper_eval`` (every evaluation of every run)
PADDED_DIMS = ("step", "hyper_eval")


@functools.cache
def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


@functools.cache
def git_sha() -> str:
    """Commit of the source tree this package runs from, or 'unknown'."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


JOB_FILE = "result.nc"


def job_path(sweep_dir: str | os.PathLike, job_hash: str) -> Path:
    """Where a sweep keeps the result of the job named ``job_hash`` (its Hydra output dir)."""
    return Path(sweep_dir) / "jobs" / job_hash / JOB_FILE


def _jsonable(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _base_attrs(config: Mapping, attrs: Mapping) -> dict:
    """Attrs of every job file; ``attrs`` must hold the job's ``config_hash`` (its identity,
    :func:`pipeline.job.config_hash`)."""
    if "config_hash" not in attrs:
        raise ValueError("a job file needs its config_hash")
    return {
        "config": json.dumps(config, sort_keys=True, default=str),
        "versions": json.dumps(package_versions(), sort_keys=True),
        "git_sha": git_sha(),
        "host": platform.node(),
        "run_id": uuid.uuid4().hex,
        **attrs,
    }


def result_to_dataset(result: Result, config: Mapping, attrs: Mapping,
                      extra_vars: Mapping | None = None) -> xr.Dataset:
    """A finished job's result as an xarray Dataset: trace variables over ``step``, the
    result's own arrays (a fit's basis and coefficients), ``extra_vars`` (name -> (dims,
    values), e.g. the hyperparameter optimiser's trace over ``hyper_eval``), the summary and the
    reasons for quantities that do not apply as JSON attrs."""
    data_vars = {name: ("step", np.asarray(values)) for name, values in result.trace.items()}
    data_vars.update(result.variables())
    data_vars.update(extra_vars or {})
    summary = {k: _jsonable(v) for k, v in result.summary.items()}
    all_attrs = {"algorithm": result.algorithm, "kind": result.kind, "status": "ok", "error": "",
                 "summary": json.dumps(summary, sort_keys=True),
                 "not_applicable": json.dumps(dict(result.not_applicable), sort_keys=True),
                 **_base_attrs(config, attrs)}
    return describe_dataset(xr.Dataset(data_vars,
                                       coords={"step": np.arange(1, result.n_steps + 1)},
                                       attrs=all_attrs))


def _os_reason(err: OSError) -> str:
    name = errno.errorcode.get(err.errno or 0)
    return f"{err.strerror or err}" + (f" ({name})" if name else "")


def _write_atomically(ds: xr.Dataset, path: str | os.PathLike, *,
                      check: Callable[[Path], None] | None = None) -> Path:
    """Write ``ds`` to ``path`` (``.nc``: netCDF file, else zarr directory) via a temporary
    sibling renamed into place; ``check(tmp)`` may read the written copy back before that.

    Raises :class:`InputError` naming ``path`` and the OS's reason when the write fails (a full
    disk, an unwritable directory); the file or store already at ``path`` is then left as it
    was and no temporary sibling remains."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    old = path.with_name(f"{path.name}.old-{uuid.uuid4().hex[:8]}")
    moved_old = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".nc":
            ds.to_netcdf(tmp, engine="scipy")
            os.replace(tmp, path)
            return path
        ds.to_zarr(tmp, mode="w", zarr_format=2, consolidated=True)
        if check is not None:
            check(tmp)
        if path.exists():
            os.rename(path, old)
            moved_old = True
        try:
            os.rename(tmp, path)
        except OSError:
            if moved_old:  # put the previous store back
                os.rename(old, path)
                moved_old = False
            raise
        return path
    except OSError as err:
        raise InputError(f"cannot write {path}: {_os_reason(err)}; free space on its file "
                         f"system or make {path.parent} writable, then rerun") from None
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # e.g. its directory could not be made
                tmp.unlink(missing_ok=True)
        if moved_old and path.exists():  # replaced: the previous store goes
            shutil.rmtree(old, ignore_errors=True)


def _open_job(path: str | os.PathLike) -> xr.Dataset:
    with xr.open_dataset(path, engine="scipy") as ds:
        return ds.load()


@dataclass(frozen=True)
class _Variable:
    dims: tuple[str, ...]
    values: np.ndarray


@dataclass(frozen=True)
class _JobFile:
    """A job file as consolidation reads it (attrs, sizes, data variables), read with scipy's
    netCDF reader directly: ~0.4 ms a file against ~3 ms through xarray's decoding, for a
    sweep of thousands of jobs. Files this reader does not decode as xarray would (packed or
    character variables, fill values other than NaN) are read through xarray."""

    attrs: dict
    sizes: dict
    data_vars: dict

    def __contains__(self, name: str) -> bool:
        return name in self.data_vars

    def __getitem__(self, name: str) -> _Variable:
        return self.data_vars[name]


def _read_job(path: str | os.PathLike) -> _JobFile | xr.Dataset:
    with netcdf_file(path, mmap=False) as nc:
        attrs = {k: _attr(v) for k, v in nc._attributes.items()}
        sizes = {k: int(v) for k, v in nc.dimensions.items() if v is not None}
        data_vars = {}
        for name, var in nc.variables.items():
            extra = set(var._attributes) - {"long_name", "units", "_FillValue"}
            fill = var._attributes.get("_FillValue")
            if extra or var.data.dtype.kind not in "fi" or len(var.dimensions) > 1 or (
                    fill is not None and not np.all(np.isnan(fill))):
                return _open_job(path)
            if var.dimensions != (name,):  # a variable named as its dim is a coordinate
                values = var.data.astype(var.data.dtype.newbyteorder("="))
                data_vars[name] = _Variable(var.dimensions, values)
    return _JobFile(attrs, sizes, data_vars)


def _attr(value):
    if isinstance(value, bytes):
        return value.decode()
    value = np.asarray(value)
    return value.item() if value.size == 1 else value


def write_job_result(result: Result, config: Mapping, path: str | os.PathLike,
                     attrs: Mapping, extra_vars: Mapping | None = None) -> Path:
    """Write a finished job's result file (``result.nc``) atomically."""
    return _write_atomically(result_to_dataset(result, config, attrs, extra_vars), path)


def write_job_failure(config: Mapping, error: str, path: str | os.PathLike,
                      attrs: Mapping) -> Path:
    """Record a failed job (status failed, the error text kept) atomically."""
    ds = xr.Dataset(attrs={"algorithm": config["algorithm"]["name"], "status": "failed",
                           "error": error, "summary": "{}", **_base_attrs(config, attrs)})
    return _write_atomically(ds, path)


def job_status(path: str | os.PathLike) -> tuple[str, str] | None:
    """(status, config_hash) of a job result file, or None if there is no readable one."""
    try:  # scipy's reader: a sweep looks up thousands of these
        with netcdf_file(path, mmap=False) as nc:
            attrs = nc._attributes
            return str(_attr(attrs["status"])), str(_attr(attrs["config_hash"]))
    except Exception:  # missing or unreadable: the job has to run (again)
        return None


def load_job_result(path: str | os.PathLike) -> xr.Dataset:
    """Open one job's result file (config, summary and versions parsed back from JSON)."""
    ds = _open_job(path)
    for key in ("config", "summary", "versions", "not_applicable"):
        if key in ds.attrs:
            ds.attrs[key] = json.loads(ds.attrs[key])
    return ds


# ---------------------------------------------------------------------------- consolidation

def _coordinate(values: list) -> np.ndarray:
    """Sorted unique coordinate values: numeric when all are numbers, else strings."""
    unique = list(dict.fromkeys(values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in unique):
        return np.array(sorted(unique))
    return np.array(sorted(str(v) for v in unique))


def _coord_key(value, coord: np.ndarray):
    return value if coord.dtype.kind in "iuf" else str(value)


def consolidate(sweep_dir: str | os.PathLike) -> Path:
    """Build ``<sweep_dir>/results.zarr`` from the manifest and the per-job files.

    Idempotent: the same job files always give the same Dataset (it is rewritten atomically).
    Jobs shared by several sweep points (κ for algorithms that ignore it, the seed for
    deterministic ones) are repeated along those dims. Traces are NaN-padded along ``step``.
    """
    sweep_dir = Path(sweep_dir)
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    entries = manifest["entries"]
    dims = list(FIXED_DIMS) + list(manifest["extra_dims"])
    coords = {d: _coordinate([e["coords"][d] for e in entries]) for d in dims}
    shape = tuple(len(coords[d]) for d in dims)

    jobs: dict[str, _JobFile | xr.Dataset | None] = {}
    for entry in entries:
        h = entry["hash"]
        if h not in jobs:
            path = job_path(sweep_dir, h)
            try:
                jobs[h] = _read_job(path)
            except (OSError, ValueError):  # not run, or unreadable: status "missing"
                jobs[h] = None
    loaded = [ds for ds in jobs.values() if ds is not None]
    lengths = {dim: max([ds.sizes.get(dim, 0) for ds in loaded] + [1]) for dim in PADDED_DIMS}
    trace_dims = {v: da.dims[0] for ds in loaded for v, da in ds.data_vars.items()
                  if len(da.dims) == 1 and da.dims[0] in PADDED_DIMS}
    trace_vars = sorted(trace_dims)
    summaries = {h: json.loads(ds.attrs["summary"]) for h, ds in jobs.items() if ds is not None}
    final_keys = sorted({k for s in summaries.values() for k, v in s.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})
    text_keys = sorted({k for s in summaries.values() for k, v in s.items()
                        if isinstance(v, str)} - set(final_keys))

    traces = {v: np.full(shape + (lengths[trace_dims[v]],), np.nan) for v in trace_vars}
    finals = {k: np.full(shape, np.nan) for k in final_keys}
    texts = {k: np.full(shape, "", dtype=object) for k in text_keys}
    job_seconds = np.full(shape, np.nan)
    status = np.full(shape, "missing", dtype=object)
    error = np.full(shape, "", dtype=object)
    worker = np.full(shape, "", dtype=object)
    job_hash = np.full(shape, "", dtype=object)
    for entry in entries:
        index = tuple(int(np.flatnonzero(coords[d] == _coord_key(entry["coords"][d], coords[d]))[0])
                      for d in dims)
        job_hash[index] = entry["hash"]
        ds = jobs[entry["hash"]]
        if ds is None:
            continue
        status[index] = ds.attrs["status"]
        error[index] = ds.attrs.get("error", "")
        worker[index] = ds.attrs.get("worker", "")
        job_seconds[index] = ds.attrs.get("job_seconds", np.nan)
        for v in trace_vars:
            if v in ds:
                values = ds[v].values.astype(np.float64)
                traces[v][index][: len(values)] = values
        for k, value in summaries[entry["hash"]].items():
            if k in finals and isinstance(value, (int, float)):
                finals[k][index] = value
            elif k in texts and isinstance(value, str):
                texts[k][index] = value

    data_vars = {v: (dims + [trace_dims[v]], a) for v, a in traces.items()}
    data_vars.update({f"final_{k}": (dims, a) for k, a in finals.items()})
    data_vars.update({f"final_{k}": (dims, a.astype(str)) for k, a in texts.items()})
    data_vars["job_seconds"] = (dims, job_seconds)
    for name, values in (("status", status), ("error", error), ("worker", worker),
                         ("job_hash", job_hash)):
        data_vars[name] = (dims, values.astype(str))
    attrs = {
        "sweep": manifest["sweep"],
        "config": json.dumps(manifest["config"], sort_keys=True, default=str),
        "swept_keys": json.dumps(manifest["swept_keys"]),
        "versions": json.dumps(package_versions(), sort_keys=True),
        "git_sha": git_sha(),
        "host": platform.node(),
        "timings": json.dumps(manifest.get("timings", {})),  # of the sweep's last invocation
        "n_workers": manifest.get("n_workers", 0),
        "step_meaning": "iteration number (1-based); the basis size is the n_basis variable",
        "Conventions": "CF-1.10 (long_name and units on every variable and coordinate)",
    }
    padded = {dim: np.arange(1, lengths[dim] + 1) for dim in PADDED_DIMS
              if dim == "step" or dim in trace_dims.values()}
    ds = describe_dataset(xr.Dataset(data_vars, coords={**coords, **padded}, attrs=attrs))
    ds.attrs["content_sha256"] = json.dumps(
        {name: _hash_values(var.values) for name, var in ds.variables.items()}, sort_keys=True)
    ds.attrs[ATTRS_DIGEST] = attrs_digest(ds.attrs)  # as for a dataset store
    return _write_atomically(ds, sweep_dir / "results.zarr", check=_read_back)


# ---------------------------------------------------------------------------- loading, checks

HASH_ATTRS = ("content_sha256", ATTRS_DIGEST)
JSON_ATTRS = ("config", "versions", "swept_keys", "timings", "content_sha256")


def _hash_values(values: np.ndarray) -> str:
    """sha256 of an array's shape and values, the same for what consolidation holds in memory
    and what a zarr reader decodes (floats as <f8 with one NaN, integers as <i8, text as
    UTF-8)."""
    values = np.asarray(values)
    h = hashlib.sha256(json.dumps(list(values.shape)).encode())
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), np.nan, values)
        h.update(b"f8" + np.ascontiguousarray(values, dtype="<f8").tobytes())
    elif values.dtype.kind in "iub":
        h.update(b"i8" + np.ascontiguousarray(values, dtype="<i8").tobytes())
    else:
        h.update(b"str" + json.dumps([str(v) for v in values.ravel().tolist()]).encode())
    return h.hexdigest()


def _read_back(tmp: Path) -> None:
    """What consolidation wrote must verify before it replaces the previous store."""
    try:
        _check_metadata_files(tmp)
        with xr.open_zarr(tmp, consolidated=True) as ds:
            _verify(tmp, ds)
    except StoreError as err:
        raise OSError(errno.EIO, f"the written store does not read back ({err})") from None


def _rebuild(path: Path) -> str:
    return (f"rebuild it by rerunning the sweep command that wrote it (sweep="
            f"{path.parent.name}): only consolidation runs, no finished job is refitted")


def _damaged(path: Path, what: str) -> StoreError:
    return StoreError(f"results store {path} {what}; {_rebuild(path)}")


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _check_is_results_store(path: Path, *, consolidated: bool = True) -> None:
    """One line saying what ``path`` is when it is not a sweep's results store (or, with
    ``consolidated``, one without its consolidated metadata)."""
    expected = "pass the results.zarr a sweep printed (its last line is `results: <path>`)"
    if not path.exists():
        raise StoreError(f"{path} does not exist; {expected}")
    if path.is_file():
        if path.suffix == ".nc":
            raise StoreError(f"{path} is one job's result file, not a sweep's results store "
                             f"(open it with pipeline.results.load_job_result); {expected}")
        raise StoreError(f"{path} is a file, not a sweep's results store (a results.zarr "
                         f"directory); {expected}")
    if (path / "zarr.json").exists():
        attrs = (_read_json(path / "zarr.json") or {}).get("attributes", {})
        what = ("a dataset store (written by ingest)" if "spec_hash" in attrs
                else "a zarr v3 store")
        raise StoreError(f"{path} is {what}, not a sweep's results store; {expected}")
    if not (path / ".zgroup").exists():
        if (path / "results.zarr").is_dir():
            raise StoreError(f"{path} is a sweep directory; pass {path / 'results.zarr'}")
        raise StoreError(f"{path} is a directory but not a zarr store (no .zgroup); {expected}")
    attrs = _read_json(path / ".zattrs")
    if attrs is not None and "sweep" not in attrs:
        raise StoreError(f"{path} is a zarr store but not a sweep's results (no sweep attr); "
                         f"{expected}")
    if consolidated and not (path / ".zmetadata").exists():
        raise _damaged(path, "lacks .zmetadata (its consolidated metadata)")


def _check_metadata_files(path: Path) -> None:
    """Every metadata file agrees with the consolidated copy in .zmetadata (which is what
    readers use): an edit to one of them is damage too."""
    consolidated = _read_json(path / ".zmetadata")
    if not isinstance(consolidated, dict) or not isinstance(consolidated.get("metadata"), dict):
        raise _damaged(path, "has an unreadable .zmetadata")
    for key, meta in consolidated["metadata"].items():
        variable = key.rpartition("/")[0]
        if variable and not (path / variable).is_dir():
            raise _damaged(path, f"lacks variable {variable} (its directory is gone)")
        on_disk = _read_json(path / key)
        if on_disk is None:
            raise _damaged(path, f"lacks or cannot parse {key}")
        if on_disk != meta:
            raise _damaged(path, f"has {key} different from its copy in .zmetadata (edited)")


def _missing_chunks(path: Path, name: str) -> list[str]:
    """Chunk files of variable ``name`` that are not on disk (zarr format 2). Chunks that hold
    only the fill value are never written, so a missing chunk matters only when the variable
    fails its checksum."""
    meta = _read_json(path / name / ".zarray") or {}
    shape, chunks = meta.get("shape", []), meta.get("chunks", [])
    sep = meta.get("dimension_separator") or "."
    grid = [range(math.ceil(n / c)) if c else range(1) for n, c in zip(shape, chunks,
                                                                          strict=False)]
    keys = [sep.join(map(str, idx)) for idx in itertools.product(*grid)] if grid else ["0"]
    return [f"{name}/{key}" for key in keys if not (path / name / key).exists()]


def _verify(path: Path, ds: xr.Dataset) -> None:
    """Check the attrs and every variable against the hashes consolidation recorded."""
    attrs = ds.attrs
    if not all(key in attrs for key in HASH_ATTRS):
        raise _damaged(path, "has no content hashes (consolidated by an older version; "
                             "load(path, verify=False) opens it unchecked)")
    if attrs_digest(attrs) != attrs[ATTRS_DIGEST]:
        raise _damaged(path, "has attrs that differ from what consolidation wrote (edited: "
                             "attrs_sha256 does not match)")
    try:
        recorded = json.loads(attrs["content_sha256"])
    except (TypeError, ValueError):
        raise _damaged(path, "has a malformed content_sha256 attr") from None
    names = set(ds.variables)
    if set(recorded) - names:
        raise _damaged(path, f"lacks variable {min(set(recorded) - names)}")
    if names - set(recorded):
        raise _damaged(path, f"has variable {min(names - set(recorded))}, which consolidation "
                             "did not write")
    for name in sorted(recorded):
        try:
            values = ds[name].values
        except Exception as err:  # a truncated or garbled chunk fails to decompress/decode
            raise _damaged(path, f"has an unreadable chunk in variable {name} "
                                 f"({_one_line(err)})") from None
        if _hash_values(values) != recorded[name]:
            missing = _missing_chunks(path, name)
            what = (f"lacks chunk file {missing[0]}" if missing else
                    f"has variable {name} different from what consolidation wrote (a chunk "
                    "was changed)")
            raise _damaged(path, f"fails its checksum: {what}")


def load(path: str | os.PathLike, *, verify: bool = True) -> xr.Dataset:
    """Open a sweep's ``results.zarr`` lazily; JSON attrs (config, versions, ...) are parsed.

    With ``verify`` (the default) the metadata files, the attrs and every variable are checked
    against the hashes consolidation recorded (this reads the store once).

    Raises
    ------
    StoreError
        ``path`` is missing or not a results store (a plain directory, a file, a dataset
        store), or the store is damaged (a deleted, truncated or changed chunk, an edited attr
        or metadata file, no .zmetadata); the message says what and how to rebuild it.
    """
    path = Path(path).expanduser()
    _check_is_results_store(path, consolidated=verify)
    if verify:
        _check_metadata_files(path)
    try:
        ds = xr.open_zarr(path, consolidated=verify or (path / ".zmetadata").exists())
    except Exception as err:  # any zarr/JSON/decoding failure means an unusable store
        if not verify:
            raise
        raise _damaged(path, f"cannot be opened ({_one_line(err)})") from None
    if verify:
        try:
            _verify(path, ds)
        except BaseException:
            ds.close()
            raise
    for key in JSON_ATTRS:
        if isinstance(ds.attrs.get(key), str):
            ds.attrs[key] = json.loads(ds.attrs[key])
    return ds
