"""Relevance vector regression (algorithms/rvm.py): scikit-learn's ARDRegression on the kernel
columns as the reference, the pruning trace, the GP closed form of the fitted model, and bad
options."""

import numpy as np
import pytest
from sklearn.linear_model import ARDRegression

import algorithms.rvm as rvm
from algorithms import ArrayKernelBlocks, InputError, Kernel, run
from algorithms.errors import TooLarge
from tests.conftest import make_problem

THRESHOLD = 1e4
EPS = np.finfo(np.float64).eps


def sine_problem(n=100, seed=0):
    """A smooth 1-d function with noise variance 0.01."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    X_test = np.linspace(-3.2, 3.2, 57)[:, None]
    return ArrayKernelBlocks(X, Kernel("rbf", {"width": 0.5})), y, X_test


PROBLEMS = {
    "sine": sine_problem,
    # d = 3, n = 150: ≈ 200 iterations from 150 to 24 relevance vectors, so the two procedures
    # must agree along a long path of pruning decisions, not only a short one
    "conftest": lambda: make_problem(n=150, d=3)[:3],
}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_equals_sklearn_ard_regression_on_the_kernel_columns(name):
    blocks, y, X_test = PROBLEMS[name]()
    K = blocks.block(slice(None), slice(None))
    # Same starting point: ARDRegression starts from lambda_ = 1 (our s_i = 1, INITIAL_PRECISION)
    # and alpha_ = 1/(var(y) + eps), i.e. σ² = var(y) + eps, passed here as lam. Both then
    # alternate the same steps (posterior; s_i and σ² re-estimated from the same γ with
    # n − Σγ; prune s_i ≥ threshold), so the paths agree up to round-off (scikit-learn uses
    # pinvh, we use Cholesky). The stopping rules differ (scikit-learn: L1 change of coef_ < tol;
    # ours: max |Δ log s_i|, |Δ log σ²| < tol); both are run to the fixed point with a tight tol
    # (scikit-learn's 1e-12 no longer moves its answer, and 1e-14 is below its round-off: it
    # never stops) and scikit-learn recomputes its posterior after the last update, as ours is.
    ard = ARDRegression(fit_intercept=False, alpha_1=0.0, alpha_2=0.0, lambda_1=0.0,
                        lambda_2=0.0, threshold_lambda=THRESHOLD, tol=1e-10,
                        max_iter=100_000).fit(K, y)
    assert ard.n_iter_ < 100_000
    fit = run("rvm", blocks, y, lam=float(np.var(y)) + EPS, threshold=THRESHOLD, tol=1e-10,
              max_iter=100_000)
    assert fit.summary["stop_reason"].startswith("converged")
    np.testing.assert_array_equal(fit.basis, np.flatnonzero(ard.lambda_ < THRESHOLD))
    K_test = blocks.cross(X_test, slice(None))
    mean, std = ard.predict(K_test, return_std=True)
    scale = np.abs(mean).max()
    np.testing.assert_allclose(fit.predict(X_test), mean, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(fit.predict_var(X_test), std**2, rtol=1e-6)  # both include σ²
    assert fit.summary["noise_variance"] == pytest.approx(1.0 / ard.alpha_, rel=1e-6)
    np.testing.assert_allclose(fit.extras["precision"], ard.lambda_[fit.basis], rtol=1e-5)
    np.testing.assert_allclose(fit.coef, ard.coef_[fit.basis], rtol=0, atol=1e-6 * scale)


def test_relevance_vectors_are_traced_and_pruned_to_few():
    blocks, y, _ = sine_problem(n=200)
    X_test = np.linspace(-2.9, 2.9, 57)[:, None]  # inside the training range
    test = (X_test, np.sin(2 * X_test[:, 0]))  # the noise-free function
    fit = run("rvm", blocks, y, lam=0.1, eval_every=1, test=test)
    counts = fit.trace["n_basis"]
    assert counts[0] == blocks.n and len(counts) == fit.summary["iterations"]
    assert np.all(np.diff(counts) <= 0)  # pruning is final
    assert counts[-1] == fit.summary["n_basis"] == len(fit.basis) <= 0.1 * blocks.n
    assert fit.summary["stop_reason"].startswith("converged")
    # 7 relevance vectors of 200 (after ≈ 1600 iterations: the last s_i climb slowly to the
    # threshold) predict as well as the exact GP at the true noise variance
    exact = run("exact", blocks, y, lam=0.01, test=test)
    assert fit.summary["test_rmse"] < 1.1 * exact.summary["test_rmse"] < 0.05
    # the noise variance (0.01 in sine_problem) is learned from lam = 0.1
    assert 0.005 < fit.summary["noise_variance"] < 0.02
    np.testing.assert_array_equal(fit.trace["noise_variance"][0], 0.1)
    # the evidence rises from the start by a large margin and the trace ends at the summary's
    lml = fit.trace["log_marginal_likelihood"]
    assert lml[-1] == fit.summary["log_marginal_likelihood"] > lml[0] + 100
    assert np.isnan(fit.trace["max_log_change"][0]) and fit.trace["max_log_change"][-1] < 1e-6


@pytest.mark.parametrize("learn_noise", [False, True])
def test_fit_is_the_gp_with_the_relevance_vector_kernel(learn_noise):
    """At the final (s, σ²) the RVM is the GP with kernel k̃(x, x') = Σ_{i∈R} s_i⁻¹ k(x, x_i)
    k(x', x_i) and noise σ² (004 eqs. 127-130): its mean, variance and log marginal likelihood,
    computed densely in function space, equal the fit's weight-space ones; and at convergence
    every s_i is a fixed point of eq. 134 with Ξ formed densely."""
    blocks, y, X_test, _ = make_problem(n=80, d=2, noise=0.05)
    lam = 0.05
    fit = run("rvm", blocks, y, lam=lam, learn_noise=learn_noise, tol=1e-9, max_iter=20_000)
    assert fit.summary["stop_reason"].startswith("converged")
    s, sigma2, R = fit.extras["precision"], fit.summary["noise_variance"], fit.basis
    if not learn_noise:
        assert sigma2 == lam and np.all(fit.trace["noise_variance"] == lam)
    K_R = blocks.block(slice(None), R)
    k_R = blocks.cross(X_test, R)
    K_tilde = K_R @ (K_R / s).T
    k_tilde = k_R @ (K_R / s).T
    C = K_tilde + sigma2 * np.eye(blocks.n)
    mean = k_tilde @ np.linalg.solve(C, y)
    var = sigma2 + np.einsum("ij,ij->i", k_R / s, k_R) \
        - np.einsum("ij,ji->i", k_tilde, np.linalg.solve(C, k_tilde.T))
    np.testing.assert_allclose(fit.predict(X_test), mean, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(fit.predict_var(X_test), var, rtol=1e-7)
    lml = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1]
                  + blocks.n * np.log(2 * np.pi))
    assert fit.summary["log_marginal_likelihood"] == pytest.approx(lml, rel=1e-9)
    # eq. 134 at its fixed point: s_i = (1 − s_iΞ_ii)/μ_i²
    Xi = np.linalg.inv(K_R.T @ K_R / sigma2 + np.diag(s))
    np.testing.assert_allclose((1 - s * np.diag(Xi)) / fit.coef**2, s, rtol=1e-6)
    np.testing.assert_allclose(Xi @ K_R.T @ y / sigma2, fit.coef, rtol=1e-8)
    if learn_noise:  # and of σ² = ‖y − K_Rμ‖²/(n − Σγ)
        gamma = 1 - s * np.diag(Xi)
        assert np.sum((y - K_R @ fit.coef) ** 2) / (blocks.n - gamma.sum()) == \
            pytest.approx(sigma2, rel=1e-6)
    else:  # σ² is the job's lam: L(α) of 002 eq. 5 is the objective
        Ka = K_R @ fit.coef
        L = -y @ Ka + 0.5 * (lam * fit.coef @ Ka[R] + Ka @ Ka)
        assert fit.summary["objective"] == pytest.approx(L, rel=1e-10)


def test_column_compaction_and_inverse_diagonal_in_small_blocks(monkeypatch):
    """Pruning moves the kept columns left in chunks (here of 2 columns, so chunks overlap
    their destinations) and diag Ξ comes from blocks of identity columns (here 3)."""
    blocks, _, _, _ = make_problem(n=23, d=2)
    monkeypatch.setattr(rvm, "block_rows", lambda n_cols: 3 if n_cols < 23 else 2)
    active = rvm.ActiveColumns(blocks)
    K = active.columns.copy()  # filled in blocks of 2 columns
    np.testing.assert_allclose(K, blocks.block(slice(None), slice(None)), rtol=1e-15, atol=1e-15)
    rng = np.random.default_rng(1)
    index = np.arange(23)
    for _ in range(4):
        mask = rng.uniform(size=active.r) < 0.7
        mask[:2] = [True, False]
        active.keep(mask)
        index = index[mask]
        np.testing.assert_array_equal(active.index, index)
        np.testing.assert_array_equal(active.columns, K[:, index])
    A = K.T @ K + np.diag(rng.uniform(0.5, 2.0, 23))
    L = np.linalg.cholesky(A)
    np.testing.assert_allclose(rvm.inverse_diagonal(L), np.diag(np.linalg.inv(A)), rtol=1e-10)


def test_everything_pruned_leaves_the_noise_model():
    """With σ² held far above the data's scale no basis function is relevant: the fit is the
    prior y ~ N(0, σ²), scored without test metrics it cannot have."""
    blocks, y, X_test, y_test = make_problem(n=40)
    fit = run("rvm", blocks, y, lam=1e4, learn_noise=False, test=(X_test, y_test))
    assert fit.summary["n_basis"] == 0 and len(fit.basis) == 0
    assert fit.trace["n_basis"][-1] == 0
    np.testing.assert_array_equal(fit.predict_var(X_test), 1e4)
    assert "test_rmse" in fit.not_applicable


def test_max_iter_stops_with_a_consistent_posterior():
    blocks, y, X_test = sine_problem(n=60)
    fit = run("rvm", blocks, y, lam=0.1, max_iter=3)
    assert fit.summary["iterations"] == 3 and fit.summary["stop_reason"].startswith("max_iter")
    first = run("rvm", blocks, y, lam=0.1, max_iter=1)  # the posterior at s_i = 1, σ² = lam
    assert first.summary["n_basis"] == blocks.n and first.summary["noise_variance"] == 0.1
    K = blocks.block(slice(None), slice(None))
    mu = np.linalg.solve(K.T @ K / 0.1 + np.eye(blocks.n), K.T @ y / 0.1)
    np.testing.assert_allclose(first.coef, mu, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("option, value", [
    ("threshold", 0.0), ("threshold", -1.0), ("threshold", "big"), ("tol", 0.0),
    ("tol", -1e-3), ("max_iter", 0), ("max_iter", 2.5), ("learn_noise", "yes"),
    ("eval_every", 0), ("max_n", 0),
])
def test_bad_options_are_one_line_errors(option, value):
    blocks, y, _ = sine_problem(n=20)
    with pytest.raises(InputError) as err:
        run("rvm", blocks, y, lam=0.1, **{option: value})
    message = str(err.value)
    assert message.startswith(f"algorithm rvm: algorithm.{option}={value!r} is invalid")
    assert "\n" not in message and "e.g." in message


def test_refuses_large_n_before_forming_k():
    blocks, y, _ = sine_problem(n=30)
    with pytest.raises(TooLarge, match=r"^algorithm rvm: n_train=30 exceeds algorithm\.max_n=20 "
                                       r"\(a fit needs .* MiB of memory\); use a sparse "
                                       r"algorithm, .* or raise algorithm\.max_n$"):
        run("rvm", blocks, y, lam=0.1, max_n=20)
    assert rvm.memory_bytes(10_000, 8, {}) > 2 * 8 * 10_000**2
