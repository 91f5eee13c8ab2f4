import numpy as np
import pytest
from scipy.optimize import minimize

from algorithms import InputError, Kernel, run
from algorithms.zhang import theorem31_bound
from tests.conftest import make_problem


def fit_greedy(blocks, y, **kw):
    return run("zhang_greedy", blocks, y, **kw)


def fit_kappa_greedy(blocks, y, **kw):
    return run("zhang_kappa_greedy", blocks, y, **kw)


def fit_random(blocks, y, **kw):
    return run("zhang_random", blocks, y, **kw)

KERNELS = [Kernel("rbf", {"width": 2.0}), Kernel("linear"), Kernel("laplacian", {"omega": 1.0})]


def zhang_R(K, y, lam_z, alpha):
    n = len(y)
    return 0.5 * np.sum((K @ alpha - y) ** 2) / n + 0.5 * lam_z * alpha @ K @ alpha


def full(n, fit):
    alpha = np.zeros(n)
    alpha[fit.basis] = fit.coef
    return alpha


@pytest.mark.parametrize("kernel", KERNELS)
def test_greedy_step_is_the_true_two_parameter_minimiser(kernel):
    blocks, y, _, _ = make_problem(n=40, d=3, kernel=kernel)
    n, sigma2 = blocks.n, 0.8
    lam_z = sigma2 / n
    K = blocks.block(slice(None), slice(None))
    for k in (1, 3, 6):
        prev = full(n, fit_greedy(blocks, y, lam=sigma2, max_basis=k - 1)) if k > 1 else np.zeros(n)
        nxt = fit_greedy(blocks, y, lam=sigma2, max_basis=k)
        brute = {}
        for i in range(n):
            e = np.zeros(n)
            e[i] = 1.0
            res = minimize(lambda c: zhang_R(K, y, lam_z, c[0] * prev + c[1] * e), [1.0, 0.0],  # noqa: B023
                           method="BFGS", options={"gtol": 1e-12})
            brute[i] = res.fun
        best = min(brute.values())
        assert nxt.trace["zhang_R"][-1] == pytest.approx(best, rel=1e-7, abs=1e-12)
        assert nxt.trace["zhang_R"][-1] == pytest.approx(zhang_R(K, y, lam_z, full(n, nxt)),
                                                         rel=1e-10)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kernel", KERNELS)
def test_greedy_delta_R_nonnegative_nonincreasing_and_below_theorem_31(seed, kernel):
    blocks, y, _, _ = make_problem(n=60, d=4, seed=seed, kernel=kernel)
    fit = fit_greedy(blocks, y, lam=0.6, max_basis=60)
    dR = fit.trace["delta_R"]
    assert np.all(dR >= -1e-10 * fit.summary["R_hat"])
    assert np.all(np.diff(dR) <= 1e-12)
    assert np.all(dR <= fit.trace["bound"])
    assert fit.trace["bound"][0] < fit.summary["delta_R0"] + fit.summary["R_hat"] + 1e-12


@pytest.mark.parametrize("algorithm", ["zhang_random", "zhang_kappa_greedy"])
def test_randomised_algorithms_meet_theorem_31_on_average(algorithm):
    blocks, y, _, _ = make_problem(n=60, d=4, seed=11, kernel=Kernel("laplacian", {"omega": 2.0}))
    kw = {"kappa": 5} if algorithm == "zhang_kappa_greedy" else {}
    runs = [run(algorithm, blocks, y, lam=0.6, rng=np.random.default_rng(s), max_basis=40,
                **kw) for s in range(20)]
    mean_dR = np.mean([r.trace["delta_R"] for r in runs], axis=0)
    assert np.all(mean_dR <= runs[0].trace["bound"])
    assert np.all(np.array([r.trace["delta_R"] for r in runs]) >= -1e-10 * runs[0].summary["R_hat"])


def test_random_with_k_equal_n_is_the_exact_solution():
    blocks, y, X_test, _ = make_problem(n=50, d=3, kernel=Kernel("laplacian", {"omega": 1.0}))
    sigma2 = 0.3
    exact = run("exact", blocks, y, lam=sigma2)
    fit = fit_random(blocks, y, lam=sigma2, rng=np.random.default_rng(0), max_basis=50)
    assert fit.summary["n_basis"] == 50
    np.testing.assert_allclose(full(50, fit), exact.coef, rtol=1e-6,
                               atol=1e-6 * np.abs(exact.coef).max())
    np.testing.assert_allclose(fit.predict(X_test), exact.predict(X_test), rtol=1e-8, atol=1e-8)
    assert abs(fit.trace["delta_R"][-1]) < 1e-12
    # λ mapping: R(ŵ) = (λ/2) yᵀ(K+nλI)⁻¹y with nλ = σ², and the traced objective is SGMA's L
    assert fit.summary["R_hat"] == pytest.approx(0.5 * sigma2 / 50 * y @ exact.coef, rel=1e-12)
    assert fit.trace["objective"][-1] == pytest.approx(exact.summary["objective"], rel=1e-10)
    assert fit.summary["zhang_lambda"] == pytest.approx(sigma2 / 50)


def test_kappa_greedy_with_kappa_n_is_greedy_and_seeded_subsets_differ(problem):
    blocks, y, _, _ = problem
    greedy = fit_greedy(blocks, y, lam=0.5, max_basis=15)
    same = fit_kappa_greedy(blocks, y, lam=0.5, kappa=blocks.n, rng=np.random.default_rng(1),
                            max_basis=15)
    np.testing.assert_allclose(same.trace["zhang_R"], greedy.trace["zhang_R"], rtol=1e-12)
    a, b = (fit_kappa_greedy(blocks, y, lam=0.5, kappa=5, rng=np.random.default_rng(s),
                             max_basis=15) for s in (1, 2))
    assert not np.allclose(a.trace["zhang_R"], b.trace["zhang_R"])
    assert a.trace["zhang_R"][0] >= greedy.trace["zhang_R"][0] - 1e-12  # best single point


def test_theorem_31_formula():
    assert theorem31_bound(2.0, 1.0, 0.1, np.array([0]))[0] == pytest.approx(2.0)
    assert theorem31_bound(2.0, 1.0, 0.1, np.array([100]))[0] == pytest.approx(
        2.0 * 1.21 / (0.01 * 100 + 1.21))


@pytest.mark.parametrize("kwargs,match", [
    ({"max_basis": 0}, r"algorithm zhang_kappa_greedy: algorithm\.max_basis=0 is invalid"),
    ({"lam": 0.0}, "lam=0.0"),
    ({"kappa": 0}, "kappa=0"),
])
def test_bad_parameters(problem, kwargs, match):
    blocks, y, _, _ = problem
    args = {"lam": 0.5, "kappa": 5, "rng": np.random.default_rng(0), **kwargs}
    with pytest.raises(InputError, match=match) as err:
        fit_kappa_greedy(blocks, y, **args)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kernel", KERNELS)
def test_streamed_cg_reference_equals_dense_cholesky(kernel):
    from algorithms.objectives import solve_reference as _solve

    blocks, y, _, _ = make_problem(n=300, d=5, kernel=kernel)
    cg, dense = (_solve(blocks, y, 0.7, how) for how in ("cg", "dense"))
    assert y @ cg == pytest.approx(y @ dense, rel=1e-10)
    fit = fit_greedy(blocks, y, lam=0.7, max_basis=3, reference="none")
    assert np.isnan(fit.trace["delta_R"]).all() and np.isfinite(fit.trace["zhang_R"]).all()


@pytest.mark.parametrize("fit", [fit_greedy, fit_kappa_greedy, fit_random])
def test_a_kernel_that_overflows_is_named_and_lam_is_not_blamed(fit):
    blocks, y, _, _ = make_problem(kernel=Kernel("polynomial", {"degree": 400}))
    with pytest.raises(InputError, match=r"^kernel polynomial\(c=1\.0, degree=400\) is NaN/inf")\
            as err:
        fit(blocks, y, lam=0.1, kappa=5)
    assert "lam" not in str(err.value)


@pytest.mark.parametrize("algorithm", ["zhang_kappa_greedy", "zhang_random", "sgma"])
def test_the_reference_solve_is_not_the_methods_time(algorithm, monkeypatch):
    """The exact solve behind the suboptimality diagnostics (``algorithm.reference=cg``) is
    left out of the fit's seconds, as test evaluations are (on a clock that the solve moves
    by 100 s)."""
    import algorithms.evaluation as evaluation
    import algorithms.objectives as objectives

    now = [0.0]

    def clock() -> float:
        now[0] += 1e-6
        return now[0]

    solve = objectives.solve_reference

    def slow_solve(*args, **kwargs):
        now[0] += 100.0
        return solve(*args, **kwargs)

    monkeypatch.setattr(evaluation.time, "perf_counter", clock)
    module = __import__(f"algorithms.{algorithm.split('_')[0]}", fromlist=["solve_reference"])
    monkeypatch.setattr(module, "solve_reference", slow_solve)
    blocks, y, X_test, y_test = make_problem()
    fit = run(algorithm, blocks, y, lam=0.1, kappa=5, rng=0, max_basis=10, reference="cg",
              test=(X_test, y_test))
    assert 0 < fit.trace["seconds"][-1] < 1.0
    assert np.all(np.isfinite(fit.trace["primal_subopt" if algorithm == "sgma" else "delta_R"]))
