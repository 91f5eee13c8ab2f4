"""Conjugate gradient (Gibbs & MacKay; 004 Table 1, column 2) against dense references: the
exact α = (K + σ²I)⁻¹y, the exact predictive variance and its Theorem-2 bracket, the dense
Woodbury preconditioner, and the preconditioner's effect on abalone."""

import numpy as np
import pytest
import scipy.linalg as sla

from algorithms import ArrayKernelBlocks, Kernel, run
from algorithms.cg import make_preconditioner
from algorithms.lowrank import PartialCholesky
from algorithms.objectives import dual_objective, primal_objective
from pipeline.datasets import build
from tests.conftest import make_problem

PRECONDITIONERS = ["none", "jacobi", "pivoted_cholesky"]


def dense(blocks):
    return blocks.block(slice(None), slice(None))


@pytest.mark.parametrize("preconditioner", PRECONDITIONERS)
def test_converges_to_the_exact_alpha(preconditioner):
    blocks, y, X_test, y_test = make_problem(n=300, d=3)
    lam = 1.0  # cond(K + σ²I) is a few hundred: well conditioned
    K = dense(blocks)
    alpha = sla.cho_solve(sla.cho_factor(K + lam * np.eye(blocks.n)), y)
    fit = run("cg", blocks, y, lam=lam, tol=1e-13, preconditioner=preconditioner,
              precond_rank=20, test=(X_test, y_test))
    np.testing.assert_allclose(fit.coef, alpha, rtol=0, atol=1e-8 * np.abs(alpha).max())
    s = fit.summary
    assert s["stop_reason"] == "residual ≤ tol = 1e-13"
    assert s["residual"] <= 1e-13 and s["residual_true"] < 1e-11
    assert s["iterations"] == len(fit.trace["iteration"]) == fit.trace["iteration"][-1]
    np.testing.assert_array_equal(fit.trace["iteration"], np.arange(1, s["iterations"] + 1))
    assert fit.trace["residual"][-1] == s["residual"]
    # the traced L and L* of the last iterate are the dense ones (004 eqs. 78, 79)
    assert s["objective"] == pytest.approx(primal_objective(K @ alpha, alpha, y, lam), rel=1e-10)
    assert s["dual_objective"] == pytest.approx(dual_objective(K @ alpha, alpha, y, lam),
                                                rel=1e-10)
    assert s["gap"] < 1e-10
    exact = run("exact", blocks, y, lam=lam, test=(X_test, y_test))
    assert s["test_rmse"] == pytest.approx(exact.summary["test_rmse"], rel=1e-9)


def test_max_iter_stops_with_the_true_residual_and_objective():
    blocks, y, _, _ = make_problem(n=200, d=3)
    lam = 0.1
    K = dense(blocks)
    fit = run("cg", blocks, y, lam=lam, max_iter=12, tol=1e-14)
    assert fit.summary["iterations"] == 12
    assert fit.summary["stop_reason"].startswith("max_iter = 12 reached with residual")
    alpha = fit.coef
    r_true = np.linalg.norm(y - (K + lam * np.eye(blocks.n)) @ alpha) / np.linalg.norm(y)
    assert fit.summary["residual_true"] == pytest.approx(r_true, rel=1e-6)
    assert fit.summary["objective"] == pytest.approx(primal_objective(K @ alpha, alpha, y, lam),
                                                     rel=1e-9)
    assert fit.trace["objective"][-1] == fit.summary["objective"]
    assert len(fit.trace["residual"]) == 12 and fit.trace["residual"][-1] > 1e-14


class CountingBlocks(ArrayKernelBlocks):
    """Kernel blocks that remember the largest block asked for."""

    largest = 0

    def block(self, rows, cols):
        out = super().block(rows, cols)
        CountingBlocks.largest = max(CountingBlocks.largest, out.size)
        return out

    def cross(self, X_new, cols):
        out = super().cross(X_new, cols)
        CountingBlocks.largest = max(CountingBlocks.largest, out.size)
        return out


def test_matrix_free_never_forms_n_by_n():
    base, y, X_test, y_test = make_problem(n=400, d=3)
    blocks = CountingBlocks(base.inputs(slice(None)), base.kernel)
    rows = 16
    CountingBlocks.largest = 0
    fit = run("cg", blocks, y, lam=0.1, block_bytes=8 * blocks.n * rows, error_bars=True,
              var_batch=8, preconditioner="pivoted_cholesky", precond_rank=10,
              hold_kernel="never", test=(X_test, y_test))
    assert fit.summary["stop_reason"] == "residual ≤ tol = 1e-06"
    assert 0 < CountingBlocks.largest <= rows * blocks.n
    assert fit.summary["kernel_held_bytes"] == 0


@pytest.mark.parametrize("error_bars", [False, True])
def test_a_held_kernel_gives_the_matrix_free_fit(error_bars):
    """``hold_kernel=auto`` (the default, K fits) forms K at the first product and multiplies
    by it after: the same iterations, objectives and solution as the matrix-free products to
    round-off, and the same error bars; K is dropped at the end unless the error bars need it.
    The two products differ by round-off (a held row is summed in one pass, a tile's by blocks of
    columns), which CG's path amplifies: here the objectives part by up to 2e-6 mid-way and
    meet again at the solution, as two runs of any Krylov method on perturbed products do."""
    base, y, X_test, y_test = make_problem(n=400, d=3)
    X = base.inputs(slice(None))
    options = {"lam": 1.0, "tol": 1e-9, "error_bars": error_bars, "var_tol": 1e-9,
               "precond_rank": 20, "test": (X_test, y_test)}
    free = run("cg", ArrayKernelBlocks(X, base.kernel), y, hold_kernel="never", **options)
    blocks = ArrayKernelBlocks(X, base.kernel)
    held = run("cg", blocks, y, **options)
    assert held.summary["kernel_held_bytes"] == 8 * 400 * 400
    assert blocks.held_bytes == (8 * 400 * 400 if error_bars else 0)
    assert held.summary["iterations"] == free.summary["iterations"] > 5
    assert held.summary["residual_true"] < 2e-9 and free.summary["residual_true"] < 2e-9
    for key in ("objective", "dual_objective"):  # quadratic: the iterates' error squared
        assert held.summary[key] == pytest.approx(free.summary[key], rel=1e-12)
    assert held.summary["test_rmse"] == pytest.approx(free.summary["test_rmse"], rel=1e-9)
    np.testing.assert_allclose(held.coef, free.coef, rtol=0, atol=1e-9 * np.abs(free.coef).max())
    if error_bars:
        for a, b in zip(held.variance_bounds(X_test), free.variance_bounds(X_test), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10)


def test_a_kernel_is_held_only_within_its_budget(monkeypatch):
    import algorithms.kernel_blocks as kernel_blocks

    base, _, _, _ = make_problem(n=300, d=3)
    blocks = ArrayKernelBlocks(base.inputs(slice(None)), base.kernel)
    V = np.random.default_rng(0).standard_normal((300, 3))
    free = blocks.matmul(V)
    monkeypatch.setattr(kernel_blocks, "available_memory", lambda: 2 * 8 * 300 * 300 - 2)
    assert blocks.hold(0.5) == 0  # K's bytes are one more than half of what is available
    np.testing.assert_array_equal(blocks.matmul(V), free)
    assert blocks.held_bytes == 0
    monkeypatch.setattr(kernel_blocks, "available_memory", lambda: 2 * 8 * 300 * 300)
    assert blocks.hold(0.5) == 8 * 300 * 300
    np.testing.assert_allclose(blocks.matmul(V), free, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(blocks.matmul(V[:, 0]), free[:, 0], rtol=1e-13, atol=1e-13)
    assert blocks.held_bytes == 8 * 300 * 300
    blocks.release()
    assert blocks.held_bytes == 0
    np.testing.assert_array_equal(blocks.matmul(V), free)


@pytest.mark.parametrize("var_tol", [1e-1, 1e-3])
def test_error_bars_bracket_the_exact_variance(var_tol):
    """A loose ``var_tol`` stops early; the bracket still holds the exact variance, and is
    narrower than var_tol relative (its stop rule, from the recursive residual)."""
    blocks, y, X_test, _ = make_problem(n=300, d=3)
    lam = 0.05
    exact = run("exact", blocks, y, lam=lam)
    fit = run("cg", blocks, y, lam=lam, error_bars=True, var_tol=var_tol)
    lower, upper = fit.variance_bounds(X_test)
    var = exact.predict_var(X_test)
    assert np.all(lower <= var * (1 + 1e-12)) and np.all(var <= upper * (1 + 1e-12))
    assert np.all(lower >= lam)
    assert 0 < np.max((upper - lower) / lower) <= var_tol * (1 + 1e-6)


def test_error_bars_equal_the_exact_variance_at_tight_tolerance():
    blocks, y, X_test, _ = make_problem(n=300, d=3)
    exact = run("exact", blocks, y, lam=0.1)
    fit = run("cg", blocks, y, lam=0.1, error_bars=True, tol=1e-12, var_tol=1e-10,
              preconditioner="pivoted_cholesky", precond_rank=30)
    lower, upper = fit.variance_bounds(X_test)
    np.testing.assert_allclose(upper, exact.predict_var(X_test), rtol=1e-8)
    np.testing.assert_allclose(lower, exact.predict_var(X_test), rtol=1e-8)


def test_error_bar_batches_are_independent_columns():
    blocks, y, X_test, _ = make_problem(n=200, d=3)
    one = run("cg", blocks, y, lam=0.1, error_bars=True, var_tol=1e-10).variance_bounds(X_test)
    split = run("cg", blocks, y, lam=0.1, error_bars=True, var_tol=1e-10,
                var_batch=4).variance_bounds(X_test)
    for a, b in zip(one, split, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9)


def test_preconditioners_are_the_dense_inverses():
    blocks, _, _, _ = make_problem(n=150, d=3)
    lam, rank = 0.1, 25
    K = dense(blocks)
    V = np.random.default_rng(1).normal(size=(blocks.n, 4))
    jacobi = make_preconditioner("jacobi", blocks, lam, rank=0)
    np.testing.assert_allclose(jacobi.apply(V), V / (np.diag(K) + lam)[:, None], rtol=1e-14)
    # M = FFᵀ + σ²I, F the greedy pivoted partial Cholesky factor of K (the same pivots as
    # LAPACK's dpstrf; test_lowrank checks the factor): Woodbury gives M⁻¹V = solve(M, V)
    precond = make_preconditioner("pivoted_cholesky", blocks, lam, rank=rank)
    assert precond.rank == rank
    chol = PartialCholesky(blocks, rank)
    while chol.t < rank:
        chol.add([chol.greedy_pivot()])
    F = chol.factor()
    M = F @ F.T + lam * np.eye(blocks.n)
    np.testing.assert_allclose(precond.apply(V), np.linalg.solve(M, V), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(precond.apply(V[:, 0]), np.linalg.solve(M, V[:, 0]), rtol=1e-9,
                               atol=1e-12)
    # K − FFᵀ is positive semidefinite, so M ≼ K + σ²I
    assert np.linalg.eigvalsh(K - F @ F.T).min() > -1e-10


@pytest.mark.parametrize("tol", [5.0, 0.5, 0.05])
def test_preconditioner_rank_follows_the_residual_trace(tol):
    """Pivots in blocks until tr(K − FFᵀ) ≤ tol·n·σ²: the trace falls at every block, the
    first block below tol is the last, and M = FFᵀ + σ²I (recovered densely from M⁻¹) has
    K + σ²I − M = K − FFᵀ positive semidefinite with the recorded trace."""
    blocks, _, _, _ = make_problem(n=300, d=3)
    lam, n = 0.01, blocks.n
    K = dense(blocks)
    precond = make_preconditioner("pivoted_cholesky", blocks, lam, rank=n, tol=tol)
    ranks, traces = zip(*precond.trace, strict=True)
    assert ranks[0] == 0 and traces[0] == pytest.approx(np.trace(K) / (n * lam))
    assert all(b < a for a, b in zip(traces, traces[1:], strict=False))
    assert traces[-1] <= tol < traces[-2] and precond.rank == ranks[-1] < n
    M = np.linalg.inv(precond.apply(np.eye(n)))
    E = K + lam * np.eye(n) - M  # K − FFᵀ
    assert np.trace(E) / (n * lam) == pytest.approx(traces[-1], rel=1e-6, abs=1e-9)
    assert np.linalg.eigvalsh((E + E.T) / 2).min() > -1e-8


def test_the_default_pcg_reaches_the_exact_fit_in_few_iterations_where_plain_cg_crawls():
    """The default (pivoted-Cholesky, rank from the residual trace) against plain CG on an
    ill-conditioned problem (σ² = 1e-3 beside a unit kernel variance)."""
    blocks, y, X_test, y_test = make_problem(n=1500, d=2)
    exact = run("exact", blocks, y, lam=1e-3, test=(X_test, y_test))
    default = run("cg", blocks, y, lam=1e-3, tol=1e-6, test=(X_test, y_test))
    plain = run("cg", blocks, y, lam=1e-3, tol=1e-6, preconditioner="none", max_iter=2000,
                test=(X_test, y_test))
    assert default.summary["preconditioner"] == "pivoted_cholesky"
    assert default.summary["precond_trace"] <= 2.0
    print(f"\niterations to 1e-6: default {default.summary['iterations']} (rank "
          f"{default.summary['precond_rank']}), plain {plain.summary['iterations']}")
    assert default.summary["iterations"] * 5 < plain.summary["iterations"]
    np.testing.assert_allclose(default.coef, exact.coef, rtol=1e-3, atol=1e-3 * abs(
        exact.coef).max())
    assert default.summary["test_rmse"] == pytest.approx(exact.summary["test_rmse"], rel=1e-4)
    assert np.isfinite(default.trace["residual"]).all()  # one residual per iteration
    assert len(default.trace["residual"]) == default.summary["iterations"]


@pytest.fixture(scope="module")
def abalone_blocks():
    arrays, _ = build({"name": "abalone"})
    return ArrayKernelBlocks(arrays["X_train"], Kernel("rbf", {"width": 10.0})), arrays["y_train"]


def test_pivoted_cholesky_preconditioner_cuts_iterations_on_abalone(abalone_blocks):
    """Abalone, n = 4000, rbf 2ω² = 10, σ² = 0.1, tol 1e-6 (measured: 149 plain, 151 Jacobi,
    17 with the rank-100 pivoted-Cholesky preconditioner). Jacobi is M = (1 + σ²)I for the rbf
    kernel's unit diagonal, so it cannot help; its count equals plain CG's up to round-off."""
    blocks, y = abalone_blocks
    counts = {}
    for name in PRECONDITIONERS:
        fit = run("cg", blocks, y, lam=0.1, preconditioner=name, max_iter=1000)
        assert fit.summary["stop_reason"] == "residual ≤ tol = 1e-06"
        assert fit.summary["residual_true"] < 2e-6
        counts[name] = fit.summary["iterations"]
    print(f"\nCG iterations on abalone (n = 4000, σ² = 0.1, tol 1e-6): {counts}")
    assert counts["pivoted_cholesky"] * 4 < counts["none"]
    assert abs(counts["jacobi"] - counts["none"]) <= 0.05 * counts["none"]


# kin40k split 0, its first 2000 training rows (standardised): the ARD RBF kernel and σ² that
# maximise their marginal likelihood (algorithms.hyper.learn, ard=True, median start, no
# restarts; log ML −558.54, 17 L-BFGS-B iterations), rounded to 4-5 digits
KIN40K_2000 = {"variance": 1.477, "lengthscales": [2.886, 2.710, 1.4005, 1.7477, 1.6693,
                                                    1.3643, 1.3395, 1.9355]}
KIN40K_2000_LAM = 0.00777


def test_pcg_variance_equals_cholesky_on_a_real_set_at_default_options():
    """At the options a user gets (tol 1e-6, var_tol 1e-7, var_batch 256, the default
    preconditioner) with error_bars=true, on a realistic problem — kin40k's first 2000
    training rows, its learned ARD kernel (σ² = 0.0078: variances 0.012-0.39) and 300 of its
    test rows — both Theorem-2 bounds and the variance the evaluator scores (the upper one)
    equal the dense Cholesky predictive variance (algorithms/exact.py) to 1e-6 relative, and
    so do the scored NLPDs. The former stop rule ‖r‖ ≤ tol·‖k‖ left the lower bound 1.3e-6
    off here (and its error grows with n, as ‖k‖² does)."""
    arrays, _ = build({"name": "kin40k", "split": 0, "n_train": 2000})
    X, y = arrays["X_train"], arrays["y_train"]
    test = (arrays["X_test"][:300], arrays["y_test"][:300])
    blocks = ArrayKernelBlocks(X, Kernel("rbf", KIN40K_2000))
    exact = run("exact", blocks, y, lam=KIN40K_2000_LAM, test=test)
    fit = run("cg", blocks, y, lam=KIN40K_2000_LAM, error_bars=True, test=test)
    var = exact.solution.variance_bounds(test[0])[1]
    lower, upper = fit.solution.variance_bounds(test[0])
    assert 0.01 < var.min() and var.max() < 0.4  # a realistic spread above σ²
    assert np.max(np.abs(lower - var) / var) <= 1e-6
    assert np.max(np.abs(upper - var) / var) <= 1e-6
    assert np.all(lower <= var * (1 + 1e-12)) and np.all(var <= upper * (1 + 1e-12))
    for key in ("test_nlpd", "test_rmse"):
        assert fit.summary[key] == pytest.approx(exact.summary[key], rel=1e-6), key


def test_the_peer_cg_benchmark_writes_its_figures_at_small_size(tmp_path, monkeypatch):
    """python -m pipeline.bench.cg_peer size=small: our PCG and GPyTorch's CG solve the same
    system (their test means agree to the tolerance's order), each timed, their ratio
    recorded, GPyTorch's non-convergence warnings kept, the figure drawn."""
    import json

    from pipeline.bench.cg_peer import main

    monkeypatch.chdir(tmp_path)
    assert main(["size=small"]) == 0
    out = tmp_path / "outputs" / "bench_cg_peer_small"
    figures = json.loads((out / "figures.json").read_text())
    assert [row["n"] for row in figures["rows"]] == [1000, 2000]
    for row in figures["rows"]:
        # one timed run of each (repeats: 1), their ratio recorded; never a bound on a time
        assert len(row["ours_seconds"]) == len(row["gpytorch_seconds"]) == 1
        assert np.isfinite(row["ratio"])
        assert row["residual_true"] <= 1e-6 and row["iterations"] >= 1
        assert row["mean_difference"] < 1e-4  # the same solve, each to 1e-6
        assert isinstance(row["gpytorch_warnings"], list) and row["gpytorch_products"] >= 2
    assert (out / "cg_peer.png").stat().st_size > 10000
    assert main(["size=huge"]) == 2
