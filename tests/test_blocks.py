import numpy as np
import pytest

from algorithms import ArrayKernelBlocks, InputError, Kernel
from pipeline.blocks.store import open_blocks
from pipeline.datasets import ingest, load_arrays


def test_store_blocks_equal_in_memory_blocks(tmp_path):
    store = ingest({"name": "friedman1", "n_train": 300, "n_test": 10}, tmp_path)
    X, _, X_test, _ = load_arrays(store)
    kernel = Kernel("matern32", {"mu": 0.7})
    blocks, ref = open_blocks(store, kernel), ArrayKernelBlocks(X, kernel)
    rows, cols = np.array([5, 0, 299]), np.arange(40, 90)
    np.testing.assert_array_equal(blocks.block(rows, cols), ref.block(rows, cols))
    np.testing.assert_array_equal(blocks.diag(), ref.diag())
    np.testing.assert_array_equal(blocks.cross(X_test, cols), ref.cross(X_test, cols))
    lazy = blocks.lazy_matrix(row_chunk=64)
    assert lazy.shape == (300, 300) and lazy.chunks[0][0] == 64
    np.testing.assert_allclose(lazy[100:170].compute(), kernel(X[100:170], X), atol=1e-15)


def test_store_blocks_refuse_a_kernel_that_overflows(tmp_path):
    store = ingest({"name": "friedman1", "n_train": 30, "n_test": 5}, tmp_path)
    kernel = Kernel("polynomial", {"degree": 800})  # (⟨x,x'⟩ + 1)^800 overflows on U(0,1)^10
    blocks = open_blocks(store, kernel)
    for compute in (lambda: blocks.block(slice(None), [0, 1]), blocks.diag,
                    lambda: blocks.lazy_matrix(row_chunk=10)[:10].compute()):
        with pytest.raises(InputError, match=r"kernel polynomial\(c=1\.0, degree=800\) is "
                                             r"NaN/inf for \d+ of \d+ values"):
            compute()


def test_every_blocks_choice_has_a_provider_module_and_no_more():
    """pipeline.blocks' registry and the ``blocks`` key's check name the same providers, and
    each registered module provides its blocks (``provide``)."""
    import importlib

    from pipeline.blocks import PROVIDERS
    from pipeline.config.keys import BLOCKS

    assert set(PROVIDERS) == set(BLOCKS)
    for module in PROVIDERS.values():
        assert callable(importlib.import_module(module).provide)
