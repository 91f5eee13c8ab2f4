"""Zhang's sparse GP algorithms (000 §3.1): greedy (Alg. 1), random (Alg. 2), κ-greedy (Alg. 3).

All three approximately minimise the ridge objective in kernel form (000 eqs. 1, 7)

    R(α) = (1/n) Σ_i ½((Kα)_i − y_i)² + (λ/2) αᵀKα,     w = Σ_i α_i φ(x_i),

with few non-zero α_i. **λ here is Zhang's**; the pipeline's ``lam`` is the noise variance σ² for
every algorithm, so that one sweep compares methods on the same model: λ = σ²/n, and
R(α) = (L(α) + ½‖y‖²)/n with L the primal form of Smola & Bartlett at σ² (002 eq. 5). The traced
``objective`` is that L, directly comparable with SGMA's; ``zhang_R`` is R itself.

- Alg. 1 greedy: w⁰ = 0; step k picks i, α, β minimising R(β w^{k−1} + α φ(x_i)) over all i.
  With f = Kα^{k−1} and q = ‖w^{k−1}‖² = αᵀf this is a 2×2 least-squares problem per candidate
  (A [β, α]ᵀ = r, A = [[fᵀf/n + λq, fᵀk_i/n + λf_i], [·, k_iᵀk_i/n + λK_ii]],
  r = [fᵀy/n, k_iᵀy/n]), so all candidates are scored with one GEMM K_{:M}ᵀ[f, y].
  The old solution is rescaled by β, not refitted; an index may be picked again.
- Alg. 3 κ-greedy: the same over a fresh uniform subset of κ indices each step.
- Alg. 2 random: k indices drawn uniformly and the exact minimiser of R on their span; drawn
  without replacement as a nested sequence (a random permutation's prefixes), so k = n gives
  the exact solution. This is no worse in expectation than drawing with replacement (a uniform
  k-subset contains the distinct points of k draws plus others, and R is minimised exactly), so
  Theorem 3.1 still bounds its mean. It reuses SGMA's primal machinery with κ = 1.

Trace per step k: ``zhang_R`` R(w^k), ``delta_R`` = R(w^k) − R(ŵ) with R(ŵ) = (λ/2)yᵀ(K+nλI)⁻¹y
from a reference solve (``reference``: ``cg`` streams K in row blocks to a 1e-12 residual and
never holds n×n; ``dense`` caches K for one Cholesky; ``none`` leaves ΔR NaN), ``bound`` the
Theorem 3.1 bound R(0)(M²+λ)²/(λ²k + (M²+λ)²) with M² = max_i K_ii, ``gap`` the relative duality
gap of 002 with the exact dual optimum as α*, plus n_basis, seconds, test_rmse, flops.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from algorithms.contract import (
    AlgorithmSpec,
    ExactLimit,
    KernelBlocks,
    Prediction,
    Solution,
    lowrank_own_hyper,
)
from algorithms.evaluation import Recorder
from algorithms.greedy import PrimalGreedy
from algorithms.kernels import tiles_own_the_cores
from algorithms.objectives import REFERENCES, solve_reference
from algorithms.options import Option

# A 2×2 system whose determinant is below this fraction of a11·a22 means φ(x_i) is parallel to
# w^{k−1}: the span is one-dimensional and rescaling w alone is the minimiser.
PARALLEL_RTOL = 1e-12


def theorem31_bound(R0: float, M2: float, lam_z: float, k: np.ndarray) -> np.ndarray:
    """Zhang's Theorem 3.1: ΔR(w^k) ≤ R(0)(M²+λ)² / (λ²k + (M²+λ)²)."""
    c = (M2 + lam_z) ** 2
    return R0 * c / (lam_z**2 * np.asarray(k, dtype=np.float64) + c)


class _Reference:
    """R(0), R(ŵ), M² and the per-step diagnostics shared by the three algorithms."""

    def __init__(self, blocks: KernelBlocks, y: np.ndarray, sigma2: float,
                 reference: str, recorder: Recorder) -> None:
        n = blocks.n
        self.n, self.y, self.sigma2 = n, y, sigma2
        self.lam_z = sigma2 / n
        self.half_yy = 0.5 * float(y @ y)
        self.R0 = self.half_yy / n
        self.diag = blocks.diag()
        self.M2 = float(self.diag.max())
        # R(ŵ) = (λ/2) yᵀ(K + nλI)⁻¹y
        with recorder.untimed():  # the diagnostic's reference, not the method's work
            self.R_hat = 0.5 * self.lam_z * float(y @ solve_reference(blocks, y, sigma2,
                                                                       reference))
        self.last: dict[str, float] = {}

    def record(self, recorder: Recorder, predict, k: int, n_basis: int, R: float,
               flops: float) -> None:
        L = self.n * R - self.half_yy
        L_min = self.n * self.R_hat - self.half_yy
        self.last = {"n_basis": n_basis, "objective": L, "zhang_R": R,
                     "delta_R": R - self.R_hat,
                     "bound": float(theorem31_bound(self.R0, self.M2, self.lam_z, k)),
                     "gap": 2 * (L - L_min) / (abs(L) + abs(L_min))}
        recorder.step(predict, **self.last, flops=flops)

    def summary(self, stop_reason: str) -> dict:
        last = self.last
        return {
            "n_basis": int(last["n_basis"]),
            "objective": float(last["objective"]),
            "zhang_R": float(last["zhang_R"]),
            "delta_R": float(last["delta_R"]),
            "R_hat": self.R_hat,
            "delta_R0": self.R0 - self.R_hat,
            "zhang_lambda": self.lam_z,
            "M2": self.M2,
            "gap": float(last["gap"]),
            "stop_reason": stop_reason,
            "jitter": 0.0,
        }

    def reasons(self) -> dict[str, str]:
        if math.isfinite(self.R_hat):
            return {}
        why = "algorithm.reference=none: R(ŵ) was not computed"
        return {"gap": why, "delta_R": why, "R_hat": why}


def subset_of_regressors_variance(blocks: KernelBlocks, basis: np.ndarray, lam: float):
    """The predictive variance of y of the subset-of-regressors model on ``basis`` (the sparse
    GP whose posterior mean is the exact minimiser of L on span{k(·, x_i): i ∈ basis}):
    σ² + σ² k_S(x)ᵀ G⁻¹ k_S(x), G = σ²K_SS + K_{:S}ᵀK_{:S} (Quiñonero-Candela & Rasmussen
    2005, SoR). Zhang (000) gives no variance; this is the one his span implies."""
    K_S = blocks.block(slice(None), basis)
    G = lam * K_S[basis, :] + K_S.T @ K_S
    factor = sla.cholesky(G, lower=True, check_finite=False)
    kernel, X_basis = blocks.kernel, blocks.inputs(basis)

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        V = sla.solve_triangular(factor, kernel(X_new, X_basis).T, lower=True,
                                 check_finite=False)
        var = lam + lam * np.einsum("ij,ij->j", V, V)
        return var, var

    return variance_bounds


def _greedy(blocks: KernelBlocks, y: np.ndarray, *, lam: float, kappa: int | None,
            rng: np.random.Generator, recorder: Recorder, max_basis: int, reference: str,
            chunk_bytes: int, name: str) -> Solution:
    """Algorithms 1 (κ = None: every index is a candidate) and 3 (a fresh κ-subset per step)."""
    n, d = blocks.n, getattr(blocks, "d", 0)
    ref = _Reference(blocks, y, lam, reference, recorder)
    lam_z, diag = ref.lam_z, ref.diag
    f = np.zeros(n)  # K α^{k−1}
    q = 0.0  # ‖w^{k−1}‖² = αᵀKα
    coef: dict[int, float] = {}
    Fy = np.empty((n, 2))
    Fy[:, 1] = y

    def predict(X_new: np.ndarray) -> Prediction:
        basis = list(coef)
        return Prediction(blocks.cross(X_new, basis) @ np.array([coef[j] for j in basis]))

    with tiles_own_the_cores():  # the projections' tiles use the cores, not BLAS
        for k in range(1, max_basis + 1):
            M = np.arange(n) if kappa is None or kappa >= n else rng.choice(n, kappa, replace=False)
            a11 = float(f @ f) / n + lam_z * q
            r1 = float(f @ y) / n
            Fy[:, 0] = f
            width = max(1, min(len(M), chunk_bytes // (8 * n)))
            best = (-np.inf, None)
            flops = 0.0
            for lo in range(0, len(M), width):
                Mc = M[lo: lo + width]
                # [f, y]ᵀK_{:M} and diag(K_{:M}ᵀK_{:M}) in one pass (KernelBlocks.project)
                P, sq = blocks.project(Mc, Fy)
                kf, ky = P
                a12 = kf / n + lam_z * f[Mc]
                a22 = sq / n + lam_z * diag[Mc]
                r2 = ky / n
                det = a11 * a22 - a12**2
                regular = det > PARALLEL_RTOL * a11 * a22
                with np.errstate(divide="ignore", invalid="ignore"):
                    value = np.where(regular, (a22 * r1**2 - 2 * a12 * r1 * r2 + a11 * r2**2) / det,
                                     r2**2 / a22 if a11 == 0.0 else r1**2 / a11)
                value = np.where(a22 > 0, value, -np.inf)
                flops += 2.0 * n * len(Mc) * (d + 4)
                j = int(np.argmax(value))
                if value[j] > best[0]:
                    best = (value[j], (int(Mc[j]), float(a12[j]), float(a22[j]), float(r2[j]),
                                       bool(regular[j])))
            if best[1] is None:
                raise FloatingPointError(f"{name}: no candidate has a positive kernel diagonal")
            i, a12, a22, r2, regular = best[1]
            k_i = blocks.block(slice(None), [i])[:, 0]  # the chosen kernel column
            if a11 == 0.0:  # w = 0: only α matters
                beta, alpha = 1.0, r2 / a22
            elif regular:
                beta, alpha = np.linalg.solve([[a11, a12], [a12, a22]], [r1, r2])
            else:  # φ(x_i) ∥ w: rescaling w is the minimiser
                beta, alpha = r1 / a11, 0.0
            q = beta**2 * q + 2 * beta * alpha * f[i] + alpha**2 * diag[i]
            f *= beta
            f += alpha * k_i
            coef = {j: beta * c for j, c in coef.items()}
            coef[i] = coef.get(i, 0.0) + alpha
            R = (0.5 * float((f - y) @ (f - y)) / n) + 0.5 * lam_z * q
            nnz = sum(1 for c in coef.values() if c != 0.0)
            ref.record(recorder, predict, k, nnz, R, flops)
            if not math.isfinite(R):
                raise FloatingPointError(f"{name}: R became non-finite at step {k}")
    basis = np.array([j for j, c in coef.items() if c != 0.0], dtype=np.int64)
    values = np.array([coef[j] for j in basis])
    return _solution(blocks, lam, basis, values, ref, f"k = max_basis = {max_basis}")


def _solution(blocks: KernelBlocks, lam: float, basis: np.ndarray, coef: np.ndarray,
              ref: _Reference, stop_reason: str) -> Solution:
    reasons = ref.reasons()
    try:
        variance = subset_of_regressors_variance(blocks, basis, lam)
    except np.linalg.LinAlgError:
        variance = None
        reasons["variance"] = "σ²K_SS + K_SᵀK_S is numerically singular on this basis"
    return Solution(basis, coef, blocks.inputs(basis), blocks.kernel, lam,
                    ref.summary(stop_reason), variance, not_applicable=reasons)


def fit_greedy(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
               recorder: Recorder, max_basis: int, reference: str,
               chunk_bytes: int) -> Solution:
    """Zhang's Algorithm 1 (full greedy) for k = 1..max_basis; ``lam`` is σ² = nλ."""
    return _greedy(blocks, y, lam=lam, kappa=None, rng=rng, recorder=recorder,
                   max_basis=max_basis, reference=reference, chunk_bytes=chunk_bytes,
                   name="zhang_greedy")


def fit_kappa_greedy(blocks: KernelBlocks, y: np.ndarray, *, lam: float, kappa: int,
                     rng: np.random.Generator, recorder: Recorder, max_basis: int,
                     reference: str, chunk_bytes: int) -> Solution:
    """Zhang's Algorithm 3 (κ-greedy) for k = 1..max_basis; ``lam`` is σ² = nλ."""
    return _greedy(blocks, y, lam=lam, kappa=kappa, rng=rng, recorder=recorder,
                   max_basis=max_basis, reference=reference, chunk_bytes=chunk_bytes,
                   name="zhang_kappa_greedy")


def fit_random(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
               recorder: Recorder, max_basis: int, reference: str,
               chunk_bytes: int) -> Solution:
    """Zhang's Algorithm 2 (random) for nested k = 1..max_basis; ``lam`` is σ² = nλ."""
    n = blocks.n
    ref = _Reference(blocks, y, lam, reference, recorder)
    primal = PrimalGreedy(blocks, y, lam, rng, min(max_basis, n), chunk_bytes)
    stop_reason = f"k = max_basis = {max_basis}"
    for k in range(1, max_basis + 1):
        flops = primal.step(1)
        if flops is None:
            stop_reason = "no admissible point left (all remaining are in the span)"
            break
        R = (primal.objective + ref.half_yy) / n
        ref.record(recorder, primal.predict, k, primal.t, R, flops)
    return _solution(blocks, lam, np.asarray(primal.S, dtype=np.int64), primal.coef(), ref,
                     stop_reason)


def _options() -> dict[str, Option]:
    return {
        "max_basis": Option(200, "int", "k_max: the trace covers k = 1..max_basis", lo=1,
                            clip_to_n=True),
        "eval_every": Option(1, "int", "trace test metrics every this many steps", lo=1),
        "reference": Option("cg", "choice", "R(ŵ) for ΔR: cg (K streamed in row blocks), "
                            "dense (caches n×n), none", choices=REFERENCES),
        "chunk_bytes": Option(2**28, "int", "memory for one block of candidate columns", lo=1),
    }


_CHECK = {"max_basis": 8}
SPECS = [
    AlgorithmSpec("zhang_greedy", fit_greedy, "Zhang's Algorithm 1, full greedy",
                  _options(), seed_free=True, has_variance=True, check_options=_CHECK,
                  own_hyper=lowrank_own_hyper),
    AlgorithmSpec("zhang_kappa_greedy", fit_kappa_greedy, "Zhang's Algorithm 3, κ-greedy",
                  _options(), uses_kappa=True, has_variance=True, check_options=_CHECK,
                  own_hyper=lowrank_own_hyper),
    AlgorithmSpec("zhang_random", fit_random,
                  "Zhang's Algorithm 2, random (nested draws without replacement)",
                  _options(), has_variance=True, check_options=_CHECK,
                  exact_limit=ExactLimit({"max_basis": "n"}), own_hyper=lowrank_own_hyper),
]
