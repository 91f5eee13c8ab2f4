"""Learned hyperparameters for jobs (``hyper=ml``): computed once per dataset and setting, cached.

``hyper: {name: fixed}`` (the default) fits with the configured kernel and ``lam``.
``hyper=ml`` first maximises the log marginal likelihood over the kernel's variance, length
scale(s) and σ² (:func:`algorithms.hyper.learn`, on a random subset of ``hyper.subset``
training points), starting from the configured kernel and ``lam``; the job then fits with the
learned kernel and λ = learned σ². Every job of a sweep on the same dataset store, kernel,
``lam`` and ``hyper`` options shares one learning: its outcome is cached as
``<store_root>/hyper/<key>.json``, the key being the hash of those settings, of the store's
identity (:func:`pipeline.datasets.spec_hash`) and of the learning code's version (under
``algorithms/`` and :data:`pipeline.codeversion.LEARNING_PIPELINE`), so edited data or code
learns again. The file carries its checksum: one that fails it (or does not parse) is learned
again, with a ``note:`` naming it. A lease (``<key>.lock``) around the learning makes concurrent
jobs that need it wait for one learning. A sweep runs each learning as its own task before the
jobs that need it, and a learning that also starts from another's optimum
(``hyper.shared_start``) after that one (:mod:`pipeline.sweep`); a single job learns (or reads
the cache) itself.

``hyper.refine`` (``{subset: N, max_iter: K}``) adds a stage to a learning: its optimum is
refined on N random training rows (every row where fewer) by at most K L-BFGS-B iterations
from that optimum only, so a learning on many rows costs a few O(N³) evaluations rather than a
whole run from the median start (``experiment=reference_kernel`` measured the protocol). The
learning before the stage is cached apart (the same learning without ``refine``), and its
seconds are the refined learning's ``hyper_start_seconds``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import psutil

from algorithms.errors import InputError
from algorithms.hyper import BOUNDS, OPTIONS, Parameters, learn, memory_bytes
from algorithms.kernels import Kernel
from algorithms.options import Option, validate
from pipeline.checksum import DamagedFile, open_sealed_json, seal_json
from pipeline.cluster.busy import mark, other_cores
from pipeline.cluster.threads import blas_threads
from pipeline.codeversion import LEARNING_PIPELINE, code_version, pipeline_version
from pipeline.config import plain_copy
from pipeline.datasets import ingest, load_arrays, spec_hash, train_shape
from pipeline.job.claims import claim
from pipeline.lines import note
from pipeline.oserrors import write_failure

if TYPE_CHECKING:
    import xarray as xr


def _refine_form(value: Any) -> dict[str, int]:
    """``hyper.refine``: {subset: N, max_iter: K}, N ≥ 1 rows and at most K ≥ 1 iterations."""
    fine = (isinstance(value, Mapping) and set(value) == {"subset", "max_iter"}
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                    for v in value.values()))
    if not fine:
        raise InputError(f"hyper.refine={value!r} must be null or {{subset: N, max_iter: K}} "
                         "with integers N, K ≥ 1, e.g. 'hyper.refine={subset: 8000, max_iter: 50}'")
    return {"subset": int(value["subset"]), "max_iter": int(value["max_iter"])}


def _hyper_form(value: Any) -> dict[str, Any]:
    """``hyper.shared_start``: a mapping of options of :data:`algorithms.hyper.OPTIONS` (and a
    ``refine`` stage)."""
    if not isinstance(value, Mapping) or not set(value) <= set(OPTIONS) | {"refine"}:
        raise InputError(f"hyper.shared_start={value!r} must map hyper options to values, "
                         "e.g. 'hyper.shared_start={method: subset}', or be null")
    form = dict(value)
    if form.get("refine") is not None:
        form["refine"] = _refine_form(form["refine"])
    return form


HYPER_OPTIONS: dict[str, Option] = {
    "name": Option("fixed", "choice", "fixed: the configured kernel and lam; ml: learn them "
                   "by maximum marginal likelihood", choices=("fixed", "ml")),
    **OPTIONS,
    "shared_start": Option(None, "any", "null, or the hyper options (e.g. {method: subset}) "
                           "of another learning on the same data whose kernel and σ² are a "
                           "further start of this one (protocol=own sets it: a method that "
                           "learns in its own form also starts from the shared kernel, as the "
                           "peers do)", none_ok=True, parse=_hyper_form),
    "refine": Option(None, "any", "null, or {subset: N, max_iter: K}: refine the learned "
                     "optimum on N random training rows (every row where fewer) by at most K "
                     "L-BFGS-B iterations from it", none_ok=True, parse=_refine_form),
}

CACHE_DIR = "hyper"


def hyper_options(block: Mapping) -> dict[str, Any] | None:
    """The validated ``hyper`` block of a job config, or None for fixed hyperparameters."""
    given = dict(block)
    name = given["name"]
    if name == "fixed":
        extra = sorted(set(given) - {"name"})
        if extra:
            raise InputError(f"hyper.{extra[0]} is set but hyper=fixed learns nothing; pass "
                             "hyper=ml to learn hyperparameters, or drop the option")
        return None
    options = validate(HYPER_OPTIONS, given, owner="hyper", prefix="hyper.")
    if options["init"] == "shared" and (not options["shared_start"]
                                        or options["shared_start"].get("init") == "shared"):
        raise InputError("hyper.init=shared starts from the optimum of hyper.shared_start only: "
                         "pass hyper.shared_start with a start of its own (e.g. "
                         "'hyper.shared_start={subset: 2000, init: median}'), or hyper.init=median")
    return options


@dataclass(frozen=True)
class HyperSpec:
    """A job's ``hyper`` block: ``options`` validated (:func:`hyper_options`; None: hyper=fixed,
    nothing learned), the block as given (its variants: :meth:`shared`, :meth:`base`) and the
    learning's start as the config gives it, the kernel's block and ``lam`` (a learning's
    cache key hashes them so: :func:`cache_key`). Read it, never change it."""

    options: dict[str, Any] | None
    given: dict[str, Any]
    start_kernel: dict[str, Any]
    start_lam: Any

    @classmethod
    def of(cls, config: Mapping) -> HyperSpec:
        """The record of a job config's ``hyper`` block (an InputError line for a bad one)."""
        return cls.of_block(config["hyper"], config["kernel"], config["lam"])

    @classmethod
    def of_block(cls, block: Mapping, kernel: Mapping, lam: Any) -> HyperSpec:
        given = plain_copy(dict(block))
        return cls(hyper_options(given), given, plain_copy(dict(kernel)), lam)

    @property
    def learns(self) -> bool:
        """Whether the job learns its kernel and λ first (``hyper=ml``)."""
        return self.options is not None

    def shared(self) -> HyperSpec:
        """The learning this one's ``hyper.shared_start`` names (that block's options over
        this one's, and no further start)."""
        return self.of_block({**self.given, **dict(self.given["shared_start"]),
                              "shared_start": None}, self.start_kernel, self.start_lam)

    def base(self) -> HyperSpec:
        """The learning this one's ``hyper.refine`` stage refines (no stage)."""
        return self.of_block({**self.given, "refine": None}, self.start_kernel,
                             self.start_lam)


class Learner(Protocol):
    """What a learning reads of its job (a :class:`pipeline.job.spec.JobSpec`): its data, where
    its stores and the learning's cache are, and its ``hyper`` record."""

    @property
    def dataset(self) -> Mapping[str, Any]:
        """The job's dataset spec (its store's name)."""

    @property
    def store_root(self) -> str:
        """Where its stores and the learnings' cache are."""

    @property
    def hyper(self) -> HyperSpec:
        """Its ``hyper`` record."""


def with_hyper(job: Learner, hyper: HyperSpec) -> Learner:
    """``job`` learning ``hyper`` instead (a variant: the learning it starts from)."""
    return dataclasses.replace(job, hyper=hyper)


def check_hyper(hyper: HyperSpec, kernel: Kernel, dataset: Mapping) -> None:
    """Check ``hyper`` against the job's kernel and data dimension (before any data is read)."""
    options = hyper.options
    if options is not None:
        shape = train_shape(dataset)
        Parameters.of(kernel, shape[1] if shape else 1, options["ard"])
        if shape:
            rows = max(options["subset"], (options["refine"] or {"subset": 0})["subset"])
            need, what = memory_bytes({**options, "subset": rows}, shape[0])
            available = float(psutil.virtual_memory().available)
            if need > available:
                raise InputError(
                    f"hyper.method={options['method']} on n_train={shape[0]} needs "
                    f"{need / 2**30:.1f} GiB ({what}) but {available / 2**30:.1f} GiB is "
                    "available; pass hyper.method=lowrank (every point, O(n·basis²)) or "
                    "hyper.method=subset with a smaller hyper.subset")


def cache_key(job: Learner) -> str:
    """Hash of what determines a learning: dataset store, kernel, lam, hyper options, code."""
    blob = {"data": spec_hash(dict(job.dataset)), "kernel": dict(job.hyper.start_kernel),
            "lam": job.hyper.start_lam, "hyper": job.hyper.options,
            "code": code_version("algorithms.hyper"),
            "pipeline_code": pipeline_version(LEARNING_PIPELINE)}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LearnedRecord:
    """A cached learning: the learned kernel and σ², scalars for the result summary and the
    optimiser trace (one row per marginal-likelihood evaluation of every L-BFGS-B run)."""

    kernel: Kernel
    lam: float
    summary: Mapping[str, Any]
    trace: Mapping[str, np.ndarray]
    names: list[str]
    runs: list[dict]

    @property
    def y_offset(self) -> float:
        """The constant prior mean the job subtracts from its targets (``hyper.center_y``)."""
        return float(self.summary.get("hyper_y_offset", 0.0))

    def variables(self) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """The trace as arrays over dim ``hyper_eval`` (θ split by parameter name)."""
        out = {"hyper_run": (("hyper_eval",), np.asarray(self.trace["run"], dtype=np.int32)),
               "hyper_lml": (("hyper_eval",), np.asarray(self.trace["log_marginal_likelihood"]))}
        theta = np.asarray(self.trace["theta"]).reshape(len(out["hyper_lml"][1]), -1)
        for j, name in enumerate(self.names):
            out[f"hyper_{name}"] = (("hyper_eval",), theta[:, j])
        return out


def bound_warning(at_bound: str) -> str | None:
    """The one warning line for a learning whose optimum has parameters on a bound
    (``hyper_at_bound``, :func:`algorithms.hyper.at_bound`), or None."""
    if not at_bound:
        return None
    names = at_bound.split(",")
    noise_like = [p for p in names if p in ("log_variance=lower", "log_noise=upper")
                  or (p.startswith("log_lengthscale") and p.endswith("=lower"))]
    if noise_like:
        why = ("a white-noise model: check the targets' scale (dataset.standardize_y, "
               "hyper.center_y) or add random starts (hyper.restarts)")
    elif "log_lengthscale=upper" in names:
        why = "a constant kernel: the model ignores every input"
    elif any(p.startswith("log_lengthscale_") and p.endswith("=upper") for p in names):
        inputs = [p.split("=")[0].removeprefix("log_lengthscale_") for p in names
                  if p.startswith("log_lengthscale_") and p.endswith("=upper")]
        why = ("an ARD length scale at its upper bound: inputs the model ignores: "
               + ", ".join(inputs))
    else:
        why = "the optimum may lie beyond the bounds"
    return (f"warning: hyper=ml learned {', '.join(names)} (within 1 % of the bounds "
            f"{BOUNDS[0]:g} … {BOUNDS[1]:g}, in log): {why}")


AT_BOUND = "final_hyper_at_bound"  # hyper=ml: the learned parameters on a bound (summary)


def at_bound_settings(ds: xr.Dataset) -> list[tuple[str, str, int]]:
    """(setting, parameters on a bound, jobs) for each distinct setting whose learned
    hyperparameters ended on a bound (``hyper_at_bound``); the setting names the swept dims
    other than the algorithm's (every algorithm of a setting shares its learning)."""
    import xarray as xr

    if AT_BOUND not in ds:
        return []
    values, status = xr.broadcast(ds[AT_BOUND], ds["status"])
    counts: dict[tuple[str, str], int] = {}
    for index in zip(*np.nonzero(np.asarray(status.values) == "ok"), strict=True):
        value = str(np.asarray(values.values)[index])
        if not value or value == "nan":
            continue
        where = " ".join(f"{d}={ds[d].values[i]}" for d, i in zip(status.dims, index, strict=True)
                         if ds.sizes[d] > 1 and not d.startswith("algorithm")) or "every setting"
        counts[where, value] = counts.get((where, value), 0) + 1
    return [(where, value, n) for (where, value), n in counts.items()]


def _record_from_json(data: Mapping) -> LearnedRecord:
    kernel = Kernel(data["kernel"]["name"], {k: v for k, v in data["kernel"].items()
                                             if k != "name"})
    trace = {k: np.asarray(v) for k, v in data["trace"].items()}
    return LearnedRecord(kernel, float(data["lam"]), data["summary"], trace, data["names"],
                         data["runs"])


def _seconds(record: LearnedRecord, cpu: bool = False) -> float:
    """The wall (or CPU) seconds of a learning and of the learnings it started from."""
    kind = "cpu_" if cpu else ""
    return (float(record.summary[f"hyper_{kind}seconds"])
            + float(record.summary.get(f"hyper_start_{kind}seconds", 0.0)))


def learned(job: Learner, store: str | os.PathLike | None = None) -> LearnedRecord:
    """The learned hyperparameters of a job with ``hyper=ml``: read from the cache, or learned
    on the job's training data (ingested if ``store`` is not given) and cached atomically."""
    if job.hyper.options is None:
        raise ValueError("learned() needs hyper=ml")
    root = Path(job.store_root).expanduser() / CACHE_DIR
    path = root / f"{cache_key(job)}.json"
    cached = _read_cache(path)
    if cached is not None:
        return cached
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot write learned hyperparameters to {path}: " + write_failure(
            err, path, elsewhere="pass a writable store_root=", rerun="rerun")) from None
    with claim(path.with_suffix(".lock")):  # concurrent jobs needing it wait for one learning
        cached = _read_cache(path)
        if cached is not None:
            return cached
        data = _learn(job, store)
        try:
            tmp = root / f".{path.name}.tmp-{uuid.uuid4().hex}"
            tmp.write_bytes(seal_json(data))
            os.replace(tmp, path)
        except OSError as err:
            raise InputError(f"cannot write learned hyperparameters to {path}: "
                             + write_failure(err, path, elsewhere="pass a writable store_root=",
                                             rerun="rerun")) from None
    return _record_from_json(data)


SET_ASIDE_DIR = "set_aside"  # under the cache: learnings ``relearn=true`` replaced


def learning_keys(job: Learner) -> set[str]:
    """The cache keys of every learning ``job`` reads: its own, the one its ``hyper.refine``
    stage starts from, and those of the learning its ``hyper.shared_start`` names (none
    without ``hyper=ml``)."""
    options = job.hyper.options
    if options is None:
        return set()
    keys = {cache_key(job)}
    if options["refine"]:
        keys.add(cache_key(with_hyper(job, job.hyper.base())))
    if options["shared_start"]:
        keys |= learning_keys(with_hyper(job, job.hyper.shared()))
    return keys


def set_aside(store_root: str | os.PathLike, keys: set[str], stamp: str) -> list[Path]:
    """Move the cached learnings ``keys`` of ``store_root`` (those there) into
    ``<cache>/set_aside/<key>.<stamp>.json``, each under its lease, so that the jobs needing
    them learn again (``relearn=true``); nothing is deleted. Returns where they went."""
    root = Path(store_root).expanduser() / CACHE_DIR
    moved = []
    for key in sorted(keys):
        path = root / f"{key}.json"
        if not path.exists():
            continue
        target = root / SET_ASIDE_DIR / f"{key}.{stamp}.json"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with claim(path.with_suffix(".lock")):  # not while a job learns or reads it
                os.replace(path, target)
        except FileNotFoundError:
            continue  # another sweep set it aside meanwhile
        except OSError as err:
            raise InputError(f"cannot set aside the learning {path}: " + write_failure(
                err, target, elsewhere="pass a writable store_root=", rerun="rerun")) from None
        moved.append(target)
    return moved


def _read_cache(path: Path) -> LearnedRecord | None:
    """The cached learning at ``path``, or None when there is none; a file that fails its
    checksum, does not parse or is from an older format is learned again, with a note."""
    try:
        return _record_from_json(open_sealed_json(path.read_bytes()))
    except FileNotFoundError:
        return None
    except (OSError, DamagedFile, ValueError, KeyError, TypeError, InputError) as err:
        why = str(err) if isinstance(err, DamagedFile) else f"cannot be read ({err!r})"
        note(f"learned hyperparameters {path} {why}: learned again")
        return None


def _most(values: list[float]) -> float:
    """The largest of ``values`` that is known (NaN if none is)."""
    known = [v for v in values if not math.isnan(v)]
    return max(known) if known else math.nan


def _learn(job: Learner, store: str | os.PathLike | None) -> dict:
    """Learn the hyperparameters of ``job`` on its training data: the cache's payload. Its
    summary's ``hyper_other_cores`` is the most that other processes kept busy, on average,
    during this learning or a learning it started from (:mod:`pipeline.cluster.busy`), and its
    ``hyper_blas_threads`` the BLAS threads it ran on."""
    busy, threads = mark(), blas_threads()
    options = job.hyper.options
    store = store if store is not None else ingest(dict(job.dataset), job.store_root)
    X, y, _, _ = load_arrays(store, verify=False)
    kernel_cfg = dict(job.hyper.start_kernel)
    kernel = Kernel(kernel_cfg.pop("name"), kernel_cfg)
    settings = {k: v for k, v in options.items()
                if k not in ("name", "seed", "shared_start", "refine")}
    other = None
    if options["refine"]:  # a stage: from the learning before it (itself from its starts)
        other = learned(with_hyper(job, job.hyper.base()), store)
        settings.update(options["refine"], init="shared", restarts=0)
        if options["budget_seconds"] is not None:  # one budget for the learning and its stage
            settings["budget_seconds"] = max(0.0, options["budget_seconds"] - _seconds(other))
    elif options["shared_start"]:  # the other learning's optimum is one more start
        other = learned(with_hyper(job, job.hyper.shared()), store)
    extra, start = [], {}
    if other is not None:
        extra.append((other.kernel, other.lam))
        # its seconds are part of this learning's cost, as they are of a peer's that starts there
        start = {"hyper_start_seconds": _seconds(other),
                 "hyper_start_cpu_seconds": _seconds(other, cpu=True)}
    others = [float(other.summary.get("hyper_other_cores", math.nan))] if other else []
    result = learn(X, y, kernel, float(job.hyper.start_lam),
                   rng=np.random.default_rng([options["seed"], 7]), extra_starts=extra,
                   **settings)
    return {"kernel": {"name": result.kernel.name,
                       **{k: list(v) if isinstance(v, tuple) else v
                          for k, v in result.kernel.params.items()}},
            "lam": result.lam, "names": result.names,
            "summary": {**result.summary(), **start,
                        "hyper_other_cores": _most([other_cores(busy), *others]),
                        "hyper_blas_threads": threads},
            "runs": result.runs,
            "trace": {k: np.asarray(v).tolist() for k, v in result.trace.items()}}
