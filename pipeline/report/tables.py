"""A report's tables: failures, the headline table (mean ± sd over seeds), paired tests, and the
sweep's overhead line.
"""

from __future__ import annotations

import itertools
import warnings

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from scipy import stats  # noqa: E402

from pipeline.job.hyper import at_bound_settings
from pipeline.lines import one_line
from pipeline.report.figures import select_setting, setting_label, settings
from pipeline.results.access import decoded_attrs
from pipeline.results.variables import setting_text, short_label, symbol

TABLE_COLUMNS = ["final_n_basis", "final_gap", "final_test_rmse", "job_seconds"]



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
        lines.append(f"- {where}: {one_line(ds['error'].values[index])}")
    return "\n".join(lines)


def at_bound(ds: xr.Dataset) -> str:
    """One line per :func:`at_bound_settings` row; empty if no learning ended on a bound."""
    return "\n".join(f"- {where}: {value} ({n} job{'s' if n > 1 else ''})"
                     for where, value, n in at_bound_settings(ds))


def _cell(text: str) -> str:
    """``text`` for a markdown table cell: a ``|`` (as in ``|L|``) written as ``∣``."""
    return text.replace("|", "∣")


ROUND_OFF = 1e-14  # |value| below this: zero to round-off (a gap of -2.7e-16), printed so


def _number(value: float, digits: str = ".4g") -> str:
    """``value`` to 4 significant digits; round-off around zero as ``< 1e-14``, never ``-0``."""
    if value == 0:
        return "0"
    if abs(value) < ROUND_OFF:
        return f"< {ROUND_OFF:g}"
    return f"{value:{digits}}"


def _mean_sd(values: np.ndarray) -> str:
    """``mean ± sd`` of the finite values; one value (or all equal) as itself."""
    values = values[np.isfinite(values)]
    if not len(values):
        return "–"
    sd = values.std(ddof=1) if len(values) > 1 else 0.0
    if sd == 0 or abs(sd) < ROUND_OFF and abs(values.mean()) < ROUND_OFF:
        return _number(values.mean())
    return f"{_number(values.mean())} ± {_number(sd, '.2g')}"


def headline_table(ds: xr.Dataset, extra_columns: list[str] = (),
                   at_steps: dict | None = None) -> str:
    """Markdown table: mean ± sd over distinct jobs of final numbers, per dataset and setting,
    headed by the variables' readable names; the number of distinct jobs in column n."""
    columns = [c for c in [*TABLE_COLUMNS, *extra_columns] if c in ds]
    step_cols = []  # (metric, step, label)
    if at_steps and at_steps.get("metric") in ds:
        x = at_steps.get("x")  # steps given as values of a trace variable (e.g. n_train)
        if x in ds:
            rows = ds[x].values.reshape(-1, ds.sizes["step"])
            grid = rows[np.isfinite(rows).any(axis=1)][0]
            step_cols = [(at_steps["metric"], int(ds["step"].values[np.flatnonzero(grid == k)[0]]),
                          f"{symbol(x)} = {k}") for k in at_steps["steps"] if k in grid]
        else:
            step_cols = [(at_steps["metric"], k, f"step {k}") for k in at_steps["steps"]
                         if k in ds["step"].values]
    header = ["dataset", "setting", "n", *(_cell(short_label(c, ds)) for c in columns),
              *(_cell(f"{short_label(m, ds)} at {label}") for m, _, label in step_cols),
              "ok/failed/missing"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for dataset in ds["dataset"].values.tolist():
        for point in settings(ds):
            sub = select_setting(ds, point, dataset)
            hashes = sub["job_hash"].values.ravel()
            if not (hashes != "").any():  # no sweep point here (another dataset's setting)
                continue
            # sweep points only: a cell of the grid no command named is none
            status = sub["status"].values.ravel()[hashes != ""].tolist()
            # one value per distinct job: a seed-free job repeated along seed counts once
            _, distinct = np.unique(hashes, return_index=True)
            distinct = distinct[hashes[distinct] != ""]
            cells = [_mean_sd(sub[c].values.ravel()[distinct].astype(float)) for c in columns]
            cells += [_mean_sd(sub[m].sel(step=k).values.ravel()[distinct].astype(float))
                      for m, k, _ in step_cols]
            counts = "/".join(str(status.count(s)) for s in ("ok", "failed", "missing"))
            rows.append("| " + " | ".join([dataset, setting_label(ds, point), str(len(distinct)),
                                           *cells, counts]) + " |")
    empty = [i for i in range(3, len(header) - 1)  # a column with no value anywhere: dropped
             if all(row.split("|")[1:-1][i].strip() == "–" for row in rows[2:])]
    if empty:
        rows = ["|" + "|".join(c for i, c in enumerate(row.split("|")[1:-1]) if i not in empty)
                + "|" for row in rows]
    note = ("n: distinct jobs of a setting; a cell is the mean ± sd over them, or the value "
            f"when there is one or all are equal; |value| < {ROUND_OFF:g} (zero to round-off) "
            f"is printed as < {ROUND_OFF:g}; ok/failed/missing counts sweep points (missing: "
            "not run yet, or interrupted).")
    return "\n".join(rows) + "\n\n" + note


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
            setting = ", ".join(setting_text(d, v)
                                for d, v in zip(others, combo, strict=True)) or "–"
            rows.append("| " + " | ".join([
                _cell(short_label(metric, ds)), setting, a, b, _mean_sd(va), _mean_sd(vb),
                _number(float(np.mean(va - vb))),
                f"{t:.3g}", f"{p:.3g}", str(len(va))]) + " |")
    return "\n".join(rows)


def overhead_line(ds: xr.Dataset) -> str:
    """Sweep wall time against the ideal (sum of job times / workers), with its phases: for
    each command of the sweep that ran jobs, from its own jobs and timings (the invocations,
    :mod:`pipeline.sweep.invocations`), one line each when there are several."""
    attrs = decoded_attrs(ds)
    records = attrs.get("invocations") or [{"timings": attrs.get("timings", {}),
                                            "n_workers": attrs.get("n_workers", 0)}]
    lines = [(i, line) for i, record in enumerate(records)
             if (line := _overhead(ds, record)) is not None]
    if not lines:
        return "overhead: no jobs ran in the last run of this sweep (all were cached)"
    if len(records) == 1:
        return f"overhead: {lines[0][1]}"
    return "\n".join(f"- overhead of command {i + 1} of {len(records)}: {line}"
                     for i, line in lines)


def _overhead(ds: xr.Dataset, record: dict) -> str | None:
    """The overhead of one command's last run (``record``: its timings, workers and the jobs
    it ran; without ``ran``, a store of one command, every job of the store), or None when it
    ran no job."""
    timings, workers = record.get("timings") or {}, int(record.get("n_workers") or 0)
    if not workers or "jobs_seconds" not in timings:
        return None
    hashes = ds["job_hash"].values.ravel()
    distinct = np.unique(hashes, return_index=True)[1]
    distinct = distinct[hashes[distinct] != ""]
    if record.get("ran") is not None:
        distinct = distinct[np.isin(hashes[distinct], list(record["ran"]))]
        if not len(distinct):
            return None
    compute = float(np.nansum(ds["job_seconds"].values.ravel()[distinct]))
    ideal = compute / workers
    if not ideal > 0:
        return None
    wall = timings["wall_seconds"]
    phases = ", ".join(f"{k.removesuffix('_seconds')} {v:.2f} s" for k, v in timings.items()
                       if k != "startup_seconds")
    whole = ""
    if "startup_seconds" in timings:  # the command line's process, from its start
        process = timings["startup_seconds"] + wall
        whole = (f"; whole process from its start to the end of the jobs {process:.2f} s, / "
                 f"ideal = {process / ideal:.2f} (consolidation not included)")
    jobs, on = len(distinct), f"{workers} worker" + ("s" if workers != 1 else "")
    return (f"{jobs} job{'s' if jobs != 1 else ''} on {on}; sum of job times "
            f"{compute:.2f} s, / workers = {ideal:.2f} s; launcher wall {wall:.2f} s "
            f"({phases}); wall / ideal = {wall / ideal:.2f}, job phase / ideal = "
            f"{timings['jobs_seconds'] / ideal:.2f}{whole}")
