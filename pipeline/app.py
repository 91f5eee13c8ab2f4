"""The Hydra application: its task function runs one job (:func:`pipeline.job.task.run_task`) in
Hydra's output directory; :func:`run` and :func:`multirun` launch it through Hydra and return what
Hydra returns (a ``JobReturn``, or one per sweep point), and the text a user sees is made here
from the result file on disk.

    python -m pipeline algorithm=<name> dataset=abalone lam=0.1 kappa=59 seed=0
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig

from hydra_plugins.sgp_dask_launcher.dask_launcher import DaskLauncher
from hydra_plugins.sgp_dask_launcher.grouped_sweeper import GroupedSweeper
from pipeline.config import CONF_DIR
from pipeline.task_functions import runs_jobs

# Hydra finds plugins by scanning the hydra_plugins namespace package, which an editable
# install's import hook can hide from it; registering explicitly works for every install mode,
# and only when the scan missed it (else `--info plugins` lists it twice: the scan imports its
# own copy of the class).
for _plugin, _kind in ((DaskLauncher, Launcher), (GroupedSweeper, Sweeper)):
    _NAME = f"{_plugin.__module__}.{_plugin.__name__}"
    if not any(f"{c.__module__}.{c.__name__}" == _NAME
               for c in Plugins.instance().discover(_kind)):
        Plugins.instance().register(_plugin)


@runs_jobs
def task(cfg: DictConfig) -> dict:
    """Hydra's task function: run the job ``cfg`` describes (:func:`pipeline.job.task.run_task`,
    the one place a job runs) in the job's Hydra output directory; returns a small record (it
    travels back from a worker)."""
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.job.identity import job_config
    from pipeline.job.task import run_task

    hydra_cfg = HydraConfig.get()
    one_job = hydra_cfg.mode == RunMode.RUN
    try:
        config = job_config(cfg)
    except OmegaConfBaseException as err:  # an interpolation that does not resolve
        if not one_job:
            raise
        return {"status": "error", "error": " ".join(str(err).split())}
    if one_job and config["dry_run"]:
        return {"status": "error", "error": "dry_run=true plans a sweep; pass -m or an "
                                            "experiment (one job's config: --cfg job)"}
    if one_job and config["relearn"]:
        return {"status": "error", "error": "relearn=true learns a sweep's hyperparameters "
                                            "again; pass -m (a sweep of this one job)"}
    return run_task(config, Path(hydra_cfg.runtime.output_dir), one_job)


class _Callbacks:
    """The callbacks ``hydra.callbacks`` configures (none: the checks refuse them, from the
    command line, a config file or the composed config), called as Hydra's run calls them:
    each instantiated once, an event passed to each in turn (the ``*_end`` ones in reverse
    order)."""

    def __init__(self, cfg: DictConfig) -> None:
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        nodes = OmegaConf.select(cfg, "hydra.callbacks") or {}
        self.callbacks = [instantiate(node) for node in nodes.values()]

    def __getattr__(self, event: str):
        if not event.startswith("on_"):
            raise AttributeError(event)
        order = reversed(self.callbacks) if event.endswith("_end") else self.callbacks

        def notify(**kwargs) -> None:
            for callback in list(order):
                getattr(callback, event)(**kwargs)
        return notify


def _launch(overrides: Sequence[str], multirun: bool):
    from pipeline.config.untrusted import config_files_problem

    problem = config_files_problem(overrides)
    if problem:  # a config file too large, an alias bomb, not strict YAML, or one that runs
        from algorithms.errors import InputError  # code: before Hydra reads it

        raise InputError(problem)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None,
                               job_name="pipeline"):
        app = GlobalHydra.instance().hydra
        if multirun:  # the sweeper checks the sweep's directory before making it
            return _multirun_checked(app, list(overrides))
        return _run_checked(app, list(overrides))


def _multirun_checked(app, overrides: list[str]):
    """Hydra's ``Hydra.multirun`` (compose, callbacks, sweeper, sweep), with the composed
    config checked (:func:`pipeline.config.untrusted.check_composed`) before any callback or
    the sweeper is made from it: Hydra's own makes them at once."""
    from omegaconf import OmegaConf

    from pipeline.config.untrusted import check_composed

    cfg = app.compose_config(config_name="config", overrides=overrides,
                             with_log_configuration=True, run_mode=RunMode.MULTIRUN)
    check_composed(cfg)
    callbacks = _Callbacks(cfg)
    callbacks.on_multirun_start(config=cfg, config_name="config")
    sweeper = Plugins.instance().instantiate_sweeper(
        config=cfg, hydra_context=HydraContext(config_loader=app.config_loader,
                                               callbacks=callbacks),
        task_function=task)
    ret = sweeper.sweep(arguments=OmegaConf.to_container(cfg.hydra.overrides.task,
                                                         resolve=False))
    callbacks.on_multirun_end(config=cfg, config_name="config")
    return ret


def _run_checked(app, overrides: list[str]) -> JobReturn:
    """Hydra's ``Hydra.run`` (compose, callbacks, ``run_job``), with the directories the job
    writes checked between composing its config and making its output directory
    (:func:`pipeline.outputs.check_run_directories`): Hydra's callbacks cannot stop a run
    (it turns their errors into warnings), and the check must come before ``run_job``."""
    from hydra.core.utils import run_job

    from pipeline.config.untrusted import check_composed
    from pipeline.outputs import check_run_directories

    cfg = app.compose_config(config_name="config", overrides=overrides,
                             with_log_configuration=True, run_mode=RunMode.RUN)
    if cfg.hydra.mode is None:
        cfg.hydra.mode = RunMode.RUN
    check_composed(cfg)  # no callback, the product's launcher and sweeper
    HydraConfig.instance().set_config(cfg)  # for a run dir naming ${hydra:...}
    check_run_directories(cfg, "run")
    callbacks = _Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="config")
    ret = run_job(hydra_context=HydraContext(config_loader=app.config_loader,
                                             callbacks=callbacks),
                  task_function=task, config=cfg, job_dir_key="hydra.run.dir",
                  job_subdir_key=None, configure_logging=True)
    callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
    _ = ret.return_value  # raises the job's error, as Hydra's run does
    return ret


def compose_job(overrides: Sequence[str]) -> dict:
    """The resolved job config ``overrides`` compose (one job's; no sweep), as a job gets it
    (:func:`pipeline.job.identity.job_config`)."""
    from hydra import compose

    from pipeline.job.identity import job_config

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None,
                               job_name="pipeline"):
        return job_config(compose(config_name="config", overrides=list(overrides)))


def run(overrides: Sequence[str]) -> JobReturn:
    """One job with Hydra's overrides (e.g. ``["dataset=abalone", "lam=0.1"]``); raises what
    the job raised."""
    return _launch(overrides, multirun=False)


def multirun(overrides: Sequence[str]) -> list[JobReturn]:
    """A sweep (Hydra's ``-m``) through the configured launcher: one JobReturn per point."""
    batches = _launch(overrides, multirun=True)
    return [ret for batch in batches for ret in batch]


# Hydra's own entry point, for its flags (--cfg job, --help, --info, ...)
hydra_main = hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")(task)

