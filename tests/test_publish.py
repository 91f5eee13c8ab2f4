"""The published folder of an accuracy-against-time run (pipeline.publish): its table's schema,
the jobs a mode does not change listed under each mode, and the README rendered from the CSV."""

import io

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from pipeline.publish.cli import main
from pipeline.publish.comparison import SETTING_COLUMNS
from pipeline.publish.job_table import COLUMNS, job_table
from pipeline.publish.published import readme
from pipeline.publish.ranking import budget_tables


def _sweep() -> xr.Dataset:
    """Algorithm a (two basis sizes, two splits, two modes that change it) and b (ignores the
    basis size and the mode: the same two jobs everywhere)."""
    dims = ("algorithm", "dataset", "algorithm.max_basis", "dataset.split", "protocol")
    rmse = np.array([[[[0.5, 0.7], [0.3, 0.5]]], [[[0.45, 0.45], [0.45, 0.45]]]])
    secs = np.array([[[[1.0, 3.0], [10.0, 30.0]]], [[[5.0, 5.0], [5.0, 5.0]]]])
    hashes = np.array([[[["a1", "a2"], ["a3", "a4"]]], [[["b1", "b2"], ["b1", "b2"]]]])
    own = {"a1": "c1", "a2": "c2", "a3": "c3", "a4": "c4"}

    def both(values, own_values):
        return np.stack([values, own_values], axis=-1)

    shape = rmse.shape + (2,)
    return xr.Dataset(
        {"final_test_rmse": (dims, both(rmse, rmse + np.array([0.1, 0])[:, None, None, None])),
         "final_test_nlpd": (dims, both(rmse + 1, rmse + 1)),
         "final_seconds": (dims, both(secs, secs)),
         "final_hyper_seconds": (dims, np.full(shape, 1.0)),
         "final_blas_threads": (dims, np.full(shape, 2.0)),
         "final_cpu_model": (dims, np.full(shape, "AMD EPYC")),
         "status": (dims, np.full(shape, "ok")),
         "job_hash": (dims, both(hashes, np.vectorize(lambda h: own.get(h, h))(hashes)))},
        coords={"algorithm": ["a", "b"], "dataset": ["d"], "algorithm.max_basis": [8, 64],
                "dataset.split": [0, 1], "protocol": ["shared", "own"]},
        attrs={"config": {"dataset": {"split": 0}}})


def _write_run_record(path) -> None:
    """The run's record (``<sweep>.run.yaml``) a published CSV is re-rendered with."""
    import yaml

    path.write_text(yaml.safe_dump(
        {"command": "python -m pipeline -m experiment=s", "code_version": "git 0",
         "mode_order": ["shared", "own"], "budgets": [60], "figures": [], "grid": None}))


def test_the_table_has_its_schema_and_lists_mode_free_jobs_under_each_mode():
    table = job_table(_sweep())
    assert table.columns.tolist() == list(COLUMNS)
    # a: 2 sizes × 2 splits × 2 modes; b: 2 splits, listed under both modes
    assert len(table) == 8 + 4
    b = table[table["algorithm"] == "b"]
    assert sorted(b["mode"]) == ["own", "own", "shared", "shared"]
    assert b["basis_size"].isna().all()
    assert set(table["cpu_model"]) == {"AMD EPYC"}


def test_learning_seconds_hold_the_shared_learning_a_method_started_from():
    """learning_seconds = hyper_seconds + hyper_start_seconds + own_learning_seconds (a missing
    term is 0): ours pay for the shared learning they start from, as the peers do."""
    ds = _sweep()
    start = np.zeros(ds["final_seconds"].shape)
    start[0, ..., 1] = 4.0  # a, own: started from a shared learning of 4 s
    ds["final_hyper_start_seconds"] = (ds["final_seconds"].dims, start)
    table = job_table(ds)
    a_own = table[(table["algorithm"] == "a") & (table["mode"] == "own")]
    assert (a_own["learning_seconds"] == 5.0).all()
    assert (table[table["mode"] == "shared"]["learning_seconds"] == 1.0).all()


def test_readme_renders_from_the_csv_with_confidence_intervals_over_splits():
    buffer = io.StringIO()
    job_table(_sweep()).to_csv(buffer, index=False)
    table = pd.read_csv(io.StringIO(buffer.getvalue()))
    text = readme(table, reference="b", sweep="s", code_version="git 0",
                  commands=["python -m pipeline -m experiment=s"], figures=["f.png"],
                  mode_order=["shared", "own"])
    # the ranks come first, then the budgets, then the reference
    assert (text.index("## Ranks across data sets") < text.index("## Best method per time budget")
            < text.index("## The reference"))
    budgets = text[text.index("## Best method per time budget"):]
    shared, own = budgets.index("**shared**"), budgets.index("**own**")
    assert shared < own
    # Nadeau–Bengio's corrected interval: "d" cannot be built here, so n_test/n_train =
    # 0.1/0.9 = 1/9. a at m = 64 (RMSE 0.3 and 0.5): mean 0.4, s² = 0.02, half-width
    # t(0.975, 1) · √((1/2 + 1/9) · 0.02) = 12.706 · √0.012222 = 12.706 · 0.11055 = 1.40 (the
    # plain t interval's 12.706 · 0.1414/√2 = 1.27, √(1 + 2/9) = 1.105 times narrower)
    # learning + fit within 10 s: b (6 s, RMSE 0.45) beats a at m = 8 ((2 + 4)/2 = 3 s, RMSE
    # 0.5 and 0.7): worse on both splits, but Wilcoxon's smallest two-sided p on 2 splits is
    # 2/2² = 0.5 (one comparison: Holm leaves it 0.5 ≥ 0.05): tied. Within 60 s a at m = 64
    # ((11 + 31)/2 = 21 s) is best; a at m = 8 (differences +0.2, +0.2: p = 2 · 1/4 = 0.5) and
    # b (+0.15 and −0.05 from it: |d| ranks 2 and 1, W⁻ = 1, P(W⁻ ≤ 1) = 2/4, p = 1) are tied
    # with it: Holm-adjusted min(1, 2 · 0.5) = 1 and max(1, 1 · 1) = 1. With 2 splits
    # nothing is called worse.
    cells = ("| d | b: 0.45 ± 0 (2) in 6 s, tied with 1 | a (m = 64): 0.4 ± 1.4 (2) in 21 s, "
             "tied with 2 | a (m = 64): 0.4 ± 1.4 (2) in 21 s, tied with 2 |")
    assert cells in budgets[shared:own]
    assert ("Tied with the best: d ≤ 10 s (with b): a (m = 8); d ≤ 60 s (with a (m = 64)): "
            "a (m = 8), b; d ≤ 600 s (with a (m = 64)): a (m = 8), b.") in budgets[shared:own]
    # fit only: a at m = 64 takes (10 + 30)/2 = 20 s
    assert "a (m = 64): 0.4 ± 1.4 (2) in 20 s, tied with 2" in budgets[shared:own]
    # own: a is 0.1 worse (m = 8: 0.6 and 0.8; m = 64: 0.4 and 0.6, mean 0.5): b best everywhere
    assert "| d | b: 0.45 ± 0 (2) in 6 s, tied with 1 | b: 0.45 ± 0 (2) in 6 s, tied with 2 |" \
        in budgets[own:]
    # b ran the same jobs in both modes: one row for them, in the modes' order
    assert "| shared, own | d | b | 0.45 ± 0 (2) | 1.45 ± 0 (2) | 6 | 2 | – |" in text
    assert "Machine: AMD EPYC; BLAS threads per job: 2" in text
    assert "![f.png](f.png)" in text
    # several references, in the order given, per mode and dataset
    text = readme(table, reference="b,a", sweep="s", code_version="git 0", commands=[],
                  figures=[])
    assert "## The reference (`b`, `a`)" in text
    shared = text[text.index("| shared | d | b |"):]
    assert shared.index("| shared | d | a (m = 8) |") > 0
    # a's difference from b over the splits both ran, per basis size: RMSE 0.5 and 0.7 (m = 8)
    # against 0.45: differences 0.05 and 0.25, mean +0.15, s² = 0.02 as above: ± 1.4
    assert "| shared | d | a (m = 8) | 0.6 ± 1.4 (2) | 1.6 ± 1.4 (2) | 3 | 2 | +0.15 ± 1.4 (2) |" \
        in text
    # every setting against the reference, per split: Δ RMSE and Δ NLPD with their intervals
    # (a at m = 64: −0.15 and +0.05, mean −0.05, s² = 0.02: ± 1.4)
    assert ("| d | a (m = 64) | 0.4 ± 1.4 (2) | -0.05 ± 1.4 (2) | 1.4 ± 1.4 (2) | "
            "-0.05 ± 1.4 (2) | 20 | 1 |  |  |") in text


def test_keys_the_run_fixed_come_from_its_config_and_another_swept_key_is_refused():
    from algorithms.errors import InputError

    # one mode and one basis size, fixed by the run: every row has the config's values
    one = _sweep().isel(protocol=0, drop=True).isel({"algorithm.max_basis": 1}, drop=True)
    one.attrs["config"] = {"dataset": {"split": 0}, "protocol": "shared",
                           "algorithm": {"max_basis": 64}}
    table = job_table(one)
    assert set(table["mode"]) == {"shared"} and set(table["basis_size"]) == {64}
    assert sorted(table["split"]) == [0, 0, 1, 1]
    # a swept key the table has no column for would be averaged away unseen
    two = _sweep().expand_dims(lam=[0.1, 1.0])
    with pytest.raises(InputError, match="the run sweeps lam besides"):
        job_table(two)


def test_a_budget_whose_settings_have_no_finite_rmse_is_a_dash():
    table = job_table(_sweep())
    table["test_rmse"] = np.nan  # e.g. every fit within the budget diverged
    text = readme(table, reference="a", sweep="s", code_version="git 0", commands=[],
                  figures=[], budgets=(5, 60))
    # no setting has an RMSE on every split, so none is ranked: both modes, both costs
    assert text.count("| d | — (none ranked) | — (none ranked) |") == 4


@pytest.mark.parametrize("argv, fragment", [
    (["missing.zarr", "--reference", "exact"], "missing.zarr does not exist"),
    (["missing.zarr"], "--reference is missing: name the run's reference algorithm(s)"),
    (["missing.zarr", "--legs", "legs"], "missing.zarr does not exist"),
])
def test_bad_arguments_are_one_line_errors(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1
    assert not (tmp_path / "docs").exists()


def test_a_setting_that_finished_fewer_splits_is_left_out_of_the_budgets_and_named():
    """A setting whose job failed on a split is no candidate of a budget (a mean over fewer
    splits is not comparable) and is named; in the ranks it stays an entry (ranked last
    there), while one that never ran the split is left out of the ranks, named."""
    table = job_table(_sweep())
    failed = ((table["mode"] == "shared") & (table["algorithm"] == "a")
              & (table["basis_size"] == 64) & (table["split"] == 1))
    table.loc[failed, "status"] = "failed"
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    budgets = text[text.index("## Best method per time budget"):]
    shared = budgets[:budgets.index("**own**")]
    # its one split (RMSE 0.3) would beat b's mean over two: it is left out, and said so; b
    # (6 s) is best within every budget, a at m = 8 (3 s; 0.5 and 0.7 against 0.45: both
    # worse, but 2 splits give p ≥ 2/2² = 0.5) tied with it
    assert "| d | b: 0.45 ± 0 (2) in 6 s, tied with 1 | b: 0.45 ± 0 (2) in 6 s, tied with 1 |" \
        in shared
    assert "a (m = 64):" not in shared
    assert "Left out (fewer splits than the data set's others): shared: a (m = 64) on d " \
        "(1 of 2)." in text
    # the ranks: a failed split keeps it an entry (a, m = 8 and 64, and b: 3 entries, none
    # left out; one data set, so no test)
    ranks = text[text.index("**shared, test RMSE**"):text.index("**shared, test NLPD**")]
    assert "No ranks of test RMSE: 3 entries over 1 data set(s)" in ranks
    assert "Left out: none." in ranks
    # a split it never ran (no row at all): left out of the ranks, named, and still of the
    # budgets
    text = readme(table[~failed], reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    ranks = text[text.index("**shared, test RMSE**"):text.index("**shared, test NLPD**")]
    assert ("No ranks of test RMSE: 2 entries over 1 data set(s) (the Friedman test needs at "
            "least 3 entries and 2 data sets). Left out: a (m = 64) (not run on every split "
            "of d).") in ranks
    assert "Left out (fewer splits than the data set's others): shared: a (m = 64) on d " \
        "(1 of 2)." in text
    assert "a (m = 64):" not in text[text.index("**shared**"):text.index("**own**")]


def _splits_table(rmse: dict, seconds: dict, dataset: str = "d") -> pd.DataFrame:
    """A job table of one mode ("shared") and data set: (algorithm, basis size) → test RMSE
    per split (NLPD = RMSE + 1) and → learning + fit seconds (1 s of it learning)."""
    return pd.DataFrame([
        {"mode": "shared", "dataset": dataset, "algorithm": algorithm, "basis_size": basis,
         "split": split, "seed": 0, "status": "ok", "test_rmse": value,
         "test_nlpd": value + 1, "fit_seconds": seconds[algorithm, basis] - 1.0,
         "learning_seconds": 1.0, "trivial": False, "nlpd_above_mean": False,
         "contended": False}
        for (algorithm, basis), values in rmse.items() for split, value in enumerate(values)])


def test_ties_are_called_by_holm_corrected_wilcoxon_tests():
    from pipeline.publish.stats import tied_with_best_holm

    table = job_table(_sweep())
    slow = (table["algorithm"] == "a") & (table["basis_size"] == 64)
    # below b's 0.45 on one split, above on the other: the better mean, b tied with it
    table.loc[slow & (table["split"] == 0), "test_rmse"] = 0.43
    table.loc[slow & (table["split"] == 1), "test_rmse"] = 0.46
    text = budget_tables(table, budgets=(60,), order=["shared", "own"])
    # mean 0.445, s² = 0.015²·2 = 0.00045, half-width 12.706 · √((1/2 + 1/9) · 0.00045) =
    # 12.706 · 0.016583 = 0.21; a at m = 8 (0.5 and 0.7; own 0.6 and 0.8) is worse on both
    # splits but with 2 splits Wilcoxon's p is at least 2/2² = 0.5: tied too
    assert text.count("| d | a (m = 64): 0.445 ± 0.21 (2) in 21 s, tied with 2 |") == 2
    assert "d ≤ 60 s (with a (m = 64)): a (m = 8), b." in text
    # 0.01 below b on both splits: every split agrees, and still p = 2 · 1/4 = 0.5: b is tied
    table.loc[slow, "test_rmse"] = 0.44
    text = budget_tables(table, budgets=(60,))
    assert text.count("| d | a (m = 64): 0.44 ± 0 (2) in 21 s, tied with 2 |") == 2
    assert "d ≤ 60 s (with a (m = 64)): a (m = 8), b." in text
    # 8 splits: the smallest two-sided p is 2/2⁸ = 0.0078125, and Holm's first step over the
    # 2 comparisons doubles it: 0.015625 < 0.05, so a test can reject. a at m = 64 (21 s)
    # against b (6 s, 0.45 on every split): differences b − a = 0.01 · (−1, 2, 3, 4, −5, 6, 7,
    # 8), below b on 6 splits, above on 2 (ranks 1 and 5): W⁻ = 6; the subsets of {1…8}
    # summing to at most 6 are {}, {1}, {2}, {3}, {1,2}, {4}, {1,3}, {5}, {1,4}, {2,3}, {6},
    # {1,5}, {2,4}, {1,2,3}: 14 of 2⁸, p = 2 · 14/256 = 0.109375. a at m = 8 (3 s, 0.6 + 0.01 ·
    # split) is above a at m = 64 on every split: p = 2/256 = 0.0078125. Holm: 2 · 0.0078125 =
    # 0.015625 < 0.05 (worse), then max(0.015625, 0.109375) = 0.109375 ≥ 0.05 (tied)
    a64 = [0.46, 0.43, 0.42, 0.41, 0.50, 0.39, 0.38, 0.37]
    a8 = [0.6 + 0.01 * split for split in range(8)]
    seconds = {("a", 64): 21.0, ("a", 8): 3.0, ("b", np.nan): 6.0}
    eight = _splits_table({("a", 64): a64, ("a", 8): a8, ("b", np.nan): [0.45] * 8}, seconds)
    best, tied, p = tied_with_best_holm({"a (m = 64)": a64, "a (m = 8)": a8, "b": [0.45] * 8})
    assert best == "a (m = 64)" and tied == ["b"]
    assert p == pytest.approx({"a (m = 8)": 0.015625, "b": 0.109375})
    text = budget_tables(eight, budgets=(60,))
    # a at m = 64: mean 3.36/8 = 0.42; deviations 0.01 · (4, 1, 0, −1, 8, −3, −4, −5), s² =
    # 0.0132/7 = 0.0018857; half-width t(0.975, 7) · √((1/8 + 1/9) · s²) = 2.3646 · 0.021101
    # = 0.0499 (fit only: 20 s)
    assert "| d | a (m = 64): 0.42 ± 0.05 (8) in 21 s, tied with 1 |" in text
    assert "| d | a (m = 64): 0.42 ± 0.05 (8) in 20 s, tied with 1 |" in text
    assert text.count("Tied with the best: d ≤ 60 s (with a (m = 64)): b.") == 2
    # 0.01 below b on all 8 splits: both p = 0.0078125, Holm 2 · 0.0078125 = 0.015625 and
    # max(0.015625, 1 · 0.0078125) = 0.015625: both worse, none tied
    eight.loc[eight["basis_size"] == 64, "test_rmse"] = 0.44
    text = budget_tables(eight, budgets=(60,))
    assert "| d | a (m = 64): 0.44 ± 0 (8) in 21 s |" in text
    assert "Tied with the best" not in text


def _two_sets(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (of data set d) and a copy of it as data set e: 2 data sets, so ranks."""
    return pd.concat([table, table.assign(dataset="e")], ignore_index=True)


def test_a_trivial_setting_is_flagged_and_ranked_last_and_marked():
    from pipeline.publish.job_table import complete

    table = _two_sets(job_table(_sweep()))
    table["baseline_rmse"], table["baseline_nlpd"] = 0.6, 1.55
    table = complete(table)
    # RMSE ≥ 0.99 · 0.6 = 0.594: a at m = 8 on split 1 (0.7) when shared, on each set
    shared = table[table["mode"] == "shared"]
    assert shared[shared["trivial"]][["dataset", "algorithm", "basis_size", "split"]
                                     ].values.tolist() == [["d", "a", 8, 1], ["e", "a", 8, 1]]
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], budgets=(5, 60), mode_order=["shared", "own"])
    budget = text[text.index("**shared**"):text.index("**own**")]
    # a at m = 8 (3 s) would be the only setting within 5 s: it is no candidate of a budget.
    # Within 60 s a at m = 64 (0.3 and 0.5: 0.4 ± 12.706 · √((1/2 + 1/9) · 0.02) = ± 1.4), b
    # tied with it (2 splits: p ≥ 0.5)
    assert "| d | — (least 6 s) | a (m = 64): 0.4 ± 1.4 (2) in 21 s, tied with 1 |" in budget
    assert "a (m = 8)" not in budget
    # named: shared a at m = 8 on split 1 of each set (2 rows); own, where a's RMSE is 0.1
    # higher: a at m = 8 on both splits (0.6, 0.8) and a at m = 64 on split 1 (0.6) of each
    # set (6 rows): 8 of the 2 · 12 rows
    assert ("8 of 24 finished rows are trivial (shared: a (m = 8) on d (1 of 2 splits; RMSE "
            "0.6); shared: a (m = 8) on e (1 of 2 splits; RMSE 0.6); own: a (m = 8) on d (2 of "
            "2 splits; RMSE 0.7); own: a (m = 64) on d (1 of 2 splits; RMSE 0.5);") in text
    # ranked last on each set, marked failed: RMSE a at m = 64 0.4 (1st), b 0.45 (2nd), a at
    # m = 8 failed (3rd) on d and e; against b's 0.45: 0.4/0.45 − 1 = −11.1 %, b +0.0 %.
    # Friedman: every set ranks alike, χ² = N(k − 1) = 2 · 2 = 4, p = e^(−2) = 0.14. Wilcoxon
    # over the 2 sets against a at m = 64: both above, p = 0.5 each; Holm min(1, 2 · 0.5) = 1
    ranks = text[text.index("**shared, test RMSE**"):text.index("**shared, test NLPD**")]
    assert "ranks last (failed: a (m = 8) on d, e). Friedman χ² = 4, p = 0.14;" in ranks
    assert ("| a (m = 64) | 1.00 | -11.1% | -11.1% | best |\n"
            "| b | 2.00 | +0.0% | +0.0% | 1 |\n"
            "| a (m = 8) | 3.00 | failed | failed | 1 |") in ranks
    # in every metric: its NLPD (1.5 and 1.7, mean 1.6) is not ranked by its value either
    ranks = text[text.index("**shared, test NLPD**"):text.index("**own, test RMSE**")]
    assert "| a (m = 8) | 3.00 | failed | failed | 1 |" in ranks
    # flagged in the table's CSV
    assert table["trivial"].notna().all()
    # and not drawn in the frontier figures: only a (m = 64) and b are points
    from pipeline.publish.comparison import rows_of_mode, settings
    from pipeline.publish.table_frontier import table_points

    rows = rows_of_mode(settings(table), "shared")
    drawn = table_points(rows, "d", "rmse", "fit")
    assert sorted((p[0], p[1]) for p in drawn) == [("a", 64), ("b", None)]
    assert [p[2:] for p in drawn if p[0] == "a"] == [(20.0, 0.4, 2)]


def test_an_nlpd_above_the_mean_predictors_is_ranked_by_its_value_and_left_out_of_the_figures():
    """A setting whose mean beats the training mean but whose NLPD is above the mean
    predictor's Gaussian's on a split (an overconfident variance) is ranked by its RMSE and
    by its NLPD like any other (not as a failure), left out of the NLPD figures, named."""
    from pipeline.publish.comparison import rows_of_mode, settings
    from pipeline.publish.job_table import complete
    from pipeline.publish.table_frontier import table_points

    table = job_table(_sweep())
    # a second set, e, where b's NLPD is 1.62 on both splits (in both modes)
    table = _two_sets(table)
    table.loc[(table["dataset"] == "e") & (table["algorithm"] == "b"), "test_nlpd"] = 1.62
    table["baseline_rmse"], table["baseline_nlpd"] = 1.0, 1.65
    table = complete(table)
    # NLPD > 1.65: a at m = 8 on split 1 (1.7), in both modes and sets; no RMSE near 1.0:
    # none trivial
    assert not table["trivial"].any()
    above = table[table["nlpd_above_mean"]]
    assert above[["algorithm", "basis_size", "split"]].drop_duplicates().values.tolist() == [
        ["a", 8, 1]]
    rows = rows_of_mode(settings(table), "shared")
    a8 = rows[(rows["algorithm"] == "a") & (rows["basis"] == 8)].iloc[0]
    assert a8["ranked"] and not a8["ranked_nlpd"]
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], budgets=(5, 60), mode_order=["shared", "own"])
    budget = text[text.index("**shared**"):text.index("**own**")]
    # ranked by its RMSE: within 5 s of learning + fit only a at m = 8 ((2 + 4)/2 = 3 s;
    # RMSE 0.5 and 0.7: 0.6 ± 12.706 · √((1/2 + 1/9) · 0.02) = ± 1.4)
    assert "| d | a (m = 8): 0.6 ± 1.4 (2) in 3 s |" in budget
    # ranked by its NLPD, 1.6 (1.5 and 1.7): on d after a at m = 64 (1.4) and b (1.45), on e
    # before b (1.62). Average ranks: a at m = 64 (1 + 1)/2 = 1, a at m = 8 (3 + 2)/2 = 2.5, b
    # (2 + 3)/2 = 2.5 (equal: in the entries' order). Against b, in nats: a at m = 64 1.4 −
    # 1.45 = −0.05 and 1.4 − 1.62 = −0.22; a at m = 8 +0.15 and −0.02. Friedman χ² =
    # 12 · 2/(3 · 4) · (1² + 2.5² + 2.5² − 3 · 4²/4) = 2 · 1.5 = 3, p = e^(−1.5) = 0.22.
    # Wilcoxon over the 2 sets against a at m = 64: above it on both, p = 0.5; Holm 1
    ranks = text[text.index("**shared, test NLPD**"):text.index("**own, test RMSE**")]
    assert "ranks last (failed: none). Friedman χ² = 3, p = 0.22;" in ranks
    assert ("| a (m = 64) | 1.00 | -0.05 | -0.22 | best |\n"
            "| a (m = 8) | 2.50 | +0.15 | -0.02 | 1 |\n"
            "| b | 2.50 | +0 | +0 | 1 |") in ranks
    assert ("it is ranked by its NLPD like any other and left out of the NLPD figures: 4 of 24 "
            "finished rows (shared: a (m = 8) on d (1 of 2 splits; NLPD 1.6); shared: a (m = 8) "
            "on e (1 of 2 splits; NLPD 1.6); own: a (m = 8) on d (1 of 2 splits; NLPD 1.6); "
            "own: a (m = 8) on e (1 of 2 splits; NLPD 1.6))") in text
    assert sorted(p[:2] for p in table_points(rows, "d", "rmse", "fit")) == [
        ("a", 8), ("a", 64), ("b", None)]
    assert sorted(p[:2] for p in table_points(rows, "d", "nlpd", "fit")) == [
        ("a", 64), ("b", None)]


def test_a_reference_without_finished_jobs_is_one_line():
    from algorithms.errors import InputError
    from pipeline.publish.comparison import reference_table

    table = job_table(_sweep())
    with pytest.raises(InputError, match=r"--reference b,z: no finished job of z in the "
                                         r"results; pass .* comma-separated"):
        reference_table(table, "b,z")
    with pytest.raises(InputError, match=r"no finished job of an algorithm"):
        reference_table(table, " , ")


def test_notes_and_the_grid_are_put_in_the_readme_as_given():
    table = job_table(_sweep())
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], grid="params:\n  a: 1,2", notes="## Sizing\n\n8 hours.\n")
    # after the results (budgets, reference, figures), before the grid
    sizing = text.index("## Sizing\n\n8 hours.")
    assert text.index("## Figures") < sizing < text.index("## The grid")
    assert "## The grid" in text and "```yaml\nparams:\n  a: 1,2\n```" in text
    plain = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                   figures=[])
    assert "## The grid" not in plain and "## Sizing" not in plain


def test_seeds_are_averaged_per_split_and_their_spread_is_shown():
    # a draws at random (its jobs differ by seed); b does not (one job whatever the seed)
    two = _sweep().expand_dims(seed=[0, 1]).copy(deep=True)
    hashes = two["job_hash"].values.astype(object)
    hashes[1] = np.vectorize(lambda h: h if h.startswith("b") else h + "s1",
                             otypes=[object])(hashes[1])
    two["job_hash"] = (two["job_hash"].dims, hashes.astype(str))
    two["final_test_rmse"].loc[{"seed": 1, "algorithm": "a"}] += 0.02
    table = job_table(two)
    b = table[table["algorithm"] == "b"]
    assert len(b) == 4 and b["seed"].isna().all()  # counted once, under each mode
    a = table[(table["algorithm"] == "a") & (table["mode"] == "shared")]
    assert sorted(a["seed"].dropna()) == [0] * 4 + [1] * 4
    text = budget_tables(table, budgets=(60,), order=["shared", "own"])
    # a at m = 64: seeds 0.3/0.32 and 0.5/0.52, per split 0.31 and 0.51, mean 0.41 with
    # s² = 0.02 over the 2 splits (not 4 values): ± 12.706 · √((1/2 + 1/9) · 0.02) = ± 1.4
    assert "a (m = 64): 0.41 ± 1.4 (2) in 21 s" in text
    # the spread over seeds is shown beside every setting: sd over seeds 0.02/√2 = 0.014 on
    # each split, their mean 0.014; its Δ RMSE from b (0.45): −0.14 and +0.06, mean −0.04
    # ± 1.4 (s² = 0.02); NLPD (not moved by the seed) 1.3 and 1.5, Δ −0.15 and +0.05
    from pipeline.publish.comparison import against_reference

    rows = against_reference(table, "b", "shared")
    assert ("| d | a (m = 64) | 0.41 ± 1.4 (2) | -0.04 ± 1.4 (2) | 1.4 ± 1.4 (2) | "
            "-0.05 ± 1.4 (2) | 20 | 1 | 0.014 (2 seeds) |  |") in rows
    # b ran one job per split: no spread to show
    assert "| d | b | 0.45 ± 0 (2) | – | 1.45 ± 0 (2) | – | 5 | 1 |  |  |" in rows


def test_the_readme_re_renders_from_a_published_csv_and_its_run_record(tmp_path, capsys):
    import yaml

    job_table(_sweep()).drop(columns=["trivial", "seed"]).to_csv(tmp_path / "s.csv",
                                                                index=False)
    assert main([str(tmp_path / "s.csv"), "--reference", "b", "--out", str(tmp_path)]) == 2
    assert "s.run.yaml does not exist" in capsys.readouterr().err
    _write_run_record(tmp_path / "s.run.yaml")
    assert main([str(tmp_path / "s.csv"), "--reference", "b", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    # within the record's 60 s: a at m = 64 (0.3 and 0.5), ± 12.706 · √((1/2 + 1/9) · 0.02) =
    # ± 1.4; b and a at m = 8 tied with it (2 splits: no Wilcoxon p below 0.5)
    assert "| d | a (m = 64): 0.4 ± 1.4 (2) in 21 s, tied with 2 |" in text
    # 3 entries but one data set: no Friedman test, and said so; the CSV is rewritten in
    # today's columns
    assert ("No ranks of test RMSE: 3 entries over 1 data set(s) (the Friedman test needs at "
            "least 3 entries and 2 data sets)") in text
    assert pd.read_csv(tmp_path / "s.csv").columns.tolist() == list(COLUMNS)
    # the settings: each mean with its 95 % corrected interval's bounds; a at m = 64, shared:
    # RMSE 0.3 and 0.5, 0.4 ± t(0.975, 1) · √((1/2 + 1/9) · s²), n_test/n_train = 1/9 for a
    # data set not built here; b, which ignores the basis size, has none
    settings = pd.read_csv(tmp_path / "s_settings.csv")
    assert settings.columns.tolist() == list(SETTING_COLUMNS)
    assert "## The settings: `s_settings.csv`" in text and "| `rmse_ci_low` |" in text
    a64 = settings[(settings["mode"] == "shared") & (settings["algorithm"] == "a")
                   & (settings["basis_size"] == 64)].iloc[0]
    half = 12.706204736174698 * np.sqrt((1 / 2 + 1 / 9) * np.var([0.3, 0.5], ddof=1))
    assert half == pytest.approx(1.4047, abs=1e-4)
    assert a64["rmse_mean"] == pytest.approx(0.4)
    assert (a64["rmse_ci_low"], a64["rmse_ci_high"]) == pytest.approx((0.4 - half, 0.4 + half))
    # the fixture's recorded seconds carried over (fit 10 and 30 s, learning 1 s each), not a
    # time measured by the test
    assert a64["splits"] == 2 and a64["learning_fit_seconds"] == pytest.approx(21)
    assert settings[settings["algorithm"] == "b"]["basis_size"].isna().all()
    assert settings["ranked"].all()
    assert not list(tmp_path.glob("cd_*.png"))
    # the frontier figures are drawn from the table: per mode, metric, and fit-only or
    # learning + fit seconds, each in the README with its caption and listed in the record
    names = [f"fig{k}_frontier_final_test_{metric}_{mode}_{cost}.png"
             for k, (mode, cost, metric) in enumerate(
                 ((mode, cost, metric) for mode in ("shared", "own") for cost in ("fit", "cost")
                  for metric in ("rmse", "nlpd")), start=1)]
    assert yaml.safe_load((tmp_path / "s.run.yaml").read_text())["figures"] == names
    for name in names:
        assert (tmp_path / name).stat().st_size > 10_000
        assert f"![{name}]({name})\n\nPoints: one setting's mean" in text


def test_the_readme_counts_the_own_learnings_that_stopped_at_their_cap():
    table = job_table(_sweep())
    own_a = (table["mode"] == "own") & (table["algorithm"] == "a")
    table["converged"] = pd.array([pd.NA] * len(table), dtype="boolean")
    table.loc[own_a, "converged"] = [True, False, False, True]  # m = 8: split 1; m = 64: split 0
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    assert ("stopped at its safety cap). 2 of 4 such rows did not converge: own: a (m = 8) on "
            "d (1); own: a (m = 64) on d (1).") in text
    table["converged"] = pd.array([pd.NA] * len(table), dtype="boolean")
    assert "This table's run did not record it." in readme(
        table, reference="b", sweep="s", code_version="git 0", commands=[], figures=[])


def test_a_merged_sweeps_published_command_lists_every_command():
    """A sweep made by several commands (merge=true) publishes them all, in order."""
    import json

    from pipeline.publish.run_record import run_command

    made = json.dumps([{"command": ["lam=0.1", "sweep=s"]},
                       {"command": ["lam=0.5", "sweep=s", "merge=true"]}])
    assert run_command(None, "s", made) == ("python -m pipeline -m lam=0.1 sweep=s; then "
                                             "python -m pipeline -m lam=0.5 sweep=s merge=true")
    assert run_command(None, "s") == "python -m pipeline -m experiment=s"


BESIDE_HEADER = "source,dataset,method,metric,mean,sd,trials,algorithm,mode,basis_size,where\n"


def _beside(tmp_path, rows: str):
    path = tmp_path / "beside.csv"
    path.write_text(BESIDE_HEADER + rows)
    return path


def test_numbers_published_elsewhere_are_set_beside_the_runs_own(tmp_path):
    from pipeline.publish.elsewhere import beside_tables, read_beside

    table = job_table(_sweep())
    path = _beside(tmp_path, "\n".join([
        "Them 2019,d,their a,rmse,0.35,0.01,3,a,shared,64,repo@0:t.tex#L1",
        "Them 2019,d,their a,nlpd,1.2,,3,a,shared,64,repo@0:t.tex#L1",
        "Them 2019,d,their c,rmse,0.5,0.1,3,c,own,,repo@0:t.tex#L2"]) + "\n")
    text = beside_tables(table, read_beside(path))
    # a at m = 64, shared: RMSE 0.3 and 0.5 (mean 0.4), NLPD 1.3 and 1.5 (mean 1.4), each
    # ± 12.706 · √((1/2 + 1/9) · 0.02) = ± 1.4 (Nadeau–Bengio, n_test/n_train = 1/9)
    assert ("| d | their a | a (m = 64), shared | 0.35 ± 0.01 (3) | 0.4 ± 1.4 (2) | +0.05 | "
            "1.2 (3) | 1.4 ± 1.4 (2) | +0.2 |") in text
    assert "| d | their c | c, own | 0.5 ± 0.1 (3) | not run | – | – | not run | – |" in text
    assert text.startswith("**Them 2019** (their ± as printed")
    assert "Read from: `repo@0:t.tex#L1`; `repo@0:t.tex#L2`." in text
    readme_text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                         figures=[], beside=text, notes="## Notes\n")
    at = readme_text.index("## Beside published numbers")
    assert readme_text.index("## Figures") < at < readme_text.index("## Notes")


@pytest.mark.parametrize(("rows", "fragment"), [
    (None, "its columns are a, b; a beside file has source"),
    ("Them,d,x,accuracy,0.3,0.01,3,a,shared,64,w\n", "row 2: metric='accuracy'; pass one of"),
    ("Them,d,x,rmse,nan,0.01,3,a,shared,64,w\n", "row 2: mean='nan' is not a finite number"),
    ("Them,d,x,rmse,0.3,-1,3,a,shared,64,w\n", "sd='-1' is not a finite number ≥ 0"),
    ("Them,d,x,rmse,0.3,0.1,0,a,shared,64,w\n", "trials='0' is not a positive integer"),
    ("Them,d,x,rmse,0.3,0.1,3,a,shared,6.4,w\n", "basis_size='6.4' is not a positive integer"),
    ('Them,d,"two\nlines",rmse,0.3,0.1,3,a,shared,64,w\n', "method='two\\nlines' is not one"),
    ("Them,d,a|b,rmse,0.3,0.1,3,a,shared,64,w\n", "method='a|b' is not one short line"),
    ("", "holds no number"),
])
def test_a_bad_beside_file_is_one_line(tmp_path, rows, fragment):
    from algorithms.errors import InputError
    from pipeline.publish.elsewhere import read_beside

    path = tmp_path / "beside.csv"
    path.write_text("a,b\n1,2\n" if rows is None else BESIDE_HEADER + rows)
    with pytest.raises(InputError) as err:
        read_beside(path)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"--beside {path}")


def test_beside_text_is_escaped_in_the_readme(tmp_path):
    from pipeline.publish.elsewhere import beside_tables, read_beside

    path = _beside(tmp_path, "<img src=x onerror=alert(1)>,d,![a](http://x/y.png),rmse,0.3,"
                             "0.1,3,a,shared,64,repo@0:t.tex#L1\n")
    text = beside_tables(job_table(_sweep()), read_beside(path))
    # as text, not rendered: a backslash before the tag's "<" and the image's "]"
    assert "<img" not in text.replace("\\<img", "") and "![a](http" not in text


def test_publish_takes_beside_files_and_refuses_a_bad_one_before_writing(tmp_path, capsys):
    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    good = _beside(tmp_path, "Them 2019,d,their a,rmse,0.35,0.01,3,a,shared,64,r@0:t#L1\n")
    bad = tmp_path / "bad.csv"
    bad.write_text(BESIDE_HEADER + "Them,d,x,rmse,soon,0.1,3,a,shared,64,w\n")
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main([*argv, "--beside", str(good), "--beside", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --beside {bad}, row 2: mean='soon' is not a finite number; fix the row\n"
    assert not out.exists()  # refused before anything was written
    assert main([*argv, "--beside", str(good)]) == 0
    text = (out / "README.md").read_text()
    assert "## Beside published numbers" in text and "| d | their a | a (m = 64), shared |" in text
    assert f"--out {out} --beside {good}" in text  # the command that renders it again


def test_a_publication_that_fails_leaves_its_folder_as_it_was(tmp_path, capsys, monkeypatch):
    """Every file is written into a folder of its own first: a figure above the size limit
    (checked after the CSVs are written) fails the publication with its one line and leaves
    the earlier publication in ``--out`` untouched, with nothing of the failed one beside it."""
    from pipeline.publish import render

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main(argv) == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert "README.md" in before and "s.csv" in before
    table = pd.read_csv(tmp_path / "s.csv")
    table["test_rmse"] *= 1.5  # a second run of the table, whose publication fails
    table.to_csv(tmp_path / "s.csv", index=False)
    monkeypatch.setattr(render, "MAX_FIGURE_BYTES", 1000)
    assert main(argv) == 2
    assert "above 1000; lower the frontier figures' dpi" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_fewer_than_three_entries_over_the_data_sets_give_no_friedman_test_and_say_so():
    """The Friedman test compares at least 3 entries: where the entries left out of a
    metric's ranks (one that gives no value of it, one not run on every split) leave fewer,
    there is no test, and the caption says so and names them; the other metric, with 3
    entries, is ranked."""
    from pipeline.publish.published import _cd_caption
    from pipeline.publish.ranking import ranks

    rows = []
    for d, dataset in enumerate(["d1", "d2", "d3"]):
        for i, algorithm in enumerate("pqrs"):
            for split in (0, 1):
                if (algorithm, dataset, split) == ("s", "d3", 1):
                    continue  # s never ran split 1 of d3
                rows.append({"mode": "shared", "dataset": dataset, "algorithm": algorithm,
                             "basis_size": np.nan, "split": split, "seed": 0, "status": "ok",
                             "test_rmse": 0.1 * (i + 1) + 0.01 * split + d,
                             # r gives no predictive variance
                             "test_nlpd": np.nan if algorithm == "r"
                             else 0.1 * (i + 1) - 0.01 * split,
                             "fit_seconds": 1.0, "learning_seconds": 0.0, "trivial": False,
                             "nlpd_above_mean": False, "contended": False})
    table = pd.DataFrame(rows)
    # NLPD: r gives none, s misses a split: p and q alone, 2 < 3 entries: no test
    nlpd = ranks(table, "shared", "nlpd")
    assert nlpd.names == ["p", "q"] and nlpd.datasets == ["d1", "d2", "d3"]
    assert nlpd.left_out == ["r (gives no test NLPD)", "s (not run on every split of d3)"]
    assert not len(nlpd.ranks) and np.isnan(nlpd.p)
    assert _cd_caption(nlpd, "nlpd") == [
        "No ranks of test NLPD: 2 entries over 3 data set(s) (the Friedman test needs at least "
        "3 entries and 2 data sets). Left out: r (gives no test NLPD); s (not run on every "
        "split of d3)."]
    # RMSE: p, q and r (r has an RMSE), s still left out: 3 entries, ranked alike on every
    # set (p 0.1 + d, q 0.2 + d, r 0.3 + d, + 0.005 each): ranks 1, 2, 3; Friedman χ² =
    # N(k − 1) = 3 · 2 = 6, p = e^(−3) = 0.05
    rmse = ranks(table, "shared", "rmse")
    assert rmse.names == ["p", "q", "r"] and rmse.left_out == ["s (not run on every split "
                                                              "of d3)"]
    assert rmse.ranks.tolist() == [1.0, 2.0, 3.0]
    assert (rmse.chi2, rmse.p) == pytest.approx((6.0, np.exp(-3)))
    assert "Friedman χ² = 6, p = 0.05;" in _cd_caption(rmse, "rmse")[0]


def test_a_publication_removes_the_files_of_the_one_before_it_does_not_write_again(tmp_path):
    """The run record lists every file a publication wrote; the next publication into the
    folder removes those it does not write again (an edition with fewer figures leaves none
    of the old ones behind) and nothing else (a file the user put there stays)."""
    import yaml

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main(argv) == 0
    first = sorted(path.name for path in out.iterdir())
    assert yaml.safe_load((out / "s.run.yaml").read_text())["files"] == first
    own = [name for name in first if "_own_" in name]
    assert own  # the own mode's figures
    (out / "mine.txt").write_text("the user's")
    table = pd.read_csv(tmp_path / "s.csv")
    table[table["mode"] == "shared"].to_csv(tmp_path / "s.csv", index=False)  # one mode
    import shutil

    shutil.copy(out / "s.run.yaml", tmp_path / "s.run.yaml")
    assert main(argv) == 0
    second = sorted(path.name for path in out.iterdir())
    assert second == sorted([name for name in first if name not in own] + ["mine.txt"])
    assert yaml.safe_load((out / "s.run.yaml").read_text())["files"] == [
        name for name in second if name != "mine.txt"]


def test_converged_is_recorded_only_under_the_own_protocol():
    """A peer that does not train at the shared kernel (GPyTorch's SGPR reports that run as
    not converged) is no learning stopped at its cap: ``converged`` is empty outside the own
    protocol, and the README counts only the own protocol's caps."""
    from pipeline.job.protocol import PROTOCOLS
    from pipeline.publish.job_table import OWN, complete

    assert OWN in PROTOCOLS
    table = job_table(_sweep())
    table["converged"] = pd.array([False] * len(table), dtype="boolean")
    table = complete(table)
    assert table.loc[table["mode"] == "shared", "converged"].isna().all()
    assert table.loc[table["mode"] == "own", "converged"].eq(False).all()
    text = readme(table, reference="b", sweep="s", code_version="git 0", commands=[],
                  figures=[], mode_order=["shared", "own"])
    assert "6 of 6 such rows did not converge: own: a (m = 8) on d (2); own: a (m = 64) on d " \
        "(2); own: b on d (2)." in text


def test_a_killed_publications_staging_folder_is_removed_by_the_next(tmp_path, capsys):
    """A publication stages its files beside ``--out`` (``.<out>.publishing``, naming its
    host and pid): one killed before its switch (its pid gone, no journal) leaves that folder
    and ``--out`` as they were; the next publication removes the folder. One that names no
    owner is taken for a publication starting while it is young, for a leftover once old."""
    import json
    import os
    import time

    from pipeline.publish import publication_files

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    _write_run_record(tmp_path / "s.run.yaml")
    out = tmp_path / "out"
    stage = tmp_path / ".out.publishing"
    assert publication_files.stage_path(out) == stage
    stage.mkdir()
    (stage / "s.csv").write_text("half")
    (stage / publication_files.OWNER).write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    argv = [str(tmp_path / "s.csv"), "--reference", "b", "--out", str(out)]
    assert main(argv) == 2  # another host's: it may be at work
    assert "is at work (pid 1 on elsewhere" in capsys.readouterr().err
    (stage / publication_files.OWNER).unlink()
    assert main(argv) == 2  # no owner yet, young: a publication starting
    assert "is at work (a publication starting" in capsys.readouterr().err
    old = time.time() - 2 * publication_files.LEFTOVER_SECONDS
    os.utime(stage, (old, old))
    assert main(argv) == 0
    assert not stage.exists() and (out / "s.csv").read_text() != "half"


def _with_learnings(ds: xr.Dataset) -> xr.Dataset:
    """``_sweep()`` with the records of what each fit used: a shared ARD learning for every
    job (hyper=ml), and a's own training under the own protocol (a peer's record)."""
    ds = ds.copy()
    dims, shape = ds["final_seconds"].dims, ds["final_seconds"].shape
    ds["final_hyper_kernel"] = (dims, np.full(shape, "rbf(variance=2.0, lengthscales=[1.5, "
                                                     "0.1234567890123456789])"))
    ds["final_hyper_lam"] = (dims, np.full(shape, 0.1))
    ds["final_hyper_y_offset"] = (dims, np.full(shape, 0.25))
    ds["final_hyper_iterations"] = (dims, np.full(shape, 12.0))
    ds["final_hyper_stop_reason"] = (dims, np.full(shape, "cap"))
    learned, own = np.full(shape, "", dtype="<U40"), np.full(shape, np.nan)
    learned[0, ..., 1] = "rbf(width=8.0, variance=3.0)"  # a, own: trained by itself
    own[0, ..., 1] = 1.0
    ds["final_learned_kernel"] = (dims, learned)
    ds["final_learned_lam"] = (dims, np.where(own == 1.0, 0.02, np.nan))
    ds["final_own_converged"] = (dims, own)
    ds["final_own_iterations_total"] = (dims, np.where(own == 1.0, 40.0, np.nan))
    ds["final_own_stop_reason"] = (dims, np.where(own == 1.0, "gradient", ""))
    ds["final_test_var_below_noise"] = (dims, np.full(shape, 0.125))
    return ds


def test_every_row_carries_the_hyperparameters_its_fit_used_and_they_read_back(tmp_path):
    """Each row's kernel, length scales, signal variance, σ² and prior-mean offset are the
    ones its fit used — a method's own training where it trained itself, else the shared
    learning's — with the learning that chose them; written as CSV and read back (a single
    length scale stays text, every digit kept)."""
    from pipeline.publish.job_table import read_table

    table = job_table(_with_learnings(_sweep()))
    own = (table["mode"] == "own") & (table["algorithm"] == "a")
    assert own.sum() == 4 and (~own).sum() == 8
    path = tmp_path / "s.csv"
    table.to_csv(path, index=False)
    back = read_table(path)
    assert back["lengthscales"].tolist() == table["lengthscales"].tolist()
    assert not (tmp_path / "s.csv").read_text().count('"')  # no quoting needed to parse it
    for rows in (table, back):
        mine = rows[(rows["mode"] == "own") & (rows["algorithm"] == "a")]
        assert set(mine["kernel"]) == {"rbf"} and set(mine["lengthscales"]) == {"2.0"}
        assert set(mine["signal_variance"]) == {3.0} and set(mine["noise_variance"]) == {0.02}
        assert set(mine["hyper_from"]) == {"own"} and set(mine["learning_iterations"]) == {40}
        assert set(mine["learning_stop_reason"]) == {"gradient"}
        assert mine["learning_converged"].eq(True).all()
        shared = rows[~((rows["mode"] == "own") & (rows["algorithm"] == "a"))]
        assert set(shared["lengthscales"]) == {"1.5;0.12345678901234568"}
        scales = [float(v) for v in str(shared["lengthscales"].iloc[0]).split(";")]
        assert scales == [1.5, 0.1234567890123456789]  # every digit a float holds
        assert set(shared["signal_variance"]) == {2.0} and set(shared["noise_variance"]) == {0.1}
        assert set(shared["hyper_from"]) == {"shared"}
        assert set(shared["learning_iterations"]) == {12}
        assert set(shared["learning_stop_reason"]) == {"cap"}
        assert shared["learning_converged"].eq(False).all()  # stopped at its cap
        assert set(rows["y_offset"]) == {0.25} and set(rows["var_below_noise"]) == {0.125}
    assert str(back["learning_iterations"].dtype) == "Int64"
    assert str(back["learning_converged"].dtype) == "boolean"


def test_a_fixed_kernel_run_publishes_its_configured_kernel_and_lam():
    """hyper=fixed: every row fitted with the run's kernel and lam, targets not centred
    (offset 0), and no learning; an isotropic RBF's width 2ℓ² = 0.5 is the length ℓ = 0.5."""
    ds = _sweep()
    ds.attrs["config"] = {"dataset": {"split": 0}, "hyper": {"name": "fixed"}, "lam": 0.1,
                          "kernel": {"name": "rbf", "width": 0.5, "variance": 1.5,
                                     "lengthscales": None}}
    table = job_table(ds)
    assert set(table["kernel"]) == {"rbf"} and set(table["lengthscales"]) == {"0.5"}
    assert set(table["signal_variance"]) == {1.5} and set(table["noise_variance"]) == {0.1}
    assert set(table["y_offset"]) == {0.0} and set(table["hyper_from"]) == {"config"}
    for name in ("learning_iterations", "learning_stop_reason", "learning_converged"):
        assert table[name].isna().all(), name
    # a run whose record says nothing of its hyperparameters (an earlier one): empty
    bare = job_table(_sweep())
    for name in ("kernel", "lengthscales", "noise_variance", "y_offset", "hyper_from"):
        assert bare[name].isna().all(), name


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "rbf(width=os.sep)",
                                  "rbf(1.0)", "rbf(**{'width': 1.0})", "nokernel(width=1.0)",
                                  "rbf(width=-1.0)", "", "rbf(width=1.0"])
def test_a_kernel_the_product_did_not_write_is_one_line(text):
    """A recorded kernel is parsed as data (names and literals only), never run: anything
    else is one line naming it."""
    from algorithms.errors import InputError
    from pipeline.publish.job_table import kernel_from_text

    with pytest.raises(InputError) as err:
        kernel_from_text(text)
    assert "\n" not in str(err.value)


def test_a_recorded_kernel_reads_back_as_the_same_kernel():
    from algorithms.kernels import Kernel
    from pipeline.publish.job_table import kernel_columns, kernel_from_text

    for kernel in (Kernel("rbf", {"width": 0.3, "variance": 2.5}),
                   Kernel("matern32", {"lengthscales": [0.1, 7.25], "variance": 1.0}),
                   Kernel("polynomial", {"degree": 3, "c": 0.5})):
        back = kernel_from_text(str(kernel))
        assert back == kernel
    assert kernel_columns(Kernel("rbf", {"width": 0.3})) == ("rbf", repr((0.3 / 2) ** 0.5), 1.0)
    assert kernel_columns(Kernel("polynomial", {"degree": 3})) == ("polynomial", "", 1.0)


def test_an_option_a_method_does_not_take_gives_it_no_basis_size():
    """A run that fixes ``algorithm.max_basis`` ignores it for a method without that option
    (the exact GP): its row has no basis size, so that the row fits the job again as it ran."""
    dims = ("algorithm", "dataset")
    ds = xr.Dataset({"final_test_rmse": (dims, [[0.3], [0.4]]),
                     "status": (dims, [["ok"], ["ok"]]), "job_hash": (dims, [["e"], ["n"]])},
                    coords={"algorithm": ["exact", "nystrom"], "dataset": ["d"]},
                    attrs={"config": {"dataset": {"split": 0}, "protocol": "shared",
                                      "algorithm": {"max_basis": 32}}})
    table = job_table(ds).set_index("algorithm")
    assert pd.isna(table.loc["exact", "basis_size"]) and table.loc["nystrom", "basis_size"] == 32
