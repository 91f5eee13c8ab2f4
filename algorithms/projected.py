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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from algorithms.contract import AlgorithmSpec, CurveModel, ExactLimit, KernelBlocks, Solution
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.kernels import Kernel
from algorithms.options import Option


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


def _pbr(Phi: np.ndarray, lam: np.ndarray, H: np.ndarray, sigma2: float) -> np.ndarray:
    """b: L = β A⁻¹ Φᵀ, A = Λ⁻¹ + βΦᵀΦ, β = 1/σ²."""
    A = np.diag(1.0 / lam) + Phi.T @ Phi / sigma2
    # Cholesky without scipy's rcond warning: at σ² ≫ λ_i, A ≈ Λ⁻¹ is ill-conditioned but
    # diagonal, and solved accurately
    return sla.cho_solve(sla.cho_factor(A, lower=True, check_finite=False), Phi.T) / sigma2


def _full(Phi: np.ndarray, lam: np.ndarray, H: np.ndarray, sigma2: float) -> np.ndarray:
    """g°: L = Λ Φᵀ H⁻¹."""
    return np.diag(lam) @ sla.solve(H, Phi, assume_a="pos").T


def _optimal(Phi: np.ndarray, lam: np.ndarray, H: np.ndarray, sigma2: float) -> np.ndarray:
    """h°: L = F° Φᵀ, F° = ΛΦᵀΦ (ΦᵀHΦ)⁻¹."""
    PHP = Phi.T @ H @ Phi
    rhs = (np.diag(lam) @ Phi.T @ Phi).T
    if np.linalg.matrix_rank(Phi) < Phi.shape[1]:  # n < m (or repeated inputs): ΦᵀHΦ is
        # singular; the minimum-norm solution of F ΦᵀHΦ = ΛΦᵀΦ gives the optimal L = FΦᵀ
        F = sla.lstsq(PHP, rhs)[0].T
    else:
        F = sla.solve(PHP.T, rhs, assume_a="pos").T  # ΛΦᵀΦ (ΦᵀHΦ)⁻¹
    return F @ Phi.T


def _diagonal(Phi: np.ndarray, lam: np.ndarray, H: np.ndarray, sigma2: float) -> np.ndarray:
    """u°: L = D° Φᵀ, D°_ii = (ΦᵀΦΛ)_ii / (ΦᵀHΦ)_ii."""
    D = np.diag(Phi.T @ Phi @ np.diag(lam)) / np.diag(Phi.T @ H @ Phi)
    return D[:, None] * Phi.T


PredictorMatrix = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]
PREDICTORS: dict[str, PredictorMatrix] = {"pbr": _pbr, "finite_full": _full,
                                          "finite_optimal": _optimal, "finite_diagonal": _diagonal}


def predictor_matrix(name: str, Phi: np.ndarray, lam: np.ndarray, H: np.ndarray,
                     sigma2: float) -> np.ndarray:
    """The m×n matrix L of predictor ``name`` (ŷ(x) = φ(x)ᵀ L t); see the module docstring."""
    if name not in PREDICTORS:
        raise InputError(f"unknown predictor {name!r}; choose one of: {', '.join(PREDICTORS)}")
    return PREDICTORS[name](Phi, lam, H, sigma2)


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


def predictor_xbar_error(name: str, basis: MercerBasis, X: np.ndarray, sigma2: float) -> float:
    """Lemma 4's E(n, x̄) of predictor ``name`` on the eigenbasis ``basis``."""
    Phi = basis(X)
    H = basis.kernel(X, X)
    H[np.diag_indices_from(H)] += sigma2
    L = predictor_matrix(name, Phi, basis.eigenvalues, H, sigma2)
    return xbar_error(L, Phi, basis.eigenvalues, H, basis.trace, sigma2)


def _fit(name: str, blocks: KernelBlocks, y: np.ndarray, *, lam: float,
         rng: np.random.Generator, recorder: Recorder, m: int, n_nodes: int,
         max_n: int) -> Solution:
    """One of the four predictors on the empirical eigenbasis of a Nyström subset of
    ``n_nodes`` training inputs; H = K + σ²I is formed (O(n²) memory, hence ``max_n``)."""
    sigma2 = lam
    n = blocks.n
    if n > max_n:
        raise InputError(f"{name} forms K + σ²I for Lemma 4: n={n} > max_n={max_n}; "
                         "subsample the data or raise algorithm.max_n")
    nodes = np.sort(rng.choice(n, min(n_nodes, n), replace=False))
    basis = mercer_empirical(blocks.kernel, blocks.inputs(nodes), min(m, len(nodes)))
    lam_m = basis.eigenvalues
    Phi = basis(blocks.inputs(slice(None)))
    H = blocks.block(slice(None), slice(None))
    H[np.diag_indices(n)] += sigma2
    L = predictor_matrix(name, Phi, lam_m, H, sigma2)
    # φ(x)ᵀ L t is a kernel expansion on the nodes: coef = (w ∘ U / λ) L t
    expand = basis.weights[:, None] * basis.node_values / lam_m
    coef = expand @ (L @ y)
    error = xbar_error(L, Phi, lam_m, H, basis.trace, sigma2)
    X_nodes = blocks.inputs(nodes)
    reasons = {"gap": "a fixed-basis predictor solves no dual problem, hence no duality gap",
               "objective": "not a minimiser of L (the certificate computes L(α))"}
    variance = None
    if name in VARIANCES:
        variance = VARIANCES[name](blocks.kernel, X_nodes, expand, Phi, lam_m, sigma2)
    else:
        reasons["variance"] = f"{name} is a point predictor (003 defines no variance for it)"
    recorder.step(n_basis=len(lam_m), xbar_error=error)
    summary = {"n_basis": len(lam_m), "m": len(lam_m), "xbar_error": error,
               "bound7_u_optimal": bound7(lam_m, basis.trace, sigma2, n, diag_moments(basis)),
               "detaching_point": detaching_point(lam_m, sigma2), "lambda_m": float(lam_m[-1]),
               "gap": float("nan"), "objective": float("nan"),
               "stop_reason": f"m = {len(lam_m)} eigenfunctions", "jitter": 0.0}
    return Solution(nodes, coef, X_nodes, blocks.kernel, sigma2, summary, variance,
                    not_applicable=reasons)


def _pbr_variance(kernel: Kernel, X_nodes: np.ndarray, expand: np.ndarray, Phi: np.ndarray,
                  lam: np.ndarray, sigma2: float):
    """Projected Bayes regression is Bayesian linear regression on φ with prior w ~ N(0, Λ):
    Var[y(x)] = σ² + φ(x)ᵀA⁻¹φ(x), A = Λ⁻¹ + ΦᵀΦ/σ² (003 §2)."""
    factor = sla.cholesky(np.diag(1.0 / lam) + Phi.T @ Phi / sigma2, lower=True)

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        phi = kernel(X_new, X_nodes) @ expand  # φ(x) by the Nyström formula
        V = sla.solve_triangular(factor, phi.T, lower=True)
        var = sigma2 + np.einsum("ij,ij->j", V, V)
        return var, var

    return variance_bounds


VARIANCES = {"pbr": _pbr_variance}  # the predictors that are Bayesian posteriors


def _spec(name: str, doc: str) -> AlgorithmSpec:
    def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
            recorder: Recorder, m: int, n_nodes: int, max_n: int) -> Solution:
        return _fit(name, blocks, y, lam=lam, rng=rng, recorder=recorder, m=m,
                    n_nodes=n_nodes, max_n=max_n)

    fit.__doc__ = doc
    # b's variance has the Nyström prior Σλ_iφ_i(x)² ≤ k(x,x): exact only on the nodes
    limit = None if name == "finite_diagonal" else ExactLimit({"m": "n", "n_nodes": "n"})
    return AlgorithmSpec(
        name, fit, doc,
        options={"m": Option(10, "int", "number of eigenfunctions", lo=1),
                 "n_nodes": Option(1000, "int", "Nyström subset defining the empirical density",
                                   lo=1, clip_to_n=True),
                 "max_n": Option(20000, "int", "forms K + σ²I (n² memory)", lo=1)},
        has_variance=name in VARIANCES,
        learning_curve=CurveModel(lambda kernel, density, basis, X, sigma2:
                                  predictor_xbar_error(name, basis, X, sigma2), needs_basis=True),
        exact_limit=limit, check_options={"m": 6},
    )


SPECS = [_spec("pbr", "Projected Bayes regression b (003)."),
         _spec("finite_full", "The x̄-optimal full predictor g° (003)."),
         _spec("finite_optimal", "The optimal m-dimensional predictor h° (003)."),
         _spec("finite_diagonal", "The diagonal predictor u° (003).")]
