"""One job's result file (``result.nc``): written atomically from a fit's
:class:`~algorithms.contract.Result` (or a failure), its status read cheaply, loaded.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import platform
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy.io import netcdf_file

from algorithms.contract import Result
from algorithms.errors import InputError
from pipeline.checksum import PAYLOAD_DIGEST, DamagedFile, check_payload, payload_digest
from pipeline.oserrors import write_failure
from pipeline.results.netcdf3 import NotPlain, PlainDataset, plain_dataset, write_netcdf3
from pipeline.results.ownership import foreign_entry
from pipeline.results.variables import describe_dataset

if TYPE_CHECKING:
    import xarray as xr

PACKAGES = ("numpy", "scipy", "dask", "distributed", "xarray", "zarr", "hydra-core")


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
    :func:`pipeline.job.identity.config_hash`)."""
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
                      extra_vars: Mapping | None = None) -> PlainDataset | xr.Dataset:
    """A finished job's result as a dataset (:func:`_job_dataset`): trace variables over
    ``step``, the result's own arrays (a fit's basis and coefficients), ``extra_vars`` (name
    -> (dims, values), e.g. the hyperparameter optimiser's trace over ``hyper_eval``), the
    summary and the reasons for quantities that do not apply as JSON attrs."""
    data_vars = {name: ("step", np.asarray(values)) for name, values in result.trace.items()}
    data_vars.update(result.variables())
    data_vars.update(extra_vars or {})
    summary = {k: _jsonable(v) for k, v in result.summary.items()}
    all_attrs = {"algorithm": result.algorithm, "kind": result.kind, "status": "ok", "error": "",
                 "summary": json.dumps(summary, sort_keys=True),
                 "not_applicable": json.dumps(dict(result.not_applicable), sort_keys=True),
                 **_base_attrs(config, attrs)}
    return _job_dataset(data_vars, {"step": np.arange(1, result.n_steps + 1)}, all_attrs)


def _job_dataset(data_vars: Mapping, coords: Mapping, attrs: Mapping
                 ) -> PlainDataset | xr.Dataset:
    """``xr.Dataset(data_vars, coords=coords, attrs=attrs)`` described and sealed: held
    without xarray (:mod:`pipeline.results.netcdf3`, which writes the file xarray writes)
    where it can be, else through xarray."""
    try:
        ds = plain_dataset(data_vars, coords, attrs)
    except NotPlain:
        import xarray as xr

        ds = xr.Dataset(data_vars, coords=coords, attrs=attrs)
    return _sealed(describe_dataset(ds))


def _variables(ds) -> list[tuple[str, tuple[str, ...], np.ndarray]]:
    """(name, dims, values) of every variable of a Dataset, coordinates included."""
    return [(str(name), tuple(var.dims), var.values) for name, var in ds.variables.items()]


def _sealed(ds: PlainDataset | xr.Dataset) -> PlainDataset | xr.Dataset:
    """``ds`` with the checksum of its payload in attr ``payload_sha256``
    (:func:`pipeline.checksum.payload_digest`), verified whenever the file is read."""
    ds.attrs.pop(PAYLOAD_DIGEST, None)
    ds.attrs[PAYLOAD_DIGEST] = payload_digest(_variables(ds), ds.attrs)
    return ds


class WriteError(InputError):
    """A result could not be written (one line naming the path and the OS's reason); ``errno``
    is the OS's error number (a full disk, which no job can be blamed for, or another)."""

    def __init__(self, message: str, errno_: int | None) -> None:
        super().__init__(message)
        self.errno = errno_


def _write_netcdf(ds: PlainDataset | xr.Dataset, path: Path) -> None:
    """``ds.to_netcdf(path, engine="scipy")``, byte for byte: a :class:`PlainDataset` by
    :func:`pipeline.results.netcdf3.write_netcdf3`, without xarray; an xarray Dataset without
    its write lock: the file is a fresh temporary one no other process knows, and choosing that
    lock asks Dask for its scheduler, which imports ``distributed`` (~0.3 s of CPU)."""
    if isinstance(ds, PlainDataset):
        write_netcdf3(ds, path)
        return
    from xarray.backends import ScipyDataStore

    store = ScipyDataStore(str(path), mode="w", lock=False)
    try:
        ds.dump_to_store(store)
    finally:
        store.close()


def write_atomically(ds: PlainDataset | xr.Dataset, path: str | os.PathLike, *,
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
            _write_netcdf(ds, tmp)
            if check is not None:
                check(tmp)
            os.replace(tmp, path)
            return path
        foreign = foreign_entry(path)  # removed with the old copy: refuse instead
        if foreign is not None:
            raise InputError(f"{foreign} lies inside {path}, which is replaced whole; move "
                             "it out of the store, then rerun")
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
        raise WriteError(f"cannot write {path}: " + write_failure(
            err, path, elsewhere=f"make {path.parent} writable", rerun="rerun"),
                         err.errno) from None
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # e.g. its directory could not be made
                tmp.unlink(missing_ok=True)
        if moved_old and path.exists():  # replaced: the previous store goes
            shutil.rmtree(old, ignore_errors=True)


class DamagedResult(InputError):
    """A job's result file that cannot be read, lacks its checksum or fails it: never served
    (a sweep refits the job, consolidation leaves it out); one line naming the file. ``path``
    and ``what`` (what is wrong with it) make other lines."""

    def __init__(self, path: str | os.PathLike, what: str) -> None:
        super().__init__(f"result file {path} {what}; rerun the sweep command to refit its job")
        self.path, self.what = Path(path), what

    def __reduce__(self):  # pickled between Dask processes with its two arguments
        return (type(self), (self.path, self.what))


def _damaged(path: str | os.PathLike, what: str) -> DamagedResult:
    return DamagedResult(path, what)


def _open_job(path: str | os.PathLike) -> xr.Dataset:
    """The job file through xarray, its checksum verified."""
    import xarray as xr

    with xr.open_dataset(path, engine="scipy") as ds:
        ds = ds.load()
    check_payload(_variables(ds), ds.attrs)
    return ds


def _read_checked(reader, path: str | os.PathLike):
    """``reader(path)``; a file that is there but unreadable or fails its checksum raises
    :class:`DamagedResult` (one line naming it), a missing one FileNotFoundError."""
    try:
        return reader(path)
    except FileNotFoundError:
        raise
    except DamagedFile as err:
        raise _damaged(path, str(err)) from None
    except Exception as err:  # truncated, garbled header, not netCDF, a directory, ...
        raise _damaged(path, f"cannot be read ({type(err).__name__}: "
                             f"{' '.join(str(err).split())[:120]})") from None


@dataclass(frozen=True)
class _Variable:
    dims: tuple[str, ...]
    values: np.ndarray


@dataclass(frozen=True)
class JobFile:
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


def read_job(path: str | os.PathLike) -> JobFile | xr.Dataset:
    """A job file, its checksum verified (:class:`DamagedResult` if it fails or the file is
    unreadable; FileNotFoundError if there is none)."""
    return _read_checked(_read_job_unchecked, path)


def _read_job_unchecked(path: str | os.PathLike) -> JobFile | xr.Dataset:
    with netcdf_file(path, mmap=False) as nc:
        attrs = {k: _attr(v) for k, v in nc._attributes.items()}
        sizes = {k: int(v) for k, v in nc.dimensions.items() if v is not None}
        data_vars, variables = {}, []
        for name, var in nc.variables.items():
            extra = set(var._attributes) - {"long_name", "units", "comment", "_FillValue"}
            fill = var._attributes.get("_FillValue")
            if extra or var.data.dtype.kind not in "fi" or len(var.dimensions) > 1 or (
                    fill is not None and not np.all(np.isnan(fill))):
                return _open_job(path)
            values = var.data.astype(var.data.dtype.newbyteorder("="))
            variables.append((name, tuple(var.dimensions), values))
            if var.dimensions != (name,):  # a variable named as its dim is a coordinate
                data_vars[name] = _Variable(var.dimensions, values)
    check_payload(variables, attrs)
    return JobFile(attrs, sizes, data_vars)


def _attr(value):
    if isinstance(value, bytes):
        return value.decode()
    value = np.asarray(value)
    return value.item() if value.size == 1 else value


def _reads_back(tmp: Path) -> None:
    """A written job file must read back and verify before it replaces the previous one."""
    try:
        read_job(tmp)
    except DamagedResult as err:
        raise OSError(errno.EIO, f"the written file does not read back ({err})") from None


def write_job_result(result: Result, config: Mapping, path: str | os.PathLike,
                     attrs: Mapping, extra_vars: Mapping | None = None) -> Path:
    """Write a finished job's result file (``result.nc``, with the checksum of its payload)
    atomically, read back and verified before it replaces any previous one."""
    return write_atomically(result_to_dataset(result, config, attrs, extra_vars), path,
                             check=_reads_back)


def write_job_failure(config: Mapping, error: str, path: str | os.PathLike,
                      attrs: Mapping) -> Path:
    """Record a failed job (status failed, the error text kept) atomically."""
    ds = _job_dataset({}, {}, {"algorithm": config["algorithm"]["name"], "status": "failed",
                               "error": error, "summary": "{}", **_base_attrs(config, attrs)})
    return write_atomically(ds, path, check=_reads_back)


def verified_status(path: str | os.PathLike) -> tuple[str, str] | None:
    """(status, config_hash) of a job result file that verifies, None if there is none.

    Raises :class:`DamagedResult` (one line naming the file) for a file that is there but
    cannot be read, lacks its checksum or fails it, has JSON attrs that do not parse, or lacks
    a status or config_hash."""
    try:  # scipy's reader (~0.4 ms a file): a sweep looks up thousands of these
        attrs = parsed_attrs(path, read_job(path).attrs)
    except (FileNotFoundError, NotADirectoryError):
        return None
    status, config_hash = attrs.get("status"), attrs.get("config_hash")
    if status not in ("ok", "failed") or not isinstance(config_hash, str):
        raise _damaged(path, f"has status {status!r} and config_hash {config_hash!r}")
    return status, config_hash


def job_status(path: str | os.PathLike) -> tuple[str, str] | None:
    """(status, config_hash) of a job result file, or None if there is none that verifies
    (missing, unreadable or failing its checksum: the job has to run again)."""
    try:
        return verified_status(path)
    except DamagedResult:
        return None


JSON_JOB_ATTRS = ("config", "summary", "versions", "not_applicable")


def parsed_attrs(path: str | os.PathLike, attrs: Mapping) -> dict:
    """A job file's attrs with the JSON ones parsed (``summary`` and ``not_applicable`` must
    be objects); :class:`DamagedResult` naming ``path`` for one that does not parse."""
    out = dict(attrs)
    for key in JSON_JOB_ATTRS:
        if key in out:
            try:
                out[key] = json.loads(out[key])
            except (TypeError, ValueError):
                raise _damaged(path, f"has a {key} attr that is not JSON") from None
            if key in ("summary", "not_applicable") and not isinstance(out[key], dict):
                raise _damaged(path, f"has a {key} attr that is not a JSON object")
    return out


def load_job_attrs(path: str | os.PathLike) -> dict:
    """The attrs of one job's result file as :func:`load_job_result` gives them (JSON ones
    parsed, numbers as Python numbers), its checksum verified, read without xarray where
    :func:`read_job` can."""
    return parsed_attrs(path, read_job(path).attrs)


def load_job_result(path: str | os.PathLike) -> xr.Dataset:
    """Open one job's result file (config, summary and versions parsed back from JSON), its
    checksum verified: :class:`DamagedResult` (one line naming the file) if it fails."""
    ds = _read_checked(_open_job, path)
    ds.attrs = parsed_attrs(path, ds.attrs)
    return ds

