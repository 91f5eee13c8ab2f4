"""Real data shipped with the package (``pipeline/data/``, provenance in its README) and the
user's own CSV files. Every shipped file's sha256 is checked against :data:`SOURCES` before
it is read."""

from __future__ import annotations

import functools
import gzip
import warnings
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.errors import InputError
from algorithms.options import SEED_MAX, Option
from pipeline.datasets.spec import (
    Arrays,
    StoreError,
    check_finite,
    one_line,
    register,
    sha256_file,
)

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


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
    "bike": "UCI 'Bike Sharing' (Fanaee-T & Gama 2013), hourly counts",
    "keggdirected": "UCI 'KEGG Metabolic Relation Network (Directed)'",
    "keggundirected": "UCI 'KEGG Metabolic Reaction Network (Undirected)'",
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
    "bike": ("411f76ae426c0e348a2629dcf6b3b29102c7db465eae780a3454c39db1dfac4f",
             "cf13dc25e80c03019cf2b01666f9cc29b03ea222f5c519536023ea56669bf337"),
    "keggdirected": ("51b7bb56e3f3eae36273cdd5a549c042bdf0ec10948a6f8e6b01a1d6912212cd",
                     "b8a7fc902444fdbc5866e8bf314e4778a303d675ef5267c83c5c25b70dacd357"),
    "keggundirected": ("117419270e50f581df18bf996ffc8b6bf1bb76c9f3640331ac9d6e64cff63d4e",
                       "ea56968ffbf638720943f2758fe0464e1ff532654bc5a67c369a1cda8c6e7f13"),
}
UCI_NAMES = tuple(_UCI_SHA256)

# The rule, applied before any run: a file's columns that are not inputs but parts of the
# target are dropped whenever the set is loaded (the file and its sha256 stay as shipped).
# bike's file inputs 15 and 16 are the UCI 'casual' and 'registered' counts (centred), whose
# sum is the hourly count cnt the target is log(cnt), centred, of: their sum correlates
# 0.9999999992 with exp(target) (Pearson; Spearman 0.9999975 with the target), against at
# most 0.973 (0.990) for any other pair and 0.418 (0.536) for any pair of the other inputs.
# A set's inputs are its file's columns but the last (the target), less these.
DROPPED_INPUTS: dict[str, tuple[tuple[int, ...], str]] = {
    "bike": ((15, 16), "the UCI 'casual' and 'registered' counts (centred), whose sum is the "
             "hourly count whose log, centred, is the target: a leak of the target"),
}


def uci_inputs(name: str, columns: int) -> np.ndarray:
    """The file columns a UCI set's inputs are, of its ``columns`` (target last): every one
    but the target and the set's :data:`DROPPED_INPUTS`."""
    return np.setdiff1d(np.arange(columns - 1), DROPPED_INPUTS.get(name, ((), ""))[0])
_SKLEARN = ("scikit-learn/scikit-learn", "1.9.1")  # the release tag the file was taken from

SOURCES: dict[str, _Source] = {
    "abalone.data": _Source(
        "de37cdcdcaaa50c309d514f248f7c2302a5f1f88c168905eba23fe2fbc78449f",
        _ABALONE_REPO[0], "abalone.data", _ABALONE_REPO[1],
        "UCI ML Repository 'Abalone' (Nash et al. 1994), CC BY 4.0 at UCI"),
    "abalone.names": _Source(
        "542eee5a2a0ee72db563de010dc3b5055b03c5dc624049ae1f2208fc66a14aac",
        _ABALONE_REPO[0], "abalone.names", _ABALONE_REPO[1], "UCI ML Repository"),
}
SOURCES["breast_cancer.csv"] = _Source(
    "fed3eb72d0575ef6192293f5093c6e801b1476b577d0386bf4455504522172ed",
    _SKLEARN[0], "sklearn/datasets/data/breast_cancer.csv", _SKLEARN[1],
    "UCI ML Repository 'Breast Cancer Wisconsin (Diagnostic)' (Wolberg, Street & Mangasarian "
    "1995), CC BY 4.0 at UCI")
for _name, (_data_sha, _mask_sha) in _UCI_SHA256.items():
    SOURCES[f"{_name}.csv.gz"] = _Source(
        _data_sha, _UCI_REPO[0], f"uci_datasets/{_name}/data.csv.gz", _UCI_REPO[1],
        f"{_UCI_ORIGINS[_name]}. {_UCI_LICENCE}")
    SOURCES[f"{_name}_test_mask.csv.gz"] = _Source(
        _mask_sha, _UCI_REPO[0], f"uci_datasets/{_name}/test_mask.csv.gz", _UCI_REPO[1],
        f"{_UCI_ORIGINS[_name]}. {_UCI_LICENCE}")



def _shipped(filename: str) -> Path:
    """Path of a shipped data file after checking its sha256 against the provenance table."""
    path = DATA_DIR / filename
    if not path.is_file():
        raise StoreError(f"shipped data file {path} is missing; reinstall the package")
    got = sha256_file(path)
    if got != SOURCES[filename].sha256:
        raise StoreError(f"source file {path} sha256 mismatch (got {got[:12]}…, expected "
                         f"{SOURCES[filename].sha256[:12]}…); reinstall the package")
    return path


def _provenance(filenames: tuple[str, ...]) -> str:
    parts = []
    for fn in filenames:
        s = SOURCES[fn]
        parts.append(f"{fn}: {s.origin}; copied byte for byte from github.com/{s.repo} "
                     f"({s.path} @ {s.commit})")
    return " | ".join(parts)



def split_rows(n: int, n_train: int, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Train/test row indices: the first n_train rows (seed None) or a seeded permutation."""
    order = np.arange(n) if seed is None else np.random.default_rng(seed).permutation(n)
    return order[:n_train], order[n_train:]


@functools.lru_cache(maxsize=16)
def load_abalone() -> tuple[np.ndarray, np.ndarray]:
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


_ABALONE_ROWS = 4177


@register("abalone", {
    "n_train": Option(4000, "int", lo=1, hi=_ABALONE_ROWS),
    "split_seed": Option(None, "int", lo=0, hi=SEED_MAX, none_ok=True, example=0),
    "split": Option(None, "int", "like the UCI sets' split index: split k is split_seed k",
                    lo=0, none_ok=True, example=0),
    "standardize_x": Option(True, "bool"),
    "standardize_y": Option(False, "bool"),
}, train_shape=lambda spec: (spec["n_train"], 10))
def _abalone(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Abalone (UCI): Sex one-hot (M, F, I) + 7 numeric = 10 inputs; target Rings.

    ``split_seed`` null keeps the file order (first ``n_train`` rows train, as in Smola &
    Bartlett 2000 §5: 4000/177); an int draws a random permutation (the (3000, 1177) splits).
    ``split`` k is the same as ``split_seed`` k, so that one sweep key ``dataset.split``
    selects splits of abalone and of the UCI sets alike; setting both is refused.
    """
    if spec["split"] is not None and spec["split_seed"] is not None:
        raise StoreError(f"abalone: dataset.split={spec['split']} and dataset.split_seed="
                         f"{spec['split_seed']} both choose the split; pass one of them")
    X, y = load_abalone()
    seed = spec["split"] if spec["split"] is not None else spec["split_seed"]
    tr, te = split_rows(len(y), spec["n_train"], seed)
    arrays = {"X_train": X[tr], "y_train": y[tr], "X_test": X[te], "y_test": y[te]}
    attrs = {
        "provenance": _provenance(("abalone.data",)) + ". Inputs: Sex one-hot (M, F, I) + "
        "Length, Diameter, Height, Whole, Shucked, Viscera, Shell weight; target Rings",
        "source_sha256": {"abalone.data": SOURCES["abalone.data"].sha256},
        "feature_names": ["sex_M", "sex_F", "sex_I", "length", "diameter", "height",
                          "whole_weight", "shucked_weight", "viscera_weight", "shell_weight"],
    }
    return arrays, attrs


def _split_seed(name: str, spec: Mapping[str, Any]) -> int | None:
    """``split`` k is ``split_seed`` k (one sweep key selects splits of every set); both set
    is refused."""
    if spec["split"] is not None and spec["split_seed"] is not None:
        raise StoreError(f"{name}: dataset.split={spec['split']} and dataset.split_seed="
                         f"{spec['split_seed']} both choose the split; pass one of them")
    return spec["split"] if spec["split"] is not None else spec["split_seed"]


_SPLIT_OPTIONS = {
    "split_seed": Option(None, "int", lo=0, hi=SEED_MAX, none_ok=True, example=0),
    "split": Option(None, "int", "like the UCI sets' split index: split k is split_seed k",
                    lo=0, none_ok=True, example=0),
}


@register("abalone_binary", {
    "n_train": Option(3000, "int", lo=1, hi=_ABALONE_ROWS - 1),
    **_SPLIT_OPTIONS,
    "threshold": Option(10, "int", "y = +1 where Rings ≥ threshold, else −1", lo=2, hi=29),
    "standardize_x": Option(True, "bool"),
}, train_shape=lambda spec: (spec["n_train"], 10), task="classification")
def _abalone_binary(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Abalone as a binary task: +1 where Rings ≥ ``threshold`` (10 by default: 2081 of 4177
    rows, 50%; "young vs old" as in the kernel-classification literature), else −1. Inputs as
    :func:`_abalone`; ``split`` k draws a random split seeded by k (default: split 0)."""
    X, rings = load_abalone()
    y = np.where(rings >= spec["threshold"], 1.0, -1.0)
    seed = _split_seed("abalone_binary", spec)
    tr, te = split_rows(len(y), spec["n_train"], 0 if seed is None else seed)
    arrays = {"X_train": X[tr], "y_train": y[tr], "X_test": X[te], "y_test": y[te]}
    return arrays, {
        "provenance": _provenance(("abalone.data",)) + f". Label +1: Rings ≥ "
        f"{spec['threshold']}, else -1; inputs as dataset 'abalone'",
        "source_sha256": {"abalone.data": SOURCES["abalone.data"].sha256}}


_BREAST_CANCER_ROWS = 569


@functools.lru_cache(maxsize=1)
def _load_breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    path = _shipped("breast_cancer.csv")
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64)
    if data.shape != (_BREAST_CANCER_ROWS, 31):
        raise StoreError(f"source file {path} has shape {data.shape}, not (569, 31); reinstall "
                         "the package")
    X, label = data[:, :30], data[:, 30]
    y = np.where(label == 0, 1.0, -1.0)  # file: 0 malignant, 1 benign
    X.flags.writeable = False
    y.flags.writeable = False
    return X, y


@register("breast_cancer", {
    "n_train": Option(400, "int", lo=1, hi=_BREAST_CANCER_ROWS - 1),
    **_SPLIT_OPTIONS,
    "standardize_x": Option(True, "bool"),
}, train_shape=lambda spec: (spec["n_train"], 30), task="classification")
def _breast_cancer(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """Wisconsin diagnostic breast cancer (UCI WDBC; 569 × 30, the copy scikit-learn ships):
    +1 malignant (212 rows), −1 benign (357). ``split`` k draws a random split seeded by k
    (default: split 0), ``n_train`` rows for training (400 by default) and the rest for test."""
    X, y = _load_breast_cancer()
    seed = _split_seed("breast_cancer", spec)
    tr, te = split_rows(len(y), spec["n_train"], 0 if seed is None else seed)
    arrays = {"X_train": X[tr], "y_train": y[tr], "X_test": X[te], "y_test": y[te]}
    return arrays, {
        "provenance": _provenance(("breast_cancer.csv",)) + ". 30 real-valued features of "
        "cell nuclei; label +1 malignant, -1 benign",
        "source_sha256": {"breast_cancer.csv": SOURCES["breast_cancer.csv"].sha256}}


@functools.lru_cache(maxsize=16)
def _load_uci(name: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(_shipped(f"{name}.csv.gz"), delimiter=",", dtype=np.float64, ndmin=2)
    mask = np.loadtxt(_shipped(f"{name}_test_mask.csv.gz"), delimiter=",", dtype=bool, ndmin=2)
    data.flags.writeable = False
    mask.flags.writeable = False
    return data, mask


def _uci(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """A Wilson et al. UCI benchmark: last column is the target; test rows = mask[:, split]
    (``splits=mask``), or the test rows of Wang et al. 2019's random split ``split``
    (``splits=wang2019``, :func:`wang2019_rows`: its validation rows are left out). The
    inputs are the other columns less the set's :data:`DROPPED_INPUTS` (bike: its 'casual'
    and 'registered' counts, which sum to the count the target is the log of; 15 inputs
    remain), dropped here, before any run, and stated in the provenance."""
    name = spec["name"]
    data, mask = _load_uci(name)
    train_rows = _uci_train_rows(name, mask, spec["split"], spec["n_train"], spec["splits"])
    files = (f"{name}.csv.gz", f"{name}_test_mask.csv.gz")
    if spec["splits"] == "wang2019":
        _, validation_rows, test_rows = wang2019_rows(len(mask), spec["split"])
        rows = (f"Wang et al. 2019's random 64/16/20 % split, trial {spec['split']} (the "
                f"permutation seeded by {spec['split']}): {len(test_rows)} test rows, "
                f"{len(validation_rows)} validation rows left out, neither trained on nor "
                "tested; the mask file is not used")
    else:
        test_rows = np.flatnonzero(mask[:, spec["split"]])
        rows = f"test rows: mask column {spec['split']} (10% of rows)"
    inputs = uci_inputs(name, data.shape[1])
    arrays = {"X_train": data[train_rows][:, inputs], "y_train": data[train_rows, -1],
              "X_test": data[test_rows][:, inputs], "y_test": data[test_rows, -1]}
    attrs = {
        "provenance": _provenance(files) + f". Target: last column; {rows}",
        "source_sha256": {fn: SOURCES[fn].sha256 for fn in files},
    }
    if name in DROPPED_INPUTS:  # stated with the data: which file columns the inputs are
        dropped, why = DROPPED_INPUTS[name]
        attrs["provenance"] += (f"; file inputs {', '.join(map(str, dropped))} dropped at "
                                f"load ({why}), leaving {len(inputs)} inputs")
        attrs["feature_names"] = [f"file column {j}" for j in inputs.tolist()]
    return arrays, attrs


def wang2019_rows(n: int, trial: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, validation, test) rows of Wang et al. 2019's random split of n rows, trial
    ``trial``: a permutation seeded by the trial; its first ⌊0.8·⌊0.8 n⌋⌋ rows train (64 %),
    the next up to ⌊0.8 n⌋ validate (16 %), the last n − ⌊0.8 n⌋ test (20 %). These sizes give
    the training n of their Table 1 exactly (pol 9 600, elevators 10 623, bike 11 122, kin40k
    25 600, protein 29 267, keggdirected 31 248, keggundirected 40 708); their seeds are not
    known, so their permutations are not reproduced."""
    order = np.random.default_rng(trial).permutation(n)
    n_train, n_fit = wang2019_sizes(n)
    return order[:n_train], order[n_train:n_fit], order[n_fit:]


def wang2019_sizes(n: int) -> tuple[int, int]:
    """(training rows, training and validation rows) of Wang et al. 2019's split of n rows:
    ⌊0.8·⌊0.8 n⌋⌋ and ⌊0.8 n⌋."""
    n_fit = (4 * n) // 5
    return (4 * n_fit) // 5, n_fit


@functools.lru_cache(maxsize=16)
def _uci_sizes(name: str) -> tuple[np.ndarray, int]:
    """Training rows per split (from the mask file alone) and d (from the data's first line,
    less the :data:`DROPPED_INPUTS`)."""
    mask = np.loadtxt(_shipped(f"{name}_test_mask.csv.gz"), delimiter=",", dtype=bool, ndmin=2)
    with gzip.open(_shipped(f"{name}.csv.gz"), "rt") as f:
        d = len(uci_inputs(name, len(f.readline().split(","))))
    return (~mask).sum(axis=0), d


def _uci_shape(spec: Mapping[str, Any]) -> tuple[int, int]:
    rows, d = _uci_sizes(spec["name"])
    n = (wang2019_sizes(_uci_rows_total(spec["name"]))[0] if spec["splits"] == "wang2019"
         else int(rows[spec["split"]]))
    return (n if spec["n_train"] is None else min(n, spec["n_train"])), d


@functools.lru_cache(maxsize=16)
def _uci_rows_total(name: str) -> int:
    """The rows of a UCI set (its mask file's lines)."""
    with gzip.open(_shipped(f"{name}_test_mask.csv.gz"), "rt") as f:
        return sum(1 for line in f if line.strip())


def _uci_train_rows(name: str, mask: np.ndarray, split: int, n_train: int | None,
                    splits: str = "mask") -> np.ndarray:
    """The training rows of a UCI split: those its test mask leaves out (``splits=mask``) or
    the training rows of Wang et al. 2019's split ``split`` (``wang2019``), the first
    ``n_train`` of them (every one where null); InputError for an ``n_train`` above their
    count."""
    if splits == "wang2019":
        rows = wang2019_rows(len(mask), split)[0]
    else:
        rows = np.flatnonzero(~mask[:, split])
    if n_train is not None and n_train > len(rows):
        raise InputError(f"dataset {name!r}: n_train={n_train} exceeds the {len(rows)} "
                         f"training rows of split {split}; pass n_train ≤ {len(rows)} or null")
    return rows[:n_train]


@functools.lru_cache(maxsize=32)
def _uci_distinct_rows(name: str, split: int, n_train: int | None, splits: str = "mask") -> int:
    data, mask = _load_uci(name)
    train = data[_uci_train_rows(name, mask, split, n_train, splits)]
    return len(np.unique(train[:, uci_inputs(name, data.shape[1])], axis=0))


def _uci_distinct(spec: Mapping[str, Any]) -> int:
    """Distinct training inputs of a UCI split (the raw inputs: standardising each column is
    one-to-one)."""
    return _uci_distinct_rows(spec["name"], spec["split"], spec["n_train"], spec["splits"])


_UCI_OPTIONS = {
    "split": Option(0, "int", lo=0, hi=9),
    "splits": Option("mask", "choice", "which splits `split` indexes. mask: Wilson et al.'s ten "
                     "fixed test masks (split k: mask column k tests, 10 % of the rows; every "
                     "other row trains). wang2019: Wang et al. 2019's random 64/16/20 % "
                     "train/validation/test split (split k: the permutation seeded by k; its "
                     "first ⌊0.8·⌊0.8 N⌋⌋ rows train, its last N − ⌊0.8 N⌋ test, and the "
                     "validation rows between are left out: neither trained on nor tested)",
                     choices=("mask", "wang2019")),
    "n_train": Option(None, "int", lo=1, none_ok=True, example=2000),
    "standardize_x": Option(True, "bool"),
    "standardize_y": Option(True, "bool"),
}
for _name in UCI_NAMES:
    register(_name, _UCI_OPTIONS, train_shape=_uci_shape, distinct_train=_uci_distinct)(_uci)


def _csv_shape(spec: Mapping[str, Any]) -> tuple[int, int] | None:
    """(n_train, d) of a CSV file from its count of data lines and the fields of the first
    (one pass, nothing parsed); None if the file cannot be read as text (build() says why)."""
    path = Path(spec["path"])
    try:
        with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
            lines = (line for line in f if line.strip() and not line.lstrip().startswith("#"))
            first = next(lines, None)
            n = (first is not None) + sum(1 for _ in lines)
    except (OSError, UnicodeDecodeError, EOFError, zlib.error):
        return None
    cols = 0 if first is None else len(first.split(spec["delimiter"]))
    if n < 2 or cols < 2:
        return None
    return n - int(round(spec["test_fraction"] * n)), cols - 1


@register("csv", {
    "path": Option(None, "path", example="/data/my.csv"),
    "target": Option(-1, "int"),
    "test_fraction": Option(0.1, "float", lo=0.0, hi=1.0, hi_open=True),
    "split_seed": Option(0, "int", lo=0, hi=SEED_MAX, none_ok=True),
    "standardize_x": Option(True, "bool"),
    "standardize_y": Option(False, "bool"),
    "delimiter": Option(",", "str", none_ok=True),
}, train_shape=_csv_shape)
def _csv(spec: Mapping[str, Any]) -> tuple[Arrays, dict[str, Any]]:
    """A user file: numeric, no header, one sample per row (``.gz`` is decompressed)."""
    path = Path(spec["path"])
    try:
        with warnings.catch_warnings():  # an empty file is reported below, not as a warning
            warnings.filterwarnings("ignore", "loadtxt: input contained no data")
            data = np.loadtxt(path, delimiter=spec["delimiter"], dtype=np.float64, ndmin=2)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a .gz cut short, or no gzip
        raise InputError(f"dataset 'csv': {path} is truncated or not gzip ({one_line(exc)}); "
                         "pass the whole file (gzip -t checks one), or the CSV uncompressed "
                         "without .gz") from None
    except (ValueError, OSError) as exc:
        raise InputError(f"dataset 'csv': cannot read {path} ({one_line(exc)}); make it a "
                         f"numeric table without header, delimiter {spec['delimiter']!r}, the "
                         "same number of columns in every row") from None
    n, cols = data.shape
    if data.size == 0:
        raise InputError(f"dataset 'csv': {path} has no data rows; pass a file with one numeric "
                         "row per sample (inputs + target)")
    if cols < 2 or n < 2:
        raise InputError(f"dataset 'csv': {path} has shape ({n}, {cols}); it needs at least 2 "
                         "rows and 2 columns (inputs + target)")
    target = spec["target"]
    if not -cols <= target < cols:
        raise InputError(f"dataset 'csv': target={target} is out of range for {cols} columns; "
                         f"pass a column index in [{-cols}, {cols - 1}]")
    check_finite(data, f"dataset 'csv': {path}", "data row")
    n_test = int(round(spec["test_fraction"] * n))
    if n - n_test < 1:
        raise InputError(f"dataset 'csv': test_fraction={spec['test_fraction']} leaves no "
                         f"training rows of {n}; pass a smaller test_fraction")
    target %= cols
    X, y = np.delete(data, target, axis=1), data[:, target]
    tr, te = split_rows(n, n - n_test, spec["split_seed"])
    arrays = {"X_train": X[tr], "y_train": y[tr], "X_test": X[te], "y_test": y[te]}
    return arrays, {"provenance": f"user file {path} (column {target} is the target)",
                    "source_sha256": {path.name: sha256_file(path)},
                    "feature_names": [f"file column {j}" for j in range(cols) if j != target],
                    "target_name": f"file column {target}"}

