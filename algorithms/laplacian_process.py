"""Laplacian processes: the MAP of a sparse kernel expansion (004 §5, eqs. 100-112).

Model (004 §5.3, eqs. 106-109): f(x) = Σ_i θ_i k(x, x_i) over the n training points, t = Kθ,
a Laplacian prior γ(θ_i) = |θ_i| on each coefficient (eq. 100) and the MAP estimate

    minimise  Σ_i −ln p(y_i | t_i) + Σ_i |θ_i|   subject to  t = Kθ        (eqs. 102, 109)

with the paper's scaling: no constant in front of ‖θ‖₁ and the negative log-likelihood of the
noise density itself, dropping constants.

- ``noise=gaussian``: −ln p(y|t) = (y − t)²/(2σ²) (the normal density of 004 §2, eq. 8) with
  σ² = ``lam`` as everywhere in this project, so the objective is the quadratic program
  P(θ) = ½σ⁻²‖y − Kθ‖² + ‖θ‖₁ (a Lasso on the features K).
- ``noise=laplacian``: −ln p(y|t) = |y − t|/b (the Laplacian density of eq. 10 with scale b),
  so the objective is the linear program P(θ) = Σ_i |y_i − t_i|/b + ‖θ‖₁. A Laplacian of scale b
  has variance 2b², so by default b = √(lam/2): ``lam`` stays the noise variance σ², as for
  every other algorithm. ``noise_scale`` sets b directly instead (the λ of eq. 10).

The prior of eq. 100 has no scale parameter, and none is needed: with t = Kθ, multiplying the
kernel by c and θ by 1/c leaves t unchanged and turns the prior into |θ_i|/c, so the kernel's
signal ``variance`` is the prior scale.

Solvers (both exact up to round-off, both scipy's):

- Gaussian: the dual of the QP is max_u yᵀu − (σ²/2)‖u‖² subject to ‖Kᵀu‖∞ ≤ 1, whose optimum
  is u = (y − Kθ)/σ², i.e. the projection of y/σ² onto the polytope {‖Kᵀu‖∞ ≤ 1}: a
  least-distance program (LDP). Lawson & Hanson ("Solving Least Squares Problems", ch. 23)
  reduce an LDP to one non-negative least-squares problem, which
  :func:`scipy.optimize.nnls` (their active-set algorithm) solves in finitely many steps; θ is
  read off the LDP's multipliers (:func:`solve_gaussian`). Active-set steps end on the exact
  face, so the zeros of θ are exact zeros. The alternatives were measured on n = 200 points
  (tests/conftest.py's problem, RBF width 2): L-BFGS-B on θ = θ⁺ − θ⁻ ≥ 0 needed 2 900
  iterations at σ² = 0.1 and had not found the optimal signs after 2.6·10⁵ at σ² = 10⁻⁴
  (K is ill-conditioned), where coordinate descent (scikit-learn's Lasso, 10⁶ sweeps) also
  ended 3 600 (12 %) above the optimum; the NNLS took 0.03 s there and met the optimality conditions
  to 6·10⁻⁸. The summary certifies each solution: ``kkt_violation`` is the largest violation
  of the Lasso's optimality conditions in units of the threshold σ² (round-off grows as σ²
  falls: 10⁻¹² at σ² = 0.1, 10⁻⁴ at 10⁻⁸), ``gap`` is P(θ)'s relative duality gap.
- Laplacian: the LP in θ = θ⁺ − θ⁻, y − Kθ = r⁺ − r⁻ (all four ≥ 0):
  min 1ᵀ(θ⁺ + θ⁻) + 1ᵀ(r⁺ + r⁻)/b subject to Kθ⁺ − Kθ⁻ + r⁺ − r⁻ = y, by
  ``scipy.optimize.linprog(method="highs")``. HiGHS ends on a vertex (a basic solution): at
  most n of the 4n variables are non-zero, which is where the sparsity comes from. Coefficients
  with |θ_i| ≤ :data:`ZERO_RTOL`·max|θ| (round-off of the basic solve) count as zero.
  ``gap`` is the relative duality gap against HiGHS' equality duals made feasible.

The basis is the set of non-zero θ_i; ``n_basis`` counts it and ``objective`` is P(θ) above
(the MAP objective, not the GP's L(α) of the other algorithms; the pipeline's certificate
still measures the returned α against the GP problem).

Error bars (004 §5.4, Gaussian noise only): the posterior is approximated by dropping every
θ_i with θ_MAP,i = 0 and replacing |θ_i| by sgn(θ_MAP,i)θ_i on the rest (eq. 110), which the
paper notes renders the distribution flatter and so overestimates the error. Eq. 110 is a
Gaussian in θ_M with precision K_MᵀK_M/σ² and mean (K_MᵀK_M)⁻¹(K_Mᵀy − σ²s), s = sgn θ_M,
so the predictive variance of y (eq. 112) is

    σ² + σ² k_Mᵀ(K_MᵀK_M)⁻¹k_M,

a Laplace approximation on the support: a Gaussian at the mode whose precision is the Hessian
of the negative log posterior over the non-zero coefficients (where the linearised ℓ1 term
adds no curvature). The printed eqs. 111-112 read (K_MᵀK_M)⁻¹ for the covariance,
+σ²s in the mean and σ² + k_Mᵀ(K_MᵀK_M)⁻¹k_M for the variance: the covariance is eq. 110's
at σ² = 1 and the sign of s is flipped. We implement what eq. 110 gives: its mean with −σ²s
equals the MAP θ_M on the support (tested), the printed +σ²s does not, and only
σ²·k_Mᵀ(K_MᵀK_M)⁻¹k_M has the units of a variance of y. K_M = QR once, so the
variance is σ²(1 + ‖R⁻ᵀk_M‖²) by a triangular solve. Far from the data k_M → 0 and the error
bar falls to σ² (the approximation has no prior variance left there). For Laplacian noise
§5.4 gives no error bars, and none are returned.

``summary`` also holds ``noise_scale`` (σ, or the Laplacian b), ``objective_dual_bound`` (the
dual value behind ``gap``; not the GP's ``dual_objective``, which the certificate would read)
and ``kkt_violation`` (Gaussian) or ``lp_iterations`` (Laplacian).

Memory (n×n kernel, refused above ``max_n`` or the available memory before the data are read,
:func:`memory_bytes`): the Gaussian fit holds the (n+1)×2n NNLS matrix [−K, K; hᵀ] (2·n²·8)
and scipy's NNLS works on a copy of it: measured process RSS growth of a fit with its test
evaluation (:func:`algorithms.evaluation.run`, n = 2000, d = 10, 1946 basis functions)
4.3·n²·8, tracemalloc 3.1·n²·8 (the NNLS copy is allocated in C). The LP hands HiGHS the 2n²
non-zeros of [K, −K], which scipy's preprocessing and HiGHS' factorisations copy several
times: measured RSS 51·n²·8 at n = 1000 (50 at n = 2000), tracemalloc 21·n²·8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sparse

from algorithms.contract import (
    BLOCK_BYTES,
    AlgorithmSpec,
    KernelBlocks,
    Solution,
    block_rows,
    fill_kernel,
)
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.kernels import Kernel
from algorithms.options import Option

NOISES = ("gaussian", "laplacian")
ZERO_RTOL = 1e-12  # LP coefficients below this fraction of max|θ| are round-off: zero
# n×n float64 matrices alive at the peak (module docstring: measured RSS, rounded up)
MEMORY_FACTOR = {"gaussian": 5, "laplacian": 55}
WORKING_BYTES = 2 * BLOCK_BYTES


def memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of :func:`fit` on n points of dimension d: :data:`MEMORY_FACTOR` n×n
    matrices for the chosen noise (the NNLS matrix and its copy; the LP's copies in scipy and
    HiGHS), X and one block of kernel rows."""
    factor = MEMORY_FACTOR[options.get("noise", "gaussian")]
    return 8.0 * (factor * n * n + n * d) + WORKING_BYTES


def laplace_scale(lam: float, noise_scale: float | None) -> float:
    """The scale b of the Laplacian noise density (eq. 10): ``noise_scale`` if given, else the
    b whose variance 2b² is the noise variance ``lam``."""
    return float(noise_scale) if noise_scale is not None else math.sqrt(lam / 2.0)


def solve_gaussian(K_neg_pos: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """θ minimising ½σ⁻²‖y − Kθ‖² + ‖θ‖₁ (σ² = ``lam``) exactly, from one NNLS.

    ``K_neg_pos`` is the (n+1)×2n matrix with K in ``[:n, n:]`` (the rest is overwritten). With
    u = (y − Kθ)/σ² and x = σ²u − y = −Kθ, the dual is the LDP min ½‖x‖² s.t. Gx ≥ h with
    G = [−Kᵀ; Kᵀ] and h = [Kᵀy − σ²1; −Kᵀy − σ²1] (both halves of ‖Kᵀu‖∞ ≤ 1). Lawson &
    Hanson's algorithm LDP (ch. 23): with E = [Gᵀ; hᵀ] and w = argmin_{w≥0} ‖Ew − e_{n+1}‖,
    ρ = 1 − hᵀw > 0 for a feasible LDP and the multipliers are λ = w/ρ (x = Gᵀλ). Those of
    the constraints K_jᵀu ≤ 1 and −K_jᵀu ≤ 1 are θ_j⁺ and θ_j⁻ (x = −Kθ = Gᵀλ): θ = λ⁺ − λ⁻.
    h is divided by c = max|h| first (the LDP is homogeneous in h: λ scales with it), so that
    the last row of E is as large as the others.
    """
    n = len(y)
    E = K_neg_pos
    K = E[:n, n:]
    np.negative(K, out=E[:n, :n])
    Kty = K.T @ y
    h = np.concatenate([Kty - lam, -Kty - lam])
    if h.max() <= 0.0:  # ‖Kᵀy‖∞ ≤ σ²: u = y/σ² is dual feasible and θ = 0 is optimal
        return np.zeros(n)
    c = float(np.abs(h).max())
    E[n] = h / c
    target = np.zeros(n + 1)
    target[n] = 1.0
    try:
        import scipy.optimize as sopt  # here: ~0.13 s of import other jobs skip

        w, _ = sopt.nnls(E, target, maxiter=20 * n)
    except RuntimeError as err:  # the iteration limit: degenerate arithmetic
        raise FloatingPointError(f"NNLS of the Laplacian-process QP: {err}") from None
    rho = 1.0 - float(E[n] @ w)
    if not rho > 0.0:
        raise FloatingPointError(f"NNLS of the Laplacian-process QP ended with ρ = {rho:g}")
    lam_plus, lam_minus = w[:n], w[n:]
    return (c / rho) * (lam_plus - lam_minus)


def solve_laplacian(blocks: KernelBlocks, y: np.ndarray, b: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """θ minimising Σ|y − Kθ|/b + ‖θ‖₁ by HiGHS (module docstring), Kθ, a feasible point u
    of the dual LP max yᵀu s.t. |Kᵀu| ≤ 1, |u| ≤ 1/b (HiGHS' equality duals clipped and
    shrunk into it, so yᵀu ≤ min P) and HiGHS' iteration count. The equality matrix
    [K, −K, I, −I] is built directly in CSC form, column j of K from column j of the kernel."""
    n = len(y)
    nn = n * n
    data = np.empty(2 * nn + 2 * n)
    KT = data[:nn].reshape(n, n)  # row j = column j of K
    rows = block_rows(n)
    for lo in range(0, n, rows):
        KT[lo: lo + rows] = blocks.block(slice(None), slice(lo, lo + rows)).T
    np.negative(data[:nn], out=data[nn: 2 * nn])
    data[2 * nn: 2 * nn + n] = 1.0
    data[2 * nn + n:] = -1.0
    index = np.arange(n, dtype=np.int32)
    indices = np.concatenate([np.tile(index, 2 * n), index, index])
    indptr = np.concatenate([np.arange(0, 2 * nn + 1, n, dtype=np.int64),
                             2 * nn + np.arange(1, 2 * n + 1, dtype=np.int64)])
    A = sparse.csc_array((data, indices, indptr), shape=(n, 4 * n))
    cost = np.concatenate([np.ones(2 * n), np.full(2 * n, 1.0 / b)])
    import scipy.optimize as sopt

    res = sopt.linprog(cost, A_eq=A, b_eq=y, bounds=(0, None), method="highs")
    if res.status != 0:
        raise FloatingPointError(f"HiGHS did not solve the Laplacian-process LP: {res.message}")
    theta = res.x[:n] - res.x[n: 2 * n]
    theta[np.abs(theta) <= ZERO_RTOL * np.abs(theta).max(initial=0.0)] = 0.0
    u = np.clip(res.eqlin.marginals, -1.0 / b, 1.0 / b)
    u /= max(1.0, float(np.abs(KT @ u).max(initial=0.0)))  # KT @ u = Kᵀu
    return theta, KT.T @ theta, u, int(res.nit)


def kkt_violation(g: np.ndarray, theta: np.ndarray) -> float:
    """Largest violation of the Lasso's optimality conditions g = Kᵀ(y − Kθ)/σ² = sgn θ_j
    where θ_j ≠ 0 and |g_j| ≤ 1 where θ_j = 0 (in units of the threshold: 0 at the optimum)."""
    on = theta != 0
    inside = np.abs(g[on] - np.sign(theta[on])).max(initial=0.0)
    outside = np.abs(g[~on]).max(initial=0.0) - 1.0
    return float(max(inside, outside, 0.0))


def relative_gap(P: float, D: float) -> float:
    """(P − D)/P, the relative duality gap of the MAP problem (0 when P = 0: y = 0)."""
    return 0.0 if P <= 0.0 else max(P - D, 0.0) / P


def error_bars(K_M: np.ndarray, X_basis: np.ndarray, kernel: Kernel, lam: float
               ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """variance_bounds(X) of eq. 112 as derived from eq. 110 (module docstring):
    σ²(1 + k_Mᵀ(K_MᵀK_M)⁻¹k_M) with K_MᵀK_M = RᵀR from K_M = QR, so the quadratic form is
    ‖R⁻ᵀk_M‖² (one triangular solve per block of test rows, never an inverse)."""
    M = K_M.shape[1]
    R = sla.qr(K_M, mode="r", check_finite=False)[0][:M] if M else None

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X_new = np.asarray(X_new, dtype=np.float64)
        var = np.full(len(X_new), lam)
        if R is None:
            return var, var
        rows = block_rows(M)
        for lo in range(0, len(X_new), rows):
            V = sla.solve_triangular(R, kernel(X_new[lo: lo + rows], X_basis).T, trans="T",
                                     lower=False, check_finite=False)  # R⁻ᵀk_M
            var[lo: lo + rows] += lam * np.einsum("ij,ij->j", V, V)
        return var, var

    return variance_bounds


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, noise: str, noise_scale: float | None, max_n: int) -> Solution:
    """MAP Laplacian process (004 eqs. 102/109) with Gaussian (QP) or Laplacian (LP) noise,
    error bars by eqs. 110-112 for Gaussian noise (module docstring). ``lam`` = σ²; with
    Laplacian noise the scale is b = √(lam/2) (variance σ²) unless ``noise_scale`` sets it.
    One trace step: the solution is exact. ``max_n`` is checked before the fit
    (:func:`~algorithms.evaluation.check_size`); ``rng`` is unused (seed-free)."""
    if noise_scale is not None and noise != "laplacian":
        raise InputError(f"algorithm.noise_scale={noise_scale!r} applies only to "
                         "algorithm.noise=laplacian (Gaussian noise has variance lam); "
                         "drop it or pass algorithm.noise=laplacian")
    n = blocks.n
    kernel = blocks.kernel
    if noise == "gaussian":
        E = np.empty((n + 1, 2 * n))
        fill_kernel(blocks, E[:n, n:])
        theta = solve_gaussian(E, y, lam)
        basis = np.flatnonzero(theta)
        K_M = E[:n, n + basis]  # a copy (fancy index): E is freed below
        r = y - K_M @ theta[basis]
        g = E[:n, n:].T @ r / lam
        del E
        P = 0.5 * float(r @ r) / lam + float(np.abs(theta).sum())
        u = (r / lam) / max(1.0, float(np.abs(g).max(initial=0.0)))  # dual feasible
        D = float(y @ u) - 0.5 * lam * float(u @ u)
        extra: dict[str, Any] = {"noise_scale": math.sqrt(lam), "kkt_violation":
                                 kkt_violation(g, theta)}
        stop = "exact: NNLS active set (Lawson-Hanson LDP) converged"
    else:
        b = laplace_scale(lam, noise_scale)
        theta, Ktheta, u, iterations = solve_laplacian(blocks, y, b)
        basis = np.flatnonzero(theta)
        P = float(np.abs(y - Ktheta).sum()) / b + float(np.abs(theta).sum())
        D = float(y @ u)
        extra = {"noise_scale": b, "lp_iterations": iterations}
        stop = "exact: HiGHS optimal vertex of the LP"
    gap = relative_gap(P, D)
    recorder.step(n_basis=len(basis), objective=P, gap=gap)
    X_basis = blocks.inputs(basis)
    summary = {"n_basis": int(len(basis)), "objective": P, "objective_dual_bound": D,
               "gap": gap, "jitter": 0.0, "stop_reason": stop, **extra}
    if noise == "laplacian":
        reason = "eqs. 110-112 give error bars for Gaussian noise only (004 §5.4)"
        return Solution(basis, theta[basis], X_basis, kernel, lam, summary, None,
                        not_applicable={"variance": reason})
    return Solution(basis, theta[basis], X_basis, kernel, lam, summary,
                    error_bars(K_M, X_basis, kernel, lam))


SPECS = [AlgorithmSpec(
    "laplacian_process", fit,
    "Laplacian process: MAP of an l1-sparse kernel expansion (QP or LP; forms the n×n kernel)",
    options={
        "noise": Option("gaussian", "choice", "noise density: gaussian (QP) or laplacian (LP)",
                        choices=NOISES),
        "noise_scale": Option(None, "float", "Laplacian noise scale b (null: √(lam/2))",
                              lo=0.0, lo_open=True, none_ok=True, example=0.5),
        "max_n": Option(5000, "int", "refuse larger n (the n×n kernel, several copies)", lo=1),
    },
    seed_free=True, has_variance=True, memory_bytes=memory_bytes,
)]
