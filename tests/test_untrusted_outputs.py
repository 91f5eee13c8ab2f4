"""Outputs that cannot be half-written, and untrusted strings that stay text (issue 51, classes
2 and 5): every output goes through :mod:`pipeline.atomic` (a killed report leaves the previous
one whole); strings read from a results store or a published CSV are escaped in report.md,
report.html and a published README, and report.html embeds only the figures it wrote."""

import io
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from markdown_it import MarkdownIt
from PIL import Image

from pipeline.atomic import atomic_path, write_text
from pipeline.report.html import markdown_to_html
from pipeline.report.markdown import code, inert
from pipeline.results.consolidate import consolidate
from pipeline.results.job_file import job_path, write_job_failure
from pipeline.results.manifest_file import dump_manifest

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ("![x](/etc/passwd) ![y](outputs/evil/manifest.json) <script>alert(1)</script> "
           "[link](http://evil.example/) <https://auto.example/> <img src=x onerror=alert(1)> "
           "\\[a\\](b) `![in code](/etc/passwd)` ``` ![z](/etc/hostname)")


def crafted_store(root: Path, sweep: str = "evil") -> Path:
    """A results store of failed jobs whose error texts, dataset name and config strings are
    hostile Markdown and HTML (as a results store from elsewhere could hold)."""
    sweep_dir = root / "outputs" / sweep
    config = {"algorithm": {"name": "sgma"}, "dataset": {"name": "abalone"}, "lam": 0.1,
              "kappa": 59, "seed": 0, "report": {"paper": HOSTILE}}
    entries = []
    for seed, error in ((0, HOSTILE), (1, "line one\n\n![img](/etc/passwd)\n# heading")):
        h = f"{seed:032x}"
        write_job_failure(config, error, job_path(sweep_dir, h), {"config_hash": h})
        entries.append({"hash": h, "coords": {"algorithm": "sgma", "dataset": "a<b>[d](/x)",
                                              "lam": 0.1, "kappa": 59, "seed": seed},
                        "overrides": []})
    manifest = {"sweep": "evil `![s](/etc/passwd)`", "command": [], "config": config,
                "swept_keys": ["seed", "![k](/etc/passwd)"], "extra_dims": [],
                "entries": entries, "timings": {}, "n_workers": 0}
    (sweep_dir / "manifest.json").write_bytes(dump_manifest(manifest))  # with its checksum
    return consolidate(sweep_dir)


def active_tokens(text: str) -> list[str]:
    """Images, links and raw HTML a CommonMark renderer (HTML and links on) finds in ``text``."""
    found = []
    for token in MarkdownIt("commonmark").parse(text):
        for child in [token, *(token.children or [])]:
            if child.type in ("image", "link_open", "html_inline", "html_block"):
                where = child.attrGet("src") or child.attrGet("href") or child.content
                found.append(f"{child.type}: {where}")
    return found


@pytest.fixture
def report_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from pipeline.report.build import render

    store = crafted_store(tmp_path)
    return render(store).parent


def test_untrusted_strings_in_a_results_store_stay_text_in_report_md_and_html(report_dir):
    md = (report_dir / "report.md").read_text()
    figures = {p.name for p in report_dir.glob("*.png")}
    assert all(token.removeprefix("image: ") in figures for token in active_tokens(md)), \
        active_tokens(md)
    assert "/etc/passwd" in md  # shown as typed, not dropped
    page = (report_dir / "report.html").read_text()
    assert "<script>" not in page and "<img src=x" not in page
    assert not re.search(r"<a href=\"(?!#|report_interactive)", page)
    # the only data URIs are the figures the report drew (none here: every job failed)
    assert len(re.findall(r'src="data:', page)) == len(figures)
    assert "cm9vd" not in page  # base64 of "root:" (/etc/passwd's first bytes) is nowhere
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_report_html_embeds_only_the_figures_the_report_wrote(tmp_path):
    Image.new("RGB", (2, 3)).save(tmp_path / "fig1_gap.png")
    Image.new("RGB", (2, 3)).save(tmp_path / "other.png")
    (tmp_path / "link.png").symlink_to(tmp_path / "other.png")
    (tmp_path / "sub").mkdir()
    Image.new("RGB", (2, 3)).save(tmp_path / "sub" / "in.png")
    text = "\n\n".join(f"![{name}]({name})" for name in (
        "fig1_gap.png", "other.png", "link.png", "sub/in.png", "../x.png", "/etc/passwd",
        "http://evil.example/a.png"))
    page = markdown_to_html(text, tmp_path, figures=["fig1_gap.png", "link.png"])
    assert page.count('src="data:') == 1 and '<figure id="fig1_gap">' in page
    for name, why in (("other.png", "not a figure this report wrote"),
                      ("link.png", "not a regular file"),
                      ("sub/in.png", "not a file of this report"),
                      ("/etc/passwd", "not a file of this report")):
        assert f"image {name} not embedded: {why}" in page
    # without the list of figures, still never a path outside the directory or a symlink
    page = markdown_to_html(text, tmp_path)
    assert page.count('src="data:') == 2  # fig1_gap.png and other.png


def test_inert_escapes_outside_code_spans_and_cell_by_cell():
    assert inert("a ![x](/p) <b> <https://x> 1 < 2") == r"a ![x\](/p) \<b> \<https://x> 1 < 2"
    assert inert("`[kept](x)` [x](y)") == r"`[kept](x)` [x\](y)"
    assert inert("| `a | [b](c)` |") == r"| `a | [b\](c)` |"  # a cell ends a code span
    # a bracket that makes no link stays as typed; a reference, a definition do not
    assert inert("error [target units²] at n = 20") == "error [target units²] at n = 20"
    assert inert("[a][b] - [r]: http://x") == r"[a\][b] - [r\]: http://x"
    assert active_tokens(inert("[r]: /etc/passwd\n\n[r] and - [s]: /x\n\n[s]")) == []
    assert active_tokens(inert(HOSTILE)) == []
    assert active_tokens(code("`![x](/etc/passwd)`")) == []


def test_a_published_readme_keeps_a_hostile_table_inert(tmp_path):
    from pipeline.publish.job_table import job_table
    from pipeline.publish.published import readme
    from tests.test_publish import _sweep

    ds = _sweep()
    ds = ds.assign_coords(dataset=["![d](/etc/passwd)<script>"],
                          protocol=["shared", "<b>own</b>[x](http://e)"])
    buffer = io.StringIO()
    job_table(ds).to_csv(buffer, index=False)
    table = pd.read_csv(io.StringIO(buffer.getvalue()))
    text = readme(table, reference="b", sweep="s", code_version="git 0",
                  commands=["python -m pipeline -m experiment=s"], figures=["f.png"],
                  mode_order=["shared", "<b>own</b>[x](http://e)"],
                  grid="```\n![g](/etc/passwd)")
    found = [t for t in active_tokens(text)
             if t not in ("image: f.png", "html_block: <details><summary>shared</summary>\n")
             and not t.startswith("html_block: </details>")]
    assert all(t.startswith("html_block: <details><summary>&lt;b&gt;own") for t in found), found
    assert not re.search(r"(?<!\\)<script", text)  # escaped wherever it is


def test_publish_names_its_figures_itself_and_refuses_modes_that_are_paths(tmp_path, capsys):
    """The figures are drawn from the table under names publish makes: a run record's
    ``figures`` (a path here) is neither read nor written; a mode of the table names figure
    files, so one that is not a plain name is one line, exit 2, and nothing is written."""
    import yaml

    from pipeline.publish.cli import main
    from pipeline.publish.job_table import job_table
    from tests.test_publish import _sweep

    job_table(_sweep()).to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "s.run.yaml").write_text(yaml.safe_dump(
        {"command": "c", "code_version": "git 0", "mode_order": [], "budgets": [60],
         "figures": ["../../etc/passwd"], "grid": None}))
    assert main([str(tmp_path / "s.csv"), "--reference", "b", "--out",
                 str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out" / "passwd").exists()
    assert "../../etc/passwd" not in (tmp_path / "out" / "s.run.yaml").read_text()
    table = job_table(_sweep())
    table["mode"] = table["mode"].replace({"own": "../../own"})
    table.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "t.run.yaml").write_text((tmp_path / "s.run.yaml").read_text())
    capsys.readouterr()
    assert main([str(tmp_path / "t.csv"), "--reference", "b", "--out",
                 str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the table's mode '../../own' is not a plain file name")
    assert err.count("\n") == 1 and not (tmp_path / "out2").exists()


def test_a_report_killed_mid_write_leaves_the_previous_report_whole(report_dir, monkeypatch):
    from pipeline.report.build import render

    before = {p.name: p.read_bytes() for p in report_dir.iterdir()}
    real = Path.write_text

    def dies_half_way(self, data, *args, **kwargs):
        real(self, data[: len(data) // 2], *args, **kwargs)
        raise KeyboardInterrupt  # the process is killed mid-write

    monkeypatch.setattr(Path, "write_text", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        render(report_dir.parent / "results.zarr")
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in report_dir.iterdir()}
    assert after == before  # report.md, report.html and the rest whole; no temporary left


def test_atomic_path_replaces_a_symlink_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("theirs")
    (tmp_path / "out.txt").symlink_to(target)
    write_text(tmp_path / "out.txt", "ours")
    assert target.read_text() == "theirs"
    assert not (tmp_path / "out.txt").is_symlink() and (tmp_path / "out.txt").read_text() == "ours"
    with pytest.raises(ValueError), atomic_path(tmp_path / "out.txt") as tmp:
        tmp.write_text("half")
        raise ValueError
    assert (tmp_path / "out.txt").read_text() == "ours"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "out.txt"]


def test_a_symlinked_bookkeeping_file_is_replaced_never_followed(tmp_path, capsys):
    from pipeline.atomic import SymlinkRefused, open_nofollow
    from pipeline.job.claims import count_fits, record_fit
    from pipeline.job.log import job_log

    target = tmp_path / "target"
    target.write_text("keep")
    for name in ("fits.log", "pipeline.log", "other.lock"):
        (tmp_path / name).symlink_to(target)
    record_fit(tmp_path, "w1")
    with job_log(tmp_path) as log:
        log.info("a line")
    assert target.read_text() == "keep"
    assert count_fits(tmp_path) == 1 and not (tmp_path / "fits.log").is_symlink()
    assert "a line" in (tmp_path / "pipeline.log").read_text()
    err = capsys.readouterr().err
    assert f"note: {tmp_path / 'fits.log'} was a symlink (to {target}); replaced" in err
    with pytest.raises(SymlinkRefused, match="other.lock is a symlink"):
        open_nofollow(tmp_path / "other.lock", os.O_WRONLY)


# every way pipeline/ writes a file, outside pipeline/atomic.py: allowed only on the temporary
# path of atomic_path (named tmp) or through the helper
WRITERS = re.compile(r"\.write_text\(|\.write_bytes\(|\.savefig\(|\.to_csv\(|\.to_parquet\(|"
                     r"OmegaConf\.save\(|\bopen\(.*[\"'][wax]b?\+?[\"']\)|\blogging\.FileHandler\(")


def test_pipeline_writes_every_output_through_the_atomic_helper():
    offenders = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")) + sorted(
            (ROOT / "hydra_plugins").rglob("*.py")):
        if path.name == "atomic.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if WRITERS.search(line) and not re.search(r"\btmp\b|\batomic\.", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
