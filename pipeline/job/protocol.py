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
"""

from __future__ import annotations

from algorithms.errors import InputError
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
    if protocol == "shared" or spec is None:
        return protocol
    if spec.own_protocol is None:  # it learns nothing itself: the shared job
        config["protocol"] = "shared"
        return "shared"
    config["algorithm"] = {**config["algorithm"], **spec.own_protocol}
    hyper = dict(config["hyper"])
    if hyper.get("name") == "ml":  # the first start only (algorithms.hyper, max_iter = 0)
        config["hyper"] = {**hyper, "restarts": 0, "max_iter": 0}
    return protocol
