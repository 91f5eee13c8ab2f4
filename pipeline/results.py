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
and ``step``; :func:`load` opens it. Every file is written to a temporary sibling and renamed into
place, so a failing job never leaves a half-written result and never damages an earlier one.
``results.zarr`` uses zarr format 2, which every zarr reader understands, strings included.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import numpy as np
import xarray as xr

from algorithms.contract import Result

PACKAGES = ("numpy", "scipy", "dask", "distributed", "xarray", "zarr", "hydra-core")
FIXED_DIMS = ("algorithm", "dataset", "lam", "kappa", "seed")


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


def result_to_dataset(result: Result, config: Mapping, attrs: Mapping) -> xr.Dataset:
    """A finished job's result as an xarray Dataset: trace variables over ``step``, the
    result's own arrays (a fit's basis and coefficients), the summary and the reasons for
    quantities that do not apply as JSON attrs."""
    data_vars = {name: ("step", np.asarray(values)) for name, values in result.trace.items()}
    data_vars.update(result.variables())
    summary = {k: _jsonable(v) for k, v in result.summary.items()}
    all_attrs = {"algorithm": result.algorithm, "kind": result.kind, "status": "ok", "error": "",
                 "summary": json.dumps(summary, sort_keys=True),
                 "not_applicable": json.dumps(dict(result.not_applicable), sort_keys=True),
                 **_base_attrs(config, attrs)}
    return xr.Dataset(data_vars, coords={"step": np.arange(1, result.n_steps + 1)},
                      attrs=all_attrs)


def _write_atomically(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write ``ds`` to ``path`` (``.nc``: netCDF file, else zarr directory) via a temporary
    sibling renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    if path.suffix == ".nc":
        try:
            ds.to_netcdf(tmp, engine="scipy")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path
    old = path.with_name(f"{path.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        ds.to_zarr(tmp, mode="w", zarr_format=2, consolidated=True)
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
    return path


def _open_job(path: str | os.PathLike) -> xr.Dataset:
    with xr.open_dataset(path, engine="scipy") as ds:
        return ds.load()


def write_job_result(result: Result, config: Mapping, path: str | os.PathLike,
                     attrs: Mapping) -> Path:
    """Write a finished job's result file (``result.nc``) atomically."""
    return _write_atomically(result_to_dataset(result, config, attrs), path)


def write_job_failure(config: Mapping, error: str, path: str | os.PathLike,
                      attrs: Mapping) -> Path:
    """Record a failed job (status failed, the error text kept) atomically."""
    ds = xr.Dataset(attrs={"algorithm": config["algorithm"]["name"], "status": "failed",
                           "error": error, "summary": "{}", **_base_attrs(config, attrs)})
    return _write_atomically(ds, path)


def job_status(path: str | os.PathLike) -> tuple[str, str] | None:
    """(status, config_hash) of a job result file, or None if there is no readable one."""
    try:
        attrs = _open_job(path).attrs
        return str(attrs["status"]), str(attrs["config_hash"])
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

    jobs: dict[str, xr.Dataset | None] = {}
    for entry in entries:
        h = entry["hash"]
        if h not in jobs:
            path = job_path(sweep_dir, h)
            try:
                jobs[h] = _open_job(path)
            except (OSError, ValueError):  # not run, or unreadable: status "missing"
                jobs[h] = None
    loaded = [ds for ds in jobs.values() if ds is not None]
    n_step = max([ds.sizes.get("step", 0) for ds in loaded] + [1])
    trace_vars = sorted({v for ds in loaded for v, da in ds.data_vars.items()
                         if da.dims == ("step",)})
    summaries = {h: json.loads(ds.attrs["summary"]) for h, ds in jobs.items() if ds is not None}
    final_keys = sorted({k for s in summaries.values() for k, v in s.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})

    traces = {v: np.full(shape + (n_step,), np.nan) for v in trace_vars}
    finals = {k: np.full(shape, np.nan) for k in final_keys}
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

    data_vars = {v: (dims + ["step"], a) for v, a in traces.items()}
    data_vars.update({f"final_{k}": (dims, a) for k, a in finals.items()})
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
    }
    ds = xr.Dataset(data_vars, coords={**coords, "step": np.arange(1, n_step + 1)}, attrs=attrs)
    return _write_atomically(ds, sweep_dir / "results.zarr")


def load(path: str | os.PathLike) -> xr.Dataset:
    """Open a sweep's ``results.zarr`` lazily; JSON attrs (config, versions, ...) are parsed."""
    ds = xr.open_zarr(path)
    for key in ("config", "versions", "swept_keys", "timings"):
        if isinstance(ds.attrs.get(key), str):
            ds.attrs[key] = json.loads(ds.attrs[key])
    return ds
