"""What a sweep did, summed up from the JobReturns it gave back (one per sweep point).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from hydra.core.utils import JobReturn

from pipeline.job.hyper import at_bound_settings, bound_warning
from pipeline.job.summary import TRIVIAL_RATIO


@dataclass
class SweepOutcome:
    """What a sweep did, from the JobReturns it gave back (one per sweep point)."""

    results_path: Path
    n_points: int
    n_jobs: int
    n_cached: int
    n_run: int
    failed: list[tuple[str, str]] = field(default_factory=list)  # (overrides, error)
    too_large: list[tuple[str, str]] = field(default_factory=list)  # refused, not failed

    @classmethod
    def from_returns(cls, returns: Sequence[JobReturn]) -> SweepOutcome:
        records = [ret.return_value for ret in returns]
        jobs = {r["config_hash"]: r["status"] for r in records}

        def points(keep) -> list[tuple[str, str]]:
            return [(" ".join(o.removeprefix("++") for o in ret.overrides), r["error"])
                    for ret, r in zip(returns, records, strict=True) if keep(r["status"])]

        return cls(Path(records[0]["results"]), len(records), len(jobs),
                   sum(s == "cached" for s in jobs.values()),
                   sum(s not in ("cached", "too_large") for s in jobs.values()),
                   points(lambda s: s not in ("ok", "cached", "too_large")),
                   points(lambda s: s == "too_large"))

    def text(self) -> str:
        lines = [f"{self.n_points} sweep points, {self.n_jobs} distinct jobs: "
                 f"{self.n_cached} already finished, {self.n_run} run, "
                 f"{len(self.failed)} failed"
                 + (f", {len(self.too_large)} too large" if self.too_large else "")]
        lines += [f"failed: {overrides}: {error}" for overrides, error in self.failed]
        lines += [f"too large (not run): {overrides}: {error}"
                  for overrides, error in self.too_large]
        lines.append(f"results: {self.results_path}")
        return "\n".join(lines)



def sweep_warnings(results_path: str | Path) -> list[str]:
    """The ``warning: …`` lines of a finished sweep: one per distinct learning whose optimum
    has parameters on a bound (``hyper_at_bound``), naming its setting."""
    from pipeline.results.consolidate import load  # xarray: after the sweep, not before it

    try:
        ds = load(results_path)
        settings = at_bound_settings(ds)
    except (OSError, ValueError, KeyError):
        return []  # no consolidated results to read: the sweep's own lines say why
    lines = [line.replace("hyper=ml learned", f"hyper=ml at {where} learned", 1)
             for where, value, _ in settings if (line := bound_warning(value))]
    return lines + _trivial_lines(ds) + _variance_lines(ds)


def _trivial_lines(ds) -> list[str]:
    """One warning line counting the finished jobs whose test RMSE is not clearly below the
    training-mean predictor's (:func:`pipeline.job.summary.trivial_warning`), if any."""
    names = ("final_test_rmse", "final_baseline_test_rmse")
    if not all(name in ds for name in names):
        return []
    ok = (ds["status"] == "ok").values
    rmse, base = (ds[name].values[ok] for name in names)
    known = np.isfinite(rmse) & np.isfinite(base)
    trivial = int((rmse[known] >= TRIVIAL_RATIO * base[known]).sum())
    if not trivial:
        return []
    return [f"warning: {trivial} of {int(known.sum())} finished sweep points have a test RMSE "
            f"not below the training-mean predictor's (at least {TRIVIAL_RATIO:g} of it): "
            "trivial fits, which publish flags and never ranks"]


def _variance_lines(ds) -> list[str]:
    """One warning line counting the finished jobs whose predictive variance of y fell below
    σ² on some test rows (:func:`pipeline.job.summary.variance_warning`), if any."""
    name = "final_test_var_below_noise"
    if name not in ds:
        return []
    share = ds[name].values[(ds["status"] == "ok").values]
    known = np.isfinite(share)
    below = int((share[known] > 0).sum())
    if not below:
        return []
    return [f"warning: {below} of {int(known.sum())} finished sweep points with a predictive "
            "variance have it below σ² on some test rows (round-off in the method's variance): "
            "their test NLPD is not the method's (final_test_var_below_noise)"]
