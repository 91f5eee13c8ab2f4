"""One self-contained ``report.html`` beside a sweep's ``report.md``.

The page is built from the text of ``report.md`` (:func:`pipeline.report.build._write_report`), so
the two never diverge: markdown-it-py converts it (CommonMark with pipe tables; raw HTML in the
text is escaped), its ``![stem](file)`` figure lines embedded as base64 ``data:`` URIs (Pillow
reads their sizes). After the report's
body come the sweep's composed configuration (YAML), its swept keys and the environment it ran
in (package versions, git sha, host, workers, BLAS threads and CPU model of the jobs, phase
timings, the results path). The file needs nothing else: no image files, no scripts, no web
fonts, no network; mail it or open it offline in any browser. Its navigation bar links to
``report_interactive.html`` beside it (:mod:`pipeline.report.interactive`): the scripts of the
interactive page (1.7 MB of BokehJS) stay out of this one.
"""

from __future__ import annotations

import base64
import html
import io
import json
import mimetypes
import re
from collections.abc import Collection, Iterable
from pathlib import Path

import numpy as np
import xarray as xr
from markdown_it import MarkdownIt
from PIL import Image

from pipeline.atomic import write_text
from pipeline.results.access import decoded_attrs

NOT_RECORDED = "not recorded"

CSS = """
:root { color-scheme: light; }
*, *::before, *::after { box-sizing: border-box; }
body { margin: 0; background: #fff; color: #1f2328;
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
        sans-serif; }
main { max-width: 1360px; margin: 0 auto; padding: 1.5rem 2rem 3rem; }
p, ul, figcaption { max-width: 75rem; }
h1 { font-size: 1.8rem; margin: 0.5rem 0 1rem; }
h2 { font-size: 1.35rem; margin: 2.2rem 0 0.8rem; padding-bottom: 0.3rem;
  border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.1rem; margin: 1.5rem 0 0.5rem; }
p, ul { margin: 0.6rem 0; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono",
  monospace; font-size: 0.88em; }
code { background: #f3f4f6; padding: 0.1em 0.3em; border-radius: 4px; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 0.8rem 1rem;
  overflow-x: auto; line-height: 1.4; width: fit-content; min-width: 50%; max-width: 100%; }
pre code { background: none; padding: 0; }
nav { font-size: 0.95rem; color: #57606a; }
nav a { color: #0969da; margin-right: 1rem; text-decoration: none; }
nav a:hover { text-decoration: underline; }
.table-wrap { overflow: auto; max-height: 80vh; width: fit-content; max-width: 100%;
  margin: 0.8rem 0 1.2rem; border: 1px solid #d0d7de; border-radius: 6px; }
table { border-collapse: collapse; font-size: 0.85rem; font-variant-numeric: tabular-nums; }
th, td { padding: 0.35rem 0.55rem; border-bottom: 1px solid #e5e7eb; text-align: left;
  white-space: normal; overflow-wrap: break-word; vertical-align: top; }
th { min-width: 3.5rem; }
thead th { position: sticky; top: 0; background: #f3f4f6; font-weight: 600;
  border-bottom: 1px solid #d0d7de; }
tbody tr:nth-child(even) { background: #fafbfc; }
tbody tr:hover { background: #eef4ff; }
figure { margin: 1.2rem 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #e5e7eb; }
figcaption { font-size: 0.85rem; color: #57606a; margin-top: 0.3rem; }
.missing { color: #cf222e; }
@media print { .table-wrap, pre { overflow: visible; max-height: none; }
  thead th { position: static; } }
"""


def html_path(report_md: Path) -> Path:
    """Where :func:`write_html` writes the page for ``report_md``: ``report.html`` beside it."""
    return Path(report_md).with_name("report.html")


def write_html(report_md: Path, ds: xr.Dataset, results_path: Path,
               interactive: Path | None = None,
               figures: Collection[str] | None = None) -> Path:
    """Write ``report.html`` beside ``report_md`` (the report of the sweep ``ds`` loaded from
    ``results_path``) and return its path. The figures the markdown names are read from the
    directory of ``report_md``, only those named in ``figures`` (the files the report wrote;
    :func:`markdown_to_html`); ``interactive`` (a page in the same directory) is linked from
    the navigation bar."""
    report_md = Path(report_md)
    body = markdown_to_html(report_md.read_text(), report_md.parent, figures)
    sweep = str(ds.attrs.get("sweep", ""))
    sections = [
        ("report", None, body),
        ("configuration", "Sweep configuration", _config_html(decoded_attrs(ds).get("config"))),
        ("swept", "Swept keys", _swept_html(ds)),
        ("environment", "Environment", _environment_html(ds, Path(results_path))),
    ]
    nav = " ".join(f'<a href="#{anchor}">{html.escape(title or "Report")}</a>'
                   for anchor, title, _ in sections)
    if interactive is not None:
        nav += (f' <a href="{html.escape(Path(interactive).name, quote=True)}">Interactive '
                "traces</a> (a page beside this file)")
    parts = [f'<nav>{nav}</nav>']
    for anchor, title, content in sections:
        heading = f"<h2>{html.escape(title)}</h2>\n" if title else ""
        parts.append(f'<section id="{anchor}">\n{heading}{content}\n</section>')
    page = "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Sweep {html.escape(sweep)}: report</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        *parts,
        "</main>",
        "</body>",
        "</html>",
        "",
    ])
    out = html_path(report_md)
    write_text(out, page)
    return out


# --- report.md as HTML -------------------------------------------------------------------------


def _markdown() -> MarkdownIt:
    """CommonMark with pipe tables; raw HTML in the text is escaped, not passed through, and
    links are text (a report links nowhere: its only references are its own figures)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable(["link", "autolink"])
    md.add_render_rule("table_open", lambda *_: '<div class="table-wrap">\n<table>\n')
    md.add_render_rule("table_close", lambda *_: "</table>\n</div>\n")
    md.add_render_rule("image", _image)
    return md


def markdown_to_html(text: str, base_dir: Path, figures: Collection[str] | None = None) -> str:
    """HTML of the markdown ``text`` (markdown-it-py: CommonMark and pipe tables, all text
    escaped, links as text). An image is embedded as a data URI when it names a file of
    ``base_dir`` itself (a plain name, no directory part, a regular file, not a symlink) and,
    with ``figures``, one of those names (the files the report wrote); any other image is a
    note, its file never read. A paragraph of nothing but images becomes one ``<figure>`` per
    image."""
    md = _markdown()
    tokens = md.parse(text)
    for i, token in enumerate(tokens[:-2]):
        inline = tokens[i + 1]
        if token.type == "paragraph_open" and inline.children and all(
                child.type in ("image", "softbreak") for child in inline.children):
            token.hidden = tokens[i + 2].hidden = True
            for child in inline.children:
                child.meta["figure"] = True
    out = md.renderer.render(tokens, md.options, {
        "base_dir": Path(base_dir), "figures": None if figures is None else set(figures)})
    return CELL.sub(_breakable, out)


CELL = re.compile(r"(<t[hd][^>]*>)(.*?)(</t[hd]>)", re.S)
TAG = re.compile(r"(<[^>]*>)")
NAME_BREAK = re.compile(r"(?<=\w)([_/])(?=\w)")  # in a name, not an entity's "&lt;/b"


def _breakable(cell: re.Match) -> str:
    """A table cell that wraps where a reader would: after ``_`` and ``/`` in a name
    (``zhang_sparse_linear``, ``ok/failed/missing``), and between a value and its ``± sd``
    but not before the ``±`` (text only, never inside a tag): a wide table then fits a
    1400 px window."""
    parts = TAG.split(cell[2])
    text = [part if part.startswith("<") else
            NAME_BREAK.sub(r"\1<wbr>", part).replace(" ± ", "\u00a0± ") for part in parts]
    return cell[1] + "".join(text) + cell[3]


def _image(renderer, tokens, idx, options, env) -> str:
    """An ``<img>`` (in a ``<figure>`` where its paragraph held only images) with the file's
    bytes as a data URI, or a note that the file could not be read."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = renderer.renderInlineAsText(token.children or [], options, env)
    tag = "p" if token.meta.get("figure") else "span"
    path = env["base_dir"] / src
    why = _not_embedded(src, path, env["figures"])
    if why:
        return f'<{tag} class="missing">image {html.escape(src)} not embedded: {why}</{tag}>'
    try:
        data = path.read_bytes()
    except OSError as err:
        return (f'<{tag} class="missing">figure {html.escape(src)} could not be read: '
                f"{html.escape(err.strerror or str(err))}</{tag}>")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    try:
        with Image.open(io.BytesIO(data)) as picture:
            dims = ' width="{}" height="{}"'.format(*picture.size)
    except (OSError, ValueError):  # not an image Pillow reads: the browser sizes it
        dims = ""
    uri = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    img = f'<img src="{uri}" alt="{html.escape(alt, quote=True)}"{dims}>'
    if not token.meta.get("figure"):
        return img
    return (f'<figure id="{html.escape(Path(src).stem, quote=True)}">{img}'
            f"<figcaption>{html.escape(alt)}</figcaption></figure>")


def _not_embedded(src: str, path: Path, figures: set[str] | None) -> str | None:
    """Why the image ``src`` (at ``path``) is not embedded, or None: only a file the report
    wrote beside the markdown is (never a path elsewhere, a link, a URL)."""
    if not src or src != Path(src).name or src.startswith(".") or "\\" in src:
        return "not a file of this report"
    if figures is not None and src not in figures:
        return "not a figure this report wrote"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "not a regular file"
    return None


# --- the sections after the report's body ------------------------------------------------------


def _pre(text: str) -> str:
    return f"<pre><code>{html.escape(text)}</code></pre>"


def _config_html(config) -> str:
    """The composed config as YAML (JSON if OmegaConf cannot take it)."""
    if not config:
        return f"<p>{NOT_RECORDED}</p>"
    try:
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            text = OmegaConf.to_yaml(OmegaConf.create(config))
        except OmegaConfBaseException:
            text = json.dumps(config, indent=2, default=str)
    except ImportError:
        text = json.dumps(config, indent=2, default=str)
    return _pre(text.rstrip("\n"))


def _key_value_table(rows: Iterable[tuple[str, str]],
                     header: tuple[str, str] | None = None) -> str:
    """A two-column table (keys escaped here, values already HTML)."""
    body = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    heads = ("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
             + "</tr></thead>\n") if header else ""
    return (f'<div class="table-wrap">\n<table>\n{heads}<tbody>\n{body}\n</tbody>\n'
            "</table>\n</div>")


def _swept_html(ds: xr.Dataset) -> str:
    keys = [str(k) for k in decoded_attrs(ds).get("swept_keys", [])]
    if not keys:
        return "<p>none (a single job)</p>"
    rows = []
    for key in keys:
        values = (", ".join(map(str, ds[key].values.tolist())) if key in ds.dims
                  else "—")
        rows.append((key, html.escape(values)))
    return _key_value_table(rows, ("key", "values in this report"))


def _ok_values(ds: xr.Dataset, name: str) -> list[str] | None:
    """Distinct values of the per-job variable ``name`` over the jobs with status ok (None when
    the store has no such variable)."""
    if name not in ds:
        return None
    values, status = xr.broadcast(ds[name], ds["status"])
    picked = np.asarray(values.values)[np.asarray(status.values) == "ok"]
    out = set()
    for value in picked.tolist():
        if isinstance(value, float):
            if not np.isfinite(value):
                continue
            out.add(str(int(value)) if value.is_integer() else f"{value:g}")
        elif str(value).strip():
            out.add(str(value).strip())
    return sorted(out, key=lambda v: (len(v), v))


def _distinct(ds: xr.Dataset, name: str) -> str:
    values = _ok_values(ds, name)
    if values is None:
        return NOT_RECORDED
    return ", ".join(values) if values else "no job finished ok"


def _environment_html(ds: xr.Dataset, results_path: Path) -> str:
    attrs = decoded_attrs(ds)
    sha = attrs.get("git_sha")
    workers = attrs.get("n_workers")
    rows = [
        ("git sha", f"<code>{html.escape(str(sha))}</code>" if sha else NOT_RECORDED),
        ("host", html.escape(str(attrs.get("host") or NOT_RECORDED))),
        ("workers", html.escape(str(workers) if workers is not None else NOT_RECORDED)),
        ("BLAS threads per job", html.escape(_distinct(ds, "final_blas_threads"))),
        ("CPU model", html.escape(_distinct(ds, "final_cpu_model"))),
        ("results", f"<code>{html.escape(str(results_path))}</code>"),
    ]
    parts = [_key_value_table(rows)]
    versions = attrs.get("versions") or {}
    parts.append("<h3>Package versions</h3>")
    parts.append(_key_value_table(((str(k), html.escape(str(v))) for k, v in versions.items()),
                                  ("package", "version"))
                 if versions else f"<p>{NOT_RECORDED}</p>")
    records = attrs.get("invocations") or [{"timings": attrs.get("timings") or {}}]
    parts.append("<h3>Timings of the sweep</h3>")
    for i, record in enumerate(records, start=1):
        timings = record.get("timings") or {}
        if len(records) > 1:
            parts.append(f"<h4>Command {i} of {len(records)}</h4>")
        if timings:
            parts.append(_key_value_table(
                ((str(k).removesuffix("_seconds").replace("_", " "), _seconds(v))
                 for k, v in timings.items()), ("phase", "seconds")))
        else:
            parts.append("<p>none: no job ran in the last run of this command "
                         "(all were cached, or it was interrupted)</p>")
    return "\n".join(parts)


def _seconds(value) -> str:
    try:
        return f"{float(value):.2f}"
    except (TypeError, ValueError):
        return html.escape(str(value))
