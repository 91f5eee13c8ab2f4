"""The blocked Cholesky factorisation (algorithms/cholesky.py) against scipy's, and at a size
where OpenBLAS's own multithreaded dpotrf crashes on this project's hosts; the blocked
factorisation with inverse (factor_and_invert) against numpy's, and the in-place BLAS calls
it makes (algorithms/blas_inplace.py) on strided views."""

import os

import numpy as np
import pytest
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

from algorithms import blas_inplace
from algorithms.cholesky import cholesky_in_place, factor_and_invert


def spd(n: int, seed: int = 0) -> np.ndarray:
    """A well-conditioned SPD matrix: an RBF kernel matrix plus σ² = 0.1 on the diagonal."""
    X = np.random.default_rng(seed).normal(size=(n, 3))
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    return np.exp(-0.5 * sq) + 0.1 * np.eye(n)


@pytest.mark.parametrize("n,block", [(1, 4), (7, 3), (64, 64), (100, 32), (257, 64),
                                     (300, 1), (500, 128), (500, 1000)])
def test_blocked_cholesky_equals_scipys(n, block):
    K = spd(n)
    expected = sla.cholesky(K, lower=True)
    A = np.asfortranarray(np.tril(K))  # the upper triangle is not read: zeros here
    out = cholesky_in_place(A, block=block, direct=0)
    assert out is A  # in place
    L = np.tril(A)
    assert np.abs(L - expected).max() <= 1e-12 * np.abs(expected).max()
    assert np.all(np.triu(A, 1) == 0)  # the strict upper triangle stays zero


def test_garbage_in_the_upper_triangle_is_not_read():
    K = spd(200, seed=1)
    A = np.asfortranarray(K + np.triu(np.full_like(K, np.nan), 1))
    cholesky_in_place(A, block=48, direct=0)
    np.testing.assert_allclose(np.tril(A), sla.cholesky(K, lower=True), rtol=0, atol=1e-12)


def test_not_positive_definite_names_the_minor_and_bad_arrays_are_refused():
    K = spd(100)
    K[60, 60] = -1.0
    with pytest.raises(np.linalg.LinAlgError, match="61-th leading minor"):
        cholesky_in_place(np.asfortranarray(K), block=16, direct=0)
    with pytest.raises(ValueError, match="Fortran-ordered"):
        cholesky_in_place(np.ascontiguousarray(spd(10)))
    A = np.asfortranarray(np.tril(spd(300)))  # direct: one potrf, the same factor
    np.testing.assert_array_equal(np.tril(cholesky_in_place(A.copy(order="F"))),
                                  sla.cholesky(spd(300), lower=True))
    with pytest.raises(ValueError, match="block=0"):
        cholesky_in_place(np.asfortranarray(spd(10)), block=0)


@pytest.mark.slow
def test_blocked_cholesky_survives_where_openblas_potrf_crashes():
    """n = 16 500 with the default threads: LAPACK's potrf on the whole matrix dies with SIGSEGV
    here from n ≈ 16 400 for any SPD matrix (OpenBLAS 0.3.30/0.3.31, AVX-512); the blocked
    factorisation completes and its factor reproduces A = ZZᵀ/64 + I (a GEMM: cheap to build;
    checked on 200 rows: ‖(LLᵀ − A)[rows]‖ / ‖A‖). The default threads are every core: under
    pytest-xdist each worker computes on one BLAS thread (tests/conftest.py), where potrf does
    not crash, so the factorisation is given every core again here."""
    n = 16_500
    Z = np.random.default_rng(0).standard_normal((n, 64))
    A = (Z @ Z.T).T  # symmetric: its transpose is the Fortran-ordered matrix, no copy
    A /= 64.0
    A.flat[:: n + 1] += 1.0
    with threadpool_limits(limits=os.cpu_count() or 1, user_api="blas"):
        cholesky_in_place(A)
    # the factor is A's lower triangle (its upper one still holds A): (LLᵀ)[rows] = L[rows]Lᵀ,
    # formed by row blocks of L (no second n×n array)
    rows = np.sort(np.random.default_rng(1).choice(n, 200, replace=False))
    L_rows = np.where(np.arange(n)[None, :] <= rows[:, None], A[rows], 0.0)
    product = np.empty((n, len(rows)))
    for lo in range(0, n, 2048):
        product[lo: lo + 2048] = np.tril(A[lo: lo + 2048], lo) @ L_rows.T
    expected = Z[rows] @ Z.T / 64.0
    expected[np.arange(len(rows)), rows] += 1.0
    assert np.isfinite(product).all()
    assert np.abs(product.T - expected).max() <= 1e-10 * np.abs(expected).max()


@pytest.mark.parametrize("n,block", [(1, 4), (2, 1), (7, 3), (64, 64), (257, 64), (300, 256),
                                     (513, 256), (500, 1000)])
def test_factor_and_invert_equals_numpys_inverse_and_solve(n, block):
    """The lower triangle becomes K⁻¹, the returned diagonal is L's and the solution K⁻¹y's;
    the strict upper triangle (where the marginal likelihood keeps K) is left as it was."""
    K = spd(n, seed=n)
    y = np.random.default_rng(n).normal(size=n)
    A = np.asfortranarray(K + np.triu(np.full((n, n), 7.0), 1))  # the upper triangle: garbage
    upper = np.triu(A, 1).copy()
    diagonal, x = factor_and_invert(A, y, block=block)
    inverse = np.tril(A) + np.tril(A, -1).T
    expected = np.linalg.inv(K)
    assert np.abs(inverse - expected).max() <= 1e-12 * np.abs(expected).max()
    assert np.abs(diagonal - np.diag(np.linalg.cholesky(K))).max() <= 1e-13
    assert np.abs(x - np.linalg.solve(K, y)).max() <= 1e-12 * np.abs(x).max()
    assert np.array_equal(np.triu(A, 1), upper)


def test_factor_and_invert_names_the_minor_and_refuses_bad_arrays():
    K = spd(600)
    K[400, 400] = -1.0
    with pytest.raises(np.linalg.LinAlgError, match="401-th leading minor"):
        factor_and_invert(np.asfortranarray(K), np.ones(600), block=256)
    with pytest.raises(ValueError, match="Fortran-ordered"):
        factor_and_invert(np.ascontiguousarray(spd(5)), np.ones(5))


def test_in_place_blas_writes_strided_views_and_refuses_row_major_ones():
    rng = np.random.default_rng(0)
    A, B, C = (np.asfortranarray(rng.normal(size=(50, 60))) for _ in range(3))
    a, b, c = A[3:20, 5:30], B[2:27, 1:12], C[10:27, 40:51]
    expected = 2.0 * a @ b + 0.5 * c
    before = C.copy()
    blas_inplace.gemm(2.0, a, b, 0.5, c)
    assert np.abs(c - expected).max() <= 1e-13
    outside = np.ones_like(C, dtype=bool)
    outside[10:27, 40:51] = False
    assert np.array_equal(C[outside], before[outside])  # nothing written outside the view
    with pytest.raises(ValueError, match="column-major"):
        blas_inplace.gemm(1.0, np.ascontiguousarray(a), b, 0.0, c)
    with pytest.raises(ValueError, match="gemm shapes"):
        blas_inplace.gemm(1.0, a, b[:, :3], 0.0, c)


def test_the_exact_benchmark_writes_its_figures_at_small_size(tmp_path, monkeypatch):
    """python -m pipeline.bench.exact size=small: GFLOP/s of the blocked factorisation,
    scipy's on one and on every thread, the same run's GEMM; the factors agree."""
    import json

    from pipeline.bench.exact import main

    monkeypatch.chdir(tmp_path)
    assert main(["size=small"]) == 0
    out = tmp_path / "outputs" / "bench_exact_small"
    figures = json.loads((out / "figures.json").read_text())
    assert [r["n"] for r in figures["rows"]] == [500, 1000, 2000]
    for row in figures["rows"]:
        assert row["blocked_gflops"] > 0 and row["scipy_1_thread_gflops"] > 0
        assert row["max_rel_diff_vs_scipy"] <= 1e-12
    assert figures["gemm_gflops"] > 0 and (out / "cholesky_gflops.png").stat().st_size > 10000
    assert main(["size=huge"]) == 2
