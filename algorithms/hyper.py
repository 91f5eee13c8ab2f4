"""Kernel hyperparameters and noise by maximising the log marginal likelihood (004 §3.6).

log p(y | θ) = −½ yᵀα − ½ log|K_y| − (n/2) log 2π with K_y = K_θ + σ²I and α = K_y⁻¹y
(eq. 62), and its gradient (eq. 64)

    ∂ log p / ∂θ_i = ½ tr((ααᵀ − K_y⁻¹) ∂K_y/∂θ_i),

over θ = (log variance, log length scale(s), log σ²). K_y is factored once per evaluation by
Cholesky; α comes from two triangular solves and the K_y⁻¹ the trace needs from the same factor
(LAPACK ``potri``, no general inverse). With M = ααᵀ − K_y⁻¹ the gradient is

- signal variance v: ½ Σ M∘K;  noise: ½ σ² tr M;
- length scale ℓ_j of a stationary kernel k(r), r = ‖(x−x')/ℓ‖: ∂K/∂log ℓ_j = G∘D_j with
  D_j = (x_j − x'_j)²/ℓ_j² and G = K (RBF), v e^{−r} (Matérn-3/2), K/r (Laplacian), so with
  P = M∘G and s = X_{·j}/ℓ_j, ½ Σ P∘D_j = sᵀ((P1)∘s) − sᵀPs: one GEMM P·X for all j
  (an isotropic length scale is the sum over j).

:func:`learn` runs scipy's L-BFGS-B on −log p from a first start and from ``restarts`` random
starts drawn log-uniformly over the whole bounds box [1e-5, 1e5] of every parameter (as
scikit-learn's ``n_restarts_optimizer`` draws them; a local move around the first start
never left a white-noise basin: abalone's raw targets under ℓ at its 1e-5 bound, LML −7535.7
against scikit-learn's −4398.8), and keeps the best optimum. The first start is the median
heuristic (``init="median"``, the default): every length scale at half the median distance r̃
between points (on many standardised inputs ℓ = 1 makes K ≈ I, where the gradient vanishes;
at ℓ = r̃ the RBF is e^{−1/2} at the median pair, so flat over the data that the optimiser
leaves it for white noise — on pumadyn32nm (d = 32, r̃ ≈ 8) ℓ = 8 and ℓ = 10 both end at the
white-noise likelihood, ℓ = 1.5 … 4 all at the same optimum with four relevant inputs; ℓ = r̃/2
puts the median pair at e^{−2}), the variance at var(y) and σ² at the configured ``lam``; or
the configured kernel and ``lam`` (``init="kernel"``). It learns on a random subset of at most
``subset`` training points (the subset form of §3.6: O(subset³) per evaluation whatever n)
and returns the best optimum with the whole optimiser trace.

The prior mean is a constant, the training targets' mean (``center_y``, the default): the
targets are centred before the learning, and the job fits and scores the centred targets
(:mod:`pipeline.job.hyper`; a shift changes neither RMSE nor NLPD). Under a zero mean, raw
targets far from 0 (abalone's rings, mean ≈ 10) are explained by a large variance or by noise.

A learned parameter within 1 % of the log-width of the bounds box of a bound (a factor 1.26 of
1e-5 or 1e5) is named in ``at_bound`` (:func:`at_bound`): a length scale at its lower bound
or a noise at its upper one is a white-noise model; an ARD length scale at its upper bound is
an input the model ignores.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.optimize import minimize
from scipy.spatial.distance import cdist

from algorithms.errors import InputError
from algorithms.kernels import KERNELS, Kernel
from algorithms.options import Option

LEARNABLE = ("rbf", "matern32", "laplacian")  # kernels whose length-scale gradient is here
BOUNDS = (1e-5, 1e5)  # of every hyperparameter (variance, length scales, σ²)

OPTIONS: dict[str, Option] = {
    "subset": Option(2000, "int", "learn on a random subset of this many training points "
                     "(one evaluation is O(subset³))", lo=2),
    "restarts": Option(5, "int", "L-BFGS-B runs from random starts, log-uniform over the "
                       "bounds box, besides the first start (init)", lo=0),
    "ard": Option(False, "bool", "one length scale per input dimension (else one for all)"),
    "init": Option("median", "choice", "first start: every length scale at half the median "
                   "distance between subset points, the variance at var(y) and σ² at lam "
                   "(median), or the configured kernel and lam (kernel)",
                   choices=("median", "kernel")),
    "center_y": Option(True, "bool", "a constant prior mean, the training targets' mean: "
                       "learn, fit and score the centred targets"),
    "max_iter": Option(200, "int", "L-BFGS-B iterations per run", lo=1),
    "seed": Option(0, "int", "seeds the subset and the random starts", lo=0),
}


def _scale_of(kernel: Kernel) -> tuple[str, float]:
    """(name of the isotropic scale parameter, that scale as a length ℓ): the RBF's width is
    2ℓ² (its unit scale, width 2, is ℓ = 1), the others' scale is ℓ."""
    name, unit = kernel.spec.unit_scale
    value = kernel.params[name]
    return name, math.sqrt(value / unit) if kernel.name == "rbf" else value


def _scale_from_length(name: str, ell: float) -> tuple[str, float]:
    """The inverse of :func:`_scale_of`: (scale parameter, its value) for length ℓ."""
    scale, unit = KERNELS[name].unit_scale
    return scale, unit * ell * ell if name == "rbf" else ell


@dataclass(frozen=True)
class Parameters:
    """θ = (log variance, log length scale(s), log σ²) for one kernel family."""

    name: str
    n_lengths: int  # 1 (isotropic) or d (ARD)

    @classmethod
    def of(cls, kernel: Kernel, d: int, ard: bool) -> Parameters:
        if kernel.name not in LEARNABLE:
            raise InputError(f"hyper=ml learns the kernels {', '.join(LEARNABLE)}; kernel "
                             f"'{kernel.name}' has no length-scale gradient here: pass "
                             "kernel=rbf (or matern32, laplacian), or hyper=fixed")
        return cls(kernel.name, d if ard else 1)

    def theta(self, kernel: Kernel, lam: float, d: int) -> np.ndarray:
        """θ of ``kernel`` and σ² = ``lam`` (ARD from an isotropic kernel: all equal)."""
        ls = kernel.lengthscales
        if ls is None:
            ls = np.full(d, _scale_of(kernel)[1])
        if self.n_lengths == 1:
            ls = np.array([np.exp(np.mean(np.log(ls)))])  # geometric mean of ARD scales
        return np.log(np.concatenate([[kernel.variance], ls, [lam]]))

    def kernel(self, theta: np.ndarray) -> tuple[Kernel, float]:
        """(kernel, σ²) of θ, in the kernel's own parameters (the RBF's width = 2ℓ²)."""
        v, ls, lam = math.exp(theta[0]), np.exp(theta[1:-1]), math.exp(theta[-1])
        if self.n_lengths > 1:
            return Kernel(self.name, {"variance": v, "lengthscales": ls.tolist()}), lam
        scale, value = _scale_from_length(self.name, float(ls[0]))
        return Kernel(self.name, {"variance": v, scale: value}), lam

    def names(self) -> list[str]:
        lengths = (["log_lengthscale"] if self.n_lengths == 1
                   else [f"log_lengthscale_{j}" for j in range(self.n_lengths)])
        return ["log_variance", *lengths, "log_noise"]


def log_marginal_likelihood(X: np.ndarray, y: np.ndarray, params: Parameters,
                            theta: np.ndarray, gradient: bool = True
                            ) -> tuple[float, np.ndarray | None]:
    """log p(y | θ) (eq. 62) and, if ``gradient``, its gradient over θ (eq. 64; module
    docstring). Raises ``numpy.linalg.LinAlgError`` if K_y is not positive definite."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    v, lam = math.exp(theta[0]), math.exp(theta[-1])
    ls = np.exp(theta[1:-1])
    S = X / (ls if params.n_lengths > 1 else ls[0])  # inputs at unit length scale
    if params.name == "rbf":
        sq = np.einsum("ij,ij->i", S, S)
        R2 = S @ (-2.0 * S.T)
        R2 += sq[:, None]
        R2 += sq[None, :]
        np.maximum(R2, 0.0, out=R2)
        K = np.exp(-0.5 * R2)
        K *= v
        G = K
    else:
        R = cdist(S, S)
        E = np.exp(-R)
        E *= v
        if params.name == "matern32":
            K, G = (1.0 + R) * E, E
        else:  # laplacian
            K = E
            with np.errstate(divide="ignore", invalid="ignore"):
                G = np.where(R > 0, E / np.where(R > 0, R, 1.0), 0.0)
    Ky = K + lam * np.eye(n)
    L = sla.cholesky(Ky, lower=True, overwrite_a=True, check_finite=False)
    alpha = sla.cho_solve((L, True), y, check_finite=False)
    value = float(-0.5 * y @ alpha - np.log(np.diag(L)).sum() - 0.5 * n * math.log(2 * math.pi))
    if not gradient:
        return value, None
    W, info = sla.lapack.dpotri(L, lower=1)  # K_y⁻¹ from its factor (lower triangle)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed with info={info}")
    W = np.tril(W) + np.tril(W, -1).T
    M = np.outer(alpha, alpha)
    M -= W
    grad = np.empty(len(theta))
    grad[0] = 0.5 * np.einsum("ij,ij->", M, K)
    grad[-1] = 0.5 * lam * np.trace(M)
    P = M * G
    PS = P @ S
    per_dim = np.einsum("ij,ij->j", S, S * P.sum(1)[:, None]) - np.einsum("ij,ij->j", S, PS)
    grad[1:-1] = per_dim if params.n_lengths > 1 else per_dim.sum()
    return value, grad


@dataclass(frozen=True)
class Learned:
    """The optimum of :func:`learn` and how it was reached.

    ``trace`` has one row per objective evaluation of every run: ``run``, the log marginal
    likelihood and θ. ``kernel`` and ``lam`` are the best run's; ``log_marginal_likelihood``
    its value on the ``n_subset`` (centred) targets; ``at_bound`` its parameters on a bound."""

    kernel: Kernel
    lam: float
    log_marginal_likelihood: float
    n_subset: int
    seconds: float
    names: list[str]
    trace: Mapping[str, np.ndarray]
    runs: list[dict[str, Any]] = field(default_factory=list)
    y_offset: float = 0.0  # the constant prior mean subtracted from the targets (center_y)
    at_bound: list[str] = field(default_factory=list)  # :func:`at_bound` of the optimum

    def summary(self) -> dict[str, Any]:
        """Flat scalars for a result record (learned values, optimiser outcome)."""
        out: dict[str, Any] = {"hyper_kernel": str(self.kernel),
                               "hyper_log_marginal_likelihood": self.log_marginal_likelihood,
                               "hyper_n_subset": self.n_subset, "hyper_seconds": self.seconds,
                               "hyper_lam": self.lam, "hyper_variance": self.kernel.variance,
                               "hyper_evaluations": len(self.trace["run"]),
                               "hyper_runs": len(self.runs), "hyper_y_offset": self.y_offset,
                               "hyper_at_bound": ",".join(self.at_bound)}
        ls = self.kernel.lengthscales
        if ls is None:
            out["hyper_lengthscale"] = _scale_of(self.kernel)[1]
        else:
            out.update({f"hyper_lengthscale_{j}": float(v) for j, v in enumerate(ls)})
        return out


def median_distance(X: np.ndarray, rng: np.random.Generator, pairs: int = 4000) -> float:
    """The median distance between random pairs of rows of X (ℓ = 1 on d standardised inputs
    puts most pairs at r² ≈ 2d, where K ≈ 0 and the gradient vanishes; :func:`learn` starts
    from half this distance)."""
    a, b = rng.integers(0, len(X), size=(2, pairs))
    d = np.sqrt(((X[a] - X[b]) ** 2).sum(1))
    d = d[d > 0]
    return float(np.median(d)) if len(d) else 1.0


def at_bound(theta: np.ndarray, names: list[str], fraction: float = 0.01) -> list[str]:
    """The names of the log-parameters ``theta`` within ``fraction`` of the log-width of the
    bounds box of a bound, each as ``name=lower`` or ``name=upper``."""
    lo, hi = np.log(BOUNDS)
    near = fraction * (hi - lo)
    return [f"{name}={'lower' if t - lo <= near else 'upper'}"
            for name, t in zip(names, theta, strict=True) if t - lo <= near or hi - t <= near]


def learn(X: np.ndarray, y: np.ndarray, kernel: Kernel, lam: float, *,
          rng: np.random.Generator, subset: int = 2000, restarts: int = 5,
          ard: bool = False, max_iter: int = 200, init: str = "median",
          center_y: bool = True) -> Learned:
    """Maximise :func:`log_marginal_likelihood` from the first start (``init``) and from
    ``restarts`` log-uniform random starts over the bounds box; keep the best (module
    docstring). With ``center_y`` the targets' mean is subtracted first (``Learned.y_offset``)."""
    start = time.perf_counter()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = X.shape
    params = Parameters.of(kernel, d, ard)
    y_offset = float(np.mean(y)) if center_y and n else 0.0
    y = y - y_offset
    if n > subset:
        rows = np.sort(rng.choice(n, size=subset, replace=False))
        X, y = X[rows], y[rows]
    theta0 = params.theta(kernel, lam, d)
    if init == "median":
        theta0[0] = math.log(max(float(np.var(y)), BOUNDS[0]))
        theta0[1:-1] = math.log(0.5 * median_distance(X, rng))  # module docstring
    log_bounds = np.log(BOUNDS)
    theta0 = np.clip(theta0, *log_bounds)
    starts = [theta0] + [rng.uniform(*log_bounds, size=len(theta0)) for _ in range(restarts)]
    rows_run: list[int] = []
    rows_value: list[float] = []
    rows_theta: list[np.ndarray] = []
    runs = []

    def objective(theta: np.ndarray, run: int) -> tuple[float, np.ndarray]:
        try:
            value, grad = log_marginal_likelihood(X, y, params, theta)
        except np.linalg.LinAlgError:  # K_y not positive definite: a step too far
            value, grad = -math.inf, np.zeros(len(theta))
        rows_run.append(run)
        rows_value.append(value)
        rows_theta.append(theta.copy())
        return (-value if math.isfinite(value) else 1e300), -grad

    best = None
    for run, theta in enumerate(starts):
        res = minimize(objective, theta, args=(run,), jac=True, method="L-BFGS-B",
                       bounds=[tuple(log_bounds)] * len(theta), options={"maxiter": max_iter})
        value = -float(res.fun)
        runs.append({"run": run, "log_marginal_likelihood": value, "iterations": int(res.nit),
                     "converged": bool(res.success), "message": str(res.message)})
        if math.isfinite(value) and value > -1e299 and (best is None or value > best[0]):
            best = (value, res.x)
    if best is None:
        raise InputError(f"hyper=ml: the marginal likelihood could not be evaluated from kernel "
                         f"{kernel}, lam={lam} (K + σ²I not positive definite at every start); "
                         "pass a larger lam or another kernel scale")
    learned, learned_lam = params.kernel(best[1])
    trace = {"run": np.array(rows_run, dtype=np.int64),
             "log_marginal_likelihood": np.array(rows_value),
             "theta": np.array(rows_theta)}
    return Learned(learned, learned_lam, best[0], len(y), time.perf_counter() - start,
                   params.names(), trace, runs, y_offset, at_bound(best[1], params.names()))
