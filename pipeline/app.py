"""The Hydra application: one job = fit one algorithm on one dataset, print, write the result.

    python -m pipeline algorithm=sgma dataset=abalone lam=0.1 kappa=59 seed=0
"""

from __future__ import annotations

import inspect
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from omegaconf import DictConfig, OmegaConf

from algorithms import REGISTRY, USES_KAPPA, Fit, InputError, Kernel
from algorithms.base import check_kappa, check_lam
from algorithms.certificate import certify
from algorithms.learning_curves import CurveResult
from hydra_plugins.sgp_dask_launcher.dask_launcher import DaskLauncher
from pipeline.blocks import open_blocks
from pipeline.curves import run_curve
from pipeline.datasets import ingest
from pipeline.results import write_job_result

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
# Hydra finds launchers by scanning the hydra_plugins namespace package, which an editable
# install's import hook hides from it; registering explicitly works for every install mode.
Plugins.instance().register(DaskLauncher)


@dataclass(frozen=True)
class JobOutcome:
    fit: Fit | CurveResult
    config: dict
    result_path: Path
    dataset_shape: tuple[int, int, int]  # n_train, n_test, d


def job_config(cfg: DictConfig) -> dict:
    """The resolved job config (no hydra node) as a plain dict."""
    job_keys = [key for key in cfg.keys() if key != "hydra"]
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, job_keys), resolve=True)


def algorithm_options(name: str) -> set[str]:
    """The options ``algorithm.<option>`` that algorithm ``name`` takes."""
    return set(inspect.signature(REGISTRY[name]).parameters) - {"blocks", "y", "lam", "rng",
                                                                 "test", "kappa"}


def run_job(config: dict, result_path: str | Path, attrs: dict | None = None) -> JobOutcome:
    """Validate a resolved job config, ingest its dataset, fit, and write ``result_path``.

    ``attrs`` are extra attributes for the result file (e.g. the worker that ran the job).
    """
    start = time.perf_counter()
    name = config["algorithm"]["name"]
    if name not in REGISTRY:
        raise InputError(f"unknown algorithm '{name}'; choose one of: {', '.join(REGISTRY)}")
    lam = check_lam(config["lam"])
    check_kappa(config["kappa"], 1)
    seed = config["seed"]
    if not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed={seed!r} must be an integer ≥ 0; pass e.g. seed=0")
    kernel_cfg = dict(config["kernel"])
    kernel = Kernel(kernel_cfg.pop("name"), kernel_cfg)

    store = ingest(config["dataset"], config["store_root"])  # verifies the store's checksums
    blocks = open_blocks(store, kernel, verify=False)
    y_train, X_test, y_test = (np.asarray(blocks.dataset[key].values, dtype=np.float64)
                               for key in ("y_train", "X_test", "y_test"))
    options = {k: v for k, v in config["algorithm"].items() if k != "name"}
    accepted = algorithm_options(name)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise InputError(f"algorithm {name} has no option {unknown[0]!r}; its options: "
                         f"{', '.join(sorted(accepted))}")
    if config.get("learning_curve"):  # Lemma 4's E^g(n) instead of a fit (pipeline.curves)
        curve = run_curve(config, kernel, blocks)
        attrs = {**(attrs or {}), "job_seconds": time.perf_counter() - start}
        path = write_job_result(curve, config, result_path, attrs)
        return JobOutcome(curve, config, path, (blocks.n, len(y_test), blocks.d))
    if name in USES_KAPPA:
        options["kappa"] = config["kappa"]
    test = (X_test, y_test) if len(y_test) else None
    fit = REGISTRY[name](blocks, y_train, lam=lam, rng=np.random.default_rng(seed), test=test,
                         **options)
    cert_cfg = config.get("certificate") or {}
    if cert_cfg.get("enabled", False):
        certificate = certify(blocks, y_train, lam, fit.basis, fit.coef,
                              rng=np.random.default_rng([seed, 1]),
                              kappa=cert_cfg.get("kappa", 59), tol=cert_cfg.get("tol", 1e-3),
                              max_dual=cert_cfg.get("max_dual", 500),
                              dual_objective=fit.summary.get("dual_objective"))
        if not math.isfinite(fit.summary.get("objective", math.nan)):
            fit.summary["objective"] = certificate["objective"]  # L(α) of methods without one
        fit.summary.update({"gap_certified": certificate["gap_certified"],
                            "certified_lower_bound": certificate["objective_lower_bound"],
                            "certificate_dual_steps": certificate["n_dual"]})
    attrs = {**(attrs or {}), "job_seconds": time.perf_counter() - start}
    path = write_job_result(fit, config, result_path, attrs)
    return JobOutcome(fit, config, path, (blocks.n, len(y_test), blocks.d))


def _fmt(value, spec: str = ".6g") -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "nan" if isinstance(value, float) and math.isnan(value) else format(value, spec)
    return str(value)


def curve_text(outcome: JobOutcome) -> str:
    """One screen for a learning curve: E^g(n) per n, the plateau and detaching point."""
    c, curve = outcome.config, outcome.fit
    s, t = curve.summary, curve.trace
    m = f" m={s['m']}" if "m" in s else ""
    lines = [f"learning curve of {c['algorithm']['name']}{m} (Lemma 4, "
             f"{c['learning_curve'].get('density', 'uniform')} density from "
             f"{c['dataset']['name']}), kernel {c['kernel']['name']}, lam={c['lam']}, "
             f"seed={c['seed']}, {s['draws']} draws per n",
             "  n        E^g(n)     ± se" + ("       E − E_baseline" if "baseline" in s else "")]
    for i, n in enumerate(t["n_train"]):
        row = f"  {int(n):<8d} {t['xbar_error'][i]:<10.5g} {t['xbar_error_se'][i]:<10.2g}"
        if "baseline" in s:
            row += f" {t['xbar_error_minus_baseline'][i]:.4g}"
        lines.append(row)
    lines.append(f"  plateau σ² + Σ_(i>m) λ_i = {s['plateau']:.6g}")
    if "detaching_point" in s:
        lines.append(f"  detaching point n̄ = σ²/λ_m = {s['detaching_point']:.4g}")
    lines += [f"  seconds          {s['seconds']:.3f}", f"result: {outcome.result_path}"]
    return "\n".join(lines)


def summary_text(outcome: JobOutcome) -> str:
    """One screen: what ran, basis size, gap, test RMSE, seconds, and where the result is."""
    if isinstance(outcome.fit, CurveResult):
        return curve_text(outcome)
    c, s = outcome.config, outcome.fit.summary
    n, n_test, d = outcome.dataset_shape
    kernel = ", ".join(f"{k}={v}" for k, v in c["kernel"].items() if k != "name")
    kappa = f", kappa={c['kappa']}" if c["algorithm"]["name"] in USES_KAPPA else ""
    lines = [
        f"{c['algorithm']['name']} on {c['dataset']['name']} (n_train={n}, n_test={n_test}, "
        f"d={d}), kernel {c['kernel']['name']}({kernel}), lam={c['lam']}{kappa}, "
        f"seed={c['seed']}",
        f"  basis size       {s['n_basis']}"
        + (f" (dual {s['n_basis_dual']})" if "n_basis_dual" in s else ""),
        f"  gap              {_fmt(s['gap'], '.4g')}  (stopped: {s['stop_reason']})",
        f"  objective L      {_fmt(s['objective'])}",
    ]
    if "gap_certified" in s:
        lines.append(f"  certified gap    {_fmt(s['gap_certified'], '.4g')}  (Theorem 1: relative "
                     "suboptimality ≤ this)")
    if "log_marginal_likelihood" in s:
        lines.append(f"  log marg. lik.   {_fmt(s['log_marginal_likelihood'])}")
    lines += [
        f"  test RMSE        {_fmt(s.get('test_rmse', float('nan')))}",
        f"  test NLPD        {_fmt(s.get('test_nlpd', float('nan')))}",
        f"  seconds          {_fmt(s['seconds'], '.3f')}",
        f"result: {outcome.result_path}",
    ]
    return "\n".join(lines)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        result_path = Path(HydraConfig.get().runtime.output_dir) / "result.nc"
        outcome = run_job(job_config(cfg), result_path)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(summary_text(outcome))
