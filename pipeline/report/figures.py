"""A report's figures: a metric along the fit's steps per setting, a sweep's metric against a
swept key, and the accuracy-against-cost frontier.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from pipeline.report.style import (
    OVERLAP,
    Figure,
    finish_figure,
    line_styles,
    markevery_for,
    math_text,
    overlapping_settings,
    palette,
    panel_row,
    panel_title,
    panel_ylabel,
    plain_log_ticks,
    setting_style,
)
from pipeline.results.variables import axis_label, long_name, setting_text, symbol


def settings(ds: xr.Dataset) -> list[dict]:
    """One dict of coordinates per line: every dim except dataset, step and the dims averaged
    over (seed, plus the report's ``average_over``). A dim the setting's jobs do not depend on
    (κ for algorithms that ignore it, an option the algorithm does not take: their results
    repeat along it) is left out, and a setting whose jobs are all those of an earlier one is
    dropped, as is one with no sweep point (a cell of the grid no command of the sweep named:
    a merge added points at values the other settings were not run at)."""
    averaged = ("dataset", "seed", *ds.attrs.get("average_over", ()))
    dims = [d for d in ds["status"].dims if d not in averaged]
    hashes = ds["job_hash"].load()
    out, seen = [], set()
    for values in itertools.product(*(ds[d].values.tolist() for d in dims)):
        point = dict(zip(dims, values, strict=True))
        key = tuple(hashes.sel(point).values.ravel().tolist())
        if key in seen or not any(key):
            continue
        seen.add(key)
        for dim in [d for d in point if d != "algorithm" and ds.sizes[d] > 1]:
            along = hashes.sel({k: v for k, v in point.items() if k != dim})
            if bool((along == along.isel({dim: 0})).all()):
                del point[dim]
        out.append(point)
    return out


def setting_label(ds: xr.Dataset, point: dict) -> str:
    """A setting as a reader names it: ``sgma (σ² = 0.1, κ = 10)`` (swept keys by symbol)."""
    parts = [setting_text(dim, value) for dim, value in point.items()
             if dim != "algorithm" and ds.sizes[dim] > 1]
    return f"{point['algorithm']} ({', '.join(parts)})" if parts else str(point["algorithm"])


def select_setting(ds: xr.Dataset, point: dict, dataset: str) -> xr.Dataset:
    """The jobs of one line: setting ``point`` at ``dataset``; a dim the line does not depend
    on at its first value (the jobs repeat along it)."""
    sel = {**point, "dataset": dataset}
    averaged = ("dataset", "seed", "step", *ds.attrs.get("average_over", ()))
    for dim in ds["status"].dims:  # a dim the setting does not depend on: its first value
        if dim not in sel and dim not in averaged:
            sel[dim] = ds[dim].values[0]
    return ds.sel(sel)


def sweep_figure(ds: xr.Dataset, spec: dict, out_dir: Path, name: str) -> Figure | None:
    """A final (per-job) metric against a swept coordinate ``x``, one panel per dataset and one
    line per ``lines`` value, mean over the other dims with a ±1 standard-error band."""
    metric, x, lines = spec["metric"], spec["x"], spec.get("lines")
    if metric not in ds or x not in ds.dims:
        return None
    datasets = ds["dataset"].values.tolist()
    fig, axes = panel_row(len(datasets), 4.4)
    groups = ds[lines].values.tolist() if lines in ds.dims else [None]
    colours = palette(len(groups))
    markers = [setting_style(i)["marker"] for i in range(len(groups))]
    if lines == "algorithm":  # each method in its own colour and marker (style.line_styles)
        styles = line_styles([(str(g), str(g)) for g in groups])
        colours = [styles[str(g)]["color"] for g in groups]
        markers = [styles[str(g)]["marker"] for g in groups]
    coords = ds[x].values
    averaged, levels, empty, means, bands = set(), [], [], [], False
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for i, (group, colour) in enumerate(zip(groups, colours, strict=True)):
            values, hashes = ds[metric].sel(dataset=dataset), ds["job_hash"].sel(dataset=dataset)
            if group is not None:
                values, hashes = values.sel({lines: group}), hashes.sel({lines: group})
            other = [d for d in values.dims if d != x]
            averaged.update((d, values.sizes[d]) for d in other if values.sizes[d] > 1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = values.mean(other, skipna=True).values
                count = np.isfinite(values).sum(other).values
                se = values.std(other, skipna=True).values / np.sqrt(np.maximum(count, 1))
            ok = np.isfinite(mean)
            label = str(group) if lines == "algorithm" else (setting_text(lines, group)
                                                             if lines else long_name(metric, ds))
            if not ok.any():
                empty.append(label)
                continue
            style = setting_style(i)
            if bool((hashes == hashes.isel({x: 0})).all()):  # the same jobs at every x: a level
                ax.axhline(float(np.nanmean(mean)), color=colour, ls="--", lw=1.2, label=label)
                levels.append(label)
                continue
            ax.plot(coords[ok], mean[ok], color=colour, ls=style["ls"], marker=markers[i],
                    ms=5, mfc="none", label=label)
            means.append((ax, label, coords, np.where(ok, mean, np.nan)))
            if (count[ok] > 1).any():
                bands = True
                ax.fill_between(coords[ok], (mean - se)[ok], (mean + se)[ok], color=colour,
                                alpha=0.2, lw=0)
        ax.set_xlabel(math_text(axis_label(x, ds)))
        panel_ylabel(ax, axis_label(metric, ds))
        panel_title(ax, f"{spec.get('title', metric)}: {dataset}")
        if spec.get("logx"):
            ax.set_xscale("log")
        if coords.dtype.kind in "iuf" and len(coords) <= 12:  # the swept values as the ticks
            ax.set_xticks(coords, [f"{v:g}" for v in coords])
            ax.minorticks_off()
        ax.grid(True, alpha=0.3)
    over = " and ".join(f"the {n} seeds" if d == "seed" else f"the {n} values of {symbol(d)}"
                        for d, n in sorted(averaged))
    caption = [f"Points: mean over {over}" if over else "Points: one job each"]
    if bands:
        caption.append("band: ±1 standard error of that mean")
    if levels:
        caption.append(f"dashed level: a setting whose jobs do not depend on {symbol(x)} "
                       f"({', '.join(dict.fromkeys(levels))})")
    overlaps = overlapping_settings(means)
    if overlaps:
        caption.append(f"drawn over each other (within {OVERLAP:.0%} of the axis height; "
                       f"told apart by marker and line style): {'; '.join(overlaps)}")
    if empty:
        caption.append(f"no value of {metric}, not drawn: {', '.join(dict.fromkeys(empty))}")
    return finish_figure(fig, axes, out_dir / f"{name}.png", "; ".join(caption) + ".")


def _marks(ax, sub: xr.Dataset, spec: dict, color) -> bool:
    """Dotted vertical/horizontal lines at a setting's final values named by ``vlines`` and
    ``hlines`` (e.g. a detaching point and a plateau), mean over its runs; whether any was
    drawn."""
    drawn = False
    for key, draw in (("vlines", ax.axvline), ("hlines", ax.axhline)):
        if spec.get(key) in sub:
            value = sub[spec[key]].values
            if np.isfinite(value).any():
                draw(float(np.nanmean(value)), color=color, ls=":", lw=1.2)
                drawn = True
    return drawn


STEP_LABEL = "step k (iteration of the fit)"


PROBLEM_DIMS = ("lam",)  # with dataset, kernel.* and dataset.*: what defines min L


def _optimum(ds: xr.Dataset, point: dict, dataset: str) -> float:
    """L*: the lowest final objective of any finished job of the sweep on the same problem
    (dataset, σ², kernel and data options as ``point``): the full GP's min L where it ran."""
    sel = {d: v for d, v in point.items()
           if d in PROBLEM_DIMS or d.startswith(("kernel.", "dataset."))}
    sub = ds.sel({**sel, "dataset": dataset})
    finals = sub["final_objective"].where(sub["status"] == "ok").values
    return float(np.nanmin(finals)) if np.isfinite(finals).any() else np.nan


TINY = 1e-12  # a one-step value at most this on a log axis: zero to round-off, not drawn


class _Drawn:
    """What a step figure drew, for its caption."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.band = self.tails = self.levels = self.marks = self.single = False
        self.missing: dict[str, list[str]] = {}
        self.means: list[tuple[object, str, np.ndarray, np.ndarray]] = []

    def skip(self, label: str, reason: str) -> None:
        self.runs.pop(label, None)
        self.missing.setdefault(reason, [])
        if label not in self.missing[reason]:
            self.missing[reason].append(label)


def _draw_runs(ax, xs: np.ndarray, runs: np.ndarray, colour, label: str, band: bool,
               i: int, n_series: int, drawn: _Drawn, marker: str) -> np.ndarray | None:
    """The mean over ``runs`` (rows) at the points every run reached, lines connecting the
    evaluated points (NaN between evaluations is skipped), a min–max band; a run that goes on
    past the shortest one is drawn on from there as a thin line of its own, so the mean never
    jumps where a run ends. Returns the mean line (NaN where not drawn)."""
    style = {**setting_style(i), "marker": marker}
    reached = np.isfinite(runs).all(axis=0)
    if not reached.any():  # no point every run reached: draw each run
        drawn.single = True
        for j, run in enumerate(runs):
            ok = np.isfinite(run)
            ax.plot(xs[ok], run[ok], color=colour, lw=1, ls=style["ls"], ms=3,
                    marker=style["marker"] if ok.sum() < 3 else None,
                    label=label if j == 0 else None)
        return None
    common = np.flatnonzero(reached)
    mean = runs[:, common].mean(axis=0)
    ax.plot(xs[common], mean, color=colour, lw=1.5, label=label, ls=style["ls"],
            marker=style["marker"], markevery=markevery_for(len(common), i, n_series), ms=5,
            mfc="none")
    if band and len(runs) > 1 and np.ptp(runs[:, common], axis=0).max() > 0:
        drawn.band = True
        ax.fill_between(xs[common], runs[:, common].min(axis=0), runs[:, common].max(axis=0),
                        color=colour, alpha=0.2, lw=0)
    last = common[-1]
    for run in runs:
        tail = np.flatnonzero(np.isfinite(run) & (np.arange(len(run)) >= last))
        if len(tail) > 1:
            drawn.tails = True
            ax.plot(xs[tail], run[tail], color=colour, lw=0.7, alpha=0.6)
    out = np.full(len(xs), np.nan)
    out[common] = mean
    return out


def _runs_text(runs: dict[str, int], ds: xr.Dataset) -> str:
    """``Lines: mean over the 3 runs (seeds) of a setting`` and the settings with fewer."""
    over = "/".join(["seeds", *ds.attrs.get("average_over", ())])
    most = max(runs.values(), default=1)
    if most == 1:
        return "Lines: one run of each setting"
    text = f"Lines: mean over the {most} runs ({over}) of a setting"
    fewer = {}
    for label, n in runs.items():
        if n < most:
            fewer.setdefault(n, []).append(label)
    notes = [f"{'one run' if n == 1 else f'{n} runs'} of {', '.join(labels)}"
             for n, labels in sorted(fewer.items())]
    if notes:
        text += f" ({'; '.join(notes)}: a job that does not depend on the {over.rstrip('s')} " \
                "runs once)"
    return text


def _caption(spec: dict, ds: xr.Dataset, drawn: _Drawn) -> str:
    parts = [_runs_text(drawn.runs, ds)]
    if drawn.band:
        parts.append(f"band: ± {long_name(spec['error'], ds)}" if spec.get("error") in ds
                     else "band: min–max over the runs")
    if drawn.tails:
        parts.append("thin lines: single runs that go on past the shortest one")
    if drawn.single:
        parts.append("lines without a mean: every run drawn (they reach different steps)")
    if drawn.levels:
        parts.append("dashed level: a one-step method (a direct solve), its final value")
    if drawn.marks:
        names = [long_name(spec[k], ds) for k in ("vlines", "hlines") if spec.get(k) in ds]
        parts.append(f"dotted, in a setting's colour: {' and '.join(names)}")
    if spec.get("reference") in ds:
        parts.append(f"dashed black: {long_name(spec['reference'], ds)}")
    if spec.get("scale_by_step"):
        parts.append(f"y = k × ({long_name(spec['metric'], ds)})")
    overlaps = overlapping_settings(drawn.means)
    if overlaps:
        parts.append(f"drawn over each other (within {OVERLAP:.0%} of the axis height; told "
                     f"apart by marker and line style): {'; '.join(overlaps)}")
    for reason, labels in drawn.missing.items():
        parts.append(f"not drawn ({reason}): {', '.join(labels)}")
    return "; ".join(parts) + "."


def _auto_log(values: list[np.ndarray]) -> bool:
    """A log axis for positive values spanning two decades or more."""
    flat = np.concatenate([np.ravel(v) for v in values]) if values else np.array([])
    flat = flat[np.isfinite(flat)]
    return bool(len(flat) and flat.min() > 0 and flat.max() >= 100 * flat.min())


def metric_figure(ds: xr.Dataset, spec: dict, out_dir: Path, name: str) -> Figure | None:
    """A trace against the step (or ``x_trace``), one panel per dataset, one colour, line style
    and marker per setting, one legend beside the panels and a caption under them saying what
    the lines, bands and marks are and which settings overlap or are not drawn (module
    docstring); with ``suboptimality`` the objective is drawn as (L − L*)/|L*| on a log axis,
    L* from :func:`_optimum`. Without ``logy``, a log axis if the values span two decades."""
    if "against" in spec:
        return frontier_figure(ds, spec, out_dir, name)
    if "x" in spec:
        return sweep_figure(ds, spec, out_dir, name)
    metric = spec["metric"]
    if metric not in ds:
        return None
    subopt = bool(spec.get("suboptimality")) and "final_objective" in ds
    logy = spec.get("logy") or subopt
    datasets = ds["dataset"].values.tolist()
    fig, axes = panel_row(len(datasets), 4.6)
    step = ds["step"].values
    scale = step if spec.get("scale_by_step") else 1.0
    x_trace = spec.get("x_trace")
    every = settings(ds)  # styled together: a setting looks the same in every figure
    styles = line_styles([(setting_label(ds, p), str(p["algorithm"])) for p in every])
    points = [p for p in every
              if not spec.get("algorithms") or p["algorithm"] in spec["algorithms"]]
    colours = [styles[setting_label(ds, p)]["color"] for p in points]
    drawn, plotted, levels = _Drawn(), [], []
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for i, (point, colour) in enumerate(zip(points, colours, strict=True)):
            sub = select_setting(ds, point, dataset)
            label = setting_label(ds, point)
            values = sub[metric].values.reshape(-1, len(step)).astype(float)
            if subopt:
                optimum = _optimum(ds, point, dataset)
                values = (values - optimum) / abs(optimum)
                if np.isfinite(values).any() and not (values > 0).any():
                    drawn.skip(label, "its final L is L* (0 on a log axis)")
                values[values <= 0] = np.nan  # L* itself: no point on a log axis
            keep = np.isfinite(values).any(axis=1)
            runs = values[keep] * scale
            if not len(runs):
                if not subopt:
                    drawn.skip(label, f"no value of {metric}")
                continue
            _, distinct = np.unique(sub["job_hash"].values.ravel()[keep], return_index=True)
            drawn.runs[label] = len(distinct)
            xs = step if x_trace is None else sub[x_trace].values.reshape(-1, len(step))[keep][0]
            style = {**setting_style(i), "marker": styles[label]["marker"]}
            if spec.get("error") in ds:  # a ±error band (e.g. a standard error over draws)
                err = np.nanmean(sub[spec["error"]].values.reshape(-1, len(step))[keep], axis=0)
                plotted.append(_draw_band(ax, xs, runs, err, colour, label, style,
                                          (i, len(points)), drawn))
            elif np.isfinite(runs).sum(axis=1).max() == 1:
                # a one-step method (a direct solve): its final value as a dashed level in its
                # own colour (but a gap of 1e-16 on a log axis is no line)
                level = float(np.nanmean(runs))
                levels.append((ax, level, colour, label))  # drawn once the scale is known
                if level > TINY:
                    plotted.append(np.array([level]))
                continue
            else:
                mean = _draw_runs(ax, xs, runs, colour, label,
                                  len(runs) > 1 and spec.get("band", True), i, len(points),
                                  drawn, style["marker"])
                if mean is not None:
                    drawn.means.append((ax, label, xs, mean))
                plotted.append(runs)
            drawn.marks |= _marks(ax, sub, spec, colour)
        _draw_reference(ax, ds, spec.get("reference"), dataset, scale, x_trace, plotted)
        ax.set_xlabel(math_text(axis_label(x_trace, ds)) if x_trace else STEP_LABEL)
        panel_ylabel(ax, _metric_label(ds, metric, spec, subopt))
        panel_title(ax, f"{spec.get('title', metric)}: {dataset}")
        if spec.get("logx"):
            ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
    logy = logy or ("logy" not in spec and _auto_log(plotted))
    _draw_levels(levels, logy, drawn)
    if logy:
        for ax in axes[0]:
            ax.set_yscale("log")
    return finish_figure(fig, axes, out_dir / f"{name}.png", _caption(spec, ds, drawn))


def _draw_band(ax, xs: np.ndarray, runs: np.ndarray, err: np.ndarray, colour, label: str,
               style: dict, position: tuple[int, int], drawn: _Drawn) -> np.ndarray:
    """A setting's mean over its runs with a ±``err`` band (e.g. a standard error over
    draws); returns the mean's finite values (for the axis's scale)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(runs, axis=0)
    ok = np.isfinite(mean)
    ax.plot(xs[ok], mean[ok], color=colour, label=label, mfc="none", ms=5, ls=style["ls"],
            marker=style["marker"], markevery=markevery_for(int(ok.sum()), *position))
    if np.isfinite(err[ok]).any():
        drawn.band = True
        ax.fill_between(xs[ok], (mean - err)[ok], (mean + err)[ok], color=colour, alpha=0.2,
                        lw=0)
    drawn.means.append((ax, label, xs, mean))
    return mean[ok]


def _draw_reference(ax, ds: xr.Dataset, reference: str | None, dataset, scale, x_trace,
                    plotted: list) -> None:
    """The ``reference`` trace of ``dataset`` (e.g. the exact GP's) as a black dashed line."""
    if not reference or reference not in ds:
        return
    step = ds["step"].values
    curve = ds[reference].sel(dataset=dataset).values.reshape(-1, len(step))
    rows = np.isfinite(curve).any(axis=1)
    if rows.any():
        ref_x = step if x_trace is None else (
            ds[x_trace].sel(dataset=dataset).values.reshape(-1, len(step))[rows][0])
        ok = np.isfinite(curve[rows][0])
        ax.plot(ref_x[ok], (curve[rows][0] * scale)[ok], "k--", lw=1.2,
                label=long_name(reference, ds))
        plotted.append((curve[rows][0] * scale)[ok])


def _metric_label(ds: xr.Dataset, metric: str, spec: dict, subopt: bool) -> str:
    """The y axis's label: the metric's, k × it when scaled by the step, or (L − L*)/|L*|."""
    if subopt:
        return "(L − L*)/|L*|"
    if spec.get("scale_by_step"):
        return axis_label(metric, ds).replace(long_name(metric, ds),
                                              f"k × ({long_name(metric, ds)})")
    return axis_label(metric, ds)


def _draw_levels(levels: list, logy: bool, drawn: _Drawn) -> None:
    """The one-step methods' final values as dashed levels, once the scale is known (a value
    ≤ TINY is off a log axis: skipped, and the caption says why)."""
    for ax, level, colour, label in levels:
        if logy and level <= TINY:
            drawn.skip(label, f"one step, ≤ {TINY:g}: zero to round-off, off the log axis")
            continue
        ax.axhline(level, ls="--", lw=1.2, color=colour, label=label)
        drawn.levels = True


def frontier_figure(ds: xr.Dataset, spec: dict, out_dir: Path, name: str) -> Figure | None:
    """A final metric against a final cost (``against``, e.g. ``final_seconds``), one panel per
    dataset and one line per algorithm through its settings along ``over`` (e.g. the basis
    size), means over the seeds: which method is best at equal time."""
    metric, against, over = spec["metric"], spec["against"], spec["over"]
    if metric not in ds or against not in ds or over not in ds.dims:
        return None
    datasets = ds["dataset"].values.tolist()
    fig, axes = panel_row(len(datasets), 4.4)
    algorithms = ds["algorithm"].values.tolist()
    styles = line_styles([(str(a), str(a)) for a in algorithms])
    colours = [styles[str(a)]["color"] for a in algorithms]
    references = []
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for i, algorithm in enumerate(algorithms):
            sub = ds.sel(dataset=dataset, algorithm=algorithm)
            ok = sub["status"] == "ok"
            other = [d for d in sub[metric].dims if d != over]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                x = sub[against].where(ok).mean(other, skipna=True).values
                y = sub[metric].where(ok).mean(other, skipna=True).values
            keep = np.isfinite(x) & np.isfinite(y)
            if not keep.any():
                continue
            style = setting_style(i)
            line = ax.plot(x[keep], y[keep], color=colours[i], ls=style["ls"],
                           marker=styles[str(algorithm)]["marker"], mfc="none", label=algorithm,
                           ms=5)[0]
            if np.unique(sub["job_hash"].values).size == 1:  # one job along `over`: a reference
                line.set(linestyle="none", ms=10, mfc=colours[i])  # its marker, filled
                references.append(algorithm)
                continue
            for xi, yi, size in zip(x[keep], y[keep], ds[over].values[keep], strict=True):
                ax.annotate(str(size), (xi, yi), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
        ax.set(xscale="log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel(math_text(spec.get("xlabel", axis_label(against, ds))))
        panel_ylabel(ax, axis_label(metric, ds))
        panel_title(ax, f"{spec.get('title', metric)}: {dataset}")
        if spec.get("logy"):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    caption = (f"Points: mean over seeds and the other swept dims at each {symbol(over)} "
               f"({long_name(over, ds)}; the number beside a point)")
    if references:
        caption += (f"; a large filled marker: one job that does not depend on it "
                    f"({', '.join(dict.fromkeys(references))})")
    return finish_figure(fig, axes, out_dir / f"{name}.png", caption + ".")
