"""One spelling per number: an integer given where a float is declared is made that float.

``kernel.width=10`` and the yaml's ``width: 10.0`` (or ``lam=1`` and ``lam=1.0``) describe the
same fit, but Hydra parses them to an int and a float: hashed as given they would be two jobs
(one computed twice) whose coordinates compare equal, so consolidation would file one result
over the other. :func:`declared_floats` runs before a job is named and before its coordinates
are taken, so both spellings are one job and one point. What is declared a float: the
options of the algorithm, the kernel, the ``hyper`` block and the dataset (their
:class:`~algorithms.options.Option` tables), and the top-level keys and ``certificate`` keys
whose value in ``conf/config.yaml`` is a float (``lam``, ``certificate.tol``). Numbers are
changed in type only, never in value; a config that names an unknown algorithm, kernel or
dataset is returned as it is (its job reports that).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any

from algorithms.errors import InputError
from algorithms.kernels import KERNELS
from algorithms.options import Option
from algorithms.registry import get
from pipeline.config import job_defaults
from pipeline.datasets.spec import DATASETS
from pipeline.job.hyper import HYPER_OPTIONS


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def coordinate_text(value: Any) -> str:
    """A coordinate value as comparable text: a number as its float (``10`` and ``10.0`` are one
    value, also for a key nothing declares), anything else as ``str``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return str(float(value)) if number else str(value)


def _floats(options: Mapping[str, Option]) -> set[str]:
    """The names of ``options`` declared ``float``."""
    return {name for name, option in options.items() if option.kind == "float"}


def _node(node: Any, floats: Collection[str]) -> Any:
    """``node`` (a mapping) with the integers of its keys in ``floats`` made floats; a copy
    only when one changes."""
    if not isinstance(node, Mapping):
        return node
    names = [k for k in floats if _is_int(node.get(k))]
    if not names:
        return node
    return {**node, **{k: float(node[k]) for k in names}}


@functools.cache
def _yaml_floats() -> tuple[frozenset[str], frozenset[str]]:
    """The top-level and ``certificate`` keys whose value in ``conf/config.yaml`` is a float."""
    defaults = job_defaults()
    certificate = defaults.get("certificate")
    return (frozenset(k for k, v in defaults.items() if isinstance(v, float)),
            frozenset(k for k, v in certificate.items() if isinstance(v, float))
            if isinstance(certificate, Mapping) else frozenset())


def _group_floats(config: Mapping) -> dict[str, set[str]]:
    """The keys declared float of the config's algorithm, kernel, hyper block and dataset
    (those whose name is known)."""
    out = {"hyper": _floats(HYPER_OPTIONS)}
    algorithm = config.get("algorithm")
    if isinstance(algorithm, Mapping) and isinstance(algorithm.get("name"), str):
        try:
            out["algorithm"] = _floats(get(algorithm["name"]).options)
        except InputError:
            pass  # an unknown algorithm: its job reports it
    kernel = config.get("kernel")
    if isinstance(kernel, Mapping) and kernel.get("name") in KERNELS:
        out["kernel"] = _floats(KERNELS[kernel["name"]].params)
    dataset = config.get("dataset")
    if isinstance(dataset, Mapping) and dataset.get("name") in DATASETS:
        out["dataset"] = _floats(DATASETS[dataset["name"]].options)
    return out


def declared_floats(config: Mapping) -> dict:
    """``config`` (a job config, as a plain dict) with every integer that stands where a float
    is declared replaced by that float (module docstring); nodes that change are copied, so
    ``config`` itself is never modified."""
    top, certificate = _yaml_floats()
    out = dict(_node(config, top))
    if "certificate" in out:
        out["certificate"] = _node(out["certificate"], certificate)
    for group, floats in _group_floats(out).items():
        if group in out:
            out[group] = _node(out[group], floats)
    return out
