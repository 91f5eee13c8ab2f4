"""A blocked, in-place Cholesky factorisation in BLAS-3: the left-looking block-column form
(Golub & Van Loan, *Matrix Computations*, 4th ed., §4.2.9), with block columns as wide as
LAPACK factors well.

Why not LAPACK's ``potrf`` on the whole matrix: OpenBLAS's multithreaded ``dpotrf`` (0.3.30 in
scipy's wheel, 0.3.31 in numpy's) dies with SIGSEGV on this project's AVX-512 hosts at the
sizes the exact GP needs (measured: ``cho_factor`` of an RBF K + 0.01·I exits 139 at
n = 16 000 and 17 000 and works at 12 000); one thread works. So ``potrf`` is only called
here on a diagonal block of at most :data:`BLOCK` rows (or on the whole matrix up to
:data:`DIRECT` rows, two thirds of the largest size seen to work). Above DIRECT the matrix is
cut into the fewest block columns of at most BLOCK columns each (n = 12 000: two of 6000;
36 000: six of 6000); for each block column j (columns j0:j1), with the columns left of it
factored:

    A_jj −= Σ_(k<j) L_jk L_jkᵀ              GEMMs on its lower part, TILE columns at a time
    A_jj  = L_jj L_jjᵀ                      potrf on the nb × nb diagonal block
    A_ij −= Σ_(k<j) L_ik L_jkᵀ   (i > j)    GEMMs of inner dimension j0, ROWS rows at a time
    L_ij  = A_ij L_jj⁻ᵀ          (i > j)    trsm, ROWS rows at a time

Wide blocks put most of the flops in large potrf and trsm calls, which run near GEMM's rate,
rather than in many small ones (measured on 2 cores, GEMM 108 GFLOP/s: n = 12 000 in 7.0 s,
82 GFLOP/s, against 8.9 s with blocks of 1024; n = 17 000 87.8 against 77.0 GFLOP/s). All
the GEMMs of a block column run before all its trsm calls: numpy's OpenBLAS (GEMM) and
scipy's (potrf, trsm) each keep threads spinning after a call, and a trsm right after a
GEMM runs 1.5× slower than alone.

The matrix is one Fortran-ordered n × n array whose lower triangle holds A on entry and L on
exit; its upper triangle is not read, and is zero within the diagonal blocks on exit (left as
it was elsewhere). The GEMMs read the factored columns in place (numpy passes the strided
views to BLAS); allocated besides the matrix, at most: the diagonal block's copy for potrf
(nb² values) and a chunk's GEMM product or trsm input and output (ROWS × nb each), 0.5 GB at
nb = 6144 (:func:`work_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg as sla
from scipy.linalg import blas, cho_solve, lapack

from algorithms import blas_inplace as bi
from algorithms.contract import KernelBlocks, block_rows
from algorithms.kernel_threads import lead_blas
from algorithms.kernels import Kernel

# the widest block column: potrf and trsm on blocks this wide run near GEMM's rate, far
# below the size at which the whole-matrix potrf crashes (≈ 16 000)
BLOCK = 6144
# up to this n the whole matrix goes to potrf at once (2/3 of 12 000, seen to work): faster
# there than blocks (measured at n = 2000: 63 against 38 GFLOP/s with two blocks)
DIRECT = 8192
TILE = 1024  # columns per GEMM on a diagonal block (the part above its diagonal is skipped)
ROWS = 2048  # rows per GEMM and trsm chunk below a diagonal block (bounds the temporaries)


def block_width(n: int, block: int = BLOCK) -> int:
    """Columns per block column: the fewest blocks of at most ``block`` columns, equal widths."""
    return -(-n // -(-n // block)) if n else 0


def work_bytes(n: int, block: int = BLOCK, direct: int = DIRECT, rows: int = ROWS) -> int:
    """Bytes :func:`cholesky_in_place` allocates besides the matrix, at most: 0 up to
    ``direct`` rows (potrf in place), else the diagonal block's copy and a chunk's two
    ROWS × nb arrays (the trsm's input and output)."""
    if n <= direct:
        return 0
    nb = block_width(n, block)
    return 8 * (nb * nb + 2 * min(rows, n) * nb)


def _potrf(block: np.ndarray, offset: int) -> np.ndarray:
    """LAPACK's potrf of the lower triangle of ``block`` (in place when it is contiguous);
    a not positive definite leading minor is named as of the whole matrix."""
    factor, info = lapack.dpotrf(block, lower=1, clean=1, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(
            f"{offset + info}-th leading minor of the array is not positive definite"
            if info > 0 else f"dpotrf: illegal value in argument {-info}")
    return factor


def cholesky_in_place(A: np.ndarray, block: int = BLOCK, direct: int = DIRECT,
                      rows: int = ROWS, tile: int = TILE) -> np.ndarray:
    """Overwrite the lower triangle of the Fortran-ordered square float64 array ``A`` (which
    holds a symmetric positive definite matrix there) with its Cholesky factor L, A = LLᵀ;
    returns ``A``. Raises :class:`numpy.linalg.LinAlgError` naming the leading minor that is
    not positive definite (as :func:`scipy.linalg.cho_factor` does). Up to ``direct`` rows
    the whole matrix is one block; above, block columns of at most ``block`` columns
    (module docstring), their updates ``tile`` columns and ``rows`` rows at a time."""
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n or A.dtype != np.float64 or not A.flags.f_contiguous:
        raise ValueError("cholesky_in_place needs a square Fortran-ordered float64 array, got "
                         f"shape {A.shape}, dtype {A.dtype}, f_contiguous={A.flags.f_contiguous}")
    for name, value in (("block", block), ("rows", rows), ("tile", tile)):
        if value < 1:
            raise ValueError(f"{name}={value} must be ≥ 1")
    if n <= direct:
        if n and not np.shares_memory(factor := _potrf(A, 0), A):  # in place: contiguous
            A[...] = factor
        return A
    nb = block_width(n, block)
    for j0 in range(0, n, nb):
        j1 = min(j0 + nb, n)
        left = A[j0:j1, :j0]  # L_jk for k < j: the factored columns of block row j
        if j0:  # A_jj −= L_jk L_jkᵀ on and below its diagonal, a tile of columns at a time
            with lead_blas("numpy"):
                for c0 in range(j0, j1, tile):
                    c1 = min(c0 + tile, j1)
                    A[c0:j1, c0:c1] -= A[c0:j1, :j0] @ A[c0:c1, :j0].T
        with lead_blas("scipy"):
            diagonal = _potrf(A[j0:j1, j0:j1], j0)  # a copy (the block is strided): nb²
        A[j0:j1, j0:j1] = diagonal  # its strict upper triangle zero (clean=1)
        if j1 == n:
            break
        chunks = [(r0, min(r0 + rows, n)) for r0 in range(j1, n, rows)]
        if j0:  # A_ij −= L_ik L_jkᵀ for the rows below
            with lead_blas("numpy"):
                for r0, r1 in chunks:
                    A[r0:r1, j0:j1] -= A[r0:r1, :j0] @ left.T
        with lead_blas("scipy"):
            for r0, r1 in chunks:  # L_ij = A_ij L_jj⁻ᵀ
                A[r0:r1, j0:j1] = blas.dtrsm(1.0, diagonal, A[r0:r1, j0:j1], side=1,
                                             lower=1, trans_a=1)
    return A


# factor_and_invert's block columns: wide enough that the syrk, trmm and gemm on them run near
# GEMM's rate, narrow enough that the potrf and trtri of the diagonal blocks (LAPACK's slow,
# unblocked-in-effect part) are a small share (module docstring of factor_and_invert)
INVERSE_BLOCK = 256


def _lower_mask(size: int) -> np.ndarray:
    return np.tri(size, dtype=bool)


def factor_and_invert(A: np.ndarray, rhs: np.ndarray, block: int = INVERSE_BLOCK
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Cholesky A = LLᵀ, the solution of A x = ``rhs`` through the factor, then A⁻¹ = L⁻ᵀL⁻¹,
    all in the lower triangle of the Fortran-ordered square float64 ``A`` (its strict upper
    triangle is neither read nor written: a caller may keep a matrix there). Returns
    (diag(L), x); on return the lower triangle of ``A`` holds A⁻¹. Raises
    :class:`numpy.linalg.LinAlgError` naming the leading minor that is not positive definite.

    Three blocked passes over block columns of ``block`` columns, each flop in a BLAS-3 call
    on large blocks (:mod:`algorithms.blas_inplace`, in place on views), n³/3 flops each:

    1. Cholesky, right-looking: L_kk = potrf(A_kk), its inverse T_kk = L_kk⁻¹ (trtri, kept
       aside), the panel L_ik = A_ik T_kkᵀ (trmm: OpenBLAS's trsm runs at half its rate) and
       the trailing A_ij −= L_ik L_jkᵀ (one syrk);
    2. T = L⁻¹ (LAPACK's dtrtri by blocks, last to first): T_ik = −T_ii L_ik T_kk over the
       rows below (two trmm, T_ii the already inverted trailing triangle), T_kk from step 1;
    3. A⁻¹ = TᵀT (LAPACK's dlauum by blocks): row block k of the lower triangle
       (TᵀT)_kj = T_kkᵀ T_kj + Σ_(i>k) T_ikᵀ T_ij (trmm, gemm), its diagonal block
       T_kkᵀT_kk (lauum) + Σ_(i>k) T_ikᵀ T_ik (syrk).

    LAPACK itself (potrf, trtri and lauum of the whole matrix) does the same arithmetic at
    0.44, 0.58 and 0.80 of GEMM's rate at n = 2000 on 2 cores (trsm-bound and unblocked
    panels); by these blocks about 0.7 overall. LAPACK routines run on diagonal blocks only (the
    whole-matrix multithreaded potrf crashes at large n, :data:`DIRECT`)."""
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n or A.dtype != np.float64 or not A.flags.f_contiguous:
        raise ValueError("factor_and_invert needs a square Fortran-ordered float64 array, got "
                         f"shape {A.shape}, dtype {A.dtype}, f_contiguous={A.flags.f_contiguous}")
    if block < 1:
        raise ValueError(f"block={block} must be ≥ 1")
    starts = range(0, n, block)
    inverses = np.empty((min(block, n), n), order="F")  # T_kk of each diagonal block, side by side
    for k0 in starts:
        k1 = min(k0 + block, n)
        diagonal = A[k0:k1, k0:k1]
        info = bi.potrf(diagonal)
        if info:
            raise np.linalg.LinAlgError(
                f"{k0 + info}-th leading minor of the array is not positive definite"
                if info > 0 else f"dpotrf: illegal value in argument {-info}")
        inverse = inverses[:k1 - k0, k0:k1]
        inverse[...] = diagonal
        bi.trtri(inverse)
        if k1 < n:
            panel = A[k1:, k0:k1]
            bi.trmm(1.0, inverse, panel, side="R", trans="T")  # L_ik = A_ik L_kk⁻ᵀ
            bi.syrk(-1.0, panel, 1.0, A[k1:, k1:])
    factor_diagonal = A.diagonal().copy()
    x = cho_solve((A, True), rhs, check_finite=False)
    for k0 in reversed(starts):
        k1 = min(k0 + block, n)
        inverse = inverses[:k1 - k0, k0:k1]
        if k1 < n:
            below = A[k1:, k0:k1]
            bi.trmm(1.0, A[k1:, k1:], below)  # T_ii L_ik
            bi.trmm(-1.0, inverse, below, side="R")  # −T_ii L_ik T_kk
        np.copyto(A[k0:k1, k0:k1], inverse, where=_lower_mask(k1 - k0))
    for k0 in starts:
        k1 = min(k0 + block, n)
        diagonal = A[k0:k1, k0:k1]
        if k0:
            bi.trmm(1.0, diagonal, A[k0:k1, :k0], trans="T")
            if k1 < n:
                bi.gemm(1.0, A[k1:, k0:k1], A[k1:, :k0], 1.0, A[k0:k1, :k0], trans_a="T")
        bi.lauum(diagonal)
        if k1 < n:
            bi.syrk(1.0, A[k1:, k0:k1], 1.0, diagonal, trans="T")
    return factor_diagonal, x


def exact_rows(n: int) -> int:
    """Rows per block of the exact GP's fill of K and of its variance: ≈ BLOCK_BYTES of n
    kernel values (:func:`~algorithms.contract.block_rows`), and at most n/16 rows, so a block
    stays a small fraction of the one n×n matrix however small n is."""
    return max(1, min(block_rows(n), n // 16))


class HostCholesky:
    """The exact GP's factor L (K_d + diag(noise) = LLᵀ) in this process's memory, and what
    the exact GP computes with it (004 §3.4 eqs. 47-48): the in-memory
    :meth:`~algorithms.contract.KernelBlocks.factor` (:mod:`algorithms.exact`; on a torch
    device :class:`algorithms.torch_blocks.DeviceCholesky`)."""

    def __init__(self, L: np.ndarray, X_basis: np.ndarray) -> None:
        self.L, self.X_basis = L, X_basis

    @classmethod
    def of(cls, blocks: KernelBlocks, index: np.ndarray | None, noise: np.ndarray
           ) -> HostCholesky:
        """L for the distinct inputs ``index`` (None: every row), factored in place in one
        m×m array (:mod:`algorithms.exact`'s docstring)."""
        m = len(noise)
        # K_d + diag(noise) in the one m×m array A, upper triangle only (all that the
        # factorisation reads), in blocks of rows so that no kernel's temporaries are m×m; the
        # rest of A stays zero
        A = np.zeros((m, m))
        rows = exact_rows(m)
        for lo in range(0, m, rows):
            if index is None:
                A[lo: lo + rows, lo:] = blocks.block(slice(lo, lo + rows), slice(lo, None))
            else:
                A[lo: lo + rows, lo:] = blocks.block(index[lo: lo + rows], index[lo:])
        A.flat[:: m + 1] += noise
        # A is C-ordered and symmetric, so A.T is a Fortran-ordered view holding it in its
        # lower triangle, factored there in place by the blocked Cholesky (LAPACK's potrf on
        # the whole matrix crashes in OpenBLAS from n ≈ 16 400: module docstring). A
        # LinAlgError (numerically singular) becomes the evaluator's one-line error.
        X_basis = blocks.inputs(slice(None) if index is None else index)
        return cls(cholesky_in_place(A.T), X_basis)

    def solve(self, b: np.ndarray) -> np.ndarray:
        """(LLᵀ)⁻¹b (eq. 47)."""
        return sla.cho_solve((self.L, True), b, check_finite=False)

    def log_diag_sum(self) -> float:
        """Σ log L_ii (half of log det)."""
        return np.log(np.diag(self.L)).sum()

    def variance_bounds(self, kernel: Kernel, lam: float
                        ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """x ↦ k(x,x) + σ² − ‖L⁻¹k(X_d, x)‖² (eq. 48), in blocks of test rows: O(m·block)
        beyond L; the exact value twice (lower and upper bound)."""
        L, X_basis = self.L, self.X_basis
        rows = exact_rows(len(X_basis))

        def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            X_new = np.asarray(X_new, dtype=np.float64)
            var = kernel.diag(X_new) + lam
            for lo in range(0, len(X_new), rows):
                # V = L⁻¹ k(X_d, x) for the block, solved in place in the Fortran-ordered
                # transpose of its (block, m) kernel rows (L is Fortran-ordered too: no copies)
                V = sla.solve_triangular(L, kernel(X_new[lo: lo + rows], X_basis).T,
                                         lower=True, overwrite_b=True, check_finite=False)
                var[lo: lo + rows] -= np.einsum("ij,ij->j", V, V)
                del V  # freed before the next block's kernel rows exist
            return var, var

        return variance_bounds
