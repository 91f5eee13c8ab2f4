"""Conjugate gradient on (K + σ²I)α = y, matrix-free (Gibbs & MacKay 1997; 004 Table 1, column 2).

Gibbs & MacKay's "efficient implementation of Gaussian processes" solves the GP's linear system
by (preconditioned) conjugate gradients instead of a Cholesky factorisation; 004 (Table 1,
column 2, reference [18]) lists it between the exact solution and the sparse methods. Table 1
stores K (memory O(m²) for m training points); here K is stored only where it fits
(``hold_kernel=auto``: its n²·8 bytes within half the memory available; the first product forms
it, every later one streams it, O(n²·b) time). Otherwise K is never formed: every product K·V,
for V of shape (n,) or (n, b), is computed over row blocks K[lo:hi, :] of about ``block_bytes``
of kernel values (:func:`kernel_matmul`), so memory is O(n·block) and each iteration costs one
pass over the n² kernel values (recomputed, as a matrix-free method must), O(n²·(d + b)) time.

Iteration (preconditioned CG; ``preconditioner=none`` is the plain CG of Table 1), from α = 0:
    r = y, z = M⁻¹r, p = z;  repeat: a = rᵀz / pᵀ(K+σ²I)p, α += a·p, r −= a·(K+σ²I)p,
    stop if ‖r‖ ≤ tol·‖y‖, z = M⁻¹r, p = z + (rᵀz / r_oldᵀz_old)·p.
Preconditioners M ≈ K + σ²I: ``jacobi`` M = diag(K) + σ²I (a multiple of I, hence no help, for
kernels with a constant diagonal such as rbf); ``pivoted_cholesky`` (the default: the seed's
low-rank toolbox combined with CG, as GPyTorch's BBMM does) M = FFᵀ + σ²I with F the pivoted
partial Cholesky factor of K (pivots of largest residual diagonal, in blocks of 64;
:class:`algorithms.lowrank.PartialCholesky`), its rank chosen from the residual trace: pivots
are added until tr(K − FFᵀ) ≤ ``precond_tol``·n·σ² (default 2: what F misses is, per point,
at most twice the noise variance) or the rank reaches ``precond_rank`` (default 4000). The
preconditioned spectrum lies in [1, 1 + λ_max(K − FFᵀ)/σ²]; measured with the learned ARD
kernels, pol (n = 13 500) needs 105 iterations to a residual of 1e-3 at ratio 21 (rank
1000), 44 at 5.8 (rank 2000), 20 at 1.6 (rank 3000); kin40k (n = 36 000) 44 at 7.1 (rank
2000), 17 at 1.8 (rank 4000). Applied by Woodbury
M⁻¹v = (v − F(σ²I + FᵀF)⁻¹Fᵀv)/σ² = (v − GGᵀv)/σ² with G = F R⁻ᵀ and R the Cholesky factor of
σ²I + FᵀF (triangular solves, never an explicit inverse).

The trace has one row per iteration: ``residual`` ‖r‖/‖y‖ (the recursively updated CG residual),
and the primal and dual objectives of Smola & Bartlett, L(α) (004 eq. 78) and L*(α) (eq. 79),
with their relative gap. Both come without an extra kernel pass from Kα = y − r − σ²α, r the
recursively updated residual (it drifts from the true y − (K+σ²I)α only at the round-off level;
the summary's ``residual_true`` is the true one, from one extra pass after the last iteration).

Error bars (``error_bars=true``). The predictive variance of y at x is k(x,x) + σ² − q with
q = kᵀ(K+σ²I)⁻¹k, k = k(X, x). A chunk of test points is solved at once, (K+σ²I)A = K[:, X_new],
by a batched preconditioned CG whose columns are independent (each has its own step sizes and
its own stop, below), so every kernel row block is computed once per iteration for the whole
chunk. For any iterate a with true residual r = k − (K+σ²I)a (one extra pass per chunk),
Theorem 2 of 004 (Theorem 1 of Smola & Bartlett 002), eqs. 80–83 with y = k, gives honest bounds
    q ≥ q_lo = −2L*_k(a) = 2kᵀa − aᵀ(K+σ²I)a = kᵀa + aᵀr,
    q ≤ q_hi = (‖k‖² + 2L_k(a))/σ² = ‖k − Ka‖²/σ² + aᵀKa,
with L_k(a) = −kᵀKa + ½(σ²aᵀKa + ‖Ka‖²) and Ka = k − r − σ²a (the second form of q_hi is the
same number as a sum of non-negative terms). The variance bounds are
(max(prior − q_hi, σ²), prior − q_lo) with prior = k(x,x) + σ²; the evaluator scores the upper.
This is Gibbs & MacKay's idea of bracketing kᵀC⁻¹k by two CG-computable bounds, in the form of
004 eq. 83. Writing k − Ka = r + σ²a shows q_hi − q_lo = ‖r‖²/σ² exactly, so a column stops
once ‖r‖²/σ² ≤ ``var_tol``·(its lower variance bound) (:class:`VarianceCG`; default 1e-7):
then both bounds lie within var_tol of the exact variance, relative to it, at any n.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Prediction, Solution
from algorithms.evaluation import Recorder
from algorithms.kernel_threads import lead_blas
from algorithms.lowrank import PartialCholesky
from algorithms.objectives import dual_objective, primal_objective, relative_gap
from algorithms.options import BYTES_MAX, Option

PRECONDITIONERS = ("none", "jacobi", "pivoted_cholesky")
HOLD_KERNEL = ("auto", "never")
HOLD_SHARE = 0.5  # of the memory available at the fit's start that a held K may take
NO_VARIANCE = ("algorithm.error_bars=false: each test point needs its own CG solve; set "
               "algorithm.error_bars=true")


def block_rows(n: int, block_bytes: int) -> int:
    """Rows of K per block so that a block K[rows, :] holds about ``block_bytes`` bytes."""
    return max(1, int(block_bytes) // (8 * max(n, 1)))


def kernel_matmul(blocks: KernelBlocks, V: np.ndarray, block_bytes: int) -> np.ndarray:
    """K·V for V of shape (n,) or (n, b), over row blocks K[lo:hi, :] of about ``block_bytes``
    of kernel values each (K is never formed)."""
    return blocks.matmul(V, block_bytes)


@dataclass
class Preconditioner:
    """M ≈ K + σ²I and how to apply M⁻¹ to (n,) or (n, b) arrays; ``rank`` is the rank of the
    low-rank part FFᵀ (0 for none and jacobi), ``seconds`` the time to build it, ``trace`` the
    residual trace tr(K − FFᵀ)/(n·σ²) at each rank it passed (:func:`make_preconditioner`)."""

    name: str
    apply: Callable[[np.ndarray], np.ndarray]
    rank: int = 0
    seconds: float = 0.0
    trace: list[tuple[int, float]] = field(default_factory=list)


PIVOT_BLOCK = 64  # pivots added per BLAS-3 update of the preconditioner's factor
# A pivot block's update (2·n·t·b flops) from which the factor is built with scipy's BLAS on
# the job's threads (lead_blas("scipy")); below, on one thread as the rest of the fit: scipy's
# workers spin for a while after their last call and cost a small fit's iterations more than
# threads gain on its small updates (n = 2500, rank 320: 0.15 s against 0.07 s; n = 10 000,
# rank 4000: the factor 8.4-9.2 s on one thread against 5.5-6.1 s on two)
THREADED_UPDATE_FLOPS = 1e9


def make_preconditioner(name: str, blocks: KernelBlocks, lam: float, rank: int,
                        tol: float = 0.0) -> Preconditioner:
    """Build preconditioner ``name`` (one of :data:`PRECONDITIONERS`) for K + ``lam``·I.

    ``pivoted_cholesky``: M = FFᵀ + σ²I, F the pivoted partial Cholesky factor of K, grown
    in blocks of :data:`PIVOT_BLOCK` pivots (the largest residual diagonals,
    :meth:`~algorithms.lowrank.PartialCholesky.greedy_block`) until its residual trace
    tr(K − FFᵀ) ≤ ``tol``·n·σ² or its rank reaches ``rank`` (``tol`` = 0: exactly ``rank``
    pivots, one greedy pivot at a time). The eigenvalues of M⁻¹(K + σ²I) lie in
    [1, 1 + λ_max(K − FFᵀ)/σ²], so the residual trace, relative to n·σ², is what the
    preconditioner leaves CG to do (the residual variance it misses per point, in units of
    the noise); ``trace`` holds (rank, tr(K − FFᵀ)/(n·σ²)) after each block."""
    start = time.perf_counter()
    if name == "none":
        return Preconditioner(name, lambda V: V)
    if name == "jacobi":
        inv = 1.0 / (np.asarray(blocks.diag(), dtype=np.float64) + lam)

        def jacobi(V: np.ndarray) -> np.ndarray:
            return V * (inv if V.ndim == 1 else inv[:, None])

        return Preconditioner(name, jacobi, 0, time.perf_counter() - start)
    n = blocks.n
    chol = PartialCholesky(blocks, min(rank, n))
    unit = n * lam  # the residual trace in units of n·σ²
    trace = [(0, chol.residual_trace() / unit)]
    step = PIVOT_BLOCK if tol > 0 else 1  # tol = 0: the exact greedy order, pivot by pivot
    threaded = False
    with contextlib.ExitStack() as heavy:
        while chol.t < min(rank, n) and trace[-1][1] > tol:
            if not threaded and 2.0 * n * chol.t * step >= THREADED_UPDATE_FLOPS:
                heavy.enter_context(lead_blas("scipy"))  # the updates are scipy's from here
                threaded = True
            pivots = chol.greedy_block(min(step, min(rank, n) - chol.t))
            if not pivots:  # every residual degenerate: K has numerical rank chol.t
                break
            chol.add(pivots)  # the ones it drops leave the admissible set: the loop moves on
            trace.append((chol.t, chol.residual_trace() / unit))
        # n × t, a view: its columns are the first t of a Fortran-ordered n × rank buffer
        # whose other columns were never written (never resident), so no n·t·8-byte copy
        # (1.1 GB at kin40k's rank 3904, twice that at its peak)
        F = chol.factor()
        del chol
        t = F.shape[1]
        # σ²I + FᵀF by one SYRK (its lower triangle: half a GEMM's arithmetic), then its
        # factor R; M⁻¹V = (V − F(RRᵀ)⁻¹FᵀV)/σ² is applied through R (Woodbury), never
        # forming F R⁻ᵀ
        A = sla.blas.dsyrk(1.0, F, trans=1, lower=1) if t else np.zeros((0, 0))
        A.flat[:: t + 1] += lam
        R = sla.cholesky(A, lower=True, overwrite_a=True, check_finite=False)

    def woodbury(V: np.ndarray) -> np.ndarray:
        return (V - F @ sla.cho_solve((R, True), F.T @ V, check_finite=False)) / lam

    return Preconditioner(name, woodbury, t, time.perf_counter() - start, trace)


class BatchedPCG:
    """Preconditioned CG on (K + σ²I)X = B for B of shape (n, b), its columns independent.

    Each column has its own step sizes and stops once ‖r_j‖ ≤ tol·‖b_j‖; an iteration
    (:meth:`step`) multiplies K by the search directions of the still active columns only, in
    one pass over the kernel row blocks. ``R`` is the recursively updated residual."""

    def __init__(self, blocks: KernelBlocks, B: np.ndarray, lam: float,
                 precond: Preconditioner, tol: float, block_bytes: int) -> None:
        self.blocks, self.lam, self.precond = blocks, lam, precond
        self.tol, self.block_bytes = tol, block_bytes
        self.B = B
        self.X = np.zeros(B.shape)
        self.R = B.copy()
        self.b_norm = np.linalg.norm(B, axis=0)
        self.r_norm = self.b_norm.copy()
        Z = precond.apply(self.R)
        self.rz = np.einsum("ij,ij->j", self.R, Z)
        self.P = np.array(Z, copy=True)
        self.active = self._unconverged(slice(None), self.X, self.R)
        self.iterations = 0

    def _unconverged(self, idx: slice | np.ndarray, X: np.ndarray, R: np.ndarray) -> np.ndarray:
        """Which of the columns ``idx`` (iterates X, recursive residuals R) go on:
        ‖r_j‖ > tol·‖b_j‖."""
        return self.r_norm[idx] > self.tol * self.b_norm[idx]

    def operator(self, V: np.ndarray) -> np.ndarray:
        """(K + σ²I)V over kernel row blocks."""
        out = kernel_matmul(self.blocks, V, self.block_bytes)
        out += self.lam * V
        return out

    @property
    def done(self) -> bool:
        return not self.active.any()

    def step(self) -> None:
        """One CG iteration on the active columns."""
        idx = slice(None) if self.active.all() else np.flatnonzero(self.active)
        P = self.P[:, idx]
        AP = self.operator(P)
        pAp = np.einsum("ij,ij->j", P, AP)
        if not (pAp > 0).all():
            raise FloatingPointError("CG breakdown: pᵀ(K + σ²I)p ≤ 0 (K + σ²I is numerically "
                                     "not positive definite)")
        a = self.rz[idx] / pAp
        X, R = self.X[:, idx] + a * P, self.R[:, idx] - a * AP
        self.X[:, idx], self.R[:, idx] = X, R
        self.r_norm[idx] = np.linalg.norm(R, axis=0)
        still = self._unconverged(idx, X, R)
        Z = self.precond.apply(R)
        rz = np.einsum("ij,ij->j", R, Z)
        beta = np.divide(rz, self.rz[idx], out=np.zeros_like(rz), where=still)
        self.P[:, idx] = Z + beta * P
        self.rz[idx] = rz
        self.active[idx] = still
        self.iterations += 1


class VarianceCG(BatchedPCG):
    """:class:`BatchedPCG` on (K + σ²I)A = K[:, X_new] whose column j stops once its
    Theorem-2 bracket on the predictive variance is narrower than ``var_tol`` times its lower
    end. For an iterate a with residual r the bracket is [prior − q_hi, prior − q_lo] with
    q_lo = kᵀa + aᵀr and q_hi = q_lo + ‖r‖²/σ² (module docstring: its width is exactly
    ‖r‖²/σ²), so the rule is ‖r‖²/σ² ≤ var_tol·max(prior − q_hi, σ²), from the recursive
    residual (O(n) per column per iteration; the bounds returned use the true one). Both ends
    then lie within var_tol of the exact variance, relative to it, whatever n and ‖k‖ are;
    a rule ‖r‖ ≤ tol·‖k‖ does not scale so: at tol = 1e-6 the lower end was 1.3e-6 off
    on kin40k's first 2000 rows (tests/test_cg.py)."""

    def __init__(self, blocks: KernelBlocks, B: np.ndarray, prior: np.ndarray, lam: float,
                 precond: Preconditioner, var_tol: float, block_bytes: int) -> None:
        self.prior, self.var_tol = prior, var_tol
        super().__init__(blocks, B, lam, precond, 0.0, block_bytes)

    def _unconverged(self, idx: slice | np.ndarray, X: np.ndarray, R: np.ndarray) -> np.ndarray:
        width = self.r_norm[idx] ** 2 / self.lam
        q_lo = np.einsum("ij,ij->j", self.B[:, idx], X) + np.einsum("ij,ij->j", X, R)
        lower = np.maximum(self.prior[idx] - q_lo - width, self.lam)
        return width > self.var_tol * lower


def _mean(blocks: KernelBlocks, X_new: np.ndarray, coef: np.ndarray,
          block_bytes: int) -> np.ndarray:
    """k(X_new, X)·coef over chunks of test rows of about ``block_bytes`` of kernel values."""
    X_new = np.asarray(X_new, dtype=np.float64)
    rows = block_rows(blocks.n, block_bytes)
    return np.concatenate([blocks.cross(X_new[lo: lo + rows], slice(None)) @ coef
                           for lo in range(0, len(X_new), rows)] or [np.zeros(0)])


def error_bar_bounds(blocks: KernelBlocks, X_new: np.ndarray, lam: float,
                     precond: Preconditioner, var_tol: float, max_iter: int,
                     block_bytes: int, var_batch: int,
                     iterations: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(q_lo, q_hi) bracketing q = kᵀ(K+σ²I)⁻¹k at each row of X_new (module docstring):
    batched CG per chunk of at most ``var_batch`` test points, each column until its variance
    bracket is narrower than ``var_tol`` relative (:class:`VarianceCG`), then the true
    residual in one more pass. Every iteration of a chunk is one pass over the n² kernel
    values, whatever the chunk's width, and its product K·P one GEMM of n²·width
    (:meth:`~algorithms.kernel_blocks.ArrayKernelBlocks.matmul`), so fewer, wider chunks are
    cheaper. Memory: about 8 n×var_batch float64 arrays alive at once (K[:, X_new], A, R, P,
    (K+σ²I)P, Z and the active-column copies), plus K's row blocks (``block_bytes`` per
    thread). ``iterations``, if given, gets each chunk's iteration count appended."""
    X_new = np.asarray(X_new, dtype=np.float64)
    m = len(X_new)
    n_chunks = max(1, math.ceil(m / max(1, int(var_batch))))
    chunk = max(1, math.ceil(m / n_chunks))  # balanced chunks
    q_lo, q_hi = np.empty(m), np.empty(m)
    prior = blocks.kernel.diag(X_new) + lam
    for lo in range(0, m, chunk):
        Kx = np.ascontiguousarray(blocks.cross(X_new[lo: lo + chunk], slice(None)).T)  # (n, c)
        cg = VarianceCG(blocks, Kx, prior[lo: lo + chunk], lam, precond, var_tol, block_bytes)
        while not cg.done and cg.iterations < max_iter:
            cg.step()
        if iterations is not None:
            iterations.append(cg.iterations)
        A = cg.X
        del cg
        KA = kernel_matmul(blocks, A, block_bytes)  # the true K·a, for honest bounds
        R = Kx - KA - lam * A  # the true residual k − (K+σ²I)a
        q_lo[lo: lo + chunk] = np.einsum("ij,ij->j", Kx, A) + np.einsum("ij,ij->j", A, R)
        Kx -= KA  # k − Ka
        q_hi[lo: lo + chunk] = (np.einsum("ij,ij->j", Kx, Kx) / lam
                                + np.einsum("ij,ij->j", A, KA))
    return q_lo, q_hi


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, tol: float, max_iter: int, preconditioner: str,
        precond_rank: int, precond_tol: float, block_bytes: int, hold_kernel: str,
        error_bars: bool, var_tol: float, var_batch: int, max_n: int) -> Solution:
    """Conjugate gradient on (K + σ²I)α = y with σ² = ``lam`` (Gibbs & MacKay 1997; 004
    Table 1, column 2), matrix-free over kernel row blocks. Deterministic: ``rng`` is unused.

    Parameters
    ----------
    blocks : kernel-block provider over the n training inputs.
    y : (n,) targets.
    lam : noise variance σ² > 0.
    recorder : the evaluator; each CG iteration is one step (its test mean k(x)ᵀα).
    tol : stop when the (recursively updated) residual ‖y − (K+σ²I)α‖ ≤ tol·‖y‖.
    max_iter : or after this many iterations.
    preconditioner : ``none`` (plain CG), ``jacobi`` or ``pivoted_cholesky`` (module docstring).
    precond_rank : the largest rank of the pivoted-Cholesky preconditioner (clipped to n and
        to the numerical rank of K).
    precond_tol : its pivots stop once the residual trace tr(K − FFᵀ) ≤ precond_tol·n·σ²
        (0: exactly ``precond_rank`` greedy pivots); :func:`make_preconditioner`.
    block_bytes : bytes of kernel values per row block.
    hold_kernel : ``auto``: the first product forms K and later ones multiply by it when its
        n²·8 bytes fit in :data:`HOLD_SHARE` of the memory available at the fit's start
        (:meth:`~algorithms.kernel_blocks.ArrayKernelBlocks.hold`; a product then streams n²
        numbers instead of computing n² kernel values; on a cluster each worker holds its rows
        of K within that share of its own memory); ``never``: matrix-free always.
    error_bars : give the predictive variance as the Theorem 2 bounds of the batched CG
        (module docstring); otherwise the fit has no variance.
    var_tol : a test point's CG stops once its variance bracket is narrower than var_tol
        times its lower end (:class:`VarianceCG`): both bounds within var_tol of the exact
        variance, relative.
    var_batch : test points per batched error-bar CG (each batch costs one kernel pass per
        iteration; memory 8·n·var_batch float64).
    max_n : checked before the fit (:func:`algorithms.evaluation.check_size`).
    """
    n = blocks.n
    precond = make_preconditioner(preconditioner, blocks, lam, precond_rank, precond_tol)
    held = blocks.hold(HOLD_SHARE) if hold_kernel == "auto" else 0
    cg = BatchedPCG(blocks, y[:, None], lam, precond, tol, block_bytes)
    y_norm = float(cg.b_norm[0])
    start = recorder.elapsed()
    L, L_dual, gap, residual = _iterate(cg, blocks, y, lam, recorder, max_iter, block_bytes)
    solve_seconds = recorder.elapsed() - start
    if blocks.hold_dropped:  # forming K ran out of a device's memory: the products were
        held = 0             # matrix-free
    alpha = cg.X[:, 0].copy()
    if cg.done:
        stop_reason = f"residual ≤ tol = {tol:g}"
    else:
        stop_reason = f"max_iter = {max_iter} reached with residual {residual:.3g} > tol = {tol:g}"
    iterations = cg.iterations
    true_r = y - kernel_matmul(blocks, alpha, block_bytes) - lam * alpha
    if not error_bars:  # the error bars' solves multiply by K after the fit
        blocks.release()
    summary = {
        "n_basis": n, "objective": L, "dual_objective": L_dual, "gap": gap,
        "objective_lower_bound": -0.5 * y_norm ** 2 - lam * L_dual,  # 004 eq. 80
        "iterations": iterations,
        "residual": residual,
        "residual_true": float(np.linalg.norm(true_r)) / y_norm if y_norm else 0.0,
        "stop_reason": stop_reason, "jitter": 0.0,
        "preconditioner": precond.name, "precond_rank": precond.rank,
        "precond_seconds": precond.seconds, "kernel_held_bytes": float(held),
        "precond_trace": precond.trace[-1][1] if precond.trace else math.nan,
        "iteration_seconds": solve_seconds / max(1, iterations),
    }
    X = blocks.inputs(slice(None))
    kernel = blocks.kernel
    variance_bounds = (_variance_bounds(blocks, lam, precond, var_tol, max_iter, block_bytes,
                                        var_batch) if error_bars else None)
    reasons = {} if error_bars else {"variance": NO_VARIANCE}
    return Solution(np.arange(n), alpha, X, kernel, lam, summary, variance_bounds,
                    not_applicable=reasons)



def _iterate(cg: BatchedPCG, blocks: KernelBlocks, y: np.ndarray, lam: float,
             recorder: Recorder, max_iter: int, block_bytes: int
             ) -> tuple[float, float, float, float]:
    """CG's iterations until its tolerance or ``max_iter``, each traced (the primal and dual
    objectives and the gap from the recursive residual: no kernel pass); the last
    (L, L*, gap, relative residual)."""
    y_norm = float(cg.b_norm[0])

    def record() -> tuple[float, float, float, float]:
        alpha, r = cg.X[:, 0], cg.R[:, 0]
        K_alpha = y - r - lam * alpha  # no kernel pass: the recursive residual r
        L = primal_objective(K_alpha, alpha, y, lam)
        L_dual = dual_objective(K_alpha, alpha, y, lam)
        gap = relative_gap(L, L_dual, y, lam)
        residual = float(cg.r_norm[0]) / y_norm if y_norm else 0.0
        coef = alpha.copy()
        recorder.step(lambda X_new: Prediction(_mean(blocks, X_new, coef, block_bytes)),
                      n_basis=len(y), iteration=cg.iterations, residual=residual, objective=L,
                      dual_objective=L_dual, gap=gap)
        return L, L_dual, gap, residual

    last = record() if cg.done else None  # y = 0 (or a large tol): α = 0 solves it; iteration 0
    while not cg.done and cg.iterations < max_iter:
        cg.step()
        last = record()
    return last


def _variance_bounds(blocks: KernelBlocks, lam: float, precond, var_tol: float,
                     max_iter: int, block_bytes: int, var_batch: int):
    """The error bars' bracket: (lower, upper) bounds on k(x,x) + σ² − kᵀ(K+σ²I)⁻¹k at each
    row of X_new, by a batched CG per chunk of test points (:func:`error_bar_bounds`)."""
    kernel = blocks.kernel

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X_new = np.asarray(X_new, dtype=np.float64)
        q_lo, q_hi = error_bar_bounds(blocks, X_new, lam, precond, var_tol, max_iter,
                                      block_bytes, var_batch)
        prior = kernel.diag(X_new) + lam
        # the variance of y is never below σ², so max(·, σ²) keeps the lower bound valid
        return np.maximum(prior - q_hi, lam), prior - q_lo

    return variance_bounds

SPECS = [AlgorithmSpec(
    "cg", fit,
    "conjugate gradient on (K + σ²I)α = y, matrix-free (Gibbs & MacKay; 004 Table 1)",
    options={
        "tol": Option(1e-6, "float", "stop when ‖y − (K+σ²I)α‖ ≤ tol·‖y‖", lo=0.0),
        "max_iter": Option(1000, "int", "or after this many iterations", lo=1),
        "preconditioner": Option("pivoted_cholesky", "choice",
                                 "M ≈ K + σ²I (none = plain CG)", choices=PRECONDITIONERS,
                                 example="jacobi"),
        "precond_rank": Option(4000, "int", "largest rank of the pivoted-Cholesky "
                               "preconditioner (memory 2·n·rank·8 bytes)", lo=1),
        "precond_tol": Option(2.0, "float", "add pivots until the residual trace "
                              "tr(K − FFᵀ) ≤ precond_tol·n·σ² (0: exactly precond_rank)",
                              lo=0.0),
        "block_bytes": Option(2**25, "int", "bytes of kernel values per row block of K", lo=1,
                              hi=BYTES_MAX),
        "hold_kernel": Option("auto", "choice", "auto: form K once and multiply by it when its "
                              "n²·8 bytes fit in half the memory available; never: recompute "
                              "its tiles every product (memory O(n·block))",
                              choices=HOLD_KERNEL, example="never"),
        "eval_every": Option(10, "int", "trace test metrics every this many iterations", lo=1),
        "error_bars": Option(False, "bool", "predictive variance bounds by a batched CG per "
                             "chunk of test points"),
        "var_tol": Option(1e-7, "float", "error bars: a test point's CG stops once its "
                          "variance bracket is narrower than var_tol × its lower end (both "
                          "bounds within var_tol of the exact variance, relative)", lo=0.0,
                          lo_open=True),
        "var_batch": Option(256, "int", "test points per batched error-bar CG (memory "
                            "8·n·var_batch float64; one kernel pass per iteration per batch)",
                            lo=1),
        "max_n": Option(100000, "int", "refuse larger n: a guard on time only (every "
                        "iteration computes n² kernel values, or streams a held K); the "
                        "default covers every shipped set (keggundirected: 57 248 training "
                        "rows)", lo=1),
    },
    seed_free=True, has_variance=True,
    exact_limit=ExactLimit({"tol": 1e-12, "error_bars": True}, variance=True),
    check_options={"error_bars": True, "max_iter": 60},
    cluster_blocks=True, device_blocks=True,
    # the iterations' K·v is numpy's and their one scipy call the r × r solve; the factor is
    # built with scipy's threads only where its updates are large (THREADED_UPDATE_FLOPS)
    blas_lead="numpy",
)]
