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

**Predictive distribution.** Zhang (000) gives a point predictor only. The Gaussian model that
goes with a basis S (m indices, K_S = K_{:S}, k_S(x) = k(X_S, x)) is the subset-of-regressors
(SoR) model of Quiñonero-Candela & Rasmussen (2005, §4): the GP prior restricted to
span{k(·, x_j): j ∈ S}, noise σ² = nλ. With G = σ²K_SS + K_SᵀK_S its predictive distribution
of y at x is

    mean  k_S(x)ᵀc_S,  c_S = G⁻¹K_Sᵀy,        variance  σ² + σ² k_S(x)ᵀG⁻¹k_S(x),

and c_S is exactly the minimiser of R over the span (∇R = 0 ⇔ (K_SᵀK_S + nλK_SS)c = K_Sᵀy).
Zhang's greedy iterate is not c_S: w^k minimises R over the plane span{w^{k−1}, φ(x_{i_k})}
only, so R(w^k) ≥ R(c_S), equal for k ≤ 2 and in general strictly above from k = 3. Nor does it
have a Gaussian variance of its own: in any model with a Gaussian prior and Gaussian noise the
posterior mean is linear in y for a fixed basis (E[f(x) | y] = Cov(f(x), y) Cov(y)⁻¹ y),
whereas (β_k, α_k) solve a 2×2 system whose entries are quadratic in y through w^{k−1}: Zhang's
coefficients are homogeneous but not additive in y, the posterior mean of no Gaussian model.
The SoR variance around Zhang's mean (this module until issue 50) omits the squared distance
between the two means; on kin40k it gave NLPD 16–32 and ±2σ coverage 0.21–0.29. Hence, for
Algorithms 1 and 3, ``predictive``:

- ``rescaled`` (default): Zhang's own coefficients and no variance; test NLPD and coverage are
  ``not_applicable`` with the reason.
- ``sor``: after the last step the coefficients are refitted on the chosen basis, c_S above
  (Cholesky factors of K_SS and G; the refit's seconds count), and the SoR variance goes with
  it: the mean scored for RMSE and the variance scored for NLPD are one model's. The last trace
  row and the summary then describe the refit; ``zhang_R_rescaled`` keeps R of Zhang's last
  iterate, ``refit_dropped`` counts basis points left out as numerically in the span of others.
- ``dtc``: the same refitted mean with the variance of the deterministic training conditional
  (Seeger, Williams & Lawrence 2003; Quiñonero-Candela & Rasmussen 2005, §5), the model with
  the SoR likelihood for the training targets and the exact prior conditional for f(x):
  σ² + σ² k_S(x)ᵀG⁻¹k_S(x) + k(x, x) − k_S(x)ᵀK_SS⁻¹k_S(x), which adds back the prior variance
  the basis cannot explain (the SoR prior has variance k_S(x)ᵀK_SS⁻¹k_S(x) ≤ k(x, x), so its
  error bars shrink to σ² away from the basis). It is the variance ``nystrom`` reports.

Algorithm 2 minimises R exactly on its span, so its coefficients are c_S and its SoR variance
is coherent as it stands. With S = all n points (K nonsingular), c_S = (K + σ²I)⁻¹y is the exact
GP's mean (004 eq. 47) and the SoR variance is σ² + k_xᵀK⁻¹k_x − k_xᵀ(K + σ²I)⁻¹k_x, the exact
variance less k(x, x) − k_xᵀK⁻¹k_x ≥ 0 (x's Nyström residual): equal at the training inputs,
smaller elsewhere; the DTC variance adds exactly that residual back, so it is the exact one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack

from algorithms.contract import (
    AlgorithmSpec,
    ExactLimit,
    KernelBlocks,
    Prediction,
    Solution,
    lowrank_own_hyper,
)
from algorithms.evaluation import Recorder
from algorithms.greedy import DEGENERATE_RTOL, PrimalGreedy
from algorithms.kernel_threads import tiles_own_the_cores
from algorithms.objectives import REFERENCES, solve_reference
from algorithms.options import BYTES_MAX, Option

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


@dataclass(frozen=True)
class SoRPosterior:
    """The posterior on a basis S of the subset-of-regressors model (module docstring;
    Quiñonero-Candela & Rasmussen 2005, §4): coefficients c_S = G⁻¹K_Sᵀy, the fitted values
    K_S c_S, ‖w‖² = c_Sᵀ K_SS c_S, and the predictive variance of y of the SoR model or of the
    DTC model with the same mean. ``keep``: the positions in S it uses; the others are
    numerically in the span of those (both models depend on the span only)."""

    keep: np.ndarray
    coef: np.ndarray
    fitted: np.ndarray
    norm2: float
    variance_bounds: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def sor_posterior(blocks: KernelBlocks, y: np.ndarray, basis: np.ndarray, lam: float,
                  variance: str = "sor") -> SoRPosterior:
    """The SoR posterior of the basis at noise variance σ² = ``lam``: the minimiser of Zhang's
    R over span{k(·, x_i): i ∈ basis}, with G = σ²K_SS + K_SᵀK_S = FFᵀ, and the variance of y

        sor: σ² + σ² k_S(x)ᵀG⁻¹k_S(x),
        dtc: the same + k(x, x) − k_S(x)ᵀK_SS⁻¹k_S(x) (K_SS = L Lᵀ; clipped at 0 for rounding).

    A basis point whose pivot in the pivoted Cholesky of K_SS falls below
    DEGENERATE_RTOL·max diag(K_SS) (a repeated input, a kernel of rank below m) is left out.
    Cholesky factors, no jitter; ``LinAlgError`` if what is kept is not positive definite."""
    K_S = blocks.block(slice(None), basis)
    keep = _independent(K_S[basis, :])
    if len(keep) < len(basis):
        K_S = K_S[:, keep]
    K_SS = K_S[basis[keep], :]
    factor = sla.cholesky(lam * K_SS + K_S.T @ K_S, lower=True, check_finite=False)
    coef = sla.cho_solve((factor, True), K_S.T @ y, check_finite=False)
    prior = sla.cholesky(K_SS, lower=True, check_finite=False) if variance == "dtc" else None
    kernel, X_basis = blocks.kernel, blocks.inputs(basis[keep])

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k_S = kernel(X_new, X_basis).T
        V = sla.solve_triangular(factor, k_S, lower=True, check_finite=False)
        var = lam + lam * np.einsum("ij,ij->j", V, V)
        if prior is not None:
            P = sla.solve_triangular(prior, k_S, lower=True, check_finite=False)
            var += np.maximum(kernel.diag(X_new) - np.einsum("ij,ij->j", P, P), 0.0)
        return var, var

    return SoRPosterior(keep, coef, K_S @ coef, float(coef @ K_SS @ coef), variance_bounds)


def _independent(K_SS: np.ndarray) -> np.ndarray:
    """The sorted positions that LAPACK's pivoted Cholesky (dpstrf) of K_SS takes before every
    pivot left is below DEGENERATE_RTOL·max diag(K_SS): basis points spanning the others."""
    if not len(K_SS):
        return np.arange(0)
    _, piv, rank, info = lapack.dpstrf(K_SS, tol=DEGENERATE_RTOL * float(K_SS.diagonal().max()),
                                       lower=1)
    if info < 0:
        raise np.linalg.LinAlgError(f"dpstrf: argument {-info} is invalid")
    return np.sort(piv[:rank] - 1)


def _greedy(blocks: KernelBlocks, y: np.ndarray, *, lam: float, kappa: int | None,
            rng: np.random.Generator, recorder: Recorder, max_basis: int, reference: str,
            chunk_bytes: int, predictive: str, name: str) -> Solution:
    """Algorithms 1 (κ = None: every index is a candidate) and 3 (a fresh κ-subset per step);
    with ``predictive`` sor or dtc the last step refits the coefficients on the basis."""
    n, d = blocks.n, blocks.d
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

    recorder.expected_steps = max_basis  # a step per basis function (a progress display)
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
            if not math.isfinite(R):
                raise FloatingPointError(f"{name}: R became non-finite at step {k}")
            basis = np.array([j for j, c in coef.items() if c != 0.0], dtype=np.int64)
            if k == max_basis and predictive != "rescaled":
                return _refit(blocks, y, lam, basis, ref, recorder, R, k, flops, max_basis,
                              predictive)
            ref.record(recorder, predict, k, len(basis), R, flops)
    values = np.array([coef[j] for j in basis])
    reasons = {**ref.reasons(), "variance": RESCALED_NO_VARIANCE}
    return Solution(basis, values, blocks.inputs(basis), blocks.kernel, lam,
                    ref.summary(f"k = max_basis = {max_basis}"), None, not_applicable=reasons)


RESCALED_NO_VARIANCE = ("Zhang's rescaled coefficients are the posterior mean of no Gaussian "
                        "model, so no predictive variance matches them "
                        "(algorithm.predictive=sor or dtc refits them and gives a variance)")


def _refit(blocks: KernelBlocks, y: np.ndarray, lam: float, basis: np.ndarray, ref: _Reference,
           recorder: Recorder, R_rescaled: float, k: int, flops: float, max_basis: int,
           predictive: str) -> Solution:
    """``predictive`` sor or dtc: step k's coefficients replaced by the SoR posterior mean on
    the basis (the minimiser of R over its span), recorded as step k with that model's
    variance."""
    try:
        post = sor_posterior(blocks, y, basis, lam, predictive)
    except np.linalg.LinAlgError:
        raise FloatingPointError(f"predictive={predictive}: K_SS or σ²K_SS + K_SᵀK_S is not "
                                 "positive definite on the chosen basis") from None
    dropped = len(basis) - len(post.keep)
    basis = basis[post.keep]
    n, m = blocks.n, len(basis)
    residual = post.fitted - y
    R = 0.5 * float(residual @ residual) / n + 0.5 * ref.lam_z * post.norm2
    X_basis = blocks.inputs(basis)

    def predict(X_new: np.ndarray) -> Prediction:
        return Prediction(blocks.cross(X_new, basis) @ post.coef, post.variance_bounds(X_new)[1])

    # K_SᵀK_S, its Cholesky and the solve, on top of the last step's candidate scoring
    ref.record(recorder, predict, k, m, R, flops + 2.0 * n * m * m + m**3 / 3.0)
    summary = {**ref.summary(f"k = max_basis = {max_basis}, then refitted on the basis"),
               "zhang_R_rescaled": R_rescaled, "refit_dropped": dropped}
    return Solution(basis, post.coef, X_basis, blocks.kernel, lam, summary,
                    post.variance_bounds, not_applicable=ref.reasons())


def _solution(blocks: KernelBlocks, y: np.ndarray, lam: float, basis: np.ndarray,
              coef: np.ndarray, ref: _Reference, stop_reason: str) -> Solution:
    """Algorithm 2's solution: its coefficients are the SoR mean, so the SoR variance is its."""
    reasons = ref.reasons()
    try:
        variance = sor_posterior(blocks, y, basis, lam).variance_bounds
    except np.linalg.LinAlgError:
        variance = None
        reasons["variance"] = "σ²K_SS + K_SᵀK_S is numerically singular on this basis"
    return Solution(basis, coef, blocks.inputs(basis), blocks.kernel, lam,
                    ref.summary(stop_reason), variance, not_applicable=reasons)


def fit_greedy(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
               recorder: Recorder, max_basis: int, reference: str, chunk_bytes: int,
               predictive: str) -> Solution:
    """Zhang's Algorithm 1 (full greedy) for k = 1..max_basis; ``lam`` is σ² = nλ."""
    return _greedy(blocks, y, lam=lam, kappa=None, rng=rng, recorder=recorder,
                   max_basis=max_basis, reference=reference, chunk_bytes=chunk_bytes,
                   predictive=predictive, name="zhang_greedy")


def fit_kappa_greedy(blocks: KernelBlocks, y: np.ndarray, *, lam: float, kappa: int,
                     rng: np.random.Generator, recorder: Recorder, max_basis: int,
                     reference: str, chunk_bytes: int, predictive: str) -> Solution:
    """Zhang's Algorithm 3 (κ-greedy) for k = 1..max_basis; ``lam`` is σ² = nλ."""
    return _greedy(blocks, y, lam=lam, kappa=kappa, rng=rng, recorder=recorder,
                   max_basis=max_basis, reference=reference, chunk_bytes=chunk_bytes,
                   predictive=predictive, name="zhang_kappa_greedy")


def fit_random(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
               recorder: Recorder, max_basis: int, reference: str,
               chunk_bytes: int) -> Solution:
    """Zhang's Algorithm 2 (random) for nested k = 1..max_basis; ``lam`` is σ² = nλ."""
    n = blocks.n
    ref = _Reference(blocks, y, lam, reference, recorder)
    primal = PrimalGreedy(blocks, y, lam, rng, min(max_basis, n), chunk_bytes)
    stop_reason = f"k = max_basis = {max_basis}"
    recorder.expected_steps = max_basis  # a step per basis function (a progress display)
    for k in range(1, max_basis + 1):
        flops = primal.step(1)
        if flops is None:
            stop_reason = "no admissible point left (all remaining are in the span)"
            break
        R = (primal.objective + ref.half_yy) / n
        ref.record(recorder, primal.predict, k, primal.t, R, flops)
    return _solution(blocks, y, lam, np.asarray(primal.S, dtype=np.int64), primal.coef(), ref,
                     stop_reason)


PREDICTIVES = ("rescaled", "sor", "dtc")


def _options(greedy: bool) -> dict[str, Option]:
    predictive = {"predictive": Option(
        "rescaled", "choice", "rescaled: Zhang's coefficients, no variance (NLPD not "
        "applicable); sor, dtc: refit them on the basis (the SoR mean), with the SoR or the "
        "DTC variance",
        choices=PREDICTIVES)} if greedy else {}
    return {
        "max_basis": Option(200, "int", "k_max: the trace covers k = 1..max_basis", lo=1,
                            clip_to_n=True),
        "eval_every": Option(1, "int", "trace test metrics every this many steps", lo=1),
        "reference": Option("cg", "choice", "R(ŵ) for ΔR: cg (K streamed in row blocks), "
                            "dense (caches n×n), none", choices=REFERENCES),
        "chunk_bytes": Option(2**28, "int", "memory for one block of candidate columns", lo=1,
                              hi=BYTES_MAX),
        **predictive,
    }


_CHECK = {"max_basis": 8}
SPECS = [
    AlgorithmSpec("zhang_greedy", fit_greedy, "Zhang's Algorithm 1, full greedy",
                  _options(greedy=True), seed_free=True, check_options=_CHECK,
                  own_hyper=lowrank_own_hyper, blas_lead="numpy"),
    AlgorithmSpec("zhang_kappa_greedy", fit_kappa_greedy, "Zhang's Algorithm 3, κ-greedy",
                  _options(greedy=True), uses_kappa=True, check_options=_CHECK,
                  own_hyper=lowrank_own_hyper),
    AlgorithmSpec("zhang_random", fit_random,
                  "Zhang's Algorithm 2, random (nested draws without replacement)",
                  _options(greedy=False), has_variance=True, check_options=_CHECK,
                  exact_limit=ExactLimit({"max_basis": "n"}), own_hyper=lowrank_own_hyper),
]
