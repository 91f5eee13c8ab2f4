"""Kernel blocks over a dataset's zarr store.

The training inputs are opened lazily from the store as a dask array (so a worker reads them
from the store path, never from the task graph) and materialised once as an (n, d) array on
first use: n·d·8 bytes, never n²·8. Blocks K[rows, cols] are computed on demand by
:class:`algorithms.kernel_blocks.ArrayKernelBlocks`; :meth:`ZarrKernelBlocks.lazy_matrix` offers the
whole K as a lazy dask array for methods that want to stream over it in row blocks.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from algorithms.kernel_blocks import ArrayKernelBlocks
from algorithms.kernels import Kernel
from pipeline.blocks import BlocksJob
from pipeline.datasets import fingerprint, read_store
from pipeline.datasets.store import StoreArrays

if TYPE_CHECKING:
    import dask.array as da

# A worker runs many jobs on one small store: it is read into memory once per process and
# kept (read-only) while none of its files changes; larger stores stay lazy (zarr arrays).
IN_MEMORY_BYTES = 256 << 20
IN_MEMORY_STORES = 4
_in_memory: OrderedDict[Path, tuple[tuple, StoreArrays]] = OrderedDict()


def open_dataset_cached(store: str | PathLike, verify: bool) -> StoreArrays:
    """The dataset store at ``store`` (:func:`~pipeline.datasets.store.read_store`, zarr
    alone): verified and read lazily when ``verify``; else a small store (≤
    :data:`IN_MEMORY_BYTES`) is read into memory once per process and kept while none of its
    files changes, a larger one read lazily."""
    if verify:
        return read_store(store, verify=True)
    path = Path(store)
    stamp = fingerprint(path)
    hit = _in_memory.get(path)
    if hit is not None and hit[0] == stamp:
        _in_memory.move_to_end(path)
        return hit[1]
    arrays = read_store(path, verify=False)
    if arrays.nbytes > IN_MEMORY_BYTES:
        return arrays
    arrays = arrays.load()  # read-only: shared by the jobs, a write would be a bug
    _in_memory[path] = (stamp, arrays)
    while len(_in_memory) > IN_MEMORY_STORES:
        _in_memory.popitem(last=False)
    return arrays


class ZarrKernelBlocks(ArrayKernelBlocks):
    """Kernel blocks of ``X_train`` in a verified dataset store."""

    def __init__(self, store: str | PathLike, kernel: Kernel, *, verify: bool = True) -> None:
        self.store = store
        self.dataset = open_dataset_cached(store, verify)
        super().__init__(self.dataset["X_train"], kernel)

    def lazy_matrix(self, row_chunk: int | None = None) -> da.Array:
        """K as a lazy (n, n) dask array in row blocks of ``row_chunk`` rows (≈128 MB each)."""
        import dask.array as da  # here: dask.array (with scipy.fft) is ~0.1 s of import

        rows = row_chunk or max(1, min(self.n, 2**24 // max(self.n, 1)))
        X = da.from_array(self.X, chunks=(rows, self.d))
        X_all = self.X
        kernel = self.kernel

        def kernel_rows(block: np.ndarray) -> np.ndarray:
            return kernel(block, X_all)

        return X.map_blocks(kernel_rows, chunks=(X.chunks[0], (self.n,)), dtype=np.float64)


@contextlib.contextmanager
def provide(job: BlocksJob, store: Path, kernel: Kernel) -> Iterator[ZarrKernelBlocks]:
    """``blocks=memory`` (:mod:`pipeline.blocks`): the kernel blocks over the store's training
    rows in this process (the store verified by :func:`~pipeline.datasets.ingest` just
    before)."""
    yield open_blocks(store, kernel, verify=False)


def open_blocks(store: str | PathLike, kernel: Kernel, *, verify: bool = True
                ) -> ZarrKernelBlocks:
    """Kernel blocks over the training inputs of the dataset store at ``store``
    (``verify=False`` skips re-hashing a store that :func:`ingest` has just verified)."""
    return ZarrKernelBlocks(store, kernel, verify=verify)
