"""The elementwise pass of the dense marginal likelihood's gradient for the RBF, compiled with
numba (:func:`algorithms.marginal_likelihood.log_marginal_likelihood`, eq. 64): one pass over
the lower triangle of K_y⁻¹ that forms P = (ααᵀ − K_y⁻¹)∘K, K read from the strict upper
triangle of the same array, and writes P into both triangles, so that the d length-scale
traces and the variance's are one GEMM P·[S, 1] afterwards.

Why compiled: the two triangles are each other's transpose in memory, and numpy's elementwise
ops on a tile and a transposed tile ran at ~7 ns a value (16 ms at n = 2000, five times a
memory pass); here the upper triangle is read and written in 64 × 64 squares that stay in L1.
Cached as :mod:`algorithms._fused_exp`'s loops are; releases the GIL (column tiles of the
triangle run on the kernel threads).
"""

from __future__ import annotations

import numpy as np

from algorithms._fused_exp import cached_njit

SQUARE = 64  # rows and columns of the squares the pass walks (two 32 KiB squares in L1)


@cached_njit()
def rbf_slope_products(A: np.ndarray, alpha: np.ndarray, variance: float, j0: int,
                       j1: int) -> None:
    """For the columns j0 ≤ j < j1 of the Fortran-ordered ``A`` (K_y⁻¹ on and below the
    diagonal, K above it, k(x, x) = ``variance``): A_ij = A_ji = (α_i α_j − A_ij)·K_ij for
    i ≥ j."""
    n = A.shape[0]
    for jb in range(j0, j1, SQUARE):
        je = min(jb + SQUARE, j1)
        for ib in range(jb, n, SQUARE):
            ie = min(ib + SQUARE, n)
            for j in range(jb, je):
                aj = alpha[j]
                start = ib if ib > j else j
                for i in range(start, ie):
                    k = A[j, i] if i != j else variance
                    p = (alpha[i] * aj - A[i, j]) * k
                    A[i, j] = p
                    A[j, i] = p
