"""The harness of the bad-input case tables (``tests/test_bad_input_*.py``).

Every case runs a real command (``python -m pipeline ...``, ``python -m pipeline.report ...``)
in a scratch directory that starts as a copy of a *seed* directory: a finished tiny sweep
(``outputs/seed/`` with ``results.zarr``, its job files and ``report/``) and its dataset store
(``outputs/stores/``). A case passes when the command

- exits with the expected code (2: bad input) within its timeout (nothing hangs);
- writes exactly one non-blank line to stderr, starting with ``error: ``, and no traceback
  anywhere;
- names the bad value (every fragment of ``names`` is in that line);
- leaves every file that was on disk before byte-identical.

A case's ``setup(workdir)`` may create or damage files first (a bad CSV, a truncated store);
``{dir}`` in an argument is replaced by the scratch directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SEED_SWEEP = ("-m", "algorithm=sgma,exact", "dataset=sine1d", "dataset.n_train=40",
              "dataset.n_test=20", "lam=0.1", "seed=0", "sweep=seed", "cluster.n_workers=1",
              "cluster.dashboard_address=:0")


@dataclass(frozen=True)
class Case:
    """One bad input: the command after ``python -m`` and what its error line must name."""

    id: str
    argv: tuple[str, ...]
    names: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    exit_code: int = 2
    timeout: float = 120
    env: dict[str, str] = field(default_factory=dict)


def make_seed_dir(root: Path) -> Path:
    """A finished tiny sweep and its report in ``root`` (built once per test session)."""
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pipeline", *SEED_SWEEP], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "pipeline.report",
                           "outputs/seed/results.zarr"], cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return root


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (relative path -> digest)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_case(case: Case, seed_dir: Path, workdir: Path) -> subprocess.CompletedProcess:
    """Run ``case`` in a copy of ``seed_dir`` and assert everything the module docstring lists."""
    shutil.copytree(seed_dir, workdir, symlinks=True)
    if case.setup is not None:
        case.setup(workdir)
    before = snapshot(workdir)
    argv = [arg.replace("{dir}", str(workdir)) for arg in case.argv]
    env = {**os.environ, **case.env}
    try:
        proc = subprocess.run([sys.executable, "-m", *argv], cwd=workdir, capture_output=True,
                              text=True, timeout=case.timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{case.id}: hung for more than {case.timeout} s") from exc
    shown = f"\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert proc.returncode == case.exit_code, f"exit {proc.returncode}{shown}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if case.exit_code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        for fragment in case.names:
            assert fragment in lines[0], f"{fragment!r} not named{shown}"
    else:
        for fragment in case.names:
            assert fragment in proc.stdout + proc.stderr, f"{fragment!r} not named{shown}"
    after = snapshot(workdir)
    changed = [p for p, digest in before.items() if after.get(p) != digest]
    assert not changed, f"files on disk changed or removed: {changed[:10]}{shown}"
    return proc
