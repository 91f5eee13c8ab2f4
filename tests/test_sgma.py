import numpy as np
import pytest

from algorithms import ArrayKernelBlocks, InputError, Kernel, run
from algorithms.greedy import DualGreedy
from algorithms.objectives import dual_objective, primal_objective
from tests.conftest import make_problem


def sgma(blocks, y, **kw):
    return run("sgma", blocks, y, **kw)


def exact(blocks, y, **kw):
    return run("exact", blocks, y, **kw)


def full_vector(n, basis, coef):
    alpha = np.zeros(n)
    alpha[basis] = coef
    return alpha


@pytest.mark.parametrize("kernel", [Kernel("laplacian", {"omega": 1.0}),
                                    Kernel("rbf", {"width": 0.5})])
def test_full_greedy_to_n_reproduces_exact_alpha(kernel):
    blocks, y, X_test, _ = make_problem(n=50, d=3, kernel=kernel)
    ref = exact(blocks, y, lam=0.1)
    fit = sgma(blocks, y, lam=0.1, kappa=blocks.n, rng=np.random.default_rng(0), eps=0.0)
    assert fit.summary["n_basis"] == blocks.n == fit.summary["n_basis_dual"]
    np.testing.assert_allclose(full_vector(blocks.n, fit.basis, fit.coef), ref.coef,
                               rtol=1e-6, atol=1e-6 * np.abs(ref.coef).max())
    np.testing.assert_allclose(fit.predict(X_test), ref.predict(X_test), rtol=1e-8, atol=1e-8)
    dual_alpha = full_vector(blocks.n, fit.extras["basis_dual"], fit.extras["coef_dual"])
    np.testing.assert_allclose(dual_alpha, ref.coef, rtol=1e-9, atol=1e-10)
    assert abs(fit.summary["gap"]) < 1e-10


@pytest.mark.parametrize("kappa", [1, 5, 59, 1000])
def test_gap_nonnegative_objectives_monotone_and_gap_closes(kappa):
    blocks, y, _, _ = make_problem(n=70, d=2, seed=kappa)
    fit = sgma(blocks, y, lam=0.3, kappa=kappa, rng=np.random.default_rng(kappa), eps=0.0)
    tr = fit.trace
    assert np.all(tr["gap"] >= -1e-12)
    assert tr["gap"][-1] < 1e-9
    assert np.all(np.diff(tr["objective"]) <= 1e-12 * np.abs(tr["objective"]).max())
    assert np.all(np.diff(tr["dual_objective"]) <= 1e-12 * np.abs(tr["dual_objective"]).max())
    # K is numerically rank-deficient here (d = 2): the primal basis stops growing once every
    # remaining column lies in its span, and the dual alone closes the gap.
    t = fit.summary["n_basis"]
    assert fit.summary["n_degenerate_candidates"] == blocks.n - t > 0
    np.testing.assert_array_equal(tr["n_basis"][:t], np.arange(1, t + 1))
    np.testing.assert_array_equal(tr["n_basis_dual"], np.arange(1, blocks.n + 1))
    ref = exact(blocks, y, lam=0.3)
    assert tr["objective"][-1] == pytest.approx(ref.summary["objective"], rel=1e-10)
    assert tr["dual_objective"][-1] == pytest.approx(ref.summary["dual_objective"], rel=1e-9)


def test_dual_alone_stops_at_max_basis_once_the_primal_reaches_numerical_rank():
    # linear kernel on d = 3 inputs: K has rank 3, so the primal has no admissible candidate
    # after 3 basis functions. With eps = 0 the gap never closes; the dual must still stop at
    # max_basis instead of growing towards n (it once ran to n at O(t²) per step).
    blocks, y, _, _ = make_problem(n=400, d=3, kernel=Kernel("linear"))
    fit = sgma(blocks, y, lam=0.1, kappa=59, rng=np.random.default_rng(0), eps=0.0,
               max_basis=20)
    assert fit.summary["n_basis"] == 3
    assert fit.summary["n_basis_dual"] == 20 == len(fit.trace["gap"])
    assert fit.summary["stop_reason"].startswith("numerical rank: no admissible primal "
                                                 "candidate after 3 basis functions")
    ref = exact(blocks, y, lam=0.1)  # three basis functions span K: the primal is optimal
    assert fit.summary["objective"] == pytest.approx(ref.summary["objective"], rel=1e-9)


def test_objectives_in_trace_equal_dense_evaluation(problem):
    blocks, y, _, _ = problem
    K = blocks.block(slice(None), slice(None))
    for t in (1, 4, 9):
        fit = sgma(blocks, y, lam=0.1, kappa=7, rng=np.random.default_rng(5), max_basis=t,
                   eps=0.0)
        alpha = full_vector(blocks.n, fit.basis, fit.coef)
        alpha_d = full_vector(blocks.n, fit.extras["basis_dual"], fit.extras["coef_dual"])
        assert fit.summary["objective"] == pytest.approx(
            primal_objective(K @ alpha, alpha, y, 0.1), rel=1e-10)
        assert fit.summary["dual_objective"] == pytest.approx(
            dual_objective(K @ alpha_d, alpha_d, y, 0.1), rel=1e-10)


def test_full_greedy_picks_the_best_candidate_by_brute_force(problem):
    blocks, y, _, _ = problem
    lam, n = 0.1, blocks.n
    K = blocks.block(slice(None), slice(None))
    steps = 6
    fit = sgma(blocks, y, lam=lam, kappa=n, rng=np.random.default_rng(0), max_basis=steps,
               eps=0.0)

    def restricted_min(S):  # min over β of L(Pβ) by a dense least-squares-free solve
        KS = K[:, S]
        G = lam * K[np.ix_(S, S)] + KS.T @ KS
        b = KS.T @ y
        return -0.5 * b @ np.linalg.solve(G, b)

    for k in range(steps):
        chosen = list(fit.basis[:k])
        values = {i: restricted_min(chosen + [i]) for i in range(n) if i not in chosen}
        assert fit.basis[k] == min(values, key=values.get)
        assert fit.trace["objective"][k] == pytest.approx(min(values.values()), rel=1e-9)


@pytest.mark.parametrize("max_basis", [1, 5, 20, 60])
def test_error_bars_bracket_exact_variance(problem, max_basis):
    blocks, y, X_test, _ = problem
    var = exact(blocks, y, lam=0.1).variance_bounds(X_test)[0]
    fit = sgma(blocks, y, lam=0.1, kappa=10, rng=np.random.default_rng(2), max_basis=max_basis,
               eps=0.0)
    lower, upper = fit.variance_bounds(X_test)
    tol = 1e-9 * var
    assert np.all(lower <= var + tol), (lower - var).max()
    assert np.all(upper >= var - tol), (var - upper).max()
    if max_basis == blocks.n:
        np.testing.assert_allclose(lower, var, rtol=1e-6)
        np.testing.assert_allclose(upper, var, rtol=1e-8)


def test_stops_at_eps_and_traces_test_rmse(problem):
    blocks, y, X_test, y_test = problem
    fit = sgma(blocks, y, lam=0.1, kappa=20, rng=np.random.default_rng(0), eps=0.05,
               test=(X_test, y_test), eval_every=3)
    gap = fit.trace["gap"]
    assert gap[-1] < 0.05 <= gap[-2]
    assert fit.summary["stop_reason"] == "gap < eps=0.05"
    traced = ~np.isnan(fit.trace["test_rmse"])
    steps = fit.trace["n_basis"][traced]
    assert np.all((steps % 3 == 0) | (steps == steps.max()))
    final = np.sqrt(np.mean((fit.predict(X_test) - y_test) ** 2))
    assert fit.trace["test_rmse"][-1] == pytest.approx(final, rel=1e-10)
    assert fit.summary["test_rmse"] == pytest.approx(final, rel=1e-10)


def test_same_seed_same_run_other_seed_other_subsets(problem):
    blocks, y, _, _ = problem
    runs = [sgma(blocks, y, lam=0.1, kappa=5, rng=np.random.default_rng(s), max_basis=10)
            for s in (7, 7, 8)]
    np.testing.assert_array_equal(runs[0].basis, runs[1].basis)
    assert not np.array_equal(runs[0].basis, runs[2].basis)


@pytest.mark.parametrize("kwargs,match", [
    ({"lam": 0.0}, "lam=0.0 must be a finite number > 0"),
    ({"lam": -1.0}, "lam=-1.0 must be"),
    ({"kappa": 0}, "kappa=0 must be ≥ 1"),
    ({"eps": -1.0}, r"algorithm sgma: algorithm\.eps=-1\.0 is invalid; it must be a number ≥ 0"),
    ({"max_basis": 0}, r"algorithm\.max_basis=0 is invalid"),
])
def test_bad_parameters_are_one_line_errors(problem, kwargs, match):
    blocks, y, _, _ = problem
    args = {"lam": 0.1, "kappa": 5, "rng": np.random.default_rng(0), **kwargs}
    with pytest.raises(InputError, match=match) as err:
        sgma(blocks, y, **args)
    assert "\n" not in str(err.value)


def test_bad_targets_are_one_line_errors(problem):
    blocks, y, _, _ = problem
    bad = y.copy()
    bad[4] = np.nan
    with pytest.raises(InputError, match=r"y has 1 NaN/inf values \(first at index 4\)"):
        sgma(blocks, bad, lam=0.1, kappa=5, rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="y has 59 entries but there are 60 inputs"):
        sgma(blocks, y[:-1], lam=0.1, kappa=5, rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="y has 59 entries but there are 60 inputs"):
        exact(blocks, y[:-1], lam=0.1)


def test_a_kernel_that_overflows_is_named_not_a_type_error():
    blocks, y, X_test, y_test = make_problem(kernel=Kernel("polynomial", {"degree": 400}))
    with pytest.raises(InputError, match=r"^kernel polynomial\(c=1\.0, degree=400\) is NaN/inf "
                                         r"for \d+ of \d+ values .*moderate size"):
        sgma(blocks, y, lam=0.1, kappa=5, test=(X_test, y_test))


def test_dual_greedy_drops_degenerate_candidates_at_tiny_lam():
    """σ²I + K_SS is numerically singular at σ² = 1e-300: the dual (and with it the
    certificate) stops with a finite objective instead of a NaN score and a TypeError."""
    X = np.random.default_rng(0).uniform(size=(40, 1))
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 10.0}))
    dual = DualGreedy(blocks, np.sin(6 * X[:, 0]), 1e-300, np.random.default_rng(0))
    steps = 0
    while dual.step(5) is not None:
        steps += 1
    assert 1 <= steps == dual.t < blocks.n and dual.pool.size == 0
    assert np.isfinite(dual.objective) and np.isfinite(dual.chol.coef()).all()


@pytest.mark.parametrize("lam,fragment", [
    (1e-300, r"lam=1e-300 is below the float64 resolution of K \+ lam·I with kernel "
             r"rbf\(width=2\.0\) \(max k\(x,x\) = 1\): it rounds to K; pass a larger lam "
             r"\(≥ 2\.2e-16\), e\.g\. lam=0\.001$"),
    (1e300, r"lam=1e\+300 swamps the kernel in K \+ lam·I with kernel rbf\(width=2\.0\) "
            r"\(max k\(x,x\) = 1\): it rounds to lam·I; pass a smaller lam \(≤ 4\.5e\+15\), "
            r"e\.g\. lam=1$"),
])
def test_lam_that_float64_cannot_add_to_the_kernel_is_refused_before_fitting(lam, fragment):
    blocks, y, _, _ = make_problem()
    with pytest.raises(InputError, match=fragment):
        sgma(blocks, y, lam=lam, kappa=5)


def test_tiled_threaded_kernel_blocks_select_what_the_textbook_form_selects():
    """The speed-up must not change results: SGMA with the tiled, threaded RBF blocks and the
    fused projection picks the same basis, in the same order, with the same objectives (1e-10)
    as with whole kernel columns in the textbook numpy form (pipeline.bench.flops._naive), on one
    thread and on two."""
    from algorithms import ArrayKernelBlocks, Kernel, run
    from algorithms.kernel_threads import use_kernel_threads
    from pipeline.bench.flops import _naive

    class Textbook(ArrayKernelBlocks):  # the step as it was: whole kernel columns, then BLAS
        def block(self, rows, cols):
            return _naive("rbf", self.X[rows], self.X[cols], 10.0)

        def project(self, cols, W):
            K = self.block(slice(None), cols)
            return W.array.T @ K, np.einsum("ij,ij->j", K, K)

    gen = np.random.default_rng(5)
    X = gen.normal(size=(6000, 8))
    y = np.sin(X[:, 0]) + 0.1 * gen.normal(size=6000)
    kernel = Kernel("rbf", {"width": 10.0})
    options = {"eps": 0.0, "max_basis": 60}
    ref = run("sgma", Textbook(X, kernel), y, lam=0.1, kappa=59, rng=0, **options)
    for threads in (1, 2):
        with use_kernel_threads(threads):
            fit = run("sgma", ArrayKernelBlocks(X, kernel), y, lam=0.1, kappa=59, rng=0,
                      **options)
        np.testing.assert_array_equal(fit.basis, ref.basis)
        np.testing.assert_allclose(fit.trace["objective"], ref.trace["objective"],
                                   rtol=1e-10)
        np.testing.assert_allclose(fit.coef, ref.coef, rtol=1e-8, atol=1e-10)


def _bike_rows(n: int = 4000):
    """The first ``n`` training rows of bike split 0 in the two inputs the shared kernel learned
    on it found relevant (its other 15 length scales sat at 1e5), standardised as the pipeline
    does, with that kernel: variance 6070, σ² 1.13e-4, a signal-to-noise ratio of 5.4e7."""
    from pipeline.datasets.sources import _load_uci

    data, mask = _load_uci("bike")
    train = data[~mask[:, 0]]
    X, y = train[:, :-1], train[:, -1]
    X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    y = (y - y.mean()) / y.std()
    kernel = Kernel("rbf", {"variance": 6070.176, "lengthscales": [3.847544, 0.094445]})
    return ArrayKernelBlocks(X[:n, 15:], kernel), y[:n], 1.1288e-4


def test_a_high_signal_to_noise_kernel_keeps_every_gap_nonnegative():
    """At bike's learned kernel (variance/σ² = 5.4e7) the normal-equations form of the primal
    lost its digits: the duality gap turned negative after 52-116 basis functions and the fit
    predicted at RMSE 0.2-0.9 against the exact GP's 0.016. In QR form every step's gap is
    non-negative (002 Theorem 1) and the mean approaches the exact GP's as m grows."""
    blocks, y, lam = _bike_rows()
    X = blocks.inputs(slice(None))
    ref = exact(blocks, y, lam=lam)
    for seed in range(2):
        diffs = []
        for m in (128, 256):
            fit = sgma(blocks, y, lam=lam, kappa=59, rng=seed, max_basis=m, eps=0.0)
            assert np.all(fit.trace["gap"] >= -1e-12) and fit.summary["n_basis"] == m
            assert fit.summary["objective"] >= ref.summary["objective"]
            diffs.append(np.sqrt(np.mean((fit.predict(X) - ref.predict(X)) ** 2)))
        assert diffs[1] < diffs[0] < 0.03


def test_a_negative_duality_gap_is_a_breakdown_in_one_line(monkeypatch):
    import algorithms.sgma

    blocks, y, _, _ = make_problem(n=60, d=2, seed=0)
    monkeypatch.setattr(algorithms.sgma, "relative_gap", lambda *args: -1e-3)
    with pytest.raises(InputError, match=r"arithmetic broke down \(SGMA's duality gap turned "
                                         r"negative \(-0.001\) after 1 basis functions: "
                                         r"rounding\)"):
        sgma(blocks, y, lam=0.1, kappa=5, rng=0, max_basis=20, eps=0.0)
