"""The published run's frontier figures, drawn from its table (the CSV ``publish`` writes and
re-renders from), so that they show what the README ranks: per mode, metric and cost (fit-only
seconds; learning + fit seconds) one figure, a panel per data set, each *ranked* setting's
mean over its splits (:func:`pipeline.publish.comparison.settings`: every split finished, none
trivial; in the NLPD figures, none with an NLPD above the mean predictor's either). A trivial
predictor is never drawn, so it is never on a Pareto frontier."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from pipeline.publish.comparison import NO_BASIS, label, modes, rows_of_mode, settings
from pipeline.report.frontier import Point, draw
from pipeline.report.style import Figure, and_list

METRICS = {"rmse": "final_test_rmse", "nlpd": "final_test_nlpd"}  # settings' column → name
COSTS = {"fit": "fit seconds (learning not counted)", "cost": "learning + fit seconds"}
OVER = "algorithm.max_basis"  # the basis size m: the marker's size
_RANKED = {"rmse": "ranked", "nlpd": "ranked_nlpd"}  # metric → the settings it ranks


def table_points(rows: pd.DataFrame, dataset: str, metric: str, cost: str) -> list[Point]:
    """(algorithm, m or None, mean ``cost``, mean ``metric``, splits) of every setting of
    ``dataset`` among ``rows`` (:func:`settings` of one mode) ranked in ``metric``, with a
    finite ``metric``."""
    mine = rows[(rows["dataset"] == dataset) & rows[_RANKED[metric]].astype(bool)
                & np.isfinite(rows[metric].astype(float)) & np.isfinite(rows[cost].astype(float))]
    return [(r["algorithm"], None if r["basis"] == NO_BASIS else int(r["basis"]),
             float(r[cost]), float(r[metric]), int(r["splits"]))
            for _, r in mine.iterrows()]


def frontier_figures(table: pd.DataFrame, out_dir: Path, budgets: Sequence[float],
                     mode_order: Sequence[str] = (), mode_labels: dict | None = None,
                     standardize_y: bool = True) -> list[Figure]:
    """Every figure (module docstring) of ``table`` into ``out_dir``, numbered from 1:
    ``fig<k>_frontier_<metric>_<mode>_<fit|cost>.png``. ``standardize_y``: the run scored
    standardised targets (the axes then say so)."""
    rows = settings(table)
    names = xr.Dataset(attrs={"config": {"dataset": {"standardize_y": bool(standardize_y)}}})
    out: list[Figure] = []
    for mode in modes(table, mode_order):
        of_mode = rows_of_mode(rows, mode)
        datasets = sorted(of_mode["dataset"].unique().tolist())
        head = str((mode_labels or {}).get(mode, f"protocol {mode}")) if not pd.isna(mode) else ""
        tag = "" if pd.isna(mode) else f"_{mode}"
        for cost, words in COSTS.items():
            spec = {"over": OVER, "budgets": list(budgets), "cost": [cost], "cost_label": words,
                    "logx": True}
            for metric, name in METRICS.items():
                every = {(name, d): table_points(of_mode, d, metric, cost) for d in datasets}
                drawn = sorted({p[0] for points in every.values() for p in points})
                out += [Figure(f.path, f.caption + " Methods drawn: "
                               + (and_list(drawn) if drawn else "none") + ".")
                        for f in draw(every, datasets, [name], spec, out_dir, len(out) + 1,
                                      f"{tag}_{cost}", head, names,
                                      _left_out(of_mode, metric))]
    return out


def _left_out(rows: pd.DataFrame, metric: str) -> str:
    """The caption's end: the settings of ``rows`` (one mode) the ``metric`` figure does not
    draw, as never ranked there."""
    unranked = [f"{label(r)} on {r['dataset']}" for _, r in rows.iterrows()
                if not r[_RANKED[metric]]]
    why = ("trivial or failed, or fewer splits than the data set's others" if metric == "rmse"
           else "trivial or failed, fewer splits than the data set's others, an NLPD above "
           "the mean predictor's, or none")
    return (f"Not drawn ({why}; the README's ranks say where each stands): "
            f"{and_list(unranked)}." if unranked else "")
