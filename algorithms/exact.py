"""Exact GP regression by Cholesky (004 §3.4 eqs. 47-48, §3.6 eq. 62; R&W Alg. 2.1).

α = (K+σ²I)⁻¹y with K+σ²I = LLᵀ; mean k(x)ᵀα; variance k(x,x) + σ² − ‖L⁻¹k(x)‖²;
log marginal likelihood −½yᵀα − Σ log L_ii − (n/2) log 2π.

Forms n×n matrices: O(n²) memory, O(n³) time. The peak holds three of them at once, K, K + σ²I
and its Cholesky factor L (the σ²I temporary is freed before the factorisation): measured with
tracemalloc for the whole fit and its test evaluation (rbf, d = 10), 3.00·n²·8 bytes at
n = 2000 (92 MiB) and n = 4000 (366 MiB); the process RSS grew by 3.25 and 3.10·n²·8. That is
:data:`MEMORY_FACTOR` = 3 times the n²·8 bytes of K alone; the certificate that follows peaks at
2.13·n²·8. :func:`memory_bytes` declares it, so the pipeline refuses a fit above ``max_n`` or
above the available memory before it ingests the data
(:func:`algorithms.evaluation.check_size`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.linalg as sla

from algorithms.contract import AlgorithmSpec, CurveModel, ExactLimit, KernelBlocks, Solution
from algorithms.evaluation import Recorder
from algorithms.learning_curves import gp_xbar_error
from algorithms.objectives import dual_objective, primal_objective, relative_gap
from algorithms.options import Option

MEMORY_FACTOR = 3  # n×n float64 matrices alive at the peak of a fit (module docstring)


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of :func:`fit` on n points of dimension d: K, K + σ²I and L, plus X."""
    return 8.0 * (MEMORY_FACTOR * n * n + n * d)


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_n: int) -> Solution:
    """Exact GP posterior with noise variance ``lam`` = σ².

    The trace has one step (the full basis). ``summary`` holds the log marginal likelihood and
    the primal/dual objectives L(α), L*(α) of Smola & Bartlett (Gap = 0 up to round-off).
    ``max_n`` is checked with :func:`memory_bytes` before the fit (evaluation.check_size).
    """
    n = blocks.n
    K = blocks.block(slice(None), slice(None))
    Kn = K + lam * np.eye(n)
    # a LinAlgError (K + σ²I numerically singular) becomes the evaluator's one-line error
    L = sla.cholesky(Kn, lower=True, check_finite=False)
    alpha = sla.cho_solve((L, True), y, check_finite=False)
    log_ml = float(-0.5 * y @ alpha - np.log(np.diag(L)).sum()
                   - 0.5 * n * math.log(2 * math.pi))
    if not (np.isfinite(alpha).all() and math.isfinite(log_ml)):
        raise FloatingPointError("exact GP produced non-finite coefficients; check the kernel "
                                 "parameters and lam")
    Kalpha = K @ alpha
    L_primal = primal_objective(Kalpha, alpha, y, lam)
    L_dual = dual_objective(Kalpha, alpha, y, lam)
    gap = relative_gap(L_primal, L_dual, y, lam)
    recorder.step(n_basis=n, objective=L_primal, dual_objective=L_dual, gap=gap)
    X_basis = blocks.inputs(slice(None))
    kernel = blocks.kernel

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Kx = kernel(X_new, X_basis)  # (m, n)
        V = sla.solve_triangular(L, Kx.T, lower=True, check_finite=False)
        var = kernel.diag(X_new) + lam - np.einsum("ij,ij->j", V, V)
        return var, var

    summary = {"n_basis": n, "objective": L_primal, "dual_objective": L_dual, "gap": gap,
               "log_marginal_likelihood": log_ml, "jitter": 0.0, "stop_reason": "exact"}
    return Solution(np.arange(n), alpha, X_basis, kernel, lam, summary, variance_bounds)


SPECS = [AlgorithmSpec(
    "exact", fit, "exact GP regression by Cholesky (forms the n×n kernel matrix)",
    options={"max_n": Option(20000, "int", "refuse larger n (3·n²·8 bytes of memory)", lo=1)},
    seed_free=True, has_variance=True, memory_bytes=memory_bytes,
    learning_curve=CurveModel(lambda kernel, density, basis, X, sigma2:
                              gp_xbar_error(kernel, density, X, sigma2), needs_basis=False),
    exact_limit=ExactLimit({}, variance=True),
)]
