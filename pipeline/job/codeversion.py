"""Versions of the code that computes a result, for the identity of jobs and dataset stores.

A cached result is only as good as the code that computed it. Rather than a version number that
every change must remember to bump, the version of a module is the sha256 of its *syntax tree*
(docstrings removed) together with that of every project module it imports, transitively. An
edit that can change a number (a formula, a default, a call) changes the version and reruns what
depends on it; a comment, a docstring or a reformatting does not. Only modules under the given
packages count (``algorithms`` for a job), so a change to SGMA's module does not rerun the exact
GP. Third-party libraries are not part of it (their versions are recorded in every result file).

Code of ``pipeline/`` that changes a number a fit sees or reports is part of a job's identity
too: the modules of :data:`NUMERIC_PIPELINE` (:func:`pipeline_version`), each hashed alone (what
they import under ``algorithms/`` is the algorithm's version's business, and the rest of
``pipeline/`` is plumbing: scheduling, reporting, logging, which never reruns a job). Data
preparation (``pipeline/datasets``' builders) reaches a job through its data's content instead:
the stored arrays' sha256 (:func:`pipeline.datasets.content_digest`), while the store's own
name covers the builder's code (:func:`pipeline.datasets.spec_hash`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from pathlib import Path

NUMERICS = ("algorithms",)  # the packages whose code computes a job's numbers


# The modules of pipeline/ whose code changes a number a fit sees or reports. A module that
# does (a formula, a default, how an option reaches the fit) belongs here, or in algorithms/;
# tests/test_identity.py checks that an edit of each reruns its jobs, and one of the rest none.
NUMERIC_PIPELINE = (
    "pipeline.job.run",  # how config and data reach the fit: λ, the seed, the learned kernel
    # and target offset, the certificate's settings, the baseline's metrics
    "pipeline.job.validate",  # the kernel, λ and options built from a job's config
    "pipeline.job.protocol",  # protocol=own: the options a method trains with
    "pipeline.job.hyper",  # hyper=ml: the learning's starts and seed, the record a fit uses
    "pipeline.datasets.store",  # the arrays a fit and a learning read from a store
    "pipeline.datasets.blocks",  # a fit's kernel blocks over the store (blocks=memory)
    "pipeline.cluster.blocks",  # and over the cluster's workers (blocks=cluster)
    "pipeline.cluster.shards",  # the workers' share of those (projections, factor rows)
    "pipeline.results.job_file",  # how a fit's trace and summary are written to result.nc
)


# The part of those that a learning of hyperparameters (pipeline.job.hyper's cache) depends on
LEARNING_PIPELINE = ("pipeline.job.hyper", "pipeline.datasets.store")


def _source_file(module: str) -> Path | None:
    """The source of a module, or of ``file:<path>`` (a module loaded from a file path)."""
    if module.startswith("file:"):
        return Path(module.removeprefix("file:"))
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _project_imports(tree: ast.AST, packages: tuple[str, ...]) -> set[str]:
    """Project modules a module imports (``from a.b import c`` gives a.b, and a.b.c if that is
    a module)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if _within(alias.name, packages))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and _within(node.module, packages):
            out.add(node.module)
            for alias in node.names:
                if _source_file(f"{node.module}.{alias.name}") is not None:
                    out.add(f"{node.module}.{alias.name}")
    return out


@functools.cache
def _module_tree(module: str, packages: tuple[str, ...]) -> tuple[str, frozenset[str]]:
    """(normalised syntax tree dump, project imports) of one module."""
    path = _source_file(module)
    if path is None:
        raise ValueError(f"no Python source for module {module!r}")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = frozenset(_project_imports(tree, packages))
    return ast.dump(_strip_docstrings(tree), annotate_fields=False), imports


def closure(*modules: str, packages: tuple[str, ...] = NUMERICS) -> list[str]:
    """The modules and every module under ``packages`` they import, transitively, sorted."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(_module_tree(module, packages)[1] - seen)
    return sorted(seen)


def module_of(fn) -> str:
    """The module defining ``fn``, as :func:`code_version` takes it (its name, or
    ``file:<path>`` for a module loaded from a file that is not importable by name)."""
    name = fn.__module__
    return name if _source_file(name) is not None else f"file:{fn.__code__.co_filename}"


@functools.cache
def code_version(*modules: str, packages: tuple[str, ...] = NUMERICS) -> str:
    """sha256 (16 hex) of the syntax trees of ``modules`` and the modules under ``packages``
    they import."""
    h = hashlib.sha256()
    for module in closure(*modules, packages=packages):
        h.update(module.encode())
        h.update(_module_tree(module, packages)[0].encode())
    return h.hexdigest()[:16]


def pipeline_version(modules: tuple[str, ...] = NUMERIC_PIPELINE) -> str:
    """sha256 (16 hex) of the syntax trees of the ``pipeline/`` modules that change a job's
    numbers (:data:`NUMERIC_PIPELINE`), each alone (none of its imports)."""
    return code_version(*modules, packages=())
