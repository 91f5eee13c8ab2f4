"""Which hyperparameters a job fits with: the shared ones, or those its method learns itself.

``protocol=shared`` (the default): every method fits at the configured kernel and ``lam``, or
at the one kernel and σ² that ``hyper=ml`` learned for the dataset; comparing methods then
isolates their approximations. ``protocol=own``: a method that learns its hyperparameters
itself as its users run it (a spec that declares ``own_protocol``: GPyTorch's SGPR trained to
convergence, SVGP trained with its kernel, scikit-learn's GPR with its optimiser and restarts)
runs with those option values, from the first start of ``hyper=ml`` (the median-heuristic
kernel, σ² = ``lam``, the targets' mean as prior mean) evaluated but not optimised, so the
method's own training is the only learning it gets and its cost is its fit's. For a method
that learns nothing itself its own protocol is the shared one: its ``protocol=own`` job is
rewritten to ``protocol=shared``, the same job (computed once in a sweep over both).

``own`` (a mapping, algorithm name → options) sets options on top of a method's own protocol,
the caps a run can afford, e.g. ``own={<algorithm>: {steps: 50}}`` for at most 50
iterations; it applies to that method's ``protocol=own`` jobs only, and is part of a job's
identity through the options it sets (:mod:`pipeline.job.identity` leaves the mapping out).
"""

from __future__ import annotations

from collections.abc import Mapping

from algorithms.contract import AlgorithmSpec
from algorithms.errors import InputError
from algorithms.registry import REGISTRY
from pipeline.job.identity import _spec_or_none

PROTOCOLS = ("shared", "own")


def apply_protocol(config: dict) -> str:
    """Rewrite ``config`` (a resolved job config, in place) for its ``protocol``; returns the
    protocol the job runs under. Idempotent: the sweep planner and the job both apply it."""
    protocol = config["protocol"]
    if protocol not in PROTOCOLS:
        raise InputError(f"protocol={protocol!r} must be one of {', '.join(PROTOCOLS)}; pass "
                         "protocol=shared (every method at one kernel) or protocol=own (each "
                         "method learns as it would alone)")
    spec = _spec_or_none(config)
    caps = own_options(config["own"], spec)
    if protocol == "shared" or spec is None:
        return protocol
    if spec.own_protocol is None:  # it learns nothing itself: the shared job
        config["protocol"] = "shared"
        return "shared"
    config["algorithm"] = {**config["algorithm"], **spec.own_protocol, **caps}
    hyper = dict(config["hyper"])
    if hyper.get("name") == "ml":  # the first start only (algorithms.hyper, max_iter = 0)
        config["hyper"] = {**hyper, "restarts": 0, "max_iter": 0}
    return protocol


def own_options(own: Mapping | None, spec: AlgorithmSpec | None) -> dict:
    """The options ``own`` sets on ``spec``'s own protocol ({} when it names none); raises
    :class:`InputError` for a mapping that names an unknown algorithm, an algorithm without
    an own protocol, or an option the algorithm does not take."""
    if own is None:
        return {}
    if not isinstance(own, Mapping):
        raise InputError(f"own={own!r} must map an algorithm to options of its own protocol; "
                         "pass e.g. 'own={<algorithm>: {<option>: <value>}}'")
    for name, options in own.items():
        peer = REGISTRY.get(name)
        if peer is None or peer.own_protocol is None:
            learners = ", ".join(sorted(n for n, s in REGISTRY.items() if s.own_protocol))
            what = "no such algorithm" if peer is None else f"{name} learns nothing itself"
            raise InputError(f"own.{name}: {what}; own names an algorithm with its own "
                             f"protocol: {learners}")
        if not isinstance(options, Mapping):
            raise InputError(f"own.{name}={options!r} must map options to values; pass e.g. "
                             f"'own={{{name}: {{{next(iter(peer.own_protocol))}: ...}}}}'")
        unknown = sorted(set(options) - set(peer.options))
        if unknown:
            raise InputError(f"own.{name}.{unknown[0]}: {name} has no option {unknown[0]!r}; "
                             f"its options: {', '.join(sorted(peer.options))}")
    return dict(own[spec.name]) if spec is not None and spec.name in own else {}
