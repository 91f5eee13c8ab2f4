"""Exact GP regression by Cholesky (004 §3.4 eqs. 47-48, §3.6 eq. 62; R&W Alg. 2.1).

α = (K+σ²I)⁻¹y with K+σ²I = LLᵀ; mean k(x)ᵀα; variance k(x,x) + σ² − ‖L⁻¹k(x)‖²;
log marginal likelihood −½yᵀα − Σ log L_ii − (n/2) log 2π.

Training rows with equal inputs are merged first (:func:`algorithms.contract.distinct_rows`):
c rows at one input x with independent noise σ² are, for the posterior of f, one row at x with
their mean target ȳ and noise σ²/c. With P the n×m indicator of each row's distinct input (X =
PX_d, K = PK_dPᵀ, C = PᵀP the counts), push-through gives (K + σ²I)⁻¹P = P(K_dC + σ²I)⁻¹, so
k(x)ᵀ(K + σ²I)⁻¹y = k_d(x)ᵀ(K_d + σ²C⁻¹)⁻¹ȳ and the variance alike: an exact reduction to the m
distinct inputs (keggdirected's 43 945 training rows hold 14 575 distinct inputs,
keggundirected's 57 248 hold 17 053: split 0). Without repeats (m = n) nothing changes.

O(m³) time and one m×m float64 matrix: K + σ²I is written into a single array in blocks of rows
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

The blocks make the factor (:meth:`algorithms.contract.KernelBlocks.factor`): in memory
:class:`algorithms.cholesky.HostCholesky` as above; on a torch device (``device=cuda``:
:mod:`algorithms.torch_blocks`) K_d + diag(noise) is factored in place on the device
(:meth:`~algorithms.torch_blocks.TorchKernelBlocks.factor`, refused in one line above the
device's free memory), and the solves and the variance run there; the rest of the fit is the
same code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.cholesky import work_bytes
from algorithms.contract import (
    BLOCK_BYTES,
    AlgorithmSpec,
    CurveModel,
    ExactLimit,
    KernelBlocks,
    Solution,
    distinct_rows,
)
from algorithms.evaluation import Recorder
from algorithms.learning_curves import gp_xbar_error
from algorithms.objectives import dual_objective, primal_objective, relative_gap
from algorithms.options import Option

MEMORY_FACTOR = 1  # n×n float64 matrices alive at the peak of a fit (module docstring)
WORKING_BYTES = 2 * BLOCK_BYTES  # one streamed block with its temporaries (37 MiB measured)
# what a fit too large for memory is pointed to: the same posterior by PCG, matrix-free
# (protein's 41 157 training rows, 39 721 of them distinct, need one m×m matrix of 11.8 GiB)
TOO_LARGE = ("algorithm=cg (PCG: the same GP by conjugate gradients in O(n·block) memory; "
             "algorithm.error_bars=true for its variances)")


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of :func:`fit`, its evaluation and certificate on n points of dimension d:
    L (K + σ²I overwritten in place), X, above 8192 rows the factorisation's diagonal block
    and row chunks (:func:`algorithms.cholesky.work_bytes`) and one streamed block of kernel
    values."""
    return 8.0 * (MEMORY_FACTOR * n * n + n * d) + work_bytes(n) + WORKING_BYTES


def _distinct(X: np.ndarray, y: np.ndarray, lam: float
              ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(index, inverse, counts, ȳ, noise) of the training rows merged by input (module
    docstring): index the rows of the m distinct inputs (None: all n distinct, nothing merged),
    inverse each row's distinct input, counts c, ȳ the mean target of each and noise σ²/c."""
    first, inverse, counts = distinct_rows(X)
    if len(first) == len(y):
        return None, inverse, counts, y, np.full(len(y), lam)
    y_mean = np.bincount(inverse, weights=y, minlength=len(first)) / counts
    return first, inverse, counts, y_mean, lam / counts


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_n: int | None) -> Solution:
    """Exact GP posterior with noise variance ``lam`` = σ² (004 §3.4 eqs. 47-48).

    Training rows with equal inputs are merged first (module docstring): with the m distinct
    inputs X_d, their counts C and mean targets ȳ, α_d = (K_d + σ²C⁻¹)⁻¹ȳ gives the same
    posterior as all n rows; the α of all n rows, α = PC⁻¹α_d + r/σ² (r = y − Pȳ, the
    deviations from each input's mean), and the log marginal likelihood of all n rows are
    recovered exactly. The trace has one step. ``summary`` holds the log marginal likelihood,
    ``merged_rows`` (n − m) and the primal/dual objectives L(α), L*(α) of Smola & Bartlett
    (002 eqs. 5-6) at the α of all n rows. They use Kα = y − σ²α, so their gap is 0 up to
    the round-off of the two forms and does not measure how accurately α solves
    (K + σ²I)α = y; the pipeline's certificate (:func:`algorithms.certificate.primal_value`)
    recomputes L(α) from K. ``max_n`` is checked with :func:`memory_bytes` of m before the fit
    (evaluation.check_size).
    """
    n = blocks.n
    X = blocks.inputs(slice(None))
    index, inverse, counts, y_mean, noise = _distinct(X, y, lam)
    m = len(y_mean)
    X_basis = X if index is None else X[index]
    L = blocks.factor(index, noise)  # in memory or on the blocks' device
    alpha_d, log_det_half = L.solve(y_mean), L.log_diag_sum()  # eq. 47 on X_d
    variance = L.variance_bounds(blocks.kernel, lam)  # eq. 48
    if index is None:
        alpha, resid = alpha_d, 0.0
    else:
        deviation = y - y_mean[inverse]
        alpha = alpha_d[inverse] / counts[inverse] + deviation / lam
        resid = float(deviation @ deviation) / lam
    # log det(K + σ²I) = log det(K_d + σ²C⁻¹) + (n − m) log σ² + Σ log c, and
    # yᵀ(K + σ²I)⁻¹y = ȳᵀα_d + ‖r‖²/σ² (the deviations r lie in the noise's eigenspace)
    log_ml = float(-0.5 * (y_mean @ alpha_d + resid) - log_det_half
                   - 0.5 * (n - m) * math.log(lam) - 0.5 * np.log(counts).sum()
                   - 0.5 * n * math.log(2 * math.pi))
    if not (np.isfinite(alpha).all() and math.isfinite(log_ml)):
        raise FloatingPointError("exact GP produced non-finite coefficients; check the kernel "
                                 "parameters and lam")
    # K itself is gone (overwritten by L): (K + σ²I)α = y gives Kα = y − σ²α
    Kalpha = y - lam * alpha
    L_primal = primal_objective(Kalpha, alpha, y, lam)
    L_dual = dual_objective(Kalpha, alpha, y, lam)
    gap = relative_gap(L_primal, L_dual, y, lam)
    recorder.step(n_basis=m, objective=L_primal, dual_objective=L_dual, gap=gap)
    summary = {"n_basis": m, "objective": L_primal, "dual_objective": L_dual, "gap": gap,
               "log_marginal_likelihood": log_ml, "merged_rows": n - m, "jitter": 0.0,
               "stop_reason": "exact"}
    return Solution(np.arange(n) if index is None else index, alpha_d, X_basis, blocks.kernel,
                    lam, summary, variance)


SPECS = [AlgorithmSpec(
    "exact", fit, "exact GP regression by Cholesky (forms the n×n kernel matrix)",
    options={"max_n": Option(None, "int", "refuse larger n; null: refuse only a fit whose "
                             "n²·8 bytes exceed the memory available (memory_bytes)", lo=1,
                             none_ok=True, example=20000)},
    seed_free=True, has_variance=True, memory_bytes=memory_bytes, too_large=TOO_LARGE,
    distinct_inputs=True, device_blocks=True,
    learning_curve=CurveModel(lambda kernel, density, basis, X, sigma2:
                              gp_xbar_error(kernel, density, X, sigma2), needs_basis=False),
    exact_limit=ExactLimit({}, variance=True),
)]
