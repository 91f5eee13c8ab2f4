"""``hydra/launcher=dask``: Hydra's Launcher API over :mod:`pipeline.sweep`.

Hydra discovers this class in the ``hydra_plugins`` namespace package; its config lives in
``conf/hydra/launcher/dask.yaml`` and the cluster it uses in the ``cluster`` config group.
It hands the app's task function and Hydra's context to the sweep machinery, which runs each
job through Hydra's ``run_job`` on a Dask worker. Hydra's plugin scan imports this module in
every Hydra start (``--help`` and tab completion too), so the sweep machinery is imported only
when a sweep launches.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class DaskLauncher(Launcher):
    # pipeline.sweep.launch composes and checks every job before any runs (GroupedSweeper)
    composes_every_job = True

    def __init__(self, retries: int = 2) -> None:
        self.retries = retries
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        if self.config is None or self.hydra_context is None or self.task_function is None:
            raise RuntimeError("DaskLauncher.launch called before setup")
        from pipeline.sweep.launch import launch  # Dask and the jobs' code: only to launch

        return launch(self.config, self.hydra_context, self.task_function, job_overrides,
                      initial_job_idx, self.retries)
