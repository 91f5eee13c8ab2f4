"""The accuracy–time report: points per setting, the Pareto frontier, budgets and targets."""

import numpy as np
import xarray as xr

from pipeline.report.frontier import budget_table, pareto, points


def _sweep() -> xr.Dataset:
    """Two algorithms × two basis sizes × two splits; ``b`` ignores max_basis (one job)."""
    dims = ("algorithm", "dataset", "algorithm.max_basis", "dataset.split")
    rmse = np.array([[[[0.5, 0.7], [0.3, 0.5]]], [[[0.45, 0.45], [0.45, 0.45]]]])
    secs = np.array([[[[1.0, 3.0], [10.0, 30.0]]], [[[5.0, 5.0], [5.0, 5.0]]]])
    hashes = np.array([[[["a1", "a2"], ["a3", "a4"]]], [[["b1", "b2"], ["b1", "b2"]]]])
    return xr.Dataset(
        {"final_test_rmse": (dims, rmse), "final_seconds": (dims, secs),
         "final_hyper_seconds": (dims, np.full(rmse.shape, 1.0)),
         "status": (dims, np.full(rmse.shape, "ok")), "job_hash": (dims, hashes)},
        coords={"algorithm": ["a", "b"], "dataset": ["d"], "algorithm.max_basis": [8, 64],
                "dataset.split": [0, 1]})


SPEC = {"metrics": ["final_test_rmse"], "cost": ["final_seconds", "final_hyper_seconds"],
        "over": "algorithm.max_basis", "budgets": [5, 60], "target": {"final_test_rmse": 0.41},
        "per_setting": True}


def test_points_average_the_splits_and_ignore_what_an_algorithm_ignores():
    pts = points(_sweep(), "d", "final_test_rmse", SPEC["cost"], SPEC["over"])
    assert sorted(pts) == [("a", 8, 3.0, 0.6, 2), ("a", 64, 21.0, 0.4, 2),
                           ("b", None, 6.0, 0.45, 2)]


def test_pareto_keeps_the_points_nothing_beats():
    pts = points(_sweep(), "d", "final_test_rmse", SPEC["cost"], SPEC["over"])
    assert [(p[0], p[1]) for p in pareto(pts)] == [("a", 8), ("b", None), ("a", 64)]


def test_budget_table_names_the_best_setting_per_budget_and_the_target():
    ds = _sweep()
    ds["status"][0, 0, 1, 1] = "failed"  # a failed job is left out of its setting's mean
    text = budget_table(ds, SPEC)
    assert "| d | a (max_basis=8): 0.6 in 3 s | a (max_basis=64): 0.3 in 11 s |" in text
    assert "| b | — (least 6 s) | 0.45 in 6 s |" in text
    assert ("Target: d: test root mean squared error [target units] ≤ 0.41 within 60 s: "
            "a (max_basis=64) 0.3 in 11 s") in text


def test_select_keeps_one_split_and_the_points_follow():
    from pipeline.report.build import select

    one = select(_sweep(), {"dataset.split": "1"})
    assert one["dataset.split"].values.tolist() == [1]
    pts = points(one, "d", "final_test_rmse", SPEC["cost"], SPEC["over"])
    assert sorted(pts) == [("a", 8, 4.0, 0.7, 1), ("a", 64, 31.0, 0.5, 1),
                           ("b", None, 6.0, 0.45, 1)]


def test_a_diverged_point_is_clipped_not_allowed_to_flatten_the_panel():
    import pytest

    from pipeline.report.frontier import CLIP_FACTOR, _clip_level

    assert _clip_level([0.2, 0.3, 0.25]) == float("inf")  # nothing to clip
    # beyond the median + 3 × (median − best): clipped, but not within 10 % of the range
    assert _clip_level([0.2, 0.3, 0.25, 0.27, 0.26, 1.0]) == 0.265 + CLIP_FACTOR * 0.065
    assert _clip_level([0.2, 0.3, 0.25, 58.0]) == pytest.approx(0.2 + 0.1 * 57.8)
    # nearly equal points and one far off: the axis keeps 10 % of the best (RMSE) ...
    assert _clip_level([0.205] * 5 + [0.206, 0.30]) == pytest.approx(0.2255)
    # ... or of the range, for a metric near 0 (NLPD)
    assert _clip_level([-0.165] * 5 + [-0.16, 10.8]) == pytest.approx(-0.165 + 1.0965)


def test_points_drawn_over_each_other_are_named():
    import matplotlib.pyplot as plt

    from pipeline.report.frontier import _coinciding

    fig, ax = plt.subplots()
    placed = {"a": [(1.0, 1.0), (10.0, 2.0)], "b": [(1.001, 1.0005)], "c": [(5.0, 1.5)],
              "d": [(10.0, 2.001)]}
    for xy in placed.values():
        ax.plot(*zip(*xy, strict=True), "o")
    ax.set_xscale("log")
    assert _coinciding(ax, placed) == [["a", "b", "d"]]
    plt.close(fig)


def test_nine_panels_stay_within_the_published_figure_limit(tmp_path):
    """A frontier figure over nine data sets (the second edition's) is drawn at fewer dots per
    inch than six panels, so its PNG stays within what ``pipeline.publish`` accepts."""
    from pipeline.publish.render import MAX_FIGURE_BYTES
    from pipeline.report.frontier import draw

    rng = np.random.default_rng(0)
    methods = ["cg", "exact", "nystrom", "sgma", "gpytorch_sgpr", "sklearn_nystroem",
               "incomplete_cholesky", "zhang_kappa_greedy", "sparse_online", "sklearn_gpr"]
    datasets = [f"set{k}" for k in range(9)]
    every = {("final_test_rmse", d): [(m, size, float(rng.uniform(0.05, 200)),
                                       float(rng.uniform(0.1, 0.9)), 10)
                                      for m in methods for size in (128, 512)]
             for d in datasets}
    spec = {"over": "max_basis", "budgets": [10, 60, 600], "cost": ["fit_seconds"]}
    figures = draw(every, datasets, ["final_test_rmse"], spec, tmp_path, 1, "_x", "", None)
    assert len(figures) == 1
    png, = tmp_path.glob("fig1_frontier_final_test_rmse_x.png")
    assert 20_000 < png.stat().st_size <= MAX_FIGURE_BYTES


def test_a_legend_of_long_method_names_stays_inside_a_two_panel_figure(tmp_path, monkeypatch):
    """Two panels (the pilot's abalone and pumadyn32nm) and SGPR's variant names: the legend's
    columns are as many as fit the figure's width, so no entry runs past its edges (six columns
    of ``gpytorch_sgpr[diagonal_correction=false]`` did)."""
    import matplotlib.pyplot as plt

    from pipeline.report import frontier

    boxes = []
    close = plt.close

    def measured_close(fig):
        fig.canvas.draw()
        boxes.append((fig.legends[0].get_window_extent(), fig.bbox))
        close(fig)

    monkeypatch.setattr(frontier.plt, "close", measured_close)
    methods = ["cg", "exact", "nystrom", "sgma", "gpytorch_sgpr[diagonal_correction=false]",
               "gpytorch_sgpr[diagonal_correction=true]", "gpytorch_svgp", "sklearn_gpr",
               "sklearn_nystroem", "incomplete_cholesky", "zhang_kappa_greedy", "sparse_online"]
    rng = np.random.default_rng(1)
    every = {("final_test_rmse", d): [(m, size, float(rng.uniform(0.01, 10)),
                                       float(rng.uniform(0.6, 0.7)), 3)
                                      for m in methods for size in (128, 512)]
             for d in ("abalone", "pumadyn32nm")}
    spec = {"over": "max_basis", "budgets": [10], "cost": ["fit_seconds"]}
    frontier.draw(every, ["abalone", "pumadyn32nm"], ["final_test_rmse"], spec, tmp_path, 1,
                  "_x", "", None)
    (legend, figure), = boxes
    assert figure.x0 <= legend.x0 and legend.x1 <= figure.x1, (legend, figure)
    assert frontier.legend_columns(10.4, methods) < frontier.LEGEND_COLUMNS
