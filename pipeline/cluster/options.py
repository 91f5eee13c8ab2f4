"""Every cluster kind's options, declared once by its module (:mod:`pipeline.cluster.kinds`)
and gathered in :data:`OPTIONS` (the yaml files of ``conf/cluster/`` are tested against it),
and :func:`check`, which validates a cluster config against its kind's table before anything
starts: each bad value is one :class:`~algorithms.errors.InputError` line naming the value and
the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from algorithms.errors import InputError
from algorithms.options import Option, validate
from pipeline.cluster.kinds import KINDS, kind_of

OPTIONS: dict[str, dict[str, Option]] = {name: kind.options() for name, kind in KINDS.items()}


def check(cfg: Mapping) -> dict[str, Any]:
    """The cluster config ``cfg`` validated against its kind's :data:`OPTIONS` table (defaults
    filled in) and the kind's own checks across options; raises :class:`InputError` naming
    the first bad ``cluster.<option>``."""
    kind = kind_of(cfg)
    opts = validate(OPTIONS[kind.name], dict(cfg), owner=f"cluster {kind.name}",
                    prefix="cluster.")
    kind.check(opts)
    return opts


def local_worker_bytes(cluster_cfg: Mapping) -> float | None:
    """The memory one job may use on a worker where the cluster's kind knows it (a local
    cluster: the bytes at which its nanny terminates it), else None."""
    opts = check(cluster_cfg)
    return kind_of(opts).worker_bytes(opts)


def memory_hint(cluster_cfg: Mapping) -> str:
    """How much memory one worker of this cluster may use and which option changes it (for a
    job whose worker was killed for memory, e.g. a KilledWorker message)."""
    try:
        opts = check(cluster_cfg)
    except InputError:
        return "the cluster options are invalid"
    return kind_of(opts).memory_hint(opts)
