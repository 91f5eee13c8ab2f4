"""Accuracy against wall time: Pareto frontiers and the best method at a time budget.

A report's ``frontier`` block (``conf/experiment/uci_frontier.yaml``)::

    frontier:
      metrics: [final_test_rmse, final_test_nlpd]   # lower is better
      cost: [final_seconds, final_hyper_seconds]    # summed: seconds end to end
      over: algorithm.max_basis                     # one point per algorithm and value
      series: [algorithm.steps]                     # settings told apart beside the algorithm
      budgets: [10, 60, 600]                        # seconds

With ``modes`` the figures and the table are drawn once per value of a swept dim, each titled
by its label (``conf/experiment/uci_frontier.yaml`` compares the methods at one shared kernel
and at their own protocols)::

      modes:
        dim: protocol
        order: [shared, own]
        labels: {shared: "shared kernel: …", own: "own protocol: …"}

The cost need not be time: with ``cost: [final_n_basis]``, ``cost_label: basis size`` and
``unit: basis functions`` the same figures and table compare methods at a basis size (a
budget is then a largest basis size; ``logx: false`` keeps a linear axis).

A point is one algorithm at one value of ``over`` (optional: without it, one point per
algorithm and series) on one dataset: the mean metric and mean cost
over the other dims (data splits, seeds) of its jobs that finished. Costs after the first that
are NaN for a job (e.g. no hyperparameters learned) count as 0. The Pareto frontier is the
set of points no other point beats in both cost and metric.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from pipeline.report.style import Figure, and_list, grouped, plain_log_ticks
from pipeline.results.variables import axis_label, long_name, short_label, symbol

Point = tuple[str, object, float, float, int]  # setting, over value, cost, metric, jobs


def _varies(sub: xr.Dataset, dim: str) -> bool:
    """Whether the jobs differ along ``dim`` (an algorithm that ignores a key has one job)."""
    if dim not in sub.dims or sub.sizes[dim] < 2:
        return False
    hashes = sub["job_hash"]
    return bool((hashes != hashes.isel({dim: 0})).any())


def points(ds: xr.Dataset, dataset: str, metric: str, cost: Sequence[str], over: str,
           series: Sequence[str] = ()) -> list[Point]:
    """(setting, over value, mean cost, mean metric, jobs) of every finished setting. A
    setting is an algorithm, plus the values of the ``series`` dims along which its jobs differ
    (e.g. ``gpytorch_sgpr steps=50``); ``over`` is None for an algorithm that ignores it."""
    if metric not in ds or cost[0] not in ds:
        return []
    sub = ds.sel(dataset=dataset)
    total = sub[cost[0]]
    for extra in cost[1:]:
        if extra in sub:
            total = total + sub[extra].fillna(0.0)
    good = (sub["status"] == "ok") & np.isfinite(total) & np.isfinite(sub[metric])
    out = []
    for algorithm in ds["algorithm"].values.tolist():
        mine = sub.sel(algorithm=algorithm)
        dims = [d for d in series if _varies(mine, d)]
        dims += [over] if _varies(mine, over) else []
        for values in itertools.product(*(ds[d].values.tolist() for d in dims)):
            sel = {"algorithm": algorithm, **dict(zip(dims, values, strict=True))}
            keep = good.sel(sel).values
            if not keep.any():
                continue
            x, y = total.sel(sel).values[keep], sub[metric].sel(sel).values[keep]
            hashes = np.unique(sub["job_hash"].sel(sel).values[keep])
            label = algorithm + "".join(f" {d.split('.')[-1]}={v}" for d, v in sel.items()
                                        if d not in ("algorithm", over))
            out.append((label, sel.get(over), float(np.mean(x)), float(np.mean(y)),
                        len(hashes)))
    return out


def pareto(pts: Sequence[Point]) -> list[Point]:
    """The points no other point beats in both cost and metric, by increasing cost."""
    front, best = [], math.inf
    for p in sorted(pts, key=lambda p: (p[2], p[3])):
        if p[3] < best:
            front.append(p)
            best = p[3]
    return front


def modes(ds: xr.Dataset, spec: dict) -> list[tuple[str, str, xr.Dataset]]:
    """(file-name tag, title, results) of each mode of ``spec['modes']`` the sweep holds, or one
    untitled mode of every result when the spec has none or the sweep does not vary its dim."""
    given = spec.get("modes") or {}
    dim = given.get("dim")
    if not dim or dim not in ds.dims:
        return [("", "", ds)]
    labels = given.get("labels") or {}
    held = ds[dim].values.tolist()
    order = list(given.get("order") or [])
    values = [v for v in order if v in held] + [v for v in held if v not in order]
    return [(f"_{value}", str(labels.get(value, f"{dim}={value}")), ds.sel({dim: value}))
            for value in values]


def frontier_figures(ds: xr.Dataset, spec: dict, out_dir: Path, start: int) -> list[Figure]:
    """One figure per metric (and mode, :func:`modes`): a panel per dataset, each algorithm's
    points joined along ``over`` (labelled with its value), the Pareto frontier as a black step
    line and the time budgets as dotted verticals."""
    out: list[Figure] = []
    for tag, title, sub in modes(ds, spec):
        out += _frontier_figures(sub, spec, out_dir, start + len(out), tag, title)
    return out


def _frontier_figures(ds: xr.Dataset, spec: dict, out_dir: Path, start: int, tag: str,
                      title: str) -> list[Figure]:
    out = []
    datasets = ds["dataset"].values.tolist()
    metrics = spec.get("metrics", ["final_test_rmse"])
    every = {(metric, dataset): points(ds, dataset, metric, spec["cost"], spec.get("over", ""),
                                       spec.get("series", ()))
             for metric in metrics for dataset in datasets}
    settings = sorted({p[0] for pts in every.values() for p in pts})
    order = settings.index
    colors = {a: plt.cm.tab10(i % 10) for i, a in enumerate(settings)}
    markers = {a: "osD^vP*Xh<>"[i % 11] for i, a in enumerate(settings)}
    for k, metric in enumerate(metrics):
        ncols = min(3, len(datasets))
        nrows = math.ceil(len(datasets) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(max(5.2 * ncols, 9.0), 4.2 * nrows + 1),
                                 squeeze=False)
        for ax in axes.flat[len(datasets):]:
            ax.set_visible(False)
        drawn, shown, beyond, clipped, stacked = {}, set(), set(), False, []
        for ax, dataset in zip(axes.flat, datasets, strict=False):
            pts = every[metric, dataset]
            top = _clip_level([p[3] for p in pts])
            placed: dict[str, list[tuple[float, float]]] = {}
            for algorithm in sorted({p[0] for p in pts}, key=order):
                mine = sorted((p for p in pts if p[0] == algorithm), key=lambda p: p[2])
                ys = [min(p[3], top) for p in mine]
                placed[algorithm] = [(p[2], y) for p, y in zip(mine, ys, strict=True)]
                drawn[algorithm] = ax.plot([p[2] for p in mine], ys,
                                           marker=markers[algorithm], color=colors[algorithm],
                                           ms=5, lw=1, label=algorithm)[0]
                for p, y in zip(mine, ys, strict=True):
                    text = str(p[1]) if p[1] is not None and len(mine) > 1 else ""
                    if p[3] > top:  # drawn at the clip level, its value written beside it
                        text = f"{text} ↑{p[3]:.3g}".strip()
                        clipped = True
                    if text:
                        ax.annotate(text, (p[2], y), fontsize=6, xytext=(3, 3),
                                    textcoords="offset points", color=colors[algorithm])
            front = pareto(pts)
            if front:
                xs = [p[2] for p in front] + [ax.get_xlim()[1]]
                ys = [p[3] for p in front] + [front[-1][3]]
                drawn["Pareto frontier"] = ax.step(xs, ys, where="post", color="k", lw=1.6,
                                                   alpha=0.6, label="Pareto frontier")[0]
            costs = [p[2] for p in pts]
            for budget in spec.get("budgets", []):
                if costs and budget <= BUDGET_REACH * max(costs):  # beyond: squashes the points
                    ax.axvline(budget, color="grey", ls=":", lw=0.8)
                    shown.add(budget)
                elif costs:
                    beyond.add(budget)
            if metric in (spec.get("target") or {}):
                ax.axhline(spec["target"][metric], color="red", ls="--", lw=0.9)
                drawn["target"] = ax.plot([], [], color="red", ls="--", lw=0.9,
                                          label="target")[0]
            ax.set(xscale="log" if spec.get("logx", True) else "linear",
                   xlabel=_cost_label(spec, ds), ylabel=axis_label(metric, ds), title=dataset)
            if spec.get("logx", True):
                plain_log_ticks(ax.xaxis)
            ax.grid(True, alpha=0.3)
            stacked += [f"{and_list(group)} ({dataset})" for group in _coinciding(ax, placed)]
        ncol = min(len(drawn), 4)
        fig.legend(drawn.values(), drawn.keys(), loc="lower center", ncol=ncol, fontsize=8,
                   frameon=False)
        against = spec.get("cost_label", "wall time")
        head = f"{title}\n" if title else ""
        fig.suptitle(f"{head}{short_label(metric, ds)} against {against}", fontsize=10)
        legend_rows = math.ceil(len(drawn) / ncol)
        fig.tight_layout(rect=(0, 0.035 * legend_rows / nrows + 0.02, 1,
                               0.93 if title else 0.95))
        path = out_dir / f"fig{start + k}_frontier_{metric}{tag}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        caption = _frontier_caption(spec, ds, sorted(shown), sorted(beyond - shown), clipped,
                                    stacked)
        out.append(Figure(path, caption))
    return out


BUDGET_REACH = 3.0  # a budget beyond this multiple of a panel's largest cost is not drawn


COINCIDE = 0.012  # points closer than this fraction of both axes are drawn over each other


def _coinciding(ax, placed: dict[str, list[tuple[float, float]]]) -> list[list[str]]:
    """Groups of settings whose points lie on top of each other in ``ax`` (some point of each
    within :data:`COINCIDE` of the axes, in both directions, of one of another's)."""
    to_axes = ax.transData + ax.transAxes.inverted()
    where = {name: to_axes.transform(np.asarray(xy, dtype=float)) for name, xy in placed.items()
             if xy}
    pairs = [(a, b) for a, b in itertools.combinations(where, 2)
             if (np.abs(where[a][:, None, :] - where[b][None, :, :]) < COINCIDE).all(-1).any()]
    return grouped(pairs)


def _frontier_caption(spec: dict, ds: xr.Dataset, shown: list, beyond: list,
                      clipped: bool, stacked: Sequence[str] = ()) -> str:
    """What the frontier figure's points, lines and labels are."""
    unit = spec.get("unit", "s")
    parts = ["Points: one setting's mean metric and mean cost over its splits and seeds"]
    if spec.get("over"):
        parts.append(f"the number beside a point: {symbol(spec['over'])} "
                     f"({long_name(spec['over'], ds)})")
    parts.append("black steps: the Pareto frontier (no other point both cheaper and better)")
    if shown:
        parts.append(f"dotted grey: budgets {', '.join(f'{b:g}' for b in shown)} {unit}")
    if beyond:
        parts.append(f"budgets beyond every point not drawn ({', '.join(f'{b:g}' for b in beyond)}"
                     f" {unit})")
    if spec.get("target"):
        parts.append("red dashed: the target")
    if clipped:
        parts.append(f"↑value: a point above {CLIP_FACTOR:g}× the panel's median, drawn at that "
                     "level")
    if stacked:
        parts.append(f"drawn over each other (told apart by their markers): {'; '.join(stacked)}")
    return "; ".join(parts) + "."


CLIP_FACTOR = 3.0  # a panel's y axis ends at this multiple of the median point (outliers ↑)


def _clip_level(values: Sequence[float]) -> float:
    """Where a panel's y axis ends: the largest value, or CLIP_FACTOR × the median when some
    point lies beyond it (a diverged fit would otherwise flatten every other point)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.inf
    level = CLIP_FACTOR * float(np.median(finite)) if np.median(finite) > 0 else math.inf
    return level if max(finite) > level else math.inf


def _cost_label(spec: dict, ds: xr.Dataset | None = None) -> str:
    """The x axis: ``cost_label`` (default "seconds"), and the summed cost variables by name
    where there are several."""
    label = spec.get("cost_label", "seconds")
    if len(spec["cost"]) == 1:
        return label
    return f"{label} (" + " + ".join(short_label(c, ds, units=False) for c in spec["cost"]) + ")"


def _best(pts: Sequence[Point]) -> Point | None:
    return min(pts, key=lambda p: p[3]) if pts else None


def budget_table(ds: xr.Dataset, spec: dict) -> str:
    """:func:`_budget_table` of each mode (:func:`modes`), under its title."""
    return "\n\n".join((f"**{title}**\n\n" if title else "") + _budget_table(sub, spec)
                       for _, title, sub in modes(ds, spec))


def _budget_table(ds: xr.Dataset, spec: dict) -> str:
    """Markdown: per dataset and budget, the setting with the lowest mean metric among those
    whose mean cost is within the budget (metric, seconds); with ``per_setting``, a table per
    dataset of every setting's best point within each budget; with ``target`` (metric →
    value), the points within the largest budget that reach it."""
    metric = spec.get("metrics", ["final_test_rmse"])[0]
    budgets = spec.get("budgets", [10, 60, 600])
    key = spec.get("over", "").split(".")[-1]

    def size(p: Point) -> str:
        return f" ({key}={p[1]})" if p[1] is not None else ""

    unit = spec.get("unit", "s")

    def cell(p: Point) -> str:
        return f"{p[3]:.4g} at {p[2]:.3g} {unit}" if unit != "s" else f"{p[3]:.4g} in {p[2]:.3g} s"

    head = "| {} | " + " | ".join(f"≤ {b:g} {unit}" for b in budgets) + " |"
    rule = "|" + " --- |" * (len(budgets) + 1)
    lines = [head.format("dataset"), rule]
    per_setting, reached = [], []
    for dataset in ds["dataset"].values.tolist():
        pts = points(ds, dataset, metric, spec["cost"], spec.get("over", ""),
                     spec.get("series", ()))
        cells = []
        for budget in budgets:
            within = [p for p in pts if p[2] <= budget]
            best = min(within, key=lambda p: p[3]) if within else None
            cells.append(f"{best[0]}{size(best)}: {cell(best)}" if best else "—")
        lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
        if spec.get("per_setting"):
            per_setting += ["", f"Each setting's best {short_label(metric, ds)} within the budget "
                                f"on {dataset}:",
                            "", head.format("setting"), rule]
            for setting in sorted({p[0] for p in pts}):
                mine = [p for p in pts if p[0] == setting]
                per_setting.append(f"| {setting} | " + " | ".join(
                    f"{cell(q)}{size(q)}" if (q := _best([p for p in mine if p[2] <= b]))
                    else f"— (least {min(p[2] for p in mine):.3g} {unit})" for b in budgets)
                    + " |")
        target = (spec.get("target") or {}).get(metric)
        if target is not None:
            hits = sorted((p for p in pts if p[3] <= target and p[2] <= max(budgets)),
                          key=lambda p: p[2])
            reached.append(f"{dataset}: {short_label(metric, ds)} ≤ {target:g} within "
                           f"{max(budgets):g} {unit}: "
                           + ("; ".join(f"{p[0]}{size(p)} {cell(p)}" for p in hits) if hits
                              else "not reached; best point " + (
                                  f"{q[0]}{size(q)} {cell(q)}" if (q := _best(pts)) else "none")))
    out = (f"Best {short_label(metric, ds)} within a budget ({_cost_label(spec, ds)}, means "
           "over splits/seeds):\n\n"
           + "\n".join(lines))
    if per_setting:
        out += "\n" + "\n".join(per_setting)
    if reached:
        out += "\n\nTarget: " + "\n\nTarget: ".join(reached)
    return out
