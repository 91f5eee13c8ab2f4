"""The statistics of a published comparison: intervals over data splits, paired tests against
the best and the reference, ranks across data sets, and the flags that keep a row out of them.

- :func:`t_interval`: a mean over splits with its Student-t confidence interval;
  :func:`corrected_t_interval` the same with Nadeau & Bengio's (2003) correction for splits
  whose training sets overlap; :func:`relative_effect`: the mean relative difference from a
  reference, with either interval;
- :func:`paired_difference`, :func:`paired_pvalue`, :func:`tied_with_best`: paired over the
  splits both settings ran (a split is a block: every method sees the same train/test rows);
  :func:`corrected_paired_difference`, :func:`corrected_paired_pvalue`: the same, corrected;
- :func:`wilcoxon_pvalue`, :func:`smallest_wilcoxon_p`, :func:`holm`,
  :func:`tied_with_best_holm`: the signed-rank test over the splits, Holm's step-down
  adjustment, and the settings tied with the best by both;
- :func:`average_ranks`, :func:`friedman`, :func:`iman_davenport`, :func:`nemenyi_q`,
  :func:`critical_difference`, :func:`cliques`: the comparison of k methods over N data sets
  of Demšar (2006), *Statistical Comparisons of Classifiers over Multiple Data Sets*, JMLR
  7:1–30, §3.2.2: the Friedman test on the methods' ranks per data set (and Iman &
  Davenport's F form of it), then the Nemenyi post-hoc test, whose critical difference is drawn
  as a CD diagram (:mod:`pipeline.publish.critical_difference`);
- :func:`trivial`, :func:`nlpd_above_mean` and :func:`contended`: the rules that flag a job
  whose predictor is no better than the training mean (never ranked), whose predictive
  distribution is worse than the mean predictor's Gaussian (left out of NLPD comparisons), or
  whose seconds were measured on a busy machine.

Which test for what. On one data set the J splits (10-fold cross-validation, whose test sets
are disjoint and whose training sets share 8/9 of their rows, or J random 90/10 splits) are
not independent samples: the training sets overlap, so the per-split results are positively
correlated and s²/J understates the variance of their mean. A plain t interval or paired
t-test over them is then too narrow, too ready to call a difference (Nadeau & Bengio 2003,
*Inference for the Generalization Error*, Machine Learning 52:239–281). Hence:

- an interval over splits that claims something about the method, not only about these
  splits, is :func:`corrected_t_interval`: Nadeau & Bengio's corrected resampled t, variance
  (1/J + n_test/n_train)·s². Its correction was derived for J random train/test splits; for
  k-fold cross-validation (n_test/n_train = 1/(k−1)) it is the usual heuristic (Bouckaert &
  Frank 2004, PAKDD). :func:`t_interval` describes the spread of the splits at hand only;
- whether a setting is worse than the best on one data set is the two-sided Wilcoxon
  signed-rank test of each other setting against the best, Holm-adjusted over those k − 1
  comparisons (:func:`tied_with_best_holm`): pairwise tests with Holm's correction are what
  Benavoli, Corani & Mangili (2016), *Should We Really Use Post-Hoc Tests Based on
  Mean-Ranks?*, JMLR 17(5):1–10, recommend over mean-rank post-hoc tests. It makes no
  normality assumption, but like the t-test it takes the splits as independent; the corrected
  paired t (:func:`corrected_paired_pvalue`) is the parametric test that does not. The
  signed-rank test needs enough splits to reject at all: its smallest two-sided p on n
  splits is 2/2ⁿ (:func:`smallest_wilcoxon_p`): 0.00195 on 10 splits, 0.0625 on 5 and 0.25 on
  3, so at 5 % a tie test on 3 or 5 splits can never reject: a "tie" on a 3-split pilot is
  not decidable, not a tie. :func:`tied_with_best` (an unadjusted paired t-test) is kept for
  the tables that still use it;
- across data sets (independent, so no correction) the methods are ranked per data set:
  Friedman's test, in Iman & Davenport's less conservative F form (:func:`iman_davenport`,
  Demšar §3.2.2), then the Nemenyi critical difference for the CD diagram (Demšar §3.2.2).
  Benavoli et al. (2016) show that a mean-rank post-hoc test's verdict on two methods depends
  on which other methods are in the comparison; their remedy, the Wilcoxon signed-rank test of
  each pair over the data sets (Demšar §3.1.3) with Holm's correction, is
  :func:`wilcoxon_pvalue` and :func:`holm` applied to the per-data-set scores.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import scipy.stats

from pipeline.job.summary import TRIVIAL_RATIO

LEVEL = 0.95  # of every confidence interval
ALPHA = 0.05  # of every test


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width, n) of the finite ``values``: the mean ± t_{n−1, (1+level)/2} · s/√n,
    s the sample sd (ddof 1). The half-width is NaN for n < 2 (no spread to estimate) and the
    mean NaN for n = 0."""
    return _interval(values, lambda t, x, n: t * x.std(ddof=1) / np.sqrt(n), level)


def _interval(values: Sequence[float], half: Callable[[float, np.ndarray, int], float],
              level: float) -> tuple[float, float, int]:
    """(mean, half-width, n) of the finite ``values``, the half-width ``half(t, x, n)`` of
    the Student quantile t_{n−1, (1+level)/2}, the finite values x and their number: NaN
    for n < 2, the mean NaN for n = 0 (the conventions of both intervals above and below)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return np.nan, np.nan, 0
    if n == 1:
        return float(x[0]), np.nan, 1
    return float(x.mean()), float(half(scipy.stats.t.ppf((1 + level) / 2, n - 1), x, n)), n


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


def _rho(test_fraction: float) -> float:
    """n_test/n_train of a split that tests on ``test_fraction`` of the rows: 1/9 for 90/10."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), not {test_fraction}")
    return test_fraction / (1 - test_fraction)


def corrected_t_interval(values: Sequence[float], test_fraction: float,
                         level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width, J) of the finite ``values``, one per split, with Nadeau & Bengio's
    corrected resampled t interval (Nadeau & Bengio 2003, Machine Learning 52:239–281, the
    "corrected resampled t" statistic, whose variance estimate is (1/J + n₂/n₁)·σ̂²):

        mean ± t_{J−1, (1+level)/2} · √((1/J + n_test/n_train) · s²),

    s² the sample variance (ddof 1) of the J values and n_test/n_train =
    ``test_fraction``/(1 − ``test_fraction``): 1/9 for 10-fold cross-validation or 90/10
    splits. The term n_test/n_train accounts for the correlation that overlapping training
    sets put between the splits; without it this is :func:`t_interval`, √(1 + J·n_test/n_train)
    times narrower. NaN conventions as :func:`t_interval`: the half-width is NaN for J < 2 and
    the mean NaN for J = 0. Raises ValueError unless 0 < ``test_fraction`` < 1."""
    rho = _rho(test_fraction)
    return _interval(values, lambda t, x, j: t * np.sqrt((1 / j + rho) * x.var(ddof=1)), level)


def corrected_paired_difference(a: Sequence[float], b: Sequence[float], test_fraction: float,
                                level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width, J) of the per-split differences a − b over the splits both ran, with
    the corrected resampled t interval (:func:`corrected_t_interval`; Nadeau & Bengio 2003)."""
    return corrected_t_interval(_pairs(a, b), test_fraction, level)


def corrected_paired_pvalue(a: Sequence[float], b: Sequence[float],
                            test_fraction: float) -> float:
    """Two-sided p-value of Nadeau & Bengio's (2003) corrected resampled t-test of
    mean(a − b) = 0 over the J splits both ran:

        t = d̄ / √((1/J + ρ) · s_d²),   ρ = n_test/n_train = test_fraction/(1 − test_fraction),

    with J − 1 degrees of freedom (p = 2·P(T_{J−1} > |t|)). As :func:`paired_pvalue`:
    differences that are all equal give p = 1 when they are 0, else 0; NaN with fewer than 2
    common splits. Raises ValueError unless 0 < ``test_fraction`` < 1."""
    rho = _rho(test_fraction)
    d = _pairs(a, b)
    j = len(d)
    if j < 2:
        return np.nan
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    t = d.mean() / np.sqrt((1 / j + rho) * d.var(ddof=1))
    return float(2 * scipy.stats.t.sf(abs(t), j - 1))


def relative_effect(a: Sequence[float], reference: Sequence[float],
                    test_fraction: float | None = None,
                    level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width, J) of the per-split relative difference a/reference − 1 over the
    splits both ran (and where it is finite: a zero reference is left out): +0.10 is 10 %
    above the reference. The interval is Nadeau & Bengio's corrected one
    (:func:`corrected_t_interval`) when ``test_fraction`` is given, else the plain
    :func:`t_interval`. The mean of per-split ratios, not the ratio of the means: each split
    is compared with the reference on the same rows."""
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a / ref - 1
    r = r[np.isfinite(r)]
    if test_fraction is None:
        return t_interval(r, level)
    return corrected_t_interval(r, test_fraction, level)


def smallest_wilcoxon_p(n: int) -> float:
    """The smallest two-sided p-value the exact Wilcoxon signed-rank test can give on ``n``
    non-zero differences: 2/2ⁿ (all n of one sign, one of the 2ⁿ equally likely sign
    patterns in each tail; capped at 1). 0.25 for n = 3, 0.0625 for n = 5, 0.00195 for
    n = 10. Where it is not below α the test cannot reject whatever the data: at α = 0.05 a
    comparison on 3 or 5 splits is not decidable (so a "tie" there is no evidence of one), and
    after Holm's adjustment of k − 1 comparisons the first can reject only if
    (k − 1)·2/2ⁿ < α."""
    if n < 0:
        raise ValueError(f"n must be non-negative, not {n}")
    return min(1.0, 2.0 / 2.0**n)


def wilcoxon_pvalue(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Wilcoxon signed-rank test of the per-split differences a − b
    over the splits both ran (Demšar 2006, §3.1.3; scipy.stats.wilcoxon, method "auto": exact
    on up to 50 differences without ties or zeros; with ties or zeros, exact by enumerating the
    2ⁿ sign patterns for n ≤ 13 (as scipy 1.17 does), else the normal approximation).

    Zero differences (splits on which both settings scored the same) use
    ``zero_method="zsplit"``: they are ranked with the others and half of each one's rank
    goes to R⁺, half to R⁻, as Demšar (2006, §3.1.3) recommends; they are evidence for the
    null hypothesis, which ``"wilcox"`` (dropping them) would discard, testing on fewer splits
    as if the agreement had not been seen (e.g. differences [0, −1, −2, 3, 4, 5]: p = 0.375
    with zsplit, 0.3125 when the zero is dropped). Demšar drops one zero when their number is
    odd; scipy splits them all, which differs by half a rank.

    Differences that are all 0 give p = 1; NaN with fewer than 2 common splits. The test
    takes the splits as independent (overlapping training sets make it somewhat liberal), and
    its smallest p is :func:`smallest_wilcoxon_p` of the number of non-zero differences: on 3
    splits it cannot reject at 5 %."""
    d = _pairs(a, b)
    if len(d) < 2:
        return np.nan
    if np.all(d == 0):
        return 1.0
    with warnings.catch_warnings():  # the normal approximation warns on small samples
        warnings.simplefilter("ignore", UserWarning)
        return float(scipy.stats.wilcoxon(d, zero_method="zsplit",
                                          alternative="two-sided").pvalue)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979, *A Simple Sequentially Rejective Multiple
    Test Procedure*, Scand. J. Statist. 6:65–70; Demšar 2006, §3.2.2): with the m finite
    p-values sorted, p₍₁₎ ≤ … ≤ p₍ₘ₎,

        p̃₍ᵢ₎ = min(1, max_{j ≤ i} (m − j + 1) · p₍ⱼ₎),

    in the order given. Rejecting where p̃ < α controls the family-wise error at α. The
    adjusted values are monotone in the raw ones and capped at 1; a NaN (a comparison that
    could not be made) stays NaN and is not counted in m."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = len(finite)
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def tied_with_best_holm(per_split: Mapping[str, Sequence[float]], alpha: float = ALPHA,
                        cost: Mapping[str, float] | None = None, rel_tol: float = 1e-6
                        ) -> tuple[str, list[str], dict[str, float]]:
    """The best setting among ``per_split`` (name → metric per split, aligned by split; lower
    is better), the others tied with it, and their Holm-adjusted p-values.

    The best has the lowest mean over the splits it ran. When ``cost`` (name → mean seconds)
    is given, a tie in the metric is broken by cost: among the settings whose mean lies within
    ``rel_tol`` (relative) of the lowest, the cheapest is the best (a setting without a finite
    cost counts as dearest; equal costs: the lower mean, then the first given).

    Each other setting is compared with the best by the two-sided Wilcoxon signed-rank test
    over the splits both ran (:func:`wilcoxon_pvalue`), and the k − 1 p-values are adjusted by
    Holm's step-down procedure (:func:`holm`), the pairwise tests with Holm's correction that
    Benavoli, Corani & Mangili (2016, JMLR 17(5):1–10) recommend. Tied: an adjusted p ≥
    ``alpha``, or fewer than 2 splits shared with the best (nothing to test; its p is NaN and
    not counted in the family). The test cannot reject unless (k − 1)·2/2ⁿ < ``alpha`` on n
    splits (:func:`smallest_wilcoxon_p`): on 3 splits every setting is "tied", which is then
    no evidence of a tie.

    Returns (best, tied names in the order given, adjusted p per other name). Raises
    ValueError when no setting has a finite mean."""
    with warnings.catch_warnings():  # a setting that ran no split: mean NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        means = {name: float(np.nanmean(np.asarray(v, dtype=np.float64)))
                 for name, v in per_split.items()}
    ranked = [name for name in per_split if np.isfinite(means[name])]
    if not ranked:
        raise ValueError("no setting has a finite mean")
    lowest = min(means[name] for name in ranked)
    best = min(ranked, key=lambda name: means[name])
    if cost is not None:
        near = [name for name in ranked if means[name] - lowest <= rel_tol * abs(lowest)]

        def dearness(name: str) -> tuple[float, float]:
            c = float(cost.get(name, np.nan))
            return (c if np.isfinite(c) else np.inf), means[name]

        best = min(near, key=dearness)
    others = [name for name in per_split if name != best]
    raw = [wilcoxon_pvalue(per_split[name], per_split[best]) for name in others]
    adjusted = dict(zip(others, (float(p) for p in holm(raw)), strict=True))
    tied = [name for name in others if not adjusted[name] < alpha]
    return best, tied, adjusted


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


def iman_davenport(chi2: float, n: int, k: int) -> tuple[float, float]:
    """(F_F, p) of Iman & Davenport's (1980) form of the Friedman test (Demšar 2006, §3.2.2):

        F_F = (N − 1)·χ²_F / (N(k − 1) − χ²_F),

    F-distributed with (k − 1, (k − 1)(N − 1)) degrees of freedom, p = its upper tail
    (scipy.stats.f.sf); less conservative than χ²_F itself. ``chi2`` is Friedman's χ²_F over
    ``n`` data sets and ``k`` methods (:func:`friedman_statistic`, :func:`friedman`). Its
    largest value, χ²_F = N(k − 1), is reached when every data set ranks the methods alike:
    then F_F = inf and p = 0. NaN for a NaN χ², N < 2 or k < 2."""
    if not np.isfinite(chi2) or n < 2 or k < 2:
        return np.nan, np.nan
    room = n * (k - 1) - chi2
    if room <= 1e-12 * n * (k - 1):
        return np.inf, 0.0
    f = (n - 1) * chi2 / room
    return float(f), float(scipy.stats.f.sf(f, k - 1, (k - 1) * (n - 1)))


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
