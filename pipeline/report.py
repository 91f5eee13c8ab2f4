"""Figures (PNG) and a markdown table of headline numbers from a sweep's ``results.zarr``.

    python -m pipeline.report outputs/<sweep>/results.zarr [--out DIR] [--select DIM=VALUE ...]

``--select dataset.split=0`` reports only the jobs at that value of a swept dim (e.g. the one
split a long sweep has finished).

An experiment config may define ``report``:

- ``figures``: a list of ``{metric, logy, title, band, reference, scale_by_step, x_trace, logx,
  error, vlines, hlines}``, or of ``{metric, x, lines, logx}`` for a final value against a swept
  key (one line per ``lines``); the default is one "metric vs step per algorithm" figure for
  each of gap, test RMSE and objective. Each panel is one dataset; each line one setting of the
  other swept dims, the mean over seeds with a min–max band (``band: false`` drops it).
  ``reference`` names a second trace variable drawn as a dashed black curve (e.g. a theoretical
  bound); ``scale_by_step`` plots step × metric. ``x_trace`` takes the x axis from a trace
  variable (e.g. ``n_train`` of a learning curve), ``error`` draws a ±(that variable) band
  instead of the min–max one, and ``vlines``/``hlines`` name final values drawn as dotted lines
  in each line's colour (detaching points, plateaux); ``algorithms`` limits the lines to those
  algorithms. Runs with a single step (a direct solve) are
  drawn as dashed horizontal lines.
- ``columns``: extra per-job final values for the table (e.g. ``final_R_hat``);
  ``at_steps``: ``{metric, steps}`` adds the metric's value at those steps (with ``x``: at
  those values of a trace variable, e.g. ``{metric: xbar_error, x: n_train, steps: [10, 100]}``);
  ``paper``: text quoted under the table (the published numbers to compare with);
  ``paired``: a list of ``{metric, a, b, over}``: paired t-tests of algorithm a vs b along the
  dim ``over`` (e.g. ``dataset.split_seed``); ``average_over``: dims aggregated like the seed
  (e.g. data splits) in figures and table; ``frontier``: metrics against wall time with the
  Pareto frontier and the best setting per time budget (:mod:`pipeline.frontier`).

The table gives, per setting, mean ± sd over distinct jobs of the final basis size, gap, test
RMSE and job time (plus the extras), and the job status counts. Everything is written beside
the figures in ``report.md``, and again, with the figures embedded and the sweep's config and
environment appended, in one self-contained ``report.html`` (:mod:`pipeline.html_report`).
"""

from __future__ import annotations

import errno
import itertools
import sys
import textwrap
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from scipy import stats  # noqa: E402

from algorithms.errors import InputError  # noqa: E402
from pipeline.command import OneLineParser, fail  # noqa: E402
from pipeline.frontier import budget_table, frontier_figures  # noqa: E402
from pipeline.html_report import html_path, write_html  # noqa: E402
from pipeline.results import load  # noqa: E402
from pipeline.scaling import scaling_figure, scaling_table  # noqa: E402
from pipeline.variables import axis_label, long_name  # noqa: E402

DEFAULT_FIGURES = [
    {"metric": "gap", "logy": True, "title": "relative duality gap"},
    {"metric": "test_rmse", "logy": False, "title": "test RMSE"},
    {"metric": "objective", "suboptimality": True,
     "title": "primal suboptimality, L* = lowest final L at these data and σ² (the full GP's "
              "min L where it ran)"},
]
TABLE_COLUMNS = ["final_n_basis", "final_gap", "final_test_rmse", "job_seconds"]


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


def failures(ds: xr.Dataset) -> str:
    """One line per distinct failed job: its setting and its one-line error."""
    lines, seen = [], set()
    failed = ds["status"] == "failed"
    for index in zip(*np.nonzero(failed.values), strict=True):
        point = {d: ds[d].values[i] for d, i in zip(failed.dims, index, strict=True)}
        h = str(ds["job_hash"].values[index])
        if h in seen:
            continue
        seen.add(h)
        where = " ".join(f"{d}={v}" for d, v in point.items() if ds.sizes[d] > 1)
        lines.append(f"- {where}: {ds['error'].values[index]}")
    return "\n".join(lines)


def _mean_sd(values: np.ndarray) -> str:
    values = values[np.isfinite(values)]
    if not len(values):
        return "–"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"


def headline_table(ds: xr.Dataset, extra_columns: list[str] = (),
                   at_steps: dict | None = None) -> str:
    """Markdown table: mean ± sd over distinct jobs of final numbers, per dataset and setting."""
    columns = [c for c in [*TABLE_COLUMNS, *extra_columns] if c in ds]
    step_cols = []  # (metric, step, label)
    if at_steps and at_steps.get("metric") in ds:
        x = at_steps.get("x")  # steps given as values of a trace variable (e.g. n_train)
        if x in ds:
            rows = ds[x].values.reshape(-1, ds.sizes["step"])
            grid = rows[np.isfinite(rows).any(axis=1)][0]
            step_cols = [(at_steps["metric"], int(ds["step"].values[np.flatnonzero(grid == k)[0]]),
                          f"{x}={k}") for k in at_steps["steps"] if k in grid]
        else:
            step_cols = [(at_steps["metric"], k, f"step {k}") for k in at_steps["steps"]
                         if k in ds["step"].values]
    header = ["dataset", "setting", *columns, *(f"{m} at {label}" for m, _, label in step_cols),
              "ok/failed/missing"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for dataset in ds["dataset"].values.tolist():
        for point in settings(ds):
            sub = _select(ds, point, dataset)
            status = sub["status"].values.ravel().tolist()
            # one value per distinct job: a seed-free job repeated along seed counts once
            _, distinct = np.unique(sub["job_hash"].values.ravel(), return_index=True)
            cells = [_mean_sd(sub[c].values.ravel()[distinct].astype(float)) for c in columns]
            cells += [_mean_sd(sub[m].sel(step=k).values.ravel()[distinct].astype(float))
                      for m, k, _ in step_cols]
            counts = "/".join(str(status.count(s)) for s in ("ok", "failed", "missing"))
            rows.append("| " + " | ".join([dataset, _label(ds, point), *cells, counts]) + " |")
    return "\n".join(rows)


def paired_tests(ds: xr.Dataset, specs: list[dict]) -> str:
    """Markdown table of paired t-tests: ``metric`` of algorithm ``a`` vs ``b``, paired along
    the dim ``over`` (e.g. the data split), separately for every setting of the other dims."""
    header = ["metric", "setting", "a", "b", "mean a ± sd", "mean b ± sd", "mean(a − b)",
              "t", "p", "pairs"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for spec in specs:
        metric, a, b, over = spec["metric"], spec["a"], spec["b"], spec["over"]
        if metric not in ds or over not in ds.dims:
            continue
        values = ds[metric].sel(algorithm=[a, b])
        others = [d for d in values.dims if d not in ("algorithm", over) and values.sizes[d] > 1]
        for combo in itertools.product(*(values[d].values.tolist() for d in others)):
            sel = values.sel(dict(zip(others, combo, strict=True)))
            sel = sel.isel({d: 0 for d in sel.dims if d not in ("algorithm", over)})
            va, vb = sel.sel(algorithm=a).values, sel.sel(algorithm=b).values
            keep = np.isfinite(va) & np.isfinite(vb)
            va, vb = va[keep], vb[keep]
            if len(va) < 2:
                continue
            with warnings.catch_warnings():  # identical pairs give t = nan
                warnings.simplefilter("ignore", RuntimeWarning)
                t, p = stats.ttest_rel(va, vb)
            setting = " ".join(f"{d}={v}" for d, v in zip(others, combo, strict=True)) or "–"
            rows.append("| " + " | ".join([
                metric, setting, a, b, _mean_sd(va), _mean_sd(vb), f"{np.mean(va - vb):.4g}",
                f"{t:.3g}", f"{p:.3g}", str(len(va))]) + " |")
    return "\n".join(rows)


def overhead_line(ds: xr.Dataset) -> str:
    """Sweep wall time against the ideal (sum of job times / workers), with its phases."""
    timings, workers = ds.attrs.get("timings", {}), int(ds.attrs.get("n_workers", 0))
    if not workers or "jobs_seconds" not in timings:
        return "overhead: no jobs ran in the last invocation of this sweep (all were cached)"
    distinct = np.unique(ds["job_hash"].values.ravel(), return_index=True)[1]
    compute = float(np.nansum(ds["job_seconds"].values.ravel()[distinct]))
    ideal = compute / workers
    wall = timings["wall_seconds"]
    phases = ", ".join(f"{k.removesuffix('_seconds')} {v:.2f} s" for k, v in timings.items()
                       if k != "startup_seconds")
    whole = ""
    if "startup_seconds" in timings:  # the command line's process, from its start
        process = timings["startup_seconds"] + wall
        whole = (f"; whole process from its start to the end of the jobs {process:.2f} s, / "
                 f"ideal = {process / ideal:.2f} (consolidation not included)")
    return (f"overhead: {len(distinct)} jobs on {workers} workers; sum of job times "
            f"{compute:.2f} s, / workers = {ideal:.2f} s; launcher wall {wall:.2f} s "
            f"({phases}); wall / ideal = {wall / ideal:.2f}, job phase / ideal = "
            f"{timings['jobs_seconds'] / ideal:.2f}{whole}")


def select(ds: xr.Dataset, choices: dict[str, str]) -> xr.Dataset:
    """The part of a sweep at one value of each swept dim in ``choices`` (dim → value as
    typed on the command line, e.g. ``dataset.split=0``), kept as a dim of length one."""
    for dim, text in choices.items():
        if dim not in ds["status"].dims or dim in ("step", "hyper_eval"):
            swept = [d for d in ds["status"].dims if d not in ("algorithm", "dataset")]
            raise InputError(f"--select {dim}={text}: {dim} is not a swept dim of this sweep; "
                             f"choose one of {', '.join(swept)}")
        values = ds[dim].values.tolist()
        match = [v for v in values if str(v) == text]
        if not match:
            raise InputError(f"--select {dim}={text}: {dim} takes "
                             f"{', '.join(map(str, values))} in this sweep; pass one of them")
        ds = ds.sel({dim: match})
    return ds


def render(path: str | Path, out_dir: str | Path | None = None,
           choices: dict[str, str] | None = None) -> Path:
    """Write the figures and ``report.md`` for ``results.zarr`` at ``path``, restricted to
    ``choices`` (:func:`select`); returns report.md.

    Raises :class:`InputError` (one line) when ``path`` is not a sound results store
    (:func:`pipeline.results.load` verifies it), a choice is not in the sweep, or the report
    cannot be written to ``out_dir``."""
    path = Path(path)
    ds = select(load(path).load(), choices or {})
    out_dir = Path(out_dir) if out_dir else path.parent / "report"
    try:
        return _write_report(ds, path, out_dir)
    except OSError as err:
        reason = f"{err.strerror or err}" + (f" ({errno.errorcode[err.errno]})"
                                             if err.errno in errno.errorcode else "")
        raise InputError(f"cannot write the report to {out_dir}: {reason}; pass --out with a "
                         "directory you can write") from None


def _write_report(ds: xr.Dataset, path: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    report_cfg = ds.attrs["config"].get("report") or {}
    ds.attrs["average_over"] = tuple(report_cfg.get("average_over", ()))
    figures = [metric_figure(ds, spec, out_dir, f"fig{i}_{spec['metric']}")
               for i, spec in enumerate(report_cfg.get("figures", DEFAULT_FIGURES), start=1)]
    table = headline_table(ds, report_cfg.get("columns", []), report_cfg.get("at_steps"))
    lines = [f"# Sweep `{ds.attrs['sweep']}`", "",
             f"results: `{path}` (git {ds.attrs['git_sha'][:12]}, swept: "
             f"{', '.join(ds.attrs['swept_keys'])})", "", table, ""]
    if report_cfg.get("paired"):
        lines += ["Paired t-tests:", "", paired_tests(ds, report_cfg["paired"]), ""]
    if report_cfg.get("scaling"):
        figures.append(scaling_figure(ds, report_cfg["scaling"], out_dir,
                                      f"fig{len(figures) + 1}_scaling"))
        lines += ["Log-log slopes of the costs (004 Table 1 in this product's notation: n "
                  "training points, m basis functions):", "",
                  scaling_table(ds, report_cfg["scaling"]), ""]
    if report_cfg.get("frontier"):
        figures += frontier_figures(ds, report_cfg["frontier"], out_dir, len(figures) + 1)
        lines += [budget_table(ds, report_cfg["frontier"]), ""]
    if report_cfg.get("paper"):
        lines += [f"Paper: {report_cfg['paper']}", ""]
    if (ds["status"] == "failed").any():
        lines += ["Failed jobs:", "", failures(ds), ""]
    lines += [overhead_line(ds), ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures if p is not None]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    write_html(report, ds, path)
    return report


USAGE = "python -m pipeline.report <results.zarr> [--out DIR] [--select DIM=VALUE ...]"


def main(argv: list[str] | None = None) -> int:
    """The command line; every failure is one ``error: …`` line on stderr and exit code 2."""
    parser = OneLineParser(prog="python -m pipeline.report", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("results", help="a sweep's results.zarr")
    parser.add_argument("--out", help="output directory (default: <sweep>/report)")
    parser.add_argument("--select", action="append", default=[], metavar="DIM=VALUE",
                        help="report only the jobs at this value of a swept dim "
                             "(e.g. dataset.split=0); repeatable")
    try:
        args = parser.parse_args(argv)
        choices = {}
        for item in args.select:
            dim, sep, value = item.partition("=")
            if not sep or not dim or not value:
                raise InputError(f"--select {item!r} is not DIM=VALUE; pass e.g. "
                                 "--select dataset.split=0")
            choices[dim] = value
        report = render(args.results, args.out, choices)
    except InputError as err:
        return fail(err)
    print(report.read_text())
    print(f"report: {report}")
    print(f"html: {html_path(report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
