"""One job, start to end: config → dataset store → kernel blocks → fit → evaluate → certify →
result file. The CLI (:mod:`pipeline.app`) and the sweep launcher run jobs only through here.

A job is named by :func:`config_hash`, the hash of what it computes: its config without where
it runs, without κ for algorithms that ignore it and without the seed for deterministic ones
(read from the algorithm's spec).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from algorithms.certificate import certify
from algorithms.contract import AlgorithmSpec, Fit, Result, check_kappa, check_lam
from algorithms.errors import InputError
from algorithms.evaluation import check_size, options_of, run
from algorithms.kernels import Kernel
from algorithms.registry import get
from pipeline.blocks import open_blocks
from pipeline.curves import run_curve
from pipeline.datasets import ingest, train_shape
from pipeline.results import write_job_result

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
# Config keys that say where or how a job runs, not what it computes: not part of its identity.
LOCATION_KEYS = ("store_root", "sweep", "cluster", "scheduler", "report")


def job_config(cfg: DictConfig) -> dict:
    """The resolved job config (no hydra node) as a plain dict."""
    job_keys = [key for key in cfg.keys() if key != "hydra"]
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, job_keys), resolve=True)


def job_identity(config: Mapping) -> dict:
    """What a job computes: its config without location keys, with κ dropped for algorithms
    that ignore it and the seed dropped for those that are deterministic (a learning curve
    depends on the seed through its draws of training inputs)."""
    ident = {k: v for k, v in config.items() if k not in LOCATION_KEYS}
    spec = _spec_or_none(config)
    if spec is not None and not spec.uses_kappa:
        ident["kappa"] = None
    if spec is not None and spec.seed_free and not config.get("learning_curve"):
        ident["seed"] = None
    if ident.get("learning_curve", 0) is None:  # fits keep the hashes they had before the key
        del ident["learning_curve"]
    return ident


def config_hash(config: Mapping) -> str:
    """Stable hash of a job's identity (names its result; equal hashes are one job)."""
    blob = json.dumps(job_identity(config), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _spec_or_none(config: Mapping) -> AlgorithmSpec | None:
    try:
        return get(config["algorithm"]["name"])
    except InputError:
        return None  # reported by the job itself


def drop_inapplicable_options(config: dict) -> list[str]:
    """In a sweep over several algorithms, an option one of them does not take (SGMA's eps
    for another, say) is dropped from that algorithm's jobs, as κ is for algorithms that do
    not use it; returns the dropped keys. A single job with such an option is an error."""
    spec = _spec_or_none(config)
    if spec is None:
        return []
    dropped = sorted(set(config["algorithm"]) - {"name"} - set(spec.options))
    for key in dropped:
        del config["algorithm"][key]
    return dropped


@dataclass(frozen=True)
class JobOutcome:
    result: Result
    config: dict
    config_hash: str
    result_path: Path


def run_job(config: Mapping, result_path: str | Path, attrs: Mapping | None = None
            ) -> JobOutcome:
    """Validate a resolved job config, ingest its dataset, fit (or measure a learning curve),
    certify, and write ``result_path``. ``attrs`` are extra attributes for the result file
    (e.g. the worker that ran the job)."""
    start = time.perf_counter()
    spec = get(config["algorithm"]["name"])
    lam = check_lam(config["lam"])
    check_kappa(config["kappa"], 1)
    seed = config["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed={seed!r} must be an integer ≥ 0; pass e.g. seed=0")
    kernel_cfg = dict(config["kernel"])
    kernel = Kernel(kernel_cfg.pop("name"), kernel_cfg)
    options = options_of(spec, {k: v for k, v in config["algorithm"].items() if k != "name"})
    shape = None if config.get("learning_curve") else train_shape(config["dataset"])
    if shape is not None:  # a fit too large for max_n or the memory: refused before ingesting
        check_size(spec, *shape, options)

    store = ingest(config["dataset"], config["store_root"])  # verifies the store's checksums
    blocks = open_blocks(store, kernel, verify=False)
    y_train, X_test, y_test = (np.asarray(blocks.dataset[key].values, dtype=np.float64)
                               for key in ("y_train", "X_test", "y_test"))
    if config.get("learning_curve"):  # Lemma 4's E^g(n) instead of a fit (pipeline.curves)
        result: Result = run_curve(config, spec, kernel, blocks, options)
    else:
        result = run(spec, blocks, y_train, lam=lam, kappa=config["kappa"],
                     rng=np.random.default_rng(seed), test=(X_test, y_test), **options)
        result = _certified(result, spec, config, blocks, y_train, lam, seed)
    job_hash = config_hash(config)
    attrs = {**(attrs or {}), "config_hash": job_hash,
             "job_seconds": time.perf_counter() - start,
             "n_train": blocks.n, "n_test": len(y_test), "d": blocks.d}
    path = write_job_result(result, config, result_path, attrs)
    return JobOutcome(result, dict(config), job_hash, path)


def _certified(fit: Fit, spec: AlgorithmSpec, config: Mapping, blocks, y: np.ndarray,
               lam: float, seed: int) -> Fit:
    """Theorem 1's certificate of a regression fit (``certificate.*`` in the config)."""
    cert_cfg = config.get("certificate") or {}
    if spec.task != "regression" or not cert_cfg.get("enabled", False):
        return fit
    certificate = certify(blocks, y, lam, fit.basis, fit.coef,
                          rng=np.random.default_rng([seed, 1]),
                          kappa=cert_cfg.get("kappa", 59), tol=cert_cfg.get("tol", 1e-3),
                          max_dual=cert_cfg.get("max_dual", 500),
                          dual_objective=fit.summary.get("dual_objective"))
    extra = {"gap_certified": certificate["gap_certified"],
             "certified_lower_bound": certificate["objective_lower_bound"],
             "certificate_dual_steps": certificate["n_dual"]}
    if not math.isfinite(fit.summary["objective"]):
        extra["objective"] = certificate["objective"]  # L(α) of methods without one
    return fit.with_summary(**extra)
