"""Relevance vector machines (Tipping 2001, JMLR 1:211-244): regression (spec ``rvm``, 004 §6.3
eqs. 127-135) and binary classification (spec ``rvm_classifier``, 004 §6.4 eqs. 136-139; Tipping
§4), the latter in its own section at the end of this docstring.

Relevance vector regression.

Model (004 eq. 127): y = Kθ + noise with the n kernel columns k_i = k(X, x_i) as features and no
bias column (the paper's model t = Kθ has none; a bias appears only as a possible first basis
function of the greedy variant at the end of §6.3, and the contract's predictor
k(x, X_basis) @ coef has no constant term), θ_i ~ N(0, s_i⁻¹) with one precision s_i per
training point (eq. 118), noise N(0, σ²). For the remaining set R (the basis functions not
pruned) the posterior of θ_R is N(μ, Ξ) with

    Ξ = (σ⁻²K_RᵀK_R + S_R)⁻¹,   μ = σ⁻²ΞK_Rᵀy                               (eq. 131)

and the type-II maximum-likelihood re-estimation (eqs. 134-135, flat priors a = b = c = d = 0
in eq. 133) is

    γ_i = 1 − s_iΞ_ii,   s_i ← γ_i / μ_i²,   σ² ← ‖y − K_Rμ‖² / (n − Σ_{i∈R} γ_i).

The σ² update is Tipping's form. 004 eq. 135 (and the papers' summary we work from) write the
denominator as Σ_i s_iΞ_ii over all m basis functions. With m = n (one per training point, as
here) and s_iΞ_ii → 1 for a pruned basis function (Ξ_ii → s_i⁻¹ as s_i → ∞) that sum is
(n − |R|) + Σ_{i∈R}(1 − γ_i) = n − Σ_{i∈R} γ_i, the same number; but read over the remaining
set only (where the computation runs) it is |R| − Σγ_i, which is wrong, and with a bias column
(m = n + 1) it is off by one. n − Σγ_i (n data points minus the number of well-determined
parameters) is what setting the derivative of eq. 133 in σ² to zero gives, so it is the one
implemented. ``learn_noise=false`` holds σ² at ``lam``.

Initialisation as scikit-learn's ``ARDRegression``: s_i = 1 for every i (:data:`INITIAL_PRECISION`)
and σ² = ``lam``. One iteration computes the posterior at the current (s, σ²), records it, then
re-estimates every s_i on R and σ² from the same posterior, and prunes i (s_i → ∞, θ_i = 0) when
the new s_i ≥ ``threshold``; a γ_i ≤ 0 (Ξ_ii not below the prior variance s_i⁻¹, which only
round-off produces) is pruned too. Pruning is final, as in Tipping's and scikit-learn's
procedure. The fit stops at the first iteration after an update that pruned nothing and changed
every log s_i on R (and log σ² when learned) by less than ``tol`` (a relative change of s_i, σ²),
or after ``max_iter`` iterations; the solution is the posterior of the last recorded iteration,
so its μ, Ξ and the reported (s, σ²) agree. A basis function on its way out typically has s_i
growing by a fraction of a percent per iteration until it reaches the threshold, so hundreds to
a few thousand iterations are usual (1584 for 200 points of a noisy sine from σ² = 0.1); they
are cheap once r = |R| is small. With σ² held far below the data's noise, the precisions of the
interpolating weights collapse and A (below) is numerically singular: the evaluator's one-line
error asks for a larger lam.

Numerics: K (n×n, Fortran order) is formed once; pruning compacts its columns K[:, R] in place.
Per iteration A = σ⁻²K_RᵀK_R + S_R is formed by one SYRK (O(n·r²)) and factored A = LLᵀ in place
(O(r³)); μ by two triangular solves, diag Ξ_ii = ‖L⁻¹e_i‖² by triangular solves on blocks of
identity columns (O(r³), one block of ≈ 32 MiB at a time: the diagonal is the only part of Ξ
ever formed). Peak memory (tracemalloc, n = 2000, 1000 test points): 2·n²·8 bytes (K and A at
r = n) + 31 MiB; :func:`memory_bytes` declares 2·n²·8 + X + 64 MiB for ``max_n`` and the
pipeline's size check.

Trace (one row per iteration): ``n_basis`` = |R|; ``log_marginal_likelihood`` = log p(y | s, σ²)
= log N(y | 0, σ²I + K_R S_R⁻¹ K_Rᵀ) of the current (s, σ²) (eq. 127, the quantity the
re-estimation maximises), computed from L as
−½[n log 2π + n log σ² − Σ log s_i + 2 Σ log L_ii + σ⁻²‖y − K_Rμ‖² + μᵀS_Rμ];
``noise_variance`` = σ²; ``max_log_change`` = the max |Δ log s_i|, |Δ log σ²| of the update that
led to this row (NaN on the first); test metrics every ``eval_every`` rows. ``objective`` keeps
its meaning across the project, the primal L(α) of Smola & Bartlett (002 eq. 5) at the job's
``lam``, here of α = μ on R, when σ² is held at lam; with a learned σ² it is NaN with a reason
(the predictor is not meant for the job's lam and the certificate does not apply, as for the
peers that learn their noise).

Prediction (004 eqs. 129-130 with K' = k(X_R, x); Tipping eq. 22): mean k_R(x)ᵀμ, variance of y
σ² + k_R(x)ᵀΞk_R(x) = σ² + ‖L⁻¹k_R(x)‖² (exact: lower == upper). The classification RVM
below reuses :class:`ActiveColumns`, :func:`reestimate_precisions`, :func:`inverse_diagonal`
and the loop's pruning and stopping rule, with a Laplace posterior (Ξ = (KᵀCK + S)⁻¹ at the
mode, eq. 139) in place of :func:`regression_posterior` and no σ².

Relevance vector classification (004 §6.4; Tipping 2001 §4). Labels y ∈ {−1, +1} with the
logistic likelihood p(y_i | t_i) = σ(y_i t_i) (004 eq. 14), latent t = K_Rθ_R over the
remaining set R, θ_i ~ N(0, s_i⁻¹), no noise variance (``lam`` is not used). The negative of
eq. 136 at fixed s is, up to constants, −Ψ with

    Ψ(θ) = Σ_i log σ(y_i t_i) − ½ θᵀS_Rθ,   t = K_Rθ.

With c = π − t01 and C = W = diag π(1 − π) (eqs. 70-71 for the logistic likelihood; t01 =
(y + 1)/2, π = σ(t)), eqs. 137-138 give the gradient ∇Ψ = K_Rᵀ(t01 − π) − S_Rθ = −(K_Rᵀc +
S_Rθ) and the Hessian −H, H = K_RᵀWK_R + S_R. (The paper writes Kc and, in eq. 139, K(CKθ −
c): K is symmetric there; for the n×r columns K_R both are K_Rᵀ.) One outer iteration:

1. the mode θ̂ of Ψ by Newton's method (IRLS), warm-started from the previous θ̂ on R (θ = 0 at
   the first): H = LLᵀ (Cholesky of one SYRK over row blocks of W^½K_R, O(n·r² + r³/3)), the
   step θ ← θ + H⁻¹∇Ψ (eq. 139's first form; its second form H⁻¹K_Rᵀ(WK_Rθ − c) is the same
   point, computed with more cancellation near the mode), halved up to :data:`MAX_HALVINGS`
   times while Ψ would fall by more than its round-off :data:`ROUNDOFF`·|Ψ|. Newton stops
   when the decrement ½∇ΨᵀH⁻¹∇Ψ (the rise the local quadratic model promises) is below
   ``newton_tol``, so L is the factor at the returned θ̂ (then ‖θ̂ − θ*‖_H ≲ √(2·newton_tol);
   the decrement falls quadratically, so the default 1e-12 leaves θ̂ within ≈ 1e-9 of the
   exact mode and one more step would reach round-off: measured on 80 points of two_moons).
   It also stops on round-off, when no halving keeps Ψ or the decrement, already below Ψ's
   round-off, stops falling (a ``newton_tol`` below what float64 resolves), or after
   :data:`MAX_NEWTON_STEPS` steps; the summary's ``newton_unconverged`` counts these modes;
2. the Laplace approximation N(θ̂, Ξ) of p(θ_R | y, s), Ξ = H⁻¹ at θ̂ (004 §6.4 after eq. 139:
   "Setting μ = θ_MAP and Ξ = (KᵀCK + S)⁻¹, we can use (134)"), diag Ξ by
   :func:`inverse_diagonal`;
3. eq. 134 with μ = θ̂ (:func:`reestimate_precisions`): γ_i = 1 − s_iΞ_ii, s_i ← γ_i/θ̂_i², and
   the pruning (s_i ≥ ``threshold`` or γ_i ≤ 0) and the stopping rule of the regression (an
   update that prunes nothing and changes every log s_i by less than ``tol``, or
   ``max_iter`` iterations). The solution is the Laplace posterior of the last recorded
   iteration.

Approximate log marginal likelihood (the quantity step 3 climbs; Tipping §4 and eq. 3.32 of
Rasmussen & Williams): log p(y | s) = log ∫ p(y | θ) N(θ | 0, S_R⁻¹) dθ with log[p(y | θ)
N(θ | 0, S⁻¹)] = Ψ(θ) − (r/2) log 2π + ½ Σ log s_i expanded to second order at θ̂ (∇Ψ = 0): the
Gaussian integral of exp(−½(θ − θ̂)ᵀH(θ − θ̂)) is (2π)^{r/2}|H|^{−½}, so

    log q(y | s) = log p(y | θ̂) − ½ θ̂ᵀS_Rθ̂ + ½ Σ_{i∈R} log s_i − ½ log|K_RᵀWK_R + S_R|

with ½ log|H| = Σ log L_ii. By Sylvester's determinant identity this is the Laplace log
marginal likelihood of the GP with kernel K̃ = K_RS_R⁻¹K_Rᵀ (R&W eq. 3.32, as gp_laplace
computes it), which the tests check densely.

Trace (one row per outer iteration): ``n_basis`` = |R|; ``log_marginal_likelihood`` = log q(y | s)
above; ``log_posterior`` = Ψ(θ̂); ``max_log_change`` as in the regression; ``newton_steps`` of
this iteration's mode; test metrics every ``eval_every`` rows. ``objective`` is NaN with a
reason: it keeps the project's meaning L(α) (002 eq. 5), which a logistic likelihood does not
have, and −Ψ(θ̂) is not an objective of the fit either (its prior S changes every iteration;
the fit climbs log q(y | s), traced as such).

Prediction: latent mean k_R(x)ᵀθ̂ (the Solution's coef = θ̂ on basis = R), latent variance
k_R(x)ᵀΞk_R(x) = ‖L⁻¹k_R(x)‖² (the model's latent function is the finite expansion, so there is
no k(x, x) term), and p(y = +1 | x) = ∫σ(z)N(z | mean, var)dz by
:func:`algorithms.laplace.predictive_probability` (Tipping plugs in σ(mean); the integral is
the Laplace approximation's predictive probability). Memory and refusal as the regression's
(:func:`memory_bytes`: K and H at r = n, W^½K_R streamed in row blocks of ≈ 32 MiB; measured
peak, tracemalloc, n = 2000 with 1000 test points: 2·n²·8 bytes + 31 MiB).

scikit-learn has no RVM classifier (its ARDRegression, the regression's reference, is
regression only); the classifier's reference in the tests is a dense L-BFGS-B optimisation of
Ψ and a dense evaluation of log q(y | s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.linalg import blas
from scipy.special import expit

from algorithms.contract import (
    BLOCK_BYTES,
    AlgorithmSpec,
    KernelBlocks,
    Prediction,
    Solution,
    block_rows,
)
from algorithms.evaluation import Recorder
from algorithms.laplace import log_sigmoid, predictive_probability
from algorithms.options import Option

INITIAL_PRECISION = 1.0  # s_i at the start, as scikit-learn's ARDRegression (lambda_ = 1)
MEMORY_FACTOR = 2  # n×n float64 matrices alive at the peak: K and A = σ⁻²KᵀK + S at r = n
WORKING_BYTES = 2 * BLOCK_BYTES  # one block of kernel values or identity columns, temporaries
MAX_HALVINGS = 30  # classifier: halvings of a Newton step before the mode is taken as found
MAX_NEWTON_STEPS = 100  # classifier: Newton steps per mode at most (a handful when warm-started)
ROUNDOFF = 1e-12  # classifier: a fall of Ψ by ≤ ROUNDOFF·|Ψ| is round-off (gp_laplace's slack)
NO_L_ALPHA = ("a classifier has no L(α) (002 eq. 5); the RVM classifier climbs the approximate "
              "log marginal likelihood (traced as log_marginal_likelihood)")
LEARNED_NOISE = ("the noise variance is learned (summary noise_variance): L(α) at the job's lam "
                 "does not describe this predictor")


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of :func:`fit` on n points of dimension d: K and A = σ⁻²K_RᵀK_R + S_R
    (factored in place) at r = n, X and one block of ≈ 32 MiB."""
    return 8.0 * (MEMORY_FACTOR * n * n + n * d) + WORKING_BYTES


class ActiveColumns:
    """The columns K[:, R] of the remaining basis functions R (``index``), held in the first
    ``r`` columns of one Fortran-ordered n×n array and compacted in place on pruning."""

    def __init__(self, blocks: KernelBlocks) -> None:
        n = blocks.n
        self.K = np.empty((n, n), order="F")
        step = block_rows(n)
        for lo in range(0, n, step):
            self.K[:, lo: lo + step] = blocks.block(slice(None), slice(lo, lo + step))
        self.index = np.arange(n)

    @property
    def r(self) -> int:
        return len(self.index)

    @property
    def columns(self) -> np.ndarray:
        """K_R, an n×r Fortran-contiguous view (no copy)."""
        return self.K[:, : self.r]

    def keep(self, mask: np.ndarray) -> None:
        """Keep the columns where ``mask`` (length r) is true, in order. Each run of kept
        columns moves left in chunks of ≤ :data:`BLOCK_BYTES`, so a chunk that overlaps its
        destination is buffered in at most one block."""
        kept = np.flatnonzero(mask)
        if len(kept) == self.r:
            return
        step = block_rows(len(self.K))
        dst = 0
        for run in np.split(kept, np.flatnonzero(np.diff(kept) != 1) + 1):
            if len(run) and run[0] != dst:
                for lo in range(0, len(run), step):
                    width = min(step, len(run) - lo)
                    self.K[:, dst + lo: dst + lo + width] = \
                        self.K[:, run[0] + lo: run[0] + lo + width]
            dst += len(run)
        self.index = self.index[kept]


def inverse_diagonal(L: np.ndarray) -> np.ndarray:
    """diag((LLᵀ)⁻¹) for a lower-triangular L: Ξ_ii = ‖L⁻¹e_i‖². Column i of L⁻¹ is zero above
    row i and L⁻¹[j:, j:] = (L[j:, j:])⁻¹, so a block of columns j..j+w is one triangular solve
    with L[j:, j:] against identity columns: O(r³/3) in all, one block in memory."""
    r = len(L)
    out = np.empty(r)
    step = block_rows(r)
    for lo in range(0, r, step):
        width = min(step, r - lo)
        E = np.zeros((r - lo, width), order="F")
        E[np.arange(width), np.arange(width)] = 1.0
        V = sla.solve_triangular(L[lo:, lo:], E, lower=True, overwrite_b=True,
                                 check_finite=False)
        out[lo: lo + width] = np.einsum("ij,ij->j", V, V)
    return out


@dataclass(frozen=True)
class Posterior:
    """N(μ, Ξ) of θ_R at fixed (s_R, σ²): ``chol`` L with LLᵀ = Ξ⁻¹, ``mean`` μ, ``xi_diag``
    diag Ξ, ``residual`` y − K_Rμ, ``fitted`` K_Rμ, ``log_evidence`` log p(y | s, σ²)."""

    chol: np.ndarray
    mean: np.ndarray
    xi_diag: np.ndarray
    fitted: np.ndarray
    residual: np.ndarray
    log_evidence: float


def regression_posterior(KR: np.ndarray, Kty: np.ndarray, y: np.ndarray, s: np.ndarray,
                         sigma2: float) -> Posterior:
    """The posterior of eq. 131 and the log evidence of eq. 127 (module docstring) for the
    columns ``KR`` = K_R, ``Kty`` = K_Rᵀy, precisions ``s`` = s_R and noise ``sigma2``."""
    n, r = KR.shape
    if r == 0:
        empty = np.empty(0)
        sse = float(y @ y)
        log_ev = -0.5 * (n * math.log(2 * math.pi * sigma2) + sse / sigma2)
        return Posterior(np.empty((0, 0)), empty, empty, np.zeros(n), y.copy(), log_ev)
    # lower triangle of σ⁻²K_RᵀK_R by SYRK (half a GEMM), + S_R, factored in place
    A = blas.dsyrk(1.0 / sigma2, KR, trans=1, lower=1)
    A[np.diag_indices(r)] += s
    L, _ = sla.cho_factor(A, lower=True, overwrite_a=True, check_finite=False)
    mu = sla.cho_solve((L, True), Kty / sigma2, check_finite=False)
    fitted = KR @ mu
    residual = y - fitted
    log_det_L = float(np.log(np.diag(L)).sum())
    log_ev = -0.5 * (n * math.log(2 * math.pi * sigma2) - float(np.log(s).sum())
                     + 2.0 * log_det_L + float(residual @ residual) / sigma2
                     + float(s @ mu**2))
    return Posterior(L, mu, inverse_diagonal(L), fitted, residual, log_ev)


def _max_log_change(before: np.ndarray, after: np.ndarray) -> float:
    """max |Δ log s_i| over the precisions kept by an update (0 when none is left)."""
    return float(np.max(np.abs(np.log(after) - np.log(before)), initial=0.0))


def _stop_reason(iteration: int, max_iter: int, pruned: bool, delta: float, tol: float,
                 changes: str) -> str | None:
    """Why the outer iteration stops here, or None: converged (after an update that pruned
    nothing and changed every quantity named in ``changes`` by less than tol), or max_iter."""
    if iteration > 1 and not pruned and delta < tol:
        return f"converged: max {changes} = {delta:.2g} < tol = {tol:g}"
    if iteration == max_iter:
        return f"max_iter = {max_iter} iterations (last max {changes}: {delta:.2g})"
    return None


def reestimate_precisions(s: np.ndarray, mean: np.ndarray, xi_diag: np.ndarray,
                          threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 134: γ_i = 1 − s_iΞ_ii and s_i ← γ_i/μ_i². Returns (γ, keep, s_new): ``keep`` is
    false where the new s_i ≥ ``threshold`` (tested as γ_i ≥ threshold·μ_i², so μ_i = 0 needs
    no division) or γ_i ≤ 0; ``s_new`` holds the new precisions of the kept ones only."""
    gamma = 1.0 - s * xi_diag
    mu2 = mean**2
    keep = (gamma > 0.0) & (gamma < threshold * mu2)
    return gamma, keep, gamma[keep] / mu2[keep]


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, threshold: float, tol: float, max_iter: int, learn_noise: bool,
        max_n: int) -> Solution:
    """Relevance vector regression from σ² = ``lam`` and s_i = 1 (module docstring).

    ``threshold``: prune a basis function when its re-estimated s_i reaches it; ``tol``: stop
    when an update changes no log s_i (nor log σ²) by ``tol`` or more and prunes nothing;
    ``max_iter``: at most this many iterations (trace rows); ``learn_noise``: re-estimate σ²
    (Tipping's form of eq. 135) or hold it at ``lam``; ``max_n`` is checked with
    :func:`memory_bytes` before the fit (evaluation.check_size). Deterministic (``rng`` unused).
    """
    n = blocks.n
    active = ActiveColumns(blocks)
    Kty = active.K.T @ y  # K_Rᵀy is its entries on R (compacted with s)
    s = np.full(n, INITIAL_PRECISION)
    sigma2 = lam
    kernel = blocks.kernel
    delta, pruned = math.nan, True  # the last update's max |Δ log s_i|, |Δ log σ²|; pruning
    for iteration in range(1, max_iter + 1):
        post = regression_posterior(active.columns, Kty, y, s, sigma2)
        objective = math.nan if learn_noise else _primal(post, active.index, y, lam)
        recorder.step(_predictor(blocks, active.index, post, sigma2), n_basis=active.r,
                      objective=objective, gap=math.nan,
                      log_marginal_likelihood=post.log_evidence, noise_variance=sigma2,
                      max_log_change=delta)
        stop = _stop_reason(iteration, max_iter, pruned, delta, tol, "|Δ log s|, |Δ log σ²|")
        if stop:
            break
        gamma, keep, s_new = reestimate_precisions(s, post.mean, post.xi_diag, threshold)
        delta = _max_log_change(s[keep], s_new)
        if learn_noise:  # Tipping's denominator n − Σγ (module docstring)
            sigma2_new = float(post.residual @ post.residual) / (n - float(gamma.sum()))
            if not (math.isfinite(sigma2_new) and sigma2_new > 0.0):
                raise FloatingPointError(f"the re-estimated noise variance is {sigma2_new}")
            delta = max(delta, abs(math.log(sigma2_new / sigma2)))
            sigma2 = sigma2_new
        post = None  # its r×r factor is freed before the columns move and the next A exists
        pruned = not keep.all()
        active.keep(keep)
        s, Kty = s_new, Kty[keep]
    n_basis = active.r
    summary = {"n_basis": n_basis, "objective": objective, "gap": math.nan,
               "stop_reason": stop, "jitter": 0.0, "iterations": iteration,
               "noise_variance": sigma2, "log_marginal_likelihood": post.log_evidence}
    reasons = {"gap": "the RVM has no dual problem (it maximises the log marginal likelihood)"}
    if learn_noise:
        reasons["objective"] = LEARNED_NOISE
    predictor = _predictor(blocks, active.index, post, sigma2)

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        var = predictor(X_new).var
        return var, var

    return Solution(active.index.copy(), post.mean, blocks.inputs(active.index), kernel, sigma2,
                    summary, variance_bounds, extras={"precision": s},
                    not_applicable=reasons)


def _primal(post: Posterior, index: np.ndarray, y: np.ndarray, lam: float) -> float:
    """L(α) (002 eq. 5) of α = μ on R: Kα = K_Rμ and αᵀKα = μᵀ(K_Rμ)[R] (K is symmetric)."""
    Kalpha = post.fitted
    return float(-y @ Kalpha + 0.5 * (lam * (post.mean @ Kalpha[index]) + Kalpha @ Kalpha))


def _predictor(blocks: KernelBlocks, index: np.ndarray, post: Posterior | LaplacePosterior,
               sigma2: float):
    """x ↦ (k_R(x)ᵀμ, σ² + ‖L⁻¹k_R(x)‖²) (eqs. 129-130), in blocks of ≈ 32 MiB of x rows."""
    index = index.copy()

    def predict(X_new: np.ndarray) -> Prediction:
        X_new = np.asarray(X_new, dtype=np.float64)
        mean = np.zeros(len(X_new))
        var = np.full(len(X_new), sigma2)
        if len(index) == 0:
            return Prediction(mean, var)
        rows = block_rows(len(index))
        for lo in range(0, len(X_new), rows):
            k = blocks.cross(X_new[lo: lo + rows], index)
            mean[lo: lo + rows] = k @ post.mean
            V = sla.solve_triangular(post.chol, k.T, lower=True, check_finite=False)
            var[lo: lo + rows] += np.einsum("ij,ij->j", V, V)
        return Prediction(mean, var)

    return predict


# ----------------------------------------------------------------------------- classification

@dataclass(frozen=True)
class LaplacePosterior:
    """The Laplace approximation N(θ̂, Ξ) of p(θ_R | y, s_R) (module docstring, classification):
    ``chol`` L with LLᵀ = H = K_RᵀWK_R + S_R at θ̂ (= Ξ⁻¹), ``mean`` θ̂, ``xi_diag`` diag Ξ,
    ``log_posterior`` Ψ(θ̂), ``log_evidence`` log q(y | s),
    ``newton_steps`` and ``halvings`` of the Newton run that found θ̂, ``converged``: it stopped
    on the decrement (not on round-off nor :data:`MAX_NEWTON_STEPS`)."""

    chol: np.ndarray
    mean: np.ndarray
    xi_diag: np.ndarray
    log_posterior: float
    log_evidence: float
    newton_steps: int
    halvings: int
    converged: bool


def _hessian_factor(KR: np.ndarray, W: np.ndarray, s: np.ndarray) -> np.ndarray:
    """L, lower triangular, with LLᵀ = K_RᵀWK_R + S_R (eq. 138): SYRK accumulated over row
    blocks of W^½K_R of ≈ :data:`BLOCK_BYTES` each, then factored in place."""
    n, r = KR.shape
    H = np.zeros((r, r), order="F")
    root = np.sqrt(W)
    step = block_rows(r)
    for lo in range(0, n, step):
        B = root[lo: lo + step, None] * KR[lo: lo + step]
        H = blas.dsyrk(1.0, B, beta=1.0, c=H, trans=1, lower=1, overwrite_c=1)
    H[np.diag_indices(r)] += s
    return sla.cholesky(H, lower=True, overwrite_a=True, check_finite=False)


def laplace_posterior(KR: np.ndarray, y: np.ndarray, s: np.ndarray, theta: np.ndarray,
                      newton_tol: float) -> LaplacePosterior:
    """The mode θ̂ of Ψ(θ) = Σ log σ(y_i (K_Rθ)_i) − ½θᵀS_Rθ by Newton's method from ``theta``
    (eqs. 137-139, step halving), stopped when the decrement ½∇ΨᵀH⁻¹∇Ψ < ``newton_tol``, and
    the Laplace approximation at it (module docstring) for the columns ``KR`` = K_R, labels
    ``y`` ∈ {−1, +1} and precisions ``s`` = s_R."""
    n, r = KR.shape
    if r == 0:  # no basis function: t = 0, p(y_i = ±1) = ½
        log_lik = float(log_sigmoid(np.zeros(n)).sum())
        empty = np.empty(0)
        return LaplacePosterior(np.empty((0, 0)), empty, empty, log_lik, log_lik, 0, 0, True)
    t01 = 0.5 * (y + 1.0)
    theta = np.array(theta, dtype=np.float64)
    f = KR @ theta
    psi = float(log_sigmoid(y * f).sum()) - 0.5 * float(s @ theta**2)
    steps = halvings = 0
    converged = False
    previous = math.inf  # the last decrement
    while True:
        pi = expit(f)
        grad = KR.T @ (t01 - pi) - s * theta
        L = _hessian_factor(KR, pi * (1.0 - pi), s)
        delta = sla.cho_solve((L, True), grad, check_finite=False)
        decrement = 0.5 * float(grad @ delta)
        if decrement < newton_tol:
            converged = True
            break
        slack = ROUNDOFF * abs(psi)  # a fall of Ψ this small is round-off
        if steps == MAX_NEWTON_STEPS or previous <= decrement <= slack:
            break  # the decrement stopped falling below Ψ's resolution: round-off
        previous = decrement
        for _ in range(MAX_HALVINGS + 1):
            theta_new = theta + delta
            f_new = KR @ theta_new
            psi_new = float(log_sigmoid(y * f_new).sum()) - 0.5 * float(s @ theta_new**2)
            if psi_new >= psi - slack:
                break
            delta *= 0.5  # Ψ fell: half the step
            halvings += 1
        else:  # no halving keeps Ψ: the mode is found to round-off (L is the factor at θ)
            break
        L = None  # freed before the next H exists (two r×r at r = n: 3n² in all with K)
        steps += 1
        theta, f, psi = theta_new, f_new, psi_new
    log_evidence = psi + 0.5 * float(np.log(s).sum()) - float(np.log(np.diag(L)).sum())
    return LaplacePosterior(L, theta, inverse_diagonal(L), psi, log_evidence, steps, halvings,
                            converged)


def fit_classifier(blocks: KernelBlocks, y: np.ndarray, *, lam: float,
                   rng: np.random.Generator, recorder: Recorder, threshold: float, tol: float,
                   max_iter: int, newton_tol: float, max_n: int) -> Solution:
    """Relevance vector classification from s_i = 1 and θ = 0 (module docstring).

    ``threshold``, ``tol``, ``max_iter``: pruning and stopping as :func:`fit`; ``newton_tol``:
    stop each mode's Newton iteration when the decrement ½∇ΨᵀH⁻¹∇Ψ is below it; ``max_n`` is
    checked with :func:`memory_bytes` before the fit. ``lam`` is not used (no noise variance);
    labels are ±1 (checked by the evaluator). Deterministic (``rng`` unused).
    """
    n = blocks.n
    active = ActiveColumns(blocks)
    s = np.full(n, INITIAL_PRECISION)
    theta = np.zeros(n)
    delta, pruned = math.nan, True
    newton_steps = halvings = unconverged = 0
    for iteration in range(1, max_iter + 1):
        post = laplace_posterior(active.columns, y, s, theta, newton_tol)
        newton_steps += post.newton_steps
        halvings += post.halvings
        unconverged += not post.converged
        recorder.step(_classifier_predictor(blocks, active.index, post), n_basis=active.r,
                      objective=math.nan, gap=math.nan,
                      log_marginal_likelihood=post.log_evidence,
                      log_posterior=post.log_posterior, max_log_change=delta,
                      newton_steps=post.newton_steps)
        stop = _stop_reason(iteration, max_iter, pruned, delta, tol, "|Δ log s|")
        if stop:
            break
        _, keep, s_new = reestimate_precisions(s, post.mean, post.xi_diag, threshold)
        delta = _max_log_change(s[keep], s_new)
        theta = post.mean[keep]  # the warm start of the next mode
        post = None  # its r×r factor is freed before the columns move and the next H exists
        pruned = not keep.all()
        active.keep(keep)
        s = s_new
    summary = {"n_basis": active.r, "objective": math.nan, "gap": math.nan,
               "stop_reason": stop, "jitter": 0.0, "iterations": iteration,
               "log_marginal_likelihood": post.log_evidence,
               "log_posterior": post.log_posterior, "newton_steps": newton_steps,
               "step_halvings": halvings, "newton_unconverged": unconverged}
    reasons = {"gap": "the RVM has no dual problem (it maximises the log marginal likelihood)",
               "objective": NO_L_ALPHA}
    predict = _classifier_predictor(blocks, active.index, post)
    return Solution(active.index.copy(), post.mean, blocks.inputs(active.index), blocks.kernel,
                    lam, summary, extras={"precision": s}, not_applicable=reasons,
                    probability=lambda X_new: predict(X_new).prob)


def _classifier_predictor(blocks: KernelBlocks, index: np.ndarray, post: LaplacePosterior):
    """x ↦ (latent mean k_R(x)ᵀθ̂, latent variance ‖L⁻¹k_R(x)‖², p(y = +1 | x))."""
    latent = _predictor(blocks, index, post, 0.0)

    def predict(X_new: np.ndarray) -> Prediction:
        out = latent(X_new)
        return Prediction(out.mean, out.var, predictive_probability(out.mean, out.var))

    return predict


SPECS = [AlgorithmSpec(
    "rvm", fit, "relevance vector regression (Tipping; 004 §6.3): type-II ML precisions, "
    "pruned basis (forms the n×n kernel matrix)",
    options={
        "threshold": Option(1e4, "float", "prune a basis function when its precision s_i "
                            "reaches this (scikit-learn's threshold_lambda)", lo=0.0,
                            lo_open=True),
        "tol": Option(1e-6, "float", "stop when an update changes no log s_i, log σ² by tol "
                      "or more and prunes nothing", lo=0.0, lo_open=True),
        "max_iter": Option(5000, "int", "at most this many iterations", lo=1),
        "learn_noise": Option(True, "bool", "re-estimate σ² (eq. 135) from lam; false: hold "
                              "it at lam"),
        "eval_every": Option(10, "int", "trace test metrics every this many iterations (and "
                             "at the last)", lo=1),
        "max_n": Option(10000, "int", "refuse larger n (2·n²·8 bytes of memory)", lo=1),
    },
    seed_free=True, has_variance=True, memory_bytes=memory_bytes,
    certifiable=lambda options: not options["learn_noise"],
    check_options={"max_iter": 50},
), AlgorithmSpec(
    "rvm_classifier", fit_classifier, "relevance vector classification (Tipping; 004 §6.4): "
    "logistic, Laplace posterior by Newton, type-II ML precisions, pruned basis (forms the n×n "
    "kernel matrix)",
    options={
        "threshold": Option(1e4, "float", "prune a basis function when its precision s_i "
                            "reaches this", lo=0.0, lo_open=True),
        "tol": Option(1e-6, "float", "stop when an update changes no log s_i by tol or more "
                      "and prunes nothing", lo=0.0, lo_open=True),
        "max_iter": Option(5000, "int", "at most this many (outer) iterations", lo=1),
        "newton_tol": Option(1e-12, "float", "stop a mode's Newton iteration when the "
                             "decrement ½∇ΨᵀH⁻¹∇Ψ is below this", lo=0.0, lo_open=True),
        "eval_every": Option(10, "int", "trace test metrics every this many iterations (and "
                             "at the last)", lo=1),
        "max_n": Option(10000, "int", "refuse larger n (2·n²·8 bytes of memory)", lo=1),
    },
    task="classification", seed_free=True, memory_bytes=memory_bytes, certifiable=False,
    check_options={"max_iter": 50},
)]
