"""The cluster kinds, one module each behind one protocol (:class:`ClusterKind`: its options,
its start, what is said when it has no worker or a worker runs out of memory), and the
registry :data:`KINDS`. Code outside ``pipeline/cluster/`` asks :func:`kind_of` (``.batch``,
``.on_this_machine``, ``.starts_workers``) and never compares a kind's name.

- ``local`` (:mod:`.local`): worker processes on this machine (a ``LocalCluster``);
- ``address`` (:mod:`.address`): an existing scheduler (``scheduler=tcp://host:8786``) and its
  workers;
- ``slurm``, ``pbs`` (:mod:`.jobqueue`): dask-jobqueue batch jobs, each starting worker
  processes.

Adding a kind: a module with its :class:`ClusterKind` subclass, its line below, and its yaml in
``conf/cluster/`` (a dask-jobqueue kind: a row of :data:`.jobqueue.KINDS` and its yaml).
Importing this package imports neither Dask nor distributed.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.cluster.kinds import address, jobqueue, local
from pipeline.cluster.kinds.base import BatchSystem, ClusterKind

__all__ = ["BATCH_KINDS", "KINDS", "BatchSystem", "ClusterKind", "kind_of", "runs_here"]

KINDS: dict[str, ClusterKind] = {kind.name: kind for kind in (
    local.KIND, address.KIND, *jobqueue.KINDS)}

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
