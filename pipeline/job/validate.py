"""Checks of a resolved job config before anything is built: each bad value is one
:class:`~algorithms.errors.InputError` line naming it and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from algorithms.contract import AlgorithmSpec, check_kappa, check_lam
from algorithms.errors import InputError
from algorithms.evaluation import check_size, options_of
from algorithms.kernels import Kernel
from algorithms.options import INT_MAX, SEED_MAX, Option, validate
from algorithms.registry import REGISTRY, get
from pipeline.config import complete
from pipeline.datasets import DATASETS, check_buildable, task_of, train_shape
from pipeline.job.hyper import check_hyper
from pipeline.job.identity import _spec_or_none

BLOCKS = ("memory", "cluster")


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
    if spec is None or config["blocks"] != "cluster" or spec.cluster_blocks:
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


def check_sweep_name(name: Any) -> None:
    """``sweep``: a relative directory name under outputs/, not outputs/ itself (checked on
    the command line, and resolved before Hydra makes the directory)."""
    if isinstance(name, str) and name.strip("/") and set(name.strip("/").split("/")) == {"."}:
        raise InputError(f"sweep={name!r} would put the sweep in outputs/ itself, beside "
                         "stores/; pass a directory name under it, e.g. sweep=my_sweep")
    if not isinstance(name, str) or not SWEEP_NAME.fullmatch(name) \
            or {".", ".."} & set(name.split("/")):
        raise InputError(f"sweep={name!r} must name a directory under outputs/ (letters, digits, "
                         "'.', '-', '_', '/'; no '.' or '..' parts); pass e.g. sweep=my_sweep")


def check_location(config: Mapping) -> None:
    """Where results go: ``sweep`` a relative directory name under outputs/, ``merge`` a
    bool, ``store_root`` a path."""
    if config["sweep"] is not None:  # a sweep's (named on its command line); a job has none
        check_sweep_name(config["sweep"])
    if not isinstance(config["merge"], bool):
        raise InputError(f"merge={config['merge']!r} must be true or false; pass "
                         "merge=true to add a sweep's points to an existing sweep directory")
    root = config["store_root"]
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
    InputError naming the first bad value. A hand-built config is completed from
    ``conf/config.yaml`` first (:func:`pipeline.config.complete`)."""
    config = complete(config)
    spec = get(config["algorithm"]["name"])
    lam = check_lam(config["lam"])
    check_kappa(config["kappa"], 1)
    check_seed(config["seed"])
    kernel_cfg = dict(config["kernel"])
    kernel = Kernel(kernel_cfg.pop("name"), kernel_cfg)
    options = options_of(spec, {k: v for k, v in config["algorithm"].items() if k != "name"})
    shape = train_shape(config["dataset"])  # validates the dataset spec
    check_buildable(config["dataset"], shape)
    check_task(spec, config["dataset"])
    check_hyper(config, kernel)
    validate(CERTIFICATE_OPTIONS, config["certificate"], owner="the certificate",
             prefix="certificate.")
    check_threads(config["threads"])
    check_job_timeout(config["job_timeout"])
    check_blocks(config["blocks"], spec)
    profile = config["profile_memory"]
    if not isinstance(profile, bool):
        raise InputError(f"profile_memory={profile!r} must be true or false; pass "
                         "profile_memory=true to record the peak memory of fit and prediction")
    check_location(config)
    if shape is not None and not config["learning_curve"]:
        # last, so that a TooLarge job (a failed point in a sweep) has passed every other check
        check_size(spec, *shape, options, available)
    return spec, lam, kernel, options


def check_seed(seed: Any) -> int:
    """``seed``: an integer in [0, 2**32 − 1], as numpy's RandomState takes it (the stores
    keep seeds as int64)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise InputError(f"seed={seed!r} must be an integer in [0, {SEED_MAX}] (2**32 − 1); "
                         "pass e.g. seed=0")
    return seed


def check_blocks(blocks: Any, spec: AlgorithmSpec) -> str:
    """``blocks``: where the training rows and a fit's n-sized state live: ``memory`` (this
    process) or ``cluster`` (row ranges on the Dask workers, :mod:`pipeline.cluster.blocks`;
    for algorithms that declare ``cluster_blocks``)."""
    if blocks not in BLOCKS:
        raise InputError(f"blocks={blocks!r} must be one of {', '.join(BLOCKS)}; pass "
                         "blocks=memory (the default) or blocks=cluster")
    if blocks == "cluster" and not spec.cluster_blocks:
        able = sorted(name for name, s in REGISTRY.items() if s.cluster_blocks)
        raise InputError(f"algorithm {spec.name} does not run with blocks=cluster; pass "
                         f"blocks=memory, or one of: {', '.join(able)}")
    return blocks


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


# the longest job_timeout: ~31 years (a timer's wait takes at most threading.TIMEOUT_MAX)
JOB_TIMEOUT_MAX = 1e9


def check_job_timeout(seconds: Any) -> float | None:
    """``job_timeout``: null (no limit) or seconds in (0, 1e9] (:mod:`pipeline.job.deadline`)."""
    if seconds is None:
        return None
    if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds) or not 0 < seconds <= JOB_TIMEOUT_MAX):
        raise InputError(f"job_timeout={seconds!r} must be a number of seconds in (0, "
                         f"{JOB_TIMEOUT_MAX:g}] or null (no limit); pass e.g. job_timeout=600")
    return float(seconds)


def check_threads(threads: Any) -> int | str | None:
    """``threads``: the BLAS and kernel-block threads of a job: an int ≥ 1; ``auto`` (the
    default: the machine's cores shared among a sweep's jobs running on it at once, or for
    one job at a time the cores no other runnable thread holds when it starts,
    :func:`~pipeline.cluster.threads.free_threads`); or null (the BLAS library's default,
    every core for kernel blocks)."""
    if threads is not None and threads != "auto" and (
            isinstance(threads, bool) or not isinstance(threads, int)
            or not 1 <= threads <= INT_MAX):
        raise InputError(f"threads={threads!r} must be an integer in [1, {INT_MAX}] (the BLAS "
                         "threads of each "
                         "job), auto (the cores shared among the jobs running at once) or null "
                         "(the BLAS library's default); pass e.g. threads=1")
    return threads

