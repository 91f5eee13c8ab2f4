import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, DotProduct, Matern

from algorithms import REGISTRY, ArrayKernelBlocks, InputError, Kernel, run
from algorithms.evaluation import check_size
from pipeline.job.run import run_job
from tests.conftest import make_problem

CASES = [
    (Kernel("rbf", {"width": 2.0}), RBF(1.0)),
    (Kernel("rbf", {"width": 10.0}), RBF(np.sqrt(5.0))),
    (Kernel("matern32", {"mu": 0.8}), Matern(0.8 * np.sqrt(3), nu=1.5)),
    (Kernel("linear"), DotProduct(sigma_0=0.0, sigma_0_bounds="fixed")),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lam", [0.01, 0.5])
def test_exact_equals_sklearn(case, seed, lam):
    kernel, sk_kernel = CASES[case]
    blocks, y, X_test, _ = make_problem(n=80, d=4, seed=seed, kernel=kernel)
    fit = run("exact", blocks, y, lam=lam)
    ref = GaussianProcessRegressor(sk_kernel, alpha=lam, optimizer=None).fit(blocks.X, y)
    mean, std = ref.predict(X_test, return_std=True)
    var_lo, var_hi = fit.variance_bounds(X_test)
    np.testing.assert_allclose(fit.predict(X_test), mean, rtol=1e-8, atol=1e-8)
    # sklearn's std is the latent f's; ours is the variance of y (adds σ²)
    np.testing.assert_allclose(var_lo - lam, std**2, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(var_lo, var_hi)
    assert fit.summary["log_marginal_likelihood"] == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-8, abs=1e-8)
    assert abs(fit.summary["gap"]) < 1e-10


def test_exact_refuses_huge_n():
    blocks, y, _, _ = make_problem(n=50)
    with pytest.raises(InputError, match=r"^algorithm exact: n_train=50 exceeds algorithm\.max_n="
                                         r"10 \(a fit needs 64\.0 MiB of memory\); use "
                                         r"algorithm=cg \(PCG.*\), a sparse algorithm, .* or "
                                         r"raise algorithm\.max_n$"):
        run("exact", blocks, y, lam=0.1, max_n=10)
    with pytest.raises(InputError, match="algorithm exact has no option 'eps'; its options: "
                                         "max_n") as err:
        run("exact", blocks, y, lam=0.1, eps=0.1)
    assert "\n" not in str(err.value)


def test_singular_k_plus_lam_is_one_line_naming_lam_and_kernel():
    X = np.random.default_rng(0).uniform(size=(40, 1))  # K is numerically singular
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 10.0}))
    y = np.sin(6 * X[:, 0])
    with pytest.raises(InputError, match=r"^algorithm exact: the arithmetic broke down \(.*not "
                                         r"positive definite\) with lam=3e-16 and kernel "
                                         r"rbf\(width=10\.0\); pass a larger lam, e\.g\. "
                                         r"lam=0\.001 \(max k\(x,x\) = 1\)$"):
        run("exact", blocks, y, lam=3e-16)  # just above float64 resolution, Cholesky fails


def test_memory_need_is_the_measured_one_matrix_and_is_checked_against_available():
    spec = REGISTRY["exact"]
    # L, factored in place over K + σ²I (up to 8192 rows by one potrf), plus X and one
    # streamed block of kernel values
    # (exact.py docstring: n²·8 + 37 MiB measured; 64 MiB declared for the block)
    assert spec.memory_bytes(4000, 10, {}) == 8 * (4000**2 + 4000 * 10) + 2 * 2**25
    check_size(spec, 4000, 10, {"max_n": 20000}, available=2 * 4000**2 * 8)  # fits: no error
    with pytest.raises(InputError, match=r"^algorithm exact: a fit on n_train=4000 needs "
                                         r"186\.4 MiB of memory but 122\.1 MiB is available; "
                                         r"use algorithm=cg \(PCG: .* O\(n·block\) memory; .*\), "
                                         r"a sparse algorithm or fewer training points"):
        check_size(spec, 4000, 10, {"max_n": 20000}, available=4000**2 * 8)
    check_size(REGISTRY["sgma"], 10**7, 10, {})  # sparse: nothing declared, nothing refused


@pytest.mark.parametrize("options,fragment", [
    ({"max_n": 20000}, "n_train=2000000 exceeds algorithm.max_n=20000 (a fit needs 29803.2 GiB"),
    ({}, "a fit on n_train=2000000 needs 29803.2 GiB of memory but"),  # default: memory only
])
def test_a_job_too_large_for_exact_is_refused_before_its_data_are_ingested(tmp_path, options,
                                                                             fragment):
    config = {"algorithm": {"name": "exact", **options},
              "dataset": {"name": "gaussian_bumps", "n_train": 2_000_000},
              "kernel": {"name": "rbf", "width": 10.0}, "lam": 0.1, "kappa": 5, "seed": 0,
              "store_root": str(tmp_path / "stores")}
    with pytest.raises(InputError) as err:
        run_job(config, tmp_path / "result.nc")  # would generate 2e6 × 20 inputs first
    assert str(err.value).startswith(f"algorithm exact: {fragment}")
    assert not (tmp_path / "stores").exists() and not (tmp_path / "result.nc").exists()


def test_keggundirected_is_sized_by_its_distinct_inputs_before_its_ingest(tmp_path,
                                                                           monkeypatch):
    """keggundirected's 57 248 training rows (split 0) would need one 24.9 GiB matrix, but they
    hold 17 053 distinct inputs, which the exact GP merges (2.6 GiB): the job passes its check
    where 24 GiB is available, and where only 2 GiB is it is refused before its data are
    ingested or anything big is allocated, in one line that points to PCG."""
    import tracemalloc

    import psutil

    from pipeline.job.validate import check_config

    config = {"algorithm": {"name": "exact"},
              "dataset": {"name": "keggundirected", "split": 0},
              "kernel": {"name": "rbf", "width": 10.0}, "lam": 0.1, "kappa": 5, "seed": 0,
              "store_root": str(tmp_path / "stores")}
    check_config(config, available=24 * 2**30)
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=2 * 2**30))
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as err:
            run_job(config, tmp_path / "result.nc")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(err.value) == (
        "algorithm exact: a fit on n_train=57248 (17053 distinct inputs) needs 2.6 GiB of "
        "memory but 2.0 GiB is available; use algorithm=cg (PCG: the same GP by conjugate "
        "gradients in O(n·block) memory; algorithm.error_bars=true for its variances), a "
        "sparse algorithm or fewer training points (dataset.n_train)")
    assert peak < 64 * 2**20  # nothing n×n: the 63 608 × 28 data read to count the inputs
    assert not (tmp_path / "stores").exists() and not (tmp_path / "result.nc").exists()
    check_size(REGISTRY["cg"], 57248, 27, {"max_n": REGISTRY["cg"].options["max_n"].default})


def _with_repeats(seed: int, n_distinct: int = 60, n: int = 150):
    """Inputs drawn with replacement from n_distinct points (every count from 1 up), targets
    with independent noise: the case the exact GP merges (algorithms/exact.py)."""
    rng = np.random.default_rng(seed)
    X_d = rng.normal(size=(n_distinct, 3))
    rows = np.concatenate([np.arange(n_distinct), rng.integers(0, n_distinct, n - n_distinct)])
    rng.shuffle(rows)
    X = X_d[rows]
    y = np.sin(X.sum(axis=1)) + 0.3 * rng.normal(size=n)
    return X, y, rng.normal(size=(40, 3))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lam", [0.01, 0.5])
def test_repeated_inputs_merged_equal_the_full_row_cholesky(seed, lam):
    X, y, X_test = _with_repeats(seed)
    kernel = Kernel("rbf", {"width": 2.0})
    fit = run("exact", ArrayKernelBlocks(X, kernel), y, lam=lam)
    # the dense closed form on all n rows, repeats and all
    K = kernel(X, X)
    L = np.linalg.cholesky(K + lam * np.eye(len(y)))
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    K_star = kernel(X_test, X)
    V = np.linalg.solve(L, K_star.T)
    log_ml = -0.5 * y @ alpha - np.log(np.diag(L)).sum() - 0.5 * len(y) * np.log(2 * np.pi)
    n_distinct = len(np.unique(X, axis=0))
    assert fit.summary["merged_rows"] == len(y) - n_distinct > 0
    assert fit.summary["n_basis"] == len(fit.basis) == n_distinct
    np.testing.assert_array_equal(X[fit.basis], np.unique(X, axis=0)[
        np.argsort(np.unique(X, axis=0, return_index=True)[1])])  # first occurrences, in order
    np.testing.assert_allclose(fit.predict(X_test), K_star @ alpha, rtol=1e-9, atol=1e-10)
    var_lo, var_hi = fit.variance_bounds(X_test)
    np.testing.assert_allclose(var_hi, 1.0 + lam - (V * V).sum(axis=0), rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(var_lo, var_hi)
    assert fit.summary["log_marginal_likelihood"] == pytest.approx(log_ml, rel=1e-10)
    Kalpha = K @ alpha  # the objectives are those of the α of all n rows
    primal = -y @ Kalpha + 0.5 * (lam * alpha @ Kalpha + Kalpha @ Kalpha)
    dual = -y @ alpha + 0.5 * (lam * alpha @ alpha + alpha @ Kalpha)
    assert fit.summary["objective"] == pytest.approx(primal, rel=1e-9)
    assert fit.summary["dual_objective"] == pytest.approx(dual, rel=1e-9)


def test_without_repeats_nothing_is_merged():
    blocks, y, X_test, _ = make_problem(n=80, d=4, seed=0)
    fit = run("exact", blocks, y, lam=0.1)
    assert fit.summary["merged_rows"] == 0
    np.testing.assert_array_equal(fit.basis, np.arange(80))


def test_memory_and_max_n_are_of_the_distinct_inputs():
    spec = REGISTRY["exact"]
    assert spec.distinct_inputs
    # 57 248 rows need 24.9 GiB, their 17 053 distinct inputs 2.6 GiB
    check_size(spec, 57248, 27, {"max_n": None}, available=4 * 2**30, distinct=17053)
    with pytest.raises(InputError, match=r"^algorithm exact: a fit on n_train=57248 \(17053 "
                                         r"distinct inputs\) needs 2\.6 GiB of memory but "
                                         r"1\.0 GiB is available; use algorithm=cg"):
        check_size(spec, 57248, 27, {"max_n": None}, available=2**30, distinct=17053)
    with pytest.raises(InputError, match=r"^algorithm exact: a fit on n_train=57248 needs"):
        check_size(spec, 57248, 27, {"max_n": None}, available=4 * 2**30)  # not known: n
    X, y, _ = _with_repeats(0)  # 150 rows, 60 distinct inputs: refused by max_n of those
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 2.0}))
    run("exact", blocks, y, lam=0.1, max_n=60)
    with pytest.raises(InputError, match=r"n_train=150 \(60 distinct inputs\) exceeds "
                                         r"algorithm\.max_n=59"):
        run("exact", blocks, y, lam=0.1, max_n=59)
