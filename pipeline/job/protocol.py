"""Which hyperparameters a job fits with: the shared ones, or those its method learns itself.

``protocol=shared`` (the default): every method fits at the configured kernel and ``lam``, or
at the one kernel and σ² that ``hyper=ml`` learned for the dataset and split; comparing
methods then isolates their approximations.

``protocol=own``: each method learns as its users run it, its learning counted in its seconds:

- a method that learns by itself (a spec that declares ``own_protocol``: GPyTorch's SGPR
  trained by L-BFGS to convergence on Titsias' bound, SVGP by Adam stopped on held-out rows,
  scikit-learn's GPR by its optimiser and restarts) runs with those option values, from the
  kernel and σ² that ``hyper=ml`` learned for the dataset and split (the shared mode's
  learning, computed once for both modes) and, where its ``starts`` option says so, from the
  median heuristic too, the best final objective kept (:mod:`algorithms.gpytorch_peers`);
- a method that learns by ``hyper=ml`` in another form (a spec that declares ``own_hyper``:
  our low-rank methods with a basis size ``max_basis`` = m) gets that form: its kernel learned
  on every training row by Titsias' bound with a basis of m pivoted-Cholesky rows
  (``hyper.method=lowrank``, ``hyper.basis`` = m, :func:`algorithms.contract.lowrank_own_hyper`),
  the bound SGPR trains on, so SGPR and Nyström or SGMA at equal m compare like for like. Like
  the peers, it starts from the median heuristic and from the shared learning's kernel and σ²
  (``hyper.shared_start`` holds the shared block's form; the best bound is kept: from the
  median start alone the bound ends at white noise on kin40k and pumadyn32nm at m = 128). The
  learning is cached per dataset, split and basis size (:func:`pipeline.job.hyper.cache_key`
  hashes the hyper block), shared by every such job at that m;
- a method that declares neither (the exact GP, CG: the reference's protocol is the shared
  one), and any method under ``hyper=fixed`` (nothing is learned), runs the shared job: its
  ``protocol=own`` job is rewritten to ``protocol=shared``, the same job (computed once in a
  sweep over both).

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
from pipeline.job.hyper import HYPER_OPTIONS
from pipeline.job.identity import spec_or_none

PROTOCOLS = ("shared", "own")


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
    learns = dict(config["hyper"]).get("name") == "ml"
    if spec.own_protocol is not None:  # its own training, from the shared learned kernel
        config["algorithm"] = {**config["algorithm"], **spec.own_protocol, **caps}
    elif spec.own_hyper is not None and learns:  # hyper=ml in its own form
        options = {**{k: o.default for k, o in spec.options.items()}, **config["algorithm"]}
        # on every row by the bound: no refinement stage of its own (the shared one's is kept
        # in the shared learning's form, below)
        hyper, own = dict(config["hyper"]), {"refine": None, **spec.own_hyper(options)}
        # the shared learning's form, kept as a further start (idempotent: set once)
        shared = hyper.get("shared_start") or {k: hyper.get(k, HYPER_OPTIONS[k].default)
                                               for k in own}
        config["hyper"] = {**hyper, **own, "shared_start": shared}
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
