"""``hydra/sweeper=grouped``: Hydra's basic sweeper (same grids, ``hydra.sweeper.params``,
batches) without its composition of every job before the launcher sees the batch.

Hydra's ``BasicSweeper`` composes each job's config to check it (~60 ms a job: 13 s of a
200-point sweep, a minute of a 1000-point one) and the launcher composes it again. With the
Dask launcher that check is its own first step (every job composed, sharing one composition
per choice of config groups, before anything runs), so this sweeper leaves it there; with any
other launcher it checks the batch with that shared composition.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from pipeline.sweep import compose_jobs


class GroupedSweeper(BasicSweeper):
    def __init__(self, max_batch_size: int | None, params: dict[str, str] | None = None
                 ) -> None:
        # BasicSweeper.__init__'s state, set here: its own super(BasicSweeper, self) call fails
        # when Hydra's plugin scan has re-imported its module after this class was defined
        self.overrides = None
        self.batch_index = 0
        self.max_batch_size = max_batch_size
        self.params = params or {}
        self.hydra_context = None
        self.config = None
        self.launcher = None

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        if getattr(self.launcher, "composes_every_job", False):
            return
        compose_jobs(self.config, self.hydra_context.config_loader, batch)
