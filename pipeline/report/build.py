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
  ``paper``: text quoted under the table (the published numbers to compare with; a run at
  ``size=small``, which sets ``reduced``, says beside them that they are for the full size);
  ``paired``: a list of ``{metric, a, b, over}``: paired t-tests of algorithm a vs b along the
  dim ``over`` (e.g. ``dataset.split_seed``); ``average_over``: dims aggregated like the seed
  (e.g. data splits) in figures and table; ``frontier``: metrics against wall time with the
  Pareto frontier and the best setting per time budget (:mod:`pipeline.report.frontier`).

The table gives, per setting, mean ± sd over distinct jobs of the final basis size, gap, test
RMSE and job time (plus the extras), and the job status counts. Everything is written beside
the figures in ``report.md``, and again, with the figures embedded and the sweep's config and
environment appended, in one self-contained ``report.html`` (:mod:`pipeline.report.html`),
which links to ``report_interactive.html``: the traces as one offline Bokeh page where series
are picked by dataset and algorithm and hovering shows their values
(:mod:`pipeline.report.interactive`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import xarray as xr  # noqa: E402

from algorithms.errors import InputError  # noqa: E402
from pipeline.atomic import write_text  # noqa: E402
from pipeline.command import OneLineParser, command_text, fail  # noqa: E402
from pipeline.lines import one_line
from pipeline.oserrors import write_failure  # noqa: E402
from pipeline.outputs import check_under_outputs  # noqa: E402
from pipeline.report.figures import metric_figure
from pipeline.report.frontier import budget_table, frontier_figures
from pipeline.report.html import html_path, write_html
from pipeline.report.interactive import interactive_path, write_interactive
from pipeline.report.markdown import code, inert
from pipeline.report.scaling import scaling_figure, scaling_table
from pipeline.report.tables import (
    at_bound,
    failures,
    headline_table,
    overhead_line,
    paired_tests,
)
from pipeline.results.access import decoded_attrs
from pipeline.results.consolidate import load

DEFAULT_FIGURES = [
    {"metric": "gap", "logy": True, "title": "relative duality gap"},
    {"metric": "test_rmse", "logy": False, "title": "test RMSE"},
    {"metric": "objective", "suboptimality": True,
     "title": "primal suboptimality, L* = lowest final L at these data and σ² (the full GP's "
              "min L where it ran)"},
]


REDUCED_NOTE = ("Note: this run is the experiment's reduced variant (`size=small`: less data, "
                "fewer steps and seeds, as its file in `conf/reduced/` says). The paper's "
                "numbers above are for the full size; run the experiment without `size=small` "
                "to compare with them.")


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
           choices: dict[str, str] | None = None, *,
           default_under_outputs: bool = False) -> Path:
    """Write the figures and ``report.md`` for ``results.zarr`` at ``path``, restricted to
    ``choices`` (:func:`select`); returns report.md.

    Raises :class:`InputError` (one line) when ``path`` is not a sound results store
    (:func:`pipeline.results.load` verifies it), a choice is not in the sweep, or the report
    cannot be written to ``out_dir``; with ``default_under_outputs`` (the command line), also
    when no ``out_dir`` is given and the default beside the store lies outside the working
    directory's outputs/ (an ``out_dir`` given is the caller's choice)."""
    path = Path(path)
    ds = select(load(path).load(), choices or {})
    if not out_dir and default_under_outputs:
        check_under_outputs(path.parent / "report", "the report's default --out", "--out <dir>")
    out_dir = Path(out_dir) if out_dir else path.parent / "report"
    try:
        return _write_report(ds, path, out_dir)
    except OSError as err:
        raise InputError(f"cannot write the report to {out_dir}: " + write_failure(
            err, out_dir, elsewhere="pass --out with a directory you can write",
            rerun="rerun")) from None


def _write_report(ds: xr.Dataset, path: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    attrs = decoded_attrs(ds)
    report_cfg = attrs["config"].get("report") or {}
    ds.attrs["average_over"] = tuple(report_cfg.get("average_over", ()))
    specs = report_cfg.get("figures", DEFAULT_FIGURES)
    figures = [metric_figure(ds, spec, out_dir, f"fig{i}_{spec['metric']}")
               for i, spec in enumerate(specs, start=1)]
    table = headline_table(ds, report_cfg.get("columns", []), report_cfg.get("at_steps"))
    lines = [f"# Sweep {code(ds.attrs['sweep'])}", "",
             f"results: {code(path)} (git {code(str(ds.attrs['git_sha'])[:12])}, swept: "
             f"{', '.join(map(str, attrs['swept_keys']))})", "", *commands_lines(attrs), table,
             ""]
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
        lines += [f"Paper: {one_line(report_cfg['paper'])}", ""]
        if report_cfg.get("reduced"):
            lines += [REDUCED_NOTE, ""]
    if (ds["status"] == "failed").any():
        lines += ["Failed jobs:", "", failures(ds), ""]
    if bounds := at_bound(ds):
        lines += ["Learned hyperparameters on a bound (hyper_at_bound; a length scale at its "
                  "lower bound or the noise at its upper one is a white-noise model):", "",
                  bounds, ""]
    lines += [overhead_line(ds), ""]
    # every string read from the store is text: nothing in it links, embeds or is HTML; the
    # figure lines, added after, are the only images (the files written here)
    lines = [inert("\n".join(lines))]
    drawn = [f for f in figures if f is not None]
    for figure in drawn:  # each with its caption line
        lines += [f"![{figure.path.stem}]({figure.path.name})", "", inert(figure.caption), ""]
    report = out_dir / "report.md"
    write_text(report, "\n".join(lines) + "\n")
    interactive = write_interactive(ds, out_dir, [spec["metric"] for spec in specs
                                                  if "x" not in spec and "against" not in spec])
    write_html(report, ds, path, interactive, figures=[f.path.name for f in drawn])
    return report


def commands_lines(attrs: dict) -> list[str]:
    """The commands that made the sweep (its invocations, :mod:`pipeline.sweep.invocations`),
    each with the points it added and the file holding Hydra's record of it."""
    records = attrs.get("invocations") or []
    if not records:
        return []
    if len(records) == 1:
        return [f"command: {code(command_text(records[0].get('command', [])))}", ""]
    lines = [f"Made by {len(records)} commands:", ""]
    for i, record in enumerate(records, start=1):
        n = record.get("entries", record.get("added", 0))
        lines.append(f"{i}. {code(command_text(record.get('command', [])))}: {n} point"
                     f"{'' if n == 1 else 's'} added; Hydra's record "
                     f"{code(record.get('hydra_record', '?'))}")
    return [*lines, ""]


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
        report = render(args.results, args.out, choices, default_under_outputs=True)
    except InputError as err:
        return fail(err)
    print(report.read_text())
    print(f"report: {report}")
    print(f"html: {html_path(report)}")
    print(f"interactive: {interactive_path(report.parent)}")
    return 0


