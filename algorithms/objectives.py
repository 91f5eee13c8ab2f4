"""The two quadratic forms of Smola & Bartlett (002 eqs. 5-7; 004 §4.6) and their duality gap.

primal L(α)  = −yᵀKα + ½αᵀ(σ²K + KᵀK)α   (= ½‖y−Kα‖² + ½σ²αᵀKα − ½‖y‖²)
dual   L*(α) = −yᵀα + ½αᵀ(σ²I + K)α
Both are minimised by α = (K+σ²I)⁻¹y and L_min + σ²L*_min = −½‖y‖² (Theorem 1), so for any
α, α*:  L(α) ≥ L_min ≥ −½‖y‖² − σ²L*(α*).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla


def primal_objective(Kalpha: np.ndarray, alpha: np.ndarray, y: np.ndarray, lam: float) -> float:
    """L(α) from Kα and α (002 eq. 5)."""
    return float(-y @ Kalpha + 0.5 * (lam * (alpha @ Kalpha) + Kalpha @ Kalpha))


def dual_objective(Kalpha: np.ndarray, alpha: np.ndarray, y: np.ndarray, lam: float) -> float:
    """L*(α) from Kα and α (002 eq. 6)."""
    return float(-y @ alpha + 0.5 * (lam * (alpha @ alpha) + alpha @ Kalpha))


def relative_gap(L_primal: float, L_dual: float, y: np.ndarray, lam: float) -> float:
    """gap(α, α*) = 2(L + σ²L* + ½‖y‖²) / (|L| + |σ²L* + ½‖y‖²|)  (002 §3, after eq. 10).

    Non-negative by Theorem 1; zero exactly when both forms are at their minimum.
    """
    half_yy = 0.5 * float(y @ y)
    upper = lam * L_dual + half_yy
    denom = abs(L_primal) + abs(upper)
    if denom == 0.0:
        return 0.0
    return 2.0 * (L_primal + upper) / denom


REFERENCES = ("cg", "dense", "none")


def solve_reference(blocks, y: np.ndarray, sigma2: float, reference: str) -> np.ndarray:
    """(K + σ²I)⁻¹y for reference optima: ``cg`` streams K in row blocks (never n×n),
    ``dense`` forms K and uses Cholesky, ``none`` returns NaN. ``blocks`` is a KernelBlocks."""
    n = blocks.n
    if reference == "none":
        return np.full(n, np.nan)
    if reference == "dense":
        K = blocks.block(slice(None), slice(None))
        K[np.diag_indices(n)] += sigma2
        return sla.cho_solve(sla.cho_factor(K, lower=True, check_finite=False), y,
                             check_finite=False)
    def matvec(v: np.ndarray) -> np.ndarray:
        return blocks.matmul(v, 2**25) + sigma2 * v  # ≈ 32 MB of kernel rows at a time

    import scipy.sparse.linalg as spla  # here: ~0.03 s of import a job without it skips

    operator = spla.LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    x, info = spla.cg(operator, y, rtol=1e-12, atol=0.0, maxiter=10 * n)
    if info != 0:
        raise FloatingPointError(f"CG for the reference solve did not converge in {info} "
                                 "iterations; use algorithm.reference=dense")
    return x
