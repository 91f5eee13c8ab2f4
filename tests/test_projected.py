import numpy as np
import pytest

from algorithms import Kernel, run
from algorithms.projected import (
    PREDICTORS,
    detaching_point,
    mercer_empirical,
    mercer_uniform,
    predictor_matrix,
    xbar_error,
)

MATERN = Kernel("matern32", {"mu": 0.1})


def composite_gauss(panels: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [0, 1], ``order`` nodes on each of ``panels`` equal
    panels (numpy's leggauss of one 6000-node rule costs ~13 s: an eigenproblem of that size)."""
    x, w = np.polynomial.legendre.leggauss(order)
    h = 1.0 / panels
    nodes = (np.arange(panels)[:, None] + (x + 1) / 2) * h
    return nodes.reshape(-1, 1), np.tile(w * h / 2, panels)


def test_mercer_uniform_orthonormal_and_solves_the_integral_equation():
    basis = mercer_uniform(MATERN, m=8, n_nodes=2000)
    fine_x, fine_w = composite_gauss(200, 30)  # 6000 nodes, independent of the basis's
    phi_fine = basis(fine_x)  # Nyström extension at independent nodes
    gram = phi_fine.T @ (fine_w[:, None] * phi_fine)
    np.testing.assert_allclose(gram, np.eye(8), atol=1e-6)
    x = np.linspace(0.013, 0.987, 25)[:, None]
    lhs = MATERN(x, fine_x) @ (fine_w[:, None] * phi_fine)  # ∫C(x,z)φ_i(z)dz
    np.testing.assert_allclose(lhs, basis(x) * basis.eigenvalues, atol=1e-6)
    assert np.all(np.diff(basis.eigenvalues) < 0) and basis.trace == pytest.approx(1.0)


def test_full_predictor_with_many_eigenfunctions_is_the_gp_mean():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(15, 1))
    t = np.sin(6 * x[:, 0]) + 0.1 * rng.normal(size=15)
    basis = mercer_uniform(MATERN, m=400, n_nodes=1500)
    Phi, lam = basis(x), basis.eigenvalues
    H = MATERN(x, x) + 0.1 * np.eye(15)
    x_new = np.linspace(0, 1, 9)[:, None]
    gp_mean = MATERN(x_new, x) @ np.linalg.solve(H, t)
    g = basis(x_new) @ predictor_matrix("finite_full", Phi, lam, H, 0.1) @ t
    np.testing.assert_allclose(g, gp_mean, atol=2e-3)


@pytest.mark.parametrize("name", PREDICTORS)
def test_lemma_4_matches_monte_carlo(name):
    rng = np.random.default_rng(1)
    sigma2, n, m = 1.0, 12, 5
    basis = mercer_uniform(MATERN, m=m, n_nodes=1500)
    x = rng.uniform(size=(n, 1))
    Phi, lam = basis(x), basis.eigenvalues
    H = MATERN(x, x) + sigma2 * np.eye(n)
    L = predictor_matrix(name, Phi, lam, H, sigma2)
    predicted = xbar_error(L, Phi, lam, H, basis.trace, sigma2)
    errors = []
    for _ in range(300):  # f ~ GP prior on x̄ ∪ x*, x* ~ U(0,1), noisy targets
        x_star = rng.uniform(size=(200, 1))
        Z = np.vstack([x, x_star])
        f = np.linalg.cholesky(MATERN(Z, Z) + 1e-10 * np.eye(len(Z))) @ rng.normal(size=len(Z))
        y = f + np.sqrt(sigma2) * rng.normal(size=len(Z))
        prediction = basis(x_star) @ L @ y[:n]
        errors.append(np.mean((y[n:] - prediction) ** 2))
    assert np.mean(errors) == pytest.approx(predicted, rel=0.05)


def test_empirical_basis_and_detaching_point():
    X = np.random.default_rng(2).uniform(size=(300, 1))
    empirical = mercer_empirical(MATERN, X, m=5)
    uniform = mercer_uniform(MATERN, m=5)
    np.testing.assert_allclose(empirical.eigenvalues, uniform.eigenvalues, rtol=0.1)
    assert detaching_point(uniform.eigenvalues, 1.0) == pytest.approx(1.0 / uniform.eigenvalues[-1])


@pytest.mark.parametrize("n", [5, 20, 60])
def test_bound_7_holds_for_the_mean_error_of_u_optimal(n):
    from algorithms.projected import bound7

    rng = np.random.default_rng(n)
    sigma2, m = 1.0, 5
    basis = mercer_uniform(MATERN, m=m, n_nodes=1500)
    lam = basis.eigenvalues
    errors = []
    for _ in range(200):  # generalisation error = mean of the x̄-error over draws of x̄
        x = rng.uniform(size=(n, 1))
        Phi = basis(x)
        H = MATERN(x, x) + sigma2 * np.eye(n)
        L = predictor_matrix("finite_diagonal", Phi, lam, H, sigma2)
        errors.append(xbar_error(L, Phi, lam, H, basis.trace, sigma2))
    assert np.mean(errors) <= bound7(lam, basis.trace, sigma2, n) + 1e-9
    assert bound7(lam, basis.trace, sigma2, n) < basis.trace + sigma2  # it says something


def test_predictors_through_the_contract(problem):
    blocks, y, X_test, y_test = problem
    exact = run("exact", blocks, y, lam=0.1)
    full = run("finite_full", blocks, y, lam=0.1, rng=np.random.default_rng(0),
               test=(X_test, y_test), m=60, n_nodes=60)
    np.testing.assert_allclose(full.predict(X_test), exact.predict(X_test), atol=1e-8)
    for name in PREDICTORS:
        fit = run(name, blocks, y, lam=0.1, rng=np.random.default_rng(0),
                  test=(X_test, y_test), m=5, n_nodes=40)
        s = fit.summary
        assert s["m"] == 5 and np.isfinite(s["xbar_error"]) and np.isfinite(s["test_rmse"])
        assert s["detaching_point"] == pytest.approx(0.1 / s["lambda_m"])


def test_recorded_bound_7_uses_the_diagonal_moments_of_a_nonstationary_kernel():
    """C(x,x) varies for the linear kernel, so c_k needs ∫C(x,x)φ_k²p, not Σλ_i."""
    from algorithms.projected import bound7, diag_moments
    from tests.conftest import make_problem

    blocks, y, _, _ = make_problem(kernel=Kernel("polynomial", {"c": 1.0, "degree": 2}))
    fit = run("finite_diagonal", blocks, y, lam=0.1, rng=np.random.default_rng(0), m=4,
              n_nodes=60)
    basis = mercer_empirical(blocks.kernel, blocks.inputs(slice(None)), 4)
    moments = diag_moments(basis)
    assert not np.allclose(moments, basis.trace)
    assert fit.summary["bound7_u_optimal"] == pytest.approx(
        bound7(basis.eigenvalues, basis.trace, 0.1, blocks.n, moments), rel=1e-9)
