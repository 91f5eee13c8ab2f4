"""What a user sees after one job: one screen made from its result file on disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from algorithms.registry import get
from pipeline.job.hyper import bound_warning
from pipeline.results.job_file import load_job_attrs, load_job_result


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
    # protocol=own: a peer trained from hyper=ml's kernel (its given start) by itself
    own = c.get("protocol") == "own" and "learned_kernel" in s
    if own:
        lines[1:1] = [f"  trained (own)    kernel {s['learned_kernel']}, "
                      f"lam={_fmt(s.get('learned_lam', math.nan))}"
                      + (f" ({s['own_stop_reason']} after {s['own_iterations']} iterations, "
                         f"best of {s['own_starts']} starts: {s['own_best_start']})"
                         if "own_iterations" in s else "")]
    if "hyper_kernel" in s:  # hyper=ml: the fit used the learned kernel and λ (own: its start)
        what = "start (own)      kernel" if own else "learned (ML)     kernel"
        lines[1:1] = [f"  {what} {s['hyper_kernel']}, lam={_fmt(s['hyper_lam'])} "
                      f"(log marg. lik. {_fmt(s['hyper_log_marginal_likelihood'])} on "
                      f"{s['hyper_n_subset']} points, {_fmt(s['hyper_seconds'], '.1f')} s"
                      + (f", CPU {_fmt(s['hyper_cpu_seconds'], '.1f')} s"
                         if "hyper_cpu_seconds" in s else "")
                      + (f", prior mean {_fmt(s['hyper_y_offset'], '.4g')}"
                         if s.get("hyper_y_offset") else "")
                      + (f", on a bound: {s['hyper_at_bound']}" if s.get("hyper_at_bound")
                         else "") + ")"]
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
        if "baseline_test_rmse" in s:
            lines.append(f"  training mean    RMSE {_fmt(s['baseline_test_rmse'])}, NLPD "
                         f"{_fmt(s.get('baseline_test_nlpd', math.nan))}  (the trivial "
                         "predictor)")
    lines += _timing_lines(s)
    if s.get("clipped_options"):  # a size option above n_train (algorithms.options.clip_to_n)
        lines.append(f"  note             {s['clipped_options']}")
    return "\n".join(lines)


def _timing_lines(s: dict) -> list[str]:
    """The fit's wall and CPU seconds, its untimed warm-up and the machine's load."""
    seconds = f"  seconds          {_fmt(s['seconds'], '.3f')}"
    if "cpu_seconds" in s:
        seconds += f"  (CPU {_fmt(s['cpu_seconds'], '.3f')} s"
        if s.get("warmup_seconds"):
            seconds += f"; untimed warm-up {_fmt(s['warmup_seconds'], '.3f')} s before"
        seconds += ")"
    lines = [seconds]
    if "load_start" in s:
        lines.append(f"  load average     {_fmt(s['load_start'], '.2f')} → "
                     f"{_fmt(s['load_end'], '.2f')} on {s['cores']} cores")
    if s.get("warmup_error"):
        lines.append(f"  note             the warm-up fit failed: {s['warmup_error']}")
    return lines


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


# an RMSE at or above this fraction of the training-mean predictor's is not clearly below it:
# the job is flagged trivial (here, and by publish: pipeline.publish.stats.trivial)
TRIVIAL_RATIO = 0.99


def trivial_warning(summary: dict) -> str | None:
    """The warning line of a fit whose test RMSE is not clearly below the training-mean
    predictor's (:data:`TRIVIAL_RATIO`), or None."""
    rmse, base = summary.get("test_rmse"), summary.get("baseline_test_rmse")
    if not isinstance(rmse, (int, float)) or not isinstance(base, (int, float)) \
            or not rmse >= TRIVIAL_RATIO * base:
        return None
    return (f"warning: test RMSE {rmse:.4g} is not below the training-mean predictor's "
            f"{base:.4g} (at least {TRIVIAL_RATIO:g} of it): a trivial fit, never ranked by "
            "publish; check the kernel scale, lam and the targets' scale "
            "(dataset.standardize_y, hyper.center_y)")


def variance_warning(summary: dict) -> str | None:
    """The warning line of a fit whose predictive variance of y fell below σ² on some test
    rows (``test_var_below_noise``: round-off in the method's variance), or None."""
    share = summary.get("test_var_below_noise")
    if not isinstance(share, (int, float)) or not share > 0:
        return None
    return (f"warning: on {100 * share:.3g} % of the test rows the predictive variance of y is "
            "below σ² (impossible for a GP: the variance lost its digits to round-off), so "
            "its test NLPD is not the method's; a larger lam, or the method's stable form, "
            "gives one")


def job_warnings(result_path: str | Path) -> list[str]:
    """The ``warning: …`` lines of one job's result: a learning that ended on a bound, a fit
    no better than the training mean, a predictive variance below the noise."""
    summary = load_job_attrs(result_path).get("summary", {})
    lines = [bound_warning(summary.get("hyper_at_bound", "")), trivial_warning(summary),
             variance_warning(summary)]
    return [line for line in lines if line]


def outcome_text(outcome) -> str:
    """The one screen of :func:`summary_text` for a job just run (a
    :class:`pipeline.job.run.JobOutcome`), from the result in memory: a fit's screen needs
    none of its arrays (a learning curve's is read back from its file)."""
    result = outcome.result
    if result.kind != "fit":
        return summary_text(outcome.result_path)
    ds = SimpleNamespace(attrs={**outcome.attrs, "algorithm": result.algorithm,
                                "config": outcome.config, "summary": dict(result.summary),
                                "not_applicable": dict(result.not_applicable)})
    return f"{fit_text(ds)}\nresult: {outcome.result_path}"


def summary_text(result_path: str | Path) -> str:
    """What a user sees after one job: the summary of its result file and where it is (a
    fit's from its attrs alone, read without xarray)."""
    attrs = load_job_attrs(result_path)
    ds = SimpleNamespace(attrs=attrs) if attrs.get("kind") == "fit" else load_job_result(
        result_path)
    return f"{TEXT[ds.attrs['kind']](ds)}\nresult: {result_path}"

