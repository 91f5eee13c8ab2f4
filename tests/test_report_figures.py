"""The report's figures and table on a tiny sweep built in memory: readable settings, captions
that say what is drawn and what is not, and table cells without '± 0' or a negative zero."""

import numpy as np
import pytest
import xarray as xr

from pipeline.report.figures import _label, math_text, metric_figure
from pipeline.report.tables import headline_table

pytestmark = pytest.mark.unit


def _sweep() -> xr.Dataset:
    """exact (one step, gap -2.7e-16) and sgma at σ² = 0.01 and 0.1 (the same gap curve
    twice: one hides the other), two seeds, 40 steps."""
    algorithms, lams, seeds, steps = ["exact", "sgma"], [0.01, 0.1], [0, 1], np.arange(1, 41)
    dims = ("algorithm", "dataset", "lam", "seed")
    gap = np.full((2, 1, 2, 2, 40), np.nan)
    gap[0, ..., 0] = -2.741e-16
    gap[1] = 0.4 * steps ** -1.5  # decades apart from start to end
    hashes = np.array([[[[f"{a}{lam}" if a == "exact" else f"{a}{lam}{s}" for s in seeds]
                         for lam in lams]] for a in algorithms])
    n_basis = np.array([[[[4000, 4000]] * 2], [[[407, 407]] * 2]], dtype=float)
    return xr.Dataset(
        {"gap": ((*dims, "step"), gap), "final_gap": (dims, np.nanmax(gap, axis=-1)),
         "final_n_basis": (dims, n_basis), "job_hash": (dims, hashes),
         "status": (dims, np.full(hashes.shape, "ok"))},
        coords={"algorithm": algorithms, "dataset": ["abalone"], "lam": lams, "seed": seeds,
                "step": steps})


def test_a_step_figure_names_settings_and_captions_what_it_draws(tmp_path):
    ds = _sweep()
    assert _label(ds, {"algorithm": "sgma", "lam": 0.1}) == "sgma (σ² = 0.1)"
    figure = metric_figure(ds, {"metric": "gap", "title": "gap"}, tmp_path, "fig1_gap")
    assert figure.path.stat().st_size > 5000
    caption = figure.caption
    assert caption.startswith("Lines: mean over the 2 runs (seeds) of a setting")
    assert ("drawn over each other (within 1% of the axis height; told apart by marker and "
            "line style): sgma (σ² = 0.01) and sgma (σ² = 0.1)") in caption
    assert "not drawn (one step, ≤ 1e-12: zero to round-off, off the log axis): " \
           "exact (σ² = 0.01), exact (σ² = 0.1)" in caption  # log: the values span decades
    assert "lam=" not in caption and "band" not in caption  # identical seeds: no band


def test_the_table_has_readable_headers_and_no_negative_zero_or_plus_minus_zero():
    ds = _sweep()
    from pipeline.results.variables import describe_dataset

    table = headline_table(describe_dataset(ds))
    header = table.splitlines()[0]
    assert header.startswith("| dataset | setting | n | basis size | relative duality gap")
    assert "final_" not in header
    assert "| abalone | exact (σ² = 0.01) | 1 | 4000 | < 1e-14 |" in table
    assert "| abalone | sgma (σ² = 0.1) | 2 | 407 |" in table
    assert "± 0 " not in table and "| -" not in table


def test_formulas_become_math_text():
    assert math_text("R(w^k) − R(ŵ)") == r"$R(w^{k})$ − $R(\hat{w})$"
    assert math_text("(L − L*_min)/|L_min|") == "(L − $L^*_{min}$)/|$L_{min}$|"
    assert math_text("training points (dataset.n_train)") == "training points (dataset.n_train)"
