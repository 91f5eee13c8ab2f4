"""Low-rank GP regression from a partial pivoted Cholesky factor of K (004 §4.1, §4.3).

Both the Nyström method (Williams & Seeger; pivots drawn at random) and the incomplete
Cholesky factorisation with symmetric diagonal pivoting (004's "sparse decomposition", Table 1;
pivot = largest residual diagonal) build the same object, a factor F (n × t) with

    K ≈ F Fᵀ = K_{:P} K_PP⁻¹ K_{P:},     F = K_{:P} L_PP⁻ᵀ,  K_PP = L_PP L_PPᵀ,

where P is the ordered list of pivots and L_PP = F[P, :] is lower triangular. The factor is
grown from kernel columns only (:class:`PartialCholesky`: O(n·t) memory, O(n·t²) time); a block
of new pivots costs one GEMM for the Schur complement of their columns and one triangular solve.
A pivot whose Schur complement is below ``DEGENERATE_RTOL``·k(x,x) (a repeated input, or one
numerically in the span of the others) is dropped, not jittered, and counted.

:class:`LowRankSolve` then solves the regression on span{k(·, x_p): p ∈ P}: with
A = σ²I + FᵀF = RRᵀ (eigenvalues ≥ σ², well conditioned) and z = R⁻¹Fᵀy,

- weights w = R⁻ᵀz, coefficients α_P = L_PP⁻ᵀw, mean f(x) = k_P(x)ᵀα_P (Woodbury, 004 eq. 74:
  (FFᵀ + σ²I)⁻¹y = σ⁻²(y − F A⁻¹Fᵀy));
- the primal objective of Smola & Bartlett at α_P with the true K (002 eq. 5; 004 eq. 78):
  K_{:P}α_P = Fw and α_Pᵀ K_PP α_P = ‖w‖², so L = −½‖z‖², and because R grows by blocks the
  value at every prefix of P is a cumulative sum;
- the dual objective on the same pivots (004 eq. 79 restricted to P),
  L* = −½ y_Pᵀ(σ²I + K_PP)⁻¹y_P, also one growing Cholesky factor; with it the relative gap and
  Theorem 1's lower bound −½‖y‖² − σ²L* ≤ L_min (004 eq. 80);
- the predictive variance of y of the deterministic training conditional (DTC; Seeger, Williams
  & Lawrence 2003; Quiñonero-Candela & Rasmussen 2005 eq. 20), with φ(x) = L_PP⁻¹k_P(x):
  k(x,x) − ‖φ‖² + σ² + σ²‖R⁻¹φ‖². Its mean is the subset-of-regressors / Nyström mean; unlike
  the SoR variance it keeps the prior's k(x,x) − ‖φ‖² that the basis cannot explain, so with
  every training point as a pivot mean and variance equal the exact GP's.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.linalg as sla

from algorithms.contract import KernelBlocks, Prediction, Solution
from algorithms.evaluation import Recorder
from algorithms.factor_columns import DEGENERATE_RTOL
from algorithms.kernel_threads import small_blas
from algorithms.objectives import relative_gap


def _grow(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    out = np.zeros((rows, cols), order="F")
    out[: a.shape[0], : a.shape[1]] = a
    return out


class PartialCholesky:
    """K ≈ FFᵀ from kernel columns only; see the module docstring.

    The rows of F, the residual diagonal diag(K − FFᵀ) (its sum is the residual trace) and
    their reductions are held by the provider (``blocks.cholesky_columns``: in memory, or
    spread over a cluster's workers with ``blocks=cluster``); this object decides the pivots
    and keeps ``pivots`` (accepted, in order), ``L_PP`` = F[P, :] (lower triangular),
    ``n_dropped`` (rejected as degenerate) and the admissible set. ``targets`` (y) are needed
    only by :class:`LowRankSolve` (:meth:`gram`)."""

    def __init__(self, blocks: KernelBlocks, capacity: int,
                 targets: np.ndarray | None = None) -> None:
        self.blocks = blocks
        self.n = blocks.n
        self.diag = np.asarray(blocks.diag(), dtype=np.float64)
        self.capacity = max(1, min(capacity, self.n))
        self.columns = blocks.cholesky_columns(self.capacity, targets)
        self.pivots: list[int] = []
        self.n_dropped = 0
        self.admissible = np.ones(self.n, dtype=bool)
        self._L_PP = np.zeros((self.capacity, self.capacity), order="F")

    @property
    def t(self) -> int:
        return len(self.pivots)

    @property
    def L_PP(self) -> np.ndarray:
        """F[P, :] (t × t, lower triangular): the factor's rows at the pivots, K_PP = L_PP L_PPᵀ."""
        return self._L_PP[: self.t, : self.t]

    def factor(self) -> np.ndarray:
        """F (n × t) as one array (from a cluster's workers: n·t values gathered)."""
        return self.columns.factor()

    def residual_trace(self) -> float:
        return self.columns.residual_trace()

    def gram(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """(F[:, :t1]ᵀ F[:, t0:t1], F[:, t0:t1]ᵀ y): what :class:`LowRankSolve` needs of F."""
        return self.columns.gram(t0, t1)

    def add(self, candidates: Iterable[int]) -> int:
        """Add ``candidates`` as pivots in the given order, dropping each whose Schur
        complement is degenerate; returns how many were accepted."""
        B = np.asarray([i for i in candidates if self.admissible[i]], dtype=np.int64)
        if not len(B):
            return 0
        t = self.t
        F_B = self.columns.rows(B)  # (b, t)
        S = self.blocks.block(B, B)
        if t:
            S -= F_B @ F_B.T  # the candidates' Schur block
        with small_blas(len(B)):
            kept, L_B = self._ordered_cholesky(S, B)
        self.admissible[B] = False
        self.n_dropped += len(B) - len(kept)
        self.columns.append(self.blocks.inputs(B[kept]), F_B[kept], L_B, B)
        if not kept:
            return 0
        t1 = t + len(kept)
        if t1 > self._L_PP.shape[0]:
            self._L_PP = _grow(self._L_PP, *(2 * [max(2 * self._L_PP.shape[0], t1)]))
        self._L_PP[t:t1, :t] = F_B[kept]
        self._L_PP[t:t1, t:t1] = L_B
        self.pivots.extend(int(i) for i in B[kept])
        return len(kept)

    def _ordered_cholesky(self, S: np.ndarray, B: np.ndarray) -> tuple[list[int], np.ndarray]:
        """In-order Cholesky of the Schur block S (b × b) keeping only candidates whose
        complement given the kept ones before them exceeds DEGENERATE_RTOL·k(x,x)."""
        kept: list[int] = []
        L = np.zeros((len(B), len(B)))
        for i in range(len(B)):
            k = len(kept)
            row = (sla.solve_triangular(L[:k, :k], S[kept, i], lower=True, check_finite=False)
                   if k else np.zeros(0))
            d = S[i, i] - row @ row
            if d > DEGENERATE_RTOL * self.diag[B[i]]:
                L[k, :k] = row
                L[k, k] = np.sqrt(d)
                kept.append(i)
        k = len(kept)
        return kept, L[:k, :k]

    def greedy_block(self, k: int) -> list[int]:
        """The ``k`` admissible indices with the largest residual diagonals, largest first
        (:meth:`add` accepts them in that order, dropping any made degenerate by the ones
        before it): k greedy steps in one BLAS-3 update, for a preconditioner, where the
        exact greedy order matters less than the speed. For k = 1 the one pivot of
        :meth:`greedy_pivot` (empty if there is none)."""
        if k == 1:
            pivot = self.greedy_pivot()
            return [] if pivot is None else [pivot]
        return [int(i) for i in self.columns.top(k)]

    def greedy_pivot(self) -> int | None:
        """The admissible index with the largest residual diagonal (symmetric diagonal
        pivoting), or None when every residual is degenerate."""
        best = self.columns.best()
        return None if best is None else best[0]


class LowRankSolve:
    """The regression on the pivots of a :class:`PartialCholesky`; see the module docstring.
    :meth:`update` takes in the columns added since the last call."""

    def __init__(self, chol: PartialCholesky, y: np.ndarray, lam: float) -> None:
        self.chol, self.y, self.lam = chol, y, lam
        self.half_yy = 0.5 * float(y @ y)
        self.t = 0
        cap = chol.capacity
        self.R = np.zeros((cap, cap), order="F")       # chol(σ²I + FᵀF)
        self.z = np.zeros(cap)                          # R⁻¹Fᵀy
        self.R_dual = np.zeros((cap, cap), order="F")  # chol(σ²I + K_PP)
        self.z_dual = np.zeros(cap)                     # R_dual⁻¹y_P

    def _extend(self, R: np.ndarray, z: np.ndarray, cross: np.ndarray, block: np.ndarray,
                rhs: np.ndarray) -> None:
        """Grow the Cholesky factor R of [[A, cross], [crossᵀ, block]] and z = R⁻¹b by the
        block's rows, in place (the blocked form of 004 eq. 89)."""
        t, t1 = self.t, self.t + block.shape[0]
        W = (sla.solve_triangular(R[:t, :t], cross, lower=True, check_finite=False)
             if t else cross)
        R[t:t1, t:t1] = sla.cholesky(block - W.T @ W, lower=True, check_finite=False)
        R[t:t1, :t] = W.T
        z[t:t1] = sla.solve_triangular(R[t:t1, t:t1], rhs - W.T @ z[:t], lower=True,
                                       check_finite=False)

    def update(self) -> None:
        chol, t, t1 = self.chol, self.t, self.chol.t
        if t1 == t:
            return
        if t1 > self.R.shape[0]:
            cap = max(2 * self.R.shape[0], t1)
            self.R, self.R_dual = (_grow(a, cap, cap) for a in (self.R, self.R_dual))
            self.z, self.z_dual = (np.concatenate([v, np.zeros(cap - len(v))])
                                   for v in (self.z, self.z_dual))
        cross, Fty = chol.gram(t, t1)  # F[:, :t1]ᵀF_new, F_newᵀy
        eye = self.lam * np.eye(t1 - t)
        with small_blas(t1):  # t1 × t1 work only (the n-row products are in gram)
            self._extend(self.R, self.z, cross[:t], eye + cross[t:], Fty)
            P_new = np.asarray(chol.pivots[t:t1])
            L_PP = chol.L_PP
            L_new = L_PP[t:t1, :t1]  # rows t..t1 of L_PP = F[P, :]
            K_cross = L_PP[:t, :t] @ L_new[:, :t].T  # K[P_old, P_new] = L_old L_newᵀ
            self._extend(self.R_dual, self.z_dual, K_cross, eye + L_new @ L_new.T,
                         self.y[P_new])
        self.t = t1

    def objectives(self) -> tuple[np.ndarray, np.ndarray]:
        """Primal L and dual L* at every prefix of the pivots (002 eqs. 5-6 on span P)."""
        t = self.t
        return -0.5 * np.cumsum(self.z[:t] ** 2), -0.5 * np.cumsum(self.z_dual[:t] ** 2)

    def gap(self, L: float, L_dual: float) -> float:
        return relative_gap(L, L_dual, self.y, self.lam)

    def lower_bound(self, L_dual: float) -> float:
        """Theorem 1 (004 eq. 80): L_min ≥ −½‖y‖² − σ²L*."""
        return -self.half_yy - self.lam * L_dual

    def _factors(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.chol.pivots[:t], dtype=np.int64), self.chol.L_PP[:t, :t]

    def coef(self, t: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(pivots, α_P) of the solution on the first ``t`` pivots (default all)."""
        t = self.t if t is None else t
        P, L_PP = self._factors(t)
        w = sla.solve_triangular(self.R[:t, :t], self.z[:t], lower=True, trans="T",
                                 check_finite=False)
        return P, sla.solve_triangular(L_PP, w, lower=True, trans="T", check_finite=False)

    def predictor(self, t: int | None = None):
        P, alpha = self.coef(t)
        blocks = self.chol.blocks
        return lambda X_new: Prediction(blocks.cross(X_new, P) @ alpha)

    def variance_bounds(self):
        """The DTC predictive variance of y as (lower, upper) = (var, var)."""
        t, lam = self.t, self.lam
        P, L_PP = self._factors(t)
        L_PP, R = L_PP.copy(), self.R[:t, :t].copy()
        kernel, X_P = self.chol.blocks.kernel, self.chol.blocks.inputs(P)

        def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            X_new = np.asarray(X_new, dtype=np.float64)
            out = np.empty(len(X_new))
            step = max(1, 2**25 // (8 * max(t, 1)))
            for lo in range(0, len(X_new), step):
                Xc = X_new[lo: lo + step]
                phi = sla.solve_triangular(L_PP, kernel(Xc, X_P).T, lower=True,
                                           check_finite=False)
                V = sla.solve_triangular(R, phi, lower=True, check_finite=False)
                unexplained = np.maximum(kernel.diag(Xc) - np.einsum("ij,ij->j", phi, phi), 0.0)
                out[lo: lo + step] = unexplained + lam + lam * np.einsum("ij,ij->j", V, V)
            return out, out

        return variance_bounds


def basis_grid(max_basis: int, first: int = 8) -> list[int]:
    """Basis sizes first, 2·first, 4·first, … below ``max_basis``, then ``max_basis``."""
    grid, m = [], first
    while m < max_basis:
        grid.append(m)
        m *= 2
    return [*grid, max_basis]


def record(recorder: Recorder, solve: LowRankSolve, evaluate: bool = True) -> None:
    """One trace row for the current pivots: basis size, primal and dual objectives, their
    gap, Theorem 1's certified suboptimality (L − ℓ)/|L|, the residual trace tr(K − FFᵀ), the
    dropped pivots, and (if ``evaluate``) the test metrics of the current mean."""
    chol = solve.chol
    record_prefixes(recorder, solve, [(solve.t, chol.residual_trace(), chol.n_dropped)],
                    evaluate)


def record_prefixes(recorder: Recorder, solve: LowRankSolve,
                    rows: list[tuple[int, float, int]], evaluate: bool = True) -> None:
    """Trace rows for earlier prefixes of the pivots, each (t, residual trace, dropped) as
    they were when the factor had t columns: the objectives of every prefix are cumulative
    sums of the solve (module docstring), so the solve may be updated once for a block of
    pivots and the block's rows recorded after it."""
    L_all, L_dual_all = solve.objectives()
    for t, residual_trace, n_dropped in rows:
        L, L_dual = float(L_all[t - 1]), float(L_dual_all[t - 1])
        lower = solve.lower_bound(L_dual)
        predict = ((lambda X_new, t=t: solve.predictor(t)(X_new)) if evaluate else None)
        recorder.step(predict, n_basis=t, objective=L,
                      dual_objective=L_dual, gap=solve.gap(L, L_dual),
                      gap_certified_pivots=(L - lower) / abs(L) if L < 0 else np.inf,
                      residual_trace=residual_trace, n_dropped=n_dropped)


def solution(solve: LowRankSolve, stop_reason: str) -> Solution:
    """The final :class:`Solution` on all pivots, with its DTC variance."""
    chol = solve.chol
    P, alpha = solve.coef()
    L, L_dual = (float(v[-1]) for v in solve.objectives())
    summary = {"n_basis": solve.t, "objective": L, "dual_objective": L_dual,
               "gap": solve.gap(L, L_dual), "objective_lower_bound": solve.lower_bound(L_dual),
               "residual_trace": chol.residual_trace(),
               "residual_trace_relative": chol.residual_trace() / float(chol.diag.sum()),
               "n_dropped": chol.n_dropped, "stop_reason": stop_reason, "jitter": 0.0}
    return Solution(P, alpha, chol.blocks.inputs(P), chol.blocks.kernel, solve.lam, summary,
                    solve.variance_bounds())
