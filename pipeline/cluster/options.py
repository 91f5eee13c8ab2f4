"""Every cluster kind's options, declared once by its module (:mod:`pipeline.cluster.kinds`)
and gathered in :data:`OPTIONS` (the yaml files of ``conf/cluster/`` are tested against it),
and :func:`check`, which validates a cluster config against its kind's table before anything
starts: each bad value is one :class:`~algorithms.errors.InputError` line naming the value and
the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from algorithms.errors import InputError
from algorithms.options import Option, validate
from pipeline.cluster.kinds import KINDS, kind_of

OPTIONS: dict[str, dict[str, Option]] = {name: kind.options() for name, kind in KINDS.items()}


# the most worker processes one cluster may ask for: beyond it, Dask builds that many worker
# specs (10⁹ of them: memory and minutes) before starting any; on this machine, at most
# WORKERS_A_CORE per core as well (each worker is a process with its own memory)
MAX_WORKERS = 4096
WORKERS_A_CORE = 64


def workers_limit(on_this_machine: bool) -> int:
    """The largest ``cluster.n_workers`` accepted (:data:`MAX_WORKERS`; on this machine also
    :data:`WORKERS_A_CORE` per core)."""
    if not on_this_machine:
        return MAX_WORKERS
    return min(MAX_WORKERS, WORKERS_A_CORE * (os.cpu_count() or 1))


def check(cfg: Mapping) -> dict[str, Any]:
    """The cluster config ``cfg`` validated against its kind's :data:`OPTIONS` table (defaults
    filled in) and the kind's own checks across options; raises :class:`InputError` naming
    the first bad ``cluster.<option>``."""
    kind = kind_of(cfg)
    opts = validate(OPTIONS[kind.name], dict(cfg), owner=f"cluster {kind.name}",
                    prefix="cluster.")
    workers = opts.get("n_workers")
    limit = workers_limit(bool(getattr(kind, "on_this_machine", False)))
    if isinstance(workers, int) and workers > limit:
        where = (f"{WORKERS_A_CORE} a core on this machine's {os.cpu_count() or 1} cores, "
                 f"at most {MAX_WORKERS}" if limit < MAX_WORKERS else "the most a cluster takes")
        raise InputError(f"cluster.n_workers={workers} is more than {limit} worker processes "
                         f"({where}); pass cluster.n_workers={min(limit, os.cpu_count() or 1)} "
                         "or fewer (null: one per core)")
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
