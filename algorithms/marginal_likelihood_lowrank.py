"""The low-rank marginal likelihood: hyperparameters learned from all n training points in
O(n·m²) per evaluation (004 §3.6 on the subset-of-regressors form; Titsias 2009).

With a basis of m training inputs Z (chosen once, by pivoted Cholesky of the kernel at the
first start: :func:`pivoted_basis`), Q = K_nm K_mm⁻¹ K_mn and Σ = Q + σ²I:

    SoR evidence (``bound="sor"``)       F = log N(y | 0, Σ)                  (004 eq. 62, K → Q)
    Titsias' bound (``bound="vfe"``)     F = log N(y | 0, Σ) − tr(K − Q)/(2σ²)

The second is a lower bound on the exact log marginal likelihood that the basis can only
raise; both equal it when Z is every training input (Q = K). Evaluation, with K_mm = LLᵀ,
V = L⁻¹K_mn, A = V/σ, B = I + AAᵀ = L_B L_Bᵀ and c = L_B⁻¹Ay:

    log|Σ| = n log σ² + 2 Σ log (L_B)_ii,   yᵀΣ⁻¹y = (yᵀy − cᵀc)/σ²,   tr Q = ‖V‖²_F.

Gradient. For a kernel parameter θ_i, with W = Σ⁻¹yyᵀΣ⁻¹ − Σ⁻¹ and P = K_mm⁻¹K_mn, the chain
rule through Q = K_nm P gives tr(W ∂Q) = 2⟨PW, ∂K_mn⟩ − ⟨PWPᵀ, ∂K_mm⟩ and tr ∂Q =
2⟨P, ∂K_mn⟩ − ⟨PPᵀ, ∂K_mm⟩, so

    ∂F/∂θ_i = ⟨G_mn, ∂K_mn⟩ − ½⟨G_mm, ∂K_mm⟩ − [vfe] Σ_j ∂k_jj / (2σ²)
    G_mn = PW + [vfe] P/σ²,   G_mm = PWPᵀ + [vfe] PPᵀ/σ²,

and ∂F/∂log σ² = ½σ² tr W + [vfe] tr(K − Q)/(2σ²), tr W = ‖α‖² − tr Σ⁻¹, α = Σ⁻¹y,
tr Σ⁻¹ = (n − m + tr B⁻¹)/σ². PW = (Pα)αᵀ − PΣ⁻¹ with PΣ⁻¹ = (P − (PAᵀ)B⁻¹A)/σ² by Woodbury:
never an n × n array. The length-scale contractions are those of the dense form
(:func:`algorithms.marginal_likelihood.length_scale_gradient`) between Z and X.

K_mm is factored as it is; if it is not numerically positive definite (a basis chosen at one
length scale, evaluated at a much longer one), jitter 1e-10·v·10^k (k = 0 … 6) is added to its
diagonal and the largest amount used is recorded (:attr:`LowRankObjective.jitter`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from algorithms.inducing_init import greedy_variance_rows
from algorithms.kernel_threads import blas_controller
from algorithms.kernels import Kernel
from algorithms.marginal_likelihood import Parameters, kernel_and_slope, length_scale_gradient

BOUNDS_OF_LOWRANK = ("vfe", "sor")


def pivoted_basis(X: np.ndarray, kernel: Kernel, m: int) -> np.ndarray:
    """Indices of ``m`` rows of X chosen by pivoted Cholesky of the kernel matrix, one greedy
    pivot at a time (largest residual diagonal first: greedy conditional variance, Burt et al.
    2020), sorted; fewer if K has a lower numerical rank. The same rows as our incomplete
    Cholesky's pivots and the peers' ``inducing_init=greedy_variance`` at that kernel and m:
    :func:`algorithms.inducing_init.greedy_variance_rows`, whose random padding past the
    numerical rank is dropped here (its generator is never drawn from otherwise).

    Every step is BLAS-2 (one n × t matrix-vector product for the pivot's factor column),
    alternating with numpy's kernel column: BLAS runs on one thread (n = 8000, d = 8, m = 512
    on 2 loaded cores, load average ≈ 4: median 0.71 s against 3.61 s with 2 BLAS threads)."""
    with blas_controller().limit(limits=1, user_api="blas"):
        rows, pivots = greedy_variance_rows(X, kernel, m, np.random.default_rng(0))
    return np.sort(rows[:pivots])


class LowRankObjective:
    """F(θ) and ∂F/∂θ of the module docstring on inputs X, targets y and basis rows Z."""

    def __init__(self, X: np.ndarray, y: np.ndarray, Z: np.ndarray, params: Parameters,
                 bound: str = "vfe") -> None:
        if bound not in BOUNDS_OF_LOWRANK:
            raise ValueError(f"bound={bound!r}: one of {BOUNDS_OF_LOWRANK}")
        self.X, self.y, self.Z = (np.asarray(a, dtype=np.float64) for a in (X, y, Z))
        self.params, self.bound = params, bound
        self.jitter = 0.0

    def _factor(self, K_mm: np.ndarray, v: float) -> np.ndarray:
        for k in range(-1, 7):
            jitter = 0.0 if k < 0 else 1e-10 * v * 10.0**k
            try:
                L = sla.cholesky(K_mm + jitter * np.eye(len(K_mm)), lower=True,
                                 check_finite=False)
            except np.linalg.LinAlgError:
                continue
            self.jitter = max(self.jitter, jitter)
            return L
        raise np.linalg.LinAlgError("K_mm is not positive definite with jitter up to 1e-4·v")

    def __call__(self, theta: np.ndarray, gradient: bool = True
                 ) -> tuple[float, np.ndarray | None]:
        X, y, Z, params = self.X, self.y, self.Z, self.params
        n, m = len(X), len(Z)
        v, lam = math.exp(theta[0]), math.exp(theta[-1])
        sigma = math.sqrt(lam)
        ls = np.exp(theta[1:-1])
        scale = ls if params.n_lengths > 1 else ls[0]
        S, SZ = X / scale, Z / scale
        K_mn, G_mn_slope = kernel_and_slope(params.name, SZ, S, v)
        K_mm, G_mm_slope = kernel_and_slope(params.name, SZ, SZ, v)
        L = self._factor(K_mm, v)
        V = sla.solve_triangular(L, K_mn, lower=True, check_finite=False)  # L⁻¹K_mn
        A = V / sigma
        B = A @ A.T
        B[np.diag_indices(m)] += 1.0
        L_B = sla.cholesky(B, lower=True, check_finite=False)
        Ay = A @ y
        c = sla.solve_triangular(L_B, Ay, lower=True, check_finite=False)
        yy = float(y @ y)
        trace_gap = n * v - float(np.einsum("ij,ij->", V, V))  # tr(K − Q), k(x, x) = v
        vfe = self.bound == "vfe"
        value = -0.5 * (n * math.log(2 * math.pi) + n * math.log(lam)
                        + 2.0 * np.log(np.diag(L_B)).sum() + (yy - c @ c) / lam)
        if vfe:
            value -= trace_gap / (2.0 * lam)
        if not gradient:
            return float(value), None
        u = sla.solve_triangular(L_B, c, lower=True, trans="T", check_finite=False)
        alpha = (y - A.T @ u) / lam  # Σ⁻¹y = (y − AᵀB⁻¹Ay)/σ²
        P = sla.solve_triangular(L, V, lower=True, trans="T", check_finite=False)  # K_mm⁻¹K_mn
        B_inv_A = sla.cho_solve((L_B, True), A, check_finite=False)
        P_Sigma_inv = (P - (P @ A.T) @ B_inv_A) / lam
        G_mn = np.outer(P @ alpha, alpha)
        G_mn -= P_Sigma_inv  # PW
        G_mm = G_mn @ P.T  # PWPᵀ
        if vfe:
            G_mn += P / lam
            G_mm += (P @ P.T) / lam
        grad = np.empty(len(theta))
        grad[0] = (np.einsum("ij,ij->", G_mn, K_mn) - 0.5 * np.einsum("ij,ij->", G_mm, K_mm)
                   - (n * v / (2.0 * lam) if vfe else 0.0))
        per_dim = (length_scale_gradient(G_mn * G_mn_slope, SZ, S)
                   - 0.5 * length_scale_gradient(G_mm * G_mm_slope, SZ, SZ))
        grad[1:-1] = per_dim if params.n_lengths > 1 else per_dim.sum()
        L_B_inv = sla.solve_triangular(L_B, np.eye(m), lower=True, check_finite=False)
        trace_Sigma_inv = (n - m + float(np.einsum("ij,ij->", L_B_inv, L_B_inv))) / lam
        grad[-1] = 0.5 * lam * (float(alpha @ alpha) - trace_Sigma_inv)
        if vfe:
            grad[-1] += trace_gap / (2.0 * lam)
        return float(value), grad
