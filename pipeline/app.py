"""The Hydra application: its task function runs one job (:mod:`pipeline.job.run`) in Hydra's
output directory; :func:`run` and :func:`multirun` launch it through Hydra and return what
Hydra returns (a ``JobReturn``, or one per sweep point), and the text a user sees is made here
from the result file on disk.

    python -m pipeline algorithm=<name> dataset=abalone lam=0.1 kappa=59 seed=0
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import hydra
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import RunMode
from omegaconf import DictConfig

from hydra_plugins.sgp_dask_launcher.dask_launcher import DaskLauncher
from hydra_plugins.sgp_dask_launcher.grouped_sweeper import GroupedSweeper
from pipeline.config import CONF_DIR

# Hydra finds plugins by scanning the hydra_plugins namespace package, which an editable
# install's import hook can hide from it; registering explicitly works for every install mode,
# and only when the scan missed it (else `--info plugins` lists it twice: the scan imports its
# own copy of the class).
for _plugin, _kind in ((DaskLauncher, Launcher), (GroupedSweeper, Sweeper)):
    _NAME = f"{_plugin.__module__}.{_plugin.__name__}"
    if not any(f"{c.__module__}.{c.__name__}" == _NAME
               for c in Plugins.instance().discover(_kind)):
        Plugins.instance().register(_plugin)


def task(cfg: DictConfig) -> dict:
    """Hydra's task function: run the job ``cfg`` describes (:func:`run_task`) in the job's
    Hydra output directory; returns a small record (it travels back from a worker)."""
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.job.identity import job_config

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
    return run_task(config, Path(hydra_cfg.runtime.output_dir), one_job)


def run_task(config: dict, output_dir: Path, one_job: bool) -> dict:
    """The work of :func:`task` on a resolved job config: run the job, writing ``result.nc``
    into ``output_dir``. One job (``one_job``) returns its bad input or lost cluster worker
    as a record, so that Hydra prints no line of its own about it; a sweep's job raises, and
    the sweep records the failure (:mod:`pipeline.sweep.execute`). The job's code is imported
    here, not with this module: Hydra's own flags (``--help``, ``--cfg``, tab completion)
    start without it."""
    from algorithms.errors import InputError
    from pipeline.cluster.here import ClusterFitError, worker_name
    from pipeline.job.codeversion import cached_under
    from pipeline.job.deadline import JobTimedOut, deadline
    from pipeline.job.log import job_log
    from pipeline.job.run import run_job
    from pipeline.job.summary import outcome_text
    from pipeline.job.validate import check_job_timeout
    from pipeline.results.job_file import JOB_FILE

    try:
        with job_log(output_dir) as log:  # <output_dir>/pipeline.log (pipeline.job.log)
            log.info("job %s on %s: algorithm=%s dataset=%s lam=%s kappa=%s seed=%s",
                     output_dir.name, worker_name() or "this process",
                     config["algorithm"]["name"], config["dataset"]["name"], config["lam"],
                     config["kappa"], config["seed"])
            timeout = check_job_timeout(config["job_timeout"])
            with deadline(timeout, partial(_stuck, config, output_dir, one_job)), \
                    cached_under(config.get("store_root")):  # code versions kept by the stores
                outcome = run_job(config, output_dir / JOB_FILE, {"worker": worker_name(),
                                                                  "pid": os.getpid()})
            log.info("finished:\n%s", outcome_text(outcome))
    except JobTimedOut as err:
        if not one_job:
            raise
        return {"status": "failed", "error": str(err)}
    except InputError as err:
        if not one_job:
            raise
        return {"status": "error", "error": str(err)}
    except ClusterFitError as err:  # a worker of a blocks=cluster fit was lost: not bad input
        if not one_job:
            raise
        return {"status": "failed", "error": str(err)}
    return {"status": "ok", "config_hash": outcome.config_hash,
            "result": str(outcome.result_path)}


def _stuck(config: dict, output_dir: Path, one_job: bool, message: str) -> None:
    """A job past its timeout stuck in a native call (:mod:`pipeline.job.deadline`): a single
    job prints its one line and exits; a sweep's worker records the failure and ends its own
    process (the nanny starts a fresh worker; the sweep finds the failure on disk)."""
    import signal
    import sys

    from pipeline.cluster.here import worker_name
    from pipeline.job.identity import config_hash
    from pipeline.results.job_file import JOB_FILE, write_job_failure

    error = f"JobTimedOut: {message}"
    if one_job:
        print(f"error: {message}", file=sys.stderr, flush=True)
        os._exit(1)
    write_job_failure(config, error, output_dir / JOB_FILE,
                      {"config_hash": config_hash(config), "worker": worker_name(),
                       "pid": os.getpid()})
    os.kill(os.getpid(), signal.SIGKILL)


class _Callbacks:
    """The callbacks ``hydra.callbacks`` configures (none in conf/), called as Hydra's run
    calls them: each instantiated once, an event passed to each in turn (the ``*_end`` ones
    in reverse order)."""

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


# what a sweep's worker calls with the job's resolved config when Hydra's run_job would only
# write the job's .hydra/ files around the task (pipeline.sweep.job_files)
task.run_resolved = run_task


def _launch(overrides: Sequence[str], multirun: bool):
    from pipeline.config.yaml_limits import config_directories_problem, search_directories

    problem = config_directories_problem(search_directories(overrides, CONF_DIR))
    if problem:  # a config file too large, too deep or an alias bomb: before Hydra reads it
        from algorithms.errors import InputError

        raise InputError(problem)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None,
                               job_name="pipeline"):
        app = GlobalHydra.instance().hydra
        if multirun:  # the sweeper checks the sweep's directory before making it
            return app.multirun(config_name="config", task_function=task,
                                overrides=list(overrides))
        return _run_checked(app, list(overrides))


def _run_checked(app, overrides: list[str]) -> JobReturn:
    """Hydra's ``Hydra.run`` (compose, callbacks, ``run_job``), with the directories the job
    writes checked between composing its config and making its output directory
    (:func:`pipeline.outputs.check_run_directories`): Hydra's callbacks cannot stop a run
    (it turns their errors into warnings), and the check must come before ``run_job``."""
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    from pipeline.outputs import check_run_directories

    cfg = app.compose_config(config_name="config", overrides=overrides,
                             with_log_configuration=True, run_mode=RunMode.RUN)
    if cfg.hydra.mode is None:
        cfg.hydra.mode = RunMode.RUN
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

