"""Checks of a consolidated ``results.zarr`` when it is loaded: structure, metadata files,
chunks and the content hashes written with it; damage is one line naming the store and the
fix.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import math
from pathlib import Path

import numpy as np
import xarray as xr

from pipeline.datasets.spec import StoreError
from pipeline.datasets.store import ATTRS_DIGEST, attrs_digest
from pipeline.results.store_swap import interrupted, swap_record

HASH_ATTRS = ("content_sha256", ATTRS_DIGEST)


def hash_values(values: np.ndarray) -> str:
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


def read_back(tmp: Path) -> None:
    """What consolidation wrote must verify before it replaces the previous store."""
    try:
        check_metadata_files(tmp)
        verify_store(tmp)
    except StoreError as err:
        raise OSError(errno.EIO, f"the written store does not read back ({err})") from None


def _rebuild(path: Path) -> str:
    return (f"rebuild it by rerunning the sweep command that wrote it (sweep="
            f"{path.parent.name}): only consolidation runs, no finished job is refitted")


def damaged_store(path: Path, what: str) -> StoreError:
    return StoreError(f"results store {path} {what}; {_rebuild(path)}")


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_is_results_store(path: Path, *, consolidated: bool = True) -> None:
    """One line saying what ``path`` is when it is not a sweep's results store (or, with
    ``consolidated``, one without its consolidated metadata)."""
    expected = "pass the results.zarr a sweep printed (its last line is `results: <path>`)"
    for store in (path, path / "results.zarr"):  # the store, or a sweep directory given
        if interrupted(store) is not None:
            raise StoreError(
                f"the consolidation that writes {store} was interrupted between swapping the "
                f"old store out and the new one in ({swap_record(store)} remains); rerun the "
                f"sweep command that made it (sweep={store.parent.name}, or python -m pipeline "
                "resume=last if it was the last sweep): it completes the consolidation, "
                "refitting no finished job")
    if not path.exists():
        raise StoreError(f"{path} does not exist; {expected}")
    if not path.is_file() and not path.is_dir():
        raise StoreError(f"{path} is neither a directory nor a regular file (a device, a FIFO or "
                         f"a socket), not a sweep's results store; {expected}")
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
        raise damaged_store(path, "lacks .zmetadata (its consolidated metadata)")


def check_metadata_files(path: Path) -> None:
    """Every metadata file agrees with the consolidated copy in .zmetadata (which is what
    readers use): an edit to one of them is damage too."""
    consolidated = _read_json(path / ".zmetadata")
    if not isinstance(consolidated, dict) or not isinstance(consolidated.get("metadata"), dict):
        raise damaged_store(path, "has an unreadable .zmetadata")
    for key, meta in consolidated["metadata"].items():
        variable = key.rpartition("/")[0]
        if variable and not (path / variable).is_dir():
            raise damaged_store(path, f"lacks variable {variable} (its directory is gone)")
        on_disk = _read_json(path / key)
        if on_disk is None:
            raise damaged_store(path, f"lacks or cannot parse {key}")
        if on_disk != meta:
            raise damaged_store(path, f"has {key} different from its copy in .zmetadata (edited)")


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


def verify_store(path: Path) -> None:
    """:func:`_verify` the results store at ``path``, read through numpy arrays (a dask
    compute per variable costs 3× as much)."""
    with xr.open_zarr(path, consolidated=True, chunks=None) as ds:
        _verify(path, ds)


def _verify(path: Path, ds: xr.Dataset) -> None:
    """Check the attrs and every variable against the hashes consolidation recorded."""
    attrs = ds.attrs
    if not all(key in attrs for key in HASH_ATTRS):
        raise damaged_store(path, "has no content hashes (consolidated by an older version; "
                             "load(path, verify=False) opens it unchecked)")
    if attrs_digest(attrs) != attrs[ATTRS_DIGEST]:
        raise damaged_store(path, "has attrs that differ from what consolidation wrote (edited: "
                             "attrs_sha256 does not match)")
    try:
        recorded = json.loads(attrs["content_sha256"])
    except (TypeError, ValueError):
        raise damaged_store(path, "has a malformed content_sha256 attr") from None
    names = set(ds.variables)
    if set(recorded) - names:
        raise damaged_store(path, f"lacks variable {min(set(recorded) - names)}")
    if names - set(recorded):
        raise damaged_store(path, f"has variable {min(names - set(recorded))}, which consolidation "
                             "did not write")
    for name in sorted(recorded):
        try:
            values = ds[name].values
        except Exception as err:  # a truncated or garbled chunk fails to decompress/decode
            raise damaged_store(path, f"has an unreadable chunk in variable {name} "
                                 f"({error_text(err)})") from None
        if hash_values(values) != recorded[name]:
            missing = _missing_chunks(path, name)
            what = (f"lacks chunk file {missing[0]}" if missing else
                    f"has variable {name} different from what consolidation wrote (a chunk "
                    "was changed)")
            raise damaged_store(path, f"fails its checksum: {what}")

