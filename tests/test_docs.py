"""The documentation names only what exists: every repository path (``pipeline/…``,
``algorithms/…``, ``conf/…``, ``docs/…``) and every module or object named in backticks or a
Sphinx role (``pipeline.x.y``) in the docs, README, CONTRIBUTING, the code's docstrings and
messages, and the configs' comments is there (issue 55: README named ``pipeline/datasets.py``
after the module had moved, an error named ``pipeline/variables.py``)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("pipeline/**/*.py"),
           *ROOT.glob("pipeline/data/README.md"), *ROOT.glob("algorithms/**/*.py"),
           *ROOT.glob("hydra_plugins/**/*.py"), *ROOT.glob("conf/**/*.yaml")]
SOURCES = [p for p in SOURCES if not {"_build", "generated"} & set(p.parts)]
PATH = re.compile(r"(?<![\w/.\-])((?:pipeline|algorithms|conf|docs|tests|hydra_plugins|scripts)"
                  r"/[\w/.\-]*\w)")
# a dotted name in backticks or a role: ``pipeline.x.y``, `pipeline.x`, :func:`~pipeline.x.f`
DOTTED = re.compile(r"`~?((?:pipeline|algorithms)(?:\.\w+)+)")


def _missing_path(path: str) -> bool:
    if path.endswith(("_", ".log")):  # a prefix (conf/experiment/ferrari1999_*) or a log file
        return False
    if path.startswith(("docs/_build", "docs/reference/generated")):  # what a build writes
        return False
    return not (ROOT / path).exists()


def _missing_object(name: str) -> bool:
    if name.endswith(".log"):  # a job's log file, pipeline.log
        return False
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return True
            obj = getattr(obj, attr)
        return False
    return True


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_module_named_exists(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    missing = sorted({p for p in PATH.findall(text) if _missing_path(p)}
                     | {n for n in DOTTED.findall(text) if _missing_object(n)})
    assert not missing, f"{path.relative_to(ROOT)} names what does not exist: {missing}"


@pytest.fixture
def run_examples(tmp_path, monkeypatch):
    """The site's example runner (docs/_ext/run_examples.py), imported afresh, its pages
    under ``tmp_path``."""
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    monkeypatch.delitem(sys.modules, "run_examples", raising=False)
    import run_examples

    monkeypatch.setattr(run_examples, "DOCS", tmp_path)
    return run_examples


def test_a_broken_example_fails_the_site_build(tmp_path, run_examples):
    """docs/_ext/run_examples.py runs each Python block of a page (after its hidden setup
    command); one that fails stops the build with the page and the block's first line."""
    page = tmp_path / "page.md"
    page.write_text("<!-- example-setup: python -c \"open('made', 'w').write('1')\" -->\n"
                    "```python\nprint(open('made').read())\n```\n\n"
                    "```python\nraise SystemExit('broken example')\n```\n")
    assert [setup for setup, _ in run_examples.examples(page)][0].startswith("python -c")
    with pytest.raises(ExtensionError, match=r"page.md, example 2 \(raise SystemExit"):
        run_examples.run_page(page)
    page.write_text("```python\nprint('fine')\n```\n")
    assert run_examples.run_page(page) == 1


def test_a_command_of_the_site_is_checked_as_a_job_or_a_sweep_plan(tmp_path, run_examples):
    """A shell block's ``python -m pipeline`` line is checked when the site builds: a job by
    ``--cfg job`` (the job's own checks), a sweep by ``dry_run=true``; a bad value fails the
    build naming the page and the command. Templates (``<name>``) are left alone."""
    assert run_examples.checked("python -m pipeline -m seed=0,1")[-1] == "dry_run=true"
    assert run_examples.checked("sgp-bench algorithm=sgma")[-2:] == ["--cfg", "job"]
    assert run_examples.checked("python -m pipeline.bench.exact size=small") is None
    page = tmp_path / "page.md"
    page.write_text("```bash\npython -m pipeline algorithm=<name>\n"
                    "python -m pipeline algorithm=sgma dataset=sine1d lam=-1\n```\n")
    assert run_examples.commands(page) == ["python -m pipeline algorithm=sgma dataset=sine1d "
                                           "lam=-1"]
    with pytest.raises(ExtensionError, match=r"page.md, the command `python -m pipeline "
                                             r"algorithm=sgma dataset=sine1d lam=-1`.*lam"):
        run_examples.check_commands([page])
