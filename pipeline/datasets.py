"""Datasets: load or generate, split, standardise, validate, and store as verified zarr.

A dataset is named by a *spec*: a plain mapping with ``name`` plus options (an OmegaConf
``DictConfig`` is accepted too). :func:`build` turns a spec into four float64 arrays
(``X_train, y_train, X_test, y_test``) and JSON-serialisable attrs; :func:`ingest` writes them once
to ``<store_root>/<name>-<12 hex of the spec hash>.zarr`` (atomically, idempotently);
:func:`open_store` reopens a store lazily (dask-backed) after checking every array's sha256.

Real data ship with the package in ``pipeline/data/`` (see its README for provenance); each file's
sha256 is checked against :data:`_SOURCES` before it is read. Synthetic data are generated from
``numpy.random.default_rng(data_seed)``; their attrs state the equation and the paper section.

Store layout (``format_version`` 1): variables ``X_train (train, feature)``, ``y_train (train)``,
``X_test (test, feature)``, ``y_test (test)``, float64, row-chunked to about 32 MB per chunk.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from algorithms.base import InputError

__all__ = [
    "DATASETS",
    "FORMAT_VERSION",
    "StoreError",
    "build",
    "dataset_names",
    "ingest",
    "load_arrays",
    "normalise_spec",
    "open_store",
    "spec_hash",
    "store_path",
]

FORMAT_VERSION = 1
DATA_DIR = Path(__file__).resolve().parent / "data"
VARIABLES = ("X_train", "y_train", "X_test", "y_test")
_DIMS = {
    "X_train": ("train", "feature"),
    "y_train": ("train",),
    "X_test": ("test", "feature"),
    "y_test": ("test",),
}
REQUIRED_ATTRS = (
    "name", "spec", "spec_hash", "provenance", "source_sha256", "standardisation",
    "content_sha256", "n_train", "n_test", "d", "format_version",
)
_CHUNK_ELEMENTS = 2**22  # 4 Mi float64 = 32 MB per chunk
_MISSING = "???"  # OmegaConf's marker for a mandatory value

Arrays = dict[str, np.ndarray]
Builder = Callable[[Mapping[str, Any]], tuple[Arrays, dict[str, Any]]]


class StoreError(InputError):
    """A corrupt, mismatched or missing store (or shipped file): one line naming path and fix."""


# --------------------------------------------------------------------------------------------
# Shipped source files (copied from pipeline/data/README.md; checked before every read)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    sha256: str
    repo: str
    path: str
    commit: str
    origin: str


_ABALONE_REPO = ("gabriel-r-s/abalone-classifier", "79eca6fe3d70234bc878c0452277f00a8dc96339")
_UCI_REPO = ("treforevans/uci_datasets", "f0737523712fe66a1640e4b980b927e8490b58eb")
_UCI_LICENCE = ("Preprocessed version of Wilson et al.; repo licence MIT (Trefor Evans 2022)")
_UCI_ORIGINS = {
    "kin40k": "kin40k (robot-arm kinematics, built from the Delve 'kin' family; "
              "Schwaighofer & Tresp / Seeger et al.)",
    "protein": "UCI 'Physicochemical Properties of Protein Tertiary Structure' (CASP)",
    "elevators": "Torgo's regression collection (F16 aircraft control, 'elevators')",
    "pol": "Torgo's regression collection ('pole telecommunication')",
    "pumadyn32nm": "Delve 'pumadyn-32nm' (Puma 560 robot-arm dynamics)",
}
_UCI_SHA256 = {
    "kin40k": ("9bee7f2a9f39aa61a015f239378368601fb3978c5bb9a96433e88a55d40883ba",
               "d15fd645d0e81a9a17ce2d0b8dde470bb2efba4d5f417459965abe4b237e2aea"),
    "protein": ("f709d0107c3ee90ab019b9e5d77fc2ae182158958cb70b1903236a51334fd01b",
                "22afe05e8d17c428558d78a77efeecc08d58004b6c95741d1c533c3207c69fe9"),
    "elevators": ("e39bc18a80ec3611e4fd76d0f86ee377e96ba21b568b9997576d538dafe56b7b",
                  "9fe662eacca95ae2c9301cbc4c4134e55d58e903cb0cfb683771ffdd2d248eb5"),
    "pol": ("1c16126352954571e78f52d5a9d1b947a38655885d7cadd9407a4c9615fe4e04",
            "c5540259aabe58f5c7a534ed6f5141f8c1157d5de592e45884b7fced6091e981"),
    "pumadyn32nm": ("10d1698944e0f6e586f2781e4b62c17c05174d4c6cdb6fb824a3e5a1b3630ae4",
                    "5a70d06c54813712456b3631ef406094c121a20fdc68b2dd400a1045f45b3f43"),
}
UCI_NAMES = tuple(_UCI_SHA256)

_SOURCES: dict[str, _Source] = {
    "abalone.data": _Source(
        "de37cdcdcaaa50c309d514f248f7c2302a5f1f88c168905eba23fe2fbc78449f",
        _ABALONE_REPO[0], "abalone.data", _ABALONE_REPO[1],
        "UCI ML Repository 'Abalone' (Nash et al. 1994), CC BY 4.0 at UCI"),
    "abalone.names": _Source(
        "542eee5a2a0ee72db563de010dc3b5055b03c5dc624049ae1f2208fc66a14aac",
        _ABALONE_REPO[0], "abalone.names", _ABALONE_REPO[1], "UCI ML Repository"),
}
for _name, (_data_sha, _mask_sha) in _UCI_SHA256.items():
    _SOURCES[f"{_name}.csv.gz"] = _Source(
        _data_sha, _UCI_REPO[0], f"uci_datasets/{_name}/data.csv.gz", _UCI_REPO[1],
        f"{_UCI_ORIGINS[_name]}. {_UCI_LICENCE}")
    _SOURCES[f"{_name}_test_mask.csv.gz"] = _Source(
        _mask_sha, _UCI_REPO[0], f"uci_datasets/{_name}/test_mask.csv.gz", _UCI_REPO[1],
        f"{_UCI_ORIGINS[_name]}. {_UCI_LICENCE}")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sha256_array(a: np.ndarray) -> str:
    """sha256 of the array's bytes as little-endian float64 in C order."""
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f8").reshape(-1)).hexdigest()


def _shipped(filename: str) -> Path:
    """Path of a shipped data file after checking its sha256 against the provenance table."""
    path = DATA_DIR / filename
    if not path.is_file():
        raise StoreError(f"shipped data file {path} is missing; reinstall the package")
    got = _sha256_file(path)
    if got != _SOURCES[filename].sha256:
        raise StoreError(f"source file {path} sha256 mismatch (got {got[:12]}…, expected "
                         f"{_SOURCES[filename].sha256[:12]}…); reinstall the package")
    return path


def _provenance(filenames: tuple[str, ...]) -> str:
    parts = []
    for fn in filenames:
        s = _SOURCES[fn]
        parts.append(f"{fn}: {s.origin}; copied byte for byte from github.com/{s.repo} "
                     f"({s.path} @ {s.commit})")
    return " | ".join(parts)


# --------------------------------------------------------------------------------------------
# Options: defaults and validation
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Opt:
    """One dataset option: default value and the accepted kind/range."""

    default: Any
    kind: str  # "int" | "float" | "bool" | "str" | "path"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    none_ok: bool = False
    example: Any = None

    def describe(self) -> str:
        what = {"int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string", "path": "a file path"}[self.kind]
        if self.lo is not None and self.hi is not None:
            what += (f" in {'(' if self.lo_open else '['}{self.lo:g}, "
                     f"{self.hi:g}{')' if self.hi_open else ']'}")
        elif self.lo is not None:
            what += f" {'>' if self.lo_open else '≥'} {self.lo:g}"
        return what + (" or null" if self.none_ok else "")

    def check(self, value: Any) -> tuple[bool, Any]:
        if value is None:
            return self.none_ok, None
        if self.kind == "bool":
            return isinstance(value, (bool, np.bool_)), bool(value)
        if self.kind in ("str", "path"):
            return isinstance(value, str) and value != "", value
        if isinstance(value, (bool, np.bool_)):
            return False, value
        if self.kind == "int":
            if isinstance(value, (float, np.floating)) and float(value).is_integer():
                value = int(value)
            if not isinstance(value, (int, np.integer)):
                return False, value
            value = int(value)
        else:
            if not isinstance(value, (int, float, np.integer, np.floating)):
                return False, value
            value = float(value)
            if not math.isfinite(value):
                return False, value
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False, value
        if self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)):
            return False, value
        return True, value


def _seed() -> _Opt:
    return _Opt(0, "int", lo=0)


def _count(default: int, lo: int = 1) -> _Opt:
    return _Opt(default, "int", lo=lo)


def _var(default: float) -> _Opt:
    return _Opt(default, "float", lo=0.0)


_ABALONE_ROWS = 4177
_OPTIONS: dict[str, dict[str, _Opt]] = {
    "abalone": {
        "n_train": _Opt(4000, "int", lo=1, hi=_ABALONE_ROWS),
        "split_seed": _Opt(None, "int", lo=0, none_ok=True, example=0),
        "standardize_x": _Opt(True, "bool"),
        "standardize_y": _Opt(False, "bool"),
    },
    **{
        name: {
            "split": _Opt(0, "int", lo=0, hi=9),
            "n_train": _Opt(None, "int", lo=1, none_ok=True, example=2000),
            "standardize_x": _Opt(True, "bool"),
            "standardize_y": _Opt(True, "bool"),
        }
        for name in UCI_NAMES
    },
    "friedman1": {"data_seed": _seed(), "n_train": _count(1000), "n_test": _count(1000, 0),
                  "noise_var": _var(1.0)},
    "zhang_sparse_linear": {"data_seed": _seed(), "n_train": _count(1000),
                            "n_test": _count(1000, 0), "d": _count(1000)},
    "gaussian_bumps": {"data_seed": _seed(), "n_train": _count(10000), "n_test": _count(1000, 0),
                       "d": _count(20), "n_bumps": _count(200),
                       "bump_width": _Opt(40.0, "float", lo=0.0, lo_open=True),
                       "noise_var": _var(0.1)},
    "sine1d": {"data_seed": _seed(), "n_train": _count(200), "n_test": _count(200, 0),
               "noise_var": _var(0.01)},
    "matern1d": {"data_seed": _seed(), "n_train": _count(200), "n_test": _count(200, 0),
                 "mu": _Opt(0.1, "float", lo=0.0, lo_open=True), "noise_var": _var(1.0)},
    "csv": {
        "path": _Opt(None, "path", example="/data/my.csv"),
        "target": _Opt(-1, "int"),
        "test_fraction": _Opt(0.1, "float", lo=0.0, hi=1.0, hi_open=True),
        "split_seed": _Opt(0, "int", lo=0, none_ok=True),
        "standardize_x": _Opt(True, "bool"),
        "standardize_y": _Opt(False, "bool"),
        "delimiter": _Opt(",", "str", none_ok=True),
    },
}


def dataset_names() -> list[str]:
    """Names of all registered datasets, sorted."""
    return sorted(DATASETS)


def _as_dict(spec: Any) -> dict[str, Any]:
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
        ``{"name": ..., <every option>: value}``; a ``csv`` path is made absolute.

    Raises
    ------
    InputError
        Unknown name, unknown option or a value of the wrong type/range (one line each).
    """
    spec = _as_dict(spec)
    name = spec.get("name")
    if not isinstance(name, str) or name not in _OPTIONS:
        raise InputError(f"unknown dataset {name!r}; choose one of: {', '.join(dataset_names())}")
    options = _OPTIONS[name]
    unknown = sorted(str(k) for k in spec if k != "name" and k not in options)
    if unknown:
        raise InputError(f"dataset {name!r} has no option {unknown[0]!r}; allowed options: "
                         f"{', '.join(options)}")
    out: dict[str, Any] = {"name": name}
    for key, opt in options.items():
        value = spec.get(key, opt.default)
        if opt.kind == "path" and (value is None or value == _MISSING):
            raise InputError(f"dataset {name!r} needs {key}=<file>; pass e.g. "
                             f"dataset.{key}={opt.example}")
        ok, value = opt.check(value)
        if not ok:
            example = opt.example if opt.default is None else opt.default
            raise InputError(f"dataset {name!r}: {key}={spec.get(key)!r} is invalid; it must be "
                             f"{opt.describe()}, e.g. {key}={json.dumps(example)}")
        out[key] = value
    if name == "csv":
        path = Path(out["path"]).expanduser().resolve()
        if not path.is_file() or not os.access(path, os.R_OK):
            raise InputError(f"dataset 'csv': path={out['path']!r} is not a readable file; pass "
                             "the path of an existing CSV (.csv or .csv.gz)")
        out["path"] = str(path)
    return out


def spec_hash(spec: Mapping[str, Any]) -> str:
    """sha256 (64 hex) of the normalised spec and the store format; names the store.

    For ``csv`` the file's sha256 is hashed too, so editing the file gives a new store.
    """
    norm = normalise_spec(spec)
    material: dict[str, Any] = {"spec": norm, "format_version": FORMAT_VERSION}
    if norm["name"] == "csv":
        material["source_sha256"] = _sha256_file(Path(norm["path"]))
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Builders: spec -> raw split arrays + provenance attrs (build() validates and standardises)
# --------------------------------------------------------------------------------------------

DATASETS: dict[str, Builder] = {}


def _register(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        @functools.wraps(fn)
        def builder(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
            return fn(normalise_spec({**_as_dict(spec), "name": name}))

        DATASETS[name] = builder
        return builder

    return deco


def _split_rows(n: int, n_train: int, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Train/test row indices: the first n_train rows (seed None) or a seeded permutation."""
    order = np.arange(n) if seed is None else np.random.default_rng(seed).permutation(n)
    return order[:n_train], order[n_train:]


@functools.lru_cache(maxsize=16)
def _load_abalone() -> tuple[np.ndarray, np.ndarray]:
    path = _shipped("abalone.data")
    sex = np.loadtxt(path, delimiter=",", usecols=0, dtype=str)
    numeric = np.loadtxt(path, delimiter=",", usecols=range(1, 9), dtype=np.float64)
    levels = np.array(["M", "F", "I"])
    onehot = (sex[:, None] == levels[None, :]).astype(np.float64)
    if not (onehot.sum(axis=1) == 1).all():
        raise StoreError(f"source file {path} has a Sex value outside M/F/I; reinstall the package")
    X = np.hstack([onehot, numeric[:, :7]])
    y = numeric[:, 7]
    X.flags.writeable = False
    y.flags.writeable = False
    return X, y


@_register("abalone")
def _abalone(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Abalone (UCI): Sex one-hot (M, F, I) + 7 numeric = 10 inputs; target Rings.

    ``split_seed`` null keeps the file order (first ``n_train`` rows train, as in Smola &
    Bartlett 2000 §5: 4000/177); an int draws a random permutation (the (3000, 1177) splits).
    """
    X, y = _load_abalone()
    tr, te = _split_rows(len(y), spec["n_train"], spec["split_seed"])
    arrays = {"X_train": X[tr], "y_train": y[tr], "X_test": X[te], "y_test": y[te]}
    attrs = {
        "provenance": _provenance(("abalone.data",)) + ". Inputs: Sex one-hot (M, F, I) + "
        "Length, Diameter, Height, Whole, Shucked, Viscera, Shell weight; target Rings",
        "source_sha256": {"abalone.data": _SOURCES["abalone.data"].sha256},
        "feature_names": ["sex_M", "sex_F", "sex_I", "length", "diameter", "height",
                          "whole_weight", "shucked_weight", "viscera_weight", "shell_weight"],
    }
    return arrays, attrs


@functools.lru_cache(maxsize=16)
def _load_uci(name: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(_shipped(f"{name}.csv.gz"), delimiter=",", dtype=np.float64, ndmin=2)
    mask = np.loadtxt(_shipped(f"{name}_test_mask.csv.gz"), delimiter=",", dtype=bool, ndmin=2)
    data.flags.writeable = False
    mask.flags.writeable = False
    return data, mask


def _uci(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """A Wilson et al. UCI benchmark: last column is the target, test rows = mask[:, split]."""
    name = spec["name"]
    data, mask = _load_uci(name)
    test = mask[:, spec["split"]]
    train_rows = np.flatnonzero(~test)
    if spec["n_train"] is not None:
        if spec["n_train"] > len(train_rows):
            raise InputError(f"dataset {name!r}: n_train={spec['n_train']} exceeds the "
                             f"{len(train_rows)} training rows of split {spec['split']}; pass "
                             f"n_train ≤ {len(train_rows)} or null")
        train_rows = train_rows[: spec["n_train"]]
    test_rows = np.flatnonzero(test)
    arrays = {"X_train": data[train_rows, :-1], "y_train": data[train_rows, -1],
              "X_test": data[test_rows, :-1], "y_test": data[test_rows, -1]}
    files = (f"{name}.csv.gz", f"{name}_test_mask.csv.gz")
    attrs = {
        "provenance": _provenance(files) + f". Target: last column; test rows: mask column "
        f"{spec['split']} (10% of rows)",
        "source_sha256": {fn: _SOURCES[fn].sha256 for fn in files},
    }
    return arrays, attrs


for _name in UCI_NAMES:
    _register(_name)(_uci)


def _rng(spec: Mapping[str, Any]) -> np.random.Generator:
    return np.random.default_rng(spec["data_seed"])


def _split_generated(X: np.ndarray, y: np.ndarray, n_train: int) -> Arrays:
    return {"X_train": X[:n_train], "y_train": y[:n_train],
            "X_test": X[n_train:], "y_test": y[n_train:]}


def _synthetic_attrs(provenance: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"provenance": f"synthetic: {provenance}; generated by pipeline.datasets with "
            f"numpy.random.default_rng(data_seed={spec['data_seed']}); train and test rows are "
            "drawn together (first n_train rows train), test targets carry the same noise",
            "source_sha256": "synthetic"}


def friedman1_mean(X: np.ndarray) -> np.ndarray:
    """Noise-free Friedman #1: 10 sin(π x1 x2) + 20 (x3 − 0.5)² + 10 x4 + 5 x5."""
    X = np.asarray(X, dtype=np.float64)
    return (10.0 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20.0 * (X[:, 2] - 0.5) ** 2
            + 10.0 * X[:, 3] + 5.0 * X[:, 4])


@_register("friedman1")
def _friedman1(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Friedman #1 (Csató & Opper 2002, Figs. 3.2/3.4). Draws: X (n, 10), then noise (n)."""
    rng = _rng(spec)
    n = spec["n_train"] + spec["n_test"]
    X = rng.uniform(0.0, 1.0, size=(n, 10))
    y = friedman1_mean(X) + math.sqrt(spec["noise_var"]) * rng.standard_normal(n)
    return _split_generated(X, y, spec["n_train"]), _synthetic_attrs(
        "Friedman #1 (Friedman 1991), as used by Csató & Opper (2002) Figs. 3.2/3.4: "
        "x ~ U(0,1)^10, y = 10 sin(π x1 x2) + 20 (x3 − 0.5)² + 10 x4 + 5 x5 + N(0, noise_var) "
        f"with noise_var = {spec['noise_var']:g}", spec)


@_register("zhang_sparse_linear")
def _zhang(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Zhang (2001) §4. Draws: w̄ (d), then X zero mask and values (n, d), then noise (n)."""
    rng = _rng(spec)
    n, d = spec["n_train"] + spec["n_test"], spec["d"]
    w = rng.uniform(0.0, 1.0, size=d)
    nonzero = rng.uniform(size=(n, d)) >= 0.99
    X = np.where(nonzero, rng.uniform(0.0, 1.0, size=(n, d)), 0.0)
    y = X @ w + rng.uniform(-1.0, 1.0, size=n)
    attrs = _synthetic_attrs(
        "Zhang (2001) §4 sparse linear problem: each input entry is 0 w.p. 0.99, else U(0,1); "
        f"w̄ ~ U(0,1)^d (d = {d}); y = w̄ᵀx + U(−1,1) noise; no standardisation", spec)
    attrs["w_bar_sha256"] = _sha256_array(w)
    return _split_generated(X, y, spec["n_train"]), attrs


def gaussian_bumps_mean(X: np.ndarray, centres: np.ndarray, coef: np.ndarray,
                        bump_width: float, block_rows: int = 8192) -> np.ndarray:
    """Σ_j coef_j exp(−‖x − c_j‖² / bump_width) for every row of X, in blocks of rows."""
    X = np.asarray(X, dtype=np.float64)
    c2 = np.einsum("ij,ij->i", centres, centres)
    out = np.empty(len(X))
    for start in range(0, len(X), block_rows):
        xb = X[start:start + block_rows]
        sq = np.einsum("ij,ij->i", xb, xb)[:, None] + c2[None, :] - 2.0 * (xb @ centres.T)
        np.maximum(sq, 0.0, out=sq)
        out[start:start + block_rows] = np.exp(sq / -bump_width) @ coef
    return out


@_register("gaussian_bumps")
def _gaussian_bumps(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Smola & Bartlett (2000) §5. Draws: centres (m, d), coef (m), X (n, d), noise (n)."""
    rng = _rng(spec)
    n, d, m = spec["n_train"] + spec["n_test"], spec["d"], spec["n_bumps"]
    centres = rng.standard_normal((m, d))
    coef = rng.standard_normal(m)
    X = rng.standard_normal((n, d))
    y = (gaussian_bumps_mean(X, centres, coef, spec["bump_width"])
         + math.sqrt(spec["noise_var"]) * rng.standard_normal(n))
    return _split_generated(X, y, spec["n_train"]), _synthetic_attrs(
        "Smola & Bartlett (2000) §5 synthetic problem: x ~ N(0, I_d) (d = "
        f"{d}); y = Σ_{{j=1..{m}}} a_j exp(−‖x − c_j‖² / {spec['bump_width']:g}) + "
        f"N(0, {spec['noise_var']:g}), a_j ~ N(0,1), c_j ~ N(0, I_d) (bump_width = 2ω²)", spec)


@_register("sine1d")
def _sine1d(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """1-D toy problem. Draws: x (n), then noise (n)."""
    rng = _rng(spec)
    n = spec["n_train"] + spec["n_test"]
    x = rng.uniform(0.0, 1.0, size=n)
    y = np.sin(2.0 * np.pi * x) + math.sqrt(spec["noise_var"]) * rng.standard_normal(n)
    return _split_generated(x[:, None], y, spec["n_train"]), _synthetic_attrs(
        "1-D toy problem (smoke tests, no paper): x ~ U(0,1), y = sin(2π x) + "
        f"N(0, {spec['noise_var']:g})", spec)


_MATERN_MAX_ROWS = 20000
_MATERN_JITTER = 1e-10


def matern32(x: np.ndarray, z: np.ndarray, mu: float) -> np.ndarray:
    """Matérn-3/2 kernel (1 + h) e^{−h}, h = |x − z| / mu, for 1-D inputs."""
    h = np.abs(np.asarray(x, dtype=np.float64)[:, None] - np.asarray(z)[None, :]) / mu
    return (1.0 + h) * np.exp(-h)


@_register("matern1d")
def _matern1d(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Ferrari-Trecate et al. (1999) §5. Draws: x (n), z (n) for f = L z, noise (n)."""
    rng = _rng(spec)
    n = spec["n_train"] + spec["n_test"]
    if n > _MATERN_MAX_ROWS:
        raise InputError(f"dataset 'matern1d': n_train + n_test = {n} exceeds {_MATERN_MAX_ROWS} "
                         "(the joint GP draw is an O(n³) Cholesky); pass fewer rows")
    x = rng.uniform(0.0, 1.0, size=n)
    z = rng.standard_normal(n)
    K = matern32(x, x, spec["mu"])
    jitter = _MATERN_JITTER
    while True:  # 1e-10 suffices at the default size; grow it (and record it) only if needed
        try:
            L = np.linalg.cholesky(K + jitter * np.eye(n))
            break
        except np.linalg.LinAlgError:
            if jitter >= 1e-4:
                raise InputError(f"dataset 'matern1d': the Matérn kernel matrix is not positive "
                                 f"definite even with jitter {jitter:g}; pass a smaller mu or "
                                 "fewer rows") from None
            jitter *= 10.0
    f = L @ z
    y = f + math.sqrt(spec["noise_var"]) * rng.standard_normal(n)
    attrs = _synthetic_attrs(
        "Ferrari-Trecate, Williams & Opper (1999) §5: x ~ U(0,1), f ~ GP(0, (1 + h) e^{−h}) "
        f"with h = |x − x'| / {spec['mu']:g} (Matérn-3/2) drawn jointly on train+test points "
        f"as f = L z, L = chol(K + {jitter:g}·I); y = f + N(0, {spec['noise_var']:g})", spec)
    attrs["jitter"] = jitter
    return _split_generated(x[:, None], y, spec["n_train"]), attrs


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


@_register("csv")
def _csv(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """A user file: numeric, no header, one sample per row (``.gz`` is decompressed)."""
    path = Path(spec["path"])
    try:
        data = np.loadtxt(path, delimiter=spec["delimiter"], dtype=np.float64, ndmin=2)
    except (ValueError, OSError) as exc:
        raise InputError(f"dataset 'csv': cannot read {path} ({_one_line(exc)}); make it a "
                         f"numeric table without header, delimiter {spec['delimiter']!r}, the "
                         "same number of columns in every row") from None
    n, cols = data.shape
    if cols < 2 or n < 2:
        raise InputError(f"dataset 'csv': {path} has shape ({n}, {cols}); it needs at least 2 "
                         "rows and 2 columns (inputs + target)")
    target = spec["target"]
    if not -cols <= target < cols:
        raise InputError(f"dataset 'csv': target={target} is out of range for {cols} columns; "
                         f"pass a column index in [{-cols}, {cols - 1}]")
    _check_finite(data, f"dataset 'csv': {path}", "data row")
    n_test = int(round(spec["test_fraction"] * n))
    if n - n_test < 1:
        raise InputError(f"dataset 'csv': test_fraction={spec['test_fraction']} leaves no "
                         f"training rows of {n}; pass a smaller test_fraction")
    target %= cols
    X, y = np.delete(data, target, axis=1), data[:, target]
    tr, te = _split_rows(n, n - n_test, spec["split_seed"])
    arrays = {"X_train": X[tr], "y_train": y[tr], "X_test": X[te], "y_test": y[te]}
    return arrays, {"provenance": f"user file {path} (column {target} is the target)",
                    "source_sha256": {path.name: _sha256_file(path)}}


# --------------------------------------------------------------------------------------------
# build: validate + standardise
# --------------------------------------------------------------------------------------------

def _check_finite(a: np.ndarray, what: str, row_word: str = "row") -> None:
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
            raise InputError(f"dataset {name!r}: {key} is not numeric ({_one_line(exc)}); clean "
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
        _check_finite(out[key], f"dataset {name!r}: {key}")
    return out


def _standardise(arrays: Arrays, spec: Mapping[str, Any]) -> dict[str, Any]:
    """Standardise in place with TRAIN statistics (std 0 -> 1); return what was used."""
    info: dict[str, Any] = {"x_mean": None, "x_std": None, "y_mean": None, "y_std": None}
    if spec.get("standardize_x", False):
        mean = arrays["X_train"].mean(axis=0)
        std = arrays["X_train"].std(axis=0)
        std[std == 0.0] = 1.0
        for key in ("X_train", "X_test"):
            arrays[key] = (arrays[key] - mean) / std
        info["x_mean"], info["x_std"] = mean.tolist(), std.tolist()
    if spec.get("standardize_y", False):
        mean_y = float(arrays["y_train"].mean())
        std_y = float(arrays["y_train"].std()) or 1.0
        for key in ("y_train", "y_test"):
            arrays[key] = (arrays[key] - mean_y) / std_y
        info["y_mean"], info["y_std"] = mean_y, std_y
    return info


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
    raw, extra = DATASETS[name](norm)
    arrays = _validate(name, raw)
    standardisation = _standardise(arrays, norm)
    for key in VARIABLES:  # standardisation may overflow on absurd inputs
        _check_finite(arrays[key], f"dataset {name!r}: standardised {key}")
    attrs: dict[str, Any] = {
        "name": name,
        "spec": norm,
        "spec_hash": spec_hash(norm),
        **extra,
        "standardisation": standardisation,
        "content_sha256": {key: _sha256_array(arrays[key]) for key in VARIABLES},
        "n_train": int(arrays["X_train"].shape[0]),
        "n_test": int(arrays["X_test"].shape[0]),
        "d": int(arrays["X_train"].shape[1]),
        "format_version": FORMAT_VERSION,
    }
    json.dumps(attrs)  # must be JSON-serialisable (zarr attrs)
    return arrays, attrs


# --------------------------------------------------------------------------------------------
# Stores
# --------------------------------------------------------------------------------------------

def store_path(spec: Mapping[str, Any], store_root: str | os.PathLike[str]) -> Path:
    """``<store_root>/<name>-<first 12 hex of spec_hash>.zarr`` (nothing is created)."""
    norm = normalise_spec(spec)
    return Path(store_root).expanduser() / f"{norm['name']}-{spec_hash(norm)[:12]}.zarr"


def _rows_per_chunk(n: int, d: int) -> int:
    return max(1, min(max(n, 1), _CHUNK_ELEMENTS // max(d, 1)))


def _write_store(path: Path, arrays: Arrays, attrs: Mapping[str, Any]) -> None:
    ds = xr.Dataset({key: (_DIMS[key], arrays[key]) for key in VARIABLES}, attrs=dict(attrs))
    d = int(attrs["d"])
    encoding = {}
    for key in VARIABLES:
        rows = _rows_per_chunk(arrays[key].shape[0], d)
        encoding[key] = {"chunks": (rows, d) if key.startswith("X") else (rows,)}
    ds.to_zarr(path, mode="w-", zarr_format=3, consolidated=False, encoding=encoding)


def _corrupt(path: Path, what: str) -> StoreError:
    return StoreError(f"store {path} {what}; delete {path} and rerun to re-ingest")


def _hash_variable(var: xr.DataArray) -> str:
    """sha256 of a (dask-backed) variable, read one row chunk at a time."""
    h = hashlib.sha256()
    data = var.data
    bounds = np.cumsum((0,) + tuple(data.chunks[0])) if hasattr(data, "chunks") else (0, len(var))
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        block = np.asarray(data[int(start):int(stop)])
        h.update(np.ascontiguousarray(block, dtype="<f8").reshape(-1))
    return h.hexdigest()


def open_store(path: str | os.PathLike[str], *, verify: bool = True) -> xr.Dataset:
    """Open a dataset store lazily (dask arrays, one chunk per ~32 MB of rows) and verify it.

    Parameters
    ----------
    path : path-like
        A store written by :func:`ingest`.
    verify : bool, default True
        Recompute the sha256 of every array and compare with ``attrs["content_sha256"]``
        (reads the whole store once). Structure and attrs are always checked.

    Raises
    ------
    StoreError
        Missing path, unreadable metadata, missing variables/attrs, wrong ``format_version``,
        shapes that disagree with the attrs, an unreadable chunk or a checksum mismatch.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise StoreError(f"store {path} does not exist; run ingest(spec, store_root) to create it")
    try:
        ds = xr.open_zarr(path, consolidated=False)
    except Exception as exc:  # any zarr/JSON/decoding failure means an unusable store
        raise _corrupt(path, f"cannot be opened ({type(exc).__name__}: "
                             f"{_one_line(exc)[:120]})") from None
    try:
        _check_structure(path, ds)
        if verify:
            for key in VARIABLES:
                try:
                    digest = _hash_variable(ds[key])
                except Exception as exc:  # damaged chunk: decompression/decoding error
                    raise _corrupt(path, f"fails its checksum ({key}: unreadable chunk, "
                                         f"{type(exc).__name__})") from None
                if digest != ds.attrs["content_sha256"].get(key):
                    raise _corrupt(path, f"fails its checksum ({key})")
    except BaseException:
        ds.close()
        raise
    return ds


def _check_structure(path: Path, ds: xr.Dataset) -> None:
    missing = [a for a in REQUIRED_ATTRS if a not in ds.attrs]
    if missing:
        raise _corrupt(path, f"lacks attrs {', '.join(missing)}")
    if ds.attrs["format_version"] != FORMAT_VERSION:
        raise _corrupt(path, f"has format_version={ds.attrs['format_version']!r} but this code "
                             f"reads {FORMAT_VERSION}")
    if not isinstance(ds.attrs["content_sha256"], Mapping):
        raise _corrupt(path, "has a malformed content_sha256 attr")
    want = {"train": ds.attrs["n_train"], "test": ds.attrs["n_test"], "feature": ds.attrs["d"]}
    for key in VARIABLES:
        if key not in ds.data_vars:
            raise _corrupt(path, f"lacks variable {key}")
        var = ds[key]
        if var.dims != _DIMS[key] or var.dtype != np.float64:
            raise _corrupt(path, f"has {key} with dims {var.dims} and dtype {var.dtype} (expected "
                                 f"{_DIMS[key]} float64)")
        shape = tuple(want[dim] for dim in _DIMS[key])
        if var.shape != shape:
            raise _corrupt(path, f"has {key} of shape {var.shape} but its attrs say {shape}")


def _check_existing(path: Path, expected_hash: str) -> None:
    ds = open_store(path)
    try:
        got = ds.attrs.get("spec_hash")
    finally:
        ds.close()
    if got != expected_hash:
        raise StoreError(f"store {path} was built from a different spec (spec_hash "
                         f"{str(got)[:12]}…, expected {expected_hash[:12]}…); delete {path} and "
                         "rerun to re-ingest")


def ingest(spec: Mapping[str, Any], store_root: str | os.PathLike[str]) -> Path:
    """Build the dataset and write its store once; return the store path.

    If the store exists it is verified (:func:`open_store`) and its ``spec_hash`` compared; a
    match returns without touching any file. Otherwise the store is written to a temporary
    sibling ``<path>.tmp-<uuid>`` and renamed into place, so the final path never holds a
    partial store; if another process got there first, its store is verified and used.

    Raises
    ------
    InputError
        Bad spec or data (nothing is written).
    StoreError
        The existing store is corrupt or was built from another spec.
    """
    norm = normalise_spec(spec)
    expected = spec_hash(norm)
    path = store_path(norm, store_root)
    if path.exists():
        _check_existing(path, expected)
        return path
    arrays, attrs = build(norm)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    published = False
    try:
        _write_store(tmp, arrays, attrs)
        open_store(tmp).close()  # read back what was written before publishing it
        if not path.exists():
            try:
                os.rename(tmp, path)  # atomic: the final path is complete or absent
                published = True
            except OSError:
                if not path.exists():
                    raise
    finally:
        if tmp.exists():  # failed, or another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    if not published:  # another process published first: use theirs if it is sound
        _check_existing(path, expected)
    return path


def load_arrays(path: str | os.PathLike[str], *, verify: bool = True
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)`` from a store (verified unless ``verify=False``,
    for a store just returned by :func:`ingest`), as float64 numpy arrays."""
    ds = open_store(path, verify=verify)
    try:
        X_train, y_train, X_test, y_test = (
            np.ascontiguousarray(ds[key].values, dtype=np.float64) for key in VARIABLES)
    finally:
        ds.close()
    return X_train, y_train, X_test, y_test
