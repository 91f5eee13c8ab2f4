"""Sparse algorithms never form the n×n kernel matrix: SGMA on n = 200000 through the store."""

import resource
import tracemalloc

import numpy as np
import pytest

from algorithms import Kernel, run
from pipeline.blocks import open_blocks
from pipeline.datasets import ingest, load_arrays

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
