"""Laplacian processes (004 §5, algorithms/laplacian_process.py): the Gaussian-noise QP equals
scikit-learn's Lasso and the Laplacian-noise LP its median QuantileRegressor on the features K,
the MAP is sparse, the error bars follow eqs. 110-112, and bad options are one-line errors."""

import warnings

import numpy as np
import pytest

from algorithms import Kernel, run
from algorithms.errors import InputError, TooLarge
from tests.conftest import make_problem

KERNEL = Kernel("rbf", {"width": 2.0})


def theta_of(fit, n):
    """The full coefficient vector θ (zeros off the basis)."""
    theta = np.zeros(n)
    theta[fit.basis] = fit.coef
    return theta


def gram(blocks):
    return blocks.block(slice(None), slice(None))


def test_gaussian_noise_equals_lasso_on_kernel_features():
    """½σ⁻²‖y − Kθ‖² + ‖θ‖₁ times σ²/n is scikit-learn's Lasso objective
    (1/(2n))‖y − Kθ‖² + α‖θ‖₁ with α = σ²/n: same minimiser."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import Lasso

    n, lam = 100, 0.1
    blocks, y, X_test, _ = make_problem(n=n, kernel=KERNEL)
    K = gram(blocks)
    fit = run("laplacian_process", blocks, y, lam=lam)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the reference must converge
        lasso = Lasso(alpha=lam / n, fit_intercept=False, tol=1e-14, max_iter=10**6).fit(K, y)
    theta = theta_of(fit, n)
    np.testing.assert_array_equal(theta != 0, lasso.coef_ != 0)  # the same support
    np.testing.assert_allclose(theta, lasso.coef_, rtol=0, atol=1e-6)
    pred_lasso = blocks.cross(X_test, slice(None)) @ lasso.coef_
    np.testing.assert_allclose(fit.predict(X_test), pred_lasso, rtol=0, atol=1e-6)

    def objective(t):
        return 0.5 * np.sum((y - K @ t) ** 2) / lam + np.abs(t).sum()

    assert fit.summary["objective"] == pytest.approx(objective(theta), rel=1e-12)
    assert objective(theta) <= objective(lasso.coef_) * (1 + 1e-12)  # nothing lower found
    assert fit.summary["kkt_violation"] < 1e-8 and fit.summary["gap"] < 1e-10


@pytest.mark.parametrize("noise_scale", [None, 0.3])
def test_laplacian_noise_equals_median_quantile_regression(noise_scale):
    """Σ|y − Kθ|/b + ‖θ‖₁ times b/(2n) is scikit-learn's QuantileRegressor objective at the
    median, (1/n)Σ ½|y − Kθ| + α‖θ‖₁, with α = b/(2n) (b = √(lam/2) by default). An LP can have
    tied optima, so the objective values are compared (1e-8 relative, HiGHS' tolerances) as well
    as the predictions; on this problem the vertices coincide."""
    from sklearn.linear_model import QuantileRegressor

    n, lam = 120, 0.1
    blocks, y, X_test, _ = make_problem(n=n, kernel=KERNEL)
    K = gram(blocks)
    fit = run("laplacian_process", blocks, y, lam=lam, noise="laplacian",
              noise_scale=noise_scale)
    b = np.sqrt(lam / 2) if noise_scale is None else noise_scale
    assert fit.summary["noise_scale"] == pytest.approx(b, rel=1e-15)
    quantile = QuantileRegressor(quantile=0.5, alpha=b / (2 * n), fit_intercept=False,
                                 solver="highs").fit(K, y)

    def objective(t):
        return np.abs(y - K @ t).sum() / b + np.abs(t).sum()

    theta = theta_of(fit, n)
    assert objective(theta) == pytest.approx(objective(quantile.coef_), rel=1e-8)
    assert fit.summary["objective"] == pytest.approx(objective(theta), rel=1e-12)
    pred_quantile = blocks.cross(X_test, slice(None)) @ quantile.coef_
    np.testing.assert_allclose(fit.predict(X_test), pred_quantile, rtol=0, atol=1e-6)
    assert 0 <= fit.summary["gap"] < 1e-6
    assert fit.predict_var(X_test) is None and "test_nlpd" in fit.not_applicable


@pytest.mark.parametrize("noise", ["gaussian", "laplacian"])
def test_the_map_is_sparse(noise):
    """n = 200 noisy points of a smooth function: the ℓ1 prior keeps under a quarter of the
    n kernel functions (44 and 47 measured), every kept coefficient non-zero."""
    n = 200
    blocks, y, X_test, y_test = make_problem(n=n, kernel=KERNEL)
    fit = run("laplacian_process", blocks, y, lam=0.1, noise=noise, test=(X_test, y_test))
    m = fit.summary["n_basis"]
    assert 0 < m < n / 4 and len(fit.basis) == len(fit.coef) == m
    assert np.all(fit.coef != 0) and len(np.unique(fit.basis)) == m
    assert fit.trace["n_basis"][-1] == m
    assert fit.summary["test_rmse"] < np.std(y_test)  # and it predicts


def test_no_data_term_strong_enough_gives_the_empty_expansion():
    """‖Kᵀy‖∞ ≤ σ² is the optimality condition of θ = 0: no basis, error bars σ²."""
    blocks, y, X_test, y_test = make_problem(n=40, kernel=KERNEL)
    y_small = 1e-3 * y / np.abs(gram(blocks) @ y).max()
    fit = run("laplacian_process", blocks, y_small, lam=0.01, test=(X_test, y_test))
    assert fit.summary["n_basis"] == 0 and len(fit.coef) == 0
    np.testing.assert_array_equal(fit.predict(X_test), 0.0)
    np.testing.assert_array_equal(fit.predict_var(X_test), 0.01)


def test_error_bars_follow_eqs_110_to_112():
    """Eq. 110 (θ_MAP,i = 0 dropped, |θ_i| → s_iθ_i) is a Gaussian in θ_M with precision
    K_MᵀK_M/σ²: the variance of y at x is σ²(1 + k_Mᵀ(K_MᵀK_M)⁻¹k_M), evaluated here densely
    with an explicit inverse. Its mean (K_MᵀK_M)⁻¹(K_Mᵀy − σ²s) is the MAP θ_M itself (the
    printed eq. 111's +σ²s is not). Limits: on the training inputs the excess variance
    var/σ² − 1 is the leverage of the projection onto span K_M, whose trace is M = |basis|;
    far from the data k_M → 0 and the error bar falls to σ²."""
    n, lam = 40, 0.05
    blocks, y, X_test, _ = make_problem(n=n, n_test=15, kernel=KERNEL)
    fit = run("laplacian_process", blocks, y, lam=lam)
    K_M = blocks.block(slice(None), fit.basis)
    s = np.sign(fit.coef)
    inverse = np.linalg.inv(K_M.T @ K_M)
    k_M = blocks.cross(X_test, fit.basis)
    direct = lam + lam * np.einsum("ij,jk,ik->i", k_M, inverse, k_M)
    lower, upper = fit.variance_bounds(X_test)
    np.testing.assert_array_equal(lower, upper)
    np.testing.assert_allclose(upper, direct, rtol=1e-9)
    np.testing.assert_allclose(inverse @ (K_M.T @ y - lam * s), fit.coef, rtol=1e-8)
    assert not np.allclose(inverse @ (K_M.T @ y + lam * s), fit.coef, rtol=1e-3)
    var_train = fit.predict_var(blocks.inputs(slice(None)))
    assert np.sum(var_train / lam - 1) == pytest.approx(len(fit.basis), rel=1e-9)
    far = blocks.inputs(slice(0, 3)) + 1e3
    np.testing.assert_allclose(fit.predict_var(far), lam, rtol=1e-12)


@pytest.mark.parametrize("options, bad", [
    ({"noise": "student"}, "noise"),
    ({"noise": "laplacian", "noise_scale": 0.0}, "noise_scale"),
    ({"noise": "laplacian", "noise_scale": -1.0}, "noise_scale"),
    ({"noise": "laplacian", "noise_scale": float("nan")}, "noise_scale"),
    ({"noise": "laplacian", "noise_scale": "wide"}, "noise_scale"),
    ({"noise_scale": 0.5}, "noise_scale=0.5 applies only to algorithm.noise=laplacian"),
])
def test_bad_options_are_one_line_errors(options, bad):
    blocks, y, _, _ = make_problem(n=20, kernel=KERNEL)
    with pytest.raises(InputError) as err:
        run("laplacian_process", blocks, y, lam=0.1, **options)
    message = str(err.value)
    assert bad in message and "\n" not in message


def test_large_n_is_refused_before_the_fit():
    blocks, y, _, _ = make_problem(n=30, kernel=KERNEL)
    with pytest.raises(TooLarge, match="max_n=20"):
        run("laplacian_process", blocks, y, lam=0.1, max_n=20)
