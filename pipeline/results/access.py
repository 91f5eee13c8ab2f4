"""Reading a sweep's results without NaN traps: the last valid value along ``step``, a trace at
its evaluated steps only, and a tidy table (one row per distinct job, or per job and step with
a value) for pandas users. Also as an xarray accessor on every Dataset, ``ds.sgp``:

    from pipeline.results import load
    ds = load("outputs/zhang2001/results.zarr")
    ds.sgp.last("test_rmse")              # final evaluated test RMSE of every job (no step dim)
    ds.sgp.evaluated("test_rmse")         # the trace at the steps where it was evaluated
    ds.sgp.tidy()                          # pandas: one row per distinct job and step
    ds.sgp.tidy(per="job")                 # one row per distinct job: its final values
    ds.sgp.attrs["config"]                 # the attrs, JSON ones (config, ...) decoded

Test metrics are computed every ``eval_every`` steps and at the last step, so most of a
metric's trace is NaN and ``ds.test_rmse.isel(step=-1)`` is the value of whichever run was
longest: use :func:`last_valid` (or the per-job ``final_<name>`` variables).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

# attrs of a results store held as JSON text (in the store and in what ``load`` returns, so that
# ``ds.to_netcdf()`` and ``ds.to_zarr()`` write it: netCDF attrs are text or numbers only)
JSON_ATTRS = ("config", "versions", "swept_keys", "timings", "invocations", "content_sha256",
              "sources")


def decoded_attrs(attrs: xr.Dataset | Mapping) -> dict:
    """A copy of a results Dataset's attrs (or of ``attrs``) with the :data:`JSON_ATTRS` that
    are JSON text decoded (``config`` a dict, ``swept_keys`` a list, ...); decoded ones, as a
    Dataset built in memory may hold, are kept as they are."""
    attrs = dict(attrs.attrs if isinstance(attrs, xr.Dataset) else attrs)
    for key in JSON_ATTRS:
        if isinstance(attrs.get(key), str):
            attrs[key] = json.loads(attrs[key])
    return attrs


def last_valid(da: xr.DataArray, dim: str = "step") -> xr.DataArray:
    """The last non-NaN value of ``da`` along ``dim`` (NaN where there is none), without
    ``dim``; its attrs are kept."""
    values = np.moveaxis(np.asarray(da.values, dtype=np.float64), da.get_axis_num(dim), -1)
    valid = np.isfinite(values)
    last = values.shape[-1] - 1 - np.argmax(valid[..., ::-1], axis=-1)
    out = np.take_along_axis(values, last[..., None], axis=-1)[..., 0]
    out[~valid.any(axis=-1)] = np.nan
    dims = [d for d in da.dims if d != dim]
    return xr.DataArray(out, dims=dims, coords={d: da[d] for d in dims if d in da.coords},
                        attrs=dict(da.attrs), name=da.name)


def evaluated(da: xr.DataArray, dim: str = "step") -> xr.DataArray:
    """``da`` at the values of ``dim`` where any run has a value (e.g. the evaluated steps of
    a test metric), so that lines drawn from it connect the evaluated points."""
    other = [d for d in da.dims if d != dim]
    return da.isel({dim: np.flatnonzero(da.notnull().any(other).values)})


def _distinct_jobs(ds: xr.Dataset) -> list[tuple[tuple[int, ...], dict]]:
    """(the first grid index holding it, its coordinates) of every distinct job; a coordinate
    is NA along a dim the job is repeated on (it does not depend on it: κ for the exact GP,
    the seed of a deterministic method)."""
    dims = list(ds["job_hash"].dims)
    hashes = ds["job_hash"].values
    first: dict[str, tuple[int, ...]] = {}
    seen: dict[str, list[set]] = {}
    for index in np.ndindex(hashes.shape):
        h = str(hashes[index])
        first.setdefault(h, index)
        for positions, i in zip(seen.setdefault(h, [set() for _ in dims]), index, strict=True):
            positions.add(i)
    return [(index, {d: ds[d].values[i].item() if len(seen[h][k]) == 1 else pd.NA
                     for k, (d, i) in enumerate(zip(dims, index, strict=True))})
            for h, index in first.items() if h]


def tidy(ds: xr.Dataset, per: str = "step") -> pd.DataFrame:
    """A long table for pandas. ``per="job"``: one row per distinct job (jobs repeated along
    sweep dims appear once, NA in the dims they do not depend on) with every per-job variable
    (status, job_hash, final values, ...). ``per="step"``: one row per distinct finished job
    and step at which any trace variable has a value (no padding rows), with the job's
    coordinates, ``job_hash``, ``step`` and the trace variables as columns (the
    hyperparameter optimiser's trace over ``hyper_eval`` stays in the Dataset)."""
    if per not in ("job", "step"):
        raise ValueError(f"per={per!r}: choose 'job' or 'step'")
    dims = ds["job_hash"].dims
    if per == "job":
        first = ["status", "job_hash", "job_seconds", "worker", "error"]
        names = [n for n in first if n in ds] + sorted(
            n for n, var in ds.data_vars.items() if var.dims == dims and n not in first)
        rows = [{**coords, **{n: ds[n].values[index].item() for n in names}}
                for index, coords in _distinct_jobs(ds)]
        return _typed(pd.DataFrame(rows, columns=[*dims, *names]), dims)
    traces = [n for n, var in ds.data_vars.items() if var.dims == (*dims, "step")]
    frames = []
    for index, coords in _distinct_jobs(ds):
        if ds["status"].values[index] != "ok":
            continue
        block = np.stack([ds[n].values[index] for n in traces], axis=1)
        keep = np.isfinite(block).any(axis=1)
        frame = pd.DataFrame(block[keep], columns=traces)
        frame.insert(0, "step", ds["step"].values[keep])
        frame.insert(0, "job_hash", str(ds["job_hash"].values[index]))
        for k, d in enumerate(dims):
            frame.insert(k, d, coords[d])
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[*dims, "job_hash", "step", *traces])
    return _typed(pd.concat(frames, ignore_index=True), dims)


def _typed(frame: pd.DataFrame, dims) -> pd.DataFrame:
    """Sweep coordinates as nullable columns (Int64, Float64, string), NA where a job does
    not depend on the dim, so that the table round-trips through parquet unchanged."""
    for d in dims:
        frame[d] = pd.array(frame[d].tolist())
    return frame


@xr.register_dataset_accessor("sgp")
class SweepAccessor:
    """``ds.sgp``: :func:`last_valid`, :func:`evaluated`, :func:`tidy` and the decoded attrs
    (:func:`decoded_attrs`) of a results Dataset."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    @property
    def attrs(self) -> dict:
        """The Dataset's attrs with the JSON ones decoded (:func:`decoded_attrs`), a copy."""
        return decoded_attrs(self._ds)

    def last(self, name: str, dim: str = "step") -> xr.DataArray:
        """The last valid value of trace variable ``name`` of every job."""
        return last_valid(self._ds[name], dim)

    def evaluated(self, name: str, dim: str = "step") -> xr.DataArray:
        """Trace variable ``name`` at the steps where it was evaluated."""
        return evaluated(self._ds[name], dim)

    def tidy(self, per: str = "step") -> pd.DataFrame:
        """See :func:`tidy`."""
        return tidy(self._ds, per)
