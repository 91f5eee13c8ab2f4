"""Cost scaling of a sweep over data size and basis size, against 004's Table 1.

A sweep over ``size`` (e.g. ``dataset.n_train``) and ``basis`` (e.g. ``algorithm.max_basis``)
gives, per algorithm and cost quantity (training seconds, peak memory, seconds to predict the
mean and the error bars), two lines: against the data size at the fixed basis size
``at_basis``, and against the basis size at the fixed data size ``at_size``. The log-log slope
of each line, fitted over its ``fit_last`` largest points, is the measured exponent; the
experiment's ``paper`` mapping gives Table 1's. An algorithm whose basis size is not an option
but a trace variable (CG's iteration count: ``trace_basis``) has its basis slope fitted to its
trace (cumulative seconds against that variable) at ``at_size``.

Configured by ``report.scaling`` (see conf/experiment/smola2001_table1.yaml); used by
:mod:`pipeline.report`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

from pipeline.atomic import save_figure
from pipeline.report.style import Figure, method_style
from pipeline.results.variables import symbol

QUANTITIES = {"final_seconds": "training seconds",
              "final_fit_peak_bytes": "training peak memory (bytes)",
              "final_predict_mean_seconds": "seconds to predict the mean",
              "final_predict_var_seconds": "seconds to predict the error bars",
              "final_iteration_seconds": "training seconds per iteration"}


def _line(ds: xr.Dataset, algorithm: str, quantity: str, along: str, fixed: dict
          ) -> tuple[np.ndarray, np.ndarray]:
    """(x, mean over seeds) of ``quantity`` along the dim ``along`` at ``fixed``, ok jobs only."""
    sel = {"algorithm": algorithm, **{k: v for k, v in fixed.items() if k in ds.dims}}
    sub = ds.sel(sel)
    values = sub[quantity].where(sub["status"] == "ok")
    other = [d for d in values.dims if d != along]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = values.mean(other, skipna=True).values
    x = ds[along].values.astype(float)
    keep = np.isfinite(mean) & (mean > 0)
    return x[keep], mean[keep]


def slope(x: np.ndarray, y: np.ndarray, last: int) -> tuple[float, str]:
    """Least-squares slope of log y on log x over the ``last`` largest x, and the x range."""
    if len(x) < 2:
        return np.nan, "–"
    x, y = x[-last:], y[-last:]
    return float(np.polyfit(np.log(x), np.log(y), 1)[0]), f"{x[0]:g}–{x[-1]:g}"


def _trace_line(ds: xr.Dataset, algorithm: str, variable: str, at_size: dict
                ) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative seconds against a trace variable (e.g. CG iterations), first ok run."""
    sub = ds.sel({"algorithm": algorithm, **{k: v for k, v in at_size.items() if k in ds.dims}})
    x = sub[variable].values.reshape(-1, ds.sizes["step"])
    y = sub["seconds"].values.reshape(-1, ds.sizes["step"])
    rows = np.flatnonzero(np.isfinite(x).any(axis=1))
    if not len(rows):
        return np.array([]), np.array([])
    x, y = x[rows[0]], y[rows[0]]
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    return x[keep], y[keep]


def _fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def scaling_table(ds: xr.Dataset, cfg: dict) -> str:
    """Markdown: measured log-log slopes next to Table 1's exponents, per algorithm and
    quantity."""
    size, basis = cfg["size"], cfg["basis"]
    at_basis, at_size = {basis: cfg["at_basis"]}, {size: cfg["at_size"]}
    last, paper = int(cfg.get("fit_last", 4)), cfg.get("paper", {})
    trace_basis = cfg.get("trace_basis", {})
    header = ["algorithm", "quantity", f"slope vs {size} (at {basis}={cfg['at_basis']})",
              "Table 1", f"slope vs basis size (at {size}={cfg['at_size']})", "Table 1"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for algorithm in ds["algorithm"].values.tolist():
        for quantity, label in QUANTITIES.items():
            if quantity not in ds:
                continue
            exponents = paper.get(algorithm, {}).get(quantity.removeprefix("final_"), [None] * 2)
            s_n, range_n = slope(*_line(ds, algorithm, quantity, size, at_basis), last)
            along_basis = ds["job_hash"].sel(algorithm=algorithm, **{
                k: v for k, v in at_size.items() if k in ds.dims})
            varies = basis in ds.dims and np.unique(along_basis.values).size > 1
            if varies and algorithm not in trace_basis:
                s_m, range_m = slope(*_line(ds, algorithm, quantity, basis, at_size), last)
            elif algorithm in trace_basis and quantity == "final_seconds":
                x, y = _trace_line(ds, algorithm, trace_basis[algorithm], at_size)
                s_m, range_m = slope(x[x >= 4], y[x >= 4], len(x))
                range_m = f"{trace_basis[algorithm]} {range_m}"
            else:
                s_m, range_m = np.nan, "–"
            if not (np.isfinite(s_n) or np.isfinite(s_m)):
                continue  # a quantity the algorithm does not have (CG's time per iteration)
            cells = [f"{s_n:.2f} ({range_n})" if np.isfinite(s_n) else "–", _fmt(exponents[0]),
                     f"{s_m:.2f} ({range_m})" if np.isfinite(s_m) else "–", _fmt(exponents[1])]
            rows.append("| " + " | ".join([algorithm, label, *cells]) + " |")
    return "\n".join(rows)


def _plain_log_ticks(ax, values) -> None:
    """Log axis ticked at the swept values, labelled plainly (no overlapping 3×10³ minors)."""
    values = sorted({float(v) for v in values})
    ax.xaxis.set_major_locator(FixedLocator(values))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{v:g}" for v in values]))
    ax.xaxis.set_minor_formatter(NullFormatter())


def scaling_figure(ds: xr.Dataset, cfg: dict, out_dir: Path, name: str) -> Figure:
    """Log-log cost against data size (left) and basis size (right), one colour per algorithm
    (one legend for the figure); rows: training seconds, training peak memory, prediction
    seconds (mean solid, error bars dashed)."""
    size, basis = cfg["size"], cfg["basis"]
    at_basis, at_size = {basis: cfg["at_basis"]}, {size: cfg["at_size"]}
    trace_basis = cfg.get("trace_basis", {})
    rows = [("final_seconds", None), ("final_fit_peak_bytes", None),
            ("final_predict_mean_seconds", "final_predict_var_seconds")]
    rows = [r for r in rows if r[0] in ds]
    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 3.6 * len(rows) + 0.8), squeeze=False)
    styles = {a: method_style(a) for a in ds["algorithm"].values.tolist()}
    colours = {a: colour for a, (colour, _) in styles.items()}
    for (quantity, dashed), (ax_n, ax_m) in zip(rows, axes, strict=True):
        for algorithm, colour in colours.items():
            marker = styles[algorithm][1]  # filled: the quantity; hollow, dashed: error bars
            for q, style in ((quantity, {"ls": "-", "marker": marker}),
                             (dashed, {"ls": "--", "marker": marker, "mfc": "none"})):
                if q is None or q not in ds:
                    continue
                x, y = _line(ds, algorithm, q, size, at_basis)
                if len(x):
                    ax_n.plot(x, y, color=colour, ms=4, **style)
                if algorithm in trace_basis and q == "final_seconds":
                    x, y = _trace_line(ds, algorithm, trace_basis[algorithm], at_size)
                    ax_m.plot(x, y, ":", color=colour, lw=2)
                elif basis in ds.dims and ds.sizes[basis] > 1:
                    x, y = _line(ds, algorithm, q, basis, at_size)
                    if len(x) > 1:
                        ax_m.plot(x, y, color=colour, ms=4, **style)
        title = QUANTITIES[quantity] + (" (dashed: error bars)" if dashed else "")
        ax_n.set(xscale="log", yscale="log", xlabel=f"training points {symbol(size)}",
                 title=f"{title}\nagainst n at {symbol(basis)} = {cfg['at_basis']}")
        ax_m.set(xscale="log", yscale="log", xlabel=f"basis size {symbol(basis)}"
                 + (" or CG iterations" if trace_basis and quantity == "final_seconds" else ""),
                 title=f"{title}\nagainst basis size at {symbol(size)} = {cfg['at_size']}")
        _plain_log_ticks(ax_n, ds[size].values)
        if basis in ds.dims:
            low = min(ds[basis].values)
            traced = [x for line in ax_m.lines for x in line.get_xdata() if x < low]
            # a trace line (CG's iterations) reaches below the swept basis sizes: 1, 4, 16, …
            extra = [4.0 ** k for k in range(8) if traced and min(traced) <= 4.0 ** k < low]
            _plain_log_ticks(ax_m, [*ds[basis].values, *extra])
        for ax in (ax_n, ax_m):
            ax.grid(True, which="major", alpha=0.3)
            ax.set_ylabel("bytes" if quantity.endswith("_bytes") else "seconds", fontsize=9)
    handles = [Line2D([], [], color=c, marker=styles[a][1], label=a) for a, c in colours.items()]
    handles += [Line2D([], [], color="grey", ls="--", marker="o", mfc="none", label="error bars"),
                *(Line2D([], [], color=colours.get(a, "grey"), ls=":", lw=2,
                         label=f"{a}: cumulative seconds per {v}")
                  for a, v in trace_basis.items() if a in colours)]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 4), fontsize=8,
               frameon=False)
    missing = sorted({a for a in colours if (ds["status"].sel(algorithm=a) != "ok").any()})
    caption = ("Points: mean over the seeds of the jobs that finished (log-log axes, so a line's "
               "slope is the measured exponent); solid lines, filled markers: the quantity in the "
               "row's title, dashed lines, hollow markers: error bars"
               + (f"; dotted: cumulative seconds against the trace variable "
                  f"({', '.join(trace_basis)})" if trace_basis else "")
               + (f"; a line ends where jobs did not finish ({', '.join(missing)}: see Failed "
                  "jobs)" if missing else "") + ".")
    # the caption is the report's line under the figure, not drawn in it (said once)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    path = out_dir / f"{name}.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return Figure(path, caption)
