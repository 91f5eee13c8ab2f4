"""Exact GP regression by Cholesky (004 §3.4 eqs. 47-48, §3.6 eq. 62; R&W Alg. 2.1).

α = (K+σ²I)⁻¹y with K+σ²I = LLᵀ; mean k(x)ᵀα; variance k(x,x) + σ² − ‖L⁻¹k(x)‖²;
log marginal likelihood −½yᵀα − Σ log L_ii − (n/2) log 2π.

O(n³) time and one n×n float64 matrix: K + σ²I is written into a single array in blocks of rows
and the blocked Cholesky (:func:`algorithms.cholesky.cholesky_in_place`) overwrites it with L
(the factorisation and every solve work on its Fortran-ordered transpose, so nothing is copied;
the factorisation's workspace is one diagonal block and two row chunks, 0.5 GB at most). Kα for
the objectives is y − σ²α. The test variance, the predictive mean
(:meth:`algorithms.contract.Solution.mean`) and the certificate's L(α)
(:func:`algorithms.certificate.primal_value`) stream kernel rows in blocks of ≈
:data:`~algorithms.contract.BLOCK_BYTES` = 32 MiB. Measured with tracemalloc (friedman1, rbf, d
= 10, 1000 test points): the fit with its test evaluation (:func:`algorithms.evaluation.run`)
peaks at n²·8 + 17 MiB at n = 2000 (1.56·n²·8, 48 MiB) and n²·8 + 34 MiB at n = 4000 (1.28·n²·8,
156 MiB); the whole pipeline job with its certificate (:func:`pipeline.job.run.run`) at n²·8 +
35 MiB (2.14·n²·8) and n²·8 + 37 MiB (1.30·n²·8). The excess is one block of kernel values and
its finiteness mask, whatever n: at kin40k's n = 36000 it is 0.4 % of the 9.7 GiB of L. The
process RSS grew by n²·8 + 25 and 51 MiB (fit), + 41 and 53 MiB (job). Before, three n×n
matrices (K, K + σ²I, L) made the same fits peak at 3.00·n²·8. :func:`memory_bytes` declares
:data:`MEMORY_FACTOR` = 1 times n²·8, plus X, plus :data:`WORKING_BYTES` = 64 MiB, so the
pipeline refuses a fit above the available memory (or above ``max_n``, if one is set; the
default null leaves the memory alone to decide) before it ingests the data
(:func:`algorithms.evaluation.check_size`), in one line that names PCG (``algorithm=cg``,
:data:`TOO_LARGE`) as the way to the same posterior at that size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.linalg as sla

from algorithms.cholesky import cholesky_in_place, work_bytes
from algorithms.contract import (
    BLOCK_BYTES,
    AlgorithmSpec,
    CurveModel,
    ExactLimit,
    KernelBlocks,
    Solution,
    block_rows,
)
from algorithms.evaluation import Recorder
from algorithms.learning_curves import gp_xbar_error
from algorithms.objectives import dual_objective, primal_objective, relative_gap
from algorithms.options import Option

MEMORY_FACTOR = 1  # n×n float64 matrices alive at the peak of a fit (module docstring)
WORKING_BYTES = 2 * BLOCK_BYTES  # one streamed block with its temporaries (37 MiB measured)
# what a fit too large for memory is pointed to: the same posterior by PCG, matrix-free
# (keggundirected's 57 247 training rows need one n×n matrix of 26.2 GB = 24.4 GiB)
TOO_LARGE = ("algorithm=cg (PCG: the same GP by conjugate gradients in O(n·block) memory; "
             "algorithm.error_bars=true for its variances)")


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of :func:`fit`, its evaluation and certificate on n points of dimension d:
    L (K + σ²I overwritten in place), X, above 8192 rows the factorisation's diagonal block
    and row chunks (:func:`algorithms.cholesky.work_bytes`) and one streamed block of kernel
    values."""
    return 8.0 * (MEMORY_FACTOR * n * n + n * d) + work_bytes(n) + WORKING_BYTES


def _block_rows(n: int) -> int:
    """Rows per block of the fill of K and of the variance: ≈ BLOCK_BYTES of n kernel values
    (:func:`~algorithms.contract.block_rows`), and at most n/16 rows, so a block stays a small
    fraction of the one n×n matrix however small n is."""
    return max(1, min(block_rows(n), n // 16))


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_n: int | None) -> Solution:
    """Exact GP posterior with noise variance ``lam`` = σ² (004 §3.4 eqs. 47-48).

    The trace has one step (the full basis). ``summary`` holds the log marginal likelihood and
    the primal/dual objectives L(α), L*(α) of Smola & Bartlett (002 eqs. 5-6). They use
    Kα = y − σ²α (K itself is overwritten), so their gap is 0 up to the round-off of the two
    forms and does not measure how accurately α solves (K + σ²I)α = y; the pipeline's
    certificate (:func:`algorithms.certificate.primal_value`) recomputes L(α) from K.
    ``max_n`` is checked with :func:`memory_bytes` before the fit (evaluation.check_size).
    One n×n array is allocated: K + σ²I is written into it and factored in place.
    """
    n = blocks.n
    # K + σ²I in the one n×n array A, upper triangle only (all that the factorisation reads),
    # in blocks of rows so that no kernel's temporaries are n×n; the rest of A stays zero
    A = np.zeros((n, n))
    rows = _block_rows(n)
    for lo in range(0, n, rows):
        A[lo: lo + rows, lo:] = blocks.block(slice(lo, lo + rows), slice(lo, None))
    A.flat[:: n + 1] += lam
    # A is C-ordered and K + σ²I symmetric, so A.T is a Fortran-ordered view holding K + σ²I in
    # its lower triangle, factored there in place by the blocked Cholesky (LAPACK's potrf on
    # the whole matrix crashes in OpenBLAS from n ≈ 16 400: algorithms/cholesky.py): L = A.T
    # from here on, K + σ²I = LLᵀ in its lower triangle. A LinAlgError (K + σ²I numerically
    # singular) becomes the evaluator's one-line error.
    L = cholesky_in_place(A.T)
    alpha = sla.cho_solve((L, True), y, check_finite=False)  # (K+σ²I)α = y (eq. 47)
    log_ml = float(-0.5 * y @ alpha - np.log(np.diag(L)).sum()
                   - 0.5 * n * math.log(2 * math.pi))
    if not (np.isfinite(alpha).all() and math.isfinite(log_ml)):
        raise FloatingPointError("exact GP produced non-finite coefficients; check the kernel "
                                 "parameters and lam")
    # K itself is gone (overwritten by L): (K + σ²I)α = y gives Kα = y − σ²α
    Kalpha = y - lam * alpha
    L_primal = primal_objective(Kalpha, alpha, y, lam)
    L_dual = dual_objective(Kalpha, alpha, y, lam)
    gap = relative_gap(L_primal, L_dual, y, lam)
    recorder.step(n_basis=n, objective=L_primal, dual_objective=L_dual, gap=gap)
    X_basis = blocks.inputs(slice(None))
    kernel = blocks.kernel

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """k(x,x) + σ² − ‖L⁻¹k(x)‖² (eq. 48), in blocks of test rows: O(n·block) beyond L."""
        X_new = np.asarray(X_new, dtype=np.float64)
        var = kernel.diag(X_new) + lam
        for lo in range(0, len(X_new), rows):
            # V = L⁻¹ k(X, x) for the block, solved in place in the Fortran-ordered transpose
            # of its (block, n) kernel rows (L is Fortran-ordered too: no copies)
            V = sla.solve_triangular(L, kernel(X_new[lo: lo + rows], X_basis).T, lower=True,
                                     overwrite_b=True, check_finite=False)
            var[lo: lo + rows] -= np.einsum("ij,ij->j", V, V)
            del V  # freed before the next block's kernel rows exist
        return var, var

    summary = {"n_basis": n, "objective": L_primal, "dual_objective": L_dual, "gap": gap,
               "log_marginal_likelihood": log_ml, "jitter": 0.0, "stop_reason": "exact"}
    return Solution(np.arange(n), alpha, X_basis, kernel, lam, summary, variance_bounds)


SPECS = [AlgorithmSpec(
    "exact", fit, "exact GP regression by Cholesky (forms the n×n kernel matrix)",
    options={"max_n": Option(None, "int", "refuse larger n; null: refuse only a fit whose "
                             "n²·8 bytes exceed the memory available (memory_bytes)", lo=1,
                             none_ok=True, example=20000)},
    seed_free=True, has_variance=True, memory_bytes=memory_bytes, too_large=TOO_LARGE,
    learning_curve=CurveModel(lambda kernel, density, basis, X, sigma2:
                              gp_xbar_error(kernel, density, X, sigma2), needs_basis=False),
    exact_limit=ExactLimit({}, variance=True),
)]
