"""The published comparison in ``docs/results/`` (``pipeline.publish`` on the uci_frontier
run): the committed table follows its schema, holds the run's grid, and the committed README
is what that table renders (its budget and reference tables), with its figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.publish import (
    COLUMNS,
    MAX_FIGURE_BYTES,
    baselines,
    budget_tables,
    read_table,
    reference_table,
)
from pipeline.report import comparison

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SETS = {"abalone", "kin40k", "protein", "elevators", "pol", "pumadyn32nm"}


def _table() -> pd.DataFrame:
    return read_table(RESULTS / "uci_frontier.csv")


def test_the_committed_table_follows_its_schema():
    table = _table()
    assert table.columns.tolist() == list(COLUMNS)
    assert pd.read_csv(RESULTS / "uci_frontier.csv", nrows=1).columns.tolist() == list(COLUMNS)
    assert set(table["dataset"]) == SETS and set(table["mode"]) == {"shared", "own"}
    assert set(table["split"]) == {0, 1, 2, 3, 4}
    assert set(table["status"]) <= {"ok", "failed"}
    assert set(table["basis_size"].dropna()) <= {128, 512, 1024}
    ok = table[table["status"] == "ok"]
    for column in ("test_rmse", "fit_seconds", "learning_seconds", "threads"):
        assert np.isfinite(ok[column].astype(float)).all(), column
    assert (ok["test_rmse"] > 0).all() and (ok["fit_seconds"] >= 0).all()
    assert ok["cpu_model"].notna().all()
    assert ((ok["coverage_2sd"].dropna() >= 0) & (ok["coverage_2sd"].dropna() <= 1)).all()
    # one row per job and mode: no setting twice
    keys = ["mode", "dataset", "algorithm", "basis_size", "split"]
    assert not table.duplicated(keys).any()


def test_every_set_and_split_has_an_exact_reference():
    ok = _table()
    ok = ok[ok["status"] == "ok"]
    for dataset in SETS:
        for split in range(5):
            here = ok[(ok["dataset"] == dataset) & (ok["split"] == split)]
            assert {"exact", "cg"} & set(here["algorithm"]), (dataset, split)
        assert 0 in set(ok[(ok["dataset"] == dataset) & (ok["algorithm"] == "exact")]["split"])


def test_the_committed_readme_renders_from_the_committed_table():
    table, text = _table(), (RESULTS / "README.md").read_text()
    assert budget_tables(table, order=["shared", "own"]) in text
    assert reference_table(table, "exact,cg", order=["shared", "own"]) in text
    for mode in ("shared", "own"):
        assert comparison.against_reference(table, "exact,cg", mode) in text
        for metric in ("rmse", "nlpd"):
            assert comparison.rank_table(comparison.ranks(table, mode, metric)) in text
    frontier = sorted(RESULTS.glob("fig*_frontier_*.png"))
    assert len(frontier) == 8  # 2 modes × 2 metrics × (fit-only, learning + fit seconds)
    for figure in frontier:
        assert 20_000 < figure.stat().st_size <= MAX_FIGURE_BYTES, figure.name
        assert f"![{figure.name}]({figure.name})" in text
    # a critical-difference diagram per mode and metric
    cd = sorted(path.name for path in RESULTS.glob("cd_*.png"))
    assert cd == [f"cd_{mode}_{metric}.png" for mode in ("own", "shared")
                  for metric in ("nlpd", "rmse")]
    for name in cd:
        assert 5_000 < (RESULTS / name).stat().st_size <= MAX_FIGURE_BYTES, name
        assert f"![{name}]({name})" in text


def test_every_mean_over_splits_has_a_confidence_interval():
    text = (RESULTS / "README.md").read_text()
    assert "95 % confidence interval over the splits (Student t" in text
    assert "paired t-test on their per-split differences" in text
    # exact GP on pol, 5 splits: mean ± t(0.975, 4) · sd/√5
    pol = _table()
    pol = pol[(pol["dataset"] == "pol") & (pol["algorithm"] == "exact") & (pol["mode"] == "own")]
    rmse = pol["test_rmse"].to_numpy(float)
    half = 2.7764451051977987 * rmse.std(ddof=1) / np.sqrt(5)
    assert f"| pol | exact | {rmse.mean():.4g} ± {half:.2g} (5) |" in text
    assert "± sd" not in text[:text.index("## Figures")]  # the notes after it are the lead's


def test_the_frontier_figures_draw_no_trivial_setting():
    """The committed figures are drawn from the committed table's ranked settings: SGPR's
    white noise on pumadyn32nm (own) is no point, and every trivial setting is named as left
    out in its figure's caption."""
    from pipeline.report.comparison import label, rows_of_mode, settings
    from pipeline.report.table_frontier import table_points

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
    own = rows_of_mode(rows, "own")
    assert not [p for p in table_points(own, "pumadyn32nm", "rmse", "fit")
                if p[0] == "gpytorch_sgpr"]


def test_the_trivial_sgpr_on_pumadyn32nm_is_flagged_and_never_ranked():
    table, text = _table(), (RESULTS / "README.md").read_text()
    sgpr = table[(table["algorithm"] == "gpytorch_sgpr") & (table["mode"] == "own")
                 & (table["dataset"] == "pumadyn32nm")]
    assert len(sgpr) == 10 and sgpr["trivial"].all()
    assert (sgpr["test_rmse"] >= 0.99 * sgpr["baseline_rmse"]).all()
    # the baselines are the training-mean predictor's on the shipped data
    (rmse, nlpd), = baselines([("pumadyn32nm", 0)]).values()
    first = sgpr[sgpr["split"] == 0].iloc[0]
    assert (first["baseline_rmse"], first["baseline_nlpd"]) == (rmse, nlpd)
    assert "own: gpytorch_sgpr (m = 512) on pumadyn32nm (5 of 5 splits; RMSE 0.9907)" in text
    # never ranked: not in a budget table, not in the ranks across data sets
    budgets = text[text.index("## Best method"):text.index("## Ranks across")]
    own = budgets[budgets.index("**own**"):]
    row = next(line for line in own.splitlines() if line.startswith("| pumadyn32nm |"))
    assert "gpytorch_sgpr" not in row
    ranks = comparison.ranks(table, "own", "rmse")
    assert "gpytorch_sgpr" not in ranks["names"]
    assert any(entry.startswith("gpytorch_sgpr (no ranked setting") for entry in
               ranks["left_out"])
    # every finished row is judged; the failed ones are not
    ok = table["status"] == "ok"
    assert table.loc[ok, "trivial"].notna().all() and table.loc[~ok, "trivial"].isna().all()


def test_the_committed_legs_of_the_second_edition_verify_together():
    """The second edition's run is kept unit by unit in ``docs/results/uci_frontier_legs``
    (``pipeline.report.legs``): every committed leg's seal and CSV verify, all were made under
    one protocol and, algorithm by algorithm, one code version, and each unit holds its
    reference, the exact GP at the shared kernel, with a finite test NLPD."""
    from pipeline.report.legs import read_legs

    sweep, rows, run = read_legs(RESULTS / "uci_frontier_legs")
    assert sweep == "uci_frontier" and run["mode_order"] == ["shared", "own"]
    units = {(leg["dataset"], leg["split"]) for leg in run["legs"]}
    assert units and len(units) == len(run["legs"])
    assert set(map(tuple, rows[["dataset", "split"]].drop_duplicates().to_numpy())) == units
    assert not rows.duplicated(["mode", "dataset", "algorithm", "basis_size", "split",
                                "seed"]).any()  # one row per job and mode
    for dataset, split in units:
        exact = rows[(rows["dataset"] == dataset) & (rows["split"] == split)
                     & (rows["algorithm"] == "exact") & (rows["mode"] == "shared")]
        assert len(exact) == 1 and exact["status"].eq("ok").all(), (dataset, split)
        assert np.isfinite(exact["test_nlpd"].astype(float)).all(), (dataset, split)
