"""The peers' own protocols (algorithms/gpytorch_peers.py, algorithms/inducing_init.py): SGPR
and SVGP stop by their convergence rules, a cap says so, greedy-variance inducing inputs are
the pivots of a pivoted Cholesky factorisation, and the best of two starts is kept."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algorithms import REGISTRY, ArrayKernelBlocks, Kernel, run
from algorithms.inducing_init import greedy_variance_rows, initial_inducing, nearest_rows
from algorithms.lowrank import PartialCholesky

LAM = 0.1
KERNEL = Kernel("rbf", {"width": 2.0, "variance": 1.0})


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=120)
    return X, y - y.mean()


def own(name: str, **caps) -> dict:
    """The spec's own-protocol options with ``caps`` on top."""
    return {**REGISTRY[name].own_protocol, **caps}


def test_greedy_variance_picks_the_pivoted_cholesky_rows():
    """Greedy conditional variance, written out densely (argmax of diag(K − K_:S K_SS⁻¹ K_S:),
    k(x, x) = v exactly: the first pick is a tie, the first row), equals the pivots of a
    pivoted Cholesky factorisation grown one pivot at a time."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    K = KERNEL(X, X)
    np.fill_diagonal(K, KERNEL.variance)
    chosen: list[int] = []
    for _ in range(15):
        if chosen:
            S = np.array(chosen)
            L = np.linalg.cholesky(K[np.ix_(S, S)])
            V = np.linalg.solve(L, K[S])
            residual = np.diag(K) - np.einsum("ij,ij->j", V, V)
        else:
            residual = np.diag(K).copy()
        residual[chosen] = -np.inf
        chosen.append(int(np.argmax(residual)))
    rows, pivots = greedy_variance_rows(X, KERNEL, 15, np.random.default_rng(1))
    assert pivots == 15 and rows.tolist() == chosen
    chol = PartialCholesky(ArrayKernelBlocks(X, KERNEL), 15)
    for _ in range(15):
        chol.add([chol.greedy_pivot()])
    assert chol.pivots == chosen
    Z, got, note = initial_inducing(X, KERNEL, 15, "greedy_variance", np.random.default_rng(1))
    np.testing.assert_array_equal(Z, X[chosen])
    assert got.tolist() == chosen and note == "15 rows by greedy variance"


def test_greedy_variance_pads_a_low_rank_kernel_with_random_rows():
    """Five distinct inputs repeated: five pivots, the other rows random and distinct."""
    X = np.repeat(np.random.default_rng(2).normal(size=(5, 2)), 4, axis=0)
    rows, pivots = greedy_variance_rows(X, KERNEL, 8, np.random.default_rng(0))
    assert pivots == 5 and len(set(rows.tolist())) == 8
    assert len({tuple(x) for x in X[rows[:5]]}) == 5


def test_kmeans_inducing_inputs_are_centres_with_their_nearest_rows(data):
    X, _ = data
    Z, rows, note = initial_inducing(X, KERNEL, 10, "kmeans", np.random.default_rng(0))
    assert Z.shape == (10, 2) and note == "10 k-means centres"
    dist = ((X[:, None, :] - Z[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(rows, dist.argmin(0))
    np.testing.assert_array_equal(nearest_rows(X, Z, block=7), rows)


def test_sgpr_trains_until_its_convergence_rule(data):
    """The own protocol (L-BFGS to scipy's ftol/gtol, greedy-variance inducing inputs) stops
    converged well below its cap; a cap of 2 iterations stops it unconverged, saying so."""
    X, y = data
    blocks = ArrayKernelBlocks(X, KERNEL)
    fit = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10,
              **own("gpytorch_sgpr", starts="given"))
    s = fit.summary
    print(f"\nSGPR own: {s['own_iterations']} iterations, {s['own_stop_reason']}, "
          f"{s['own_learning_seconds']:.2f} s")
    assert s["own_converged"] and s["own_stop_reason"] in ("relative_change", "gradient")
    assert 0 < s["own_iterations"] < REGISTRY["gpytorch_sgpr"].own_protocol["steps"]
    assert s["own_starts"] == 1 and s["own_best_start"] == "given"
    assert s["inducing_init"] == "10 rows by greedy variance"
    assert 0 < s["own_learning_seconds"] <= s["seconds"] and s["own_learning_cpu_seconds"] > 0
    assert s["stop_reason"].startswith("converged")
    capped = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10,
                 **own("gpytorch_sgpr", starts="given", steps=2)).summary
    assert not capped["own_converged"] and capped["own_stop_reason"] == "cap"
    assert capped["own_iterations"] == 2 and "(the cap)" in capped["stop_reason"]
    assert capped["elbo"] < s["elbo"]
    adam = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10, steps=3000,
               optimizer="adam", elbo_tol=1e-4, grad_tol=0.0).summary
    assert adam["own_converged"] and adam["own_stop_reason"] == "relative_change"


def test_the_best_of_two_starts_is_kept(data):
    """given+median: both starts trained, every start's bound recorded, the better one kept;
    each equals its single-start run (the median start's pairs are drawn before training)."""
    X, y = data
    bad = Kernel("rbf", {"width": 1e-4, "variance": 1e-3})  # a white-noise start
    blocks = ArrayKernelBlocks(X, bad)
    options = own("gpytorch_sgpr", steps=40)
    both = run("gpytorch_sgpr", blocks, y, lam=1.0, rng=4, max_basis=10, **options).summary
    scores = dict(part.split(": score ")[0:2] for part in both["own_start_summary"].split("; "))
    scores = {k: float(v.split(",")[0]) for k, v in scores.items()}
    assert both["own_starts"] == 2 and set(scores) == {"given", "median"}
    best = max(scores, key=scores.get)
    assert both["own_best_start"] == best and both["elbo"] == pytest.approx(scores[best])
    assert both["own_iterations_total"] >= both["own_iterations"]
    for label in ("given", "median"):
        one = run("gpytorch_sgpr", blocks, y, lam=1.0, rng=4, max_basis=10,
                  **{**options, "starts": label}).summary
        assert one["elbo"] == pytest.approx(scores[label], rel=1e-9), label
    print(f"\nstarts: {both['own_start_summary']}")
    assert best == "median" and scores["median"] > scores["given"]


def test_svgp_stops_on_its_held_out_rows(data):
    """Adam epochs stopped once the held-out NLPD stops improving: converged below the cap,
    the kept state the one with the best held-out NLPD (recomputed here from the predictor
    on the held-out rows, the first draw of the job's generator); not before ``min_steps``;
    a cap of 2 epochs says so."""
    X, y = data
    blocks = ArrayKernelBlocks(X, KERNEL)
    options = own("gpytorch_svgp", starts="given", batch_size=32, lr=0.05, patience=3,
                  heldout_tol=1e-3, holdout=0.2, epochs=400, min_steps=0)
    fit = run("gpytorch_svgp", blocks, y, lam=LAM, rng=5, max_basis=8, **options)
    s = fit.summary
    print(f"\nSVGP own: {s['own_iterations']} epochs, {s['own_stop_reason']}")
    assert s["own_converged"] and s["own_stop_reason"] == "no_improvement"
    assert 3 < s["own_iterations"] < 400 and s["epochs"] == s["own_iterations"]
    assert s["heldout_rows"] == 24
    held = np.sort(np.random.default_rng(5).permutation(len(y))[:24])
    prediction = fit.solution.predict(X[held])
    var = prediction.var
    nlpd = float(np.mean(0.5 * np.log(2 * math.pi * var)
                         + 0.5 * (y[held] - prediction.mean) ** 2 / var))
    traced = fit.trace["heldout_nlpd"]
    assert nlpd == pytest.approx(np.nanmin(traced), rel=1e-6)
    assert np.argmin(np.where(np.isnan(traced), np.inf, traced)) < len(traced) - 1
    later = run("gpytorch_svgp", blocks, y, lam=LAM, rng=5, max_basis=8,
                **{**options, "min_steps": 150}).summary  # not stopped before 150 steps
    assert later["own_converged"] and later["steps_run"] >= 150 > s["steps_run"]
    capped = run("gpytorch_svgp", blocks, y, lam=LAM, rng=5, max_basis=8,
                 **{**options, "epochs": 2}).summary
    assert not capped["own_converged"] and capped["own_stop_reason"] == "cap"
    assert capped["own_iterations"] == 2


def test_the_own_protocols_report_untrained_fits_as_such(data):
    X, y = data
    blocks = ArrayKernelBlocks(X, KERNEL)
    s = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10).summary
    assert s["own_stop_reason"] == "untrained" and s["own_learning_seconds"] == 0.0
    assert not s["own_converged"] and s["own_iterations"] == 0
