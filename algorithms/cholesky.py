"""A blocked, in-place Cholesky factorisation in BLAS-3: the left-looking block-column form
(Golub & Van Loan, *Matrix Computations*, 4th ed., §4.2.9).

Why not LAPACK's ``potrf`` on the whole matrix: OpenBLAS's multithreaded ``dpotrf`` (0.3.30 in
scipy's wheel, 0.3.31 in numpy's) dies with SIGSEGV on this project's AVX-512 hosts at the
sizes the exact GP needs (measured: ``cho_factor`` of an RBF K + 0.01·I exits 139 at
n = 16 000 and 17 000 and works at 12 000); one thread works. So ``potrf`` is only called
here on a diagonal block of :data:`BLOCK` rows (or on the whole matrix up to :data:`DIRECT`
rows, two thirds of the largest size seen to work), and the O(n³) of the work is matrix
products. For each block column j (columns j0:j1), with the columns left of it factored:

    A_ij −= Σ_(k<j) L_ik L_jkᵀ   (i ≥ j)    one GEMM, inner dimension j0, of strided views
    A_jj  = L_jj L_jjᵀ                      potrf on the nb × nb diagonal block
    L_ij  = A_ij L_jj⁻ᵀ          (i > j)    trsm on the rows below it

The matrix is one Fortran-ordered n × n array whose lower triangle holds A on entry and L on
exit; its upper triangle is not read, and is zero within the diagonal blocks on exit (left as
it was elsewhere). Allocated besides it: the GEMM's product and the trsm's copy of the rows
below, (n − j0) × nb each (0.29 GB at n = 36 000, nb = 1024). The GEMM reads the factored
columns in place (numpy passes the strided views to BLAS). Measured on 2 cores (AVX-512,
GEMM 110 GFLOP/s): n = 17 000 in 20.9 s, 78.5 GFLOP/s = 0.71 × GEMM; what is left is potrf and
trsm on the blocks (their share falls like nb/n) and the two OpenBLAS copies (numpy's for
GEMM, scipy's for potrf and trsm) whose idle threads spin after each call: a trsm right after
a GEMM runs 1.5× slower than alone.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack

# rows of a diagonal block handed to LAPACK's potrf: far below the size that crashes
# (≈ 16 000), large enough for GEMM to run near its full rate on the products
BLOCK = 1024
# up to this n the whole matrix goes to potrf at once (2/3 of 12 000, seen to work): faster
# there than blocks (measured at n = 2000: 77 against 29 GFLOP/s)
DIRECT = 8192


def cholesky_in_place(A: np.ndarray, block: int = BLOCK, direct: int = DIRECT) -> np.ndarray:
    """Overwrite the lower triangle of the Fortran-ordered square float64 array ``A`` (which
    holds a symmetric positive definite matrix there) with its Cholesky factor L, A = LLᵀ;
    returns ``A``. Raises :class:`numpy.linalg.LinAlgError` naming the leading minor that is
    not positive definite (as :func:`scipy.linalg.cho_factor` does). Up to ``direct`` rows
    the whole matrix is one block."""
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n or A.dtype != np.float64 or not A.flags.f_contiguous:
        raise ValueError("cholesky_in_place needs a square Fortran-ordered float64 array, got "
                         f"shape {A.shape}, dtype {A.dtype}, f_contiguous={A.flags.f_contiguous}")
    if block < 1:
        raise ValueError(f"block={block} must be ≥ 1")
    if n <= direct:
        block = max(n, 1)  # one diagonal block: potrf on the whole matrix
    for j0 in range(0, n, block):
        j1 = min(j0 + block, n)
        strip = A[j0:, j0:j1]  # block column j, from its diagonal block down (a view)
        if j0:  # A_ij -= Σ_(k<j) L_ik L_jkᵀ: one GEMM of inner dimension j0 (a strided view)
            strip -= A[j0:, :j0] @ A[j0:j1, :j0].T
        # in place when the block is the whole (contiguous) matrix; else on a copy of it
        diagonal, info = lapack.dpotrf(strip[: j1 - j0], lower=1, clean=1, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(
                f"{j0 + info}-th leading minor of the array is not positive definite"
                if info > 0 else f"dpotrf: illegal value in argument {-info}")
        if not np.shares_memory(diagonal, A):
            strip[: j1 - j0] = diagonal  # its strict upper triangle zero (clean=1)
        if j1 < n:  # the rows below: L_ij = A_ij L_jj⁻ᵀ, i.e. L_jj L_ijᵀ = A_ijᵀ
            strip[j1 - j0:] = sla.solve_triangular(diagonal, strip[j1 - j0:].T, lower=True,
                                                   check_finite=False).T
    return A
