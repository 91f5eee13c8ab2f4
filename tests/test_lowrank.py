"""Nyström and pivoted incomplete Cholesky (004 §4.1, Table 1) against exact references:
scikit-learn's Nystroem + Ridge on the same landmarks, LAPACK's pivoted Cholesky (dpstrf),
the exact GP at full rank, and a dense computation of every traced quantity."""

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.linalg import lapack
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import Ridge

from algorithms import ArrayKernelBlocks, Kernel, run
from algorithms.errors import InputError
from algorithms.lowrank import LowRankSolve, PartialCholesky
from algorithms.objectives import dual_objective, primal_objective

LAM = 0.1


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(400, 3))
    y = np.sin(X).sum(axis=1) + 0.1 * rng.normal(size=400)
    X_test = rng.uniform(-2, 2, size=(80, 3))
    return X, y, X_test, np.sin(X_test).sum(axis=1)


@pytest.mark.parametrize("m", [8, 40, 150])
def test_nystrom_equals_sklearn_nystroem_ridge(data, m):
    X, y, X_test, y_test = data
    width = 2.0
    fit = run("nystrom", ArrayKernelBlocks(X, Kernel("rbf", {"width": width})), y, lam=LAM,
              rng=5, max_basis=m)
    S = fit.basis
    assert len(S) == m and fit.summary["n_dropped"] == 0
    features = Nystroem(kernel="rbf", gamma=1.0 / width, n_components=m).fit(X[S])
    ridge = Ridge(alpha=LAM, fit_intercept=False, solver="cholesky")
    ridge.fit(features.transform(X), y)
    reference = ridge.predict(features.transform(X_test))
    np.testing.assert_allclose(fit.predict(X_test), reference, rtol=0, atol=1e-8)
    print(f"\nnystrom m={m}: max |ours − sklearn| = "
          f"{np.abs(fit.predict(X_test) - reference).max():.2e}")


@pytest.mark.parametrize("algorithm", ["nystrom", "incomplete_cholesky"])
def test_all_points_equal_the_exact_gp(data, algorithm):
    X, y, X_test, y_test = data
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 2.0}))
    exact = run("exact", blocks, y, lam=LAM, test=(X_test, y_test))
    full = run(algorithm, blocks, y, lam=LAM, rng=0, max_basis=len(y), test=(X_test, y_test))
    assert full.summary["n_basis"] == len(y)
    np.testing.assert_allclose(full.predict(X_test), exact.predict(X_test), atol=1e-9)
    np.testing.assert_allclose(full.predict_var(X_test), exact.predict_var(X_test), rtol=1e-9)
    assert full.summary["objective"] == pytest.approx(exact.summary["objective"], rel=1e-10)
    assert full.summary["gap"] < 1e-10
    assert full.summary["residual_trace"] < 1e-10 * len(y)


@pytest.mark.parametrize("kernel", [Kernel("laplacian", {"omega": 1.0}),
                                    Kernel("matern32", {"mu": 0.5}),
                                    Kernel("polynomial", {"c": 1.0, "degree": 3})])
def test_incomplete_cholesky_matches_lapack_pivoted_cholesky(data, kernel):
    """Same pivots and factor columns as LAPACK's dpstrf (complete diagonal pivoting)."""
    X = data[0][:200]
    blocks = ArrayKernelBlocks(X, kernel)
    K = blocks.block(slice(None), slice(None))
    c, piv, rank, info = lapack.dpstrf(K.copy(), tol=-1, lower=1)
    piv -= 1
    chol = PartialCholesky(blocks, 60)
    while chol.t < min(60, rank) and (p := chol.greedy_pivot()) is not None:
        chol.add([p])
    t = chol.t
    assert t == min(60, rank)
    np.testing.assert_array_equal(chol.pivots, piv[:t])
    np.testing.assert_allclose(chol.factor()[piv], np.tril(c)[:, :t], atol=1e-12)


def test_incomplete_cholesky_trace_error_falls_to_zero(data):
    X, y, X_test, y_test = data
    blocks = ArrayKernelBlocks(X, Kernel("matern32", {"mu": 1.0}))
    fit = run("incomplete_cholesky", blocks, y, lam=LAM, max_basis=len(y),
              test=(X_test, y_test))
    residual = fit.trace["residual_trace"]
    assert len(residual) == len(y)
    assert (np.diff(residual) <= 1e-12 * residual[0]).all()  # non-increasing
    assert residual[-1] < 1e-10 * np.trace(blocks.block(slice(None), slice(None)))
    # the traced residual trace is tr(K − FFᵀ) of the dense matrices
    chol = PartialCholesky(blocks, 30)
    for _ in range(30):
        chol.add([chol.greedy_pivot()])
    K = blocks.block(slice(None), slice(None))
    F = chol.factor()
    assert chol.residual_trace() == pytest.approx(np.trace(K - F @ F.T), rel=1e-10)
    assert residual[29] == pytest.approx(chol.residual_trace(), rel=1e-12)


def test_incomplete_cholesky_stops_at_the_trace_tolerance(data):
    X, y = data[0], data[1]
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 2.0}))
    fit = run("incomplete_cholesky", blocks, y, lam=LAM, max_basis=len(y), tol=1e-3)
    residual = fit.trace["residual_trace"]
    assert residual[-1] <= 1e-3 * len(y) < residual[-2]
    assert "tol" in fit.summary["stop_reason"]


def test_traced_objectives_are_the_dense_ones(data):
    """L, L*, gap and the coefficients at every prefix equal dense solves on the pivots."""
    X, y = data[0][:150], data[1][:150]
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 1.0}))
    K = blocks.block(slice(None), slice(None))
    chol = PartialCholesky(blocks, 40, y)
    solve = LowRankSolve(chol, y, LAM)
    for size in (5, 17, 40):  # blocks of new pivots, as the Nyström method adds them
        chol.add(np.arange(chol.t, size) * 3)
        solve.update()
    L, L_dual = solve.objectives()
    for t in (5, 17, 40):
        P = np.asarray(chol.pivots[:t])
        K_P = K[:, P]
        coef = np.linalg.solve(LAM * K[np.ix_(P, P)] + K_P.T @ K_P, K_P.T @ y)  # 002 eq. 12
        alpha = np.zeros(len(y))
        alpha[P] = coef
        assert L[t - 1] == pytest.approx(primal_objective(K @ alpha, alpha, y, LAM), rel=1e-10)
        beta = np.zeros(len(y))
        beta[P] = np.linalg.solve(LAM * np.eye(t) + K[np.ix_(P, P)], y[P])
        assert L_dual[t - 1] == pytest.approx(dual_objective(K @ beta, beta, y, LAM),
                                              rel=1e-10)
        np.testing.assert_allclose(solve.coef(t)[1], coef, rtol=1e-8,
                                   atol=1e-10 * np.abs(coef).max())


def test_repeated_inputs_are_dropped_not_jittered(data):
    X, y = data[0][:100], data[1][:100]
    X2, y2 = np.vstack([X, X[:30]]), np.concatenate([y, y[:30]])
    blocks = ArrayKernelBlocks(X2, Kernel("rbf", {"width": 2.0}))
    fit = run("nystrom", blocks, y2, lam=LAM, rng=0, max_basis=100)
    assert fit.summary["n_basis"] == 100 and fit.summary["jitter"] == 0.0
    assert len(set(map(tuple, X2[fit.basis]))) == 100  # no input twice among the landmarks
    fit = run("nystrom", blocks, y2, lam=LAM, rng=0, max_basis=130)
    assert fit.summary["n_basis"] == 100 and fit.summary["n_dropped"] == 30
    assert "numerical rank 100" in fit.summary["stop_reason"]
    exact = run("exact", blocks, y2, lam=LAM)
    np.testing.assert_allclose(fit.predict(X), exact.predict(X), atol=1e-8)


def test_nystrom_trace_is_nested_over_basis_sizes(data):
    X, y, X_test, y_test = data
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 2.0}))
    fit = run("nystrom", blocks, y, lam=LAM, rng=3, max_basis=100, test=(X_test, y_test))
    np.testing.assert_array_equal(fit.trace["n_basis"], [8, 16, 32, 64, 100])
    assert np.isfinite(fit.trace["test_rmse"]).all()
    assert (np.diff(fit.trace["objective"]) < 0).all()  # nested spans: L decreases
    small = run("nystrom", blocks, y, lam=LAM, rng=3, max_basis=32, test=(X_test, y_test))
    np.testing.assert_array_equal(small.basis, fit.basis[:32])
    assert small.summary["test_rmse"] == pytest.approx(fit.trace["test_rmse"][2], rel=1e-10)


@pytest.mark.parametrize("algorithm", ["nystrom", "incomplete_cholesky"])
def test_max_basis_above_n_is_clipped_to_n_and_said(data, algorithm):
    X, y = data[0][:50], data[1][:50]
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 2.0}))
    above = run(algorithm, blocks, y, lam=LAM, max_basis=60)
    at_n = run(algorithm, blocks, y, lam=LAM, max_basis=50)
    assert above.summary["clipped_options"] == "algorithm.max_basis=60 clipped to n_train=50"
    assert "clipped_options" not in at_n.summary
    np.testing.assert_array_equal(above.basis, at_n.basis)
    np.testing.assert_array_equal(above.coef, at_n.coef)
    with pytest.raises(InputError, match="max_basis=0 is invalid"):
        run(algorithm, blocks, y, lam=LAM, max_basis=0)


def test_dtc_variance_is_the_dense_formula(data):
    X, y, X_test, _ = data
    kernel = Kernel("rbf", {"width": 2.0})
    fit = run("nystrom", ArrayKernelBlocks(X, kernel), y, lam=LAM, rng=1, max_basis=30)
    S = fit.basis
    K_SS, K_nS, K_tS = kernel(X[S], X[S]), kernel(X, X[S]), kernel(X_test, X[S])
    Q = K_tS @ np.linalg.solve(K_SS, K_tS.T)
    G = LAM * K_SS + K_nS.T @ K_nS
    var = (kernel.diag(X_test) - np.diag(Q) + LAM
           + LAM * np.einsum("ij,ji->i", K_tS, sla.solve(G, K_tS.T)))
    np.testing.assert_allclose(fit.predict_var(X_test), var, rtol=1e-8)
