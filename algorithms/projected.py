"""Finite-dimensional GP approximations (003, Ferrari-Trecate, Williams & Opper, NIPS 1998).

Mercer: ∫C(x,z)φ_i(z)p(z)dz = λ_iφ_i(x). :func:`mercer_uniform` solves it numerically for
p = U(0,1) by Nyström quadrature on Gauss–Legendre nodes and extends φ_i to any x by the Nyström
formula φ_i(x) = λ_i⁻¹ Σ_q w_q C(x, z_q) φ_i(z_q); :func:`mercer_empirical` does the same for the
empirical density of a data set (weights 1/N: the Nyström eigenbasis).

With Φ_{ji} = φ_i(x_j) (n×m), Λ = diag(λ_1..λ_m), H = K + σ²I and targets t, every predictor is
ŷ(x) = k(x)ᵀ L t with k(x) = (φ_1(x)..φ_m(x)) and an m×n matrix L (:func:`predictor_matrix`):

- ``pbr`` (b):  L = β A⁻¹ Φᵀ,  A = Λ⁻¹ + βΦᵀΦ,  β = 1/σ²;
- ``finite_full`` (g°):  L = Λ Φᵀ H⁻¹;
- ``finite_optimal`` (h°):  L = F° Φᵀ,  F° = ΛΦᵀΦ (ΦᵀHΦ)⁻¹;
- ``finite_diagonal`` (u°):  L = D° Φᵀ,  D°_ii = (ΦᵀΦΛ)_ii / (ΦᵀHΦ)_ii.

Lemma 4: the x̄-error (squared error on a new noisy target, averaged over the GP prior and
x ~ p) is E = Σ_i λ_i + σ² + tr(L H Lᵀ − 2 L Φ Λ), with Σ_i λ_i = ∫C(x,x)p(x)dx
(:func:`xbar_error`). The detaching point of an m-dimensional predictor is n̄ = σ²/λ_m.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from algorithms.base import InputError
from algorithms.kernels import Kernel

PREDICTORS = ("pbr", "finite_full", "finite_optimal", "finite_diagonal")


@dataclass(frozen=True)
class MercerBasis:
    """Eigenvalues λ_1 ≥ … ≥ λ_m and eigenfunctions of a kernel under an input density."""

    kernel: Kernel
    nodes: np.ndarray      # quadrature nodes z_q, (Q, d)
    weights: np.ndarray    # quadrature weights w_q (sum 1)
    eigenvalues: np.ndarray  # (m,)
    node_values: np.ndarray  # φ_i(z_q), (Q, m)
    trace: float           # Σ over all eigenvalues = ∫C(x,x)p(x)dx

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """φ_i(x) for each row of X by the Nyström formula, shape (len(X), m)."""
        K = self.kernel(np.asarray(X, dtype=np.float64).reshape(len(X), -1), self.nodes)
        return (K * self.weights) @ self.node_values / self.eigenvalues


@dataclass(frozen=True)
class Density:
    """An input density p with the quadrature (nodes z_q, weights w_q) that integrates over it.

    ``uniform``: U(0,1) in 1-D, Gauss–Legendre nodes, x̄ drawn from the continuous density;
    ``empirical``: the empirical distribution of a set of inputs (weights 1/Q), x̄ drawn from
    those inputs with replacement, so the quadrature is exact.
    """

    name: str
    nodes: np.ndarray    # (Q, d)
    weights: np.ndarray  # (Q,), sum 1

    def sample(self, rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
        """``size = (draws, n)`` inputs, shape (draws, n, d)."""
        if self.name == "uniform":
            return rng.uniform(0.0, 1.0, size=(*size, 1))
        return self.nodes[rng.integers(len(self.weights), size=size)]


def uniform_density(n_nodes: int = 2000) -> Density:
    """U(0,1) with an ``n_nodes``-point Gauss–Legendre rule."""
    if not isinstance(n_nodes, (int, np.integer)) or n_nodes < 2:
        raise InputError(f"n_nodes={n_nodes!r} must be an integer ≥ 2 (quadrature nodes)")
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    return Density("uniform", ((x + 1) / 2)[:, None], w / 2)


def empirical_density(X: np.ndarray) -> Density:
    """The empirical distribution of the rows of X."""
    X = np.asarray(X, dtype=np.float64)
    return Density("empirical", X.reshape(len(X), -1), np.full(len(X), 1.0 / len(X)))


def kernel_trace(kernel: Kernel, density: Density) -> float:
    """Σ_i λ_i = ∫C(x,x)p(x)dx."""
    return float(density.weights @ kernel.diag(density.nodes))


def mercer(kernel: Kernel, density: Density, m: int) -> MercerBasis:
    """The m leading Mercer eigenpairs of ``kernel`` under ``density`` (Nyström quadrature)."""
    Q = len(density.weights)
    if not isinstance(m, (int, np.integer)) or not 1 <= m <= Q:
        raise InputError(f"m={m!r} must be an integer between 1 and the number of nodes {Q}")
    root = np.sqrt(density.weights)
    A = kernel(density.nodes, density.nodes) * np.outer(root, root)  # W^½ K W^½, symmetric
    values, vectors = sla.eigh(A, subset_by_index=[Q - m, Q - 1])
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    return MercerBasis(kernel, density.nodes, density.weights, values,
                       vectors / root[:, None], kernel_trace(kernel, density))


def mercer_uniform(kernel: Kernel, m: int, n_nodes: int = 2000) -> MercerBasis:
    """Mercer eigenpairs for p = U(0,1) in 1-D by Gauss–Legendre Nyström quadrature."""
    return mercer(kernel, uniform_density(n_nodes), m)


def mercer_empirical(kernel: Kernel, X: np.ndarray, m: int) -> MercerBasis:
    """Mercer eigenpairs for the empirical density of X (the Nyström eigenbasis)."""
    return mercer(kernel, empirical_density(X), m)


def diag_moments(basis: MercerBasis) -> np.ndarray:
    """∫C(x,x)φ_k²(x)p(x)dx for k = 1..m (eq. 7's c_k; Σλ_i for a stationary kernel)."""
    return (basis.weights * basis.kernel.diag(basis.nodes)) @ basis.node_values**2


def predictor_matrix(name: str, Phi: np.ndarray, lam: np.ndarray, H: np.ndarray,
                     sigma2: float) -> np.ndarray:
    """The m×n matrix L of predictor ``name`` (ŷ(x) = φ(x)ᵀ L t); see the module docstring."""
    Lam = np.diag(lam)
    if name == "pbr":
        A = np.diag(1.0 / lam) + Phi.T @ Phi / sigma2
        return sla.solve(A, Phi.T, assume_a="pos") / sigma2
    if name == "finite_full":
        return Lam @ sla.solve(H, Phi, assume_a="pos").T
    PHP = Phi.T @ H @ Phi
    if name == "finite_optimal":
        rhs = (Lam @ Phi.T @ Phi).T
        if np.linalg.matrix_rank(Phi) < Phi.shape[1]:  # n < m (or repeated inputs): ΦᵀHΦ is
            # singular; the minimum-norm solution of F ΦᵀHΦ = ΛΦᵀΦ gives the optimal L = FΦᵀ
            F = sla.lstsq(PHP, rhs)[0].T
        else:
            F = sla.solve(PHP.T, rhs, assume_a="pos").T  # ΛΦᵀΦ (ΦᵀHΦ)⁻¹
        return F @ Phi.T
    if name == "finite_diagonal":
        D = np.diag(Phi.T @ Phi @ Lam) / np.diag(PHP)
        return D[:, None] * Phi.T
    raise InputError(f"unknown predictor {name!r}; choose one of: {', '.join(PREDICTORS)}")


def xbar_error(L: np.ndarray, Phi: np.ndarray, lam: np.ndarray, H: np.ndarray, trace: float,
               sigma2: float) -> float:
    """Lemma 4: E(n, x̄) = Σλ_i + σ² + tr(L H Lᵀ − 2 L Φ Λ)."""
    return float(trace + sigma2 + np.trace(L @ H @ L.T) - 2 * np.trace(L @ Phi * lam))


def detaching_point(lam: np.ndarray, sigma2: float) -> float:
    """n̄ = σ²/λ_m: where an m-dimensional predictor detaches from the full GP (003 §4)."""
    return float(sigma2 / lam[-1])


def bound7(lam: np.ndarray, trace: float, sigma2: float, n: int,
           moments: np.ndarray | None = None) -> float:
    """003 eq. (7): the generalisation error of u° is at most
    Σλ_i + σ² − n Σ_k q_k λ_k,  q_k = λ_k/c_k,  c_k = (n−1)λ_k + ∫C(x,x)φ_k²(x)p(x)dx + σ²;
    ``moments`` are those integrals (:func:`diag_moments`); None means a stationary kernel,
    for which each is Σλ_i."""
    moments = trace if moments is None else np.asarray(moments)
    c = (n - 1) * lam + moments + sigma2
    return float(trace + sigma2 - n * np.sum(lam**2 / c))


def _fit(name: str, blocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
         test=None, m: int = 10, n_nodes: int = 1000, max_n: int = 20000):
    """One of the four predictors on the empirical eigenbasis of a Nyström subset of
    ``n_nodes`` training inputs; H = K + σ²I is formed (O(n²) memory, hence ``max_n``)."""
    import time

    from algorithms.base import Fit, check_lam, check_targets, check_test, rmse

    sigma2 = check_lam(lam)
    n = blocks.n
    y = check_targets(y, n)
    test = check_test(test, getattr(blocks, "d", None))
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise InputError(f"m={m!r} must be an integer ≥ 1 (the number of eigenfunctions)")
    if n > max_n:
        raise InputError(f"{name} forms K + σ²I for Lemma 4: n={n} > max_n={max_n}; "
                         "subsample the data or raise algorithm.max_n")
    start = time.perf_counter()
    nodes = np.sort(rng.choice(n, min(n_nodes, n), replace=False))
    basis = mercer_empirical(blocks.kernel, blocks.inputs(nodes), min(m, len(nodes)))
    lam_m = basis.eigenvalues
    Phi = basis(blocks.inputs(slice(None)))
    H = blocks.block(slice(None), slice(None))
    H[np.diag_indices(n)] += sigma2
    L = predictor_matrix(name, Phi, lam_m, H, sigma2)
    # φ(x)ᵀ L t is a kernel expansion on the nodes: coef = (w ∘ U / λ) L t
    coef = (basis.weights[:, None] * basis.node_values / lam_m) @ (L @ y)
    error = xbar_error(L, Phi, lam_m, H, basis.trace, sigma2)
    seconds = time.perf_counter() - start
    summary = {"n_basis": len(lam_m), "m": len(lam_m), "xbar_error": error,
               "bound7_u_optimal": bound7(lam_m, basis.trace, sigma2, n, diag_moments(basis)),
               "detaching_point": detaching_point(lam_m, sigma2), "lambda_m": float(lam_m[-1]),
               "gap": float("nan"), "objective": float("nan"), "seconds": seconds,
               "stop_reason": f"m = {len(lam_m)} eigenfunctions", "jitter": 0.0}
    trace = {"n_basis": np.array([len(lam_m)], dtype=float), "gap": np.array([np.nan]),
             "xbar_error": np.array([error]), "seconds": np.array([seconds]),
             "test_rmse": np.array([np.nan])}
    result = Fit(name, nodes, coef, blocks.inputs(nodes), blocks.kernel, sigma2, trace, summary)
    if test is not None:
        trace["test_rmse"][0] = summary["test_rmse"] = rmse(result.predict(test[0]), test[1])
    return result


def _named(name: str, doc: str):
    fit = functools.partial(_fit, name)  # keeps _fit's keyword signature for the pipeline
    fit.__doc__ = doc
    return fit


fit_pbr = _named("pbr", "Projected Bayes regression b (003).")
fit_finite_full = _named("finite_full", "The x̄-optimal full predictor g° (003).")
fit_finite_optimal = _named("finite_optimal", "The optimal m-dimensional predictor h° (003).")
fit_finite_diagonal = _named("finite_diagonal", "The diagonal predictor u° (003).")
