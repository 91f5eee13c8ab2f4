"""The n × t state SGMA keeps on a cluster's row shards (:mod:`pipeline.blocks.cluster`):
[y, kernel columns or an orthonormal basis], appended to by the fit and read by the provider's
projections, each shard holding its rows."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from pipeline.blocks.shards import shard_append_residual, shard_commit, shard_reorthogonalise


class ClusterColumns:
    """:class:`~algorithms.contract.KernelColumns` whose rows live in the shards (as
    :class:`~algorithms.kernel_blocks.ArrayKernelColumns` in memory): an append only records the
    input (fetched once), and the shards compute the new kernel columns at the next projection,
    in the same call."""

    def __init__(self, blocks: Any, name: str, width: int) -> None:
        # blocks: the pipeline.blocks.cluster.ClusterKernelBlocks that made them (which imports
        # this module)
        self.blocks, self.name, self.width = blocks, name, width
        self._pending: list[np.ndarray] = []
        # the shards' rows of these columns go when this object does
        weakref.finalize(self, blocks._drop_columns, name)

    def append(self, i: int) -> None:
        self.extend([i])

    def extend(self, indices) -> None:
        indices = list(indices)
        if indices:
            self._pending.append(self.blocks.inputs(indices))
            self.width += len(indices)

    def extend_points(self, X_cols: np.ndarray) -> None:
        if len(X_cols):
            self._pending.append(np.asarray(X_cols, dtype=np.float64))
            self.width += len(X_cols)

    def append_residual(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float, float]:
        """:meth:`~algorithms.kernel_blocks.ArrayKernelColumns.append_residual` on every shard,
        the partial products summed."""
        pending = self.take_pending()
        x, r = np.asarray(x, dtype=np.float64), np.asarray(r, dtype=np.float64)
        parts = self.blocks._run(shard_append_residual, lambda b: (self.name, pending, x, r))
        return (sum(p[0] for p in parts), float(sum(p[1] for p in parts)),
                float(sum(p[2] for p in parts)))

    def reorthogonalise(self, s: np.ndarray) -> tuple[float, float]:
        s = np.asarray(s, dtype=np.float64)
        parts = self.blocks._run(shard_reorthogonalise, lambda b: (self.name, s))
        return float(sum(p[0] for p in parts)), float(sum(p[1] for p in parts))

    def commit(self, delta: float) -> None:
        self.blocks._run(shard_commit, lambda b: (self.name, float(delta)))
        self.width += 1

    def take_pending(self) -> np.ndarray:
        pending = (np.concatenate(self._pending) if self._pending
                   else np.empty((0, self.blocks.d)))
        self._pending = []
        return pending
