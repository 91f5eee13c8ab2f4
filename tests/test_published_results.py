"""The published comparison in ``docs/results/`` (``pipeline.publish`` on the uci_frontier
run): the committed table follows its schema, holds the run's grid, and the committed README
is what that table renders (its budget and reference tables), with its figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.publish import comparison, ranking
from pipeline.publish.comparison import BUDGETS, reference_table
from pipeline.publish.job_table import ADDED_AFTER_SECOND_EDITION, COLUMNS, baselines, read_table
from pipeline.publish.ranking import budget_tables
from pipeline.publish.render import MAX_FIGURE_BYTES

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SETS = {"abalone", "pumadyn32nm", "pol", "elevators", "bike", "kin40k", "protein",
        "keggdirected", "keggundirected"}
SPLITS = set(range(10))


def _table() -> pd.DataFrame:
    return read_table(RESULTS / "uci_frontier.csv")


def test_the_committed_table_follows_its_schema():
    """The current columns, in order (the second edition re-rendered under the third edition's
    rules); those added after it (the hyperparameters of each fit and its learning: issue 85)
    are empty, as its run did not record them."""
    table = _table()
    assert table.columns.tolist() == list(COLUMNS)
    assert pd.read_csv(RESULTS / "uci_frontier.csv", nrows=1).columns.tolist() == list(COLUMNS)
    assert table[list(ADDED_AFTER_SECOND_EDITION)].isna().all().all()
    assert set(table["dataset"]) == SETS and set(table["mode"]) == {"shared", "own"}
    assert set(table["split"]) == SPLITS
    assert set(table["status"]) <= {"ok", "failed"}
    assert set(table["basis_size"].dropna()) <= {128, 512, 1024}
    ok = table[table["status"] == "ok"]
    for column in ("test_rmse", "fit_seconds", "learning_seconds", "threads"):
        assert np.isfinite(ok[column].astype(float)).all(), column
    assert (ok["test_rmse"] > 0).all() and (ok["fit_seconds"] >= 0).all()
    assert ok["cpu_model"].notna().all()
    assert ((ok["coverage_2sd"].dropna() >= 0) & (ok["coverage_2sd"].dropna() <= 1)).all()
    # one row per job and mode: no setting twice
    keys = ["mode", "dataset", "algorithm", "basis_size", "split", "seed"]
    assert not table.duplicated(keys).any()


def test_every_set_and_split_has_a_reference_with_nlpd():
    """The reference of every (set, split): the exact GP at the shared kernel, finished with a
    finite test NLPD, and PCG beside it (the exact GP's solve by conjugate gradients)."""
    ok = _table()
    ok = ok[ok["status"] == "ok"]
    for dataset in SETS:
        for split in SPLITS:
            here = ok[(ok["dataset"] == dataset) & (ok["split"] == split)]
            exact = here[(here["algorithm"] == "exact") & (here["mode"] == "shared")]
            assert len(exact) == 1, (dataset, split)
            assert np.isfinite(exact["test_nlpd"].astype(float)).all(), (dataset, split)
            assert "cg" in set(here["algorithm"]), (dataset, split)


def test_the_committed_readme_renders_from_the_committed_table():
    table, text = _table(), (RESULTS / "README.md").read_text()
    solvers = ["exact", "cg"]
    assert budget_tables(table, BUDGETS, order=["shared", "own"], solvers=solvers) in text
    assert reference_table(table, "exact,cg", order=["shared", "own"]) in text
    for mode in ("shared", "own"):
        assert comparison.against_reference(table, "exact,cg", mode) in text
        for metric in ("rmse", "nlpd"):
            assert ranking.rank_table(ranking.ranks(table, mode, metric, solvers)) in text
    frontier = sorted(RESULTS.glob("fig*_frontier_*.png"))
    assert len(frontier) == 8  # 2 modes × 2 metrics × (fit-only, learning + fit seconds)
    for figure in frontier:
        assert 20_000 < figure.stat().st_size <= MAX_FIGURE_BYTES, figure.name
        assert f"![{figure.name}]({figure.name})" in text
    # a critical-difference diagram per mode and metric with ranks (at least 3 entries over 2
    # data sets); the others say why there are none
    cd = sorted(path.name for path in RESULTS.glob("cd_*.png"))
    ranked = {(mode, metric): ranking.ranks(table, mode, metric, solvers)
              for mode in ("own", "shared") for metric in ("nlpd", "rmse")}
    assert cd == [f"cd_{mode}_{metric}.png" for (mode, metric), r in ranked.items()
                  if len(r.ranks)]
    assert cd == ["cd_own_rmse.png", "cd_shared_nlpd.png", "cd_shared_rmse.png"]
    # the own protocols ran on split 0 only: in the own mode the entries that learn nothing
    # themselves are ranked, every one that learns is left out, named
    assert "No ranks of test NLPD: 2 entries over 9 data set(s)" in text
    assert "gpytorch_sgpr (m = 128) (not run on every split of abalone" in text
    # PCG and the exact GP are one entry, the best in every ranked table
    for (mode, metric), result in ranked.items():
        if len(result.ranks):
            assert result.best == "exact [or cg]" and "cg" not in result.names, (mode, metric)
    for name in cd:
        assert 5_000 < (RESULTS / name).stat().st_size <= MAX_FIGURE_BYTES, name
        assert f"![{name}]({name})" in text


def test_every_mean_over_splits_has_a_corrected_confidence_interval():
    text = (RESULTS / "README.md").read_text()
    assert "Nadeau and Bengio's corrected resampled t" in text
    assert "Wilcoxon's signed-rank test on their per-split differences" in text
    # exact GP on pol, 10 splits of 90/10: mean ± t(0.975, 9) · √((1/10 + n_test/n_train) s²)
    pol = _table()
    pol = pol[(pol["dataset"] == "pol") & (pol["algorithm"] == "exact") & (pol["mode"] == "own")]
    rmse = pol["test_rmse"].to_numpy(float)
    assert len(rmse) == 10
    rho = comparison.test_fraction("pol") / (1 - comparison.test_fraction("pol"))
    assert abs(rho - 1 / 9) < 1e-3  # pol: 13 500 training rows, 1500 test rows
    half = 2.2621571627409915 * np.sqrt((1 / 10 + rho) * rmse.var(ddof=1))
    assert f"| pol | exact | {rmse.mean():.4g} ± {half:.2g} (10) |" in text
    assert "± sd" not in text[:text.index("## Figures")]  # the notes after it are the lead's


def test_the_frontier_figures_draw_no_trivial_setting():
    """The committed figures are drawn from the committed table's ranked settings only: no
    trivial setting is a point, and every trivial setting is named as left out in its figure's
    caption."""
    from pipeline.publish.comparison import label, rows_of_mode, settings
    from pipeline.publish.table_frontier import table_points

    table, text = _table(), (RESULTS / "README.md").read_text()
    rows = settings(table)
    for mode in ("shared", "own"):
        here = rows_of_mode(rows, mode)
        for dataset in SETS:
            drawn = {p[:2] for p in table_points(here, dataset, "rmse", "cost")}
            trivial = here[(here["dataset"] == dataset) & (here["trivial"] > 0)]
            for _, r in trivial.iterrows():
                assert (r["algorithm"], None if r["basis"] < 0 else int(r["basis"])) not in drawn
                assert f"{label(r)} on {dataset}" in text
            ranked = here[(here["dataset"] == dataset) & here["ranked"]]
            assert drawn <= {(r["algorithm"], None if r["basis"] < 0 else int(r["basis"]))
                             for _, r in ranked.iterrows()}, (mode, dataset)


def _budget_rows(text: str, mode: str) -> dict[str, list[str]]:
    """The README's budget-table rows of ``mode``, per data set (both costs' tables)."""
    budgets = text[text.index("## Best method"):text.index("## The reference")]
    start = budgets.index(f"**{mode}**")
    following = [budgets.index(f"**{other}**") for other in ("shared", "own")
                 if f"**{other}**" in budgets and budgets.index(f"**{other}**") > start]
    section = budgets[start:min(following, default=len(budgets))]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| dataset"):
            rows.setdefault(line.split(" | ")[0].removeprefix("| "), []).append(line)
    return rows


def test_a_trivial_setting_is_flagged_and_ranked_last():
    """A setting no better than the training-mean predictor on some split (the ``trivial``
    flag, :func:`pipeline.publish.stats.trivial`) is named, is in no budget table's cell, and
    ranks last on that data set (marked *failed*); the baselines it is judged by are the
    training-mean predictor's on the shipped data."""
    from pipeline.publish.comparison import label, rows_of_mode, settings

    table, text = _table(), (RESULTS / "README.md").read_text()
    rows = settings(table)
    trivial = rows[rows["trivial"] > 0]
    assert len(trivial) and not trivial["ranked"].any()
    for mode in ("shared", "own"):
        cells = _budget_rows(text, mode)
        for _, r in rows_of_mode(trivial, mode).iterrows():
            assert f"{mode}: {label(r)} on {r['dataset']} (" in text
            assert not any(f" {label(r)}: " in line for line in cells.get(r["dataset"], []))
        result = ranking.ranks(table, mode, "rmse", ["exact", "cg"])
        for _, r in rows_of_mode(trivial, mode).iterrows():
            name = ranking.entry_label(r["algorithm"], r["basis"], ["exact", "cg"])
            if name in result.names:  # ran every split there: ranked last, marked
                j, i = result.names.index(name), result.datasets.index(r["dataset"])
                assert np.isinf(result.scores[i, j])
                assert r["dataset"] in result.failures[name]
    # the baselines are the training-mean predictor's on the shipped data
    (rmse, nlpd), = baselines([("bike", 0)]).values()
    first = table[(table["dataset"] == "bike") & (table["split"] == 0)].iloc[0]
    assert (first["baseline_rmse"], first["baseline_nlpd"]) == (rmse, nlpd)
    # every finished row is judged; the failed ones are not
    ok = table["status"] == "ok"
    assert table.loc[ok, "trivial"].notna().all() and table.loc[~ok, "trivial"].isna().all()


def test_the_committed_legs_of_the_second_edition_verify_together():
    """The second edition's run is kept unit by unit in ``docs/results/uci_frontier_legs``
    (``pipeline.publish.legs``): every committed leg's seal and CSV verify, all were made under
    one protocol and, algorithm by algorithm, one code version, and each unit holds its
    reference, the exact GP at the shared kernel, with a finite test NLPD."""
    from pipeline.publish.legs import read_legs

    sweep, rows, run = read_legs(RESULTS / "uci_frontier_legs")
    assert sweep == "uci_frontier" and run["mode_order"] == ["shared", "own"]
    units = {(leg["dataset"], leg["split"]) for leg in run["legs"]}
    assert units == {(dataset, split) for dataset in SETS for split in SPLITS}
    assert len(units) == len(run["legs"]) == 90
    assert set(map(tuple, rows[["dataset", "split"]].drop_duplicates().to_numpy())) == units
    assert not rows.duplicated(["mode", "dataset", "algorithm", "basis_size", "split",
                                "seed"]).any()  # one row per job and mode
    for dataset, split in units:
        exact = rows[(rows["dataset"] == dataset) & (rows["split"] == split)
                     & (rows["algorithm"] == "exact") & (rows["mode"] == "shared")]
        assert len(exact) == 1 and exact["status"].eq("ok").all(), (dataset, split)
        assert np.isfinite(exact["test_nlpd"].astype(float)).all(), (dataset, split)
