"""The report's figures and table on a tiny sweep built in memory: readable settings, captions
that say what is drawn and what is not, and table cells without '± 0' or a negative zero."""

import numpy as np
import pytest
import xarray as xr

from pipeline.report.figures import math_text, metric_figure, setting_label
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
    assert setting_label(ds, {"algorithm": "sgma", "lam": 0.1}) == "sgma (σ² = 0.1)"
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


def test_every_method_has_one_colour_and_marker_and_no_experiment_repeats_a_colour():
    """A method looks the same in every figure (issue 53: sgma was a brown "+" in the published
    fig1 and a pink star in fig5): a fixed style per method, distinct (colour, marker) pairs,
    and the methods one experiment draws side by side in colours of their own."""
    from omegaconf import OmegaConf

    from algorithms.registry import REGISTRY
    from pipeline.config import CONF_DIR
    from pipeline.report.style import method_style, method_styles

    METHOD_STYLES = method_styles()

    assert set(REGISTRY) <= set(METHOD_STYLES)
    assert len(set(METHOD_STYLES.values())) == len(METHOD_STYLES)
    assert method_style("a_new_method") == method_style("a_new_method")  # stable fallback
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        sweeper = OmegaConf.to_container(OmegaConf.load(path)).get("hydra", {}).get("sweeper", {})
        grids = [sweeper.get("params") or {}, *(sweeper.get("grids") or [])]
        names = {n.strip() for grid in grids for n in str(grid.get("algorithm", "")).split(",")
                 if n.strip()}
        colours = [METHOD_STYLES[n][0] for n in sorted(names)]
        assert len(set(colours)) == len(colours), (path.name, sorted(names))


def test_a_method_keeps_its_style_whatever_else_a_figure_draws():
    from pipeline.report.style import line_styles, method_style

    alone = line_styles([("sgma", "sgma"), ("cg", "cg")])
    more = line_styles([("exact", "exact"), ("gpytorch_svgp", "gpytorch_svgp"), ("sgma", "sgma")])
    assert alone["sgma"] == more["sgma"] == dict(zip(("color", "marker"), method_style("sgma"),
                                                     strict=True))
    # a method drawn at several settings: its marker, shades of its colour
    shades = line_styles([("sgma (m = 1)", "sgma"), ("sgma (m = 2)", "sgma"), ("cg", "cg")])
    assert {s["marker"] for k, s in shades.items() if k.startswith("sgma")} == {"P"}
    assert shades["sgma (m = 1)"]["color"] != shades["sgma (m = 2)"]["color"]
    assert shades["cg"] == alone["cg"]


def test_published_frontier_figures_draw_a_method_alike_in_every_mode(tmp_path, monkeypatch):
    """The published figures of two modes with different methods: sgma in one colour and
    marker in both."""
    from pipeline.report import frontier

    drawn: list[dict] = []
    real = frontier.plt.Axes.scatter

    def scatter(ax, xs, ys, *args, **kwargs):
        drawn.append({"color": kwargs["color"], "marker": kwargs["marker"]})
        return real(ax, xs, ys, *args, **kwargs)

    monkeypatch.setattr(frontier.plt.Axes, "scatter", scatter)
    spec = {"over": "m", "cost": ["s"], "budgets": [], "logx": True}
    one = {("rmse", "d"): [("sgma", 1, 1.0, 0.5, 1), ("cg", None, 2.0, 0.4, 1)]}
    two = {("rmse", "d"): [("exact", None, 3.0, 0.3, 1), ("gpytorch_svgp", 1, 1.0, 0.6, 1),
                           ("sgma", 1, 1.0, 0.5, 1)]}
    frontier.draw(one, ["d"], ["rmse"], spec, tmp_path, 1, "_a", "", None)
    first = drawn[1]  # sgma, sorted after cg
    drawn.clear()
    frontier.draw(two, ["d"], ["rmse"], spec, tmp_path, 3, "_b", "", None)
    assert drawn[2] == first  # sgma, sorted after exact and gpytorch_svgp


def test_a_caption_is_written_under_the_figure_not_inside_it(tmp_path, monkeypatch):
    from pipeline.report import style

    saved = []
    monkeypatch.setattr(style, "save_figure", lambda fig, path, dpi: saved.append(fig))
    figure = metric_figure(_sweep(), {"metric": "gap", "logy": True}, tmp_path, "fig1_gap")
    assert figure.caption and saved
    texts = [t.get_text() for t in saved[0].findobj(match=lambda a: hasattr(a, "get_text"))]
    assert not any("Lines: mean" in t for t in texts), texts
