"""``hydra/launcher=dask``: Hydra's Launcher API over :mod:`pipeline.sweep`.

Hydra discovers this class in the ``hydra_plugins`` namespace package; its config lives in
``conf/hydra/launcher/dask.yaml`` and the cluster it uses in the ``cluster`` config group.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class DaskLauncher(Launcher):
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
        from pipeline.sweep import launch

        assert self.config is not None and self.hydra_context is not None
        return launch(self.config, self.hydra_context.config_loader, job_overrides,
                      initial_job_idx, self.retries)
