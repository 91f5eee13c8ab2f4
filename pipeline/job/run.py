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
from algorithms.evaluation import mean_predictor_metrics
from algorithms.evaluation import run as evaluate
from algorithms.kernel_threads import kernel_threads
from algorithms.kernels import Kernel, fit_tails
from pipeline.blocks import kernel_blocks
from pipeline.cluster.busy import BusyMark, mark, other_cores
from pipeline.cluster.threads import blas_threads, cpu_model, numeric_threads, usable_cores
from pipeline.codeversion import pipeline_version
from pipeline.datasets import ingest
from pipeline.job.hyper import LearnedRecord, learned
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
        return _run_job(job, result_path, attrs, clock)


def run_job(config: Mapping, result_path: str | Path, attrs: Mapping | None = None
            ) -> JobOutcome:
    """:func:`run` of the job a resolved config describes (:meth:`JobSpec.from_config`: a
    hand-built config is completed from ``conf/config.yaml`` first), for a Python caller."""
    return run(JobSpec.from_config(config), result_path, attrs)


def _run_job(job: JobSpec, result_path: str | Path, attrs: Mapping | None,
             clock: JobClock) -> JobOutcome:
    what = f"the {job.algorithm} job on {job.dataset['name']}"
    announce(f"{what}, reading its dataset")  # named if a signal kills the process (watch.py)
    store = ingest(dict(job.dataset), job.store_root)  # verifies the store's checksums
    hyper = None
    if job.hyper.learns:
        announce(f"{what}, learning its hyperparameters")
        hyper = learned(job, store)
    fit = Fitted(job.kernel, job.lam, hyper)
    if hyper is not None:  # fit with the learned kernel and λ = learned σ² (pipeline.job.hyper)
        fit = Fitted(hyper.kernel, hyper.lam, hyper)
    with kernel_blocks(job, store, fit.kernel) as blocks:  # pipeline.blocks: its provider
        return _fit_and_write(job, fit, result_path, attrs, clock, store, blocks)


@dataclass(frozen=True)
class Fitted:
    """The kernel and λ a job fits with (its own, or those its learning found) and the
    learning (None: hyper=fixed)."""

    kernel: Kernel
    lam: float
    hyper: LearnedRecord | None


def _fit_and_write(job: JobSpec, fit: Fitted, result_path: str | Path, attrs: Mapping | None,
                   clock: JobClock, store: Path, blocks) -> JobOutcome:
    spec, hyper = job.spec, fit.hyper
    y_train, X_test, y_test = (np.asarray(blocks.dataset[key][...], dtype=np.float64)
                               for key in ("y_train", "X_test", "y_test"))
    if hyper is not None and hyper.y_offset:  # the learned constant prior mean (hyper.center_y)
        y_train, y_test = y_train - hyper.y_offset, y_test - hyper.y_offset
    what = (f"the {spec.name} fit on {job.dataset['name']} at n_train={blocks.n} "
            f"({blas_threads()} BLAS threads{_declared_memory(spec, blocks, job.options)})")
    announce(what)
    # the fit's kernel tiles: compiled ones loaded before its clock starts, or numpy's exp for
    # a small RBF fit (algorithms.kernels.fit_tails)
    with fit_tails(fit.kernel.name, blocks.n):
        warm = {}
        if not job.curve.enabled:  # untimed: imports, compiled code (module docstring)
            seconds, error = warm_up(spec, fit.kernel, fit.lam, job.kappa, dict(job.options),
                                     blocks.d)
            warm = {"warmup_seconds": seconds, **({"warmup_error": error} if error else {})}
        result = _fit_and_certify(job, fit, blocks, y_train, X_test, y_test, what)
    result = _with_summary(result, **warm, load_start=clock.load_start,
                           load_end=load_average(), cores=usable_cores(),
                           other_cores=other_cores(clock.busy))
    record = job.config()  # the resolved config, as the result file records it
    job_hash = config_hash(record)
    attrs = {**(attrs or {}), "config_hash": job_hash, "code_version": algorithm_version(spec),
             "pipeline_code_version": pipeline_version(), "store": store.name,
             "job_seconds": time.perf_counter() - clock.start - warm.get("warmup_seconds", 0.0),
             "n_train": blocks.n, "n_test": len(y_test), "d": blocks.d}
    announce(f"writing the result of {what}")
    path = write_job_result(result, record, result_path, attrs,
                            hyper.variables() if hyper is not None else None)
    return JobOutcome(result, record, job_hash, path, attrs)


def _fit_and_certify(job: JobSpec, fit: Fitted, blocks, y_train: np.ndarray,
                     X_test: np.ndarray, y_test: np.ndarray, what: str) -> Result:
    spec, options = job.spec, dict(job.options)
    if job.curve.enabled:  # Lemma 4's E^g(n) instead of a fit (algorithms.curve_jobs)
        return run_curve(job.curve.settings, spec, fit.kernel, blocks, options, seed=job.seed,
                         lam=job.lam)
    result = evaluate(spec, blocks, y_train, lam=fit.lam, kappa=job.kappa,
                      rng=np.random.default_rng(job.seed), test=(X_test, y_test),
                      profile_memory=job.profile.profile_memory, **options)
    result = result.with_summary(blas_threads=blas_threads(), cpu_model=cpu_model(),
                                 kernel_threads=kernel_threads(),
                                 **blocks.summary())
    announce(f"the certificate of {what}")
    result = _certified(result, job, blocks, y_train, fit.lam)
    hyper = fit.hyper
    if hyper is not None:
        result = result.with_summary(**hyper.summary)
        if job.protocol == "own" and "own_converged" not in result.summary:
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


def _certified(fit: Fit, job: JobSpec, blocks, y: np.ndarray, lam: float) -> Fit:
    """Theorem 1's certificate of a regression fit (``job.certificate``); none (no certificate
    keys in the summary, as for classification) where the spec says it does not apply to a fit
    with these options (:meth:`~algorithms.contract.AlgorithmSpec.certifies`: a basis off the
    training rows, a learned kernel or λ)."""
    spec, settings = job.spec, job.certificate
    if spec.task != "regression" or not settings.enabled or not spec.certifies(
            dict(job.options)):
        return fit
    certificate = certify(blocks, y, lam, fit.basis, fit.coef,
                          rng=np.random.default_rng([job.seed, 1]),
                          kappa=settings.kappa, tol=settings.tol,
                          max_dual=settings.max_dual,
                          dual_objective=fit.summary.get("dual_objective"))
    extra = {"gap_certified": certificate["gap_certified"],
             "certified_lower_bound": certificate["objective_lower_bound"],
             "certificate_dual_steps": certificate["n_dual"]}
    if not math.isfinite(fit.summary["objective"]):
        extra["objective"] = certificate["objective"]  # L(α) of methods without one
    return fit.with_summary(**extra)

