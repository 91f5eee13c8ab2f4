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


def textbook_online_gp(blocks, y, lam, order, max_basis, tol):
    """001's updates as written (α, C, Q dense; module docstring of algorithms.online)."""
    BV, alpha, C, Q = [], np.zeros(0), np.zeros((0, 0)), np.zeros((0, 0))
    for j in order:
        k = blocks.block([j], BV)[0] if BV else np.zeros(0)
        k_star = blocks.diag()[j]
        denom = lam + k_star + k @ C @ k
        q, r = (y[j] - alpha @ k) / denom, -1.0 / denom
        e_hat = Q @ k
        gamma = k_star - k @ e_hat
        if gamma < tol * k_star:
            s = C @ k + e_hat
            alpha, C = alpha + q * s, C + r * np.outer(s, s)
            continue
        s = np.append(C @ k, 1.0)
        alpha = np.append(alpha, 0.0) + q * s
        C = np.pad(C, (0, 1)) + r * np.outer(s, s)
        u = np.append(e_hat, -1.0)
        Q = np.pad(Q, (0, 1)) + np.outer(u, u) / gamma
        BV.append(j)
        if len(BV) > max_basis:
            i = int(np.argmin(scores(alpha, C, Q, None, "approx")))
            alpha, C, Q = remove(alpha, C, Q, i)
            del BV[i]
    return BV, alpha, C


@pytest.mark.parametrize("seed", [0, 1])
def test_the_square_root_form_runs_the_textbook_updates(seed):
    """On a well-conditioned problem the fit (whitened square-root form) makes the textbook
    form's choices and predicts what it predicts."""
    blocks, y, X_test, _ = make_problem(n=200, d=2, seed=seed)
    f = fit(blocks, y, lam=0.1, rng=np.random.default_rng(seed), max_basis=15, tol=1e-6)
    order = np.random.default_rng(seed).permutation(200)
    BV, alpha, C = textbook_online_gp(blocks, y, 0.1, order, 15, 1e-6)
    assert f.summary["removals"] == 185 and sorted(f.basis) == sorted(BV)
    Kx = blocks.cross(X_test, BV)
    np.testing.assert_allclose(f.predict(X_test), Kx @ alpha, atol=1e-9)
    var = blocks.kernel.diag(X_test) + np.einsum("ij,jk,ik->i", Kx, C, Kx) + 0.1
    np.testing.assert_allclose(f.variance_bounds(X_test)[0], var, atol=1e-9)


def _bike_rows():
    from tests.test_sgma import _bike_rows as rows
    return rows()


@pytest.mark.slow
def test_a_high_signal_to_noise_kernel_keeps_the_variance_positive():
    """At bike's learned kernel (variance/σ₀² = 5.4e7) the textbook form's C tends to −K_BV⁻¹
    and its variance k* + kᵀCk lost every digit (negative on the whole bike set; on its first
    4000 rows a mean 1e8 away from the exact GP's). The square-root form keeps every variance
    above σ₀² and, with 256 or more basis vectors, the mean within 0.02 of the exact GP's."""
    blocks, y, lam = _bike_rows()
    X = blocks.inputs(slice(None))
    ref = exact_fit(blocks, y, lam=lam).predict(X)
    for seed, m in ((0, 256), (0, 512), (1, 512)):
        f = fit(blocks, y, lam=lam, rng=np.random.default_rng(seed), max_basis=m)
        assert np.all(f.variance_bounds(X)[0] >= lam)
        assert np.sqrt(np.mean((f.predict(X) - ref) ** 2)) < 0.02


def test_a_numerically_singular_basis_is_a_breakdown_in_one_line():
    blocks, y, lam = _bike_rows()
    with pytest.raises(InputError, match=r"algorithm sparse_online: K_BV became numerically "
                                         r"singular \(point \d+'s squared distance from span\(BV\) "
                                         r"came out -.*·k\(x,x\) < 0 with \d+ basis vectors\) "
                                         r".*pass a larger algorithm.tol \(now 1e-12\)") as err:
        fit(blocks, y, lam=lam, rng=np.random.default_rng(0), max_basis=512, tol=1e-12)
    assert "\n" not in str(err.value)
