"""Checks of a resolved job config before anything is built: each bad value is one
:class:`~algorithms.errors.InputError` line naming it and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from algorithms.contract import AlgorithmSpec, check_lam
from algorithms.errors import InputError, TooLarge
from algorithms.evaluation import check_size, options_of
from algorithms.kernels import Kernel
from algorithms.registry import REGISTRY, get
from pipeline.config import complete
from pipeline.config.keys import TOP_LEVEL, check_keys
from pipeline.config.records import CertificateSpec
from pipeline.datasets import DATASETS, check_buildable, distinct_train, task_of, train_shape
from pipeline.job.hyper import HyperSpec, check_hyper
from pipeline.job.identity import spec_or_none


def drop_inapplicable_options(config: dict) -> list[str]:
    """In a sweep over several algorithms, an option one of them does not take (SGMA's eps
    for another, say) is dropped from that algorithm's jobs, as κ is for algorithms that do
    not use it; returns the dropped keys. A single job with such an option is an error."""
    spec = spec_or_none(config)
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
    spec = spec_or_none(config)
    if spec is None or config["blocks"] != "cluster" or spec.cluster_blocks:
        return False
    config["blocks"] = "memory"
    return True


@dataclass(frozen=True)
class Checked:
    """What checking a job config builds: its algorithm's spec, λ, kernel and options (defaults
    filled in), its ``hyper`` and ``certificate`` records, and its training set's shape (None
    where the dataset does not say it before it is built)."""

    spec: AlgorithmSpec
    lam: float
    kernel: Kernel
    options: dict
    hyper: HyperSpec
    certificate: CertificateSpec
    shape: tuple[int, int] | None


def check_config(config: Mapping, available: float | None = None, sized: bool = True
                 ) -> tuple[AlgorithmSpec, float, Kernel, dict]:
    """Validate a job config without building its data (:func:`checked`), and whether the fit
    fits (:func:`size_verdict`: ``max_n``, and the algorithm's declared memory against
    ``available`` bytes, default what this machine has free; not with ``sized=False``),
    raising its TooLarge. Returns (spec, lam, kernel, options); raises InputError naming the
    first bad value. A hand-built config is completed from ``conf/config.yaml`` first
    (:func:`pipeline.config.complete`); a job checks its config once, in
    :meth:`pipeline.job.spec.JobSpec.from_config`."""
    config = complete(config)
    found = checked(config)
    if sized:
        too_large = size_verdict(config, found, available)
        if too_large is not None:
            raise TooLarge(too_large)
    return found.spec, found.lam, found.kernel, found.options


def checked(config: Mapping) -> Checked:
    """Check a complete job config without building its data: the algorithm and its options,
    ``lam``, ``kappa``, ``seed``, the kernel, the ``hyper`` block, the dataset spec, the
    certificate and every other top-level key with a check; the first bad value raises its
    InputError line."""
    spec = get(config["algorithm"]["name"])
    lam = check_lam(config["lam"])
    check_keys(config, ("kappa", "seed"))
    kernel_cfg = dict(config["kernel"])
    kernel = Kernel(kernel_cfg.pop("name"), kernel_cfg)
    options = options_of(spec, {k: v for k, v in config["algorithm"].items() if k != "name"})
    shape = train_shape(config["dataset"])  # validates the dataset spec
    check_buildable(config["dataset"], shape)
    check_task(spec, config["dataset"])
    hyper = HyperSpec.of(config)
    check_hyper(hyper, kernel, config["dataset"])
    certificate = CertificateSpec.of(config["certificate"])
    # every other top-level key with a check of its own (pipeline.config.keys)
    check_keys(config, tuple(k for k in TOP_LEVEL if k not in ("lam", "kappa", "seed")))
    check_blocks(config["blocks"], spec)
    check_device(spec, config["device"], config["precision"], config["blocks"])
    return Checked(spec, lam, kernel, options, hyper, certificate, shape)


def size_verdict(config: Mapping, found: Checked, available: float | None = None
                 ) -> str | None:
    """Why the fit of a checked config cannot run with ``available`` bytes (default what this
    machine has free): over its algorithm's ``max_n`` or its declared memory; None when it can,
    or when its size is not known before its data is built or it measures a learning curve.
    Checked last, so that a job too large (a failed point in a sweep) has passed every other
    check."""
    if found.shape is None or config["learning_curve"]:
        return None
    distinct = distinct_train(config["dataset"]) if found.spec.distinct_inputs else None
    if config["device"] != "cpu":  # its n × n matrices are checked on the device, where
        available = math.inf       # they are made (TorchKernelBlocks.memory_on_device)
    try:
        check_size(found.spec, *found.shape, found.options, available, distinct=distinct)
    except TooLarge as err:
        return str(err)
    return None


def check_blocks(blocks: Any, spec: AlgorithmSpec) -> str:
    """``blocks`` (:func:`pipeline.config.keys.check_blocks`) for the algorithm ``spec``:
    ``cluster`` only for algorithms that declare ``cluster_blocks``."""
    if blocks == "cluster" and not spec.cluster_blocks:
        able = sorted(name for name, s in REGISTRY.items() if s.cluster_blocks)
        raise InputError(f"algorithm {spec.name} does not run with blocks=cluster; pass "
                         f"blocks=memory, or one of: {', '.join(able)}")
    return blocks


def check_device(spec: AlgorithmSpec, device: str, precision: str, blocks: str) -> None:
    """A job on a torch device (``device`` not ``cpu``): only for algorithms that declare
    ``device_blocks``, in float64 for those that declare ``float64_only``, and with its rows in
    this process (``blocks=memory``); checked before any data are read, as :func:`check_blocks`
    (whether the device exists is the job's to say, on the machine that runs it)."""
    if device == "cpu":
        return
    if not spec.device_blocks:
        able = sorted(name for name, s in REGISTRY.items() if s.device_blocks)
        raise InputError(f"algorithm {spec.name} does not run on device={device}; pass "
                         f"device=cpu, or one of: {', '.join(able)}")
    if precision != "float64" and spec.float64_only:
        raise InputError(f"algorithm {spec.name} computes in float64 only; pass "
                         f"precision=float64 with device={device}")
    if blocks != "memory":
        raise InputError(f"blocks={blocks} runs on the CPU workers; with device={device} pass "
                         "blocks=memory")


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
