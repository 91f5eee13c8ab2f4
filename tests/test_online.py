import numpy as np
import pytest

from algorithms import InputError, Kernel, run
from algorithms.online import kl_same_basis, remove, scores
from tests.conftest import make_problem


def fit(blocks, y, **kw):
    return run("sparse_online", blocks, y, **kw)


def exact_fit(blocks, y, **kw):
    return run("exact", blocks, y, **kw)


def gaussian_kl(m1, S1, m2, S2):
    d = len(m1)
    S2inv = np.linalg.inv(S2)
    return 0.5 * (np.trace(S2inv @ S1) + (m2 - m1) @ S2inv @ (m2 - m1) - d
                  + np.linalg.slogdet(S2)[1] - np.linalg.slogdet(S1)[1])


@pytest.mark.parametrize("kernel", [Kernel("rbf", {"width": 2.0}), Kernel("matern32")])
def test_no_sparsity_equals_the_exact_gp_posterior(kernel):
    blocks, y, X_test, y_test = make_problem(n=50, d=3, kernel=kernel)
    online = fit(blocks, y, lam=0.1, rng=np.random.default_rng(0), max_basis=50, tol=0.0,
                 test=(X_test, y_test))
    exact = exact_fit(blocks, y, lam=0.1)
    np.testing.assert_allclose(online.predict(X_test), exact.predict(X_test), atol=1e-9)
    np.testing.assert_allclose(online.variance_bounds(X_test)[0],
                               exact.variance_bounds(X_test)[0], atol=1e-9)
    K = blocks.block(online.basis, online.basis)  # posterior covariance on the BV set
    np.testing.assert_allclose(online.extras["C"], -np.linalg.inv(K + 0.1 * np.eye(50)),
                               atol=1e-9)
    assert online.summary["removals"] == 0


def online_state(seed=0, n=40, max_basis=40):
    blocks, y, _, _ = make_problem(n=n, d=3, seed=seed)
    f = fit(blocks, y, lam=0.1, rng=np.random.default_rng(seed), max_basis=max_basis, tol=1e-8)
    return blocks, f.basis, f.coef, f.extras["C"], f.extras["Q"]


@pytest.mark.parametrize("i", [0, 7, 21])
def test_removal_is_the_kl_optimal_projection(i):
    blocks, BV, alpha, C, Q = online_state()
    K = blocks.block(BV, BV)
    keep = np.arange(len(BV)) != i
    P = np.linalg.solve(K[np.ix_(keep, keep)], K[keep, :])  # projection onto span(BV \\ i)
    a2, C2, Q2 = remove(alpha, C, Q, i)
    np.testing.assert_allclose(a2, P @ alpha, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(C2, P @ C @ P.T, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(Q2 @ K[np.ix_(keep, keep)], np.eye(keep.sum()), atol=1e-7)


def test_kl_formula_and_exact_score_equal_the_gaussian_kl_on_the_basis():
    blocks, BV, alpha, C, Q = online_state(n=25, max_basis=25)
    K = blocks.block(BV, BV)
    exact = scores(alpha, C, Q, K, "exact")
    for i in (0, 4, 12):
        a2, C2, _ = remove(alpha, C, Q, i)
        keep = np.arange(len(BV)) != i
        alpha_e, C_e = np.zeros_like(alpha), np.zeros_like(C)
        alpha_e[keep], C_e[np.ix_(keep, keep)] = a2, C2
        brute = gaussian_kl(K @ alpha, K + K @ C @ K, K @ alpha_e, K + K @ C_e @ K)
        assert kl_same_basis(K, alpha, C, alpha_e, C_e) == pytest.approx(brute, rel=1e-6)
        assert exact[i] == pytest.approx(brute, rel=1e-6)
    assert np.all(exact >= -1e-12)


@pytest.mark.parametrize("score", ["approx", "exact"])
def test_q_stays_the_inverse_of_k_bv_through_many_removals(score):
    blocks, y, X_test, y_test = make_problem(n=300, d=2, seed=3)
    f = fit(blocks, y, lam=0.05, rng=np.random.default_rng(1), max_basis=15, tol=1e-6,
            score=score, test=(X_test, y_test), eval_every=100)
    assert f.summary["removals"] > 20 and f.summary["n_basis"] == 15
    K = blocks.block(f.basis, f.basis)
    err = np.abs(f.extras["Q"] @ K - np.eye(15)).max()
    assert err < 1e-8 * np.linalg.cond(K)
    assert np.isfinite(f.summary["test_rmse"])
    assert np.all(np.diff(f.trace["removals"]) >= 0) and f.trace["n_basis"].max() <= 15


@pytest.mark.parametrize("kwargs,match", [
    ({"score": "best"}, r"algorithm sparse_online: algorithm\.score='best' is invalid; it must "
                        "be one of approx, exact"),
    ({"max_basis": 0}, "max_basis=0"),
    ({"max_basis": "lots"}, "max_basis='lots'"),
    ({"lam": -1.0}, "lam=-1.0"),
])
def test_bad_options(problem, kwargs, match):
    blocks, y, _, _ = problem
    with pytest.raises(InputError, match=match) as err:
        fit(blocks, y, **{"lam": 0.1, "rng": np.random.default_rng(0), **kwargs})
    assert "\n" not in str(err.value)


def test_successive_kl_and_score_comparison_options():
    blocks, y, X_test, y_test = make_problem(n=120, d=3)
    f = fit(blocks, y, lam=0.05, rng=np.random.default_rng(0), max_basis=20, n_points=100,
            compare_scores=True, trace_kl=True, test=(X_test, y_test), eval_every=1000)
    assert len(f.trace["n_basis"]) == 100 and np.isfinite(f.trace["test_rmse"][-1])
    assert np.all(f.trace["kl_forward"] >= -1e-9) and np.all(f.trace["kl_backward"] >= -1e-9)
    assert f.summary["n_removals_compared"] == f.summary["removals"] == 80
    assert 0.0 <= f.summary["omission_rate"] <= 1.0
    # the first step moves the prior to a one-point posterior: KL(prior‖post) by hand
    x0 = blocks.X[np.random.default_rng(0).permutation(120)[0]]
    k00 = blocks.kernel(x0[None], x0[None])[0, 0]
    kl_first = 0.5 * (np.log((k00 + 0.05) / 0.05) - k00 / (k00 + 0.05))  # var only part
    assert f.trace["kl_backward"][0] >= kl_first - 1e-9


def test_max_basis_as_percentage_or_none(problem):
    blocks, y, _, _ = problem
    run = lambda mb: fit(blocks, y, lam=0.1, rng=np.random.default_rng(0), max_basis=mb,  # noqa: E731
                         n_points=40, tol=0.0)
    assert run("90%").summary["n_basis"] == 36 and run("90%").summary["removals"] == 4
    assert run("none").summary["removals"] == 0 and run("none").summary["n_basis"] == 40


def test_row_chunks_give_the_same_run_as_single_rows():
    blocks, y, X_test, y_test = make_problem(n=300, d=3)
    runs = [fit(blocks, y, lam=0.05, rng=np.random.default_rng(0), max_basis=20, chunk_rows=c)
            for c in (1, 7, 64, 300)]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.basis, runs[0].basis)
        np.testing.assert_allclose(other.coef, runs[0].coef, rtol=1e-10, atol=1e-12)
