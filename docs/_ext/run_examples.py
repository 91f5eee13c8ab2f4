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

The shell blocks' ``python -m pipeline`` commands are checked at a small cost
(:func:`checked`): a sweep is planned without running (``dry_run=true``), a job's config
checked as the job would check it (``--cfg job``), another command's arguments parsed
(``--help``); the benchmark modules are run at ``size=small`` by their tests.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sphinx.errors import ExtensionError

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
BLOCK = re.compile(r"(?:<!--\s*example-setup:(?P<setup>.*?)-->\s*\n)?```python\n(?P<code>.*?)```",
                   re.S)
TIMEOUT = 300
SHELL = re.compile(r"```(?:bash|sh|shell)?\n(.*?)```", re.S)
COMMAND = ("python -m pipeline", "sgp-bench")


def commands(page: Path) -> list[str]:
    """The ``python -m pipeline…`` command lines of the page's shell blocks (continuation
    lines joined, comments dropped), without the templates (``<name>``, ``...``)."""
    found = []
    for block in SHELL.findall(page.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith(COMMAND) and not re.search(r"<|\.\.\.|…|\[", line):
                found.append(line)
    return found


def checked(command: str) -> list[str] | None:
    """The argv that checks ``command`` at a small cost (None: checked by the test suite):
    a sweep planned without running (``dry_run=true``), a job's config checked as a job
    checks it (``--cfg job``), another command's arguments (``--help``); the benchmarks'
    modules are run at ``size=small`` by their tests."""
    args = shlex.split(command)
    if args[0] == "sgp-bench":
        args = ["python", "-m", "pipeline", *args[1:]]
    module = args[2]
    if module.startswith("pipeline.bench"):
        return None
    if module != "pipeline":
        return [sys.executable, "-m", module, "--help"]
    sweep = any(a in ("-m", "--multirun") or a.startswith("experiment=") for a in args[3:])
    return [sys.executable, *args[1:], *(["dry_run=true"] if sweep else ["--cfg", "job"])]


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
    """Run every Python example of ``page``, in order; the number run."""
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


def check_commands(pages: list[Path]) -> int:
    """Check every command of ``pages`` (:func:`checked`), each distinct check once; the
    number of command lines checked."""
    checks: dict[tuple[str, ...], str] = {}
    lines = 0
    for page in pages:
        for line in commands(page):
            lines += 1
            argv = checked(line)
            if argv is not None:
                checks.setdefault(tuple(argv), f"{page.relative_to(DOCS)}, the command `{line}`")

    def check(item: tuple[tuple[str, ...], str]) -> None:
        with tempfile.TemporaryDirectory(prefix="docs-command-") as scratch:
            _run(list(item[0]), Path(scratch), item[1])

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(check, checks.items()))
    return lines


def run_all(app=None) -> None:
    """Every page's Python examples and commands, pages side by side (each its own
    processes and scratch directory)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        ran = sum(pool.map(run_page, pages))
    lines = check_commands(pages)
    if app is not None:
        from sphinx.util import logging

        logging.getLogger(__name__).info(f"run_examples: {ran} Python examples ran, "
                                         f"{lines} commands checked")


def setup(app) -> dict:
    app.connect("builder-inited", run_all)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
