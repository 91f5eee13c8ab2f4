"""The log marginal likelihood of a GP and its gradient over the kernel's hyperparameters and
the noise (004 §3.6), on the points given (a subset of the training set, or all of it).

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from algorithms.errors import InputError
from algorithms.kernels import KERNELS, Kernel

LEARNABLE = ("rbf", "matern32", "laplacian")  # kernels whose length-scale gradient is here
BOUNDS = (1e-5, 1e5)  # of every hyperparameter (variance, length scales, σ²)


def length_scale_of(kernel: Kernel) -> tuple[str, float]:
    """(name of the isotropic scale parameter, that scale as a length ℓ): the RBF's width is
    2ℓ² (its unit scale, width 2, is ℓ = 1), the others' scale is ℓ."""
    name, unit = kernel.spec.unit_scale
    value = kernel.params[name]
    return name, math.sqrt(value / unit) if kernel.name == "rbf" else value


def _scale_from_length(name: str, ell: float) -> tuple[str, float]:
    """The inverse of :func:`length_scale_of`: (scale parameter, its value) for length ℓ."""
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
            ls = np.full(d, length_scale_of(kernel)[1])
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


def kernel_and_slope(name: str, S1: np.ndarray, S2: np.ndarray, variance: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(K, G) between inputs already divided by their length scales: K the kernel matrix and
    G with ∂K/∂log ℓ_j = G∘D_j, D_j = (s_j − s'_j)² (module docstring): G = K (RBF),
    v e^{−r} (Matérn-3/2), K/r (Laplacian, 0 at r = 0)."""
    if name == "rbf":
        R2 = S1 @ (-2.0 * S2.T)
        R2 += np.einsum("ij,ij->i", S1, S1)[:, None]
        R2 += np.einsum("ij,ij->i", S2, S2)[None, :]
        np.maximum(R2, 0.0, out=R2)
        K = np.exp(-0.5 * R2)
        K *= variance
        return K, K
    from scipy.spatial.distance import cdist  # here: scipy.spatial is ~0.08 s of import

    R = cdist(S1, S2)
    E = np.exp(-R)
    E *= variance
    if name == "matern32":
        return (1.0 + R) * E, E
    with np.errstate(divide="ignore", invalid="ignore"):  # laplacian
        return E, np.where(R > 0, E / np.where(R > 0, R, 1.0), 0.0)


def length_scale_gradient(M: np.ndarray, S1: np.ndarray, S2: np.ndarray) -> np.ndarray:
    """Σ_ab M_ab (S1_aj − S2_bj)² for every input j, M of shape (len(S1), len(S2)): the
    contraction ⟨M', ∂K/∂log ℓ_j⟩ with M = M'∘G, in one GEMM M·S2."""
    return (np.einsum("aj,a->j", S1 * S1, M.sum(1)) + np.einsum("bj,b->j", S2 * S2, M.sum(0))
            - 2.0 * np.einsum("aj,aj->j", S1, M @ S2))


def length_scale_gradient_outer(alpha: np.ndarray, G: np.ndarray, S: np.ndarray
                                ) -> np.ndarray:
    """:func:`length_scale_gradient` of M = (ααᵀ)∘G, G symmetric, without forming it:
    Σ_ab α_a α_b G_ab (s_aj − s_bj)² = 2 Σ_a α_a s_aj² (Gα)_a − 2 Σ_a α_a s_aj (G(α∘s_j))_a."""
    AS = np.empty((len(alpha), S.shape[1] + 1))
    AS[:, 0] = alpha
    np.multiply(alpha[:, None], S, out=AS[:, 1:])
    GA = G @ AS
    return 2.0 * (np.einsum("aj,a->j", S * S, alpha * GA[:, 0])
                  - np.einsum("aj,aj->j", AS[:, 1:], GA[:, 1:]))


def _triangle_length_gradient(P: np.ndarray, S: np.ndarray) -> np.ndarray:
    """:func:`length_scale_gradient` of the symmetric matrix of which ``P`` holds one triangle
    (the other strict triangle zero): P_sym = P + Pᵀ − diag(P), and the diagonal adds nothing
    since (s_aj − s_aj)² = 0."""
    rows = P.sum(1) + P.sum(0)
    PS = P @ S
    PS += P.T @ S
    return 2.0 * (np.einsum("aj,a->j", S * S, rows) - np.einsum("aj,aj->j", S, PS))


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
    K, G = kernel_and_slope(params.name, S, S, v)
    Ky = K.copy()
    Ky.flat[::n + 1] += lam
    L = sla.cholesky(Ky, lower=True, overwrite_a=True, check_finite=False)
    del Ky
    alpha = sla.cho_solve((L, True), y, check_finite=False)
    value = float(-0.5 * y @ alpha - np.log(np.diag(L)).sum() - 0.5 * n * math.log(2 * math.pi))
    if not gradient:
        return value, None
    # K_y⁻¹'s lower triangle from the factor; its strict upper triangle stays L's, which scipy
    # returns zero. W = that matrix transposed (C order, like K): one triangle of the symmetric
    # K_y⁻¹ = W + Wᵀ − diag(W), with no n × n symmetrising copy.
    W, info = sla.lapack.dpotri(L, lower=1, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed with info={info}")
    W = W.T
    w_diag = np.diag(W).copy()
    grad = np.empty(len(theta))
    # ⟨K_y⁻¹, K⟩ over the triangle; ⟨ααᵀ, K⟩ = αᵀKα
    inv_dot_k = 2.0 * np.einsum("ij,ij->", W, K) - w_diag @ np.diag(K)
    grad[0] = 0.5 * (alpha @ (K @ alpha) - inv_dot_k)
    grad[-1] = 0.5 * lam * (alpha @ alpha - w_diag.sum())
    W *= G  # one triangle of K_y⁻¹ ∘ G; ααᵀ∘G is contracted through one product G·[α, α∘S]
    per_dim = length_scale_gradient_outer(alpha, G, S) - _triangle_length_gradient(W, S)
    per_dim *= 0.5
    grad[1:-1] = per_dim if params.n_lengths > 1 else per_dim.sum()
    return value, grad
