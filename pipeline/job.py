"""One job, start to end: config → dataset store → kernel blocks → fit → evaluate → certify →
result file. The CLI (:mod:`pipeline.app`) and the sweep launcher run jobs only through here.

A job is named by :func:`config_hash`, the hash of what determines its result: its config
without where it runs (without κ for algorithms that ignore it and without the seed for
deterministic ones, read from the algorithm's spec), the identity of its dataset store and the
version of the code that computes it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import platform
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf
from threadpoolctl import ThreadpoolController

from algorithms.certificate import certify
from algorithms.contract import AlgorithmSpec, Fit, Result, check_kappa, check_lam
from algorithms.errors import InputError
from algorithms.evaluation import check_size, options_of, run
from algorithms.kernels import Kernel, kernel_threads, use_kernel_threads, warm_up
from algorithms.options import Option, validate
from algorithms.registry import REGISTRY, get
from pipeline.blocks import open_blocks
from pipeline.codeversion import code_version, module_of
from pipeline.curves import run_curve
from pipeline.datasets import DATASETS, ingest, spec_hash, task_of, train_shape
from pipeline.hyper import check_hyper, hyper_options, learned
from pipeline.results import write_job_result

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
# Config keys that say where or how a job runs, not what it computes: not part of its identity.
LOCATION_KEYS = ("store_root", "sweep", "merge", "cluster", "scheduler", "report")
# How a job runs, not what it computes (BLAS threads change results by round-off only)
EXECUTION_KEYS = ("threads", "dry_run", "blocks")
BLOCKS = ("memory", "cluster")
# Modules whose code computes every result (beside the algorithm's own module)
SHARED_NUMERICS = ("algorithms.evaluation", "algorithms.certificate", "pipeline.blocks",
                   "pipeline.curves", "pipeline.job")


def job_config(cfg: DictConfig, resolve: bool = True) -> dict:
    """The job config (no hydra node) as a plain dict, resolved unless ``resolve=False``."""
    job_keys = [key for key in cfg.keys() if key != "hydra"]
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, job_keys), resolve=resolve)


def job_identity(config: Mapping) -> dict:
    """Everything that determines a job's result: its config without location keys (κ dropped
    for algorithms that ignore it, λ for classifiers, the seed for deterministic ones; a
    learning curve depends on the seed through its draws of training inputs), the identity of
    its dataset store (:func:`pipeline.datasets.spec_hash`: spec, source-file content and
    builder code) and the version of the code that computes the result
    (:func:`algorithm_version`)."""
    ident = {k: v for k, v in config.items() if k not in LOCATION_KEYS + EXECUTION_KEYS}
    spec = _spec_or_none(config)
    if spec is not None and not spec.uses_kappa:
        ident["kappa"] = None
    if spec is not None and spec.seed_free and not config.get("learning_curve"):
        ident["seed"] = None
    if spec is not None and spec.task == "classification":
        ident["lam"] = None  # no noise variance: a classifier does not use lam
    ident["code_version"] = algorithm_version(spec) if spec is not None else None
    try:
        if hyper_options(config) is not None:  # the fit depends on the learning code too
            ident["hyper_code"] = code_version("algorithms.hyper", "pipeline.hyper")
    except InputError:
        pass  # a bad hyper block: the job reports it
    try:
        ident["data"] = spec_hash(config["dataset"])
    except (InputError, KeyError, TypeError):
        ident["data"] = None  # a bad dataset spec: the job reports it
    return ident


def algorithm_version(spec: AlgorithmSpec) -> str:
    """Version of the code behind ``spec``'s results: its module and the shared numerics
    (evaluator, certificate, kernel blocks, learning curves) with everything they import
    (:func:`pipeline.codeversion.code_version`; comments and docstrings do not count)."""
    return code_version(module_of(spec.fit), *SHARED_NUMERICS)


def setting_hash(config: Mapping) -> str:
    """Hash of a job's settings: its identity without the data content and code version (the
    same settings on edited data or code are the same sweep point, rerun)."""
    ident = {k: v for k, v in job_identity(config).items() if k not in ("data", "code_version")}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


def blocks_in_memory_unless_declared(config: dict) -> bool:
    """In a sweep, ``blocks=cluster`` applies to the algorithms that declare
    ``cluster_blocks``; the others' jobs run with their blocks in memory (whether this one
    was moved). A single job of such an algorithm with ``blocks=cluster`` is an error."""
    spec = _spec_or_none(config)
    if spec is None or config.get("blocks") != "cluster" or spec.cluster_blocks:
        return False
    config["blocks"] = "memory"
    return True


CERTIFICATE_OPTIONS = {
    "enabled": Option(True, "bool", "certify every regression fit (Theorem 1)"),
    "tol": Option(1e-3, "float", "run the dual greedy until the certificate is below tol",
                  lo=0.0, lo_open=True),
    "max_dual": Option(500, "int", "... or this many dual steps", lo=0),
    "kappa": Option(59, "int", "candidate subset size of the dual greedy", lo=1),
}
SWEEP_NAME = re.compile(r"[\w.\-]+(/[\w.\-]+)*")


def check_location(config: Mapping) -> None:
    """Where results go: ``sweep`` a relative directory name under outputs/, ``merge`` a
    bool, ``store_root`` a path (each checked when present)."""
    name = config.get("sweep", "-")  # keys a config leaves out (a Python caller's) are fine
    if not isinstance(name, str) or not SWEEP_NAME.fullmatch(name) or ".." in name.split("/"):
        raise InputError(f"sweep={name!r} must name a directory under outputs/ (letters, digits, "
                         "'.', '-', '_', '/'; no '..'); pass e.g. sweep=my_sweep")
    if not isinstance(config.get("merge", False), bool):
        raise InputError(f"merge={config.get('merge')!r} must be true or false; pass "
                         "merge=true to add a sweep's points to an existing sweep directory")
    root = config.get("store_root", "-")
    if not isinstance(root, str) or not root.strip():
        raise InputError(f"store_root={root!r} must be a directory path; pass e.g. "
                         "store_root=outputs/stores")


def check_config(config: Mapping, available: float | None = None
                 ) -> tuple[AlgorithmSpec, float, Kernel, dict]:
    """Validate a resolved job config without building its data: the algorithm and its
    options, ``lam``, ``kappa``, ``seed``, the kernel, the ``hyper`` block, the dataset spec,
    the certificate, and
    whether the fit fits (``max_n``, and the algorithm's declared memory against ``available``
    bytes, default what this machine has free). Returns (spec, lam, kernel, options); raises
    InputError naming the first bad value."""
    spec = get(config["algorithm"]["name"])
    lam = check_lam(config["lam"])
    check_kappa(config["kappa"], 1)
    seed = config["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed={seed!r} must be an integer ≥ 0; pass e.g. seed=0")
    kernel_cfg = dict(config["kernel"])
    kernel = Kernel(kernel_cfg.pop("name"), kernel_cfg)
    options = options_of(spec, {k: v for k, v in config["algorithm"].items() if k != "name"})
    shape = train_shape(config["dataset"])  # validates the dataset spec
    check_task(spec, config["dataset"])
    check_hyper(config, kernel)
    validate(CERTIFICATE_OPTIONS, config.get("certificate") or {}, owner="the certificate",
             prefix="certificate.")
    check_threads(config.get("threads", 1))
    check_blocks(config.get("blocks", "memory"), spec)
    profile = config.get("profile_memory", False)
    if not isinstance(profile, bool):
        raise InputError(f"profile_memory={profile!r} must be true or false; pass "
                         "profile_memory=true to record the peak memory of fit and prediction")
    check_location(config)
    if shape is not None and not config.get("learning_curve"):
        # last, so that a TooLarge job (a failed point in a sweep) has passed every other check
        check_size(spec, *shape, options, available)
    return spec, lam, kernel, options


def check_blocks(blocks: Any, spec: AlgorithmSpec) -> str:
    """``blocks``: where the training rows and a fit's n-sized state live: ``memory`` (this
    process) or ``cluster`` (row ranges on the Dask workers, :mod:`pipeline.cluster_blocks`;
    for algorithms that declare ``cluster_blocks``)."""
    if blocks not in BLOCKS:
        raise InputError(f"blocks={blocks!r} must be one of {', '.join(BLOCKS)}; pass "
                         "blocks=memory (the default) or blocks=cluster")
    if blocks == "cluster" and not spec.cluster_blocks:
        able = sorted(name for name, s in REGISTRY.items() if s.cluster_blocks)
        raise InputError(f"algorithm {spec.name} does not run with blocks=cluster; pass "
                         f"blocks=memory, or one of: {', '.join(able)}")
    return blocks


CLUSTER_FIT_LOCK = "sgp-bench-cluster-blocks"  # a Dask Lock: one blocks=cluster fit at a time


@contextlib.contextmanager
def kernel_blocks(config: Mapping, store: Path, kernel: Kernel):
    """The job's kernel-block provider: in memory, or spread over the Dask cluster
    (``blocks=cluster``): the sweep's own cluster when the job runs on one of its workers
    (its thread leaves the worker's pool while it waits, and one such fit runs at a time),
    else the cluster ``config["cluster"]`` describes, started for this job."""
    if config.get("blocks", "memory") != "cluster":
        yield open_blocks(store, kernel, verify=False)
        return
    from distributed import Lock, get_worker, worker_client

    from pipeline.cluster import connect
    from pipeline.cluster_blocks import ClusterKernelBlocks

    try:
        on_worker = get_worker() is not None
    except ValueError:  # not in a Dask task: a job of its own
        on_worker = False
    if on_worker:
        with worker_client() as client, Lock(CLUSTER_FIT_LOCK), \
                ClusterKernelBlocks(client, store, kernel) as blocks:
            yield blocks
    else:
        with connect(config["cluster"]) as client, _one_fit_at_a_time(Lock(
                CLUSTER_FIT_LOCK, scheduler_rpc=client.scheduler, loop=client.loop)), \
                ClusterKernelBlocks(client, store, kernel) as blocks:
            yield blocks


@contextlib.contextmanager
def _one_fit_at_a_time(lock):
    """Hold the cluster's fit lock (a fit uses every worker): other command lines' and sweeps'
    ``blocks=cluster`` fits on the same scheduler wait, and this one says so if it waits."""
    if not lock.acquire(blocking=False):
        print("note: another blocks=cluster fit is running on this cluster; this one starts "
              "when it ends", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def check_task(spec: AlgorithmSpec, dataset: Mapping) -> None:
    """The algorithm and the dataset must share a task (regression / binary classification):
    a mismatch is one line naming the datasets of the algorithm's task and the algorithms of
    the dataset's."""
    task = task_of(dataset)
    if task != spec.task:
        datasets = sorted(name for name, d in DATASETS.items() if d.task == spec.task)
        algorithms = sorted(name for name, s in REGISTRY.items() if s.task == task)
        raise InputError(f"algorithm {spec.name} is a {spec.task} algorithm but dataset "
                         f"{dataset['name']} is a {task} set; pass a {spec.task} dataset "
                         f"({', '.join(datasets[:6])}) or a {task} algorithm "
                         f"({', '.join(algorithms[:6])})")


def check_threads(threads: Any) -> int | str | None:
    """``threads``: the BLAS and kernel-block threads of a job: an int ≥ 1; ``auto`` (the
    default: the machine's cores shared among the jobs running on it at once,
    :func:`resolve_threads`); or null (the BLAS library's default, every core for kernel
    blocks)."""
    if threads is not None and threads != "auto" and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InputError(f"threads={threads!r} must be an integer ≥ 1 (the BLAS threads of each "
                         "job), auto (the cores shared among the jobs running at once) or null "
                         "(the BLAS library's default); pass e.g. threads=1")
    return threads


def resolve_threads(threads: Any, jobs_at_once: int = 1) -> int | None:
    """``threads=auto`` as a count: this machine's cores shared among the ``jobs_at_once``
    running on it (a single job: every core, so its GEMMs use them all); else as given."""
    if threads != "auto":
        return threads
    return max(1, (os.cpu_count() or 1) // max(1, jobs_at_once))


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@functools.cache
def _blas() -> ThreadpoolController:
    """The BLAS libraries of this process, found once (a scan of the loaded libraries costs
    ~3 ms: a sweep's worker runs thousands of jobs)."""
    return ThreadpoolController()


def blas_threads() -> int:
    """Threads the BLAS of this process may use now (threadpoolctl)."""
    return max((int(info.get("num_threads", 1)) for info in _blas().info()
                if info.get("user_api") == "blas"), default=1)


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
    spec, lam, kernel, options = check_config(config)
    warm_up([kernel.name])  # a process's first tiles load their compiled code here, not in the fit
    threads = resolve_threads(config.get("threads", 1))  # validated by check_config
    limit = (_blas().limit(limits=threads, user_api="blas") if threads is not None
             else contextlib.nullcontext())
    # the kernel blocks' tiles: as many threads (null: every core), for this job only
    with limit, use_kernel_threads(threads):
        return _run_job(config, result_path, attrs, start, spec, lam, kernel, options)


def _run_job(config: Mapping, result_path: str | Path, attrs: Mapping | None, start: float,
             spec: AlgorithmSpec, lam: float, kernel: Kernel, options: dict) -> JobOutcome:
    seed = config["seed"]

    store = ingest(config["dataset"], config["store_root"])  # verifies the store's checksums
    hyper = learned(config, store) if hyper_options(config) is not None else None
    if hyper is not None:  # fit with the learned kernel and λ = learned σ² (pipeline.hyper)
        kernel, lam = hyper.kernel, hyper.lam
    with kernel_blocks(config, store, kernel) as blocks:
        return _fit_and_write(config, result_path, attrs, start, spec, lam, kernel, options,
                              seed, store, hyper, blocks)


def _fit_and_write(config: Mapping, result_path: str | Path, attrs: Mapping | None,
                   start: float, spec: AlgorithmSpec, lam: float, kernel: Kernel,
                   options: dict, seed: int, store: Path, hyper, blocks) -> JobOutcome:
    y_train, X_test, y_test = (np.asarray(blocks.dataset[key].values, dtype=np.float64)
                               for key in ("y_train", "X_test", "y_test"))
    if config.get("learning_curve"):  # Lemma 4's E^g(n) instead of a fit (pipeline.curves)
        result: Result = run_curve(config, spec, kernel, blocks, options)
    else:
        result = run(spec, blocks, y_train, lam=lam, kappa=config["kappa"],
                     rng=np.random.default_rng(seed), test=(X_test, y_test),
                     profile_memory=config.get("profile_memory", False), **options)
        result = result.with_summary(blas_threads=blas_threads(), cpu_model=cpu_model(),
                                     kernel_threads=kernel_threads(),
                                     **getattr(blocks, "summary", dict)())
        result = _certified(result, spec, config, blocks, y_train, lam, seed)
        if hyper is not None:
            result = result.with_summary(**hyper.summary)
    job_hash = config_hash(config)
    attrs = {**(attrs or {}), "config_hash": job_hash, "code_version": algorithm_version(spec),
             "store": store.name,
             "job_seconds": time.perf_counter() - start,
             "n_train": blocks.n, "n_test": len(y_test), "d": blocks.d}
    path = write_job_result(result, config, result_path, attrs,
                            hyper.variables() if hyper is not None else None)
    return JobOutcome(result, dict(config), job_hash, path)


def _certified(fit: Fit, spec: AlgorithmSpec, config: Mapping, blocks, y: np.ndarray,
               lam: float, seed: int) -> Fit:
    """Theorem 1's certificate of a regression fit (``certificate.*`` in the config); none
    (no certificate keys in the summary, as for classification) where the spec says it does not
    apply to a fit with these options (:meth:`~algorithms.contract.AlgorithmSpec.certifies`:
    a basis off the training rows, a learned kernel or λ)."""
    cert_cfg = config.get("certificate") or {}
    options = options_of(spec, {k: v for k, v in config["algorithm"].items() if k != "name"})
    if spec.task != "regression" or not cert_cfg.get("enabled", False) \
            or not spec.certifies(options):
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
