"""One job, typed and frozen: :class:`JobSpec`, built once from a job config by
:meth:`JobSpec.from_config` (completed from ``conf/config.yaml``, the protocol applied,
validated) and run by :func:`pipeline.job.run.run`.

A sweep plans one ``JobSpec`` a point (:mod:`pipeline.sweep.plan`, with ``jobs_at_once``: the
options not the algorithm's dropped, ``blocks`` and ``threads`` set for the point) and hands
it to its workers as planned (:mod:`pipeline.sweep.execute`), a single job builds its own
(:func:`pipeline.job.task.run_task`), and the job's name is :meth:`JobSpec.identity`, the hash
of its config's identity keys with its data and code (:mod:`pipeline.job.identity`). What a
spec holds is read through its typed fields, its ``resolved`` config and :meth:`JobSpec.config`
(a copy to change): nothing rewrites a planned job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from algorithms.contract import AlgorithmSpec
from algorithms.errors import TooLarge
from algorithms.kernels import Kernel
from algorithms.registry import get
from pipeline.cluster.threads import resolve_threads
from pipeline.config import complete, plain_copy
from pipeline.config.keys import check_job_timeout
from pipeline.job.identity import config_hash
from pipeline.job.protocol import apply_protocol
from pipeline.job.validate import (
    blocks_in_memory_unless_declared,
    check_config,
    drop_inapplicable_options,
)


@dataclass(frozen=True)
class JobSpec:
    """A validated job: its algorithm with options, data, kernel, λ, κ, seed and protocol (what
    names it), and how and where it runs (threads, blocks, timeout, store root).

    ``too_large`` is why the fit cannot run with the memory it was checked against (None: it
    can); a sweep records such a job as failed, a single job refuses it."""

    algorithm: str
    options: Mapping[str, Any]  # the algorithm's options, validated, defaults filled in
    dataset: Mapping[str, Any]
    kernel: Kernel
    lam: float
    kappa: int
    seed: int
    protocol: str
    threads: int | str | None  # an int, "auto" (resolved when the job starts) or None
    blocks: str
    job_timeout: float | None
    store_root: str
    learning_curve: bool
    too_large: str | None = None
    # a sweep's plan: the options dropped as not the algorithm's, and blocks=cluster run in
    # memory for an algorithm that does not declare it (pipeline.job.validate)
    dropped: tuple[str, ...] = field(default=(), compare=False)
    blocks_moved: bool = field(default=False, compare=False)
    # the whole resolved config (the result file records it; its identity keys name the job):
    # read it, never change it (:meth:`config` gives a copy to change)
    resolved: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], available: float | None = None,
                    jobs_at_once: int | None = None) -> JobSpec:
        """The job a resolved config describes (a hand-built one completed from
        ``conf/config.yaml``), with its protocol applied (:func:`pipeline.job.protocol.
        apply_protocol`) and every value checked (:func:`pipeline.job.validate.check_config`:
        the first bad one is an InputError line); the fit's size is checked against
        ``available`` bytes (default what this machine has free) into ``too_large``.

        A sweep's plan passes ``jobs_at_once`` (the jobs sharing this machine's cores): an
        option the algorithm does not take is then dropped, ``blocks=cluster`` runs in memory
        for an algorithm that does not declare it (both recorded: ``dropped``,
        ``blocks_moved``), and ``threads=auto`` becomes the job's share of the cores
        (:func:`pipeline.cluster.threads.resolve_threads`); a single job with such an option
        or such blocks is an error, and resolves ``auto`` when it starts."""
        config = plain_copy(complete(config))
        dropped, moved = (), False
        if jobs_at_once is not None:
            dropped = tuple(drop_inapplicable_options(config))
        apply_protocol(config)  # protocol=own: the method's own training, or the shared job
        if jobs_at_once is not None:
            moved = blocks_in_memory_unless_declared(config)
            config["threads"] = resolve_threads(config["threads"], jobs_at_once)
        try:
            spec, lam, kernel, options = check_config(config, available)
            too_large = None
        except TooLarge as err:  # the size is checked last: every other value passed
            too_large = str(err)
            spec, lam, kernel, options = check_config(config, sized=False)
        return cls(spec.name, MappingProxyType(options), MappingProxyType(config["dataset"]),
                   kernel, lam, config["kappa"], config["seed"], config["protocol"],
                   config["threads"], config["blocks"],
                   check_job_timeout(config["job_timeout"]), config["store_root"],
                   bool(config["learning_curve"]),
                   too_large, dropped, moved, config)

    @property
    def spec(self) -> AlgorithmSpec:
        """The algorithm's declared spec (:mod:`algorithms.registry`)."""
        return get(self.algorithm)

    def config(self) -> dict:
        """The job's resolved config, as a result file records it (a copy)."""
        return plain_copy(dict(self.resolved))

    def __reduce__(self):
        """Pickled (to a sweep's workers) with its read-only mappings as dicts."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["options"], values["dataset"] = dict(self.options), dict(self.dataset)
        return _unpickled, (values,)

    def identity(self, write_data: bool = True) -> str:
        """The job's name: :func:`pipeline.job.identity.config_hash` of its config (its data
        ingested first, or built in memory without ``write_data``, as for a dry run)."""
        return config_hash(self.resolved, write_data=write_data)


def _unpickled(values: dict[str, Any]) -> JobSpec:
    return JobSpec(**{**values, "options": MappingProxyType(values["options"]),
                      "dataset": MappingProxyType(values["dataset"])})
