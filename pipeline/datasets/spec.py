"""Dataset specs: a name plus options, declared once with their defaults and validation.

A dataset is named by a *spec*: a plain mapping with ``name`` plus options (an OmegaConf
``DictConfig`` is accepted too). Each dataset registers its builder with its option table
(:func:`register`); :func:`normalise_spec` validates a spec and fills in the defaults, and
:func:`spec_hash` names its store. ``conf/dataset/<name>.yaml`` is tested against the tables.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.errors import InputError
from algorithms.options import Option, validate
from pipeline.codeversion import code_version
from pipeline.lines import one_line

FORMAT_VERSION = 2  # 2: attrs carry attrs_sha256 (format-1 stores get a new name, re-ingested)
_MISSING = "???"  # OmegaConf's marker for a mandatory value

Arrays = dict[str, np.ndarray]
Builder = Callable[[Mapping[str, Any]], tuple[Arrays, dict[str, Any]]]
Shape = Callable[[Mapping[str, Any]], tuple[int, int] | None]
Count = Callable[[Mapping[str, Any]], int]


class StoreError(InputError):
    """A corrupt, mismatched or missing store (or shipped file): one line naming path and fix."""


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset: its builder (normalised spec -> raw split arrays + provenance attrs), its
    options and, optionally, ``train_shape`` (normalised spec -> (n_train, d) of what the
    builder would return, computed cheaply from the options or a file's line count without
    building; None where that is not possible), which lets a job refuse a fit that is too large
    before the dataset is ingested. ``task``: ``regression`` (real targets) or
    ``classification`` (binary labels y ∈ {−1, +1}), matched against the algorithm's task
    before anything is read (:func:`task_of`). ``distinct_train`` (optional): the number of
    distinct training inputs, for an algorithm that merges equal inputs
    (``AlgorithmSpec.distinct_inputs``) to be sized before the ingest."""

    name: str
    build: Builder
    options: Mapping[str, Option]
    train_shape: Shape | None = None
    task: str = "regression"
    distinct_train: Count | None = None

    def source_files(self, norm: Mapping[str, Any]) -> list[Path]:
        """The user files this spec reads (its ``path`` options): hashed into the spec hash."""
        return [Path(norm[k]) for k, opt in self.options.items() if opt.kind == "path"]


DATASETS: dict[str, DatasetSpec] = {}


def register(name: str, options: Mapping[str, Option], train_shape: Shape | None = None,
             task: str = "regression", distinct_train: Count | None = None
             ) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder`` as dataset ``name`` with ``options`` (and, optionally,
    its cheap ``train_shape``, its ``task`` and its ``distinct_train``; see
    :class:`DatasetSpec`)."""
    def deco(fn: Builder) -> Builder:
        DATASETS[name] = DatasetSpec(name, fn, options, train_shape, task, distinct_train)
        return fn

    return deco


def task_of(spec: Mapping[str, Any]) -> str:
    """The task of the dataset ``spec`` names (regression or classification)."""
    return DATASETS[normalise_spec(spec)["name"]].task


def train_shape(spec: Mapping[str, Any]) -> tuple[int, int] | None:
    """(n_train, d) of the dataset ``spec`` names, without building it; None when the dataset
    does not declare a cheap way to tell. Raises InputError for a bad spec."""
    norm = normalise_spec(spec)
    shape = DATASETS[norm["name"]].train_shape
    return None if shape is None else shape(norm)


def distinct_train(spec: Mapping[str, Any]) -> int | None:
    """The number of distinct training inputs of the dataset ``spec`` names, where the dataset
    declares a way to tell before its ingest (None where it does not)."""
    norm = normalise_spec(spec)
    count = DATASETS[norm["name"]].distinct_train
    return None if count is None else int(count(norm))


def dataset_names() -> list[str]:
    """Names of all registered datasets, sorted."""
    return sorted(DATASETS)


def sha256_file(path: Path) -> str:
    stat = Path(path).stat()
    return _sha256_file(str(path), stat.st_size, stat.st_mtime_ns)


@functools.cache
def _sha256_file(path: str, size: int, mtime_ns: int) -> str:  # cached while the file is unchanged
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def as_dict(spec: Any) -> dict[str, Any]:
    try:  # a Hydra/OmegaConf node: resolve interpolations, keep '???' as a string
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf comes with hydra-core
        DictConfig = None  # noqa: N806
    if DictConfig is not None and isinstance(spec, DictConfig):
        spec = OmegaConf.to_container(spec, resolve=True)
    if not isinstance(spec, Mapping):
        raise InputError(f"dataset spec {spec!r} must be a mapping with a 'name'; pass e.g. "
                         "{'name': 'abalone'}")
    return dict(spec)


def normalise_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a spec and fill in defaults.

    Parameters
    ----------
    spec : mapping
        ``name`` plus any of that dataset's options.

    Returns
    -------
    dict
        ``{"name": ..., <every option>: value}``; a file path is made absolute.

    Raises
    ------
    InputError
        Unknown name, unknown option or a value of the wrong type/range (one line each).
    """
    spec = as_dict(spec)
    name = spec.get("name")
    if not isinstance(name, str) or name not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; choose one of: {', '.join(dataset_names())}")
    options = DATASETS[name].options
    given = {k: v for k, v in spec.items() if k != "name"}
    for key, opt in options.items():
        if opt.kind == "path" and given.get(key, opt.default) in (None, _MISSING):
            raise InputError(f"dataset {name!r} needs {key}=<file>; pass e.g. "
                             f"dataset.{key}={opt.example}")
    out = {"name": name, **validate(options, given, owner=f"dataset {name!r}", prefix="")}
    for key, opt in options.items():
        if opt.kind == "path":
            path = Path(out[key]).expanduser().resolve()
            if not path.is_file() or not os.access(path, os.R_OK):
                raise InputError(f"dataset {name!r}: {key}={out[key]!r} is not a readable file; "
                                 "pass the path of an existing file (.csv or .csv.gz)")
            out[key] = str(path)
    return out


def spec_hash(spec: Mapping[str, Any]) -> str:
    """sha256 (64 hex) of everything that determines a store's content; names the store.

    That is the normalised spec, the store format, the sha256 of every file the spec reads (so
    editing the file gives a new store) and the version of the code that builds it (its
    builder's module and this one, :func:`pipeline.codeversion.code_version`).
    """
    norm = normalise_spec(spec)
    builder = DATASETS[norm["name"]].build.__module__
    material: dict[str, Any] = {"spec": norm, "format_version": FORMAT_VERSION,
                                "code_version": code_version(builder, __name__,
                                                             packages=("pipeline.datasets",))}
    files = DATASETS[norm["name"]].source_files(norm)
    if files:
        material["source_sha256"] = sha256_file(files[0]) if len(files) == 1 else [
            sha256_file(f) for f in files]
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# ----------------------------------------------------------------------------- validation

VARIABLES = ("X_train", "y_train", "X_test", "y_test")


def sha256_array(a: np.ndarray) -> str:
    """sha256 of the array's bytes as little-endian float64 in C order."""
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f8").reshape(-1)).hexdigest()


def check_finite(a: np.ndarray, what: str, row_word: str = "row") -> None:
    bad = ~np.isfinite(a)
    if bad.any():
        first = np.argwhere(bad)[0]
        where = f"{row_word} {first[0]}" + (f", column {first[1]}" if a.ndim == 2 else "")
        raise InputError(f"{what} has {int(bad.sum())} NaN/inf values (first at {where}); clean "
                         "the source file or drop those rows")


def _validate(name: str, arrays: Mapping[str, np.ndarray]) -> Arrays:
    out = {}
    for key in VARIABLES:
        if key not in arrays:
            raise InputError(f"dataset {name!r}: builder returned no {key}; return all of "
                             f"{', '.join(VARIABLES)}")
        try:
            a = np.ascontiguousarray(arrays[key], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"dataset {name!r}: {key} is not numeric ({one_line(exc)}); clean "
                             "the source file") from None
        want = 2 if key.startswith("X") else 1
        if a.ndim != want:
            raise InputError(f"dataset {name!r}: {key} has shape {a.shape}; it must be "
                             f"{'(n, d)' if want == 2 else '(n,)'}")
        out[key] = a
    for part in ("train", "test"):
        X, y = out[f"X_{part}"], out[f"y_{part}"]
        if X.shape[0] != y.shape[0]:
            raise InputError(f"dataset {name!r}: X_{part} has {X.shape[0]} rows but y_{part} has "
                             f"{y.shape[0]}; give one target per input row")
    if out["X_train"].shape[0] < 1:
        raise InputError(f"dataset {name!r}: n_train is 0; pass n_train ≥ 1")
    if out["X_train"].shape[1] < 1 or out["X_test"].shape[1] != out["X_train"].shape[1]:
        raise InputError(f"dataset {name!r}: X_train has {out['X_train'].shape[1]} columns and "
                         f"X_test {out['X_test'].shape[1]}; both need the same d ≥ 1")
    for key in VARIABLES:
        check_finite(out[key], f"dataset {name!r}: {key}")
    return out


def _train_scale(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column means and standard deviations of ``values`` (train rows), without numpy's
    overflow warnings, and a mask of the columns they cannot standardise: a NaN/inf mean or std
    (values near ±1.8e308 overflow the sum of squares) or a std that underflows to 0 although
    the values differ (subnormal spreads)."""
    with np.errstate(all="ignore"):
        mean, std = values.mean(axis=0), values.std(axis=0)
    differ = values.max(axis=0) > values.min(axis=0)
    bad = ~np.isfinite(mean) | ~np.isfinite(std) | ((std == 0.0) & differ)
    return mean, std, bad


def _scale_error(name: str, what: str, values: np.ndarray, mean: float, std: float,
                 option: str) -> InputError:
    trouble = "underflows to 0" if std == 0.0 else "is not finite"
    return InputError(f"dataset {name!r}: cannot standardise {what}: its train std {trouble} "
                      f"(mean {mean:.3g}, std {std:.3g}, values in [{values.min():.3g}, "
                      f"{values.max():.3g}]); rescale that column in the source or pass "
                      f"dataset.{option}=false")


def _standardise(arrays: Arrays, spec: Mapping[str, Any],
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Standardise in place with TRAIN statistics; return what was used. ``extra`` (the
    builder's attrs) may name the columns: ``feature_names`` (one per input column) and
    ``target_name``.

    A constant training input column (all its train values equal, e.g. keggundirected's input
    9) has no scale: it is centred on its value (exactly 0 on every train row; a test row keeps
    its difference from it, unscaled), its ``x_std`` is 1, and its index is listed in
    ``x_constant`` (present only when some column is constant, so that the record, and the
    content digest, of a set without one is unchanged). A constant target keeps scale 1 too.

    Raises
    ------
    InputError
        A column (or y) whose mean or std over/underflows, named by index and name; nothing is
        changed.
    """
    name, extra = spec["name"], extra or {}
    info: dict[str, Any] = {"x_mean": None, "x_std": None, "y_mean": None, "y_std": None}
    if spec.get("standardize_x", False):
        X = arrays["X_train"]
        mean, std, bad = _train_scale(X)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            names = extra.get("feature_names")
            label = f" ({names[j]})" if names is not None and len(names) == X.shape[1] else ""
            raise _scale_error(name, f"input column {j}{label}", X[:, j], mean[j], std[j],
                               "standardize_x")
        constant = np.flatnonzero(X.max(axis=0) == X.min(axis=0))  # n_train ≥ 1: validated
        mean[constant] = X[0, constant]  # its value itself: the train column becomes exactly 0
        std[constant] = 1.0  # a mean of equal values may round, and its std need not be 0
    if spec.get("standardize_y", False):
        y = arrays["y_train"]
        mean_y, std_y, bad_y = (v[0] for v in _train_scale(y[:, None]))
        mean_y, std_y = float(mean_y), float(std_y)
        if bad_y:
            label = f" ({extra['target_name']})" if extra.get("target_name") else ""
            raise _scale_error(name, f"the target y{label}", y, mean_y, std_y, "standardize_y")
        std_y = std_y or 1.0
    with np.errstate(all="ignore"):  # both checked: only now is anything changed
        if spec.get("standardize_x", False):
            for key in ("X_train", "X_test"):
                arrays[key] = (arrays[key] - mean) / std
            info["x_mean"], info["x_std"] = mean.tolist(), std.tolist()
            if len(constant):
                info["x_constant"] = constant.tolist()
        if spec.get("standardize_y", False):
            for key in ("y_train", "y_test"):
                arrays[key] = (arrays[key] - mean_y) / std_y
            info["y_mean"], info["y_std"] = mean_y, std_y
    return info


# a dataset's arrays are held about this many times while built (the builder's own arrays,
# their validated float64 copies, the standardised ones)
BUILD_COPIES = 3


def check_buildable(spec: Mapping[str, Any], shape: tuple[int, int] | None) -> None:
    """Refuse, before anything is allocated, a dataset whose declared size (``shape``, its
    :func:`train_shape`, which the caller has: a CSV's is a pass over the file; plus ``n_test``
    where it is an option) needs more memory to build than this machine has available."""
    if shape is None:
        return
    norm = normalise_spec(spec)
    name = norm["name"]
    n_test = int(norm.get("n_test") or 0)
    need = BUILD_COPIES * (shape[0] + n_test) * (shape[1] + 1) * 8
    available = _available_memory()
    if need > available:
        big = "n_test" if n_test > shape[0] else "n_train"
        raise InputError(f"dataset {name!r}: n_train={shape[0]}"
                         + (f", n_test={n_test}" if n_test else "")
                         + f" (d = {shape[1]}) need about {_bytes(need)} to build, more than the "
                         f"{_bytes(available)} this machine has available; lower dataset.{big}")


# within memory_read_once(): the memory available, read at the block's first check
_AVAILABLE: ContextVar[list[int] | None] = ContextVar("available_memory", default=None)


@contextlib.contextmanager
def memory_read_once() -> Iterator[None]:
    """Within the block (a sweep's planning, this thread), :func:`check_buildable` reads the
    memory this machine has available once, not once a point (~0.1 ms each)."""
    token = _AVAILABLE.set([])
    try:
        yield
    finally:
        _AVAILABLE.reset(token)


def _available_memory() -> int:
    import psutil

    held = _AVAILABLE.get()
    if held is None:
        return psutil.virtual_memory().available
    if not held:
        held.append(psutil.virtual_memory().available)
    return held[0]


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def build(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Generate or load a dataset, split it, standardise it and validate it.

    Parameters
    ----------
    spec : mapping
        ``name`` plus options; missing options take their defaults.

    Returns
    -------
    arrays : dict of str to ndarray
        ``X_train (n_train, d)``, ``y_train (n_train,)``, ``X_test (n_test, d)``,
        ``y_test (n_test,)``, float64 C-contiguous, all finite.
    attrs : dict
        JSON-serialisable store attrs: ``name, spec, spec_hash, provenance, source_sha256,
        standardisation, content_sha256, n_train, n_test, d, format_version`` (+ extras such as
        ``jitter`` for matern1d).

    Raises
    ------
    InputError
        Bad spec, unreadable or non-finite data, inconsistent shapes (one-line message).
    """
    norm = normalise_spec(spec)
    name = norm["name"]
    check_buildable(norm, train_shape(norm))
    raw, extra = DATASETS[name].build(norm)
    arrays = _validate(name, raw)
    task = DATASETS[name].task
    if task == "classification":
        for key in ("y_train", "y_test"):
            bad = ~np.isin(arrays[key], (-1.0, 1.0))
            if bad.any():
                raise InputError(f"dataset {name!r}: {key} has {int(bad.sum())} labels outside "
                                 f"{{-1, +1}} (first {arrays[key][bad][0]!r}); a binary "
                                 "classification set codes its classes as -1 and +1")
    standardisation = _standardise(arrays, norm, extra)
    for key in VARIABLES:  # a test value far outside the train range may still overflow
        check_finite(arrays[key], f"dataset {name!r}: standardised {key}")
    attrs: dict[str, Any] = {
        "name": name,
        "spec": norm,
        "spec_hash": spec_hash(norm),
        "task": task,
        **extra,
        "standardisation": standardisation,
        "content_sha256": {key: sha256_array(arrays[key]) for key in VARIABLES},
        "n_train": int(arrays["X_train"].shape[0]),
        "n_test": int(arrays["X_test"].shape[0]),
        "d": int(arrays["X_train"].shape[1]),
        "format_version": FORMAT_VERSION,
    }
    json.dumps(attrs)  # must be JSON-serialisable (zarr attrs)
    return arrays, attrs

