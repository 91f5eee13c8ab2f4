"""Exact GP regression by Cholesky (004 §3.4 eqs. 47-48, §3.6 eq. 62; R&W Alg. 2.1).

α = (K+σ²I)⁻¹y with K+σ²I = LLᵀ; mean k(x)ᵀα; variance k(x,x) + σ² − ‖L⁻¹k(x)‖²;
log marginal likelihood −½yᵀα − Σ log L_ii − (n/2) log 2π.
Forms the n×n matrix: O(n²) memory, O(n³) time. ``max_n`` guards against accidents.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.linalg as sla

from algorithms.base import (
    Fit,
    InputError,
    KernelBlocks,
    check_lam,
    check_targets,
    check_test,
    coverage_2sd,
    gaussian_nlpd,
    rmse,
)
from algorithms.objectives import dual_objective, primal_objective, relative_gap


def fit(
    blocks: KernelBlocks,
    y: np.ndarray,
    *,
    lam: float,
    rng: np.random.Generator | None = None,
    test: tuple[np.ndarray, np.ndarray] | None = None,
    max_n: int = 20000,
) -> Fit:
    """Exact GP posterior with noise variance ``lam`` = σ².

    The trace has one step (the full basis). ``summary`` holds the log marginal likelihood and
    the primal/dual objectives L(α), L*(α) of Smola & Bartlett (Gap = 0 up to round-off).
    """
    lam = check_lam(lam)
    n = blocks.n
    y = check_targets(y, n)
    test = check_test(test, getattr(blocks, "d", None))
    if n > max_n:
        gib = n * n * 8 / 2**30
        raise InputError(f"exact GP on n={n} needs a {gib:.1f} GiB kernel matrix; use a sparse "
                         f"algorithm or raise algorithm.max_n (now {max_n})")
    t0 = time.perf_counter()
    K = blocks.block(slice(None), slice(None))
    Kn = K + lam * np.eye(n)
    try:
        L = sla.cholesky(Kn, lower=True, check_finite=False)
    except np.linalg.LinAlgError as err:
        msg = f"Cholesky of K + lam·I failed ({err}); increase lam (now {lam})"
        raise InputError(msg) from None
    alpha = sla.cho_solve((L, True), y, check_finite=False)
    log_ml = float(-0.5 * y @ alpha - np.log(np.diag(L)).sum()
                   - 0.5 * n * math.log(2 * math.pi))
    seconds = time.perf_counter() - t0
    if not (np.isfinite(alpha).all() and math.isfinite(log_ml)):
        raise FloatingPointError("exact GP produced non-finite coefficients; check the kernel "
                                 "parameters and lam")

    Kalpha = K @ alpha
    L_primal = primal_objective(Kalpha, alpha, y, lam)
    L_dual = dual_objective(Kalpha, alpha, y, lam)
    X_basis = blocks.inputs(slice(None))
    kernel = blocks.kernel

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Kx = kernel(X_new, X_basis)  # (m, n)
        V = sla.solve_triangular(L, Kx.T, lower=True, check_finite=False)
        var = kernel.diag(X_new) + lam - np.einsum("ij,ij->j", V, V)
        return var, var

    trace = {
        "n_basis": np.array([n]),
        "objective": np.array([L_primal]),
        "dual_objective": np.array([L_dual]),
        "gap": np.array([relative_gap(L_primal, L_dual, y, lam)]),
        "seconds": np.array([seconds]),
        "test_rmse": np.array([np.nan]),
    }
    summary: dict = {
        "n_basis": n,
        "objective": L_primal,
        "dual_objective": L_dual,
        "gap": float(trace["gap"][0]),
        "log_marginal_likelihood": log_ml,
        "jitter": 0.0,
        "seconds": seconds,
        "stop_reason": "exact",
    }
    result = Fit("exact", np.arange(n), alpha, X_basis, kernel, lam, trace, summary,
                 variance_bounds)
    if test is not None:
        X_test, y_test = test
        mean = result.predict(X_test)
        var, _ = variance_bounds(X_test)
        trace["test_rmse"][0] = summary["test_rmse"] = rmse(mean, y_test)
        summary["test_nlpd"] = gaussian_nlpd(y_test, mean, var)
        summary["test_coverage_2sd"] = coverage_2sd(y_test, mean, var)
    return result

