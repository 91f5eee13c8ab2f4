"""The statistics of a published comparison (pipeline.report.stats) on small tables with known
answers, and the critical-difference diagram drawn from them."""

import numpy as np
import pytest
import scipy.stats

from pipeline.report import stats


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

    from pipeline.report.critical_difference import cd_diagram

    ranks = np.array([44, 28, 40.5, 27.5]) / 14
    path = cd_diagram(["C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf"], ranks,
                      stats.critical_difference(4, 14), tmp_path / "cd.png", title="example")
    image = imread(path)
    assert image.shape[0] > 150 and image.shape[1] > 500
    assert (image[..., :3] < 0.5).any()  # something dark was drawn
