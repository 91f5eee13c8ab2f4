"""The published comparison in ``docs/results/`` (``pipeline.publish`` on the uci_frontier
run): the committed table follows its schema, holds the run's grid, and the committed README
is what that table renders (its budget and reference tables), with its figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.publish import COLUMNS, MAX_FIGURE_BYTES, budget_tables, read_table, reference_table

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SETS = {"abalone", "kin40k", "protein", "elevators", "pol", "pumadyn32nm"}


def _table() -> pd.DataFrame:
    return read_table(RESULTS / "uci_frontier.csv")


def test_the_committed_table_follows_its_schema():
    table = _table()
    assert table.columns.tolist() == list(COLUMNS)
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
    figures = sorted(RESULTS.glob("*.png"))
    assert len(figures) == 4
    for figure in figures:
        assert 20_000 < figure.stat().st_size <= MAX_FIGURE_BYTES, figure.name
        assert f"![{figure.name}]({figure.name})" in text
