"""Relevance vector machines (algorithms/rvm.py). Regression: scikit-learn's ARDRegression on
the kernel columns as the reference, the pruning trace, the GP closed form of the fitted model,
and bad options. Classification: a dense L-BFGS-B mode and dense Laplace evidence as the
reference (scikit-learn has no RVM classifier), the pruning trace against gp_laplace on
breast_cancer and two_moons, bad labels and options."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.linear_model import ARDRegression

import algorithms.rvm as rvm
from algorithms import ArrayKernelBlocks, InputError, Kernel, run
from algorithms.errors import TooLarge
from algorithms.laplace import log_sigmoid, predictive_probability
from pipeline.datasets import build
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


# ----------------------------------------------------------------------------- classification
# scikit-learn has no RVM classifier: the reference is a dense L-BFGS-B optimisation of the
# penalised log likelihood Ψ and a dense evaluation of the Laplace log marginal likelihood.

MOONS_KERNEL = Kernel("rbf", {"width": 0.5})
CANCER_KERNEL = Kernel("rbf", {"width": 18.0})


def small_moons(n=80):
    arrays, _ = build({"name": "two_moons", "n_train": n, "n_test": 40, "data_seed": 1})
    return ArrayKernelBlocks(arrays["X_train"], MOONS_KERNEL), arrays["y_train"], \
        arrays["X_test"], arrays["y_test"]


def dense_mode(KR, y, s):
    """argmax Ψ(θ) = Σ log σ(y_i (K_Rθ)_i) − ½θᵀSθ by L-BFGS-B with the analytic gradient,
    run until it can no longer reduce −Ψ (ftol = 0, gtol = 1e-13)."""
    t01 = 0.5 * (y + 1.0)

    def negative_psi(theta):
        f = KR @ theta
        return (-(log_sigmoid(y * f).sum() - 0.5 * s @ theta**2),
                -(KR.T @ (t01 - expit(f)) - s * theta))

    out = minimize(negative_psi, np.zeros(KR.shape[1]), jac=True, method="L-BFGS-B",
                   options={"ftol": 0.0, "gtol": 1e-13, "maxiter": 100_000, "maxcor": 50})
    assert np.abs(out.jac).max() < 1e-6, out.message
    return out.x, -out.fun


def dense_laplace(KR, y, s, theta):
    """log q(y | s) (module docstring) and Ξ = H⁻¹ at θ, with dense determinants and inverse;
    also the same log q in function space, as the GP with kernel K̃ = K_RS⁻¹K_Rᵀ (R&W eq.
    3.32: −½ log|I + W^½K̃W^½| in place of ½ Σ log s − ½ log|H|, Sylvester's identity)."""
    f = KR @ theta
    pi = expit(f)
    W = pi * (1 - pi)
    H = KR.T @ (W[:, None] * KR) + np.diag(s)
    psi = log_sigmoid(y * f).sum() - 0.5 * s @ theta**2
    lml = psi + 0.5 * np.log(s).sum() - 0.5 * np.linalg.slogdet(H)[1]
    root = np.sqrt(W)
    B = np.eye(len(y)) + root[:, None] * (KR @ (KR / s).T) * root[None, :]
    return lml, psi - 0.5 * np.linalg.slogdet(B)[1], np.linalg.inv(H)


def test_newton_mode_and_laplace_evidence_equal_dense_ones_at_fixed_precisions():
    """At fixed s (30 of 80 columns, s log-uniform in [0.05, 5]), the Newton mode equals
    L-BFGS-B's to 2e-8 of max |θ| (measured: 4.6e-8 at max |θ| = 4.9, the limit of L-BFGS-B,
    whose last gradient is ≈ 7e-9; Newton's is 5e-10 after 7 steps), Ψ agrees to 2e-15, and
    log q(y | s) equals the dense formula (weight space and function space) at θ̂ to 1e-12
    relative; diag Ξ to 1e-12."""
    blocks, y, _, _ = small_moons()
    K = blocks.block(slice(None), slice(None))
    rng = np.random.default_rng(0)
    R = np.sort(rng.choice(blocks.n, 30, replace=False))
    KR = np.asfortranarray(K[:, R])
    s = np.exp(rng.uniform(np.log(0.05), np.log(5.0), len(R)))
    post = rvm.laplace_posterior(KR, y, s, np.zeros(len(R)), newton_tol=1e-12)
    assert post.converged and post.halvings == 0 and 3 <= post.newton_steps <= 10
    theta, psi = dense_mode(KR, y, s)
    scale = np.abs(theta).max()
    np.testing.assert_allclose(post.mean, theta, rtol=0, atol=2e-8 * scale)
    assert post.log_posterior == pytest.approx(psi, rel=1e-12)
    lml, lml_function_space, Xi = dense_laplace(KR, y, s, post.mean)
    assert post.log_evidence == pytest.approx(lml, rel=1e-12)
    assert post.log_evidence == pytest.approx(lml_function_space, rel=1e-12)
    np.testing.assert_allclose(post.xi_diag, np.diag(Xi), rtol=1e-12)
    # one Newton step more (decrement < 1e-24) reaches round-off: the same mode from θ = 0 and
    # from a random start (as the fit's warm starts) to 1e-15 (measured), and the default's θ̂
    # within 2.3e-9 of it
    tight = rvm.laplace_posterior(KR, y, s, np.zeros(len(R)), newton_tol=1e-24)
    again = rvm.laplace_posterior(KR, y, s, rng.normal(size=len(R)), newton_tol=1e-24)
    assert tight.converged and again.converged
    np.testing.assert_allclose(again.mean, tight.mean, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(post.mean, tight.mean, rtol=0, atol=1e-9 * scale)
    # a newton_tol below float64's resolution stops on round-off, flagged, at the same mode
    floor = rvm.laplace_posterior(KR, y, s, np.zeros(len(R)), newton_tol=1e-300)
    assert not floor.converged and floor.newton_steps < rvm.MAX_NEWTON_STEPS
    np.testing.assert_allclose(floor.mean, tight.mean, rtol=0, atol=1e-13 * scale)


def test_first_iteration_is_the_laplace_posterior_at_unit_precisions():
    """max_iter=1: the fit is the Laplace approximation at s_i = 1 on all n columns: its coef,
    log marginal likelihood and p(y = +1 | x) = ∫σ(z)N(z | k_R(x)ᵀθ̂, k_R(x)ᵀΞk_R(x))dz equal
    the dense ones: θ̂ L-BFGS-B's to 1e-6 of max |θ| (measured 6.6e-8 at max |θ| = 0.53), Ψ to
    1e-14, log q(y | s), Ξ and the probabilities evaluated densely at θ̂ to round-off."""
    blocks, y, X_test, y_test = small_moons()
    fit = run("rvm_classifier", blocks, y, lam=1.0, max_iter=1, test=(X_test, y_test))
    assert fit.summary["n_basis"] == blocks.n and fit.summary["stop_reason"].startswith("max_iter")
    K = blocks.block(slice(None), slice(None))
    s = np.ones(blocks.n)
    theta, psi = dense_mode(K, y, s)
    np.testing.assert_allclose(fit.coef, theta, rtol=0, atol=1e-6 * np.abs(theta).max())
    assert fit.summary["log_posterior"] == pytest.approx(psi, rel=1e-10)
    lml, _, Xi = dense_laplace(K, y, s, fit.coef)
    assert fit.summary["log_marginal_likelihood"] == pytest.approx(lml, rel=1e-12)
    k = blocks.cross(X_test, slice(None))
    prob = predictive_probability(k @ fit.coef, np.einsum("ij,jk,ik->i", k, Xi, k))
    np.testing.assert_allclose(fit.predict_proba(X_test), prob, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fit.predict(X_test), k @ fit.coef, rtol=0, atol=1e-12)
    assert fit.summary["test_error_rate"] == np.mean((prob >= 0.5) != (y_test > 0))
    assert np.isnan(fit.summary["objective"]) and "objective" in fit.not_applicable


def cancer_problem():
    arrays, _ = build({"name": "breast_cancer"})
    return ArrayKernelBlocks(arrays["X_train"], CANCER_KERNEL), arrays["y_train"], \
        (arrays["X_test"], arrays["y_test"])


def moons_problem():
    arrays, _ = build({"name": "two_moons"})
    return ArrayKernelBlocks(arrays["X_train"], MOONS_KERNEL), arrays["y_train"], \
        (arrays["X_test"], arrays["y_test"])


@pytest.mark.parametrize("name, problem, most", [
    ("breast_cancer", cancer_problem, 20),
    ("two_moons", moons_problem, 12),
])
def test_classifier_prunes_to_few_relevance_vectors_and_classifies_as_the_gp(name, problem,
                                                                             most):
    """Default options, the same kernel for the RVM and gp_laplace (full form). Measured:

    - breast_cancer (400 training rows, 30 features, width 18): 400 → 13 relevance vectors in
      2538 iterations (0.75 s); test error 3/169 = 1.8 % vs gp_laplace's 5/169 = 3.0 %, log
      loss 0.13 vs 0.23, Brier 0.026 vs 0.062;
    - two_moons (300 training points, width 0.5): 300 → 6 relevance vectors in 405 iterations
      (0.16 s); test error 11/300 = 3.7 % vs gp_laplace's 13/300 = 4.3 %, log loss 0.11 vs
      0.18, Brier 0.031 vs 0.041.
    """
    blocks, y, test = problem()
    fit = run("rvm_classifier", blocks, y, lam=1.0, test=test)
    assert fit.task == "classification"
    counts = fit.trace["n_basis"]
    assert counts[0] == blocks.n and len(counts) == fit.summary["iterations"]
    assert np.all(np.diff(counts) <= 0)  # pruning is final
    assert counts[-1] == fit.summary["n_basis"] == len(fit.basis) <= most
    assert fit.summary["stop_reason"].startswith("converged")
    assert fit.summary["newton_unconverged"] == 0
    gp = run("gp_laplace", blocks, y, lam=1.0, test=test)
    assert fit.summary["test_error_rate"] <= gp.summary["test_error_rate"] + 0.02
    assert gp.summary["test_error_rate"] < 0.05
    # the approximate evidence climbs by a large margin and the trace ends at the summary's
    lml = fit.trace["log_marginal_likelihood"]
    assert lml[-1] == fit.summary["log_marginal_likelihood"] > lml[0] + 10
    # at convergence (tol = 1e-6 on log s) every s_i is a fixed point of eq. 134 with a dense Ξ
    # (measured: to 1.0e-6 and 3.6e-8 relative)
    s, R = fit.extras["precision"], fit.basis
    _, _, Xi = dense_laplace(blocks.block(slice(None), R), y, s, fit.coef)
    np.testing.assert_allclose((1 - s * np.diag(Xi)) / fit.coef**2, s, rtol=1e-5)


def test_classifier_with_everything_pruned_predicts_one_half():
    blocks, y, X_test, y_test = small_moons(40)
    fit = run("rvm_classifier", blocks, y, lam=1.0, threshold=1e-6, test=(X_test, y_test))
    assert fit.summary["n_basis"] == 0 and fit.trace["n_basis"][-1] == 0
    np.testing.assert_allclose(fit.predict_proba(X_test), 0.5, rtol=0, atol=1e-14)
    assert fit.summary["log_marginal_likelihood"] == pytest.approx(-40 * np.log(2))
    assert "test_error_rate" in fit.not_applicable


def test_classifier_bad_labels_are_one_line_errors():
    blocks, y, _, _ = small_moons(40)
    with pytest.raises(InputError, match=r"^y has 1 labels outside \{-1, \+1\} \(first 2\.0 at "
                                         r"index 3\); a binary classifier needs labels -1"):
        run("rvm_classifier", blocks, np.where(np.arange(40) == 3, 2.0, y), lam=1.0)
    with pytest.raises(InputError, match=r"^y has \d+ labels outside \{-1, \+1\}") as err:
        run("rvm_classifier", blocks, 0.5 * (y + 1), lam=1.0)  # 0/1 labels
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("option, value", [
    ("threshold", 0.0), ("threshold", -1.0), ("tol", 0.0), ("max_iter", 0), ("max_iter", 2.5),
    ("newton_tol", 0.0), ("newton_tol", "tight"), ("eval_every", 0), ("max_n", 0),
])
def test_classifier_bad_options_are_one_line_errors(option, value):
    blocks, y, _, _ = small_moons(20)
    with pytest.raises(InputError) as err:
        run("rvm_classifier", blocks, y, lam=1.0, **{option: value})
    message = str(err.value)
    assert message.startswith(f"algorithm rvm_classifier: algorithm.{option}={value!r} is "
                              "invalid")
    assert "\n" not in message and "e.g." in message


def test_classifier_refuses_large_n_before_forming_k():
    blocks, y, _, _ = small_moons(30)
    with pytest.raises(TooLarge, match=r"^algorithm rvm_classifier: n_train=30 exceeds "
                                       r"algorithm\.max_n=20 "):
        run("rvm_classifier", blocks, y, lam=1.0, max_n=20)
