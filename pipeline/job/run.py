"""One job, start to end: its :class:`~pipeline.job.spec.JobSpec` → dataset store → kernel
blocks → fit → evaluate → certify → result file (:func:`run`). The CLI (:mod:`pipeline.app`)
and the sweep launcher run jobs only through here (:func:`pipeline.job.task.run_task`).

A job is named by :func:`config_hash`, the hash of what determines its result: its config
without where it runs (without κ for algorithms that ignore it and without the seed for
deterministic ones, read from the algorithm's spec), the identity of its dataset store and the
version of the code that computes it, this module's included (it decides how options and data
reach the fit: :data:`pipeline.codeversion.NUMERIC_PIPELINE`).

Every job's summary says how trustworthy its timings are: the cores that other processes and
the hypervisor kept busy on average while it ran (``other_cores``, :mod:`pipeline.cluster.busy`),
the machine's 1-minute load average at its start and end (``load_start``, ``load_end``) and the
CPUs its process may use (``cores``); a fit's also its CPU seconds (``cpu_seconds``,
:mod:`algorithms.evaluation`) and the untimed warm-up before the process's first fit of its
algorithm (``warmup_seconds``, :mod:`pipeline.job.warmup`, left out of ``job_seconds`` too).
A regression fit's summary has the training-mean predictor's test metrics beside its own
(``baseline_test_rmse``, ``baseline_test_nlpd``), on the same test rows and in the same
(centred) target units.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from algorithms.certificate import certify
from algorithms.contract import AlgorithmSpec, Fit, Result
from algorithms.curve_jobs import run_curve
from algorithms.errors import TooLarge
from algorithms.evaluation import mean_predictor_metrics, options_of
from algorithms.evaluation import run as evaluate
from algorithms.kernel_threads import kernel_threads
from algorithms.kernels import Kernel, fit_tails
from pipeline.blocks import kernel_blocks
from pipeline.cluster.busy import BusyMark, mark, other_cores
from pipeline.cluster.threads import blas_threads, cpu_model, numeric_threads, usable_cores
from pipeline.codeversion import pipeline_version
from pipeline.datasets import ingest
from pipeline.job.hyper import hyper_options, learned
from pipeline.job.identity import algorithm_version, config_hash
from pipeline.job.spec import JobSpec
from pipeline.job.warmup import warm_up
from pipeline.results.job_file import write_job_result
from pipeline.watch import announce


def load_average() -> float:
    """The machine's 1-minute load average (NaN where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return math.nan


@dataclass(frozen=True)
class JobClock:
    """When the job started (``time.perf_counter``), the load average then, and the machine's
    and this process's CPU seconds then (:mod:`pipeline.cluster.busy`)."""

    start: float
    load_start: float
    busy: BusyMark


@dataclass(frozen=True)
class JobOutcome:
    result: Result
    config: dict
    config_hash: str
    result_path: Path
    attrs: dict  # the result file's job attrs (n_train, n_test, d, worker, …)


def run(job: JobSpec, result_path: str | Path, attrs: Mapping | None = None) -> JobOutcome:
    """Run one job: ingest its dataset, fit (or measure a learning curve), certify, and write
    ``result_path``: the one function that runs a job, for a single job and a sweep's worker
    alike (:func:`pipeline.job.task.run_task`). ``attrs`` are extra attributes for the result
    file (e.g. the worker that ran the job). A job too large for this machine (``max_n``, its
    declared memory) is refused with its one line (:class:`~algorithms.errors.TooLarge`)."""
    clock = JobClock(time.perf_counter(), load_average(), mark())
    if job.too_large is not None:
        raise TooLarge(job.too_large)
    # BLAS and the kernel blocks' tiles on the job's threads (validated by JobSpec.from_config;
    # null: every core), for this job only
    with numeric_threads(job.threads):
        return _run_job(job.config(), result_path, attrs, clock, job.spec, job.lam, job.kernel,
                        dict(job.options))


def run_job(config: Mapping, result_path: str | Path, attrs: Mapping | None = None
            ) -> JobOutcome:
    """:func:`run` of the job a resolved config describes (:meth:`JobSpec.from_config`: a
    hand-built config is completed from ``conf/config.yaml`` first), for a Python caller."""
    return run(JobSpec.from_config(config), result_path, attrs)


def _run_job(config: Mapping, result_path: str | Path, attrs: Mapping | None, clock: JobClock,
             spec: AlgorithmSpec, lam: float, kernel: Kernel, options: dict) -> JobOutcome:
    seed = config["seed"]

    job = f"the {spec.name} job on {config['dataset']['name']}"
    announce(f"{job}, reading its dataset")  # named if a signal kills the process (watch.py)
    store = ingest(config["dataset"], config["store_root"])  # verifies the store's checksums
    hyper = None
    if hyper_options(config) is not None:
        announce(f"{job}, learning its hyperparameters")
        hyper = learned(config, store)
    if hyper is not None:  # fit with the learned kernel and λ = learned σ² (pipeline.job.hyper)
        kernel, lam = hyper.kernel, hyper.lam
    with kernel_blocks(config, store, kernel) as blocks:  # pipeline.blocks: its provider
        return _fit_and_write(config, result_path, attrs, clock, spec, lam, kernel, options,
                              seed, store, hyper, blocks)


def _fit_and_write(config: Mapping, result_path: str | Path, attrs: Mapping | None,
                   clock: JobClock, spec: AlgorithmSpec, lam: float, kernel: Kernel,
                   options: dict, seed: int, store: Path, hyper, blocks) -> JobOutcome:
    y_train, X_test, y_test = (np.asarray(blocks.dataset[key][...], dtype=np.float64)
                               for key in ("y_train", "X_test", "y_test"))
    if hyper is not None and hyper.y_offset:  # the learned constant prior mean (hyper.center_y)
        y_train, y_test = y_train - hyper.y_offset, y_test - hyper.y_offset
    what = (f"the {spec.name} fit on {config['dataset']['name']} at n_train={blocks.n} "
            f"({blas_threads()} BLAS threads{_declared_memory(spec, blocks, options)})")
    announce(what)
    # the fit's kernel tiles: compiled ones loaded before its clock starts, or numpy's exp for
    # a small RBF fit (algorithms.kernels.fit_tails)
    with fit_tails(kernel.name, blocks.n):
        warm = {}
        if not config["learning_curve"]:  # untimed: imports, compiled code (module docstring)
            seconds, error = warm_up(spec, kernel, lam, config["kappa"], options, blocks.d)
            warm = {"warmup_seconds": seconds, **({"warmup_error": error} if error else {})}
        result = _fit_and_certify(config, spec, lam, kernel, options, seed, blocks, hyper,
                                  y_train, X_test, y_test, what)
    result = _with_summary(result, **warm, load_start=clock.load_start,
                           load_end=load_average(), cores=usable_cores(),
                           other_cores=other_cores(clock.busy))
    job_hash = config_hash(config)
    attrs = {**(attrs or {}), "config_hash": job_hash, "code_version": algorithm_version(spec),
             "pipeline_code_version": pipeline_version(), "store": store.name,
             "job_seconds": time.perf_counter() - clock.start - warm.get("warmup_seconds", 0.0),
             "n_train": blocks.n, "n_test": len(y_test), "d": blocks.d}
    announce(f"writing the result of {what}")
    path = write_job_result(result, config, result_path, attrs,
                            hyper.variables() if hyper is not None else None)
    return JobOutcome(result, dict(config), job_hash, path, attrs)


def _fit_and_certify(config: Mapping, spec: AlgorithmSpec, lam: float, kernel: Kernel,
                     options: dict, seed: int, blocks, hyper, y_train: np.ndarray,
                     X_test: np.ndarray, y_test: np.ndarray, what: str) -> Result:
    if config["learning_curve"]:  # Lemma 4's E^g(n) instead of a fit (algorithms.curve_jobs)
        return run_curve(config, spec, kernel, blocks, options)
    result = evaluate(spec, blocks, y_train, lam=lam, kappa=config["kappa"],
                      rng=np.random.default_rng(seed), test=(X_test, y_test),
                      profile_memory=config["profile_memory"], **options)
    result = result.with_summary(blas_threads=blas_threads(), cpu_model=cpu_model(),
                                 kernel_threads=kernel_threads(),
                                 **getattr(blocks, "summary", dict)())
    announce(f"the certificate of {what}")
    result = _certified(result, spec, config, blocks, y_train, lam, seed)
    if hyper is not None:
        result = result.with_summary(**hyper.summary)
        if config["protocol"] == "own" and "own_converged" not in result.summary:
            # its own learning is this one (its own form of hyper=ml): converged when every
            # L-BFGS-B run met scipy's stopping rule rather than its iteration cap
            result = result.with_summary(
                own_converged=all(bool(run.get("converged")) for run in hyper.runs),
                own_stop_reason=str(hyper.summary.get("hyper_stop_reason", "")),
                own_iterations=int(hyper.summary.get("hyper_iterations", 0)))
    if spec.task == "regression":  # in the units of the fit's targets (centred by hyper)
        result = result.with_summary(**mean_predictor_metrics(y_train, y_test))
    return result


def _with_summary(result: Result, **values) -> Result:
    """A copy of a fit's or a learning curve's result with more summary scalars."""
    return dataclasses.replace(result, summary={**result.summary, **values})


def _declared_memory(spec: AlgorithmSpec, blocks, options: Mapping) -> str:
    """``, declared memory 9.8 GiB`` for a spec that declares its memory, else empty."""
    if spec.memory_bytes is None:
        return ""
    need = float(spec.memory_bytes(blocks.n, blocks.d, options))
    return f", declared memory {need / 2**30:.1f} GiB"


def _certified(fit: Fit, spec: AlgorithmSpec, config: Mapping, blocks, y: np.ndarray,
               lam: float, seed: int) -> Fit:
    """Theorem 1's certificate of a regression fit (``certificate.*`` in the config); none
    (no certificate keys in the summary, as for classification) where the spec says it does not
    apply to a fit with these options (:meth:`~algorithms.contract.AlgorithmSpec.certifies`:
    a basis off the training rows, a learned kernel or λ)."""
    cert_cfg = config["certificate"]
    options = options_of(spec, {k: v for k, v in config["algorithm"].items() if k != "name"})
    if spec.task != "regression" or not cert_cfg["enabled"] or not spec.certifies(options):
        return fit
    certificate = certify(blocks, y, lam, fit.basis, fit.coef,
                          rng=np.random.default_rng([seed, 1]),
                          kappa=cert_cfg["kappa"], tol=cert_cfg["tol"],
                          max_dual=cert_cfg["max_dual"],
                          dual_objective=fit.summary.get("dual_objective"))
    extra = {"gap_certified": certificate["gap_certified"],
             "certified_lower_bound": certificate["objective_lower_bound"],
             "certificate_dual_steps": certificate["n_dual"]}
    if not math.isfinite(fit.summary["objective"]):
        extra["objective"] = certificate["objective"]  # L(α) of methods without one
    return fit.with_summary(**extra)

