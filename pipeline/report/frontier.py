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
from matplotlib.lines import Line2D

from pipeline.atomic import save_figure
from pipeline.report.style import Figure, and_list, grouped, line_styles, plain_log_ticks
from pipeline.results.variables import long_name, short_label, symbol

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
    points joined along ``over`` (its value by marker size, or written beside when there are
    more than MAX_SIZES values), the Pareto frontier as a black step
    line and the time budgets as dotted verticals."""
    out: list[Figure] = []
    for tag, title, sub in modes(ds, spec):
        out += _frontier_figures(sub, spec, out_dir, start + len(out), tag, title)
    return out


def _frontier_figures(ds: xr.Dataset, spec: dict, out_dir: Path, start: int, tag: str,
                      title: str) -> list[Figure]:
    datasets = ds["dataset"].values.tolist()
    metrics = spec.get("metrics", ["final_test_rmse"])
    every = {(metric, dataset): points(ds, dataset, metric, spec["cost"], spec.get("over", ""),
                                       spec.get("series", ()))
             for metric in metrics for dataset in datasets}
    return draw(every, datasets, metrics, spec, out_dir, start, tag, title, ds)


def draw(every: dict[tuple[str, str], list[Point]], datasets: Sequence[str],
         metrics: Sequence[str], spec: dict, out_dir: Path, start: int, tag: str, title: str,
         labels: xr.Dataset | None, left_out: str = "") -> list[Figure]:
    """The frontier figures (:func:`frontier_figures`) of the points ``every`` holds per
    (metric, dataset), one per metric, named ``fig<start + k>_frontier_<metric><tag>.png``;
    ``labels`` gives the axes' names and units (:func:`short_label`), ``left_out`` ends the
    caption (what was not drawn, and why)."""
    out = []
    ds = labels
    settings = sorted({p[0] for pts in every.values() for p in pts})
    order = settings.index
    styles = line_styles([(a, a.split(" ")[0]) for a in settings])  # "gpytorch_sgpr steps=50"
    colors = {a: style["color"] for a, style in styles.items()}
    markers = {a: style["marker"] for a, style in styles.items()}
    sizes = _marker_sizes([p[1] for pts in every.values() for p in pts])
    for k, metric in enumerate(metrics):
        ncols = min(3, len(datasets))
        nrows = math.ceil(len(datasets) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(max(5.2 * ncols, 9.0), 4.0 * nrows + 1.4),
                                 squeeze=False, layout="constrained")
        for ax in axes.flat[len(datasets):]:
            ax.set_visible(False)
        drawn, shown, beyond, clipped, stacked = {}, set(), set(), False, []
        for i, (ax, dataset) in enumerate(zip(axes.flat, datasets, strict=False)):
            pts = every[metric, dataset]
            top = _clip_level([p[3] for p in pts])
            placed: dict[str, list[tuple[float, float]]] = {}
            n_above = 0
            for algorithm in sorted({p[0] for p in pts}, key=order):
                mine = sorted((p for p in pts if p[0] == algorithm), key=lambda p: p[2])
                placed[algorithm], n_above = _draw_setting(ax, mine, top, colors[algorithm],
                                                           markers[algorithm], sizes, n_above)
                clipped |= any(p[3] > top for p in mine)
                drawn[algorithm] = Line2D([], [], marker=markers[algorithm], ms=6, lw=1,
                                          color=colors[algorithm], label=algorithm)
            front = pareto(pts)
            if front:
                xs = [p[2] for p in front] + [ax.get_xlim()[1]]
                ys = [min(p[3], top) for p in front] + [min(front[-1][3], top)]
                ax.step(xs, ys, where="post", color="k", lw=1.6, alpha=0.6)
                drawn["Pareto frontier"] = Line2D([], [], color="k", lw=1.6, alpha=0.6)
            _draw_budgets(ax, spec.get("budgets", []), [p[2] for p in pts], shown, beyond)
            if metric in (spec.get("target") or {}):
                ax.axhline(spec["target"][metric], color="red", ls="--", lw=0.9)
                drawn["target"] = Line2D([], [], color="red", ls="--", lw=0.9)
            ax.set(xscale="log" if spec.get("logx", True) else "linear", title=dataset)
            if i % ncols == 0:
                ax.set_ylabel(short_label(metric, ds))
            if i + ncols >= len(datasets):  # no panel below it
                ax.set_xlabel(_cost_label(spec, ds))
            if spec.get("logx", True):
                plain_log_ticks(ax.xaxis)
            ax.grid(True, alpha=0.3)
            stacked += [f"{and_list(group)} ({dataset})" for group in _coinciding(ax, placed)]
        keys = {f"{symbol(spec['over'])} = {value}": Line2D([], [], marker="o", ms=size,
                                                              ls="", color="0.55")
                for value, size in sizes.items()}
        ncol = legend_columns(fig.get_figwidth(), [*drawn, *keys])
        handles, labels = _legend_grid(drawn, keys, ncol)
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=8,
                   frameon=False)
        against = spec.get("cost_label", "wall time")
        head = f"{title}\n" if title else ""
        fig.suptitle(f"{head}{short_label(metric, ds)} against {against}", fontsize=10)
        path = out_dir / f"fig{start + k}_frontier_{metric}{tag}.png"
        # fewer dots per inch beyond six panels, so nine panels' PNG stays as small as six's
        save_figure(fig, path, dpi=max(80, round(100 * math.sqrt(6 / max(len(datasets), 6)))))
        plt.close(fig)
        missing = sorted(set(settings) - {p[0] for d in datasets for p in every[metric, d]})
        caption = _frontier_caption(spec, ds, sorted(shown), sorted(beyond - shown), clipped,
                                    stacked, bool(sizes), missing)
        out.append(Figure(path, caption + (f" {left_out}" if left_out else "")))
    return out


def _draw_setting(ax, mine: list[Point], top: float, color, marker, sizes: dict,
                  n_above: int) -> tuple[list[tuple[float, float]], int]:
    """One setting's points (sorted by cost) as a line and sized markers, values above ``top``
    drawn at it with their values written beside (``n_above`` such notes already in the
    panel); returns (the points as placed, the notes now in the panel)."""
    xs, ys = [p[2] for p in mine], [min(p[3], top) for p in mine]
    ax.plot(xs, ys, color=color, lw=1)
    ax.scatter(xs, ys, s=[_size(sizes, p[1]) ** 2 for p in mine], zorder=3, marker=marker,
               color=color)
    above = [p for p in mine if p[3] > top]
    if above:  # drawn at the clip level; their values written once, beside them
        low, high = min(p[3] for p in above), max(p[3] for p in above)
        text = f"↑{low:.3g}" + (f"–{high:.3g}" if f"{high:.3g}" != f"{low:.3g}" else "")
        ax.annotate(text, (above[-1][2], top), fontsize=7, va="top",
                    xytext=(4, -3 - 9 * n_above), textcoords="offset points", color=color)
        n_above += 1  # the next one's value goes under it
    if not sizes:  # too many values to tell apart by size: written beside
        for p, y in zip(mine, ys, strict=True):
            if p[1] is not None and len(mine) > 1:
                ax.annotate(str(p[1]), (p[2], y), fontsize=6, xytext=(3, 3),
                            textcoords="offset points", color=color)
    return list(zip(xs, ys, strict=True)), n_above


def _draw_budgets(ax, budgets: Sequence[float], costs: list[float], shown: set,
                  beyond: set) -> None:
    """A dotted line at each budget within reach of the panel's costs (added to ``shown``);
    one beyond it would squash the points (added to ``beyond``)."""
    for budget in budgets:
        if costs and budget <= BUDGET_REACH * max(costs):
            ax.axvline(budget, color="grey", ls=":", lw=0.8)
            shown.add(budget)
        elif costs:
            beyond.add(budget)


LEGEND_COLUMNS = 6  # the most columns a frontier figure's legend has
# a legend entry's width at fontsize 8, in inches: about 0.07 a character of its label, and
# its handle (a line with a marker) and the gap to the next column
LEGEND_CHAR_INCHES, LEGEND_HANDLE_INCHES = 0.07, 0.75


def legend_columns(width_inches: float, labels: Sequence[str]) -> int:
    """How many legend columns fit a figure ``width_inches`` wide: the widest label sets every
    column's width (matplotlib's columns are as wide as their widest entry), at most
    :data:`LEGEND_COLUMNS`, at least 1 (a long method name such as
    ``gpytorch_sgpr[diagonal_correction=false]`` in six columns ran past both edges)."""
    widest = max((len(label) for label in labels), default=0)
    column = LEGEND_CHAR_INCHES * widest + LEGEND_HANDLE_INCHES
    return max(1, min(LEGEND_COLUMNS, int(width_inches // column)))


def _legend_grid(entries: dict, keys: dict, ncol: int) -> tuple[list, list[str]]:
    """Handles and labels for a legend of ``ncol`` columns that reads row by row: the
    ``entries``, then, on rows of their own, the ``keys`` (e.g. marker sizes). matplotlib
    fills a legend column by column, so the rows are padded with blanks and transposed."""
    def rows(items: dict) -> list[tuple[object, str]]:
        pairs = list(items.items())
        return pairs + [("", Line2D([], [], alpha=0.0))] * (-len(pairs) % ncol)

    grid = [(h, label) for label, h in rows(entries) + rows(keys)]
    n_rows = len(grid) // ncol
    order = [grid[r * ncol + c] for c in range(ncol) for r in range(n_rows)]
    return [h for h, _ in order], [label for _, label in order]


MAX_SIZES = 5  # basis sizes told apart by marker size; more are written beside the points


def _marker_sizes(values: Sequence[object]) -> dict[object, float]:
    """Marker size (points) per value of ``over`` (e.g. basis size), growing with the value;
    empty when there are more than :data:`MAX_SIZES` values."""
    held = sorted({v for v in values if v is not None})
    if len(held) > MAX_SIZES:
        return {}
    return {v: 4.0 + 2.5 * i for i, v in enumerate(held)}


def _size(sizes: dict[object, float], value: object) -> float:
    return sizes.get(value, 6.0)


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
                      clipped: bool, stacked: Sequence[str] = (), by_size: bool = False,
                      missing: Sequence[str] = ()) -> str:
    """What the frontier figure's points, lines and labels are."""
    unit = spec.get("unit", "s")
    parts = ["Points: one setting's mean metric and mean cost over its splits and seeds"]
    if spec.get("over"):
        how = "the marker's size" if by_size else "the number beside a point"
        parts.append(f"{how}: {symbol(spec['over'])} ({long_name(spec['over'], ds)})")
    parts.append("black steps: the Pareto frontier (no other point both cheaper and better)")
    if shown:
        parts.append(f"dotted grey: budgets {', '.join(f'{b:g}' for b in shown)} {unit}")
    if beyond:
        parts.append(f"budgets beyond every point not drawn ({', '.join(f'{b:g}' for b in beyond)}"
                     f" {unit})")
    if spec.get("target"):
        parts.append("red dashed: the target")
    if clipped:
        parts.append(f"↑values: points beyond the panel's median + {CLIP_FACTOR:g}× (median − "
                     f"best), and {CLIP_FLOOR:.0%} of the best and of the range above it, "
                     "drawn at that level")
    if stacked:
        parts.append(f"drawn over each other (told apart by their markers): {'; '.join(stacked)}")
    if missing:
        parts.append(f"not drawn, having no value of this metric: {and_list(list(missing))}")
    return "; ".join(parts) + "."


CLIP_FACTOR = 3.0  # a panel's y axis ends this many times the median's distance from the best
CLIP_FLOOR = 0.1  # … and no nearer the best than this fraction of it and of the range


def _clip_level(values: Sequence[float]) -> float:
    """Where a panel's y axis ends: the largest value, or the median + CLIP_FACTOR × (median −
    best) when some point lies beyond it (a method far behind the rest, or a diverged fit,
    would otherwise flatten every other point; lower is better). Never within CLIP_FLOOR of
    the best, relative to the best or to the whole range: a panel is not zoomed into
    differences nobody would act on (a metric near 0, such as NLPD, takes the range's)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.inf
    best, median, worst = min(finite), float(np.median(finite)), max(finite)
    level = max(median + CLIP_FACTOR * (median - best), best + CLIP_FLOOR * abs(best),
                best + CLIP_FLOOR * (worst - best))
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
