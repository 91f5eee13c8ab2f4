"""Memory: sparse algorithms never form the n×n kernel matrix (SGMA on n = 200000 through the
store); the exact GP holds one n×n matrix, not three (algorithms/exact.py docstring)."""

import resource
import tracemalloc

import numpy as np
import pytest

from algorithms import REGISTRY, Kernel, run
from algorithms.certificate import certify
from pipeline.blocks.store import open_blocks
from pipeline.datasets import ingest, load_arrays
from tests.conftest import make_problem

N = 200_000


@pytest.mark.slow
def test_sgma_memory_stays_far_below_n_squared(tmp_path):
    store = ingest({"name": "friedman1", "n_train": N, "n_test": 100}, tmp_path)
    _, y, X_test, y_test = load_arrays(store)
    blocks = open_blocks(store, Kernel("rbf", {"width": 10.0}))
    tracemalloc.start()
    fit = run("sgma", blocks, y, lam=1.0, kappa=59, rng=np.random.default_rng(0), eps=0.0,
              max_basis=100, test=(X_test, y_test), eval_every=50)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    dense = N * N * 8
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(f"\nSGMA n={N}, t=100, κ=59: tracemalloc peak {peak / 2**20:.0f} MiB, "
          f"process peak RSS {peak_rss / 2**20:.0f} MiB, n²·8 = {dense / 2**30:.0f} GiB "
          f"(ratio {peak / dense:.2e})")
    assert fit.summary["n_basis"] == 100
    assert np.isfinite(fit.summary["test_rmse"])
    # K_{:S} (n×t) plus the candidate block K_{:M} (n×κ) and their temporaries: O(n(t+κ))
    assert peak < 8 * N * (100 + 59) * 8
    assert peak < dense / 500
    assert peak_rss < dense / 50


def test_exact_gp_peaks_at_one_n_by_n_matrix():
    """K + σ²I is factored in place and everything after streams kernel rows in blocks: the fit
    with its test evaluation peaks at one n×n matrix plus O(n·block), not at K, K + σ²I and L
    (3·n²·8 before), and the certificate that follows stays within the declared memory."""
    n, d = 3000, 10
    blocks, y, X_test, y_test = make_problem(n=n, d=d, n_test=500,
                                             kernel=Kernel("rbf", {"width": 10.0}))
    dense = n * n * 8
    tracemalloc.start()
    try:
        fit = run("exact", blocks, y, lam=0.1, test=(X_test, y_test))
        _, fit_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        cert = certify(blocks, y, 0.1, fit.basis, fit.coef, rng=np.random.default_rng(0),
                       dual_objective=fit.summary["dual_objective"])
        _, cert_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"\nexact n={n}: fit + test evaluation peak {fit_peak / dense:.3f}·n²·8, "
          f"with the certificate {cert_peak / dense:.3f}·n²·8")
    assert np.isfinite(fit.summary["test_nlpd"]) and cert["gap_certified"] < 1e-3
    assert fit_peak < 1.3 * dense
    assert max(fit_peak, cert_peak) <= REGISTRY["exact"].memory_bytes(n, d, {})
