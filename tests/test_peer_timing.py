"""Every peer's recorded seconds cover the whole call a user makes to get predictions
(issue 85, item 4): each peer runs through the one evaluator (:func:`algorithms.run`) at a size
where the call takes about a second or more, and the wall time of that whole call is measured
around it. The summary's ``seconds`` (the fit and the method's own learning: ``fit_seconds`` +
``own_learning_seconds`` in the job table) must hold everything in it except the evaluator's
own test predictions, which it records beside them (``predict_mean_seconds``,
``predict_var_seconds``, ``predict_prob_seconds``); together they are the whole call.

GPyTorch builds its prediction caches lazily on the first predictive call (SGPR's
``mean_cache`` and ``covar_cache``: O(n·m²)); before the peers made that call inside their fit
(algorithms.peers.ready_at_last_step) an untrained SGPR at n = 20 000, m = 512 recorded 0.74 s
of a 4.0 s call. Each GPyTorch SGPR predictive call also recomputes k(X, Z) K_ZZ^{-1/2} over
every training row (O(n·m²) a call, whatever the test size): that part of the evaluator's
variance is recorded as ``predict_var_seconds``, about a tenth of an untrained fit."""

from __future__ import annotations

import time

import numpy as np
import pytest

from algorithms import REGISTRY, ArrayKernelBlocks, Kernel, run

KERNEL = Kernel("rbf", {"width": 2.0, "variance": 1.0})
PREDICT = ("predict_mean_seconds", "predict_var_seconds", "predict_prob_seconds")
CASES = [  # (peer, n_train, options): about 1–2 s a call on one core
    ("sklearn_gpr", 3500, {}),
    ("sklearn_gpr", 900, {"optimize": True}),
    ("sklearn_nystroem", 20000, {"max_basis": 768}),
    ("sklearn_gpc", 1500, {}),
    ("gpytorch_sgpr", 10000, {"max_basis": 512}),
    ("gpytorch_sgpr", 6000, {"max_basis": 256, "steps": 3}),
    ("gpytorch_svgp", 20000, {"max_basis": 256, "epochs": 2}),
]


def problem(n: int, classify: bool, n_test: int = 100, d: int = 4):
    rng = np.random.default_rng(0)
    X, X_test = rng.uniform(-2, 2, size=(n, d)), rng.uniform(-2, 2, size=(n_test, d))
    y = np.sin(X).sum(1) + 0.3 * rng.normal(size=n)
    y_test = np.sin(X_test).sum(1)
    if classify:
        y, y_test = np.where(y > 0, 1.0, -1.0), np.where(y_test > 0, 1.0, -1.0)
    return X, y, X_test, y_test


def test_every_peer_is_timed_here():
    """The cases below cover every peer in the registry (a spec that needs a library)."""
    peers = {name for name, spec in REGISTRY.items() if spec.fit.__module__.endswith("_peers")}
    assert peers == {peer for peer, _, _ in CASES}


@pytest.mark.slow
@pytest.mark.parametrize("peer,n,options", CASES, ids=[
    f"{peer}-{n}-{'-'.join(f'{k}={v}' for k, v in options.items())}" for peer, n, options in CASES])
def test_the_recorded_seconds_cover_the_whole_call(peer, n, options):
    classify = REGISTRY[peer].task == "classification"
    X, y, X_test, y_test = problem(60, classify)  # warm-up: imports, first calls
    small = {k: min(v, 10) if k == "max_basis" else v for k, v in options.items()}
    run(peer, ArrayKernelBlocks(X, KERNEL), y, lam=0.1, test=(X_test, y_test), **small)
    X, y, X_test, y_test = problem(n, classify)
    blocks = ArrayKernelBlocks(X, KERNEL)
    start = time.perf_counter()
    fit = run(peer, blocks, y, lam=0.1, rng=1, test=(X_test, y_test), **options)
    wall = time.perf_counter() - start
    s = fit.summary
    recorded = s["seconds"]
    predict = sum(s.get(key, 0.0) for key in PREDICT)
    print(f"\n{peer} n={n} {options}: whole call {wall:.3f} s, recorded {recorded:.3f} s "
          f"({recorded / wall:.3f}; own learning {s.get('own_learning_seconds', 0.0):.3f} s), "
          f"the evaluator's test predictions {predict:.3f} s; recorded + predictions "
          f"{(recorded + predict) / wall:.3f} of the call")
    assert recorded >= 0.9 * (wall - predict)
    assert recorded + predict >= 0.95 * wall
    assert s.get("own_learning_seconds", 0.0) <= recorded
