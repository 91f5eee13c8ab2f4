"""A job's identity is what determines its numbers and nothing else (pipeline.job.identity):
its config without execution keys, its dataset's content and the code under ``algorithms/``
that its fit and the shared numerics import. An edit of the plumbing reruns nothing; an edit
of one algorithm reruns that algorithm's jobs only."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.registry import REGISTRY
from pipeline.datasets import content_digest, ingest
from pipeline.job.codeversion import closure, module_of
from pipeline.job.identity import SHARED_NUMERICS, algorithm_version, config_hash
from pipeline.sweep.claims import count_fits

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ("-m", "algorithm=sgma,exact,nystrom", "dataset=sine1d", "dataset.n_train=300",
         "dataset.n_test=50", "lam=0.1", "seed=0", "sweep=ident", "cluster.n_workers=1",
         "cluster.dashboard_address=null")
NOOP = "\n\ndef _identity_test_noop():\n    return None\n"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_code_version_covers_algorithms_modules_only(name):
    modules = closure(module_of(REGISTRY[name].fit), *SHARED_NUMERICS)
    assert modules and all(m.split(".")[0] == "algorithms" for m in modules), modules
    assert module_of(REGISTRY[name].fit) in modules


def test_exact_and_nystrom_do_not_depend_on_sgma_module():
    for name in ("exact", "nystrom"):
        modules = closure(module_of(REGISTRY[name].fit), *SHARED_NUMERICS)
        assert "algorithms.sgma" not in modules, (name, modules)
    assert "algorithms.sgma" in closure(module_of(REGISTRY["sgma"].fit), *SHARED_NUMERICS)
    assert algorithm_version(REGISTRY["exact"]) != algorithm_version(REGISTRY["sgma"])


def test_identity_follows_data_content_not_location_or_execution(tmp_path):
    spec = {"name": "sine1d", "n_train": 40, "n_test": 10}
    config = {"algorithm": {"name": "exact"}, "dataset": spec, "kernel": {"name": "rbf",
              "width": 1.0}, "lam": 0.1, "kappa": 59, "seed": 0,
              "store_root": str(tmp_path / "a"), "threads": 1, "blocks": "memory"}
    h = config_hash(config)
    # another store root, thread count or seed (exact is deterministic): the same job
    assert config_hash({**config, "store_root": str(tmp_path / "b"), "threads": 2,
                        "seed": 3}) == h
    # a dry run builds the data in memory and names the job the same
    assert config_hash({**config, "store_root": str(tmp_path / "c")}, write_data=False) == h
    assert not (tmp_path / "c").exists()
    # other data: another job
    assert config_hash({**config, "dataset": {**spec, "data_seed": 7}}) != h
    assert content_digest(spec, tmp_path / "a") == content_digest(spec, tmp_path / "b")
    assert ingest(spec, tmp_path / "a").exists()


def _copy_with_noops(dest: Path, edit: list[str]) -> Path:
    """The product's packages copied to ``dest``, a no-op function appended to every module
    whose path (relative to the repository) starts with one of ``edit``."""
    for package in ("algorithms", "pipeline", "hydra_plugins", "conf"):
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    touched = 0
    for path in dest.rglob("*.py"):
        rel = path.relative_to(dest).as_posix()
        if any(rel.startswith(prefix) for prefix in edit):
            path.write_text(path.read_text() + NOOP)
            touched += 1
    assert touched > 0
    return dest


def _sweep(cwd: Path, code: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run([sys.executable, "-m", "pipeline", *SWEEP], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _counts(stdout: str) -> tuple[int, int]:
    match = re.search(r"(\d+) already finished, (\d+) run", stdout)
    assert match, stdout
    return int(match.group(1)), int(match.group(2))


@pytest.mark.slow
def test_plumbing_edits_rerun_nothing_and_an_algorithm_edit_reruns_its_jobs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    assert _counts(_sweep(work, ROOT)) == (0, 3)
    # every module of pipeline/ and hydra_plugins/ edited: the finished sweep fits nothing
    plumbing = _copy_with_noops(tmp_path / "plumbing", edit=["pipeline/", "hydra_plugins/"])
    assert _counts(_sweep(work, plumbing)) == (3, 0)
    # algorithms/sgma.py edited: the sgma job runs again, exact and nystrom do not
    sgma = _copy_with_noops(tmp_path / "sgma", edit=["algorithms/sgma.py"])
    out = _sweep(work, sgma)
    assert _counts(out) == (2, 1), out
    # the sgma job's new code version names a new job; no job was ever fitted twice
    jobs = sorted((work / "outputs" / "ident" / "jobs").iterdir())
    assert [count_fits(job) for job in jobs] == [1, 1, 1, 1]
