"""The table of a job config's top-level keys: what each means, its role, and its check.

Every top-level key of ``conf/config.yaml`` (its default is there, written once) and each config
group has one row of :data:`TOP_LEVEL`, tested against the yaml (``tests/test_config_schema.py``).
A key's role says what it is to a job's identity (:mod:`pipeline.job.identity`):

- ``identity``: what the job computes (its name is the hash of these, with its data and code);
- ``execution``: how it runs (threads, where its blocks live, its timeout): not in the identity;
- ``location``: where it reads and writes, and on which cluster: not in the identity;
- ``applied``: written into the algorithm's node before the job is named (``own``,
  :func:`pipeline.job.protocol.apply_protocol`): the node is in the identity, the key is not.

A key's ``check`` takes its value and returns it (normalised) or raises the one-line
:class:`~algorithms.errors.InputError` naming the value and the fix; :func:`check_keys` runs
the checks of a job config's keys. A key whose check needs another key (``blocks`` and the
algorithm, ``protocol`` and ``own``), a config group and the ``certificate`` block (its
:data:`CERTIFICATE_OPTIONS`) are checked where they are used. Adding a top-level key is its yaml
line, its row here, and the code that uses it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from algorithms.contract import check_kappa, check_lam
from algorithms.errors import InputError
from algorithms.options import INT_MAX, SEED_MAX, Option

ROLES = ("identity", "execution", "location", "applied")


@dataclass(frozen=True)
class Key:
    """One top-level key: its role (:data:`ROLES`), what it means, and its check (value →
    value, or the one-line error); ``group``: a config group (``conf/<key>/``), whose options
    are declared by their own tables; ``planned``: a sweep's plan may set a job's value
    (:mod:`pipeline.sweep.plan`: ``threads=auto`` resolved to a count, ``blocks=cluster`` kept
    in memory for an algorithm that does not declare it), which the job then runs with."""

    role: str
    doc: str
    check: Callable[[Any], Any] | None = None
    group: bool = False
    planned: bool = False  # a sweep's plan may set a job's value (execution keys)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Key role {self.role!r} is not one of {ROLES}")


def _true_or_false(name: str, fix: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise InputError(f"{name}={value!r} must be true or false; pass {fix}")
        return value
    return check


def check_seed(seed: Any) -> int:
    """``seed``: an integer in [0, 2**32 − 1], as numpy's RandomState takes it (the stores
    keep seeds as int64)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise InputError(f"seed={seed!r} must be an integer in [0, {SEED_MAX}] (2**32 − 1); "
                         "pass e.g. seed=0")
    return seed


def check_threads(threads: Any) -> int | str | None:
    """``threads``: the BLAS and kernel-block threads of a job: an int ≥ 1; ``auto`` (the
    default: the machine's cores shared among a sweep's jobs running on it at once, or for
    one job at a time the cores no other runnable thread holds when it starts,
    :func:`~pipeline.cluster.threads.free_threads`); ``all`` (as ``auto``, but one job at a
    time takes every core whatever else runs: a benchmark's fixed thread count, its
    contention recorded as ``other_cores`` rather than taken as a thread fewer); or null (the
    BLAS library's default, every core for kernel blocks)."""
    if threads is not None and threads not in ("auto", "all") and (
            isinstance(threads, bool) or not isinstance(threads, int)
            or not 1 <= threads <= INT_MAX):
        raise InputError(f"threads={threads!r} must be an integer in [1, {INT_MAX}] (the BLAS "
                         "threads of each "
                         "job), auto (the cores shared among the jobs running at once), all "
                         "(every core, whatever else runs) or null (the BLAS library's "
                         "default); pass e.g. threads=1")
    return threads


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


BLOCKS = ("memory", "cluster")


def check_device(device: Any) -> str:
    """``device``: where a fit's dominant numerics run, ``cpu`` (numpy: the default) or a
    PyTorch device (``torch:cpu``, ``cuda``, ``cuda:N``: :mod:`algorithms.device`); whether
    it exists here is the job's to say, on the machine that runs it."""
    from algorithms.device import check_device as check

    return check(device)


def check_precision(precision: Any) -> str:
    """``precision``: float64 (the default) or float32, the latter on a torch device only
    (checked with ``device`` by :func:`pipeline.job.validate.check_device`)."""
    if precision not in ("float64", "float32"):
        raise InputError(f"precision={precision!r} must be float64 (the default) or float32 "
                         "(on a torch device: device=cuda); pass precision=float64")
    return precision


def check_blocks(blocks: Any) -> str:
    """``blocks``: ``memory`` (this process) or ``cluster`` (row ranges on the Dask workers,
    :mod:`pipeline.blocks.cluster`); whether the algorithm runs so is
    :func:`pipeline.job.validate.check_blocks`'s."""
    if blocks not in BLOCKS:
        raise InputError(f"blocks={blocks!r} must be one of {', '.join(BLOCKS)}; pass "
                         "blocks=memory (the default) or blocks=cluster")
    return blocks


SWEEP_NAME = re.compile(r"[\w.\-]+(/[\w.\-]+)*")
# the longest sweep name, in bytes (the shipped ones reach ~35): its directory's path stays far
# below the file system's 255 bytes a name and 4096 a path, so that no error is about its length
SWEEP_NAME_MAX_BYTES = 100


def check_sweep_name(name: Any) -> str:
    """``sweep``: a relative directory name under outputs/, not outputs/ itself, of at most
    :data:`SWEEP_NAME_MAX_BYTES` bytes (checked on the command line, and resolved before Hydra
    makes the directory)."""
    if isinstance(name, str) and len(name.encode("utf-8", "surrogatepass")) > SWEEP_NAME_MAX_BYTES:
        size = len(name.encode("utf-8", "surrogatepass"))
        raise InputError(f"sweep={name[:40]}… has {size} bytes, more than the "
                         f"{SWEEP_NAME_MAX_BYTES} a sweep name may have; pass a shorter name, "
                         "e.g. sweep=my_sweep")
    if isinstance(name, str) and name.strip("/") and set(name.strip("/").split("/")) == {"."}:
        raise InputError(f"sweep={name!r} would put the sweep in outputs/ itself, beside "
                         "stores/; pass a directory name under it, e.g. sweep=my_sweep")
    if not isinstance(name, str) or not SWEEP_NAME.fullmatch(name) \
            or {".", ".."} & set(name.split("/")):
        raise InputError(f"sweep={name!r} must name a directory under outputs/ (letters, digits, "
                         "'.', '-', '_', '/'; no '.' or '..' parts); pass e.g. sweep=my_sweep")
    return name


def check_store_root(root: Any) -> str:
    if not isinstance(root, str) or not root.strip():
        raise InputError(f"store_root={root!r} must be a directory path; pass e.g. "
                         "store_root=outputs/stores")
    return root


# learning_curve (algorithms.curve_jobs): bounds checked before anything is drawn or allocated.
# The shipped curves reach n = 2000, draws = 100, n_nodes = 2000 (~70 MB); these leave ~60×.
CURVE_COUNT_MAX = 10**6          # draws, n_nodes and each training set size n
CURVE_SIZES_MAX = 1000           # values of n in one curve
CURVE_BYTES_MAX = 4 * 2**30      # float64 bytes one curve job may allocate (estimate below)


def _curve_count(curve: Mapping, key: str, default: int, lo: int) -> int:
    value = curve.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        return default  # not an integer: algorithms.curve_jobs says so with its own line
    if not lo <= value <= CURVE_COUNT_MAX:
        raise InputError(f"learning_curve.{key}={value!r} must be an integer in [{lo}, "
                         f"{CURVE_COUNT_MAX}]; pass e.g. learning_curve.{key}={default}")
    return value


def check_learning_curve(curve: Any) -> Any:
    """``learning_curve``: null (a fit), or Lemma 4's E^g(n) (:mod:`algorithms.curve_jobs`),
    whose sizes are bounded before anything is drawn: each n, ``draws`` and ``n_nodes`` at
    most :data:`CURVE_COUNT_MAX`, at most :data:`CURVE_SIZES_MAX` values of n, and the float64
    arrays of the job (the draws of the largest n, the errors of every n and draw, one draw's
    n × n and n_nodes × n matrices) at most :data:`CURVE_BYTES_MAX`. Keys, types and the
    density are the job's to check (their messages name them)."""
    if curve is None:
        return None
    if not isinstance(curve, Mapping):
        raise InputError(f"learning_curve={curve!r} must be a block of keys (n, draws, density, "
                         "n_nodes, baseline) or null; pass e.g. '+learning_curve.n=[1,10,100]'")
    sizes = curve.get("n")
    if sizes is not None and (isinstance(sizes, (str, bytes, Mapping))
                              or not hasattr(sizes, "__len__")):
        raise InputError(f"learning_curve.n={sizes!r} must be a non-empty list of integers ≥ 1 "
                         "(training set sizes); pass e.g. learning_curve.n=[1,10,100]")
    sizes = list(sizes or [])
    if len(sizes) > CURVE_SIZES_MAX:
        raise InputError(f"learning_curve.n has {len(sizes)} values, more than the "
                         f"{CURVE_SIZES_MAX} a curve may have; pass fewer training set sizes")
    largest = 1
    for n in sizes:
        if isinstance(n, int) and not isinstance(n, bool):
            if n > CURVE_COUNT_MAX:
                raise InputError(f"learning_curve.n holds {n}, more than the {CURVE_COUNT_MAX} "
                                 "a training set size may be; pass smaller sizes")
            largest = max(largest, n)
    draws = _curve_count(curve, "draws", 100, 1)
    nodes = _curve_count(curve, "n_nodes", 2000, 2)
    need = 8 * (draws * largest + 2 * len(sizes) * draws + largest * largest + nodes * largest)
    if need > CURVE_BYTES_MAX:
        raise InputError(f"learning_curve with n up to {largest}, draws={draws} and "
                         f"n_nodes={nodes} needs ~{need / 2**30:.1f} GiB, more than the "
                         f"{CURVE_BYTES_MAX / 2**30:g} GiB a learning curve may use; lower "
                         "learning_curve.draws, learning_curve.n_nodes or the largest "
                         "learning_curve.n")
    return curve


CERTIFICATE_OPTIONS = {
    "enabled": Option(True, "bool", "certify every regression fit (Theorem 1)"),
    "tol": Option(1e-3, "float", "run the dual greedy until the certificate is below tol",
                  lo=0.0, lo_open=True),
    "max_dual": Option(500, "int", "... or this many dual steps", lo=0),
    "kappa": Option(59, "int", "candidate subset size of the dual greedy", lo=1),
}


TOP_LEVEL: dict[str, Key] = {
    "algorithm": Key("identity", "the method and its options (conf/algorithm/)", group=True),
    "dataset": Key("identity", "the data and its options (conf/dataset/)", group=True),
    "kernel": Key("identity", "the covariance function (conf/kernel/)", group=True),
    "hyper": Key("identity", "the kernel and lam as given, or learned first (conf/hyper/)",
                 group=True),
    "cluster": Key("location", "where a sweep's jobs run (conf/cluster/)", group=True),
    "lam": Key("identity", "the regulariser = noise variance σ² (> 0)", check_lam),
    "kappa": Key("identity", "random candidate-subset size κ (κ ≥ n: full greedy)",
                 lambda kappa: check_kappa(kappa, 1)),
    "seed": Key("identity", "seeds the algorithm's random choices", check_seed),
    "protocol": Key("identity", "shared (one kernel and lam for every method) or own "
                                "(pipeline.job.protocol)"),
    "own": Key("applied", "options on top of a peer's own protocol (pipeline.job.protocol)"),
    "store_root": Key("location", "where datasets are ingested as zarr stores",
                      check_store_root),
    "sweep": Key("location", "a sweep's directory under outputs/ (null for a job: a sweep's is "
                             "named on its command line)",
                 lambda name: None if name is None else check_sweep_name(name)),
    "merge": Key("location", "add a sweep's points to a directory holding another sweep",
                 _true_or_false("merge", "merge=true to add a sweep's points to an existing "
                                         "sweep directory")),
    "allow_outside_outputs": Key("location", "let a run write outside outputs/ "
                                             "(pipeline.outputs)"),
    "scheduler": Key("location", "the scheduler of cluster=address"),
    "report": Key("location", "an experiment's report settings (pipeline.report)"),
    "threads": Key("execution", "BLAS and kernel-block threads of each job", check_threads,
                   planned=True),
    "blocks": Key("execution", "where the training rows and a fit's n-sized state live",
                  check_blocks, planned=True),
    "device": Key("execution", "where a fit's numerics run: cpu (numpy), torch:cpu, cuda, "
                               "cuda:N (in the identity unless cpu: pipeline.job.identity)",
                  check_device),
    "precision": Key("execution", "float64, or float32 on a torch device (in the identity "
                                  "unless float64)", check_precision),
    "dry_run": Key("execution", "plan and check a sweep without running it "
                                "(pipeline.config.flags)"),
    "relearn": Key("execution", "learn again the learnings of a sweep's jobs that run, their "
                                "cached ones set aside (pipeline.job.hyper.set_aside)",
                   _true_or_false("relearn", "relearn=true to learn a sweep's hyperparameters "
                                  "again")),
    "job_timeout": Key("execution", "seconds after which a job is stopped and recorded failed",
                       check_job_timeout),
    "profile_memory": Key("identity", "record the peak memory of fit and prediction",
                          _true_or_false("profile_memory", "profile_memory=true to record the "
                                         "peak memory of fit and prediction")),
    "learning_curve": Key("identity", "measure Lemma 4's E^g(n) instead of fitting "
                                      "(experiment=ferrari1999_*)", check_learning_curve),
    "certificate": Key("identity", "the Theorem 1 certificate's settings "
                                   "(CERTIFICATE_OPTIONS)"),
}


def keys_of_role(*roles: str) -> tuple[str, ...]:
    """The top-level keys of the given roles, in the table's order."""
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown key roles {sorted(unknown)}; roles are {ROLES}")
    return tuple(name for name, key in TOP_LEVEL.items() if key.role in roles)


def planned_keys() -> tuple[str, ...]:
    """The keys a sweep's plan may set for a job (:attr:`Key.planned`)."""
    return tuple(name for name, key in TOP_LEVEL.items() if key.planned)


def check_keys(config: Mapping[str, Any], names: tuple[str, ...] | None = None) -> None:
    """Run the check of each top-level key of ``config`` that has one (of ``names`` only, if
    given), in the table's order: the first bad value raises its one line."""
    for name, key in TOP_LEVEL.items():
        if key.check is not None and name in config and (names is None or name in names):
            key.check(config[name])
    if "device" in config and "precision" in config and config["device"] == "cpu" \
            and config["precision"] != "float64":
        raise InputError(f"precision={config['precision']} runs on a torch device only; pass "
                         "device=torch:cpu or device=cuda with it, or precision=float64")
