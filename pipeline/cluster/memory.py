"""The memory of this machine and of a local cluster's workers, and Dask's settings as
importing distributed would set them (a sweep is planned without importing it)."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from dask.utils import parse_bytes


def worker_memory_limit(opts: Mapping) -> int:
    """The bytes each worker of a local cluster may use, from its validated options: a size,
    or ``auto``: this machine's memory shared equally among the ``n_workers`` workers (Dask's
    own ``auto`` shares it among the cores, so one worker on two cores would get half)."""
    if opts["memory_limit"] != "auto":
        return int(parse_bytes(opts["memory_limit"]))
    return int(memory_limit() // (opts["n_workers"] or os.cpu_count() or 1))


@functools.cache
def memory_limit() -> int:
    """Dask's ``distributed.system.MEMORY_LIMIT`` (this machine's memory, or its cgroup's or
    RSS rlimit's limit where lower). Planning a sweep does without importing distributed
    (~1 s of CPU; a dry run never does): its ``system`` module is then run alone."""
    module = sys.modules.get("distributed.system")
    if module is None:
        spec = importlib.util.find_spec("distributed")
        path = Path(spec.origin).with_name("system.py") if spec and spec.origin else None
        alone = path and importlib.util.spec_from_file_location("_distributed_system", path)
        if alone:
            module = importlib.util.module_from_spec(alone)
            alone.loader.exec_module(module)
        else:
            import distributed.system as module
    return int(module.MEMORY_LIMIT)


def distributed_setting(key: str):
    """Dask's setting ``key`` with distributed's defaults under the user's configuration, as
    importing distributed sets them; before that import (planning a sweep), what its
    :mod:`distributed.config` does is done here instead of importing it."""
    import dask.config

    if "distributed.config" not in sys.modules and not _DISTRIBUTED_DEFAULTS \
            and not _distributed_defaults():
        import distributed.config  # noqa: F401
    return dask.config.get(key)


_DISTRIBUTED_DEFAULTS: list[bool] = []


def _distributed_defaults() -> bool:
    """What :mod:`distributed.config` does to Dask's configuration (its ``distributed.yaml``
    added as defaults under the user's settings, the keys of its ``deprecations`` renamed),
    read from its files; False (nothing done) where they are not as expected."""
    import ast

    import dask.config
    import yaml

    spec = importlib.util.find_spec("distributed")
    if spec is None or spec.origin is None:
        return False
    try:
        defaults = yaml.safe_load(Path(spec.origin).with_name("distributed.yaml").read_text())
        tree = ast.parse(Path(spec.origin).with_name("config.py").read_text())
        found = [ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign)
                 and [getattr(t, "id", None) for t in node.targets] == ["deprecations"]]
    except (OSError, SyntaxError, ValueError, yaml.YAMLError):
        return False
    if not isinstance(defaults, dict) or len(found) != 1 or not isinstance(found[0], dict):
        return False
    dask.config.update_defaults(defaults)
    dask.config.rename(found[0])
    dask.config.deprecations.update(found[0])
    _DISTRIBUTED_DEFAULTS.append(True)
    return True
