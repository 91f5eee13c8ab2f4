"""Binary GP classification by the Jaakkola–Jordan variational bounds (004 §4.2 eqs. 76–77;
Jaakkola & Jordan 2000, Gibbs & MacKay 2000): a closing bracket on the maximum of the log
posterior.

Labels y ∈ {−1, +1}, logistic likelihood p(y | t) = σ(y t), GP prior f ~ N(0, K); the log
posterior up to a constant is Ψ(f) = Σ log σ(y_i f_i) − ½ fᵀK⁻¹f, whose maximum Ψ(f̂) is what
:mod:`algorithms.laplace` finds by Newton's method. Each per-point likelihood is replaced by a
bound that is quadratic (76) or linear (77) in t = y_i f_i, so for fixed variational
parameters the bound on Ψ is a Gaussian-regression problem (§3) with a closed-form maximum:

- **Lower bound** (eq. 76; ν ∈ ℝ): log σ(t) − t/2 = −log 2cosh(t/2) is convex in t², so its
  tangent in t² at ν² lies below it: log σ(t) ≥ log σ(ν) + (t − ν)/2 − λ(ν)(t² − ν²),
  λ(ν) = (σ(ν) − ½)/(2ν) = tanh(ν/2)/(4ν) (1/8 at ν = 0), with equality at ν = ±t. With
  Λ = diag λ(ν), Ψ ≥ Ψ_lower(f; ν) = c(ν) + ½yᵀf − fᵀΛf − ½fᵀK⁻¹f,
  c(ν) = Σ log σ(ν_i) − ν_i/2 + λ_iν_i², maximised at m = (K⁻¹ + 2Λ)⁻¹y/2 = K a,
  a = (I + 2ΛK)⁻¹y/2, with maximum L(ν) = c(ν) + ¼yᵀm ≤ Ψ(f̂). Stably: S = (2Λ)^½,
  B = I + SKS = L_B L_Bᵀ (eigenvalues in [1, 1 + ¼‖K‖]) and a = b − S B⁻¹ S K b with b = y/2,
  never an inverse. Then ν ← |m| (the bound touches Ψ at m) and repeat: a minorise–maximise
  iteration, L(ν_k) ≤ Ψ(m_k) ≤ L(ν_{k+1}) ≤ Ψ(f̂), so the lower bound never falls. The
  paper's "μ, ν ∈ [0, 1]" holds for μ only: ν is any real, and as the bound is even in ν,
  ν = |m| ≥ 0 loses nothing.
- **Upper bound** (eq. 77; μ ∈ [0, 1]): log σ is concave and its concave conjugate is −H,
  H(μ) = −μ log μ − (1 − μ) log(1 − μ) the binary entropy, so log σ(t) ≤ μt − H(μ), with
  equality at μ = σ(−t). For fixed μ, max_f Ψ_upper = U(μ) = ½vᵀKv − Σ H(μ_i), v = μ∘y
  (attained at f = Kv), so U(μ) ≥ Ψ(f̂) for every μ. U is convex on the box
  (∇U = y∘(Kv) − log((1 − μ)/μ), ∇²U = YKY + Ω⁻¹ with Y = diag y, Ω = diag μ(1 − μ)) and, by
  minimax duality, min U = Ψ(f̂), at μ = σ(−y∘f̂). Each iteration takes one damped Newton
  step on U: d_μ = −Ω^½Y C⁻¹ YΩ^½ ∇U with C = I + Ω^½KΩ^½ (the inverse Hessian by the same
  push-through as B, one more Cholesky), taken in the logit z = log(μ/(1 − μ)) as
  z ← z + t·d_μ/ω. That step agrees with Newton's to first order (so it still converges
  quadratically), keeps μ = σ(z) inside (0, 1) with no step cut short at the box's boundary,
  and where a point's Hessian is its entropy term alone it is the fixed point z = −y f. The
  length t ∈ {1, ½, ¼, …} is the first with Armijo's sufficient decrease, so the upper
  bound never rises. (|z| ≤ :data:`Z_MAX`; μ and 1 − μ are computed as σ(z) and σ(−z), both
  accurate.)

Each iteration thus gives a bracket L_k ≤ Ψ(f̂) ≤ U_k whose width closes; the fit stops when
U_k − L_k < ``tol``·(1 + |L_k|), or when neither bound moves any more (round-off), or after
``max_iter`` iterations. The trace's ``gap`` is that relative width, ``objective`` is −L_k.

The classifier is the Gaussian q(f) of the final lower bound (Gibbs & MacKay): covariance
(K⁻¹ + 2Λ)⁻¹, mean m. At x the latent mean is k(x)ᵀK⁻¹m = k(x)ᵀa (so ``coef`` = a), the
latent variance k(x,x) − k(x)ᵀ(K + (2Λ)⁻¹)⁻¹k(x) = k(x,x) − ‖L_B⁻¹S k(x)‖² (no Λ⁻¹ needed),
and p(y = +1 | x) = ∫σ(z)N(z | mean, var)dz
(:func:`algorithms.laplace.predictive_probability`).

``lam`` is not used: the likelihood is logistic, there is no noise variance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.special import expit, xlog1py, xlogy

from algorithms.contract import (
    AlgorithmSpec,
    KernelBlocks,
    Prediction,
    Solution,
    block_rows,
    fill_kernel,
)
from algorithms.evaluation import Recorder
from algorithms.kernels import Kernel
from algorithms.laplace import log_sigmoid, predictive_probability
from algorithms.options import Option

Z_MAX = 600.0  # |logit μ| at most (μ(1 − μ) ≥ e^−600 stays a normal float)
ARMIJO = 1e-4  # sufficient decrease of U along the Newton direction
MAX_HALVINGS = 40  # step halvings before the upper bound counts as converged
ROUND_OFF = 1e-15  # relative size of U − min U below which the upper bound has converged
WORKING_BYTES = 2**26


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of a fit: K, the factor of B (lower bound) and the factor of C (upper
    bound), three n×n arrays, and the training inputs."""
    return 8.0 * (3 * n * n + n * d) + WORKING_BYTES


# ----------------------------------------------------------------------------- the bounds

def jj_lambda(nu: np.ndarray) -> np.ndarray:
    """λ(ν) = (σ(ν) − ½)/(2ν) = tanh(ν/2)/(4ν), even in ν, 1/8 at ν = 0 (series
    1/8 − ν²/96 below |ν| = 1e-4, where the quotient would lose digits)."""
    nu = np.abs(np.asarray(nu, dtype=np.float64))
    small = nu < 1e-4
    safe = np.where(small, 1.0, nu)
    return np.where(small, 0.125 - nu * nu / 96.0, np.tanh(0.5 * safe) / (4.0 * safe))


def log_sigmoid_lower(t: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """Eq. 76: log σ(ν) + (t − ν)/2 − λ(ν)(t² − ν²) ≤ log σ(t) for every real ν; equal at
    ν = ±t. Written as −log(2 cosh(ν/2)) + t/2 − λ(ν)(t² − ν²) (log σ(ν) − ν/2 is even)."""
    t = np.asarray(t, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    return (-np.logaddexp(0.5 * nu, -0.5 * nu) + 0.5 * t
            - jj_lambda(nu) * (t * t - nu * nu))


def binary_entropy(mu: np.ndarray) -> np.ndarray:
    """H(μ) = −μ log μ − (1 − μ) log(1 − μ) (0 at μ ∈ {0, 1})."""
    mu = np.asarray(mu, dtype=np.float64)
    return -xlogy(mu, mu) - xlog1py(1.0 - mu, -mu)


def log_sigmoid_upper(t: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Eq. 77: μt − H(μ) ≥ log σ(t) for every μ ∈ [0, 1]; equal at μ = σ(−t)."""
    return np.asarray(mu) * np.asarray(t) - binary_entropy(mu)


# ----------------------------------------------------------------------------- the iteration

class _Bounds:
    """K, the labels, and the maximisation of each bound on Ψ for fixed parameters."""

    def __init__(self, blocks: KernelBlocks, y: np.ndarray) -> None:
        self.n = n = blocks.n
        self.K = fill_kernel(blocks, np.empty((n, n)))
        self.y = y
        self.Kb = self.K @ (0.5 * y)  # K y/2, the same for every ν

    def factor(self, w: np.ndarray) -> np.ndarray:
        """Lower Cholesky factor of I + diag(√w) K diag(√w), built in Fortran order so that
        LAPACK factors it in place (a C-order matrix would be copied)."""
        s = np.sqrt(w)
        A = np.multiply(self.K, s[:, None], order="F")
        A *= s[None, :]
        A.flat[:: self.n + 1] += 1.0
        return sla.cholesky(A, lower=True, overwrite_a=True, check_finite=False)

    def lower(self, nu: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray,
                                             np.ndarray]:
        """(L(ν), m, a, S, L_B): the maximum of Ψ_lower(·; ν) (eq. 76), its maximiser m = K a,
        a = (I + 2ΛK)⁻¹y/2, and S = (2Λ)^½ with the factor of B = I + SKS."""
        lam = jj_lambda(nu)
        S = np.sqrt(2.0 * lam)
        L_B = self.factor(2.0 * lam)
        b = 0.5 * self.y
        a = b - S * sla.cho_solve((L_B, True), S * self.Kb, check_finite=False)
        m = self.K @ a
        const = float((-np.logaddexp(0.5 * nu, -0.5 * nu) + lam * nu * nu).sum())
        return const + 0.5 * float(b @ m), m, a, S, L_B

    def upper(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        """(U(μ), Kv) at μ = σ(z): the maximum ½vᵀKv − ΣH(μ) of Ψ_upper(·; μ) (eq. 77),
        v = μ∘y, and its maximiser f = Kv. In the logit z, H(σ(z)) = σ(z)·(−log σ(z)) +
        σ(−z)·(−log σ(−z)), accurate for μ near 0 and near 1."""
        mu = expit(z)
        Kv = self.K @ (mu * self.y)
        entropy = mu * np.logaddexp(0.0, -z) + expit(-z) * np.logaddexp(0.0, z)
        return 0.5 * float((mu * self.y) @ Kv) - float(entropy.sum()), Kv

    def newton_upper(self, z: np.ndarray, value: float, Kv: np.ndarray
                     ) -> tuple[np.ndarray, float, np.ndarray, bool]:
        """One damped Newton step on U(μ), μ = σ(z), taken in the logit z (module
        docstring): (z, U, Kv, moved). U never rises; ``moved`` is False when the Newton
        decrement is at round-off or no step lowers U."""
        y = self.y
        mu = expit(z)
        omega = mu * expit(-z)  # μ(1 − μ) > 0 for |z| ≤ Z_MAX
        r = np.sqrt(omega)
        grad = y * Kv + z  # ∇U = y∘(Kv) − log((1 − μ)/μ)
        R = self.factor(omega)
        w = sla.cho_solve((R, True), y * r * grad, check_finite=False)
        slope = -float((r * grad) @ (y * w))  # ∇Uᵀd_μ = −(Newton decrement)²
        if not -0.5 * slope > ROUND_OFF * (1.0 + abs(value)):
            return z, value, Kv, False
        dz = -y * w / r  # d_μ/ω, d_μ = −Ω^½Y C⁻¹ YΩ^½ ∇U the Newton step in μ
        step = 1.0
        for _ in range(MAX_HALVINGS):
            trial = np.clip(z + step * dz, -Z_MAX, Z_MAX)
            trial_value, trial_Kv = self.upper(trial)
            if trial_value < value and trial_value <= value + ARMIJO * step * slope:
                return trial, trial_value, trial_Kv, True
            step *= 0.5
        return z, value, Kv, False

    def log_posterior(self, m: np.ndarray, a: np.ndarray) -> float:
        """Ψ(m) = Σ log σ(y m) − ½ mᵀK⁻¹m with K⁻¹m = a."""
        return float(log_sigmoid(self.y * m).sum()) - 0.5 * float(a @ m)


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_iter: int, tol: float) -> Solution:
    """The Jaakkola–Jordan bracket on max Ψ and the Gaussian classifier of its lower bound
    (module docstring). One trace step per iteration (one lower-bound update, one upper-bound
    Newton step)."""
    n = blocks.n
    kernel = blocks.kernel
    bounds = _Bounds(blocks, y)
    basis = np.arange(n)
    X_basis = blocks.inputs(basis)

    nu = np.zeros(n)  # λ = 1/8: the curvature bound of log σ
    z = np.zeros(n)  # μ = σ(z) = ½
    upper, Kv = bounds.upper(z)
    upper_moving = True
    lower = -math.inf
    stop_reason = f"max_iter = {max_iter} iterations"
    for it in range(1, max_iter + 1):
        L_B = None  # the last factor is not needed any more: at most K, L_B and C at a time
        lower_new, m, a, S, L_B = bounds.lower(nu)
        rise = lower_new - lower
        lower = lower_new
        nu_bound, nu = nu, np.abs(m)  # the ν of this bound; the ν of the next one
        if upper_moving:
            z, upper, Kv, upper_moving = bounds.newton_upper(z, upper, Kv)
        width = upper - lower
        gap = width / (1.0 + abs(lower))
        recorder.step(_predictor(kernel, X_basis, a, S, L_B), n_basis=n, objective=-lower,
                      gap=gap, iteration=it, log_posterior_lower=lower,
                      log_posterior_upper=upper, bracket_width=width)
        if width < tol * (1.0 + abs(lower)):
            stop_reason = (f"bracket width {width:.2g} < tol·(1 + |lower|) = "
                           f"{tol * (1.0 + abs(lower)):.2g}")
            break
        if not upper_moving and not rise > 0.0:
            stop_reason = f"both bounds stalled (round-off) at bracket width {width:.2g}"
            break

    summary = {"n_basis": n, "objective": -lower, "gap": gap,
               "log_posterior_lower": lower, "log_posterior_upper": upper,
               "log_posterior": bounds.log_posterior(m, a), "iterations": it,
               "stop_reason": stop_reason, "jitter": 0.0}
    predict = _predictor(kernel, X_basis, a, S, L_B)
    return Solution(basis, a, X_basis, kernel, lam, summary,
                    extras={"latent_mode": m, "nu": nu_bound, "mu": expit(z)},
                    probability=lambda X_new: predict(X_new).prob)


def _predictor(kernel: Kernel, X_basis: np.ndarray, a: np.ndarray, S: np.ndarray,
               L_B: np.ndarray) -> Callable[[np.ndarray], Prediction]:
    """Latent mean k(x)ᵀa, latent variance k(x,x) − ‖L_B⁻¹ S k(x)‖² and p(y = +1 | x) of the
    Gaussian of a lower bound."""

    def predict(X_new: np.ndarray) -> Prediction:
        X_new = np.asarray(X_new, dtype=np.float64)
        mean = np.empty(len(X_new))
        var = kernel.diag(X_new).astype(np.float64)
        rows = block_rows(len(a))
        for lo in range(0, len(X_new), rows):
            Kx = kernel(X_new[lo: lo + rows], X_basis).T  # (n, block)
            mean[lo: lo + rows] = Kx.T @ a
            V = sla.solve_triangular(L_B, S[:, None] * Kx, lower=True, check_finite=False)
            var[lo: lo + rows] -= np.einsum("ij,ij->j", V, V)
        return Prediction(mean, var, predictive_probability(mean, var))

    return predict


SPECS = [AlgorithmSpec(
    "gp_variational", fit,
    "GP classification by the Jaakkola–Jordan variational bounds (eqs. 76–77): a closing "
    "bracket on the log posterior's maximum",
    options={
        "max_iter": Option(1000, "int", "iterations at most (one lower-bound update and one "
                           "upper-bound Newton step each)", lo=1),
        "tol": Option(1e-9, "float", "stop when upper − lower < tol·(1 + |lower|)", lo=0.0),
        "eval_every": Option(1, "int", "trace test metrics every this many iterations", lo=1),
    },
    task="classification", memory_bytes=memory_bytes, certifiable=False,
    check_options={},
)]
