import dataclasses

import numpy as np
import pytest
from scipy.optimize import minimize

from algorithms import REGISTRY, InputError, Kernel, run
from algorithms.zhang import RESCALED_NO_VARIANCE, sor_posterior, theorem31_bound
from tests import contract
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


# ---------------------------------------------------------------- the predictive distribution

def dense_sor(K, K_star, y, S, sigma2, prior_diag=None):
    """The SoR posterior on basis S by plain dense solves: coefficients (σ²K_SS + K_SᵀK_S)⁻¹K_Sᵀy,
    test mean and the variance of y, σ² + σ² k_S(x)ᵀ(σ²K_SS + K_SᵀK_S)⁻¹k_S(x); with the prior
    variances k(x, x) the DTC variance, which adds k(x, x) − k_S(x)ᵀK_SS⁻¹k_S(x)."""
    K_S = K[:, S]
    G = sigma2 * K_S[S] + K_S.T @ K_S
    c = np.linalg.solve(G, K_S.T @ y)
    k_S = K_star[:, S]
    var = sigma2 + sigma2 * np.einsum("ij,ji->i", k_S, np.linalg.solve(G, k_S.T))
    if prior_diag is not None:
        var += prior_diag - np.einsum("ij,ji->i", k_S, np.linalg.solve(K_S[S], k_S.T))
    return c, k_S @ c, var


def dense_metrics(mean, var, y):
    nlpd = np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var)
    return nlpd, np.mean(np.abs(y - mean) <= 2 * np.sqrt(var))


PREDICTIVE_KERNELS = [Kernel("rbf", {"width": 2.0}), Kernel("laplacian", {"omega": 1.0})]


@pytest.mark.parametrize("predictive", ["sor", "dtc"])
@pytest.mark.parametrize("kernel", PREDICTIVE_KERNELS)
@pytest.mark.parametrize("algorithm", ["zhang_greedy", "zhang_kappa_greedy"])
def test_refit_mean_and_variance_equal_a_dense_computation(algorithm, kernel, predictive):
    blocks, y, X_test, y_test = make_problem(n=60, d=3, kernel=kernel)
    sigma2, k = 0.3, 12
    K, K_star = blocks.block(slice(None), slice(None)), kernel(X_test, blocks.inputs(slice(None)))
    kw = {"lam": sigma2, "kappa": 9, "rng": np.random.default_rng(5), "max_basis": k,
          "test": (X_test, y_test)}
    zhang = run(algorithm, blocks, y, **kw)
    refit = run(algorithm, blocks, y, predictive=predictive,
                **{**kw, "rng": np.random.default_rng(5)})
    # the same iterates up to the last step, on the same basis
    np.testing.assert_array_equal(refit.basis, zhang.basis)
    np.testing.assert_array_equal(refit.trace["zhang_R"][:-1], zhang.trace["zhang_R"][:-1])
    prior_diag = np.diag(kernel(X_test, X_test)) if predictive == "dtc" else None
    c, mean, var = dense_sor(K, K_star, y, refit.basis, sigma2, prior_diag)
    np.testing.assert_allclose(refit.coef, c, rtol=1e-10, atol=1e-10 * np.abs(c).max())
    np.testing.assert_allclose(refit.predict(X_test), mean, rtol=1e-10,
                               atol=1e-10 * np.abs(mean).max())
    np.testing.assert_allclose(refit.predict_var(X_test), var, rtol=1e-10)
    nlpd, coverage = dense_metrics(mean, var, y_test)
    assert refit.summary["test_nlpd"] == pytest.approx(nlpd, rel=1e-10)
    assert refit.summary["test_coverage_2sd"] == coverage
    assert refit.summary["test_rmse"] == pytest.approx(np.sqrt(np.mean((mean - y_test) ** 2)),
                                                       rel=1e-10)
    assert refit.trace["test_nlpd"][-1] == refit.summary["test_nlpd"]
    assert "test_nlpd" not in refit.not_applicable
    # the refit is the minimiser of R on the span; Zhang's rescaled iterate is not (k ≥ 3)
    lam_z = sigma2 / blocks.n
    R_refit = zhang_R(K, y, lam_z, full(blocks.n, refit))
    assert refit.summary["zhang_R"] == pytest.approx(R_refit, rel=1e-10)
    assert refit.trace["zhang_R"][-1] == pytest.approx(R_refit, rel=1e-10)
    assert refit.summary["zhang_R_rescaled"] == zhang.summary["zhang_R"]
    assert R_refit < zhang.summary["zhang_R"] * (1 - 1e-6)
    assert not np.allclose(zhang.coef, refit.coef, rtol=1e-3)
    assert refit.summary["delta_R"] <= zhang.summary["delta_R"]
    assert refit.summary["stop_reason"].endswith("then refitted on the basis")
    assert refit.summary["refit_dropped"] == 0


@pytest.mark.parametrize("algorithm", ["zhang_greedy", "zhang_kappa_greedy"])
def test_default_fit_gives_no_variance_and_says_why(algorithm, problem):
    blocks, y, X_test, y_test = problem
    fit = run(algorithm, blocks, y, lam=0.3, kappa=9, rng=0, max_basis=10, test=(X_test, y_test))
    assert fit.predict_var(X_test) is None
    for key in ("test_nlpd", "test_coverage_2sd"):
        assert np.isnan(fit.summary[key]) and np.isnan(fit.trace[key]).all()
        assert fit.not_applicable[key] == RESCALED_NO_VARIANCE
    assert fit.not_applicable["variance"] == RESCALED_NO_VARIANCE
    assert set(fit.not_applicable) == {"variance", "test_nlpd", "test_coverage_2sd"}
    nan = [key for key, value in fit.summary.items()
           if isinstance(value, float) and not np.isfinite(value)]
    assert sorted(nan) == ["test_coverage_2sd", "test_nlpd"]
    for key, values in fit.trace.items():
        assert np.isfinite(values).all() or key in fit.not_applicable, key
    assert np.isfinite(fit.summary["test_rmse"])


def test_random_is_already_the_sor_posterior_of_its_basis():
    """Algorithm 2 minimises R on its span: its coefficients are the SoR mean and the SoR
    variance it reports belongs to that mean."""
    kernel = Kernel("laplacian", {"omega": 1.0})
    blocks, y, X_test, y_test = make_problem(n=60, d=3, kernel=kernel)
    fit = fit_random(blocks, y, lam=0.3, rng=np.random.default_rng(2), max_basis=15,
                     test=(X_test, y_test))
    K, K_star = blocks.block(slice(None), slice(None)), kernel(X_test, blocks.inputs(slice(None)))
    c, mean, var = dense_sor(K, K_star, y, fit.basis, 0.3)
    np.testing.assert_allclose(fit.coef, c, rtol=1e-9, atol=1e-9 * np.abs(c).max())
    np.testing.assert_allclose(fit.predict_var(X_test), var, rtol=1e-10)
    assert fit.summary["test_nlpd"] == pytest.approx(dense_metrics(mean, var, y_test)[0],
                                                     rel=1e-9)


def test_sor_on_every_point_is_the_exact_mean_and_the_exact_variance_less_the_nystrom_residual():
    """S = all n points: c_S = (K + σ²I)⁻¹y, the exact GP's mean; the SoR variance is the exact
    one less k(x,x) − k_xᵀK⁻¹k_x ≥ 0, so equal at the training inputs and below elsewhere; the
    DTC variance adds that residual back: the exact variance."""
    kernel = Kernel("laplacian", {"omega": 1.0})
    blocks, y, X_test, _ = make_problem(n=40, d=3, kernel=kernel)
    n, sigma2 = blocks.n, 0.3
    exact = run("exact", blocks, y, lam=sigma2)
    post = sor_posterior(blocks, y, np.arange(n), sigma2)
    np.testing.assert_allclose(post.coef, exact.coef, rtol=1e-10,
                               atol=1e-10 * np.abs(exact.coef).max())
    X = blocks.inputs(slice(None))
    K = blocks.block(slice(None), slice(None))
    for Z in (X_test, X):
        k_x = kernel(Z, X)
        residual = np.diag(kernel(Z, Z)) - np.einsum("ij,ji->i", k_x, np.linalg.solve(K, k_x.T))
        sor_var = post.variance_bounds(Z)[1]
        np.testing.assert_allclose(sor_var, exact.predict_var(Z) - residual, rtol=1e-8)
    assert np.all(residual < 1e-8)  # Z = X: the training inputs
    np.testing.assert_allclose(post.variance_bounds(X)[1], exact.predict_var(X), rtol=1e-8)
    assert np.all(post.variance_bounds(X_test)[1] < exact.predict_var(X_test))
    dtc = sor_posterior(blocks, y, np.arange(n), sigma2, "dtc")
    np.testing.assert_allclose(dtc.coef, post.coef, rtol=1e-12)
    for Z in (X_test, X):
        np.testing.assert_allclose(dtc.variance_bounds(Z)[1], exact.predict_var(Z), rtol=1e-8)


def test_a_refit_on_a_rank_deficient_basis_keeps_the_spanning_points():
    """A linear kernel on d = 4 inputs has rank 4: Zhang's greedy picks more points than that
    (its rescaled iterate is not yet the minimiser), so G = σ²K_SS + K_SᵀK_S is singular. The
    refit keeps four spanning points, whose span is the whole feature space: the exact GP,
    mean and variance."""
    blocks, y, X_test, y_test = make_problem(n=30, d=4, kernel=Kernel("linear"))
    zhang = fit_greedy(blocks, y, lam=0.3, max_basis=12)
    refit = fit_greedy(blocks, y, lam=0.3, max_basis=12, predictive="sor", test=(X_test, y_test))
    exact = run("exact", blocks, y, lam=0.3)
    assert zhang.summary["n_basis"] > 4
    assert refit.summary["n_basis"] == 4 == len(refit.basis)
    assert refit.summary["refit_dropped"] == zhang.summary["n_basis"] - 4
    assert set(refit.basis) <= set(zhang.basis)
    np.testing.assert_allclose(refit.predict(X_test), exact.predict(X_test), rtol=1e-8,
                               atol=1e-8 * np.abs(exact.predict(X_test)).max())
    np.testing.assert_allclose(refit.predict_var(X_test), exact.predict_var(X_test), rtol=1e-8)
    assert np.isfinite(refit.summary["test_nlpd"])


def test_predictive_is_part_of_the_job_identity(tmp_path):
    from pipeline.job.identity import config_hash

    config = {"algorithm": {"name": "zhang_kappa_greedy"}, "lam": 0.1, "kappa": 9, "seed": 0,
              "dataset": {"name": "sine1d", "n_train": 40, "n_test": 10},
              "kernel": {"name": "rbf", "width": 1.0}, "store_root": str(tmp_path)}
    sor = {**config, "algorithm": {"name": "zhang_kappa_greedy", "predictive": "sor"}}
    assert config_hash(sor, write_data=False) != config_hash(config, write_data=False)


@pytest.fixture(scope="module")
def contract_problem(tmp_path_factory):
    return contract.make_problem(tmp_path_factory.mktemp("stores"))


@pytest.mark.parametrize("check", [contract.check_result_schema, contract.check_deterministic,
                                   contract.check_store_blocks_equal_memory_blocks,
                                   contract.check_extreme_lam,
                                   contract.check_variables_described])
@pytest.mark.parametrize("predictive", ["sor", "dtc"])
@pytest.mark.parametrize("name", ["zhang_greedy", "zhang_kappa_greedy"])
def test_the_refit_follows_the_contract_with_a_variance(name, predictive, check,
                                                        contract_problem):
    """The registry's contract suite checks the default (no variance); the same checks with
    ``predictive`` sor or dtc and a variance declared."""
    base = REGISTRY[name]
    spec = dataclasses.replace(base, has_variance=True,
                               check_options={**base.check_options, "predictive": predictive})
    check(spec, contract_problem, contract.CONF_DIR)
