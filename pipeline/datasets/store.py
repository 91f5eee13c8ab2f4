"""Dataset stores: :func:`ingest` writes a built dataset once to
``<store_root>/<name>-<12 hex of the spec hash>.zarr`` (atomically, idempotently);
:func:`open_store` reopens a store lazily as an xarray Dataset (dask-backed) after checking every
array's sha256; :func:`read_store` makes the same checks through zarr alone, for a job's start
(importing xarray with pandas is ~0.4 s of CPU, paid then only when the result is written).

Store layout (``format_version`` 2): variables ``X_train (train, feature)``, ``y_train (train)``,
``X_test (test, feature)``, ``y_test (test)``, float64, row-chunked to about 32 MB per chunk;
attrs with the provenance, the per-array ``content_sha256`` and ``attrs_sha256``, the sha256 of
all the other attrs (:func:`attrs_digest`), so that an edited attr is detected like an edited
array.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.datasets.small_store import read_small
from pipeline.datasets.spec import (
    FORMAT_VERSION,
    VARIABLES,
    Arrays,
    StoreError,
    build,
    normalise_spec,
    one_line,
    spec_hash,
)
from pipeline.lines import note
from pipeline.oserrors import write_failure

_DIMS = {
    "X_train": ("train", "feature"),
    "y_train": ("train",),
    "X_test": ("test", "feature"),
    "y_test": ("test",),
}
ATTRS_DIGEST = "attrs_sha256"
REQUIRED_ATTRS = (
    "name", "spec", "spec_hash", "provenance", "source_sha256", "standardisation",
    "content_sha256", "n_train", "n_test", "d", "format_version", ATTRS_DIGEST,
)
_CHUNK_ELEMENTS = 2**22  # 4 Mi float64 = 32 MB per chunk

if TYPE_CHECKING:
    import xarray as xr


def store_path(spec: Mapping[str, Any], store_root: str | os.PathLike[str]) -> Path:
    """``<store_root>/<name>-<first 12 hex of spec_hash>.zarr`` (nothing is created)."""
    norm = normalise_spec(spec)
    return Path(store_root).expanduser() / f"{norm['name']}-{spec_hash(norm)[:12]}.zarr"


def _rows_per_chunk(n: int, d: int) -> int:
    return max(1, min(max(n, 1), _CHUNK_ELEMENTS // max(d, 1)))


def attrs_digest(attrs: Mapping[str, Any]) -> str:
    """sha256 of the store attrs other than ``attrs_sha256`` itself, as canonical JSON."""
    body = {key: value for key, value in attrs.items() if key != ATTRS_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


def _write_store(path: Path, arrays: Arrays, attrs: Mapping[str, Any]) -> None:
    import xarray as xr

    attrs = {**attrs, ATTRS_DIGEST: attrs_digest(attrs)}
    ds = xr.Dataset({key: (_DIMS[key], arrays[key]) for key in VARIABLES}, attrs=attrs)
    d = int(attrs["d"])
    encoding = {}
    for key in VARIABLES:
        rows = _rows_per_chunk(arrays[key].shape[0], d)
        encoding[key] = {"chunks": (rows, d) if key.startswith("X") else (rows,)}
    ds.to_zarr(path, mode="w-", zarr_format=3, consolidated=False, encoding=encoding)


class DamagedStore(StoreError):
    """A store that is not what its spec builds: unreadable, failing a checksum, edited attrs,
    another spec's. :func:`ingest` rebuilds it from its source (with a ``note:``); a reader
    raises it as one line naming the store and the fix. ``path`` and ``what`` (what is wrong)
    make other lines."""

    def __init__(self, path: str | os.PathLike, what: str) -> None:
        super().__init__(f"store {path} {what}; delete {path} and rerun to re-ingest")
        self.path, self.what = Path(path), what

    def __reduce__(self):  # pickled between Dask processes with its two arguments
        return (type(self), (self.path, self.what))


def _corrupt(path: Path, what: str) -> DamagedStore:
    return DamagedStore(path, what)


def _hash_variable(var: xr.DataArray) -> str:
    """sha256 of a variable (dask-backed or lazily read), read one row chunk at a time."""
    if var.chunks is not None:
        bounds = np.cumsum((0,) + tuple(var.chunks[0]))
        # read on this thread (dask's synchronous get, passed as a function: dask's scheduler
        # lookup by name or by default imports distributed, ~0.4 s of CPU, to look for a
        # client, and on a worker would send the read to the cluster)
        from dask.local import get_sync

        return _hash_blocks(lambda a, b: var[a:b].data.compute(scheduler=get_sync), bounds)
    step = max(1, int((var.encoding.get("chunks") or (len(var),))[0]))  # the store's chunks
    return _hash_blocks(lambda a, b: var[a:b].values,
                        np.array([*range(0, len(var), step), len(var)]))


def _hash_array(array) -> str:
    """sha256 of a zarr array, read one of its row chunks at a time (as :func:`_hash_variable`:
    the same digest), or of a numpy array at once."""
    n = array.shape[0]
    step = max(1, int(array.chunks[0] if hasattr(array, "chunks") else n))
    return _hash_blocks(lambda a, b: array[a:b], np.array([*range(0, n, step), n]))


def _hash_blocks(rows, bounds: np.ndarray) -> str:
    """sha256 of the float64 values ``rows(start, stop)`` returns for consecutive ``bounds``."""
    h = hashlib.sha256()
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        h.update(np.ascontiguousarray(rows(int(start), int(stop)), dtype="<f8").reshape(-1))
    return h.hexdigest()


def open_store(path: str | os.PathLike[str], *, verify: bool = True,
               dask: bool = True) -> xr.Dataset:
    """Open a dataset store lazily (dask arrays, one chunk per ~32 MB of rows) and verify it.

    Parameters
    ----------
    path : path-like
        A store written by :func:`ingest`.
    verify : bool, default True
        Recompute the sha256 of every array and compare with ``attrs["content_sha256"]``
        (reads the whole store once). Structure and attrs are always checked.
    dask : bool, default True
        False: xarray's own lazily read arrays instead of dask's (for a check or a small
        store read whole: importing dask.array is ~0.2 s of a small job's start).

    Raises
    ------
    StoreError
        Missing path, unreadable metadata, missing variables/attrs, wrong ``format_version``,
        attrs edited after ingest (``attrs_sha256``), shapes that disagree with the attrs, an
        unreadable chunk or a checksum mismatch.
    """
    import xarray as xr

    path = _existing(path)
    try:
        ds = xr.open_zarr(path, consolidated=False, **({} if dask else {"chunks": None}))
    except Exception as exc:  # any zarr/JSON/decoding failure means an unusable store
        raise _corrupt(path, f"cannot be opened ({type(exc).__name__}: "
                             f"{one_line(exc)[:120]})") from None
    try:
        _check_structure(path, ds.attrs, {key: (var.dims, var.dtype, var.shape)
                                          for key, var in ds.data_vars.items()})
        if verify:
            _check_digests(path, ds.attrs, {key: ds[key] for key in VARIABLES}, _hash_variable)
    except BaseException:
        ds.close()
        raise
    return ds


@dataclass(frozen=True)
class StoreArrays:
    """A verified store's attrs and its arrays by name (:data:`VARIABLES`): zarr arrays, read
    on indexing (``arrays["X_train"][lo:hi]``), or numpy arrays after :meth:`load`."""

    attrs: dict[str, Any]
    arrays: dict[str, Any]

    def __getitem__(self, key: str):
        return self.arrays[key]

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())

    def load(self) -> StoreArrays:
        """Every array read into memory, read-only (shared by the jobs of a process)."""
        loaded = {}
        for key, array in self.arrays.items():
            loaded[key] = np.ascontiguousarray(array[...], dtype=np.float64)
            loaded[key].flags.writeable = False
        return StoreArrays(self.attrs, loaded)


def read_store(path: str | os.PathLike[str], *, verify: bool = True) -> StoreArrays:
    """The store at ``path`` through zarr alone (no xarray, no dask), with the checks of
    :func:`open_store` and its one-line :class:`StoreError` messages; a small store (each
    array one chunk) as numpy arrays read without zarr (:mod:`pipeline.datasets.small_store`)."""
    path = _existing(path)
    small = read_small(path, VARIABLES)
    if small is not None:
        attrs, arrays, dims = small
        shapes = {key: (dims[key], array.dtype, array.shape) for key, array in arrays.items()}
    else:
        attrs, arrays, shapes = _read_zarr(path)
    _check_structure(path, attrs, shapes)
    if verify:
        _check_digests(path, attrs, arrays, _hash_array)
    return StoreArrays(attrs, arrays)


def _read_zarr(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, tuple]]:
    import zarr

    try:
        group = zarr.open_group(str(path), mode="r")
        attrs = dict(group.attrs)
        arrays = {key: group[key] for key in VARIABLES if key in group}
        shapes = {key: (_dims(array), array.dtype, array.shape) for key, array in arrays.items()}
    except Exception as exc:  # any zarr/JSON/decoding failure means an unusable store
        raise _corrupt(path, f"cannot be opened ({type(exc).__name__}: "
                             f"{one_line(exc)[:120]})") from None
    return attrs, arrays, shapes


def _dims(array) -> tuple:
    """A zarr array's dimension names as xarray writes them (zarr v3 metadata, or v2's
    ``_ARRAY_DIMENSIONS`` attribute)."""
    names = getattr(array.metadata, "dimension_names", None)
    return tuple(names if names is not None else array.attrs.get("_ARRAY_DIMENSIONS", ()))


def _existing(path: str | os.PathLike[str]) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise StoreError(f"store {path} does not exist; run ingest(spec, store_root) to create it")
    return path


def _check_digests(path: Path, attrs: Mapping[str, Any], arrays: Mapping[str, Any],
                   digest_of) -> None:
    for key in VARIABLES:
        try:
            digest = digest_of(arrays[key])
        except Exception as exc:  # damaged chunk: decompression/decoding error
            raise _corrupt(path, f"fails its checksum ({key}: unreadable chunk, "
                                 f"{type(exc).__name__})") from None
        if digest != attrs["content_sha256"].get(key):
            raise _corrupt(path, f"fails its checksum ({key})")


def _check_structure(path: Path, attrs: Mapping[str, Any],
                     variables: Mapping[str, tuple[tuple, Any, tuple]]) -> None:
    """The attrs (every one required, unedited) and the (dims, dtype, shape) of each variable."""
    missing = [a for a in REQUIRED_ATTRS if a not in attrs]
    if missing:
        raise _corrupt(path, f"lacks attrs {', '.join(missing)}")
    if attrs["format_version"] != FORMAT_VERSION:
        raise _corrupt(path, f"has format_version={attrs['format_version']!r} but this code "
                             f"reads {FORMAT_VERSION}")
    try:
        digest = attrs_digest(attrs)
    except (TypeError, ValueError):  # not JSON any more
        digest = None
    if digest != attrs[ATTRS_DIGEST]:
        raise _corrupt(path, f"has attrs that were edited after ingest ({ATTRS_DIGEST} "
                             "mismatch)")
    if not isinstance(attrs["content_sha256"], Mapping):
        raise _corrupt(path, "has a malformed content_sha256 attr")
    want = {"train": attrs["n_train"], "test": attrs["n_test"], "feature": attrs["d"]}
    for key in VARIABLES:
        if key not in variables:
            raise _corrupt(path, f"lacks variable {key}")
        dims, dtype, shape = variables[key]
        if tuple(dims) != _DIMS[key] or dtype != np.float64:
            raise _corrupt(path, f"has {key} with dims {tuple(dims)} and dtype {dtype} (expected "
                                 f"{_DIMS[key]} float64)")
        expected = tuple(want[dim] for dim in _DIMS[key])
        if tuple(shape) != expected:
            raise _corrupt(path, f"has {key} of shape {tuple(shape)} but its attrs say "
                                 f"{expected}")


def fingerprint(path: Path) -> tuple:
    """(name, inode, size, mtime in ns) of every file of a store: any write changes it."""
    stamp = []
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            stamp.append((os.path.join(root, name), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(stamp))


# store path → (fingerprint, spec hash) of the stores this process verified: a sweep's jobs on
# one worker verify their store once, and again only when a file of it changed
_VERIFIED: dict[Path, tuple] = {}


def _check_existing(path: Path, expected_hash: str) -> None:
    stamp = fingerprint(path)
    if _VERIFIED.get(path) == (stamp, expected_hash):
        return
    _VERIFIED.pop(path, None)
    got = read_store(path).attrs.get("spec_hash")
    if got != expected_hash:
        raise _corrupt(path, f"was built from a different spec (spec_hash {str(got)[:12]}…, "
                             f"expected {expected_hash[:12]}…)")
    if fingerprint(path) == stamp:  # unchanged while it was read
        _VERIFIED[path] = (stamp, expected_hash)


def ingest(spec: Mapping[str, Any], store_root: str | os.PathLike[str]) -> Path:
    """Build the dataset and write its store once; return the store path.

    If the store exists it is verified (:func:`open_store`) and its ``spec_hash`` compared; a
    match returns without touching any file. Otherwise the store is written to a temporary
    sibling ``<path>.tmp-<uuid>`` and renamed into place, so the final path never holds a
    partial store; if another process got there first, its store is verified and used.

    A store that is there but damaged (a chunk deleted or changed, ``zarr.json`` garbled, a
    file in its place, attrs edited, another spec's) is rebuilt from its source the same way
    and replaces it, with a ``note:`` naming it: its content, and so the identity of the jobs
    on it, is what it was.

    Raises
    ------
    InputError
        Bad spec or data (nothing is written).
    StoreError
        The source cannot be read (a damaged shipped file), or ``store_root`` cannot be created
        or written (read-only, under a file, disk full): the OS reason is named and no partial
        store is left behind.
    """
    norm = normalise_spec(spec)
    expected = spec_hash(norm)
    path = store_path(norm, store_root)
    try:
        exists = path.exists() or path.is_symlink()
    except OSError as err:  # e.g. a store_root that may not be searched
        raise _unusable_root(store_root, err) from None
    damage = None
    if exists:
        try:
            _check_existing(path, expected)
            return path
        except DamagedStore as err:
            damage = err
    arrays, attrs = build(norm)
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    published = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_store(tmp, arrays, attrs)
        read_store(tmp)  # read back what was written before publishing it
        if damage is not None:
            published = _replace_damaged(path, tmp, expected, damage)
        elif not path.exists():
            try:
                os.rename(tmp, path)  # atomic: the final path is complete or absent
                published = True
            except OSError:
                if not path.exists():
                    raise
    except OSError as err:
        raise _unusable_root(store_root, err) from None
    finally:
        if tmp.exists():  # failed, or another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    if not published:  # another process published first: use theirs if it is sound
        _check_existing(path, expected)
    return path


def _replace_damaged(path: Path, tmp: Path, expected: str, damage: DamagedStore) -> bool:
    """Put the store just built at ``tmp`` in the place of the damaged one at ``path`` (moved
    aside, then removed), unless another process has repaired it meanwhile; True if it did."""
    try:
        _check_existing(path, expected)
        return False  # another process rebuilt it meanwhile
    except DamagedStore:
        pass
    aside = path.with_name(f"{path.name}.damaged-{uuid.uuid4().hex}")
    os.rename(path, aside)
    try:
        os.rename(tmp, path)
    finally:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            aside.unlink(missing_ok=True)
    _VERIFIED.pop(path, None)
    note(f"dataset store {path} {damage.what}: rebuilt from its source")
    return True


# (spec, store root) -> content digest of the stores this process ingested or built
_DIGESTS: dict[tuple[str, str], str] = {}


def _digest_of(attrs: Mapping[str, Any]) -> str:
    material = {key: attrs.get(key) for key in ("task", "content_sha256", "standardisation")}
    return hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":"),
                                     default=str).encode()).hexdigest()


def content_digest(spec: Mapping[str, Any], store_root: str | os.PathLike[str], *,
                   write: bool = True) -> str:
    """sha256 (64 hex) of what a dataset gives a job: its stored arrays (the split into train
    and test rows included), their task and the standardisation applied — not the spec or the
    code that built them. A job's identity holds this, so a change of builder code that leaves
    the data as it was (a new store name) reruns no job, and one that changes it reruns them.

    The store is ingested if it is not there (:func:`ingest`); with ``write=False`` (a dry run)
    a missing store is built in memory instead and nothing is written. Cached per process
    (the store's path names its spec and builder code).
    """
    norm = normalise_spec(spec)
    key = (json.dumps(norm, sort_keys=True, default=str), str(store_path(norm, store_root)))
    if key in _DIGESTS:
        return _DIGESTS[key]
    path = Path(key[1])
    if write:
        attrs = read_store(ingest(norm, store_root), verify=False).attrs
    else:  # nothing is written: a missing or damaged store is built in memory
        attrs = None
        if path.exists():
            try:
                _check_existing(path, spec_hash(norm))
                attrs = read_store(path, verify=False).attrs
            except DamagedStore as err:
                note(f"dataset store {path} {err.what}: a sweep would rebuild it from its "
                     "source")
        if attrs is None:
            attrs = build(norm)[1]
    _DIGESTS[key] = digest = _digest_of(attrs)
    return digest


def _unusable_root(store_root: str | os.PathLike[str], err: OSError) -> StoreError:
    return StoreError(f"cannot write a dataset store under store_root={str(store_root)!r}: "
                      + write_failure(err, store_root,
                                      elsewhere="pass store_root=<a writable directory>",
                                      rerun="rerun"))


def load_arrays(path: str | os.PathLike[str], *, verify: bool = True
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)`` from a store (verified unless ``verify=False``,
    for a store just returned by :func:`ingest`), as float64 numpy arrays."""
    store = read_store(path, verify=verify)
    X_train, y_train, X_test, y_test = (
        np.ascontiguousarray(store[key][...], dtype=np.float64) for key in VARIABLES)
    return X_train, y_train, X_test, y_test
