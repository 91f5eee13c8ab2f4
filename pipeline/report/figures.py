"""A report's figures: a metric along the fit's steps per setting, a sweep's metric against a
swept key, and the accuracy-against-cost frontier.
"""

from __future__ import annotations

import itertools
import textwrap
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from pipeline.results.variables import axis_label, long_name


def settings(ds: xr.Dataset) -> list[dict]:
    """One dict of coordinates per line: every dim except dataset, step and the dims averaged
    over (seed, plus the report's ``average_over``). A dim the setting's jobs do not depend on
    (κ for algorithms that ignore it, an option the algorithm does not take: their results
    repeat along it) is left out, and a setting whose jobs are all those of an earlier one is
    dropped."""
    averaged = ("dataset", "seed", *ds.attrs.get("average_over", ()))
    dims = [d for d in ds["status"].dims if d not in averaged]
    hashes = ds["job_hash"].load()
    out, seen = [], set()
    for values in itertools.product(*(ds[d].values.tolist() for d in dims)):
        point = dict(zip(dims, values, strict=True))
        key = tuple(hashes.sel(point).values.ravel().tolist())
        if key in seen:
            continue
        seen.add(key)
        for dim in [d for d in point if d != "algorithm" and ds.sizes[d] > 1]:
            along = hashes.sel({k: v for k, v in point.items() if k != dim})
            if bool((along == along.isel({dim: 0})).all()):
                del point[dim]
        out.append(point)
    return out


def _label(ds: xr.Dataset, point: dict) -> str:
    parts = [str(point["algorithm"])]
    for dim, value in point.items():
        if dim != "algorithm" and ds.sizes[dim] > 1:
            parts.append(f"{dim}={value}")
    return " ".join(parts)


def _select(ds: xr.Dataset, point: dict, dataset: str) -> xr.Dataset:
    sel = {**point, "dataset": dataset}
    averaged = ("dataset", "seed", "step", *ds.attrs.get("average_over", ()))
    for dim in ds["status"].dims:  # a dim the setting does not depend on: its first value
        if dim not in sel and dim not in averaged:
            sel[dim] = ds[dim].values[0]
    return ds.sel(sel)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sweep_figure(ds: xr.Dataset, spec: dict, out_dir: Path, name: str) -> Path | None:
    """A final (per-job) metric against a swept coordinate ``x``, one panel per dataset and one
    line per ``lines`` value, mean over the other dims with a ±1 standard-error band."""
    metric, x, lines = spec["metric"], spec["x"], spec.get("lines")
    if metric not in ds or x not in ds.dims:
        return None
    datasets = ds["dataset"].values.tolist()
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.2), squeeze=False)
    groups = ds[lines].values.tolist() if lines in ds.dims else [None]
    colours = _palette(len(groups))
    coords = ds[x].values
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for group, colour in zip(groups, colours, strict=True):
            values, hashes = ds[metric].sel(dataset=dataset), ds["job_hash"].sel(dataset=dataset)
            if group is not None:
                values, hashes = values.sel({lines: group}), hashes.sel({lines: group})
            other = [d for d in values.dims if d != x]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = values.mean(other, skipna=True).values
                count = np.isfinite(values).sum(other).values
                se = values.std(other, skipna=True).values / np.sqrt(np.maximum(count, 1))
            ok = np.isfinite(mean)
            if not ok.any():
                continue
            label = str(group) if lines == "algorithm" else (f"{lines}={group}" if lines
                                                             else long_name(metric, ds))
            if bool((hashes == hashes.isel({x: 0})).all()):  # the same jobs at every x: a level
                ax.axhline(float(np.nanmean(mean)), color=colour, ls="--", lw=1.2, label=label)
                continue
            ax.plot(coords[ok], mean[ok], "o-", color=colour, ms=4, label=label)
            ax.fill_between(coords[ok], (mean - se)[ok], (mean + se)[ok], color=colour,
                            alpha=0.2, lw=0)
        ax.set_xlabel(axis_label(x, ds))
        _ylabel(ax, axis_label(metric, ds))
        _title(ax, f"{spec.get('title', metric)}: {dataset}")
        if spec.get("logx"):
            ax.set_xscale("log")
        if coords.dtype.kind in "iuf" and len(coords) <= 12:  # the swept values as the ticks
            ax.set_xticks(coords, [f"{v:g}" for v in coords])
            ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, out_dir / f"{name}.png")


def _marks(ax, sub: xr.Dataset, spec: dict, color) -> None:
    """Dotted vertical/horizontal lines at a setting's final values named by ``vlines`` and
    ``hlines`` (e.g. a detaching point and a plateau), mean over its runs."""
    for key, draw in (("vlines", ax.axvline), ("hlines", ax.axhline)):
        if spec.get(key) in sub:
            value = sub[spec[key]].values
            if np.isfinite(value).any():
                draw(float(np.nanmean(value)), color=color, ls=":", lw=1.2)


def _palette(n: int) -> list:
    """n distinct colours: tab10, or tab20 beyond ten lines."""
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _title(ax, text: str, width: int = 58) -> None:
    ax.set_title("\n".join(textwrap.wrap(text, width)), fontsize=10)


def _ylabel(ax, text: str, width: int = 45) -> None:
    ax.set_ylabel("\n".join(textwrap.wrap(text, width)), fontsize=9)


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


MARKERS = "osD^vP*Xh<>p"  # per setting, shown where a line has few points: overlaps stay visible


def _draw_runs(ax, xs: np.ndarray, runs: np.ndarray, colour, label: str, band: bool,
               marker: str = "o") -> None:
    """The mean over ``runs`` (rows) at the points every run reached, lines connecting the
    evaluated points (NaN between evaluations is skipped), a min–max band; a run that goes on
    past the shortest one is drawn on from there as a thin line of its own, so the mean never
    jumps where a run ends."""
    reached = np.isfinite(runs).all(axis=0)
    if not reached.any():  # no point every run reached: draw each run
        for i, run in enumerate(runs):
            ok = np.isfinite(run)
            ax.plot(xs[ok], run[ok], color=colour, lw=1, marker="o" if ok.sum() < 3 else None,
                    ms=3, label=label if i == 0 else None)
        return
    common = np.flatnonzero(reached)
    mean = runs[:, common].mean(axis=0)
    ax.plot(xs[common], mean, color=colour, lw=1.5, label=label,
            marker=marker if len(common) <= 12 else None, ms=5, mfc="none")
    if band and len(runs) > 1:
        ax.fill_between(xs[common], runs[:, common].min(axis=0), runs[:, common].max(axis=0),
                        color=colour, alpha=0.2, lw=0)
    last = common[-1]
    for run in runs:
        tail = np.flatnonzero(np.isfinite(run) & (np.arange(len(run)) >= last))
        if len(tail) > 1:
            ax.plot(xs[tail], run[tail], color=colour, lw=0.7, alpha=0.6)


def metric_figure(ds: xr.Dataset, spec: dict, out_dir: Path, name: str) -> Path | None:
    """A trace against the step (or ``x_trace``), one panel per dataset, one colour per
    setting (module docstring); with ``suboptimality`` the objective is drawn as
    (L − L*)/|L*| on a log axis, L* from :func:`_optimum`."""
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
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.4), squeeze=False)
    step = ds["step"].values
    scale = step if spec.get("scale_by_step") else 1.0
    x_trace = spec.get("x_trace")
    points = [p for p in settings(ds)
              if not spec.get("algorithms") or p["algorithm"] in spec["algorithms"]]
    colours = _palette(len(points))
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for point, colour in zip(points, colours, strict=True):
            sub = _select(ds, point, dataset)
            values = sub[metric].values.reshape(-1, len(step)).astype(float)
            if subopt:
                optimum = _optimum(ds, point, dataset)
                values = (values - optimum) / abs(optimum)
                values[values <= 0] = np.nan  # L* itself: no point on a log axis
            keep = np.isfinite(values).any(axis=1)
            runs = values[keep] * scale
            if not len(runs):
                continue
            xs = step if x_trace is None else sub[x_trace].values.reshape(-1, len(step))[keep][0]
            label = _label(ds, point)
            if spec.get("error") in ds:  # a ±error band (e.g. a standard error over draws)
                err = np.nanmean(sub[spec["error"]].values.reshape(-1, len(step))[keep], axis=0)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean = np.nanmean(runs, axis=0)
                ok = np.isfinite(mean)
                ax.plot(xs[ok], mean[ok], color=colour, label=label, mfc="none", ms=5,
                        marker=MARKERS[points.index(point) % len(MARKERS)] if ok.sum() <= 12
                        else None)
                ax.fill_between(xs[ok], (mean - err)[ok], (mean + err)[ok], color=colour,
                                alpha=0.2, lw=0)
            elif np.isfinite(runs).sum(axis=1).max() == 1:
                # a one-step method (a direct solve): its final value as a dashed level in its
                # own colour (but a gap of 1e-16 on a log axis is no line)
                level = np.nanmean(runs)
                if not logy or level > 1e-12:
                    ax.axhline(level, ls="--", lw=1.2, color=colour, label=label)
                continue
            else:
                _draw_runs(ax, xs, runs, colour, label, len(runs) > 1 and spec.get("band", True),
                           MARKERS[points.index(point) % len(MARKERS)])
            _marks(ax, sub, spec, colour)
        reference = spec.get("reference")
        if reference and reference in ds:
            curve = ds[reference].sel(dataset=dataset).values.reshape(-1, len(step))
            rows = np.isfinite(curve).any(axis=1)
            if rows.any():
                ref_x = step if x_trace is None else (
                    ds[x_trace].sel(dataset=dataset).values.reshape(-1, len(step))[rows][0])
                ok = np.isfinite(curve[rows][0])
                ax.plot(ref_x[ok], (curve[rows][0] * scale)[ok], "k--", lw=1.2,
                        label=axis_label(reference, ds))
        if subopt:
            ylabel = "(L − L*)/|L*|"
        else:
            ylabel = (f"k × {axis_label(metric, ds)}" if spec.get("scale_by_step")
                      else axis_label(metric, ds))
        ax.set_xlabel(axis_label(x_trace, ds) if x_trace else STEP_LABEL)
        _ylabel(ax, ylabel)
        _title(ax, f"{spec.get('title', metric)}: {dataset}")
        if logy:
            ax.set_yscale("log")
        if spec.get("logx"):
            ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return _save(fig, out_dir / f"{name}.png")


def frontier_figure(ds: xr.Dataset, spec: dict, out_dir: Path, name: str) -> Path | None:
    """A final metric against a final cost (``against``, e.g. ``final_seconds``), one panel per
    dataset and one line per algorithm through its settings along ``over`` (e.g. the basis
    size), means over the seeds: which method is best at equal time."""
    metric, against, over = spec["metric"], spec["against"], spec["over"]
    if metric not in ds or against not in ds or over not in ds.dims:
        return None
    datasets = ds["dataset"].values.tolist()
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.2), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for algorithm in ds["algorithm"].values.tolist():
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
            line = ax.plot(x[keep], y[keep], "o-", label=algorithm, ms=4)[0]
            if np.unique(sub["job_hash"].values).size == 1:  # one job along `over`: a reference
                line.set(linestyle="none", marker="*", ms=12)
                continue
            for xi, yi, size in zip(x[keep], y[keep], ds[over].values[keep], strict=True):
                ax.annotate(str(size), (xi, yi), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
        ax.set(xscale="log", xlabel=spec.get("xlabel", axis_label(against, ds)))
        _ylabel(ax, axis_label(metric, ds))
        _title(ax, f"{spec.get('title', metric)}: {dataset}")
        if spec.get("logy"):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, out_dir / f"{name}.png")

