"""``report_interactive.html``: a sweep's traces as one interactive Bokeh page beside
``report.html`` (which links to it).

One tab per trace metric (the report's step figures' metrics, then gap, test RMSE, test NLPD,
objective and basis size, those the sweep recorded), one line per dataset and setting (the
lines of the report's figures: :func:`pipeline.report.figures.settings`), the mean over seeds
(and the report's ``average_over`` dims) at every step. Checkboxes show and hide the series of
each dataset and algorithm, a toggle puts the step or the elapsed seconds on the x axis, a
legend entry hides its series on a click (no legend past :data:`MAX_LEGEND_ITEMS` series: it
would run off the figure), and hovering a point shows algorithm, dataset, setting (its swept
keys by symbol, ``σ² = 0.1``), step, seconds and value. A metric whose positive values span
two decades or more is on a log axis (its values ≤ 0 are left out there); a value at most
:data:`ROUND_OFF` times the tab's largest (the exact GP's duality gap of 1e-16) is zero to
round-off: it neither makes the axis logarithmic nor sets its range, and is drawn at the
axis' floor, with its true value on hover. Each setting has the colour and
marker it has in the report's figures (:func:`pipeline.report.style.line_styles`).

BokehJS is inlined (``bokeh.resources.INLINE``): the page loads nothing else, so it works from a
file opened offline. Once Bokeh has rendered it, the page sets ``data-bokeh-status="rendered"``
on ``<body>``, and ``data-series-shown`` counts the series (dataset and setting, in any tab)
the checkboxes leave shown.
"""

from __future__ import annotations

import html
import itertools
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
from bokeh.document import Document
from bokeh.embed import file_html
from bokeh.layouts import column, row
from bokeh.models import (
    CheckboxGroup,
    ColumnDataSource,
    CustomJS,
    Div,
    HoverTool,
    Legend,
    LegendItem,
    RadioButtonGroup,
    Range1d,
    TabPanel,
    Tabs,
)
from bokeh.plotting import figure
from bokeh.resources import INLINE
from matplotlib.colors import to_hex

from pipeline.atomic import write_text
from pipeline.report.figures import select_setting, setting_label, settings
from pipeline.report.style import line_styles
from pipeline.results.variables import axis_label, setting_text

TRACES = ("gap", "test_rmse", "test_nlpd", "objective", "n_basis")
DASHES = ("solid", "dashed", "dotted", "dotdash", "dashdot")
LOG_SPAN = 100.0  # positive values spanning this factor or more: a log axis
ROUND_OFF = 1e-12  # a value at most this times the tab's largest: zero to round-off
# matplotlib's markers (the report's figures) as Bokeh's
MARKERS = {"o": "circle", "s": "square", "D": "diamond", "d": "diamond", "^": "triangle",
           "v": "inverted_triangle", "P": "plus", "*": "star", "X": "x", "h": "hex",
           "H": "hex", "<": "triangle", ">": "inverted_triangle", "p": "square_pin",
           "8": "circle_dot"}
STEP_AXIS = "step k (iteration of the fit)"

# show a series when its dataset and its algorithm are both ticked; count what is shown
FILTER_JS = """
const on_data = new Set(datasets.active.map(i => datasets.labels[i]));
const on_algo = new Set(algorithms.active.map(i => algorithms.labels[i]));
const shown = new Set();
for (let i = 0; i < keys.length; i++) {
  const visible = on_data.has(keys[i][0]) && on_algo.has(keys[i][1]);
  lines[i].visible = visible;
  marks[i].visible = visible;
  items[i].visible = visible;
  if (visible) shown.add(keys[i][2]);
}
const total = new Set(keys.map(k => k[2])).size;
count.text = `${shown.size} of ${total} series shown`;
document.body.dataset.seriesShown = String(shown.size);
"""
# the x axis: step or seconds (every source carries both)
X_JS = """
const key = radio.labels[radio.active];
for (const source of sources) {
  source.data = {...source.data, x: source.data[key]};
}
for (const axis of axes) {
  axis.axis_label = key === "step" ? step_label : seconds_label;
}
"""
READY_JS = """
document.body.dataset.bokehStatus = "rendered";
"""


def interactive_path(out_dir: Path) -> Path:
    """Where :func:`write_interactive` writes the page: ``report_interactive.html`` in
    ``out_dir``."""
    return Path(out_dir) / "report_interactive.html"


def trace_metrics(ds: xr.Dataset, preferred: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The trace variables (dim ``step``) of ``ds`` with a finite value: ``preferred`` first,
    then :data:`TRACES`, each once."""
    out = []
    for name in [*preferred, *TRACES]:
        if (name not in out and name in ds and "step" in ds[name].dims
                and ds[name].dtype.kind == "f" and bool(np.isfinite(ds[name]).any())):
            out.append(name)
    return out


def _mean_runs(values: xr.DataArray, ok: xr.DataArray) -> np.ndarray:
    """The mean over the jobs that finished ok (``ok``) at every step."""
    values = values.where(ok).transpose(..., "step")
    runs = np.asarray(values.values, dtype=float).reshape(-1, values.sizes["step"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no run reached: NaN
        return np.nanmean(runs, axis=0)


def _series(ds: xr.Dataset, metrics: list[str]) -> list[dict]:
    """One dict per dataset, setting and metric with a finite value: its labels, colour and
    marker (those of the report's figures) and the step, seconds and mean value at every step
    the mean is finite."""
    step = ds["step"].values
    has_seconds = "seconds" in ds and "step" in ds["seconds"].dims
    points = settings(ds)
    styles = line_styles([(setting_label(ds, p), str(p["algorithm"])) for p in points])
    needed = ds[list(dict.fromkeys([*metrics, "status", "job_hash"]
                                   + (["seconds"] if has_seconds else [])))]
    needed.attrs = ds.attrs
    out = []
    for dataset, (index, point) in itertools.product(ds["dataset"].values.tolist(),
                                                     enumerate(points)):
        sub = select_setting(needed, point, dataset)
        ok = sub["status"] == "ok"
        seconds = _mean_runs(sub["seconds"], ok) if has_seconds else np.full(len(step), np.nan)
        setting = ", ".join(setting_text(dim, value) for dim, value in point.items()
                            if dim != "algorithm" and ds.sizes[dim] > 1) or "—"
        for metric in metrics:
            value = _mean_runs(sub[metric], ok)
            ok = np.isfinite(value)
            if ok.any():
                style = styles[setting_label(ds, point)]
                out.append({"dataset": str(dataset), "algorithm": str(point["algorithm"]),
                            "setting": setting, "index": index, "metric": metric,
                            "color": to_hex(style["color"]),
                            "marker": MARKERS.get(style["marker"], "circle"),
                            "step": step[ok], "seconds": seconds[ok], "value": value[ok]})
    return out


MAX_LEGEND_ITEMS = 40  # a legend of more entries runs past the figure's 520 px: none is drawn


def _log_axis(values: np.ndarray) -> bool:
    """True when the positive values above round-off (:func:`_round_off`) span :data:`LOG_SPAN`
    or more and the negative ones are round-off (a duality gap of -1e-16) next to the
    largest."""
    positive = values[values > _round_off(values)]
    if len(positive) < 2 or positive.max() / positive.min() < LOG_SPAN:
        return False
    return bool((values >= -1e-9 * np.abs(values).max()).all())


def _round_off(values: np.ndarray) -> float:
    """The largest value that is zero to round-off: :data:`ROUND_OFF` × the largest |value|."""
    return ROUND_OFF * float(np.abs(values).max()) if len(values) else 0.0


def _floor(values: np.ndarray) -> float | None:
    """Where a log axis starts when some positive value is round-off (:func:`_round_off`):
    half the smallest value above it (None when there is none to clip: the axis fits the
    data)."""
    positive = values[values > 0]
    meaningful = positive[positive > _round_off(values)]
    if len(meaningful) == len(positive) or not len(meaningful):
        return None
    return float(meaningful.min()) / 2


def _panel(ds: xr.Dataset, metric: str, series: list[dict], dashes: dict[str, str],
           legend: bool = True) -> tuple[TabPanel, dict[str, list]]:
    """A tab with one figure of ``metric`` and, per series drawn (a series with no positive
    value on a log axis is not), its line and marker renderers, legend item, data source and
    key (dataset, algorithm, series id); the legend is drawn when ``legend``. On a log axis a
    round-off value is drawn at the axis' floor (:func:`_floor`), hovering shows its value."""
    values = np.concatenate([s["value"] for s in series])
    log = _log_axis(values)
    floor = _floor(values) if log else None
    label = axis_label(metric, ds) + (" (log axis)" if log else "")
    if floor is not None:
        label += f"; values ≤ {ROUND_OFF:g} × the largest drawn at {floor:.2g}"
    fig = figure(height=520, sizing_mode="stretch_width", y_axis_type="log" if log else "linear",
                 x_axis_label=STEP_AXIS, y_axis_label=label,
                 tools="pan,wheel_zoom,box_zoom,reset,save", active_scroll=None)
    fig.x_range.only_visible = fig.y_range.only_visible = True
    if floor is not None:  # the round-off values sit on the axis, the others set its range
        fig.y_range = Range1d(floor / 1.5, 1.5 * float(values.max()))
    drawn: dict[str, list] = {"lines": [], "marks": [], "items": [], "sources": [], "keys": []}
    for s in series:
        keep = s["value"] > 0 if log else np.ones(len(s["value"]), bool)
        n = int(keep.sum())
        if not n:
            continue
        shown = s["value"][keep] if floor is None else np.maximum(s["value"][keep], floor)
        source = ColumnDataSource({
            "x": s["step"][keep], "step": s["step"][keep], "seconds": s["seconds"][keep],
            "value": s["value"][keep], "y": shown, "algorithm": [s["algorithm"]] * n,
            "dataset": [s["dataset"]] * n, "setting": [s["setting"]] * n})
        colour, dash = s["color"], dashes[s["dataset"]]
        line = fig.line("x", "y", source=source, color=colour, line_dash=dash, line_width=2)
        mark = fig.scatter("x", "y", source=source, color=colour, size=7, alpha=0.8,
                           marker=s["marker"])
        setting = "" if s["setting"] == "—" else f" ({s['setting']})"
        drawn["items"].append(LegendItem(label=f"{s['algorithm']}{setting} · {s['dataset']}",
                                         renderers=[line, mark]))
        drawn["lines"].append(line)
        drawn["marks"].append(mark)
        drawn["sources"].append(source)
        drawn["keys"].append([s["dataset"], s["algorithm"], f"{s['dataset']}|{s['index']}"])
    fig.add_tools(HoverTool(renderers=drawn["marks"], tooltips=[
        ("algorithm", "@algorithm"), ("dataset", "@dataset"), ("setting", "@setting"),
        ("step", "@step"), ("seconds", "@seconds{%.4g}"), (metric, "@value{%.6g}")],
        formatters={"@seconds": "printf", "@value": "printf"}))
    if legend:
        fig.add_layout(Legend(items=drawn["items"], click_policy="hide",
                              label_text_font_size="8pt", spacing=0, padding=4), "right")
    return TabPanel(child=fig, title=metric), drawn


def _checkboxes(labels: list[str], title: str) -> tuple[Div, CheckboxGroup]:
    return (Div(text=f"<b>{title}</b>"),
            CheckboxGroup(labels=labels, active=list(range(len(labels))), name=title))


def build_document(ds: xr.Dataset, metrics: list[str], title: str) -> Document:
    """The Bokeh document of the page (module docstring) for ``metrics`` of ``ds``."""
    series = _series(ds, metrics)
    doc = Document()
    doc.title = title
    heading = Div(text=f"<h2>{html.escape(title)}</h2>", sizing_mode="stretch_width")
    if not series:
        doc.add_root(column(heading, Div(text="<p>No trace with a finite value in this sweep: "
                                              "nothing to draw.</p>")))
        doc.js_on_event("document_ready", CustomJS(code=READY_JS))
        return doc
    datasets = sorted({s["dataset"] for s in series})
    algorithms = sorted({s["algorithm"] for s in series})
    dashes = {d: DASHES[i % len(DASHES)] for i, d in enumerate(datasets)}
    panels, axes = [], []
    drawn: dict[str, list] = {"lines": [], "marks": [], "items": [], "sources": [], "keys": []}
    most = max(sum(s["metric"] == metric for s in series) for metric in metrics)
    legend = most <= MAX_LEGEND_ITEMS  # more entries than a figure's height holds: none
    for metric in metrics:
        mine = [s for s in series if s["metric"] == metric]
        if not mine:
            continue
        panel, more = _panel(ds, metric, mine, dashes, legend)
        panels.append(panel)
        axes.extend(panel.child.xaxis)
        for key, models in more.items():
            drawn[key].extend(models)
    data_title, data_box = _checkboxes(datasets, "datasets")
    algo_title, algo_box = _checkboxes(algorithms, "algorithms")
    count = Div(text="")
    filter_js = CustomJS(args={"datasets": data_box, "algorithms": algo_box, "count": count,
                               **{k: drawn[k] for k in ("keys", "lines", "marks", "items")}},
                         code=FILTER_JS)
    data_box.js_on_change("active", filter_js)
    algo_box.js_on_change("active", filter_js)
    controls = [data_title, data_box, algo_title, algo_box]
    if any(np.isfinite(s["seconds"]).any() for s in series):
        radio = RadioButtonGroup(labels=["step", "seconds"], active=0, name="x axis")
        radio.js_on_change("active", CustomJS(args={
            "radio": radio, "sources": drawn["sources"], "axes": axes, "step_label": STEP_AXIS,
            "seconds_label": axis_label("seconds", ds)}, code=X_JS))
        controls = [Div(text="<b>x axis</b>"), radio, *controls]
    controls.append(count)
    clicks = ("click a legend entry to hide its series" if legend else
              f"no legend for {most} series: the checkboxes choose the datasets and "
              "algorithms drawn, hovering a point names its setting")
    note = Div(text=f"<p>Mean over seeds of each setting; hover a point for its values, "
                    f"{clicks}. Lines of one colour and marker are one setting (as in the "
                    "report's figures), their dash the dataset.</p>", sizing_mode="stretch_width")
    tabs = Tabs(tabs=panels, sizing_mode="stretch_width")
    layout = column(heading, note, row(column(*controls, width=230), tabs,
                                       sizing_mode="stretch_width"), sizing_mode="stretch_width")
    doc.add_root(layout)
    doc.js_on_event("document_ready", CustomJS(code=READY_JS), filter_js)
    return doc


def write_interactive(ds: xr.Dataset, out_dir: Path,
                      preferred: list[str] | tuple[str, ...] = ()) -> Path:
    """Write ``report_interactive.html`` (module docstring) for the sweep ``ds`` into
    ``out_dir`` and return its path; ``preferred`` metrics come first."""
    title = f"Sweep {ds.attrs.get('sweep', '')}: traces"
    doc = build_document(ds, trace_metrics(ds, preferred), title)
    page = file_html(doc, resources=INLINE, title=title)
    out = interactive_path(out_dir)
    write_text(out, page)
    return out
