"""``hydra/sweeper=grouped``: Hydra's basic sweeper (same grids, ``hydra.sweeper.params``,
batches) without its composition of every job before the launcher sees the batch.

Hydra's ``BasicSweeper`` composes each job's config to check it (~60 ms a job: 13 s of a
200-point sweep, a minute of a 1000-point one) and the launcher composes it again. With the
Dask launcher that check is its own first step (every job composed, sharing one composition
per choice of config groups, before anything runs), so this sweeper leaves it there; with any
other launcher it checks the batch with that shared composition.

``grids`` (a list of mappings like ``params``) makes the sweep a union of grids: one per entry,
``params`` with that entry's keys set to its values, each the cartesian product of its keys
then the command line's (a point in two grids runs once). A sweep whose methods need different
sizes or caps is one command so: ``conf/experiment/uci_frontier.yaml``. With ``narrow: true``
a command-line value of a key that an entry sets narrows that entry to the values both give
(an entry left with none adds nothing) instead of replacing its values: a run's part, such as
``dataset.split=5``, is then its own points of every grid, and an entry kept to splits 0–2
adds nothing to split 5 (``conf/experiment/uci_frontier.yaml`` runs one data set and split
at a time so).

``max_points`` (default :data:`MAX_POINTS`) bounds a sweep's size: the points are counted from
the lengths of the swept values (a ``range(...)`` by arithmetic), before any point is made, and
a larger sweep is refused in one line that says how to raise the limit. Planning holds every
point (its overrides and resolved config, ~6 KB) in memory: measured dry runs
(``experiment=bench_sweep_plan``, a loaded 2-core host) peaked at 230 MiB for 10 000 points and
745 MiB for 100 000 (530 s), so the default keeps planning under 1 GiB; 10⁶ points would take
~6 GiB and over an hour before the first job (``docs/how-to/sweeps.md``, "Thousands of small jobs").

It is built on Hydra's public plugin interface (``hydra.plugins.sweeper.Sweeper``, Hydra's
override parser and ``Plugins.instantiate_launcher``), not on Hydra's internal ``BasicSweeper``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

MAX_POINTS = 100_000  # hydra.sweeper.max_points's default (conf/hydra/sweeper/grouped.yaml)


class GroupedSweeper(Sweeper):
    """The cartesian product of ``params`` then the command-line overrides (or the union of
    such products, one per entry of ``grids``), launched in batches of ``max_batch_size``
    jobs (None or -1: one batch)."""

    def __init__(self, max_batch_size: int | None = None,
                 params: dict[str, str] | None = None,
                 grids: list[dict[str, str]] | None = None,
                 max_points: int | None = MAX_POINTS, narrow: bool = False) -> None:
        # zero-argument super(): Hydra's plugin scan re-executes this module, rebinding its
        # names, so nothing here refers to a class by its module-level name
        super().__init__()
        if max_batch_size is not None and max_batch_size != -1 and max_batch_size <= 0:
            raise HydraException(f"{type(self).__name__}: max_batch_size must be > 0, "
                                 f"None or -1 (one batch), not {max_batch_size}")
        self.max_batch_size = max_batch_size
        if max_points is not None and (isinstance(max_points, bool)
                                       or not isinstance(max_points, int) or max_points < 1):
            raise HydraException(f"hydra.sweeper.max_points={max_points!r} must be a positive "
                                 "integer, or null (no limit)")
        self.max_points = max_points
        self.params: dict[str, str] = dict(params or {})
        if grids is not None and (not isinstance(grids, Sequence) or isinstance(grids, str)
                                  or not all(isinstance(g, Mapping) for g in grids)):
            raise HydraException(f"hydra.sweeper.grids={grids!r} must be a list of mappings "
                                 "like params (key: values); write e.g. grids: [{}, "
                                 "{algorithm: exact, dataset.split: 0}]")
        self.grids: list[dict[str, str]] | None = (
            None if grids is None else [{str(k): v for k, v in g.items()} for g in grids])
        if not isinstance(narrow, bool):
            raise HydraException(f"hydra.sweeper.narrow={narrow!r} must be true or false")
        self.narrow = narrow
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    # ------------------------------------------------------------------ the grid

    def _override_values(self, override: Override) -> list[str]:
        """The ``key=value`` strings one override contributes to the grid."""
        key = override.get_key_element()
        if not override.is_sweep_override():
            return [f"{key}={override.get_value_element_as_str()}"]
        if not override.is_discrete_sweep():
            kind = override.value_type.name if override.value_type is not None else "unknown"
            raise HydraException(
                f"{type(self).__name__} does not support sweep type : {kind} ({key})")
        return [f"{key}={value}" for value in override.sweep_string_iterator()]

    def job_overrides(self, arguments: Sequence[str]) -> list[list[str]]:
        """Every job's overrides: the product of ``params`` then ``arguments`` (a key given
        twice keeps its first position, its last value), in that key order; with ``grids``,
        the products of ``params`` updated by each grid in turn, a point once."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        given = parser.parse_overrides(list(arguments))
        grids: list[list[Override | list[str]]] = []
        for grid in self.grids if self.grids is not None else [{}]:
            texts = [f"{key}={value}" for key, value in {**self.params, **grid}.items()]
            axes: dict[str, Override | list[str]] = {}
            for override in parser.parse_overrides(texts):
                axes[override.get_key_element()] = override
            for override in given:
                key = override.get_key_element()
                if self.narrow and key in grid:  # the entry's values that the command gives
                    kept = set(self._override_values(override))
                    axes[key] = [v for v in self._values(axes[key]) if v in kept]
                else:
                    axes[key] = override
            grids.append(list(axes.values()))
        self._check_size(sum(math.prod(_count(o) for o in grid) for grid in grids))
        jobs: dict[frozenset[str], list[str]] = {}
        for grid in grids:
            for job in itertools.product(*(self._values(o) for o in grid)):
                jobs.setdefault(frozenset(job), list(job))
        return list(jobs.values())

    def _values(self, axis: Override | list[str]) -> list[str]:
        """An axis's ``key=value`` strings: an override's, or those a narrowing kept."""
        return axis if isinstance(axis, list) else self._override_values(axis)

    def _check_size(self, points: int) -> None:
        """Refuse a sweep of more than ``max_points`` points before any is made."""
        if self.max_points is None or points <= self.max_points:
            return
        from algorithms.errors import InputError  # the jobs' code: not at Hydra's scan

        raise InputError(
            f"this sweep has {points:,} points, more than hydra.sweeper.max_points="
            f"{self.max_points} (planning holds every point in memory); split it into smaller "
            f"sweeps, or pass hydra.sweeper.max_points={points} to plan it anyway")

    def batches(self, jobs: list[list[str]]) -> list[list[list[str]]]:
        """``jobs`` in batches of ``max_batch_size`` (None or -1: all in one)."""
        size = self.max_batch_size
        if size is None or size == -1:
            return [jobs]
        return [jobs[start:start + size] for start in range(0, len(jobs), size)]

    # ------------------------------------------------------------------ the sweep

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Compose ``batch`` (one composition per choice of config groups) to fail before
        launching; left to a launcher that composes every job itself."""
        if getattr(self.launcher, "composes_every_job", False):
            return
        assert self.config is not None and self.hydra_context is not None
        from pipeline.sweep.compose import compose_jobs  # the jobs' code: not at Hydra's scan

        compose_jobs(self.config, self.hydra_context.config_loader, batch)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None
        assert self.launcher is not None
        assert self.hydra_context is not None
        batches = self.batches(self.job_overrides(arguments))

        # the name as resolved (a quoted value or an interpolation such as ${oc.env:VAR} is
        # checked here, not on the command line): nothing is made outside outputs/
        from pipeline.atomic import write_text
        from pipeline.config.keys import check_sweep_name
        from pipeline.outputs import check_run_directories
        from pipeline.sweep.directory import (
            check_not_nested,
            check_sweep_directory,
            write_error,
        )

        if self.config.sweep is not None:  # else hydra.sweep.dir names it
            check_sweep_name(self.config.sweep)
        check_run_directories(self.config, "sweep")  # under outputs/, or allowed outside
        sweep_dir = Path(self.config.hydra.sweep.dir)
        check_sweep_directory(sweep_dir.resolve())  # a file in its path, read-only, full disk
        # not inside another sweep's files or a store, none inside its own results.zarr
        check_not_nested(sweep_dir, Path(str(self.config.store_root)))
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            write_text(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(self.config))
        except OSError as err:
            raise write_error(err, sweep_dir) from None

        returns = []
        job_idx = 0
        for batch in batches:
            tic = time.perf_counter()
            self.validate_batch_is_legal(batch)
            log.debug("checked %d jobs' configs in %.2f s", len(batch), time.perf_counter() - tic)
            results = self.launcher.launch(batch, initial_job_idx=job_idx)
            for result in results:
                result.return_value  # noqa: B018 -- raises the job's error if it failed
            job_idx += len(batch)
            returns.append(results)
        return returns


def _count(override: Override | list[str]) -> int:
    """How many values ``override`` gives its key, without listing a range's values."""
    if isinstance(override, list):  # what a narrowing kept
        return len(override)
    if not override.is_sweep_override():
        return 1
    if override.is_range_sweep():
        sweep = override.value()
        start, stop, step = sweep.start, sweep.stop, sweep.step
        if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
            return len(range(start, stop, step))
        if not step or not all(math.isfinite(x) for x in (start, stop, step)):
            return 0 if not step else 1  # left to Hydra's own error
        return max(0, math.ceil((stop - start) / step))
    if not override.is_discrete_sweep():
        return 1  # refused with Hydra's message when the grid is made
    return sum(1 for _ in override.sweep_string_iterator())
