"""The log marginal likelihood of a GP and its gradient over the kernel's hyperparameters and
the noise (004 §3.6), on the points given (a subset of the training set, or all of it).

log p(y | θ) = −½ yᵀα − ½ log|K_y| − (n/2) log 2π with K_y = K_θ + σ²I and α = K_y⁻¹y
(eq. 62), and its gradient (eq. 64)

    ∂ log p / ∂θ_i = ½ tr((ααᵀ − K_y⁻¹) ∂K_y/∂θ_i),

over θ = (log variance, log length scale(s), log σ²). K_y is factored once per evaluation by
Cholesky; α comes from two triangular solves with the factor and the K_y⁻¹ the trace needs from
the same factor: one triangular inverse T = L⁻¹ and K_y⁻¹ = TᵀT, no general inverse
(:func:`algorithms.cholesky.factor_and_invert`, blocked BLAS-3 in place). With
M = ααᵀ − K_y⁻¹ the gradient is

- signal variance v: ½ Σ M∘K;  noise: ½ σ² tr M;
- length scale ℓ_j of a stationary kernel k(r), r = ‖(x−x')/ℓ‖: ∂K/∂log ℓ_j = G∘D_j with
  D_j = (x_j − x'_j)²/ℓ_j² and G = −k'(r)/r, the slope each kernel's row declares
  (:class:`algorithms.kernels.Gradient`: K for the RBF, v e^{−r} for the Matérn-3/2,
  v(1 + r)e^{−r}/3 for the Matérn-5/2, K/r for the Laplacian), so with P = M∘G and
  s = X_{·j}/ℓ_j, ½ Σ P∘D_j = sᵀ((P1)∘s) − sᵀPs: one product P·[S, 1] for all j (an
  isotropic length scale is the sum over j), whose last column P1 also gives the RBF's
  variance term ½ Σ M∘K = ½ 1ᵀP1 (G = K). No per-dimension n × n array is formed.

One n × n Fortran-ordered array holds everything (two for the Matérns and the Laplacian,
whose G is kept beside it): K in both triangles, then K_y, L, K_y⁻¹ and P in the lower one while
the strict upper triangle keeps K for the elementwise pass (K's diagonal is v). Arithmetic of
one evaluation: n³/3 (Cholesky) + n³/3 (triangular inverse) + n³/3 (TᵀT) + 2n²(d + 2) (the
kernel's GEMM) + 2n²(d + 1) (the traces' product); ``python -m pipeline.bench.learning`` times
it against the same run's GEMM (issue 52).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from algorithms import blas_inplace
from algorithms.cholesky import factor_and_invert
from algorithms.kernel_threads import on_threads
from algorithms.kernels import (
    KERNELS,
    WARM_UP_ROWS,
    Kernel,
    fit_tails,
    gradient_of,
)

BOUNDS = (1e-5, 1e5)  # of every hyperparameter (variance, length scales, σ²)
TILE = 256  # rows and columns of the tiles of the elementwise gradient pass (512 KiB: in L2)


def length_scale_of(kernel: Kernel) -> tuple[str, float]:
    """(name of the isotropic scale parameter, that scale as a length ℓ, by the kernel's row:
    :attr:`~algorithms.kernels.KernelSpec.to_length`): the RBF's width is 2ℓ² (its unit
    scale, width 2, is ℓ = 1), the others' scale is ℓ."""
    name = kernel.spec.unit_scale[0]
    return name, kernel.spec.to_length(kernel.params[name])


def _scale_from_length(name: str, ell: float) -> tuple[str, float]:
    """The inverse of :func:`length_scale_of`: (scale parameter, its value) for length ℓ."""
    spec = KERNELS[name]
    return spec.unit_scale[0], spec.from_length(ell)


@dataclass(frozen=True)
class Parameters:
    """θ = (log variance, log length scale(s), log σ²) for one kernel family."""

    name: str
    n_lengths: int  # 1 (isotropic) or d (ARD)

    @classmethod
    def of(cls, kernel: Kernel, d: int, ard: bool) -> Parameters:
        gradient_of(kernel.name)  # a kernel without one: the one-line error
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
    G with ∂K/∂log ℓ_j = G∘D_j, D_j = (s_j − s'_j)² (module docstring), by the slope of the
    kernel's row (:class:`algorithms.kernels.Gradient`)."""
    return gradient_of(name).slope(S1, S2, variance)


def length_scale_gradient(M: np.ndarray, S1: np.ndarray, S2: np.ndarray) -> np.ndarray:
    """Σ_ab M_ab (S1_aj − S2_bj)² for every input j, M of shape (len(S1), len(S2)): the
    contraction ⟨M', ∂K/∂log ℓ_j⟩ with M = M'∘G, in one GEMM M·S2."""
    return (np.einsum("aj,a->j", S1 * S1, M.sum(1)) + np.einsum("bj,b->j", S2 * S2, M.sum(0))
            - 2.0 * np.einsum("aj,aj->j", S1, M @ S2))


def kernel_into(A: np.ndarray, name: str, S: np.ndarray, variance: float
                 ) -> np.ndarray | None:
    """K of the inputs ``S`` (already at unit length scale) into the Fortran-ordered ``A``
    (both triangles) and the slope G of ∂K/∂log ℓ_j = G∘D_j (module docstring): None for a
    kernel whose G is K itself (the RBF; ``slope_is_kernel`` in its row), read back from A's
    strict upper triangle, which the factorisation leaves alone; the diagonal is k(x, x) = v
    exactly. Such a kernel is computed by its own tiles at unit length scale (the RBF: one GEMM
    of augmented inputs and one fused exp per cache-sized tile; :meth:`Kernel.block`, on
    :func:`kernel_threads` threads) written straight into A; the others come from
    :func:`kernel_and_slope`."""
    n = len(S)
    spec = KERNELS[name]
    if gradient_of(name).slope_is_kernel:
        scale, unit = spec.unit_scale  # the RBF: width 2, exp(−‖s − s'‖²/2)
        kernel = Kernel(name, {"variance": variance, scale: unit})
        with fit_tails(name, n):
            kernel.block(kernel.rows(S), kernel.cols(S), out=A.T)  # K symmetric: A.T is K
        G = None
    else:
        K, G = kernel_and_slope(name, S, S, variance)
        A[...] = K.T  # K symmetric; the transpose is the contiguous copy into Fortran order
        del K
    A.flat[::n + 1] = variance
    return G


def _slope_products(A: np.ndarray, alpha: np.ndarray, G: np.ndarray | None, variance: float,
                    tile: int = TILE) -> float:
    """Overwrite the lower triangle of ``A`` (K_y⁻¹ there, K in its strict upper triangle) with
    P = M∘G, M = ααᵀ − K_y⁻¹, tile by tile in cache (G = K when ``G`` is None: the RBF's).
    Returns Σ_ab M_ab K_ab over the whole symmetric matrix (the variance's contraction) for a
    kernel whose G is not K, else 0 (it is then 1ᵀP1, from the products)."""
    n = len(A)
    contraction = 0.0
    for j0 in range(0, n, tile):
        j1 = min(j0 + tile, n)
        for i0 in range(j0, n, tile):
            i1 = min(i0 + tile, n)
            block = A[i0:i1, j0:j1]  # K_y⁻¹ (its part above the diagonal: K, if i0 = j0)
            K = A[j0:j1, i0:i1].T  # K from the strict upper triangle
            if i0 == j0:
                K = K.copy()  # the same memory as the block, overwritten below
                K.flat[::K.shape[1] + 1] = variance
            M = np.multiply.outer(alpha[i0:i1], alpha[j0:j1])
            M -= block
            if G is None:
                np.multiply(M, K, out=block)
                continue
            MK = np.einsum("ij,ij->", M, K) if i0 > j0 else \
                np.einsum("ij,ij->", np.tril(M), K) - 0.5 * np.einsum("ii,ii->", M, K)
            contraction += 2.0 * MK
            np.multiply(M, G[i0:i1, j0:j1], out=block)
    return contraction


def _fused_slope_products(A: np.ndarray, alpha: np.ndarray, variance: float) -> None:
    """P = (ααᵀ − K_y⁻¹)∘K into both triangles of ``A`` (the RBF: K in A's strict upper
    triangle) by the compiled pass (:mod:`algorithms._fused_gradient`), its column tiles on
    :func:`kernel_threads` threads."""
    from algorithms._fused_gradient import SQUARE, rbf_slope_products

    n = len(A)
    width = 4 * SQUARE

    def run(starts: range) -> None:
        for j0 in starts:
            rbf_slope_products(A, alpha, variance, j0, min(j0 + width, n))

    on_threads(run, range(0, n, width), n * n // 2)


def slope_traces(A: np.ndarray, alpha: np.ndarray, G: np.ndarray | None, variance: float,
                  S: np.ndarray) -> tuple[np.ndarray, float]:
    """(P·[S, 1], Σ M∘K for a kernel whose G is not K) from ``A`` holding K_y⁻¹ in its lower
    triangle and K in its strict upper one (overwritten): P = M∘G, M = ααᵀ − K_y⁻¹. A kernel
    whose G is K (``G`` None: the RBF) on at least :data:`~algorithms.kernels.WARM_UP_ROWS`
    rows (the compiled side of :func:`~algorithms.kernels.fit_tails`): the compiled pass writes
    P into both triangles, then one GEMM; else numpy's tiles (:func:`_slope_products`) and one
    symmetric product of the lower triangle (OpenBLAS's symm runs at about half GEMM's
    rate)."""
    n, d = S.shape
    SA = np.empty((n, d + 1), order="F")  # [S, 1]
    SA[:, :d] = S
    SA[:, d] = 1.0
    PS = np.empty((n, d + 1), order="F")
    if G is None and n >= WARM_UP_ROWS:
        _fused_slope_products(A, alpha, variance)
        blas_inplace.gemm(1.0, A, SA, 0.0, PS)
        return PS, 0.0
    contraction = _slope_products(A, alpha, G, variance)
    blas_inplace.symm(1.0, A, SA, 0.0, PS)
    return PS, contraction


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
    A = np.empty((n, n), order="F")  # K in both triangles; K_y, L, K_y⁻¹, P in the lower one
    G = kernel_into(A, params.name, S, v)
    A.flat[::n + 1] += lam
    if not gradient:
        L = sla.cholesky(A, lower=True, overwrite_a=True, check_finite=False)
        alpha = sla.cho_solve((L, True), y, check_finite=False)
        return _value(y, alpha, np.diag(L)), None
    factor_diagonal, alpha = factor_and_invert(A, y)
    value = _value(y, alpha, factor_diagonal)
    grad = np.empty(len(theta))
    grad[-1] = 0.5 * lam * (alpha @ alpha - np.trace(A))  # ½ σ² tr M
    PS, contraction = slope_traces(A, alpha, G, v, S)
    P1 = PS[:, d]
    grad[0] = 0.5 * (P1.sum() if G is None else contraction)  # ½ Σ M∘K
    # ½ Σ_ab P_ab (s_aj − s_bj)² = Σ_a s_aj² (P1)_a − Σ_a s_aj (PS)_aj (P symmetric)
    per_dim = np.einsum("aj,a->j", S * S, P1) - np.einsum("aj,aj->j", S, PS[:, :d])
    grad[1:-1] = per_dim if params.n_lengths > 1 else per_dim.sum()
    return value, grad


def _value(y: np.ndarray, alpha: np.ndarray, factor_diagonal: np.ndarray) -> float:
    """−½ yᵀα − Σ log L_ii − (n/2) log 2π (eq. 62; log|K_y| = 2 Σ log L_ii)."""
    return float(-0.5 * y @ alpha - np.log(factor_diagonal).sum()
                 - 0.5 * len(y) * math.log(2 * math.pi))
