"""The third edition's pilot in ``docs/uci_frontier_pilot3/`` (``pipeline.publish`` on the
uci_frontier grid at abalone and pumadyn32nm, splits 0–2): its README is what its committed
table renders, holds its notes, and the notes' claims hold in the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.publish import comparison, ranking
from pipeline.publish.job_table import read_table
from pipeline.publish.render import MAX_FIGURE_BYTES

PILOT = Path(__file__).resolve().parent.parent / "docs" / "uci_frontier_pilot3"
NOTES = PILOT.parent / "uci_frontier_pilot3_notes.md"


def _table():
    return read_table(PILOT / "uci_pilot3.csv")


def test_the_pilot_readme_renders_from_its_table_with_its_notes_and_figures():
    table, text = _table(), (PILOT / "README.md").read_text()
    assert set(table["dataset"]) == {"abalone", "pumadyn32nm"}
    assert set(table["split"]) == {0, 1, 2} and set(table["mode"]) == {"own", "shared"}
    for mode in ("shared", "own"):
        assert comparison.against_reference(table, "exact,cg", mode) in text
        for metric in ("rmse", "nlpd"):
            assert ranking.rank_table(ranking.ranks(table, mode, metric, ["exact", "cg"])) in text
    assert NOTES.read_text().strip() in text
    figures = sorted(PILOT.glob("*.png"))
    assert len(figures) == 12  # 8 frontier figures, 4 critical-difference diagrams
    for figure in figures:
        assert 5_000 < figure.stat().st_size <= MAX_FIGURE_BYTES, figure.name
        assert f"![{figure.name}]({figure.name})" in text


def test_the_notes_claims_hold_in_the_pilot_table():
    """From the one start, every sparse learner at m = 128 on pumadyn32nm ends at white noise
    (trivial, ranked last) while the exact GP does not; abalone has no trivial own fit."""
    table = _table()
    own = table[(table["mode"] == "own") & (table["status"] == "ok")]
    puma = own[own["dataset"] == "pumadyn32nm"]
    at_128 = puma[(puma["basis_size"] == 128)
                  & ~puma["algorithm"].isin(["sparse_online", "sklearn_nystroem"])]
    learners = set(at_128["algorithm"])
    assert {"nystrom", "sgma", "incomplete_cholesky", "zhang_kappa_greedy",
            "gpytorch_sgpr[diagonal_correction=true]",
            "gpytorch_sgpr[diagonal_correction=false]"} <= learners
    trivial = at_128[at_128["algorithm"] != "gpytorch_svgp"]
    assert trivial["trivial"].astype(bool).all()
    assert (trivial["noise_variance"].astype(float) > 0.99).all()
    svgp = at_128[at_128["algorithm"] == "gpytorch_svgp"]
    assert svgp["trivial"].astype(bool).sum() == 2 and len(svgp) == 3
    exact = puma[puma["algorithm"] == "exact"]
    assert len(exact) == 3 and not exact["trivial"].astype(bool).any()
    assert np.isclose(exact["test_rmse"].astype(float).mean(), 0.2068, atol=5e-4)
    abalone = own[own["dataset"] == "abalone"]
    assert not abalone["trivial"].astype(bool).any()
    refused = table[(table["algorithm"] == "sklearn_gpr") & (table["dataset"] == "pumadyn32nm")
                    & (table["mode"] == "own")]  # 41.4 GiB to learn: refused, ranked failed
    assert set(refused["split"]) == {0, 1, 2} and set(refused["status"]) == {"failed"}
