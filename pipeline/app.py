"""The Hydra application: its task function runs one job (:mod:`pipeline.job`) in Hydra's
output directory; :func:`run` and :func:`multirun` launch it through Hydra and return what
Hydra returns (a ``JobReturn``, or one per sweep point), and the text a user sees is made here
from the result file on disk.

    python -m pipeline algorithm=<name> dataset=abalone lam=0.1 kappa=59 seed=0
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
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

from algorithms.errors import InputError
from algorithms.registry import get
from hydra_plugins.sgp_dask_launcher.dask_launcher import DaskLauncher
from hydra_plugins.sgp_dask_launcher.grouped_sweeper import GroupedSweeper
from pipeline.cluster import worker_name
from pipeline.cluster_blocks import ClusterFitError
from pipeline.job import CONF_DIR, job_config, run_job
from pipeline.results import JOB_FILE, load_job_result

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
    """Hydra's task function: run the job ``cfg`` describes, writing ``result.nc`` into the
    job's Hydra output directory; returns a small record (it travels back from a worker)."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.RUN and cfg.get("dry_run", False):
        return {"status": "error", "error": "dry_run=true plans a sweep; pass -m or an "
                                            "experiment (one job's config: --cfg job)"}
    output_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        outcome = run_job(job_config(cfg), output_dir / JOB_FILE, {"worker": worker_name(),
                                                                   "pid": os.getpid()})
    except InputError as err:
        if hydra_cfg.mode != RunMode.RUN:
            raise  # a sweep records the failure (pipeline.sweep.execute)
        # one job: returned, not raised, so that Hydra does not print its own line about it
        return {"status": "error", "error": str(err)}
    except ClusterFitError as err:  # a worker of a blocks=cluster fit was lost: not bad input
        if hydra_cfg.mode != RunMode.RUN:
            raise
        return {"status": "failed", "error": str(err)}
    return {"status": "ok", "config_hash": outcome.config_hash,
            "result": str(outcome.result_path)}


def run_config(config: dict, output_dir: Path) -> dict:
    """What :func:`task` does for a sweep job, given the job's resolved config and output
    directory: the Dask launcher calls it without Hydra's per-job config copies and YAML
    (:func:`pipeline.sweep.execute`). Raises the job's error (the sweep records it)."""
    outcome = run_job(config, Path(output_dir) / JOB_FILE,
                      {"worker": worker_name(), "pid": os.getpid()})
    return {"status": "ok", "config_hash": outcome.config_hash,
            "result": str(outcome.result_path)}


task.run_config = run_config


def _launch(overrides: Sequence[str], multirun: bool):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None,
                               job_name="pipeline"):
        app = GlobalHydra.instance().hydra
        launch = app.multirun if multirun else app.run
        return launch(config_name="config", task_function=task, overrides=list(overrides))


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


# ----------------------------------------------------------------------------- text

def _fmt(value, spec: str = ".6g") -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "nan" if isinstance(value, float) and math.isnan(value) else format(value, spec)
    return str(value)


def _value(s: dict, reasons: dict, key: str, spec: str = ".6g") -> str:
    value = s.get(key, math.nan)
    if isinstance(value, float) and math.isnan(value) and key in reasons:
        return f"n/a ({reasons[key]})"
    return _fmt(value, spec)


def fit_text(ds) -> str:
    """One screen for a fit: basis size, gap, objective, certificate, test metrics, seconds."""
    c, s, why = ds.attrs["config"], ds.attrs["summary"], ds.attrs.get("not_applicable", {})
    kernel = ", ".join(f"{k}={v}" for k, v in c["kernel"].items() if k != "name" and v is not None)
    spec = get(ds.attrs["algorithm"])
    kappa = f", kappa={c['kappa']}" if spec.uses_kappa else ""
    lam = f", lam={c['lam']}" if spec.task == "regression" else ""
    lines = [
        f"{ds.attrs['algorithm']} on {c['dataset']['name']} (n_train={ds.attrs['n_train']}, "
        f"n_test={ds.attrs['n_test']}, d={ds.attrs['d']}), kernel {c['kernel']['name']}"
        f"({kernel}){lam}{kappa}, seed={c['seed']}",
        f"  basis size       {s['n_basis']}"
        + (f" (dual {s['n_basis_dual']})" if "n_basis_dual" in s else ""),
        f"  gap              {_value(s, why, 'gap', '.4g')}  (stopped: {s['stop_reason']})",
        f"  objective {'L   ' if spec.task == 'regression' else '−Ψ  '}   "
        f"{_value(s, why, 'objective')}",
    ]
    if "hyper_kernel" in s:  # hyper=ml: the fit used the learned kernel and λ
        lines[1:1] = [f"  learned (ML)     kernel {s['hyper_kernel']}, lam={_fmt(s['hyper_lam'])} "
                      f"(log marg. lik. {_fmt(s['hyper_log_marginal_likelihood'])} on "
                      f"{s['hyper_n_subset']} points, {_fmt(s['hyper_seconds'], '.1f')} s)"]
    if "gap_certified" in s:
        lines.append(f"  certified gap    {_fmt(s['gap_certified'], '.4g')}  (Theorem 1: relative "
                     "suboptimality ≤ this)")
    if "log_marginal_likelihood" in s:
        lines.append(f"  log marg. lik.   {_fmt(s['log_marginal_likelihood'])}")
    if spec.task == "classification":
        lines += [f"  test error rate  {_value(s, why, 'test_error_rate', '.4g')}",
                  f"  test log loss    {_value(s, why, 'test_log_loss')}",
                  f"  test Brier       {_value(s, why, 'test_brier')}"]
    else:
        lines += [f"  test RMSE        {_value(s, why, 'test_rmse')}",
                  f"  test NLPD        {_value(s, why, 'test_nlpd')}"]
    lines.append(f"  seconds          {_fmt(s['seconds'], '.3f')}")
    return "\n".join(lines)


def curve_text(ds) -> str:
    """One screen for a learning curve: E^g(n) per n, the plateau and detaching point."""
    c, s = ds.attrs["config"], ds.attrs["summary"]
    m = f" m={s['m']}" if "m" in s else ""
    baseline = "xbar_error_minus_baseline" in ds
    lines = [f"learning curve of {ds.attrs['algorithm']}{m} (Lemma 4, "
             f"{c['learning_curve'].get('density', 'uniform')} density from "
             f"{c['dataset']['name']}), kernel {c['kernel']['name']}, lam={c['lam']}, "
             f"seed={c['seed']}, {s['draws']} draws per n",
             "  n        E^g(n)     ± se" + ("       E − E_baseline" if baseline else "")]
    for i, n in enumerate(ds["n_train"].values):
        row = (f"  {int(n):<8d} {ds['xbar_error'].values[i]:<10.5g} "
               f"{ds['xbar_error_se'].values[i]:<10.2g}")
        if baseline:
            row += f" {ds['xbar_error_minus_baseline'].values[i]:.4g}"
        lines.append(row)
    lines.append(f"  plateau σ² + Σ_(i>m) λ_i = {s['plateau']:.6g}")
    if "detaching_point" in s:
        lines.append(f"  detaching point n̄ = σ²/λ_m = {s['detaching_point']:.4g}")
    lines.append(f"  seconds          {s['seconds']:.3f}")
    return "\n".join(lines)


TEXT: dict[str, Callable] = {"fit": fit_text, "learning_curve": curve_text}


def summary_text(result_path: str | Path) -> str:
    """What a user sees after one job: the summary of its result file and where it is."""
    ds = load_job_result(result_path)
    return f"{TEXT[ds.attrs['kind']](ds)}\nresult: {result_path}"
