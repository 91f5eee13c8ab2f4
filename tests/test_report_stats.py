"""The statistics of a published comparison (pipeline.publish.stats) on small tables with known
answers, and the critical-difference diagram drawn from them."""

import numpy as np
import pytest
import scipy.stats

from pipeline.publish import stats


def test_the_t_interval_is_scipys():
    x = np.array([0.31, 0.35, 0.29, 0.40, 0.33])
    mean, half, n = stats.t_interval(x)
    low, high = scipy.stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    assert n == 5 and mean == pytest.approx(x.mean())
    assert (mean - half, mean + half) == pytest.approx((low, high), rel=1e-12)
    # NaN (a split that did not run) is left out; one value has no interval
    assert stats.t_interval([0.3, np.nan, 0.5])[2] == 2
    m, h, n = stats.t_interval([0.3])
    assert (m, n) == (0.3, 1) and np.isnan(h)


def test_the_paired_difference_uses_the_splits_both_ran():
    a = np.array([1.0, 2.0, 3.0, np.nan])
    b = np.array([0.5, 1.0, 2.0, 4.0])
    mean, half, n = stats.paired_difference(a, b)
    d = np.array([0.5, 1.0, 1.0])
    assert n == 3 and mean == pytest.approx(d.mean())
    assert half == pytest.approx(scipy.stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3))


def test_ties_are_called_by_a_paired_t_test():
    # five splits whose difficulty varies far more than the settings differ
    base = np.array([0.30, 0.50, 0.40, 0.60, 0.35])
    per_split = {
        "best": base,
        # worse on every split by 0.01 ± a little: a paired test sees it (p < 0.05), although
        # the unpaired sd over splits (0.12) is ten times the difference
        "worse": base + np.array([0.010, 0.012, 0.009, 0.011, 0.010]),
        # worse on average by 0.004, but better on two splits: not significant
        "noisy": base + np.array([0.02, -0.01, 0.015, -0.012, 0.007]),
        "same": base.copy(),  # identical: tied
    }
    best, tied = stats.tied_with_best(per_split)
    assert best == "best" and tied == ["noisy", "same"]
    assert stats.paired_pvalue(per_split["worse"], base) < 1e-4
    assert stats.paired_pvalue(per_split["noisy"], base) == pytest.approx(
        scipy.stats.ttest_rel(per_split["noisy"], base).pvalue)
    # a constant difference has no spread: significant unless it is 0
    assert stats.paired_pvalue([1.0, 2.0, 3.0], [0.5, 1.5, 2.5]) == 0.0
    assert stats.paired_pvalue([1.0, 2.0], [1.0, 2.0]) == 1.0
    # fewer than 2 common splits: nothing to test, so tied
    lone = {"a": [0.1, np.nan], "b": [np.nan, 0.2]}
    assert stats.tied_with_best(lone) == ("a", ["b"])


def test_nemenyi_q_is_demsars_table():
    # Demšar (2006), Table 5a: q_0.05 for k = 2…10 (his values rounded to 3 decimals)
    table = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    for k, q in zip(range(2, 11), table, strict=True):
        assert stats.nemenyi_q(k) == pytest.approx(q, abs=1.5e-3), k


def test_friedman_and_nemenyi_on_demsars_worked_example():
    # Demšar (2006) §3.2.2: four variants of C4.5 on 14 data sets, average ranks 3.143, 2.000,
    # 2.893, 1.964 (rank sums 44, 28, 40.5, 27.5); χ²_F = 9.28, CD = 2.569·√(4·5/(6·14)) = 1.25,
    # and Nemenyi finds no pair different (the largest difference, 1.179, is below CD)
    ranks = np.array([44, 28, 40.5, 27.5]) / 14
    assert stats.friedman_statistic(ranks, 14) == pytest.approx(9.28, abs=5e-3)
    cd = stats.critical_difference(4, 14)
    assert cd == pytest.approx(1.25, abs=5e-3)
    assert stats.cliques(ranks, cd) == [(3, 1, 2, 0)]
    assert stats.significant_pairs(ranks, cd) == []


def test_friedman_and_nemenyi_on_a_case_by_hand():
    # 4 data sets, 3 methods, always in the order A < B < C (lower is better): ranks 1, 2, 3;
    # χ² = 12·4/(3·4)·(1 + 4 + 9) − 3·4·4 = 8; CD = q(3)·√(3·4/(6·4)) = 2.343·0.7071 = 1.657
    scores = np.array([[0.1, 0.2, 0.3], [1.0, 1.1, 5.0], [0.5, 0.6, 0.7], [2.0, 3.0, 4.0]])
    ranks = stats.average_ranks(scores)
    assert ranks.tolist() == [1.0, 2.0, 3.0]
    chi2, p = stats.friedman(scores)
    assert chi2 == pytest.approx(8.0) and p == pytest.approx(np.exp(-4.0))  # χ²₂ tail: e^{−x/2}
    assert stats.friedman_statistic(ranks, 4) == pytest.approx(8.0)
    cd = stats.critical_difference(3, 4)
    assert cd == pytest.approx(stats.nemenyi_q(3) * np.sqrt(0.5))
    # A–C differ by 2 ≥ CD; A–B and B–C by 1 < CD: two overlapping groups
    assert stats.cliques(ranks, cd) == [(0, 1), (1, 2)]
    assert stats.significant_pairs(ranks, cd) == [(0, 2)]
    # ties within a data set share their average rank
    assert stats.average_ranks(np.array([[0.1, 0.1, 0.3]])).tolist() == [1.5, 1.5, 3.0]


def test_the_trivial_flag():
    base_rmse, base_nlpd = np.full(5, 1.0), np.full(5, 1.42)
    rmse = np.array([0.5, 0.99, 0.9899, 0.5, 0.5])
    nlpd = np.array([0.6, 0.6, 0.6, 1.43, np.nan])
    # at 0.99 × the mean predictor's RMSE: trivial; just below: not; the NLPD is no part of it
    assert stats.trivial(rmse, base_rmse).tolist() == [False, True, False, False, False]
    # an NLPD worse than the mean predictor's Gaussian is flagged apart (a good mean with an
    # overconfident variance is not a constant predictor); no NLPD: not flagged
    assert stats.nlpd_above_mean(nlpd, base_nlpd).tolist() == [False, False, False, True,
                                                               False]
    # no baseline recorded: nothing is flagged
    assert not stats.trivial([1.5], [np.nan]).any()
    assert not stats.nlpd_above_mean([3.0], [np.nan]).any()


def test_the_contention_flag():
    wall = np.array([10.0, 10.0, 10.0, 0.5, 10.0, 10.0, np.nan])
    cpu = np.array([19.0, 10.5, 6.0, 0.1, 19.0, 19.0, np.nan])
    start = np.array([1.0, 1.2, 1.0, 1.0, 2.6, np.nan, np.nan])
    end = np.array([2.0, 2.0, 2.0, 2.0, 2.0, np.nan, np.nan])
    cores = np.array([2, 2, 2, 2, 2, 2, np.nan])
    flags = stats.contended(wall, cpu, start, end, cores)
    # 1.9 cores busy: fine; 1.05 (a partly single-threaded fit): fine; 0.6 of one core: it
    # waited; a 0.5 s fit: too short to judge by CPU; load 2.6 on 2 cores: busy; no load
    # recorded: judged by CPU alone; nothing recorded: unknown
    assert flags[:6].tolist() == [0.0, 0.0, 1.0, 0.0, 1.0, 0.0] and np.isnan(flags[6])
    # where a job recorded the cores others kept busy (pipeline.cluster.busy), they replace
    # the load average: 0.1 (the sweep's own processes) is quiet whatever the load; 0.3 of a
    # core is busy; a 0.5 s job is too short to judge; none recorded: the load as before
    others = np.array([0.1, 0.3, 0.1, 0.9, 0.1, np.nan, 0.1])
    flags = stats.contended(wall, cpu, start, end, cores, others)
    assert flags.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_the_cd_diagram_is_drawn(tmp_path):
    from matplotlib.image import imread

    from pipeline.publish.critical_difference import cd_diagram

    ranks = np.array([44, 28, 40.5, 27.5]) / 14
    path = cd_diagram(["C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf"], ranks,
                      stats.critical_difference(4, 14), tmp_path / "cd.png", title="example")
    image = imread(path)
    assert image.shape[0] > 150 and image.shape[1] > 500
    assert (image[..., :3] < 0.5).any()  # something dark was drawn


def test_the_corrected_t_interval_by_hand():
    # Nadeau & Bengio (2003): values 1…5 on five 90/10 splits: mean 3, s² = 2.5, J = 5,
    # ρ = n_test/n_train = 0.1/0.9 = 1/9; factor 1/5 + 1/9 = 0.311111, √(0.311111·2.5) =
    # √0.777778 = 0.881917; t_{4,0.975} = 2.776445: half-width 2.776445·0.881917 = 2.448594
    mean, half, n = stats.corrected_t_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.1)
    assert (mean, n) == (3.0, 5)
    assert half == pytest.approx(2.448594, abs=2e-6)
    # the plain interval is √(1 + J·ρ) = √(14/9) = 1.247219 times narrower: 1.963243
    plain = stats.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])[1]
    assert plain == pytest.approx(1.963243, abs=2e-6)
    assert half / plain == pytest.approx(np.sqrt(1 + 5 / 9), rel=1e-12)
    # 10-fold cross-validation (test fraction 1/10): the same ρ = 1/(k − 1) = 1/9
    x = np.array([0.31, 0.35, 0.29, 0.40, 0.33, 0.30, 0.36, 0.34, 0.32, 0.38])
    half10 = stats.corrected_t_interval(x, 0.1)[1]
    assert half10 / stats.t_interval(x)[1] == pytest.approx(np.sqrt(1 + 10 / 9), rel=1e-12)
    # NaN conventions as t_interval: a split that did not run is left out, one value has no
    # interval, none has no mean
    assert stats.corrected_t_interval([1.0, np.nan, 2.0], 0.1)[2] == 2
    m, h, n = stats.corrected_t_interval([0.3, np.nan], 0.1)
    assert (m, n) == (0.3, 1) and np.isnan(h)
    m, h, n = stats.corrected_t_interval([np.nan], 0.1)
    assert n == 0 and np.isnan(m) and np.isnan(h)
    with pytest.raises(ValueError):
        stats.corrected_t_interval([1.0, 2.0], 1.0)


def test_the_corrected_paired_test_by_hand():
    # differences 1…5 over the splits both ran (the 6th did not run for a):
    # t = 3/0.881917 = 3.401680 on 4 dof. For 4 dof the t CDF has a closed form:
    # x = t/√(4 + t²) = 0.862049, two-sided p = 1 − (3/2)·x·(1 − x²/3) = 0.027235
    a = np.array([2.0, 4.0, 6.0, 8.0, 10.0, np.nan])
    b = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    p = stats.corrected_paired_pvalue(a, b, 0.1)
    assert p == pytest.approx(0.027235, abs=1e-6)
    t = 3 / np.sqrt((1 / 5 + 1 / 9) * 2.5)
    x = t / np.sqrt(4 + t**2)
    assert p == pytest.approx(1 - 1.5 * x * (1 - x**2 / 3), rel=1e-10)
    # the plain paired t-test on the same differences gives half that p: t = 3/√(2.5/5) =
    # 4.242641, x = 0.904534, p = 1 − 1.5·0.904534·(1 − 0.272727) = 0.013236
    plain = stats.paired_pvalue(a, b)
    assert plain == pytest.approx(0.013236, abs=1e-6) and plain < p
    mean, half, n = stats.corrected_paired_difference(a, b, 0.1)
    assert (mean, n) == (3.0, 5) and half == pytest.approx(2.448594, abs=2e-6)
    # a constant difference has no spread: significant unless it is 0
    assert stats.corrected_paired_pvalue([1.0, 2.0, 3.0], [0.5, 1.5, 2.5], 0.1) == 0.0
    assert stats.corrected_paired_pvalue([1.0, 2.0], [1.0, 2.0], 0.1) == 1.0
    # fewer than 2 common splits: no test
    assert np.isnan(stats.corrected_paired_pvalue([1.0, np.nan], [np.nan, 2.0], 0.1))
    assert np.isnan(stats.corrected_paired_pvalue([1.0, 3.0], [0.5, np.nan], 0.1))


def test_the_relative_effect():
    # ratios 2.2/2, 4.8/4, 0.9/1 = 1.1, 1.2, 0.9 (the 4th split did not run): r = 0.1, 0.2,
    # −0.1, mean 0.066667, s² = (0.033333² + 0.133333² + 0.166667²)/2 = 0.023333;
    # plain: t_{2,0.975} = 4.302653 · √(0.023333/3) = 4.302653·0.088192 = 0.379460;
    # corrected (ρ = 1/9): 4.302653 · √((1/3 + 1/9)·0.023333) = 4.302653·0.101835 = 0.438161
    a = np.array([2.2, 4.8, 0.9, np.nan])
    ref = np.array([2.0, 4.0, 1.0, 3.0])
    mean, half, n = stats.relative_effect(a, ref)
    assert n == 3 and mean == pytest.approx(0.2 / 3, rel=1e-12)
    assert half == pytest.approx(0.379460, abs=2e-6)
    mean_c, half_c, n_c = stats.relative_effect(a, ref, test_fraction=0.1)
    assert n_c == 3 and mean_c == pytest.approx(mean, rel=1e-12)
    assert half_c == pytest.approx(0.438161, abs=2e-6)
    # a zero reference gives no ratio: left out
    assert stats.relative_effect([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])[2] == 2


def test_holm_by_hand():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → raised to 0.06 (the
    # adjusted values are monotone); back in the order given
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-12)
    # capped at 1: 0.5·2 = 1.0, 0.6·1 = 0.6 → 1.0
    assert stats.holm([0.6, 0.5]).tolist() == [1.0, 1.0]
    # equal p-values share their adjusted value: 0.02·2 = 0.04, then max(0.04, 0.02·1)
    assert stats.holm([0.02, 0.02]) == pytest.approx([0.04, 0.04], rel=1e-12)
    # a NaN stays NaN and is not counted: m = 2, so 0.01·2 = 0.02 and 0.04·1 = 0.04
    adjusted = stats.holm([0.01, np.nan, 0.04])
    assert np.isnan(adjusted[1]) and adjusted[[0, 2]] == pytest.approx([0.02, 0.04])
    assert np.isnan(stats.holm([np.nan, np.nan])).all()
    assert stats.holm([]).shape == (0,)
    # monotone in the raw p-values, never below them
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 0.2, 12)
    adjusted = stats.holm(p)
    order = np.argsort(p)
    assert (np.diff(adjusted[order]) >= 0).all() and (adjusted >= p).all()


def test_the_wilcoxon_test_and_its_smallest_p():
    # five splits, all differences positive: R⁻ = 0, one of 2⁵ sign patterns in each tail:
    # p = 2/32 = 0.0625, the smallest p on 5 splits: a 5 % test can never reject there
    a = np.array([1.1, 2.3, 3.2, 4.5, 5.4])
    b = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert stats.wilcoxon_pvalue(a, b) == pytest.approx(0.0625, rel=1e-12)
    assert stats.smallest_wilcoxon_p(5) == 0.0625
    # 3 splits: 2/8 = 0.25 ("not decidable" at 5 %); 10 splits: 2/1024 = 0.001953125
    assert stats.smallest_wilcoxon_p(3) == 0.25 and stats.smallest_wilcoxon_p(3) > stats.ALPHA
    assert stats.wilcoxon_pvalue(a[:3], b[:3]) == pytest.approx(0.25, rel=1e-12)
    ten = np.arange(1, 11) * 1e-3
    assert stats.wilcoxon_pvalue(ten, np.zeros(10)) == pytest.approx(2 / 1024, rel=1e-12)
    assert stats.smallest_wilcoxon_p(10) == pytest.approx(0.001953125, rel=1e-12)
    assert stats.smallest_wilcoxon_p(0) == 1.0
    # a zero difference is split between R⁺ and R⁻ (zsplit), not dropped: differences
    # [0, −1, −2, 3, 4, 5] rank 1…6 with R⁻ = 2 + 3 (+ ½) ; over the 2⁵ sign patterns of the
    # non-zero ranks {2,…,6}, those whose negative ranks sum to ≤ 5 are {}, {2}, {3}, {4}, {5},
    # {2,3}: p = 2·6/32 = 0.375 (dropping the zero: ranks {1,…,5}, sums ≤ 3: {}, {1}, {2}, {3},
    # {1,2}, p = 2·5/32 = 0.3125)
    d = np.array([0.0, -1.0, -2.0, 3.0, 4.0, 5.0])
    assert stats.wilcoxon_pvalue(d, np.zeros(6)) == pytest.approx(0.375, rel=1e-9)
    # all differences 0: p = 1; fewer than 2 common splits: NaN
    assert stats.wilcoxon_pvalue([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 1.0
    assert np.isnan(stats.wilcoxon_pvalue([1.0, np.nan, 3.0], [np.nan, 2.0, np.nan]))
    assert np.isnan(stats.wilcoxon_pvalue([1.0], [2.0]))


def _ten_splits(negative: set[int]) -> np.ndarray:
    """Differences ±rank·1e-3 for ranks 1…10, negative at the ranks given."""
    return np.array([(-r if r in negative else r) * 1e-3 for r in range(1, 11)])


def test_ties_with_the_best_by_wilcoxon_and_holm():
    # ten splits whose difficulty varies far more than the settings differ
    base = np.array([0.30, 0.50, 0.40, 0.60, 0.35, 0.45, 0.55, 0.32, 0.48, 0.41])
    per_split = {
        "best": base,
        # worse on every split: R⁻ = 0, p = 2/1024 = 0.001953
        "worse": base + _ten_splits(set()),
        # better on ranks 1 and 2 only: R⁻ = 3; sign patterns with R⁻ ≤ 3: {}, {1}, {2}, {3},
        # {1,2}: p = 2·5/1024 = 0.009766
        "close": base + _ten_splits({1, 2}),
        # better on rank 6 only: R⁻ = 6; patterns with R⁻ ≤ 6: {}, {1}, {2}, {3}, {1,2}, {4},
        # {1,3}, {5}, {1,4}, {2,3}, {6}, {1,5}, {2,4}, {1,2,3}: 14, p = 2·14/1024 = 0.027344
        "marginal": base + _ten_splits({6}),
        # better on the odd ranks: R⁻ = 25, p = 0.845703 (scipy)
        "noisy": base + _ten_splits({1, 3, 5, 7, 9}),
        "lone": np.r_[0.9, np.full(9, np.nan)],  # one split: nothing to test
    }
    raw = {"worse": 2 / 1024, "close": 10 / 1024, "marginal": 28 / 1024}
    for name, p in raw.items():
        assert stats.wilcoxon_pvalue(per_split[name], base) == pytest.approx(p, rel=1e-9)
    best, tied, adjusted = stats.tied_with_best_holm(per_split)
    assert best == "best"
    # Holm over the 4 comparisons made (lone's NaN is not counted): 0.001953·4 = 0.007813,
    # 0.009766·3 = 0.029297, 0.027344·2 = 0.054688, 0.845703·1 → 0.845703
    assert adjusted["worse"] == pytest.approx(8 / 1024, rel=1e-9)
    assert adjusted["close"] == pytest.approx(30 / 1024, rel=1e-9)
    assert adjusted["marginal"] == pytest.approx(56 / 1024, rel=1e-9)
    assert adjusted["noisy"] == pytest.approx(0.845703125, rel=1e-9)
    assert np.isnan(adjusted["lone"])
    # "marginal" is worse by the unadjusted test (0.027 < 0.05), tied after Holm (0.055);
    # lone shares one split with the best: tied
    assert tied == ["marginal", "noisy", "lone"]
    assert stats.tied_with_best(per_split)[0] == "best"  # the old rule still works


def test_a_tie_in_the_metric_is_broken_by_cost():
    base = np.array([0.30, 0.50, 0.40, 0.60, 0.35])
    per_split = {
        "slow": base,
        "fast": base * (1 + 1e-9),  # the same within the relative 1e-6
        "cheapest": base + 0.01,  # cheaper still, but worse
    }
    cost = {"slow": 100.0, "fast": 2.0, "cheapest": 1.0}
    assert stats.tied_with_best_holm(per_split)[0] == "slow"  # no cost: the lowest mean
    best, tied, adjusted = stats.tied_with_best_holm(per_split, cost=cost)
    assert best == "fast"
    # compared with fast: slow is better on all 5 splits, but 5 splits give p ≥ 0.0625:
    # nothing can be rejected, every setting is "tied" (not decidable)
    assert set(adjusted) == {"slow", "cheapest"} and tied == ["slow", "cheapest"]
    assert min(adjusted.values()) >= stats.smallest_wilcoxon_p(5)
    # outside the tolerance the metric decides, whatever the cost
    assert stats.tied_with_best_holm(per_split, cost=cost, rel_tol=1e-12)[0] == "slow"
    # a setting without a cost counts as dearest
    assert stats.tied_with_best_holm(per_split, cost={"slow": 5.0})[0] == "slow"
    assert stats.tied_with_best_holm(per_split, cost={"fast": 5.0})[0] == "fast"
    with pytest.raises(ValueError):
        stats.tied_with_best_holm({"a": [np.nan, np.nan]})


def test_iman_davenport():
    # Demšar (2006) §3.2.2: N = 14, k = 4, χ²_F = 9.28: F_F = 13·9.28/(14·3 − 9.28) =
    # 120.64/32.72 = 3.687 on (3, 39) dof, above the 5 % critical value 2.85: rejected
    f, p = stats.iman_davenport(9.28, 14, 4)
    assert f == pytest.approx(3.687, abs=5e-4)
    assert p == pytest.approx(scipy.stats.f.sf(120.64 / 32.72, 3, 39), rel=1e-12) and p < 0.05
    assert scipy.stats.f.ppf(0.95, 3, 39) == pytest.approx(2.85, abs=5e-3)
    # by hand: N = 2, k = 3, rankings (1, 2, 3) and (1, 3, 2): R = 1, 2.5, 2.5,
    # χ² = 12·2/12·(1 + 6.25 + 6.25 − 12) = 3; F_F = 1·3/(2·2 − 3) = 3 on (2, 2) dof, whose
    # upper tail is 1/(1 + F): p = 0.25
    chi2 = stats.friedman_statistic([1.0, 2.5, 2.5], 2)
    assert chi2 == pytest.approx(3.0)
    assert stats.iman_davenport(chi2, 2, 3) == pytest.approx((3.0, 0.25), rel=1e-12)
    # every data set ranks the methods alike: χ² = N(k − 1) = 8 (the case by hand above)
    assert stats.iman_davenport(8.0, 4, 3) == (np.inf, 0.0)
    chi2 = stats.friedman_statistic(stats.average_ranks(np.array([[0.1, 0.2, 0.3]] * 4)), 4)
    assert stats.iman_davenport(chi2, 4, 3) == (np.inf, 0.0)
    assert np.isnan(stats.iman_davenport(np.nan, 4, 3)[0])
