"""One job, typed and frozen: :class:`JobSpec`, built once from a job config by
:meth:`JobSpec.from_config` (completed from ``conf/config.yaml``, the protocol applied,
validated) and run by :func:`pipeline.job.run.run`.

A sweep plans one ``JobSpec`` a point (:mod:`pipeline.sweep.plan`, with ``jobs_at_once``: the
options not the algorithm's dropped, ``blocks`` and ``threads`` set for the point) and hands
it to its workers as planned (:mod:`pipeline.sweep.execute`), a single job builds its own
(:func:`pipeline.job.task.run_task`), and the job's name is :meth:`JobSpec.identity`, the hash
of its config's identity keys with its data and code (:mod:`pipeline.job.identity`). The job's
code reads a spec through its typed fields and records (:class:`~pipeline.config.records.
DeviceSpec`, :class:`~pipeline.job.hyper.HyperSpec`, :class:`~pipeline.config.records.
CertificateSpec`, :class:`~pipeline.config.records.CurveSpec`, :class:`~pipeline.config.records.
ProfileSpec`); its ``resolved`` config is the record a result file keeps and what its name
hashes (:meth:`JobSpec.config`: a copy). Nothing rewrites a planned job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from algorithms.contract import AlgorithmSpec
from algorithms.kernels import Kernel
from algorithms.registry import get
from pipeline.cluster.threads import resolve_threads
from pipeline.config import complete, plain_copy
from pipeline.config.keys import check_job_timeout
from pipeline.config.records import CertificateSpec, CurveSpec, DeviceSpec, ProfileSpec
from pipeline.job.hyper import HyperSpec
from pipeline.job.identity import config_hash
from pipeline.job.protocol import apply_protocol
from pipeline.job.validate import (
    blocks_in_memory_unless_declared,
    checked,
    drop_inapplicable_options,
    size_verdict,
)


@dataclass(frozen=True)
class JobSpec:
    """A validated job: its algorithm with options, data, kernel, λ, κ, seed and protocol (what
    names it), its typed blocks (the device and precision, the hyperparameter learning, the
    certificate, the learning curve, the profiling), and how and where it runs (threads,
    blocks, timeout, store root, the cluster of ``blocks=cluster``).

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
    device: DeviceSpec
    hyper: HyperSpec
    certificate: CertificateSpec
    curve: CurveSpec
    profile: ProfileSpec
    # the cluster a blocks=cluster job starts (None: a hand-built config names none)
    cluster: Mapping[str, Any] | None = field(default=None, compare=False)
    too_large: str | None = None
    # a sweep's plan: the options dropped as not the algorithm's, and blocks=cluster run in
    # memory for an algorithm that does not declare it (pipeline.job.validate)
    dropped: tuple[str, ...] = field(default=(), compare=False)
    blocks_moved: bool = field(default=False, compare=False)
    # the whole resolved config: the record the result file keeps, and what the job's name
    # hashes (its identity keys, :meth:`identity`); the job's code reads the fields above
    resolved: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], available: float | None = None,
                    jobs_at_once: int | None = None) -> JobSpec:
        """The job a resolved config describes (a hand-built one completed from
        ``conf/config.yaml``), with its protocol applied (:func:`pipeline.job.protocol.
        apply_protocol`) and every value checked once (:func:`pipeline.job.validate.checked`:
        the first bad one is an InputError line); the fit's size is then judged against
        ``available`` bytes (default what this machine has free) into ``too_large``
        (:func:`pipeline.job.validate.size_verdict`).

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
        found = checked(config)
        return cls(found.spec.name, MappingProxyType(found.options),
                   MappingProxyType(config["dataset"]), found.kernel, found.lam,
                   config["kappa"], config["seed"], config["protocol"], config["threads"],
                   config["blocks"], check_job_timeout(config["job_timeout"]),
                   config["store_root"], DeviceSpec.of(config), found.hyper,
                   found.certificate, CurveSpec.of(config["learning_curve"]),
                   ProfileSpec.of(config), _read_only(config.get("cluster")),
                   size_verdict(config, found, available), dropped, moved, config)

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
        for name in _READ_ONLY:
            values[name] = None if values[name] is None else dict(values[name])
        return _unpickled, (values,)

    def identity(self, write_data: bool = True) -> str:
        """The job's name: :func:`pipeline.job.identity.config_hash` of its config (its data
        ingested first, or built in memory without ``write_data``, as for a dry run)."""
        return config_hash(self.resolved, write_data=write_data)


_READ_ONLY = ("options", "dataset", "cluster")  # the mappings a spec holds read-only


def _read_only(value: Mapping | None) -> Mapping | None:
    return None if value is None else MappingProxyType(value)


def _unpickled(values: dict[str, Any]) -> JobSpec:
    return JobSpec(**{**values, **{name: _read_only(values[name]) for name in _READ_ONLY}})
