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

Parsing the modules is ~0.5 s of CPU a process, more than a tiny job's fit. Inside
:func:`cached_under` (a job, a sweep's planning) a version is kept in a sealed JSON file under
``<store_root>/code/`` with the sha256 of the bytes of every module it covers and whether each
name a ``from … import`` of those modules could mean is a module: a later process that finds
every one of them the same reuses the version (hashing the files' bytes is ~1 ms), any
difference computes it again. The entry is named by the modules asked for, the packages, the
Python version (``ast.dump`` differs between versions) and this module's own source; a damaged
or unreadable entry is computed again and rewritten, and one that cannot be written is left out.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

NUMERICS = ("algorithms",)  # the packages whose code computes a job's numbers


# The modules of pipeline/ whose code changes a number a fit sees or reports. A module that
# does (a formula, a default, how an option reaches the fit) belongs here, or in algorithms/;
# tests/test_identity.py checks that an edit of each reruns its jobs, and one of the rest none.
NUMERIC_PIPELINE = (
    "pipeline.job.run",  # how config and data reach the fit: λ, the seed, the learned kernel
    # and target offset, the certificate's settings, the baseline's metrics
    "pipeline.job.spec",  # a job's config completed, its protocol applied, made a JobSpec
    "pipeline.job.validate",  # the kernel, λ and options built from a job's config
    "pipeline.job.protocol",  # protocol=own: the options a method trains with
    "pipeline.config.records",  # a job's certificate, curve, device and profiling settings
    "pipeline.job.hyper",  # hyper=ml: the learning's starts and seed, the record a fit uses
    "pipeline.datasets.store",  # the arrays a fit and a learning read from a store
    "pipeline.datasets.small_store",  # and those of a small store, read without zarr
    "pipeline.blocks.store",  # a fit's kernel blocks over the store (blocks=memory)
    "pipeline.blocks.cluster",  # and over the cluster's workers (blocks=cluster)
    "pipeline.blocks.cluster_columns",  # the kernel columns a greedy fit grows there
    "pipeline.blocks.shards",  # the workers' share of those (projections, factor rows)
    "pipeline.results.job_file",  # how a fit's trace and summary are written to result.nc
)


# The part of those that a learning of hyperparameters (pipeline.job.hyper's cache) depends on
LEARNING_PIPELINE = ("pipeline.job.hyper", "pipeline.datasets.store",
                     "pipeline.datasets.small_store")


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


def _project_imports(tree: ast.AST, packages: tuple[str, ...],
                     looked_up: dict[str, bool] | None = None) -> set[str]:
    """Project modules a module imports (``from a.b import c`` gives a.b, and a.b.c if that is
    a module). ``looked_up`` gets each such a.b.c and whether it is a module."""
    out: set[str] = set()
    looked_up = {} if looked_up is None else looked_up
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if _within(alias.name, packages))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and _within(node.module, packages):
            out.add(node.module)
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                looked_up[name] = _source_file(name) is not None
                if looked_up[name]:
                    out.add(name)
    return out


def _source_text(raw: bytes) -> str:
    """``raw`` decoded as :meth:`Path.read_text` (UTF-8, universal newlines) decodes a file."""
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8").read()


@functools.cache
def _module_tree(module: str, packages: tuple[str, ...]
                 ) -> tuple[str, frozenset[str], tuple[tuple[str, bool], ...], str]:
    """(normalised syntax tree dump, project imports, the ``from … import`` names looked up
    and whether each is a module, sha256 of the source's bytes) of one module."""
    path = _source_file(module)
    if path is None:
        raise ValueError(f"no Python source for module {module!r}")
    raw = path.read_bytes()
    tree = ast.parse(_source_text(raw))
    looked_up: dict[str, bool] = {}
    imports = frozenset(_project_imports(tree, packages, looked_up))
    return (ast.dump(_strip_docstrings(tree), annotate_fields=False), imports,
            tuple(sorted(looked_up.items())), hashlib.sha256(raw).hexdigest())


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
    they import (kept under :func:`cached_under`'s directory, if any)."""
    directory = _CACHE.get()
    if directory is not None:
        cached = _cached_version(directory, modules, packages)
        if cached is not None:
            return cached
    h = hashlib.sha256()
    covered = closure(*modules, packages=packages)
    for module in covered:
        h.update(module.encode())
        h.update(_module_tree(module, packages)[0].encode())
    version = h.hexdigest()[:16]
    if directory is not None and _KEEP.get():
        _keep_version(directory, modules, packages, covered, version)
    return version


CACHE_DIR = "code"  # <store_root>/code/<entry>.json: code versions already computed
_CACHE: ContextVar[Path | None] = ContextVar("code_version_cache", default=None)
_KEEP: ContextVar[bool] = ContextVar("code_version_keep", default=True)


@contextlib.contextmanager
def cached_under(store_root: str | os.PathLike | None, keep: bool = True) -> Iterator[None]:
    """Within the block (this thread), :func:`code_version` keeps the versions it computes in
    ``<store_root>/code/`` and reuses those whose modules are unchanged; ``keep=False`` (a dry
    run) reuses them and writes none; ``None`` (or a value that is no path): no cache."""
    ok = isinstance(store_root, (str, os.PathLike)) and str(store_root).strip()
    token = _CACHE.set(Path(store_root).expanduser() / CACHE_DIR if ok else None)
    kept = _KEEP.set(keep)
    try:
        yield
    finally:
        _KEEP.reset(kept)
        _CACHE.reset(token)


@functools.cache
def _entry_key(modules: tuple[str, ...], packages: tuple[str, ...]) -> str:
    """What a cached version was computed for: the modules asked for, the packages, the
    Python version and this module's own source."""
    own = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return json.dumps({"modules": list(modules), "packages": list(packages),
                       "python": sys.version, "codeversion": own}, sort_keys=True)


def _entry_path(directory: Path, modules: tuple[str, ...], packages: tuple[str, ...]) -> Path:
    name = hashlib.sha256(_entry_key(modules, packages).encode()).hexdigest()[:32]
    return directory / f"{name}.json"


def _source_digest(module: str) -> str | None:
    path = _source_file(module)
    try:
        return None if path is None else hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _cached_version(directory: Path, modules: tuple[str, ...],
                    packages: tuple[str, ...]) -> str | None:
    """The kept version of ``modules`` if every module it covers has the bytes it had and
    every name looked up is still a module or not as it was; else None."""
    from pipeline.checksum import DamagedFile, open_sealed_json

    try:
        doc = open_sealed_json(_entry_path(directory, modules, packages).read_bytes())
    except (OSError, DamagedFile):
        return None
    sources, looked_up, version = doc.get("sources"), doc.get("looked_up"), doc.get("version")
    if (doc.get("key") != _entry_key(modules, packages) or not isinstance(sources, dict)
            or not isinstance(looked_up, dict) or not isinstance(version, str)
            or not set(modules) <= set(sources)
            or not all(isinstance(v, bool) for v in looked_up.values())):
        return None
    if any(_source_digest(module) != digest for module, digest in sources.items()):
        return None
    if any((_source_file(name) is not None) != is_module
           for name, is_module in looked_up.items()):
        return None
    return version


def _keep_version(directory: Path, modules: tuple[str, ...], packages: tuple[str, ...],
                  covered: list[str], version: str) -> None:
    """Write the entry :func:`_cached_version` reads (atomically); a failure leaves it out."""
    from pipeline.atomic import write_bytes
    from pipeline.checksum import seal_json

    trees = {module: _module_tree(module, packages) for module in covered}
    doc = {"key": _entry_key(modules, packages), "version": version,
           "sources": {module: tree[3] for module, tree in trees.items()},
           "looked_up": {name: is_module for tree in trees.values() for name, is_module in tree[2]}}
    with contextlib.suppress(OSError):
        directory.mkdir(parents=True, exist_ok=True)
        write_bytes(_entry_path(directory, modules, packages), seal_json(doc))


def pipeline_version(modules: tuple[str, ...] = NUMERIC_PIPELINE) -> str:
    """sha256 (16 hex) of the syntax trees of the ``pipeline/`` modules that change a job's
    numbers (:data:`NUMERIC_PIPELINE`), each alone (none of its imports)."""
    return code_version(*modules, packages=())
