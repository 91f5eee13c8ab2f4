"""Sphinx extension: every Python example of the site runs when the site builds, so that an
example that breaks fails the build (``.ci/run`` builds it with warnings as errors).

Each ```` ```python ```` block of a page runs as a script of its own, in a scratch directory the
build shares among a page's blocks (an example writes under its own ``outputs/``). A block that
reads what a command makes (a sweep's ``results.zarr``) names that command at a small size in
a comment just above it, which the page does not show::

    <!-- example-setup: python -m pipeline -m algorithm=sgma,nystrom dataset=abalone
         dataset.n_train=500 seed=0,1 sweep=first -->

The setup runs first, in the same directory. A block whose script exits with an error stops
the build with the page, the block's first line and the last lines of its error.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from sphinx.errors import ExtensionError

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
BLOCK = re.compile(r"(?:<!--\s*example-setup:(?P<setup>.*?)-->\s*\n)?```python\n(?P<code>.*?)```",
                   re.S)
TIMEOUT = 300


def examples(page: Path) -> list[tuple[str | None, str]]:
    """(setup command or None, code) of each Python block of ``page``, in order."""
    return [(" ".join(m["setup"].split()) if m["setup"] else None, m["code"])
            for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]


def _run(args: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise ExtensionError(f"{what} failed (exit {proc.returncode}): {tail}")


def run_page(page: Path) -> int:
    """Run every Python example of ``page``; the number run."""
    blocks = examples(page)
    if not blocks:
        return 0
    name = page.relative_to(DOCS)
    with tempfile.TemporaryDirectory(prefix="docs-example-") as scratch:
        cwd = Path(scratch)
        for number, (setup, code) in enumerate(blocks, 1):
            first = code.strip().splitlines()[0] if code.strip() else ""
            if setup:
                args = shlex.split(setup)
                if args[0] == "python":
                    args[0] = sys.executable
                _run(args, cwd, f"{name}, the setup of example {number} ({setup})")
            script = cwd / f"example_{number}.py"
            script.write_text(code)
            _run([sys.executable, script.name], cwd, f"{name}, example {number} ({first})")
    return len(blocks)


def run_all(app=None) -> None:
    pages = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    count = sum(run_page(page) for page in pages)
    if app is not None:
        from sphinx.util import logging

        logging.getLogger(__name__).info(f"run_examples: {count} Python examples ran")


def setup(app) -> dict:
    app.connect("builder-inited", run_all)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
