"""``report.html``: the self-contained page ``python -m pipeline.report`` writes beside
report.md (:mod:`pipeline.report.html`), opened in headless Chromium to check that every figure
renders; and ``report_interactive.html`` (:mod:`pipeline.report.interactive`), opened offline to
check that Bokeh renders it and its checkboxes show and hide series. Chromium is required
(``apt-get install chromium``): without it the tests fail."""

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from bokeh.models import Div, LinearScale, LogScale, TabPanel
from matplotlib import image
from PIL import Image

from pipeline.report.html import markdown_to_html
from pipeline.report.interactive import build_document, trace_metrics, write_interactive
from pipeline.results.consolidate import load
from pipeline.results.variables import axis_label

CHROMIUM_TIMEOUT = 120
# written into the copy of the page only: on load, each <img>'s state and the tables' count
CHECK_SCRIPT = """<pre id="check"></pre><script>
window.onload = () => {
  const imgs = Array.from(document.images, i => [i.complete, i.naturalWidth, i.naturalHeight]);
  document.getElementById("check").textContent = JSON.stringify(
    {images: imgs, tables: document.querySelectorAll("table").length});
};
</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium not found: install it with `apt-get install chromium` (this test "
                    "renders report.html in headless Chromium)", pytrace=False)
    return path


def run_chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    argv = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT} s: {' '.join(argv)}",
                    pytrace=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_markdown_is_escaped_and_structured(tmp_path):
    Image.new("RGB", (2, 3)).save(tmp_path / "a.png")
    text = "\n".join(["# Sweep `x<y>`", "", "first line & more", "second", "",
                      "| a | b |", "|---|---:|", "| <b>1</b> | `2` |", "",
                      "- one <i>", "- two", "", "![a](a.png)", "![gone](gone.png)", "",
                      "inline ![a](a.png) image"])
    out = markdown_to_html(text, tmp_path)
    assert "<h1>Sweep <code>x&lt;y&gt;</code></h1>" in out
    assert "<p>first line &amp; more\nsecond</p>" in out
    # markdown-it-py's table markup: a row per line, alignment as an inline style
    assert ('<div class="table-wrap">\n<table>\n<thead>\n<tr>\n<th>a</th>\n'
            '<th style="text-align:right">b</th>\n</tr>\n</thead>') in out
    assert "<td>&lt;b&gt;1&lt;/b&gt;</td>" in out and "<code>2</code></td>" in out
    assert "</table>\n</div>" in out
    assert "<li>one &lt;i&gt;</li>\n<li>two</li>" in out
    figure = re.search(r'<figure id="a"><img src="data:image/png;base64,([^"]+)" alt="a" '
                       r'width="2" height="3"><figcaption>a</figcaption></figure>', out)
    assert figure and Image.open(io.BytesIO(base64.b64decode(figure[1]))).size == (2, 3)
    assert '<p class="missing">figure gone.png could not be read' in out
    # an image inside text stays inline: no figure (a block) inside a paragraph
    assert re.search(r'<p>inline <img src="data:image/png;base64,[^"]+" alt="a" width="2" '
                     r'height="3"> image</p>', out)
    assert "<b>" not in out and "<i>" not in out and out.count("<figure") == 1


def test_report_html_renders_in_chromium(seed_dir, tmp_path):
    chromium()  # without it, fail at once, before the report is rendered
    work = tmp_path / "work"
    shutil.copytree(seed_dir, work, symlinks=True)
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "pipeline.report", "outputs/seed/results.zarr",
                           "--out", str(out)], cwd=work, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-3:]
    assert last == [f"report: {out / 'report.md'}", f"html: {out / 'report.html'}",
                    f"interactive: {out / 'report_interactive.html'}"], last
    page = (out / "report.html").read_text()

    # self-contained: no script, stylesheet link, external image or web font; the one link
    # that leaves the page is to the interactive page beside it
    assert "<script" not in page and "<link" not in page and "@font-face" not in page
    assert re.findall(r'src="(?!data:image/png;base64,)', page) == []
    assert re.findall(r'href="(?!#)([^"]*)"', page) == ["report_interactive.html"]
    assert "url(" not in page
    interactive = (out / "report_interactive.html").read_text()
    assert "<script src" not in interactive and "<link" not in interactive
    assert "data-bokeh-status" not in page and "bokehStatus" in interactive

    ds = load(work / "outputs/seed/results.zarr")
    pngs = sorted(out.glob("*.png"))
    assert pngs and len(pngs) == (out / "report.md").read_text().count("![")
    assert ds.attrs["git_sha"] in page
    for package, version in ds.sgp.attrs["versions"].items():
        assert f"<th>{html.escape(package)}</th><td>{html.escape(version)}</td>" in page
    for heading in ("Sweep configuration", "Swept keys", "Environment"):
        assert f"<h2>{heading}</h2>" in page
    assert f"name: {ds.sgp.attrs['config']['dataset']['name']}" in page  # the config as YAML
    cpu = re.search(r"<th>CPU model</th><td>(.*?)</td>", page)[1]
    assert (cpu == "not recorded") == ("final_cpu_model" not in ds)
    # threads=auto on one local worker: the cores free when each job started (all, if idle),
    # so a busy machine gives jobs different counts and the page lists each distinct one
    ok = ds["final_blas_threads"].where(ds["status"] == "ok").values
    threads = {int(v) for v in np.ravel(ok) if np.isfinite(v)}
    assert threads and all(1 <= t <= os.cpu_count() for t in threads)
    listed = re.search(r"<th>BLAS threads per job</th><td>([0-9, ]+)</td>", page)
    assert listed and {int(t) for t in listed[1].split(", ")} == threads, listed
    md_tables = (out / "report.md").read_text().count("\n|---")
    # the report's tables, then swept keys, environment, versions and (when jobs ran) timings
    expected_tables = md_tables + 3 + bool(ds.sgp.attrs.get("timings"))

    # every figure decodes in a browser, and the tables are real tables
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("</body>", CHECK_SCRIPT + "\n</body>"))
    dom = run_chromium("--dump-dom", checked.as_uri(), profile=tmp_path / "profile").stdout
    found = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert found and found[1], dom[-2000:]
    state = json.loads(html.unescape(found[1]))
    assert len(state["images"]) == len(pngs), state
    assert all(done and width > 0 and height > 0 for done, width, height in state["images"]), \
        state
    assert state["tables"] == expected_tables, state

    # and the page draws: a screenshot with more than a blank page in it
    shot = tmp_path / "shot.png"
    run_chromium(f"--screenshot={shot}", "--window-size=1400,3000", "--hide-scrollbars",
                 (out / "report.html").as_uri(), profile=tmp_path / "profile")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    pixels = image.imread(shot)
    assert pixels.shape[:2] == (3000, 1400) and float(np.std(pixels[..., :3])) > 0.05


# written into a copy of report_interactive.html: the first catches the page's script errors,
# the second waits for Bokeh's render, then clicks the checkboxes and the x-axis toggle as a
# user does (the widgets live in shadow DOM) and records, after each step, the series count
# the page shows, every line renderer's visibility and the saturated pixels of the plots'
# canvases (the lines and their legend swatches, sgma's brown too: axes, grid and text are
# grey)
ERRORS_SCRIPT = """<script>window.__errors = [];
addEventListener("error", e => window.__errors.push(String(e.message)));
addEventListener("unhandledrejection", e => window.__errors.push(String(e.reason)));</script>"""
INTERACT_SCRIPT = """<pre id="check"></pre><script>
const sleep = ms => new Promise(done => setTimeout(done, ms));
const deep = (root, out = []) => {
  for (const el of root.querySelectorAll("*")) {
    out.push(el);
    if (el.shadowRoot) deep(el.shadowRoot, out);
  }
  return out;
};
const pixels = () => {
  let n = 0;
  for (const c of deep(document).filter(e => e.tagName === "CANVAS" && e.width > 100)) {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) {
      const rgb = [d[i], d[i + 1], d[i + 2]];
      if (d[i + 3] > 0 && Math.max(...rgb) - Math.min(...rgb) > 50) n++;
    }
  }
  return n;
};
const settled = async () => {  // the canvas once three paints 100 ms apart agree
  let last = -1, same = 0;
  for (let i = 0; i < 50 && same < 2; i++) {
    await sleep(100);
    const now = pixels();
    same = now === last ? same + 1 : 0;
    last = now;
  }
  return last;
};
const click = text => {
  const el = deep(document).find(e => ["LABEL", "BUTTON"].includes(e.tagName)
                                      && e.textContent.trim() === text);
  (el.tagName === "LABEL" ? el.querySelector("input") : el).click();
};
const models = kind => [...Bokeh.documents[0].all_models]
  .filter(m => m.constructor.__name__ === kind);
const result = {steps: []};
const record = async name => {
  const painted = await settled();
  result.steps.push({name, shown: document.body.dataset.seriesShown, pixels: painted,
                     lines: models("GlyphRenderer")
    .filter(r => r.glyph.constructor.__name__ === "Line")
    .map(r => [r.data_source.data.algorithm[0], r.data_source.data.dataset[0], r.visible])});
};
const hover = async () => {  // the pointer on the middle point of the first tab's first series
  const views = [];
  const walk = v => { views.push(v); for (const c of v.children ? v.children() : []) walk(c); };
  [...Bokeh.index].forEach(walk);
  const plot = views.find(v => v.constructor.__name__ === "FigureView");
  const marks = plot.model.renderers.find(r => r.glyph.constructor.__name__ === "Scatter");
  const d = marks.data_source.data, i = Math.floor(d.x.length / 2);
  const events = plot.canvas_view.events_el, box = events.getBoundingClientRect();
  const at = {clientX: box.left + plot.frame.x_scale.compute(d.x[i]), bubbles: true,
              clientY: box.top + plot.frame.y_scale.compute(d.value[i]), composed: true,
              pointerType: "mouse", isPrimary: true};
  for (const type of ["pointerenter", "pointermove"])
    events.dispatchEvent(new PointerEvent(type, at));
  await sleep(300);
  const tip = deep(document).find(e => e.classList && e.classList.contains("bk-tooltip-content"));
  result.hover = {point: [d.algorithm[i], d.dataset[i], d.step[i]], text: tip && tip.textContent};
  events.dispatchEvent(new PointerEvent("pointerleave", at));
};
async function run() {
  for (let i = 0; i < 200 && document.body.dataset.bokehStatus !== "rendered"; i++) await sleep(50);
  result.status = document.body.dataset.bokehStatus;
  result.labels = deep(document).filter(e => e.tagName === "LABEL").map(e => e.textContent.trim());
  result.tabs = models("TabPanel").map(t => t.title);
  await record("all");
  await hover();
  for (const [name, text] of STEPS) { click(text); await record(name); }
  click("seconds"); await sleep(300);
  result.x_labels = models("Figure").map(p => p.below[0].axis_label);
  result.x_is_seconds = models("ColumnDataSource").filter(s => "seconds" in s.data)
    .every(s => s.data.x.every((x, i) => Object.is(x, s.data.seconds[i])));
}
run().catch(e => window.__errors.push("test script: " + e)).finally(() => {
  result.errors = window.__errors;
  result.resources = performance.getEntriesByType("resource").map(e => e.name);
  document.getElementById("check").textContent = JSON.stringify(result);
});
</script>"""


def test_interactive_page_selects_series_in_chromium(seed_dir, tmp_path):
    """report_interactive.html from a file:// URL with every host unresolvable: BokehJS
    (inlined) renders the plots without a script error or a single fetch, the algorithm and
    dataset checkboxes hide and show exactly their series (on the canvas too), and the x-axis
    toggle moves every series to seconds. The sweep is the seed's, plus a copy of its dataset
    under a name with markup in it (shown as text, not parsed)."""
    ds = load(seed_dir / "outputs/seed/results.zarr").load()
    other = ds.assign_coords(dataset=['b<i>&"'])
    for name in ("gap", "test_rmse", "objective"):
        other[name] = other[name] * 3
    both = xr.concat([ds, other], "dataset")
    both.attrs = ds.attrs
    page = write_interactive(both, tmp_path).read_text()
    algorithms = sorted(ds["algorithm"].values.tolist())
    datasets = sorted(both["dataset"].values.tolist())
    hide_algorithm, hide_dataset = algorithms[-1], datasets[0]
    steps = [["algorithm hidden", hide_algorithm], ["algorithm shown", hide_algorithm],
             ["dataset hidden", hide_dataset]]
    head, body, tail = page.rpartition("</body>")  # the inlined BokehJS holds "</body>" too
    checked = tmp_path / "checked.html"
    checked.write_text((head + INTERACT_SCRIPT.replace("<script>", "<script>const STEPS = "
                                                       + json.dumps(steps) + ";", 1)
                        + body + tail).replace("<head>", "<head>" + ERRORS_SCRIPT, 1))
    started = time.monotonic()
    # no host resolves and every request goes to a closed port: no network; paints keep up
    # with virtual time (without it the budget can run out before a frame is drawn)
    dom = run_chromium("--dump-dom", "--host-resolver-rules=MAP * ~NOTFOUND",
                       "--proxy-server=http://127.0.0.1:9",
                       "--run-all-compositor-stages-before-draw", checked.as_uri(),
                       profile=tmp_path / "profile").stdout
    found = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert found and found[1], dom[-2000:]
    state = json.loads(html.unescape(found[1]))
    assert state["errors"] == [] and state["resources"] == [], state
    assert state["status"] == "rendered", state
    assert state["labels"] == [*datasets, *algorithms], state["labels"]
    assert state["tabs"][:3] == ["gap", "test_rmse", "test_nlpd"], state["tabs"]
    # hovering a point shows its algorithm, dataset, setting, step and value (mean over seeds)
    algorithm, dataset, step = state["hover"]["point"]
    value = float(both["gap"].sel(algorithm=algorithm, dataset=dataset, step=step).mean())
    assert " ".join((state["hover"]["text"] or "").split()).startswith(
        f"algorithm: {algorithm} dataset: {dataset} setting: — step: {step} seconds: "), state
    assert state["hover"]["text"].rstrip().endswith(f"gap: {value:.6g}"), state["hover"]
    all_, hidden, shown, no_dataset = state["steps"]
    n_series = len({(a, d) for a, d, _ in all_["lines"]})
    assert all(visible for *_, visible in all_["lines"]) and all_["shown"] == str(n_series)
    assert all_["pixels"] > 500, all_  # the lines are drawn
    assert [v for a, _, v in hidden["lines"]] == [a != hide_algorithm for a, _, _ in
                                                  hidden["lines"]]
    assert int(hidden["shown"]) < n_series and hidden["pixels"] < all_["pixels"], hidden
    assert shown["lines"] == all_["lines"] and shown["pixels"] == all_["pixels"], shown
    assert [v for _, d, v in no_dataset["lines"]] == [d != hide_dataset for _, d, _ in
                                                      no_dataset["lines"]]
    assert no_dataset["shown"] == str(n_series // 2) and no_dataset["pixels"] < all_["pixels"]
    assert state["x_is_seconds"], state
    assert state["x_labels"] == [axis_label("seconds", both)] * len(state["tabs"]), state
    print(f"chromium: {time.monotonic() - started:.1f} s")

    # the gap spans decades (log axis; the direct solve's round-off gap of -1e-16 left out),
    # the test RMSE does not; failed jobs draw nothing
    panels = {panel.title: panel.child for panel in
              build_document(both, trace_metrics(both), "t").select({"type": TabPanel})}
    assert isinstance(panels["gap"].y_scale, LogScale), panels
    assert isinstance(panels["test_rmse"].y_scale, LinearScale)
    assert len(panels["gap"].renderers) == 2 * 2  # sgma's line and markers, two datasets
    failed = both.assign(status=both["status"].where(False, "failed"))
    empty = build_document(failed, trace_metrics(failed), "t")
    assert not list(empty.select({"type": TabPanel}))
    assert any("nothing to draw" in div.text for div in empty.select({"type": Div}))


def _traced_sweep(n_lam: int) -> xr.Dataset:
    """One algorithm on one dataset at ``n_lam`` values of σ², a 3-step test RMSE trace each."""
    dims = ("algorithm", "dataset", "lam")
    shape = (1, 1, n_lam)
    lam = np.round(np.geomspace(1e-3, 1.0, n_lam), 6)
    return xr.Dataset(
        {"test_rmse": ((*dims, "step"), np.arange(1.0, 1.0 + 3 * n_lam).reshape(*shape, 3)),
         "status": (dims, np.full(shape, "ok")),
         "job_hash": (dims, np.array([f"h{i}" for i in range(n_lam)]).reshape(shape))},
        coords={"algorithm": ["sgma"], "dataset": ["d"], "lam": lam, "step": [1, 2, 3]},
        attrs={"sweep": "s"})


def test_interactive_series_are_named_by_symbol_and_a_long_legend_is_left_out():
    from bokeh.models import Legend, LegendItem

    few = build_document(_traced_sweep(3), ["test_rmse"], "t")
    labels = sorted(item.label.value for item in few.select({"type": LegendItem}))
    assert labels == ["sgma (σ² = 0.001) · d", "sgma (σ² = 0.031623) · d", "sgma (σ² = 1) · d"]
    assert len(list(few.select({"type": Legend}))) == 1
    # 45 series: a legend would run past the figure; the checkboxes still choose the series
    many = build_document(_traced_sweep(45), ["test_rmse"], "t")
    assert not list(many.select({"type": Legend}))
    assert any("no legend for 45 series: the checkboxes choose the datasets" in div.text
               for div in many.select({"type": Div}))


def test_a_round_off_value_does_not_squash_a_log_axis():
    """The exact GP's duality gap of 1e-16 beside SGMA's 0.4 … 1e-3 (issue 53): the log axis
    spans SGMA's values, the exact GP's point sits at its floor, and hovering shows 1e-16."""
    dims = ("algorithm", "dataset", "seed")
    steps = np.arange(1, 41)
    gap = np.full((2, 1, 1, 40), np.nan)
    gap[0, ..., 0] = 1e-16
    gap[1, ..., :] = 0.4 * steps ** -1.5
    ds = xr.Dataset({"gap": ((*dims, "step"), gap),
                     "status": (dims, np.full((2, 1, 1), "ok")),
                     "job_hash": (dims, np.array([[["e"]], [["s"]]]))},
                    coords={"algorithm": ["exact", "sgma"], "dataset": ["d"], "seed": [0],
                            "step": steps}, attrs={"sweep": "s"})
    panel = next(iter(build_document(ds, ["gap"], "t").select({"type": TabPanel}))).child
    assert isinstance(panel.y_scale, LogScale)
    low, high = panel.y_range.start, panel.y_range.end
    assert 1e-4 < low < float(gap[1].min()) and high >= 0.4, (low, high)
    sources = {r.data_source.data["algorithm"][0]: r.data_source.data
               for r in panel.renderers}
    assert list(sources["exact"]["value"]) == [1e-16]
    assert low <= sources["exact"]["y"][0] < float(gap[1].min())  # on the axis, below SGMA
    assert list(sources["sgma"]["y"]) == list(sources["sgma"]["value"])
    assert "drawn at" in panel.yaxis[0].axis_label


WIDE_TABLE = "\n".join([
    "| dataset | setting | n | basis size | relative duality gap (L − L_dual)/∣L∣ | test root "
    "mean squared error [target units] | job wall time [s] | Zhang's R(ŵ) of the exact "
    "solution [target units²] | Zhang's R(0) − R(ŵ) [target units²] | "
    + " | ".join(f"R(w^k) − R(ŵ) [target units²] at step {k}" for k in (5, 10, 20, 30))
    + " | ok/failed/missing |",
    "|" + "---|" * 14,
    *["| zhang_sparse_linear | zhang_kappa_greedy | 3 | 30 | 0.1649 ± 0.011 | 0.8454 ± 0.0011 "
      "| 0.5022 ± 0.098 | 0.4211 | 0.04207 | 0.02524 ± 0.00049 | 0.01812 ± 0.00042 | "
      "0.01062 ± 0.00059 | 0.006409 ± 0.00038 | 3/0/0 |"] * 3])


def test_a_report_table_fits_a_1400_px_window(tmp_path):
    """The zhang2001 report's 14-column table (issue 53: it needed horizontal scrolling at
    1400 px): its names and headers wrap at ``_`` and ``/``, a value keeps its ``±``."""
    from pipeline.report.html import CSS

    body = markdown_to_html(WIDE_TABLE, tmp_path)
    assert "zhang_<wbr>sparse_<wbr>linear" in body and "0.1649\u00a0± 0.011" in body
    page = tmp_path / "wide.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{CSS}</style>"
                    f"</head><body><main>{body}</main><pre id='check'></pre><script>"
                    "const w = document.querySelector('.table-wrap');"
                    "document.getElementById('check').textContent = JSON.stringify("
                    "[w.scrollWidth, w.clientWidth]);</script></body></html>")
    dom = run_chromium("--dump-dom", "--window-size=1400,1000", page.as_uri(),
                       profile=tmp_path / "profile").stdout
    scroll, client = json.loads(re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)[1])
    assert scroll <= client, (scroll, client)
