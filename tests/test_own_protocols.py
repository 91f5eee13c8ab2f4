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


# ----------------------------------------------------------------------------- one basis rule

@pytest.mark.parametrize("kernel", [KERNEL, Kernel("matern32", {"lengthscales": [0.5, 1.5],
                                                               "variance": 2.0})])
def test_greedy_variance_is_our_incomplete_cholesky_basis(data, kernel):
    """At one shared kernel and m, SGPR's and SVGP's ``inducing_init=greedy_variance`` start
    at exactly the rows our incomplete Cholesky pivots on (largest residual diagonal first,
    one pivot at a time), in the same order."""
    X, y = data
    blocks = ArrayKernelBlocks(X, kernel)
    m = 25
    ours = run("incomplete_cholesky", blocks, y, lam=LAM, max_basis=m).basis
    sgpr = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=m,
               inducing_init="greedy_variance")
    svgp = run("gpytorch_svgp", blocks, y, lam=LAM, rng=4, max_basis=m, epochs=0,
               inducing_init="greedy_variance")
    assert len(ours) == m
    np.testing.assert_array_equal(sgpr.basis, ours)
    np.testing.assert_array_equal(svgp.basis, ours)
    np.testing.assert_array_equal(sgpr.solution.X_basis, X[ours])  # untrained: Z = those rows


def test_greedy_variance_is_the_lowrank_learnings_basis(data):
    """``hyper.method=lowrank`` (our methods' own learning: Titsias's bound on a basis of m
    pivoted-Cholesky rows) chooses the same rows as greedy_variance at the same kernel and m
    (pivoted_basis pivots one at a time)."""
    from algorithms.marginal_likelihood_lowrank import pivoted_basis

    X, _ = data
    rows, _ = greedy_variance_rows(X, KERNEL, 25, np.random.default_rng(0))
    np.testing.assert_array_equal(pivoted_basis(X, KERNEL, 25), np.sort(rows))


# ----------------------------------------------------------------------------- budget_seconds

class FakeBudget:
    """``over_budget`` that says "past the budget" from its ``after``-th call on (with a budget
    set), so that a learning stops at a known iteration."""

    def __init__(self, after: int) -> None:
        self.after, self.calls = after, 0

    def __call__(self, clock, budget) -> bool:
        if budget is None:
            return False
        self.calls += 1
        return self.calls > self.after


def test_sgpr_stops_at_its_budget_in_the_current_state(data, monkeypatch):
    """budget_seconds: past it, SGPR ends at the end of the current L-BFGS iteration with the
    state it has (the same fit as a cap at that iteration), own_stop_reason budget, not
    converged; a tiny real budget stops it before its first iteration and begins no second
    start."""
    import algorithms.gpytorch_peers as peers

    X, y = data
    blocks = ArrayKernelBlocks(X, KERNEL)
    tiny = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10,
               **own("gpytorch_sgpr", budget_seconds=1e-9)).summary
    assert tiny["own_stop_reason"] == "budget" and not tiny["own_converged"]
    assert tiny["own_starts"] == 1 and tiny["own_iterations"] == 0
    assert tiny["own_start_summary"].endswith("median: not started (budget)")
    assert "budget_seconds=1e-09 passed after 0" in tiny["stop_reason"]
    monkeypatch.setattr(peers, "over_budget", FakeBudget(after=4))
    stopped = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10,
                  **own("gpytorch_sgpr", starts="given", budget_seconds=60.0))
    capped = run("gpytorch_sgpr", blocks, y, lam=LAM, rng=4, max_basis=10,
                 **own("gpytorch_sgpr", starts="given", steps=4))
    s = stopped.summary
    assert s["own_stop_reason"] == "budget" and not s["own_converged"]
    assert s["own_iterations"] == 4 == capped.summary["own_iterations"]
    assert s["elbo"] == capped.summary["elbo"]
    np.testing.assert_array_equal(stopped.coef, capped.coef)


def test_svgp_stops_at_its_budget_with_its_best_held_out_state(data, monkeypatch):
    """SVGP past its budget ends at the end of the current epoch, the best held-out state kept
    as when its cap stops it (the same fit as a cap of that many epochs)."""
    import algorithms.gpytorch_peers as peers

    X, y = data
    blocks = ArrayKernelBlocks(X, KERNEL)
    options = own("gpytorch_svgp", starts="given", batch_size=32, lr=0.05, holdout=0.2,
                  min_steps=0)
    tiny = run("gpytorch_svgp", blocks, y, lam=LAM, rng=5, max_basis=8,
               **{**options, "starts": "given+median", "budget_seconds": 1e-9}).summary
    assert tiny["own_stop_reason"] == "budget" and not tiny["own_converged"]
    assert tiny["own_iterations"] == 1 and tiny["own_starts"] == 1
    assert "median: not started (budget)" in tiny["own_start_summary"]
    monkeypatch.setattr(peers, "over_budget", FakeBudget(after=5))
    stopped = run("gpytorch_svgp", blocks, y, lam=LAM, rng=5, max_basis=8,
                  **{**options, "budget_seconds": 60.0})
    capped = run("gpytorch_svgp", blocks, y, lam=LAM, rng=5, max_basis=8,
                 **{**options, "epochs": 6})
    assert stopped.summary["own_stop_reason"] == "budget"
    assert stopped.summary["own_iterations"] == 6 == capped.summary["own_iterations"]
    assert capped.summary["own_stop_reason"] == "cap"
    np.testing.assert_array_equal(stopped.coef, capped.coef)
    assert "the best held-out state kept" in stopped.summary["stop_reason"]


def test_sklearn_gpr_stops_at_its_budget_after_the_current_iteration(data):
    """scikit-learn's GPR with budget_seconds: its L-BFGS-B stops at the end of the iteration
    in which the budget passed (scipy keeps the last iterate: the same kernel as L-BFGS-B
    with maxiter=1 through scikit-learn's callable optimizer), no restart or further start
    runs, own_stop_reason budget."""
    from scipy.optimize import minimize
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    X, y = data
    blocks = ArrayKernelBlocks(X, KERNEL)
    fit = run("sklearn_gpr", blocks, y, lam=LAM, rng=7, optimize=True, n_restarts=2,
              starts="given+median", budget_seconds=1e-9)
    s = fit.summary
    print(f"\nsklearn_gpr budget: {s['own_start_summary']}")
    assert s["own_stop_reason"] == "budget" and not s["own_converged"]
    assert s["own_iterations"] == 1 == s["own_iterations_total"]
    assert s["own_starts"] == 1 and s["own_best_start"] == "given"
    assert "`callback` raised `StopIteration`" in s["own_start_summary"]
    assert "2 restarts and 1 starts (median) not run" in s["own_start_summary"]

    def one_iteration(obj_func, initial_theta, bounds):
        res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds,
                       options={"maxiter": 1})
        return res.x, res.fun

    gpr = GaussianProcessRegressor(ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(LAM),
                                   alpha=1e-10, optimizer=one_iteration).fit(X, y)
    assert s["log_marginal_likelihood"] == pytest.approx(gpr.log_marginal_likelihood_value_,
                                                         rel=1e-12)
    assert fit.lam == pytest.approx(gpr.kernel_.k2.noise_level, rel=1e-12)
    free = run("sklearn_gpr", blocks, y, lam=LAM, rng=7, optimize=True).summary
    assert free["own_converged"] and free["own_stop_reason"] == "converged"
    assert free["own_iterations"] > 1
