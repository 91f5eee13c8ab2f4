"""``report.html``: the self-contained page ``python -m pipeline.report`` writes beside
report.md (:mod:`pipeline.report.html`), opened in headless Chromium to check that every figure
renders. Chromium is required (``apt-get install chromium``): without it the test fails."""

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from PIL import Image

from pipeline.report.html import markdown_to_html
from pipeline.results.consolidate import load

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
    last = proc.stdout.strip().splitlines()[-2:]
    assert last == [f"report: {out / 'report.md'}", f"html: {out / 'report.html'}"], last
    page = (out / "report.html").read_text()

    # self-contained: no script, stylesheet link, external image or web font
    assert "<script" not in page and "<link" not in page and "@font-face" not in page
    assert re.findall(r'src="(?!data:image/png;base64,)', page) == []
    assert re.findall(r'href="(?!#)', page) == [] and "url(" not in page

    ds = load(work / "outputs/seed/results.zarr")
    pngs = sorted(out.glob("*.png"))
    assert pngs and len(pngs) == (out / "report.md").read_text().count("![")
    assert ds.attrs["git_sha"] in page
    for package, version in ds.attrs["versions"].items():
        assert f"<th>{html.escape(package)}</th><td>{html.escape(version)}</td>" in page
    for heading in ("Sweep configuration", "Swept keys", "Environment"):
        assert f"<h2>{heading}</h2>" in page
    assert f"name: {ds.attrs['config']['dataset']['name']}" in page  # the config as YAML
    cpu = re.search(r"<th>CPU model</th><td>(.*?)</td>", page)[1]
    assert (cpu == "not recorded") == ("final_cpu_model" not in ds)
    # threads=auto on one local worker: the job had every core for its BLAS
    threads = int(ds["final_blas_threads"].max())
    assert threads == os.cpu_count() and re.search(
        rf"<th>BLAS threads per job</th><td>{threads}</td>", page)
    md_tables = (out / "report.md").read_text().count("\n|---")
    # the report's tables, then swept keys, environment, versions and (when jobs ran) timings
    expected_tables = md_tables + 3 + bool(ds.attrs.get("timings"))

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
