"""The ranked comparison's rules (pipeline/publish/ranking.py): every basis size its own entry,
the exact GP's solvers one entry, ties in a metric broken by cost, failures ranked last, the
tests for overlapping folds, checked on small tables worked by hand."""

import numpy as np
import pandas as pd
import pytest

from pipeline.publish import ranking
from pipeline.publish.job_table import COLUMNS, typed

pytestmark = pytest.mark.unit


def _table(rows: list[dict]) -> pd.DataFrame:
    """A published table from rows of (dataset, split, algorithm, basis_size, test_rmse, …);
    status ok, mode own, seconds 1 unless given."""
    full = []
    for row in rows:
        full.append({**{name: pd.NA for name in COLUMNS}, "mode": "own", "status": "ok",
                     "fit_seconds": 1.0, "learning_seconds": 0.0, "seed": pd.NA,
                     "trivial": False, **row})
    return typed(pd.DataFrame(full, columns=list(COLUMNS)))


def _rows(algorithm, rmse: dict, basis=pd.NA, **extra) -> list[dict]:
    """One row per (dataset, split) of ``rmse`` = {dataset: [values per split]}."""
    return [{"dataset": d, "split": s, "algorithm": algorithm, "basis_size": basis,
             "test_rmse": v, "test_nlpd": v - 1.0, **extra}
            for d, values in rmse.items() for s, v in enumerate(values)]


def test_order_with_cost_breaks_a_tie_by_seconds_and_puts_failures_last():
    scores = np.array([0.5, 0.3, 0.3 * (1 + 1e-9), np.inf, 0.1, np.inf])
    costs = np.array([1.0, 200.0, 60.0, 1.0, 5.0, 1.0])
    # 0.1 first; the two 0.3s are one tie, the cheaper (60 s) ahead; the failures share 5.5
    assert ranking.order_with_cost(scores, costs).tolist() == [4.0, 3.0, 2.0, 5.5, 1.0, 5.5]
    # a real difference is not a tie, whatever it costs
    assert ranking.order_with_cost([0.3, 0.31], [100.0, 1.0]).tolist() == [1.0, 2.0]


def test_each_basis_size_is_its_own_entry_and_the_solvers_of_the_exact_gp_are_one():
    sets = {"a": [0.50, 0.52, 0.48], "b": [0.30, 0.31, 0.29], "c": [0.90, 0.80, 0.85]}
    rows = (_rows("exact", sets, learning_seconds=100.0)
            + _rows("cg", {d: [v * (1 + 1e-8) for v in vs] for d, vs in sets.items()},
                    learning_seconds=10.0)
            + _rows("nystrom", {d: [v + 0.1 for v in vs] for d, vs in sets.items()}, 128)
            + _rows("nystrom", {d: [v + 0.05 for v in vs] for d, vs in sets.items()}, 512)
            + _rows("sgpr", {d: [v + 0.2 for v in vs] for d, vs in sets.items()}, 128))
    result = ranking.ranks(_table(rows), "own", "rmse", ["exact", "cg"])
    assert result.names == ["exact [or cg]", "nystrom (m = 128)", "nystrom (m = 512)",
                            "sgpr (m = 128)"]
    assert result.ranks.tolist() == [1.0, 3.0, 2.0, 4.0]
    # identical ranks on 3 sets: Friedman's χ² = 12N/(k(k+1))·Σ(R_j − (k+1)/2)² = 9, and
    # Iman–Davenport's F = (N−1)χ²/(N(k−1) − χ²) = 2·9/(9 − 9): every set agrees: F = ∞
    assert result.chi2 == pytest.approx(9.0)
    assert np.isinf(result.iman_davenport) and result.iman_davenport_p == 0.0
    # the exact GP's entry: its own metric, the cheaper solver's seconds
    per = ranking.split_frame(_table(rows), "own", ["exact", "cg"])
    exact = per[per["entry"] == "exact [or cg]"]
    assert (exact["solver"] == "cg").all() and (exact["cost"] == 11.0).all()
    assert exact["rmse"].tolist() == [v for vs in sets.values() for v in vs]
    # relative to the reference: nystrom (m = 512) on b is +0.05/0.3
    assert result.relative["nystrom (m = 512)"][1] == pytest.approx(0.05 / 0.30, rel=1e-12)


def test_a_failure_is_ranked_last_and_named_not_dropped():
    sets = {"a": [0.5, 0.5], "b": [0.3, 0.3], "c": [0.7, 0.7]}
    rows = (_rows("exact", sets) + _rows("m1", {d: [v + 0.1] * 2 for d, (v, _) in sets.items()})
            + _rows("m2", {d: [v + 0.2] * 2 for d, (v, _) in sets.items()})
            + _rows("m3", {d: [v + 0.01] * 2 for d, (v, _) in sets.items()}))
    table = _table(rows)
    # m3 is the best approximation, but it was refused on split 1 of set b and trivial on a
    refused = (table["algorithm"] == "m3") & (table["dataset"] == "b") & (table["split"] == 1)
    table.loc[refused, "status"] = "failed"
    table.loc[refused, "test_rmse"] = np.nan
    trivial = (table["algorithm"] == "m3") & (table["dataset"] == "a")
    table.loc[trivial, "trivial"] = True
    result = ranking.ranks(table, "own", "rmse", ["exact"])
    assert "m3" in result.names and result.failures["m3"] == ["a", "b"]
    ranks = dict(zip(result.names, result.ranks, strict=True))
    # on a and b m3 is last (4th); on c second: (4 + 4 + 2)/3
    assert ranks["m3"] == pytest.approx(10 / 3)
    assert ranks["m1"] == pytest.approx((2 + 2 + 3) / 3)
    assert "failed" in ranking.rank_table(result)


def test_an_entry_missing_from_a_data_set_or_without_the_metric_is_left_out_named():
    sets = {"a": [0.5, 0.5], "b": [0.3, 0.3]}
    rows = (_rows("exact", sets) + _rows("m1", {"a": [0.6, 0.6]})
            + _rows("m2", {d: [v + 0.1] * 2 for d, (v, _) in sets.items()}, test_nlpd=np.nan))
    result = ranking.ranks(_table(rows), "own", "nlpd", ["exact"])
    assert result.names == ["exact"]
    assert result.left_out == ["m1 (not run on every split of b)", "m2 (gives no test NLPD)"]
    assert not len(result.ranks)  # one entry: no test


def test_the_budget_table_takes_the_cheaper_of_two_equal_results_and_cannot_decide_on_3_splits():
    sets = {"kin": [0.069, 0.070, 0.068]}
    rows = (_rows("exact", sets, fit_seconds=196.0)
            + _rows("cg", {"kin": [v * (1 + 6e-5) for v in sets["kin"]]}, fit_seconds=67.0)
            + _rows("nystrom", {"kin": [0.30, 0.31, 0.32]}, 512, fit_seconds=5.0))
    text, ties = ranking.budget_table(_table(rows), "own", [10, 600], ["exact", "cg"])
    line = text.splitlines()[-1]
    assert line.startswith("| kin | nystrom (m = 512): 0.31")
    assert "| exact by cg: 0.069" in line and "in 67 s" in line
    # on 3 splits the smallest two-sided Wilcoxon p is 0.25: the much worse nystrom is still
    # "tied" at 600 s, which the README words as undecidable
    assert ties == ["kin ≤ 600 s (with exact): nystrom (m = 512)"]


def test_the_budget_tables_interval_is_nadeau_and_bengios():
    values = [0.50, 0.52, 0.48, 0.51, 0.49]
    rows = _rows("exact", {"abalone": values}) + _rows("m", {"abalone": [0.9] * 5}, 8)
    text, _ = ranking.budget_table(_table(rows), "own", [600], ["exact"])
    from scipy import stats as st

    from pipeline.datasets import build

    arrays, _ = build({"name": "abalone", "split": 0})
    n_test, n_train = len(arrays["y_test"]), len(arrays["y_train"])
    fraction = ranking.test_fraction("abalone")
    assert fraction == n_test / (n_test + n_train)  # 177 of abalone's 4177 rows
    half = st.t.ppf(0.975, 4) * np.sqrt((1 / 5 + fraction / (1 - fraction))
                                        * np.var(values, ddof=1))
    assert f"exact: {np.mean(values):.4g} ± {half:.2g} (5)" in text
