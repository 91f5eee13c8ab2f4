"""The in-memory kernel-block provider (:class:`ArrayKernelBlocks`: blocks, diagonals,
projections, growing kernel and Cholesky columns over training inputs held as an array) and
K·V without forming K (:func:`tiled_matmul`, also a cluster shard's rows of it:
:func:`row_block_matmul`).
"""

from __future__ import annotations

import os

import numpy as np
import psutil

from algorithms.cholesky import HostCholesky
from algorithms.contract import KernelBlocks
from algorithms.errors import InputError
from algorithms.factor_columns import ArrayCholeskyColumns
from algorithms.kernel_threads import l2_bytes, on_threads, tile_rows
from algorithms.kernel_tiles import NUMPY_EXP, NUMPY_EXP_VECTORISED, fused
from algorithms.kernels import Kernel

# K·V's tiles (a narrow V): MATMUL_COLS columns of K by as many rows as fill MATMUL_TILE_BYTES (a
# quarter of the per-core L2), at least MATMUL_TILE_ROWS. A tile of whole rows of K streams all
# n columns' inputs ((d + 2)·n values, 2.9 MB at n = 36 000, d = 8) through the cache for each
# few rows; a block of columns keeps its inputs in cache for every row. Measured at n = 36 000,
# d = 8, 2 threads, 2 MiB L2 (AVX-512, interleaved, min of 3): whole-row tiles of 2 rows 2.3 s a
# pass; 16 × 4096 1.07 s, 32 × 2048 0.97 s, 64 × 1024 0.92 s, 32 × 4096 1.38 s, 32 × 8192 1.51 s
MATMUL_TILE_BYTES = l2_bytes() // 4
MATMUL_COLS = 2048
MATMUL_TILE_ROWS = 2  # a single-row tile pays Python's per-tile overhead on little work
MATMUL_NARROW = 8  # a V of more columns is multiplied by blocks of K's rows, not by tiles


def tiled_matmul(kernel: Kernel, A: np.ndarray, B: np.ndarray, W: np.ndarray) -> np.ndarray:
    """k(rows, cols)·W for rows ``A`` and columns ``B`` in the tiles' form (:meth:`Kernel.rows`,
    :meth:`Kernel.cols`) and W of shape (m, b), b ≤ :data:`MATMUL_NARROW`, by 2-D tiles on
    :func:`kernel_threads` threads: each tile, :data:`MATMUL_COLS` columns by the rows that fill
    :data:`MATMUL_TILE_BYTES`, is computed, multiplied into its rows of the output while in
    cache and dropped; a row's sum runs over the blocks of columns in order, so a row's value
    does not depend on which other rows are computed with it (a shard's rows of K·W equal the
    whole product's). The RBF's tile is exp of one GEMM of its augmented inputs, and its
    variance multiplies the sums once: numpy's exp where it is vectorised
    (:data:`NUMPY_EXP_VECTORISED`, the outputs then checked finite at the end), else the
    compiled tail (which checks each value)."""
    n, m, b = len(A), kernel._n_cols(B), W.shape[1]
    cols = max(1, min(m, MATMUL_COLS))
    rows = max(MATMUL_TILE_ROWS, MATMUL_TILE_BYTES // (8 * cols))
    blocks = [(lo, np.ascontiguousarray(kernel.col_block(B, lo, min(m, lo + cols))))
              for lo in range(0, m, cols)]  # contiguous: the compiled tiles' own layout
    exp_form = kernel.spec.exp_of_product
    numpy_exp = NUMPY_EXP_VECTORISED or NUMPY_EXP.get()
    tail = None if numpy_exp or not exp_form else fused().rbf_tail
    out = np.zeros((n, b))

    def run(starts: range) -> bool:
        buf, acc, ok = np.empty(rows * cols), np.empty((rows, b)), True
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for lo in starts:
                a = A[lo: lo + rows]
                r, o = len(a), out[lo: lo + rows]
                for c, Bc in blocks:
                    width = kernel._n_cols(Bc)
                    T = buf[: r * width].reshape(r, width)
                    if not exp_form:
                        ok &= kernel.tile(a, Bc, T)
                    else:
                        np.matmul(a, Bc, out=T)
                        if tail is None:
                            np.exp(T, out=T)
                        else:
                            ok &= tail(buf[: r * width], 1.0)
                    np.matmul(T, W[c: c + width], out=acc[:r])
                    o += acc[:r]
        return ok

    ok = all(on_threads(run, range(0, n, rows), n * m))
    if exp_form and kernel.variance != 1.0:
        with np.errstate(over="ignore", invalid="ignore"):
            out *= kernel.variance
    if not (ok and np.isfinite(out).all()):
        raise kernel._overflow(out)
    return out


def row_block_matmul(kernel: Kernel, X_rows: np.ndarray, X: np.ndarray, V: np.ndarray,
                     block_bytes: int) -> np.ndarray:
    """k(X_rows, X)·V: by :func:`tiled_matmul` for a narrow V (a row's value then equals its
    value in the whole product), else in row blocks of about ``block_bytes`` of kernel
    values."""
    V = np.asarray(V, dtype=np.float64)
    W = V.reshape(len(X), -1)
    if W.shape[1] <= MATMUL_NARROW:
        return tiled_matmul(kernel, kernel.rows(X_rows), kernel.cols(X), W).reshape(
            len(X_rows), *V.shape[1:])
    rows = max(1, int(block_bytes) // (8 * max(len(X), 1)))
    out = np.empty((len(X_rows), *V.shape[1:]))
    for lo in range(0, len(X_rows), rows):
        out[lo: lo + rows] = kernel(X_rows[lo: lo + rows], X) @ V
    return out


class ArrayKernelBlocks(KernelBlocks):
    """Kernel blocks over training inputs held in memory (numpy, or anything np.asarray takes):
    the in-memory back end of :class:`~algorithms.contract.KernelBlocks`, whose defaults it
    keeps (nothing on a device, nothing to summarise).

    Blocks are computed on demand; nothing of size n×n is stored unless an iterative solver asks
    for it (:meth:`hold`). ``X`` may be a lazy array (e.g. dask over zarr): it is materialised
    once, on first use, as an (n, d) float64 array, which costs n·d·8 bytes, not n²·8.
    """

    def __init__(self, X, kernel: Kernel) -> None:
        self._source = X
        self._X: np.ndarray | None = None
        self._rows: np.ndarray | None = None
        self._hold = False
        self._K: np.ndarray | None = None
        self.kernel = kernel
        if len(X.shape) != 2:
            raise InputError(f"X has shape {tuple(X.shape)}; it must be (n, d)")
        self.n, self.d = (int(s) for s in X.shape)

    @property
    def X(self) -> np.ndarray:
        if self._X is None:
            self._X = np.ascontiguousarray(np.asarray(self._source, dtype=np.float64))
        return self._X

    @property
    def kernel_rows(self) -> np.ndarray:
        """All training inputs as the kernel's tiles take them (:meth:`Kernel.rows`), made
        once: n·(d + 2) values for the RBF."""
        if self._rows is None:
            self._rows = self.kernel.rows(self.X)
        return self._rows

    def inputs(self, rows) -> np.ndarray:
        return self.X[rows]

    def block(self, rows, cols) -> np.ndarray:
        X = self.X
        return self.kernel(X[rows], X[cols])

    def diag(self) -> np.ndarray:
        return self.kernel.diag(self.X)

    def hold(self, share: float) -> int:
        """From the next :meth:`matmul` on, form K once (its n²·8 bytes) and multiply by it,
        when those bytes are at most ``share`` of the memory available now
        (:func:`available_memory`); returns the bytes it will hold (0: matrix-free). A product
        by a held K is one BLAS product streaming n² numbers from memory instead of recomputing
        n² kernel values: measured at n = 10 000, d = 8 (kin40k), 2 threads, a product of K by
        one vector took 0.029 s held and 0.12–0.14 s by the tiles, and forming K once 0.4–1.1
        s (its pages are taken as it is written). The held product sums a row in one pass, not
        by blocks of columns: it equals the tiles' to round-off. :meth:`release` drops K."""
        need = self.n * self.n * 8
        self._hold = need <= share * available_memory()
        if not self._hold:
            self._K = None
        return need if self._hold else 0

    def release(self) -> None:
        """Drop a held K (:meth:`hold`); later products compute its tiles again."""
        self._hold, self._K = False, None

    @property
    def held_bytes(self) -> int:
        """Bytes of the held K (0 while none is held)."""
        return 0 if self._K is None else self._K.nbytes

    def matmul(self, V: np.ndarray, block_bytes: int = 2**25) -> np.ndarray:
        """K·V for V of shape (n,) or (n, b): CG's product. By a held K after :meth:`hold`, else
        without forming K, on :func:`kernel_threads` threads. For a narrow V (at most
        :data:`MATMUL_NARROW` columns) each tile of K, :data:`MATMUL_COLS` columns by the rows that
        fill :data:`MATMUL_TILE_BYTES`, is computed, multiplied into its rows of the output while in
        cache and dropped (:meth:`_narrow_matmul`). For a wide V (the error bars' batched CG) row
        tiles fill a block of about ``block_bytes`` of K's rows per thread, multiplied by V in one
        GEMM: a product of a few rows by V streams all of V from memory for little arithmetic
        (measured at n = 8000, b = 256, 2 threads on a loaded machine: 8.8 s a pass with 8-row
        tiles, 3.7 s with 524-row blocks, 2.3 s for the same product with a dense K)."""
        W = np.asarray(V, dtype=np.float64).reshape(self.n, -1)
        if self._hold:
            if self._K is None:
                self._K = self.kernel.block(self.kernel_rows, self.kernel.cols(self.X))
            return (self._K @ W).reshape(V.shape)
        if W.shape[1] <= MATMUL_NARROW:
            return self._narrow_matmul(W).reshape(V.shape)
        kernel, A = self.kernel, self.kernel_rows
        B = kernel.cols(self.X)
        n = self.n
        out = np.empty((n, W.shape[1]))
        tile = min(n, max(MATMUL_TILE_BYTES // (8 * n), MATMUL_TILE_ROWS))
        rows = max(tile, min(n, int(block_bytes) // (8 * n)))

        def run(starts: range) -> bool:
            buf, ok = np.empty((rows, n)), True
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                for lo in starts:
                    T = buf[: min(rows, n - lo)]
                    for t in range(0, len(T), tile):  # each tile while it is in cache
                        ok &= kernel.tile(A[lo + t: lo + min(t + tile, len(T))], B,
                                          T[t: t + tile])
                    np.matmul(T, W, out=out[lo: lo + len(T)])
            return ok

        if not all(on_threads(run, range(0, n, rows), n * n)):
            kernel(self.X, self.X[:1])  # raises the one-line overflow error
        return out.reshape(V.shape)

    def _narrow_matmul(self, W: np.ndarray) -> np.ndarray:
        """K·W for W of shape (n, b), b ≤ :data:`MATMUL_NARROW`: :func:`tiled_matmul`."""
        kernel = self.kernel
        return tiled_matmul(kernel, self.kernel_rows, kernel.cols(self.X), W)

    def columns(self, first: np.ndarray, capacity: int) -> ArrayKernelColumns:
        """An n × p matrix [first, K[:, i₁], K[:, i₂], …] to which kernel columns are appended
        (:class:`ArrayKernelColumns`; SGMA's [y, K_{:S}]), room made for ``capacity`` of them."""
        return ArrayKernelColumns(self, first, capacity)

    def cholesky_columns(self, capacity: int, targets: np.ndarray | None = None
                         ) -> ArrayCholeskyColumns:
        """The rows of a pivoted Cholesky factor of K with room for ``capacity`` columns, and
        their reductions (:class:`~algorithms.factor_columns.ArrayCholeskyColumns`; the
        Nyström and incomplete-Cholesky state), with the ``targets`` y for its Gram products."""
        return ArrayCholeskyColumns(self, targets, capacity)

    def factor(self, index: np.ndarray | None, noise: np.ndarray) -> HostCholesky:
        """The exact GP's L (K_d + diag(noise) = LLᵀ) in this process's memory, filled from
        :meth:`block` and factored in place (:class:`~algorithms.cholesky.HostCholesky`)."""
        return HostCholesky.of(self, index, noise)

    def project(self, cols, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ K[:, cols], the column sums of K[:, cols]²) for W of shape (n, p) (an array or
        :class:`ArrayKernelColumns`), without forming K[:, cols]: see :meth:`project_points`."""
        return self.project_points(self.X[cols], W)

    def project_points(self, X_cols: np.ndarray, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ k(X, X_cols), the column sums of k(X, X_cols)²) for W of shape (n, p): each row
        tile of k(X, X_cols) is computed, multiplied into the running product while in cache
        and dropped, on :func:`kernel_threads` threads (one partial product per thread,
        summed). One pass over W and no n × len(X_cols) array: the greedy methods' candidate
        scores are these two quantities, and with X_cols test inputs they give the Nyström and
        SGMA variance terms."""
        W = W.array if isinstance(W, ArrayKernelColumns) else W
        kernel, A = self.kernel, self.kernel_rows
        B = kernel.cols(np.asarray(X_cols, dtype=np.float64))
        n, m, p = self.n, kernel._n_cols(B), W.shape[1]
        rows = tile_rows(m)

        def run(starts: range) -> tuple[np.ndarray, np.ndarray, bool]:
            P, sq, ok = np.zeros((p, m)), np.zeros(m), True
            buf, prod = np.empty((rows, m)), np.empty((p, m))
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                for lo in starts:
                    T = buf[: min(rows, n - lo)]
                    ok &= kernel.tile(A[lo: lo + len(T)], B, T)
                    np.matmul(W[lo: lo + len(T)].T, T, out=prod)
                    P += prod
                    sq += np.einsum("ij,ij->j", T, T)
            return P, sq, ok

        parts = on_threads(run, range(0, n, rows), n * m)
        if not all(ok for _, _, ok in parts):
            kernel(self.X, X_cols)  # raises the one-line overflow error
        return sum(P for P, _, _ in parts), sum(sq for _, sq, _ in parts)

    def residual_norms(self, cols, W, B: np.ndarray) -> np.ndarray:
        """The column sums of (K[:, cols] − W[:, 1:]·B)² for B of shape (p − 1, m): the
        squared norms of the kernel columns' residuals from an orthonormal basis held in W
        after its first column (SGMA's primal in QR form), formed explicitly tile by tile, never
        as a difference of squared norms."""
        return self.residual_norms_points(self.X[cols], W, B)

    def residual_norms_points(self, X_cols: np.ndarray, W, B: np.ndarray) -> np.ndarray:
        """As :meth:`residual_norms` with the columns k(X, X_cols) of any inputs."""
        W = W.array if isinstance(W, ArrayKernelColumns) else W
        W = W[:, 1:]
        B = np.asarray(B, dtype=np.float64).reshape(W.shape[1], -1)
        kernel, A = self.kernel, self.kernel_rows
        Bx = kernel.cols(np.asarray(X_cols, dtype=np.float64))
        n, m = self.n, kernel._n_cols(Bx)
        rows = tile_rows(m)

        def run(starts: range) -> tuple[np.ndarray, bool]:
            sq, ok = np.zeros(m), True
            buf = np.empty((rows, m))
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                for lo in starts:
                    T = buf[: min(rows, n - lo)]
                    ok &= kernel.tile(A[lo: lo + len(T)], Bx, T)
                    T -= W[lo: lo + len(T)] @ B
                    sq += np.einsum("ij,ij->j", T, T)
            return sq, ok

        parts = on_threads(run, range(0, n, rows), n * m)
        if not all(ok for _, ok in parts):
            kernel(self.X, X_cols)  # raises the one-line overflow error
        return sum(sq for sq, _ in parts)

    def cross(self, X_new: np.ndarray, cols) -> np.ndarray:
        return self.kernel(X_new, self.X[cols])


def available_memory() -> int:
    """The memory this process could take now, in bytes (psutil's ``available``)."""
    return int(psutil.virtual_memory().available)


def _memory() -> int:
    """This machine's physical memory in bytes (0 where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class ArrayKernelColumns:
    """An n × p matrix held by a kernel-block provider: ``first`` (n × p₀, e.g. y as one
    column) followed by kernel columns K[:, i] appended by index (SGMA's [y, K_{:S}]).

    An algorithm only appends to it (:meth:`append`, :meth:`extend`) and hands it to the
    provider's :meth:`~ArrayKernelBlocks.project` / ``project_points``, so a provider may keep
    its rows wherever the training rows are (in memory here, on the Dask workers that own them
    with ``blocks=cluster``). Room for ``capacity`` appended columns is made at once when that
    is at most 2 GiB, or 4096 columns within half this machine's memory (memory is taken as
    columns are written), else the buffer doubles as it fills, never past ``capacity``.
    """

    BATCH = 32  # columns computed at once by extend
    WHOLE_COLUMNS = 4096

    def __init__(self, blocks: ArrayKernelBlocks, first: np.ndarray, capacity: int) -> None:
        first = np.asarray(first, dtype=np.float64).reshape(blocks.n, -1)
        n, p0 = first.shape
        # made whole when it is small or of a basis size: its pages are taken as columns are
        # written (no copy when it fills); else it doubles from 64 (e.g. max_basis = n)
        size = n * (p0 + capacity) * 8
        whole = size <= 2**31 or (capacity <= self.WHOLE_COLUMNS and size <= _memory() // 2)
        room = capacity if whole else min(capacity, 64)
        self.blocks, self.capacity = blocks, p0 + capacity
        self._buf = np.empty((n, p0 + room), order="F")
        self._buf[:, :p0] = first
        self.width = p0

    @property
    def nbytes(self) -> int:
        return self._buf.nbytes

    @property
    def array(self) -> np.ndarray:
        """The columns so far, an (n, width) view."""
        return self._buf[:, : self.width]

    def append(self, i: int) -> None:
        """Append the kernel column K[:, i]."""
        self.extend([i])

    def extend(self, indices) -> None:
        """Append the kernel columns K[:, indices] (one block)."""
        self.extend_points(self.blocks.X[list(indices)])

    def _room(self, need: int) -> None:
        if need > self._buf.shape[1]:
            cols = max(need, min(2 * self._buf.shape[1], self.capacity))
            grown = np.empty((self._buf.shape[0], cols), order="F")
            grown[:, : self.width] = self.array
            self._buf = grown

    def append_residual(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Start appending the residual w = k(X, x) − W[:, 1:]·r of the kernel column of the
        input ``x`` (1 × d) from the orthonormal columns after the first: returns
        (W[:, 1:]ᵀw, ‖w‖², W[:, 0]ᵀw); then :meth:`reorthogonalise` and :meth:`commit`
        (SGMA's primal in QR form)."""
        k = self.blocks.kernel(self.blocks.X, np.asarray(x, dtype=np.float64))[:, 0]
        self._w = k - self.array[:, 1:] @ np.asarray(r, dtype=np.float64)
        return self.array[:, 1:].T @ self._w, float(self._w @ self._w), float(
            self.array[:, 0] @ self._w)

    def reorthogonalise(self, s: np.ndarray) -> tuple[float, float]:
        """w −= W[:, 1:]·s; returns (‖w‖², W[:, 0]ᵀw)."""
        self._w -= self.array[:, 1:] @ np.asarray(s, dtype=np.float64)
        return float(self._w @ self._w), float(self.array[:, 0] @ self._w)

    def commit(self, delta: float) -> None:
        """Append w/δ as the next column."""
        self._room(self.width + 1)
        self._buf[:, self.width] = self._w / delta
        self.width += 1
        self._w = None

    def extend_points(self, X_cols: np.ndarray) -> None:
        """Append the columns k(X, X_cols) of any inputs (one block)."""
        need = self.width + len(X_cols)
        self._room(need)
        kernel, rows = self.blocks.kernel, self.blocks.kernel_rows
        for lo in range(0, len(X_cols), self.BATCH):  # n × BATCH at a time, not n × len
            hi = min(lo + self.BATCH, len(X_cols))
            block = kernel.block(rows, kernel.cols(np.asarray(X_cols[lo:hi], dtype=np.float64)))
            self._buf[:, self.width + lo: self.width + hi] = block
        self.width = need
