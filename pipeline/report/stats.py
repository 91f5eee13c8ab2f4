"""The statistics of a published comparison: intervals over data splits, paired tests against
the best and the reference, ranks across data sets, and the flags that keep a row out of them.

- :func:`t_interval`: a mean over splits with its Student-t confidence interval;
- :func:`paired_difference`, :func:`paired_pvalue`, :func:`tied_with_best`: paired over the
  splits both settings ran (a split is a block: every method sees the same train/test rows);
- :func:`average_ranks`, :func:`friedman`, :func:`nemenyi_q`, :func:`critical_difference`,
  :func:`cliques`: the comparison of k methods over N data sets of Demšar (2006), *Statistical
  Comparisons of Classifiers over Multiple Data Sets*, JMLR 7:1–30, §3.2.2: the Friedman test
  on the methods' ranks per data set, then the Nemenyi post-hoc test, whose critical
  difference is drawn as a CD diagram (:mod:`pipeline.report.critical_difference`);
- :func:`trivial`, :func:`nlpd_above_mean` and :func:`contended`: the rules that flag a job
  whose predictor is no better than the training mean (never ranked), whose predictive
  distribution is worse than the mean predictor's Gaussian (left out of NLPD comparisons), or
  whose seconds were measured on a busy machine.

Why a paired t-test and not Wilcoxon's signed-rank test for the ties: with 5 splits the
smallest two-sided p-value Wilcoxon's exact test can reach is 2/2⁵ = 0.0625, so at 5 % it
could never call a difference, whatever the data. The t-test on the per-split differences
assumes them roughly normal; with 5–10 splits it is the usual choice (Demšar §3.1.2 discusses
both).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.stats

from pipeline.job.summary import TRIVIAL_RATIO

LEVEL = 0.95  # of every confidence interval
ALPHA = 0.05  # of every test


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width, n) of the finite ``values``: the mean ± t_{n−1, (1+level)/2} · s/√n,
    s the sample sd (ddof 1). The half-width is NaN for n < 2 (no spread to estimate) and the
    mean NaN for n = 0."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return np.nan, np.nan, 0
    if n == 1:
        return float(x[0]), np.nan, 1
    half = scipy.stats.t.ppf((1 + level) / 2, n - 1) * x.std(ddof=1) / np.sqrt(n)
    return float(x.mean()), float(half), n


def _pairs(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """a − b over the positions where both are finite (the splits both ran)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    return a[both] - b[both]


def paired_difference(a: Sequence[float], b: Sequence[float],
                      level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width, n) of the per-split differences a − b (:func:`t_interval`), over the
    splits where both are finite; ``a`` and ``b`` are aligned by split."""
    return t_interval(_pairs(a, b), level)


def paired_pvalue(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test of mean(a − b) = 0 over the splits both ran:
    t = d̄ / (s_d/√n) with n − 1 degrees of freedom (scipy.stats.ttest_rel). Differences that
    are all equal have no spread: p = 1 when they are 0, else 0 (every split agrees on the
    sign and size). NaN with fewer than 2 common splits."""
    d = _pairs(a, b)
    if len(d) < 2:
        return np.nan
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    with warnings.catch_warnings():  # differences alike to ~1e-16: scipy warns, p is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(scipy.stats.ttest_1samp(d, 0.0).pvalue)


def tied_with_best(per_split: Mapping[str, Sequence[float]],
                   alpha: float = ALPHA) -> tuple[str, list[str]]:
    """The setting with the lowest mean (lower is better) among ``per_split`` (name → metric
    per split, aligned by split), and the others not significantly worse than it: the paired
    t-test (:func:`paired_pvalue`) of their difference from it does not reject at ``alpha``,
    or they share fewer than 2 splits with it (nothing to test: tied). In the order given."""
    means = {name: float(np.nanmean(np.asarray(v, dtype=np.float64)))
             for name, v in per_split.items()}
    best = min(means, key=lambda name: means[name])
    tied = [name for name, values in per_split.items() if name != best
            and not paired_pvalue(values, per_split[best]) < alpha]
    return best, tied


def average_ranks(scores: np.ndarray) -> np.ndarray:
    """Each column's (method's) mean rank over the rows (data sets) of ``scores`` (N × k,
    lower is better: rank 1), ties sharing their average rank (Demšar 2006, §3.2.2)."""
    ranks = scipy.stats.rankdata(np.asarray(scores, dtype=np.float64), axis=1)
    return ranks.mean(axis=0)


def friedman_statistic(ranks: Sequence[float], n: int) -> float:
    """Friedman's χ²_F = 12N/(k(k+1)) · (Σ_j R_j² − k(k+1)²/4) from the k methods' average
    ranks R_j over N data sets (Demšar 2006, eq. in §3.2.2; no correction for ties)."""
    r = np.asarray(ranks, dtype=np.float64)
    k = len(r)
    return float(12 * n / (k * (k + 1)) * (np.sum(r**2) - k * (k + 1) ** 2 / 4))


def friedman(scores: np.ndarray) -> tuple[float, float]:
    """(χ², p) of the Friedman test that the k methods (columns of ``scores``, N × k, N data
    sets) rank alike: scipy.stats.friedmanchisquare, which corrects for ties. Needs k ≥ 3."""
    result = scipy.stats.friedmanchisquare(*np.asarray(scores, dtype=np.float64).T)
    return float(result.statistic), float(result.pvalue)


def nemenyi_q(k: int, alpha: float = ALPHA) -> float:
    """The Nemenyi test's q_α for k methods: the studentized range's 1 − α quantile with
    infinite degrees of freedom, over √2 (Demšar 2006, Table 5a: 2.569 for k = 4)."""
    return float(scipy.stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2))


def critical_difference(k: int, n: int, alpha: float = ALPHA) -> float:
    """The Nemenyi critical difference CD = q_α · √(k(k+1)/(6N)) of k methods' average ranks
    over N data sets (Demšar 2006, §3.2.2): two methods whose average ranks differ by at least
    CD differ significantly."""
    return nemenyi_q(k, alpha) * float(np.sqrt(k * (k + 1) / (6 * n)))


def cliques(ranks: Sequence[float], cd: float) -> list[tuple[int, ...]]:
    """The maximal groups (indices into ``ranks``, by increasing rank) of two or more methods
    whose average ranks all lie within less than ``cd`` of each other: no pair in a group
    differs significantly. These are the bars of a CD diagram."""
    order = np.argsort(np.asarray(ranks, dtype=np.float64), kind="stable")
    r = np.asarray(ranks, dtype=np.float64)[order]
    groups: list[tuple[int, ...]] = []
    reach = -1
    for i in range(len(r)):
        j = i
        while j + 1 < len(r) and r[j + 1] - r[i] < cd:
            j += 1
        if j > i and j > reach:  # not inside the previous group
            groups.append(tuple(int(order[m]) for m in range(i, j + 1)))
            reach = j
    return groups


def significant_pairs(ranks: Sequence[float], cd: float) -> list[tuple[int, int]]:
    """Pairs (i, j) of methods whose average ranks differ by at least ``cd``."""
    r = np.asarray(ranks, dtype=np.float64)
    return [(i, j) for i, j in itertools.combinations(range(len(r)), 2)
            if abs(r[i] - r[j]) >= cd]




def trivial(rmse: np.ndarray, baseline_rmse: np.ndarray,
            ratio: float = TRIVIAL_RATIO) -> np.ndarray:
    """Whether each job's predictor is trivial: its test RMSE is at least ``ratio`` times the
    training-mean predictor's on the same test rows (a predictor no better than the constant
    one; never ranked). A missing RMSE or baseline does not flag."""
    rmse, base = (np.asarray(v, dtype=np.float64) for v in (rmse, baseline_rmse))
    with np.errstate(invalid="ignore"):
        return rmse >= ratio * base


def nlpd_above_mean(nlpd: np.ndarray, baseline_nlpd: np.ndarray) -> np.ndarray:
    """Whether each job's test NLPD exceeds that of the training-mean predictor's Gaussian
    N(ȳ_train, var(y_train)): its predictive distribution is worse than the constant one's, so
    it is left out of every NLPD comparison (it may still predict well: its RMSE is judged by
    :func:`trivial`). A missing NLPD (a method that gives none) or baseline does not flag."""
    nlpd, base = (np.asarray(v, dtype=np.float64) for v in (nlpd, baseline_nlpd))
    with np.errstate(invalid="ignore"):
        return nlpd > base


BUSY_CPU = 0.8  # a fit that got less than this share of one core waited for a core
MIN_WALL = 1.0  # seconds: shorter fits give no reliable CPU/wall ratio
# cores that others may keep busy while a job runs before its seconds are called contended: the
# sweep's own client, scheduler and nanny keep 0.07–0.10 busy (pipeline.cluster.busy)
OTHER_CORES = 0.25


def contended(wall: np.ndarray, cpu: np.ndarray, load_start: np.ndarray,
              load_end: np.ndarray, cores: np.ndarray, others: np.ndarray | None = None
              ) -> np.ndarray:
    """Whether each job's seconds were measured on a busy machine, as far as its record tells
    (NaN where it records neither CPU seconds nor load):

    - its fit's CPU seconds over wall seconds are below :data:`BUSY_CPU` (and the fit took at
      least :data:`MIN_WALL` s): a CPU-bound fit keeps at least one thread running, so it
      used less than 0.8 of one core only if it waited for one. A ratio between 1 and the
      job's threads is no evidence: a fit with 2 BLAS threads is partly single-threaded;
    - or, where the job recorded them (``others``: :mod:`pipeline.cluster.busy`), other
      processes and the hypervisor kept more than :data:`OTHER_CORES` cores busy on average
      while it ran (and it took at least :data:`MIN_WALL` s: the accounting's grain is 10 ms);
    - or, for a job recorded without them (runs before 2026-12-01), the machine's 1-minute load
      average at its start or end exceeded its cores. That rule is coarse: the load counts the
      job's own runnable threads (more than its cores while BLAS threads spin beside its
      kernel tiles) and the minute before the job.

    Returns a float array: 1.0 (contended), 0.0 (not), NaN (not recorded)."""
    wall, cpu, start, end, cores = (np.asarray(v, dtype=np.float64)
                                    for v in (wall, cpu, load_start, load_end, cores))
    others = np.full_like(wall, np.nan) if others is None else np.asarray(others, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        starved = (wall >= MIN_WALL) & (cpu / wall < BUSY_CPU)
        busy = np.where(np.isfinite(others), (wall >= MIN_WALL) & (others > OTHER_CORES),
                        (start > cores) | (end > cores))
    known = np.isfinite(cpu) & np.isfinite(wall) | np.isfinite(others) | (
        np.isfinite(cores) & (np.isfinite(start) | np.isfinite(end)))
    return np.where(known, (starved | busy).astype(np.float64), np.nan)
