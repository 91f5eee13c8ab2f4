"""Binary GP classification by the Laplace approximation (004 §3.5, §4.1 eqs. 69–75; R&W
Algorithms 3.1–3.2).

Labels y ∈ {−1, +1}, logistic likelihood p(y | f) = σ(y f), GP prior f ~ N(0, K). Newton's
method on the log posterior Ψ(f) = log p(y | f) − ½ fᵀK⁻¹f (eq. 72: α_new = (KC + I)⁻¹(KCα −
c) with c, C the first and second derivatives of −log p(y | f)) finds the mode f̂; with
W = diag(π(1 − π)), π = σ(f), and ∇ = (y + 1)/2 − π, one step is f ← (K⁻¹ + W)⁻¹(W f + ∇).

- **Full form** (``m`` null): the step in R&W's stable form, B = I + W^½KW^½ = LLᵀ,
  a = b − W^½L⁻ᵀL⁻¹W^½K b with b = W f + ∇, f = K a: one n×n Cholesky per iteration, O(n³).
- **Low rank** (``m`` = an int, eq. 75): K̃ = ΦΦᵀ with Φ = K_{:P}L_PP⁻ᵀ the partial Cholesky
  factor of m pivots P (:class:`~algorithms.lowrank.PartialCholesky`: drawn at random, the
  Nyström subset, or by largest residual diagonal, ``subset=pivoted``). In the weight space
  f = Φw, w ~ N(0, I), Woodbury turns the step into w = (I_m + ΦᵀWΦ)⁻¹Φᵀ(W f + ∇): one m×m
  Cholesky and O(n·m²) per iteration, never an n×n matrix. With m = n (every point a pivot)
  it is the full form.

The step is halved (up to :data:`MAX_HALVINGS` times) whenever it would lower Ψ, and the
iteration stops when Ψ rises by less than ``tol`` (scikit-learn's test on its log marginal
likelihood; its default 1e-10 too). At the mode, the approximate log marginal likelihood is
log q(y | X) = Ψ(f̂) − Σ log L_ii (R&W eq. 3.32; −½ log|I_m + ΦᵀWΦ| in the low-rank form).

Prediction (R&W Alg. 3.2): latent mean f̄(x) = k(x)ᵀ∇(f̂) (low rank: φ(x)ᵀw with
φ(x) = L_PP⁻¹k_P(x)), latent variance V(x) = k(x,x) − ‖L⁻¹W^½k(x)‖² (low rank: the DTC form
k(x,x) − ‖φ‖² + ‖R⁻¹φ‖², R the factor of I_m + ΦᵀWΦ, equal to the full one at m = n), and
p(y = +1 | x) = ∫σ(z)N(z | f̄, V)dz by the trapezoidal rule (:func:`predictive_probability`,
accurate to round-off; scikit-learn uses an erf approximation of the same integral, so its
probabilities differ from these in the fourth decimal).

``lam`` is not used: the likelihood is logistic, there is no noise variance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.special import expit

from algorithms.contract import (
    AlgorithmSpec,
    KernelBlocks,
    Prediction,
    Solution,
    block_rows,
    fill_kernel,
)
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.lowrank import PartialCholesky
from algorithms.options import Option

MAX_HALVINGS = 30  # step halvings before a Newton step that lowers Ψ is given up
WORKING_BYTES = 2**26


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of a fit: K and the Cholesky factor of B (full form: two n×n; tracemalloc
    at n = 1500: 2.13·n²·8 bytes, the excess one block), or Φ and a block of kernel columns
    (low rank: O(n·m))."""
    m = options.get("m")
    if m is None:
        return 8.0 * (2 * n * n + n * d) + WORKING_BYTES
    return 8.0 * (2 * n * min(m, n) + n * d) + WORKING_BYTES


def log_sigmoid(z: np.ndarray) -> np.ndarray:
    """log σ(z) = −log(1 + e^{−z}), without overflow."""
    return -np.logaddexp(0.0, -z)


def predictive_probability(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """p(y = +1) = ∫σ(z)N(z | mean, var)dz = E σ(mean + sd·u), u ~ N(0, 1), by the trapezoidal
    rule in u on [−10, 10]. The integrand is analytic in a strip of half-width π/sd around the
    real axis (σ has poles at z = iπ(2k + 1)), so with the step h = min(0.1, 0.25/sd) the error
    is ~exp(−2π²/0.25) ≈ 1e-34 whatever the variance (Gauss–Hermite with 64 nodes is off by
    6e-5 at var = 30), and the truncation at ±10 sd costs ~1e-23."""
    mean = np.asarray(mean, dtype=np.float64)
    sd = np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), 0.0))
    out = np.empty(len(mean))
    rows = 4096
    for lo in range(0, len(mean), rows):
        m, s = mean[lo: lo + rows], sd[lo: lo + rows]
        h = min(0.1, 0.25 / max(float(s.max(initial=0.0)), 1e-300))
        u = np.arange(-10.0, 10.0 + 0.5 * h, h)
        weights = h * np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
        out[lo: lo + rows] = expit(m[:, None] + s[:, None] * u[None, :]) @ weights
    return out


class _Newton:
    """Ψ, its gradient and W at a latent vector f for labels y ∈ {−1, +1}."""

    def __init__(self, y: np.ndarray) -> None:
        self.y = y
        self.t = 0.5 * (y + 1.0)

    def at(self, f: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(log p(y | f), ∇ log p(y | f), W = −∇² log p(y | f))."""
        pi = expit(f)
        return float(log_sigmoid(self.y * f).sum()), self.t - pi, pi * (1.0 - pi)


class _Form:
    """What both forms share: log|factor| = ½ log det of B (or of I_m + ΦᵀWΦ)."""

    def factor(self, W: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def log_det(self, W: np.ndarray) -> float:
        return float(np.log(np.diag(self.factor(W))).sum())


class _FullForm(_Form):
    """The Newton iteration with the n×n kernel matrix (R&W Alg. 3.1); its weights are
    a = K⁻¹f and fᵀK⁻¹f = aᵀf."""

    def __init__(self, blocks: KernelBlocks) -> None:
        self.n = n = blocks.n
        self.K = fill_kernel(blocks, np.empty((n, n)))

    def factor(self, W: np.ndarray) -> np.ndarray:
        sW = np.sqrt(W)
        B = sW[:, None] * self.K
        B *= sW[None, :]  # in place: no second n×n temporary
        B.flat[:: self.n + 1] += 1.0
        # B is symmetric: its transpose is a Fortran-ordered view LAPACK factors in place
        return sla.cholesky(B.T, lower=True, overwrite_a=True, check_finite=False)

    def step(self, f: np.ndarray, grad: np.ndarray, W: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        """The full Newton step from f: (target f, its a = K⁻¹f)."""
        sW = np.sqrt(W)
        L = self.factor(W)
        b = W * f + grad
        v = sla.cho_solve((L, True), sW * (self.K @ b), check_finite=False)
        a = b - sW * v
        return self.K @ a, a

    @staticmethod
    def quadratic(a: np.ndarray, f: np.ndarray) -> float:
        """fᵀK⁻¹f = aᵀf."""
        return float(a @ f)


class _LowRankForm(_Form):
    """The Newton iteration in the weight space of K̃ = ΦΦᵀ (eq. 75 by Woodbury); its weights
    are w with f = Φw and fᵀK̃⁺f = wᵀw."""

    def __init__(self, Phi: np.ndarray) -> None:
        self.Phi = Phi

    def factor(self, W: np.ndarray) -> np.ndarray:
        A = self.Phi.T @ (W[:, None] * self.Phi)
        A.flat[:: A.shape[0] + 1] += 1.0
        return sla.cholesky(A, lower=True, overwrite_a=True, check_finite=False)

    def step(self, f: np.ndarray, grad: np.ndarray, W: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        """The full Newton step from f: (target f, its weights w)."""
        R = self.factor(W)
        w = sla.cho_solve((R, True), self.Phi.T @ (W * f + grad), check_finite=False)
        return self.Phi @ w, w

    @staticmethod
    def quadratic(w: np.ndarray, f: np.ndarray) -> float:
        """fᵀK̃⁺f = wᵀw."""
        return float(w @ w)


def _check_m(m: int | None, n: int) -> int | None:
    if m is not None and not 1 <= m <= n:
        raise InputError(f"algorithm.m={m} must be between 1 and n_train={n} (or null for the "
                         f"full n×n form); pass e.g. algorithm.m={min(n, 256)}")
    return m


def _pivots(blocks: KernelBlocks, m: int, subset: str, rng: np.random.Generator
            ) -> PartialCholesky:
    """The partial Cholesky factor of m pivots: random (a permutation's prefix, degenerate
    points skipped) or by largest residual diagonal."""
    chol = PartialCholesky(blocks, m)
    if subset == "random":
        order = rng.permutation(blocks.n)
        drawn = 0
        while chol.t < m and drawn < blocks.n:
            take = order[drawn: drawn + m - chol.t]
            drawn += len(take)
            chol.add(take)
    else:
        while chol.t < m:
            pivot = chol.greedy_pivot()
            if pivot is None:
                break
            chol.add([pivot])
    return chol


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, m: int | None, subset: str, max_iter: int, tol: float
        ) -> Solution:
    """The Laplace approximation's latent mode, its log marginal likelihood and the
    predictive class probabilities (module docstring). One trace step per Newton iteration."""
    n = blocks.n
    m = _check_m(m, n)
    newton = _Newton(y)
    kernel = blocks.kernel
    if m is None:
        form: _FullForm | _LowRankForm = _FullForm(blocks)
        basis = np.arange(n)
        n_basis = n
        L_PP = None
    else:
        chol = _pivots(blocks, m, subset, rng)
        form = _LowRankForm(chol.factor().copy())
        basis = np.asarray(chol.pivots, dtype=np.int64)
        n_basis = len(basis)
        L_PP = form.Phi[basis, :]
    X_basis = blocks.inputs(basis)

    f = np.zeros(n)
    log_lik, grad, W = newton.at(f)
    psi = log_lik  # Ψ(0) = log p(y | 0)
    weights = np.zeros(n_basis if m is not None else n)
    stop_reason = f"max_iter = {max_iter} Newton iterations"
    halvings = 0
    for it in range(1, max_iter + 1):
        f_new, weights_new = form.step(f, grad, W)
        psi_new, tried = 0.0, 0
        while True:
            log_lik_new, grad_new, W_new = newton.at(f_new)
            psi_new = log_lik_new - 0.5 * form.quadratic(weights_new, f_new)
            if psi_new >= psi - 1e-12 * abs(psi) or tried == MAX_HALVINGS:
                break
            # Ψ fell: go half way back towards the current point (the weights are linear in f)
            tried += 1
            weights_new = 0.5 * (weights_new + weights)
            f_new = 0.5 * (f_new + f)
        halvings += tried
        rise = psi_new - psi
        f, weights, psi = f_new, weights_new, psi_new
        log_lik, grad, W = log_lik_new, grad_new, W_new
        recorder.step(_predictor(form, kernel, X_basis, basis, grad, W, weights, m, L_PP),
                      n_basis=n_basis, objective=-psi, gap=math.nan, newton_iteration=it)
        if rise < tol:
            stop_reason = f"Ψ rose by {rise:.2g} < tol = {tol:g}"
            break

    log_det = form.log_det(W)
    log_ml = psi - log_det
    if not math.isfinite(log_ml):
        raise FloatingPointError("the Laplace approximation's log marginal likelihood is not "
                                 "finite")
    predict = _predictor(form, kernel, X_basis, basis, grad, W, weights, m, L_PP)
    coef = grad if m is None else sla.solve_triangular(L_PP, weights, lower=True, trans="T",
                                                       check_finite=False)
    summary = {"n_basis": n_basis, "objective": -psi, "gap": math.nan,
               "log_marginal_likelihood": log_ml, "log_posterior": psi,
               "newton_iterations": it, "step_halvings": halvings, "jitter": 0.0,
               "stop_reason": stop_reason,
               "n_dropped": 0 if m is None else chol.n_dropped}
    return Solution(basis, coef, X_basis, kernel, lam, summary,
                    extras={"latent_mode": f},
                    not_applicable={"gap": "no duality gap for the Laplace approximation"},
                    probability=lambda X_new: predict(X_new).prob)


def _predictor(form, kernel, X_basis, basis, grad, W, weights, m, L_PP):
    """Latent mean, latent variance and p(y = +1 | x) of the current state (the factor of B
    or of I_m + ΦᵀWΦ is computed at the first call)."""
    sW = np.sqrt(W)
    factors: list[np.ndarray] = []

    def predict(X_new: np.ndarray) -> Prediction:
        if not factors:
            factors.append(form.factor(W))
        L = R = factors[0]
        X_new = np.asarray(X_new, dtype=np.float64)
        mean = np.empty(len(X_new))
        var = kernel.diag(X_new).astype(np.float64)
        rows = block_rows(len(basis))
        for lo in range(0, len(X_new), rows):
            Kx = kernel(X_new[lo: lo + rows], X_basis).T  # (basis, block)
            if m is None:
                mean[lo: lo + rows] = Kx.T @ grad
                V = sla.solve_triangular(L, sW[:, None] * Kx, lower=True, check_finite=False)
                var[lo: lo + rows] -= np.einsum("ij,ij->j", V, V)
            else:
                phi = sla.solve_triangular(L_PP, Kx, lower=True, check_finite=False)
                mean[lo: lo + rows] = phi.T @ weights
                V = sla.solve_triangular(R, phi, lower=True, check_finite=False)
                var[lo: lo + rows] += (np.einsum("ij,ij->j", V, V)
                                       - np.einsum("ij,ij->j", phi, phi))
        return Prediction(mean, var, predictive_probability(mean, var))

    return predict


SPECS = [AlgorithmSpec(
    "gp_laplace", fit,
    "GP classification by the Laplace approximation (Newton, logistic; full or low rank)",
    options={
        "m": Option(None, "int", "low-rank K̃ of m pivots (eq. 75); null: the full n×n form",
                    lo=1, none_ok=True, example=128),
        "subset": Option("random", "choice", "the low-rank pivots: random (Nyström) or "
                         "pivoted (largest residual diagonal)", choices=("random", "pivoted")),
        "max_iter": Option(100, "int", "Newton iterations at most", lo=1),
        "tol": Option(1e-10, "float", "stop when Ψ rises by less than this", lo=0.0),
        "eval_every": Option(1, "int", "trace test metrics every this many iterations", lo=1),
    },
    task="classification", memory_bytes=memory_bytes, certifiable=False,
    check_options={"m": None},
)]
