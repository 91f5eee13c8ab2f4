"""Which hyperparameters a job fits with: the shared ones, or those its method learns itself.

``protocol=shared`` (the default): every method fits at the configured kernel and ``lam``, or
at the one kernel and σ² that ``hyper=ml`` learned for the dataset and split; comparing
methods then isolates their approximations.

``protocol=own``: each method learns as its users run it, from the run's own start and never
from another method's learning (no warm start from the exact GP's kernel), its learning counted
in its seconds and held to the run's budget:

- a method that learns by itself (a spec that declares ``own_protocol``: GPyTorch's SGPR
  trained by L-BFGS to convergence on Titsias' bound, SVGP by Adam stopped on held-out rows,
  scikit-learn's GPR by its optimiser) runs with those option values from the run's first
  start: ``hyper=ml`` is evaluated at ``hyper.init`` and not optimised (``max_iter`` = 0, no
  restarts, no refinement; ``standard``: every length scale √(d/2), variance 1, σ² = ``lam``,
  from the input dimension alone, :func:`algorithms.hyper.standard_start`), and the method
  trains from that kernel and σ² (its ``starts`` = ``given``);
- a method that learns by ``hyper=ml`` in another form (a spec that declares ``own_hyper``:
  our low-rank methods with a basis size ``max_basis`` = m) gets that form: its kernel learned
  on every training row by Titsias' bound with a basis of m pivoted-Cholesky rows
  (``hyper.method=lowrank``, ``hyper.basis`` = m, :func:`algorithms.contract.lowrank_own_hyper`),
  the bound SGPR trains on, so SGPR and Nyström or SGMA at equal m compare like for like, from
  the same first start (``hyper.init``) and random restarts (``hyper.restarts``) as the
  reference's learning. The learning is cached per dataset, split and basis size
  (:func:`pipeline.job.hyper.cache_key` hashes the hyper block), shared by every such job at
  that m;
- a method that declares neither (the exact GP, CG: its own learning is ``hyper=ml`` itself,
  the shared mode's kernel), and any method under ``hyper=fixed`` (nothing is learned), runs
  the shared job: its ``protocol=own`` job is rewritten to ``protocol=shared``, the same job
  (computed once in a sweep over both).

``hyper.budget_seconds`` is the learning budget of every method alike: our learnings stop at
the end of the L-BFGS-B iteration past it (:func:`algorithms.hyper.learn`), and a method that
learns by itself gets it as its ``budget_seconds`` option (where it has one); either records
the stop reason ``budget``.

``own`` (a mapping, algorithm name → options) sets options on top of a method's own protocol,
the caps a run can afford, e.g. ``own={<algorithm>: {steps: 500}}`` for at most 500
iterations (the summary's ``own_stop_reason`` says ``cap`` where one was hit); it applies to
that method's ``protocol=own`` jobs only, and is part of a job's identity through the options
it sets (:mod:`pipeline.job.identity` leaves the mapping out).
"""

from __future__ import annotations

from collections.abc import Mapping

from algorithms.contract import AlgorithmSpec
from algorithms.errors import InputError
from algorithms.registry import REGISTRY
from pipeline.job.identity import spec_or_none

PROTOCOLS = ("shared", "own")
# the learning of a method that learns by itself: its start, evaluated and not optimised (the
# budget is the method's own, passed to it)
START_ONLY = {"max_iter": 0, "restarts": 0, "refine": None, "shared_start": None,
              "budget_seconds": None}


def apply_protocol(config: dict) -> str:
    """Rewrite ``config`` (a resolved job config, in place) for its ``protocol``; returns the
    protocol the job runs under. Idempotent: the sweep planner and the job both apply it."""
    protocol = config["protocol"]
    if protocol not in PROTOCOLS:
        raise InputError(f"protocol={protocol!r} must be one of {', '.join(PROTOCOLS)}; pass "
                         "protocol=shared (every method at one kernel) or protocol=own (each "
                         "method learns as it would alone)")
    spec = spec_or_none(config)
    caps = own_options(config["own"], spec)
    if protocol == "shared" or spec is None:
        return protocol
    hyper = dict(config["hyper"])
    learns = hyper.get("name") == "ml"
    budget = hyper.get("budget_seconds")
    if spec.own_protocol is not None:  # its own training, from the run's first start
        algorithm = {**config["algorithm"], **spec.own_protocol}
        if learns:  # the start evaluated, not learned: the method learns from there itself
            config["hyper"] = {**hyper, **START_ONLY}
            if "starts" in spec.options:
                algorithm["starts"] = "given"
        if budget is not None and "budget_seconds" in spec.options:
            algorithm["budget_seconds"] = float(budget)
        config["algorithm"] = {**algorithm, **caps}
    elif spec.own_hyper is not None and learns:  # hyper=ml in its own form
        options = {**{k: o.default for k, o in spec.options.items()}, **config["algorithm"]}
        # on every row by the bound, from the run's own starts: no refinement stage and no
        # start from another learning
        config["hyper"] = {**hyper, "refine": None, "shared_start": None,
                           **spec.own_hyper(options)}
    else:  # it learns nothing itself: the shared job
        config["protocol"] = "shared"
        return "shared"
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
