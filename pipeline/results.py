"""Per-job result files: one small xarray Dataset (zarr) per job, written atomically.

Layout of ``result.zarr``: trace variables over dim ``step`` (objective, dual_objective, gap,
test_rmse, n_basis, seconds, ...), the solution over dim ``basis`` (``basis`` indices in
selection order and ``coef``), and attrs ``config`` (resolved job config, JSON), ``summary``
(final scalars, JSON), ``config_hash``, ``versions``, ``git_sha``, ``host``, ``status``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import uuid
from importlib import metadata
from pathlib import Path

import numpy as np
import xarray as xr

from algorithms.base import Fit

PACKAGES = ("numpy", "scipy", "dask", "distributed", "xarray", "zarr", "hydra-core")


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_sha() -> str:
    """Commit of the source tree this package runs from, or 'unknown'."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def config_hash(config: dict) -> str:
    """Stable hash of a job's resolved config (identifies the job for resume)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def fit_to_dataset(fit: Fit, config: dict) -> xr.Dataset:
    """The job's result as an xarray Dataset."""
    data_vars = {name: ("step", np.asarray(values)) for name, values in fit.trace.items()}
    data_vars["basis"] = ("basis", np.asarray(fit.basis, dtype=np.int64))
    data_vars["coef"] = ("basis", np.asarray(fit.coef, dtype=np.float64))
    summary = {k: _jsonable(v) for k, v in fit.summary.items()}
    attrs = {
        "algorithm": fit.algorithm,
        "status": "ok",
        "config": json.dumps(config, sort_keys=True),
        "config_hash": config_hash(config),
        "summary": json.dumps(summary, sort_keys=True),
        "versions": json.dumps(package_versions(), sort_keys=True),
        "git_sha": git_sha(),
        "host": platform.node(),
    }
    return xr.Dataset(data_vars, coords={"step": np.arange(len(fit.trace["gap"]))}, attrs=attrs)


def write_job_result(fit: Fit, config: dict, path: str | os.PathLike) -> Path:
    """Write ``result.zarr`` atomically: to a temporary sibling first, then rename into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        fit_to_dataset(fit, config).to_zarr(tmp, mode="w", consolidated=False)
        if path.exists():
            shutil.rmtree(path)
        os.rename(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def load_job_result(path: str | os.PathLike) -> xr.Dataset:
    """Open one job's ``result.zarr`` (summary and config parsed back from JSON attrs)."""
    ds = xr.open_zarr(path, consolidated=False).load()
    for key in ("config", "summary", "versions"):
        ds.attrs[key] = json.loads(ds.attrs[key])
    return ds
