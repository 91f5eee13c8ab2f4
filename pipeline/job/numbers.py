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

from collections.abc import Mapping
from typing import Any

from algorithms.options import Option


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _node(node: Any, floats: Mapping[str, Option] | set[str]) -> Any:
    """``node`` (a mapping) with its declared-float integers made floats; a copy only when one
    changes."""
    if not isinstance(node, Mapping):
        return node
    names = [k for k in floats if _is_int(node.get(k))
             and (not isinstance(floats, Mapping) or floats[k].kind == "float")]
    if not names:
        return node
    return {**node, **{k: float(node[k]) for k in names}}


def _group_options(config: Mapping) -> dict[str, Mapping[str, Option]]:
    """The declared options of the config's algorithm, kernel, hyper block and dataset (those
    whose name is known)."""
    from algorithms.errors import InputError
    from algorithms.kernels import KERNELS
    from algorithms.registry import get
    from pipeline.datasets.spec import DATASETS
    from pipeline.job.hyper import HYPER_OPTIONS

    out: dict[str, Mapping[str, Option]] = {"hyper": HYPER_OPTIONS}
    algorithm = config.get("algorithm")
    if isinstance(algorithm, Mapping) and isinstance(algorithm.get("name"), str):
        try:
            out["algorithm"] = get(algorithm["name"]).options
        except InputError:
            pass  # an unknown algorithm: its job reports it
    kernel = config.get("kernel")
    if isinstance(kernel, Mapping) and kernel.get("name") in KERNELS:
        out["kernel"] = KERNELS[kernel["name"]].params
    dataset = config.get("dataset")
    if isinstance(dataset, Mapping) and dataset.get("name") in DATASETS:
        out["dataset"] = DATASETS[dataset["name"]].options
    return out


def declared_floats(config: Mapping) -> dict:
    """``config`` (a job config, as a plain dict) with every integer that stands where a float
    is declared replaced by that float (module docstring); nodes that change are copied, so
    ``config`` itself is never modified."""
    from pipeline.config import job_defaults

    defaults = job_defaults()
    top = {k for k, v in defaults.items() if isinstance(v, float)}
    out = dict(_node(config, top))
    certificate = defaults.get("certificate")
    if isinstance(certificate, Mapping) and "certificate" in out:
        out["certificate"] = _node(out.get("certificate"),
                                   {k for k, v in certificate.items() if isinstance(v, float)})
    for group, options in _group_options(out).items():
        if group in out:
            out[group] = _node(out[group], options)
    return out
