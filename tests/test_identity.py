"""A job's identity is what determines its numbers and nothing else (pipeline.job.identity):
its config without execution keys, its dataset's content, the code under ``algorithms/``
that its fit and the shared numerics import, and the modules of ``pipeline/`` that change a
number a fit sees or reports (NUMERIC_PIPELINE). An edit of the plumbing reruns nothing; an
edit of one algorithm reruns that algorithm's jobs only; a number-changing edit of any function
of a numeric pipeline module reruns every job, a comment or docstring edit none."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.registry import REGISTRY
from pipeline import codeversion
from pipeline.codeversion import (
    LEARNING_PIPELINE,
    NUMERIC_PIPELINE,
    closure,
    module_of,
    pipeline_version,
)
from pipeline.datasets import DATASETS, content_digest, ingest, spec_hash
from pipeline.job.claims import count_fits
from pipeline.job.identity import SHARED_NUMERICS, algorithm_version, config_hash

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


# The pipeline modules a numeric one imports that are not numeric themselves, and why: a new
# import of a numeric module must be listed here (plumbing) or join NUMERIC_PIPELINE
NOT_NUMERIC = {
    "pipeline.cluster.connect": "starts or connects to a cluster",
    "pipeline.cluster.busy": "measures how busy other processes kept the machine (a timing record)",
    "pipeline.cluster.here": "names the worker a job runs on",
    "pipeline.cluster.threads": "BLAS threads: an execution key (round-off only)",
    "pipeline.config": "completes a config from conf/: the completed config is in the identity",
    "pipeline.config.keys": "the top-level keys' roles and checks (a value is refused or passed "
                            "on unchanged)",
    "pipeline.datasets": "data preparation: reaches a job through its data's content",
    "pipeline.datasets.spec": "data preparation: reaches a job through its data's content",
    "pipeline.codeversion": "the identity's own machinery",
    "pipeline.job.identity": "the identity's own machinery",
    "pipeline.lines": "one-line texts and note: lines",
    "pipeline.job.numbers": "an integer given for a declared float made that float (type only)",
    "pipeline.cluster.hydra_job": "Hydra's job context",
    "pipeline.blocks": "picks the provider the blocks key names (each provider is numeric)",
    "pipeline.job.warmup": "an untimed warm-up fit whose result is thrown away",
    "pipeline.checksum": "file checksums",
    "pipeline.results.netcdf3": "writes result.nc as xarray would (the same bytes); every value "
                                "read back is checked against the file's checksum",
    "pipeline.oserrors": "the one line for an OSError",
    "pipeline.results.ownership": "which files a store may hold before it is replaced",
    "pipeline.job.claims": "a lease: which process learns, not what it learns",
    "pipeline.results.variables": "long names and units of the result's variables",
    "pipeline.watch": "names the job a signal killed",
    "pipeline.console": "shows a single job's phases on the console",
}


def _pipeline_imports(module: str) -> set[str]:
    return set(codeversion._module_tree(module, ("pipeline",))[1])


def test_every_pipeline_module_a_numeric_one_imports_is_numeric_or_named_plumbing():
    for module in NUMERIC_PIPELINE:
        undecided = _pipeline_imports(module) - set(NUMERIC_PIPELINE) - set(NOT_NUMERIC)
        assert not undecided, (f"{module} imports {sorted(undecided)}: add each to "
                               "NUMERIC_PIPELINE (pipeline/codeversion.py) if it changes a "
                               "number a fit sees or reports, else to NOT_NUMERIC here")


def _source(module: str) -> str:
    return Path(importlib.util.find_spec(module).origin).read_text()


def _functions(source: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _insert_at(source: str, node: ast.FunctionDef | ast.AsyncFunctionDef, text: str) -> str:
    """``source`` with the line ``text`` inserted in the body of ``node``, before its first
    statement that is not the docstring (or after the docstring where that is all)."""
    body = node.body
    first = body[1] if (len(body) > 1 and isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant)) else body[0]
    lines = source.splitlines(keepends=True)
    if first.lineno == node.lineno:  # a one-line def: the edit goes on its own line
        raise AssertionError(f"{node.name}: one-line function, edit it by hand")
    indent = " " * first.col_offset
    at = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])])
    lines.insert(at - 1, f"{indent}{text}\n")
    return "".join(lines)


def _with_source(monkeypatch, tmp_path: Path, module: str, source: str) -> None:
    """Make the code version read ``source`` for ``module`` (caches cleared)."""
    path = tmp_path / f"{module}.py"
    path.write_text(source)
    real = codeversion._source_file
    monkeypatch.setattr(codeversion, "_source_file",
                        lambda name: path if name == module else real(name))
    codeversion._module_tree.cache_clear()
    codeversion.code_version.cache_clear()


@pytest.fixture
def fresh_versions():
    codeversion._module_tree.cache_clear()
    codeversion.code_version.cache_clear()
    yield
    codeversion._module_tree.cache_clear()
    codeversion.code_version.cache_clear()


def _exact_config(tmp_path: Path) -> dict:
    return {"algorithm": {"name": "exact"}, "dataset": {"name": "sine1d", "n_train": 40,
            "n_test": 10}, "kernel": {"name": "rbf", "width": 1.0}, "lam": 0.1, "kappa": 59,
            "seed": 0, "store_root": str(tmp_path / "stores"), "threads": 1,
            "blocks": "memory"}


@pytest.mark.parametrize("module", NUMERIC_PIPELINE)
def test_a_number_changing_edit_of_any_function_of_a_numeric_pipeline_module_renames_jobs(
        module, tmp_path, monkeypatch, fresh_versions):
    """Each function of each NUMERIC_PIPELINE module, edited (a statement that can change a
    number: ``lam = 2.0 * lam``-like), changes the module's tree and so every job's hash; a
    comment and a docstring edit change neither."""
    source = _source(module)
    config = _exact_config(tmp_path)
    base_hash, base_version = config_hash(config), pipeline_version()
    base_tree = codeversion._module_tree.__wrapped__(module, ())[0]
    functions = _functions(source)
    assert functions, module
    for node in functions:
        edited = _insert_at(source, node, "_edited_scale = 2.0 * 1.0000001")
        _with_source(monkeypatch, tmp_path, module, edited)
        assert codeversion._module_tree.__wrapped__(module, ())[0] != base_tree, node.name
    # end to end, one edit: the version and every job's hash change
    _with_source(monkeypatch, tmp_path, module,
                 _insert_at(source, functions[-1], "_edited_scale = 2.0"))
    assert pipeline_version() != base_version
    assert config_hash(config) != base_hash
    # a comment and a docstring: nothing changes
    commented = _insert_at(source, functions[0], "# a comment only") + "\n# and another\n"
    commented = commented.replace('"""', '"""Edited docstring. ', 1)
    _with_source(monkeypatch, tmp_path, module, commented)
    assert pipeline_version() == base_version
    assert config_hash(config) == base_hash


def test_how_lam_reaches_the_fit_is_part_of_the_identity(tmp_path, monkeypatch, fresh_versions):
    """The audit's case: pipeline/job/run.py passing λ to the fit differently names new jobs."""
    source = _source("pipeline.job.run")
    assert source.count("lam=fit.lam, kappa=job.kappa") == 1
    config = _exact_config(tmp_path)
    base = config_hash(config)
    _with_source(monkeypatch, tmp_path, "pipeline.job.run",
                 source.replace("lam=fit.lam, kappa=job.kappa",
                                "lam=2 * fit.lam, kappa=job.kappa"))
    assert config_hash(config) != base


def test_the_learning_cache_follows_the_learning_code_only(tmp_path, monkeypatch,
                                                           fresh_versions):
    from pipeline.job.hyper import cache_key
    from pipeline.job.spec import JobSpec

    config = JobSpec.from_config({**_exact_config(tmp_path), "hyper": {"name": "ml"}})
    base = cache_key(config)
    for module in NUMERIC_PIPELINE:
        edited = _source(module) + "\n_edited = 2.0\n"
        _with_source(monkeypatch, tmp_path, module, edited)
        assert (cache_key(config) != base) == (module in LEARNING_PIPELINE), module
        monkeypatch.undo()
        codeversion._module_tree.cache_clear()
        codeversion.code_version.cache_clear()


def test_data_preparation_is_in_the_store_identity_and_reaches_jobs_by_content(
        tmp_path, monkeypatch, fresh_versions):
    """A dataset store's name holds its builder's code (an edit of the builder's module renames
    the store, a comment does not); a job holds the store's content, so a builder edit that
    changes a number renames the job, one that changes none does not."""
    spec = {"name": "sine1d", "n_train": 40, "n_test": 10}
    builder = DATASETS["sine1d"].build.__module__
    base_store = spec_hash(spec)
    source = _source(builder)
    _with_source(monkeypatch, tmp_path, builder, source + "\n_edited = 2.0\n")
    assert spec_hash(spec) != base_store
    _with_source(monkeypatch, tmp_path, builder, source + "\n# a comment\n")
    assert spec_hash(spec) == base_store
    monkeypatch.undo()

    config = _exact_config(tmp_path)
    base = config_hash(config)
    real = DATASETS["sine1d"]

    def scaled(norm):  # the builder with one number changed
        arrays, attrs = real.build(norm)
        return {**arrays, "y_train": arrays["y_train"] * 1.5}, attrs

    monkeypatch.setitem(DATASETS, "sine1d", type(real)(real.name, scaled, real.options,
                                                       real.train_shape, real.task))
    other = {**config, "store_root": str(tmp_path / "edited")}  # the edited code's store
    assert config_hash(other) != base
    monkeypatch.setitem(DATASETS, "sine1d", real)
    assert config_hash({**config, "store_root": str(tmp_path / "again")}) == base


def _copy_with_noops(dest: Path, edit: list[str], keep: tuple[str, ...] = ()) -> Path:
    """The product's packages copied to ``dest``, a no-op function appended to every module
    whose path (relative to the repository) starts with one of ``edit`` and is not one of
    ``keep`` (dotted module names)."""
    for package in ("algorithms", "pipeline", "hydra_plugins", "conf"):
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    touched = 0
    for path in dest.rglob("*.py"):
        rel = path.relative_to(dest).as_posix()
        module = rel.removesuffix(".py").replace("/", ".")
        if any(rel.startswith(prefix) for prefix in edit) and module not in keep:
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
    # every plumbing module of pipeline/ and hydra_plugins/ edited (all but NUMERIC_PIPELINE):
    # the finished sweep fits nothing
    plumbing = _copy_with_noops(tmp_path / "plumbing", edit=["pipeline/", "hydra_plugins/"],
                                keep=NUMERIC_PIPELINE)
    assert _counts(_sweep(work, plumbing)) == (3, 0)
    # algorithms/sgma.py edited: the sgma job runs again, exact and nystrom do not
    sgma = _copy_with_noops(tmp_path / "sgma", edit=["algorithms/sgma.py"])
    out = _sweep(work, sgma)
    assert _counts(out) == (2, 1), out
    # the sgma job's new code version names a new job; no job was ever fitted twice
    jobs = sorted((work / "outputs" / "ident" / "jobs").iterdir())
    assert [count_fits(job) for job in jobs] == [1, 1, 1, 1]
    # how λ reaches the fit (pipeline/job/run.py) edited: every job runs again
    run = tmp_path / "lam"
    _copy_with_noops(run, edit=["algorithms/sgma.py"])
    source = (run / "pipeline" / "job" / "run.py").read_text()
    (run / "pipeline" / "job" / "run.py").write_text(
        source.replace('lam=fit.lam, kappa=job.kappa', 'lam=2 * fit.lam, kappa=job.kappa'))
    assert _counts(_sweep(work, run)) == (0, 3)
