"""The two quadratic forms of Smola & Bartlett (002 eqs. 5-7; 004 §4.6) and their duality gap.

primal L(α)  = −yᵀKα + ½αᵀ(σ²K + KᵀK)α   (= ½‖y−Kα‖² + ½σ²αᵀKα − ½‖y‖²)
dual   L*(α) = −yᵀα + ½αᵀ(σ²I + K)α
Both are minimised by α = (K+σ²I)⁻¹y and L_min + σ²L*_min = −½‖y‖² (Theorem 1), so for any
α, α*:  L(α) ≥ L_min ≥ −½‖y‖² − σ²L*(α*).
"""

from __future__ import annotations

import numpy as np


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
