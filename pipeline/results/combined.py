"""Several sweeps' results as one Dataset: :func:`combine` joins the ``results.zarr`` of sweeps
run with the same settings (other grids, other seeds, another swept key) on the union of their
sweep points, and :func:`write_combined` writes it as a store that :func:`load` verifies.

    from pipeline.results import combine
    ds = combine("outputs/a/results.zarr", "outputs/b/results.zarr")
    python -m pipeline.export combine outputs/a/results.zarr outputs/b/results.zarr \\
        [--out outputs/a-b/results.zarr] [--rtol 1e-12]

The rules, in order:

- **Dimensions**: the union of the stores' sweep dims. A store that lacks one (it did not sweep
  ``kernel.width``) gets it at the value its recorded config used; a store whose config records
  none is refused, naming the dimension.
- **Settings**: the stores' configs must agree on every setting that is no dimension and that
  changes numbers (location and execution keys such as ``cluster`` or ``threads`` aside, and
  the options of an algorithm, dataset or kernel only where both name the same one); else the
  two runs are not comparable and combine refuses, naming the key and both values.
- **Points**: outer join. A point is held by the stores where its status is ``ok`` or
  ``failed``; one held by several is the same job run twice, so every variable that says what
  it computed (its status, traces and final values) must agree to ``rtol`` (relative, NaN
  equal to NaN; default ``1e-12``, what BLAS round-off leaves; text exactly), else combine
  refuses, naming the variable, the point and both stores. Variables that say when, where and
  how it ran (``*seconds*``, ``worker``, ``job_hash``, threads, CPU model, memory, load, the
  error text: :func:`pipeline.results.compare.execution`) legitimately differ: they are taken
  from the first store, in the order given, that holds the job.
- **Status** stays text, one of ``ok``, ``failed``, ``missing`` (no store holds the point): never
  NaN or ``'nan'``; text variables are ``''`` where no store has a value, numbers NaN.
- **Attrs**: ``config``, ``versions`` are the first store's; ``swept_keys`` the union of the
  stores' and the dims one store added; ``git_sha`` and ``host`` the distinct values; ``sources``
  (JSON) the provenance of every store (its path, sweep, git sha, host, config, swept keys,
  versions, timings, workers); ``timings`` is empty (no one invocation ran it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xarray as xr

from algorithms.errors import InputError
from pipeline.config.keys import keys_of_role
from pipeline.results.access import decoded_attrs
from pipeline.results.compare import execution
from pipeline.results.consolidate import FIXED_DIMS, load, seal
from pipeline.results.ownership import enclosing_store, inside_store_error
from pipeline.results.store_swap import replace_store
from pipeline.results.variables import describe_dataset
from pipeline.results.verify import read_back

RTOL = 1e-12
STATUSES = ("ok", "failed", "missing")
# config keys that say where or how a job ran, not what it computed (the roles of
# pipeline.config.keys other than identity), and whether its memory was profiled
NOT_SETTINGS = (*keys_of_role("location", "execution", "applied"), "profile_memory")
NAMED_GROUPS = ("algorithm", "dataset", "kernel", "hyper")  # options compared if one name


def combine(*stores: str | os.PathLike | xr.Dataset, rtol: float = RTOL) -> xr.Dataset:
    """One Dataset of the sweep points of every store in ``stores`` (paths of
    ``results.zarr``, verified as :func:`load` does, or loaded results Datasets), by the rules
    of this module's docstring; the Dataset is in memory and writes with ``to_netcdf()`` and
    ``to_zarr()`` (or :func:`write_combined`).

    Raises :class:`InputError` (one line, naming the store, the dimension, the setting or the
    variable and point at fault) for no store, a Dataset that is no sweep's results, a missing
    dimension whose value is not recorded, other settings, other variable dims, or a job whose
    numbers differ between two stores."""
    if not stores:
        raise InputError("combine() needs at least one results store; pass the results.zarr "
                         "of each sweep")
    if not rtol >= 0:
        raise InputError(f"rtol={rtol!r} must be a number ≥ 0; pass e.g. rtol=1e-12")
    names = [_name(s, k) for k, s in enumerate(stores)]
    datasets = [_opened(s, name) for s, name in zip(stores, names, strict=True)]
    attrs = [decoded_attrs(ds) for ds in datasets]
    dims = list(dict.fromkeys(d for ds in datasets for d in ds["job_hash"].dims))
    _check_settings(attrs, names, dims)
    datasets = [_with_dims(ds, dims, datasets, a, name).transpose(*dims, ...)
                for ds, a, name in zip(datasets, attrs, names, strict=True)]
    variables = _schema(datasets, names, dims)
    aligned = _aligned(datasets, variables)
    source = _sources(aligned)
    _check_same_numbers(aligned, variables, names, dims, rtol)
    data_vars = {}
    for name, var_dims in variables.items():
        stack = np.stack([a[name].transpose(*var_dims).values for a in aligned])
        index = source.reshape((1, *source.shape) + (1,) * (len(var_dims) - len(dims)))
        values = np.take_along_axis(stack, np.broadcast_to(index, (1, *stack.shape[1:])), 0)[0]
        data_vars[name] = (var_dims, values.astype(str) if values.dtype.kind in "OUS"
                           else values)
    coords = {name: a[name].values for a in aligned for name in a.coords}
    varied = [d for d in dims if len(coords[d]) > 1]
    ds = xr.Dataset(data_vars, coords=coords, attrs=_merged_attrs(attrs, names, varied))
    return describe_dataset(ds)


def write_combined(ds: xr.Dataset, out: str | os.PathLike) -> Path:
    """Write a combined Dataset to ``out``: a ``.zarr`` store with content hashes, which
    :func:`load` verifies (and ``python -m pipeline.report`` reads), or a ``.nc`` file.

    Raises :class:`InputError` when ``out`` exists (nothing is overwritten), has another
    suffix, or cannot be written."""
    out = Path(out)
    if out.suffix not in (".zarr", ".nc"):
        raise InputError(f"--out {out}: unknown format {out.suffix or '(no suffix)'!r}; name "
                         "the output .zarr (a results store) or .nc (netCDF)")
    store = enclosing_store(out)
    if store is not None:
        raise InputError(inside_store_error(out, store, "--out"))
    if out.exists() or out.is_symlink():
        raise InputError(f"--out {out} exists and is never overwritten; pass a new path (or "
                         "remove it first)")
    ds = ds.copy()
    name = out.parent.name if out.name == "results.zarr" else out.stem
    ds.attrs["sweep"] = name or str(ds.attrs.get("sweep", "combined"))
    if out.suffix == ".nc":
        return _write_atomically_nc(seal(ds), out)
    return replace_store(seal(ds), out, check=read_back)


def _write_atomically_nc(ds: xr.Dataset, out: Path) -> Path:
    from pipeline.atomic import atomic_path
    from pipeline.oserrors import write_failure

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            ds.to_netcdf(tmp)
    except OSError as err:
        raise InputError(f"cannot write {out}: " + write_failure(
            err, out, elsewhere="pass --out in a writable directory", rerun="rerun")) from None
    return out


def _name(store, k: int) -> str:
    if isinstance(store, xr.Dataset):
        return f"store {k + 1} (sweep {store.attrs.get('sweep', '?')})"
    return str(store)


def _opened(store, name: str) -> xr.Dataset:
    """The results in memory: a path loaded and verified, a Dataset checked and copied."""
    ds = load(store).load() if not isinstance(store, xr.Dataset) else store.load().copy()
    if "job_hash" not in ds or "status" not in ds:
        raise InputError(f"{name} is no sweep's results (no job_hash and status variables); "
                         "pass a results.zarr or what pipeline.results.load returned")
    missing = [d for d in FIXED_DIMS if d not in ds["job_hash"].dims]
    if missing:
        raise InputError(f"{name} lacks the sweep dimension {missing[0]!r} (a selection with "
                         f".sel(...) drops it); pass whole results, or .sel({missing[0]}=[...]) "
                         "with a list to keep it")
    return ds


def _leaves(config: Mapping, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_leaves(value, f"{path}."))
        else:
            out[path] = value
    return out


def _check_settings(attrs: list[dict], names: list[str], dims: list[str]) -> None:
    """Every setting that is no dimension equal across the stores' configs (see the module's
    docstring); the first that differs is refused in one line."""
    first = attrs[0].get("config") or {}
    swept = set(dims) | {str(k) for a in attrs for k in a.get("swept_keys") or ()}
    for other, name in zip(attrs[1:], names[1:], strict=True):
        config = other.get("config") or {}
        skip = [g for g in NAMED_GROUPS if (first.get(g) or {}).get("name")
                != (config.get(g) or {}).get("name")] if isinstance(config, Mapping) else []
        mine, theirs = _leaves(first), _leaves(config) if isinstance(config, Mapping) else {}
        for key in sorted(set(mine) & set(theirs)):
            top = key.split(".")[0]
            if (top in NOT_SETTINGS or top in skip or key in FIXED_DIMS or key in swept
                    or key in ("algorithm.name", "dataset.name") or mine[key] == theirs[key]):
                continue
            raise InputError(
                f"cannot combine {names[0]} and {name}: they ran with {key}={mine[key]!r} and "
                f"{key}={theirs[key]!r}, which is no dimension of either, so their points are "
                f"not comparable; combine sweeps of the same settings (or rerun one with "
                f"{key} swept)")


def _with_dims(ds: xr.Dataset, dims: list[str], datasets: list[xr.Dataset], attrs: dict,
               name: str) -> xr.Dataset:
    """``ds`` with every dim of ``dims``: one it lacks at its config's value (refused when
    the config records none), typed as the other stores' coordinate of that dim."""
    from pipeline.config import lookup

    for dim in dims:
        if dim in ds.dims:
            continue
        value = lookup(attrs.get("config") or {}, dim)
        if value is None or isinstance(value, (dict, list)):
            raise InputError(f"{name} has no dimension {dim!r} and its config records no value "
                             f"of {dim}; combine stores that all sweep {dim}, or select one "
                             f"{dim} from the others first (ds.sel({{'{dim}': [value]}}))")
        kind = next(other[dim].dtype.kind for other in datasets if dim in other.dims)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        coord = np.array([value] if number and kind in "iuf" else [str(value)])
        ds = ds.expand_dims({dim: coord})
    return ds


def _schema(datasets: list[xr.Dataset], names: list[str], dims: list[str]
            ) -> dict[str, tuple[str, ...]]:
    """Every data variable and its dims (sweep dims first, in ``dims``' order); one whose
    other dims differ between two stores is refused."""
    variables: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for ds, name in zip(datasets, names, strict=True):
        for var, da in ds.data_vars.items():
            rest = tuple(d for d in da.dims if d not in dims)
            var_dims = (*dims, *rest)
            if var in variables and variables[var] != var_dims:
                raise InputError(f"variable {var} has dims {variables[var][len(dims):]} in "
                                 f"{owner[var]} and {rest} in {name}: not the same schema; "
                                 "combine results of the same pipeline version")
            variables.setdefault(str(var), var_dims)
            owner.setdefault(str(var), name)
    return variables


def _fill(da_or_dtype) -> object:
    kind = np.dtype(da_or_dtype).kind
    return "" if kind in "OUS" else np.nan


def _aligned(datasets: list[xr.Dataset], variables: dict[str, tuple[str, ...]]
             ) -> list[xr.Dataset]:
    """The stores on the union of every coordinate (``step`` included), each with every
    variable: ``status`` ``missing``, text ``''``, numbers NaN where it has no value."""
    fills = {}
    for ds in datasets:
        for var in ds.data_vars:
            fills.setdefault(var, "missing" if var == "status" else _fill(ds[var].dtype))
    aligned = list(xr.align(*datasets, join="outer", fill_value=fills))
    sizes = {d: n for ds in aligned for d, n in ds.sizes.items()}
    for k, ds in enumerate(aligned):
        ds = ds.copy()
        for var, var_dims in variables.items():
            if var not in ds:
                shape = tuple(sizes[d] for d in var_dims)
                ds[var] = (var_dims, np.full(shape, fills[var], dtype=object
                                             if isinstance(fills[var], str) else float))
            values = ds[var].values
            if values.dtype.kind in "OUS":  # reindexing made object arrays: text again
                ds[var] = (ds[var].dims, values.astype(str), ds[var].attrs)
        aligned[k] = ds
    return aligned


def _held(ds: xr.Dataset) -> np.ndarray:
    return np.isin(ds["status"].values, ("ok", "failed"))


def _sources(aligned: list[xr.Dataset]) -> np.ndarray:
    """Which store gives each point's values: the first that holds its job, else the first
    that lists the point (its job_hash; a job not run or whose file was damaged), else 0."""
    source = np.zeros(aligned[0]["status"].shape, dtype=np.intp)
    done = np.zeros(source.shape, dtype=bool)
    for test in (_held, lambda ds: ds["job_hash"].values != ""):
        for k, ds in enumerate(aligned):
            take = test(ds) & ~done
            source[take], done = k, done | take
    return source


def _check_same_numbers(aligned: list[xr.Dataset], variables: dict, names: list[str],
                        dims: list[str], rtol: float) -> None:
    """A job held by two stores must have the same status and numbers (to ``rtol``)."""
    compared = [v for v in variables if v == "status" or not (execution(v) or v == "error")]
    for i, a in enumerate(aligned):
        for j in range(i + 1, len(aligned)):
            b = aligned[j]
            both = _held(a) & _held(b)
            if not both.any():
                continue
            for var in sorted(compared):
                x, y = (ds[var].transpose(*variables[var]).values for ds in (a, b))
                bad = ~_agree(x, y, rtol)
                bad = bad.reshape(bad.shape[:len(dims)] + (-1,)).any(axis=-1) & both
                if bad.any():
                    index = tuple(int(i_[0]) for i_ in np.nonzero(bad))
                    point = ", ".join(f"{d}={a[d].values[n].item()!r}"
                                      for d, n in zip(dims, index, strict=True))
                    raise InputError(
                        f"{names[i]} and {names[j]} hold the same job ({point}) with other "
                        f"{var}: {_shown(x[index])} and {_shown(y[index])}; combine sweeps "
                        f"of the same code and data, or pass a larger rtol (now {rtol:g}) "
                        "for round-off")


def _agree(x: np.ndarray, y: np.ndarray, rtol: float) -> np.ndarray:
    if x.dtype.kind in "fiu" and y.dtype.kind in "fiu":
        x, y = x.astype(float), y.astype(float)
        both_nan = np.isnan(x) & np.isnan(y)
        with np.errstate(invalid="ignore"):
            close = np.abs(x - y) <= rtol * np.maximum(np.abs(x), np.abs(y))
        return both_nan | (x == y) | close
    return x.astype(str) == y.astype(str)


def _shown(values: np.ndarray) -> str:
    values = np.atleast_1d(values)
    if values.dtype.kind == "f":
        finite = values[np.isfinite(values)]
        return repr(float(finite[-1])) if finite.size else "nan"
    return repr(str(values.ravel()[0]))


def _merged_attrs(attrs: list[dict], names: list[str], varied: list[str]) -> dict:
    """The combined Dataset's attrs (module docstring); ``varied``: the dims that take more
    than one value in it."""
    first = attrs[0]
    swept = list(dict.fromkeys([str(k) for a in attrs for k in a.get("swept_keys") or ()]
                               + varied))
    sources = [{"source": name, **{key: a.get(key) for key in (
        "sweep", "git_sha", "host", "swept_keys", "n_workers", "config", "versions",
        "timings", "invocations")}} for name, a in zip(names, attrs, strict=True)]
    out = {key: first[key] for key in ("step_meaning", "Conventions", "comment") if key in first}
    out.update({
        "sweep": "+".join(str(a["sweep"]) for a in attrs),  # every store records it
        "config": json.dumps(first.get("config", {}), sort_keys=True, default=str),
        "swept_keys": json.dumps(swept),
        "versions": json.dumps(first.get("versions", {}), sort_keys=True, default=str),
        "git_sha": ", ".join(dict.fromkeys(str(a.get("git_sha", "unknown")) for a in attrs)),
        "host": ", ".join(dict.fromkeys(str(a.get("host", "")) for a in attrs)),
        "timings": json.dumps({}),
        "n_workers": 0,
        "sources": json.dumps(sources, default=str),
    })
    out["Conventions"] = "CF-1.10"
    return out
