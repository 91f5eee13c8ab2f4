"""The cluster kinds, one row each: what a sweep needs to know of a kind without naming it.

A kind's options are declared in :data:`pipeline.cluster.options.OPTIONS` (its yaml in
``conf/cluster/`` is tested against them); this table says where its workers run and, for a
batch system, how its jobs are submitted and watched. Code outside ``pipeline/cluster/`` asks
:func:`kind_of` (``.on_this_machine``, ``.batch``) and never compares a kind's name.

- ``local``: worker processes on this machine (a ``LocalCluster``): their memory and cores are
  this machine's, their nannies run in this process;
- ``address``: an existing scheduler (``scheduler=tcp://host:8786``) and its workers;
- ``slurm``, ``pbs``: dask-jobqueue batch jobs, each starting worker processes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchSystem:
    """How a batch system's jobs are submitted and watched."""

    submit: str  # the command dask-jobqueue submits a job with
    status: str  # the command a user checks a job with, given the job ids
    jobqueue_class: str  # the dask_jobqueue class
    walltime: re.Pattern  # the forms of a job's time limit the command accepts
    walltime_form: str  # ... as the message says them


@dataclass(frozen=True)
class ClusterKind:
    """One cluster kind: its name, whether the sweep starts its workers (and closes them after),
    whether they run on this machine (memory, cores and nannies known here), and its batch
    system (None: workers are started otherwise)."""

    name: str
    doc: str
    starts_workers: bool = True
    on_this_machine: bool = False
    batch: BatchSystem | None = None


KINDS: dict[str, ClusterKind] = {kind.name: kind for kind in (
    ClusterKind("local", "worker processes on this machine (a Dask LocalCluster)",
                on_this_machine=True),
    ClusterKind("address", "an existing Dask scheduler and its workers (scheduler=...)",
                starts_workers=False),
    ClusterKind("slurm", "SLURM batch jobs (dask-jobqueue)", batch=BatchSystem(
        "sbatch", "squeue -j", "SLURMCluster",
        # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
        re.compile(r"\d+|\d+:[0-5]\d|\d+:[0-5]\d:[0-5]\d|\d+-\d+(:[0-5]\d(:[0-5]\d)?)?"),
        "[D-]HH:MM:SS (or minutes)")),
    ClusterKind("pbs", "PBS batch jobs (dask-jobqueue)", batch=BatchSystem(
        "qsub", "qstat", "PBSCluster",
        re.compile(r"\d+:[0-5]\d:[0-5]\d"),  # qsub -l walltime=: HH:MM:SS
        "HH:MM:SS")),
)}

BATCH_KINDS = tuple(name for name, kind in KINDS.items() if kind.batch is not None)


def runs_here(choice: str | None) -> bool:
    """Whether the config ``cluster=<choice>`` (``conf/cluster/<choice>.yaml``, named as its
    kind) starts its workers on this machine; False for a name that is no kind here."""
    kind = KINDS.get(choice) if isinstance(choice, str) else None
    return kind is not None and kind.on_this_machine


def kind_of(cluster_cfg: Mapping) -> ClusterKind:
    """The kind of a cluster config (its ``kind`` key); an unknown one is the one-line error
    :func:`pipeline.cluster.options.check` also gives."""
    name = cluster_cfg.get("kind")
    if name not in KINDS:
        from algorithms.errors import InputError  # not with this module: prestart imports it

        raise InputError(f"unknown cluster.kind {name!r}; choose one of: {', '.join(KINDS)} "
                         "(cluster=<name> selects conf/cluster/<name>.yaml)")
    return KINDS[name]
