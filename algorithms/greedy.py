"""The greedy steps of Smola & Bartlett's SGMA (002 Algorithm 1; 004 §4.3-4.7), shared by
:mod:`algorithms.sgma`, Zhang's greedy methods and the Theorem 1 certificate
(:mod:`algorithms.certificate`): a primal and a dual greedy minimisation, each adding one basis
index per step from a random candidate subset of size κ, with its Cholesky factor grown one
row at a time (004 eq. 89 in Cholesky form).

A module of its own so that the code version of a job (its identity) follows what it runs: an
edit of SGMA's fit or error bars reruns SGMA's jobs, not those of every certified method.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np
import scipy.linalg as sla

from algorithms.contract import (
    KernelBlocks,
    Prediction,
)

# A candidate whose Schur complement G_ii − ‖c_i‖² is below this fraction of G_ii is numerically
# in the span of the current basis: it is dropped from the pool (it can never become admissible).
DEGENERATE_RTOL = 1e-10


class _Pool:
    """Unselected indices with O(1) removal and O(κ) uniform sampling without replacement."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.idx = np.arange(n)
        self.pos = np.arange(n)
        self.size = n
        self.rng = rng

    def sample(self, k: int) -> np.ndarray:
        if k >= self.size:
            return self.idx[: self.size].copy()
        return self.idx[self.rng.choice(self.size, size=k, replace=False)]

    def remove(self, i: int) -> None:
        p, last = self.pos[i], self.idx[self.size - 1]
        self.idx[p], self.pos[last] = last, p
        self.size -= 1


class _GrowingCholesky:
    """Lower factor R of G = RRᵀ and z = R⁻¹b, grown by one row per added index."""

    def __init__(self, capacity: int = 64) -> None:
        self.R = np.zeros((capacity, capacity))
        self.z = np.zeros(capacity)
        self.t = 0

    def solve_c(self, G_SM: np.ndarray) -> np.ndarray:
        """c = R⁻¹G_{S,M} for a block of candidates (t × m)."""
        return sla.solve_triangular(self.R[: self.t, : self.t], G_SM, lower=True,
                                    check_finite=False)

    def append(self, c: np.ndarray, schur: float, b_i: float) -> None:
        delta = np.sqrt(schur)
        self.append_exact(c, delta, (b_i - c @ self.z[: self.t]) / delta)

    def append_exact(self, c: np.ndarray, delta: float, z_t: float) -> None:
        """Append a row whose pivot ``delta`` and z entry ``z_t`` were computed elsewhere
        (the primal's QR form: δ = ‖w‖, z_t = qᵀỹ), not by differences."""
        t = self.t
        if t == len(self.z):  # grow by doubling: O(t²) memory, amortised O(t²) copying
            R, z = self.R, self.z
            self.R, self.z = np.zeros((2 * t, 2 * t)), np.zeros(2 * t)
            self.R[:t, :t], self.z[:t] = R, z
        self.R[t, :t], self.R[t, t], self.z[t] = c, delta, z_t
        self.t += 1

    @property
    def objective(self) -> float:
        """−½bᵀG⁻¹b = −½‖z‖²."""
        return -0.5 * float(self.z[: self.t] @ self.z[: self.t])

    def coef(self) -> np.ndarray:
        """β = G⁻¹b = R⁻ᵀz."""
        t = self.t
        return sla.solve_triangular(self.R[:t, :t], self.z[:t], lower=True, trans="T",
                                    check_finite=False)

    def factor(self) -> np.ndarray:
        return self.R[: self.t, : self.t].copy()


class _GreedySupport:
    """A support S grown greedily from a pool of unselected indices, with the Cholesky factor
    of its quadratic form; the objective is −½‖z‖² (see _GrowingCholesky)."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.pool = _Pool(n, rng)
        self.chol = _GrowingCholesky()
        self.S: list[int] = []

    @property
    def t(self) -> int:
        return self.chol.t

    @property
    def objective(self) -> float:
        return self.chol.objective


class PrimalGreedy(_GreedySupport):
    """Greedy minimisation of the primal L(Pβ) over a growing support S (the primal half of 002
    Algorithm 1): each :meth:`step` scores κ random unselected candidates and appends the best.

    G = σ²K_SS + K_{:S}ᵀK_{:S} is AᵀA for A = [K_{:S}; σF_S] (F_SᵀF_S = K_SS), so L(β) =
    ½‖Aβ − ỹ‖² − ½‖y‖² with ỹ = [y; 0]: a least-squares problem, held as A = QR with Q's top
    rows (n × t) in provider columns after y (``blocks.columns``) and its bottom rows (σF_S's,
    t × t) here. Rᵀ is the Cholesky factor of G and z = Qᵀỹ, so the objective −½‖z‖², the
    coefficients β = R⁻¹z and the duality gap are those of the normal-equations form; but a
    candidate's Schur complement is the squared norm of its column's residual from span(A),
    formed explicitly (``blocks.residual_norms``), and each appended column is orthogonalised
    twice: nothing is a difference of squared norms, so G's squared condition number never
    costs digits (the normal-equations form broke at variance/σ² = 5e7: docs/explanation/
    algorithms.md). One step costs two passes over the candidates' kernel columns.

    With κ = 1 this is random selection with an exact refit (Zhang's Algorithm 2).
    """

    def __init__(self, blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
                 t_max: int, chunk_bytes: int = 2**28) -> None:
        self.blocks, self.y, self.lam = blocks, y, lam
        self.sigma = float(np.sqrt(lam))
        self.n, self.d = blocks.n, blocks.d
        self.diag = blocks.diag()
        super().__init__(self.n, rng)
        self.t_max, self.chunk_bytes = t_max, chunk_bytes
        self.n_degenerate = 0
        self.seconds = dict.fromkeys(("project", "block_sm", "solve", "scores"), 0.0)
        self.W = blocks.columns(y, t_max)  # [y, Q's top rows]
        self.Q_bottom = np.zeros((t_max + 1, t_max))  # Q's rows of σF_S
        self.L_K = np.zeros((t_max, t_max))  # K_SS = L_K L_Kᵀ (F_S = L_Kᵀ)

    def coef(self) -> np.ndarray:
        return self.chol.coef()

    def predict(self, X_new: np.ndarray) -> Prediction:
        """The mean of the current support, k(X_new, X_S) β."""
        return Prediction(self.blocks.cross(X_new, self.S) @ self.coef())

    def step(self, kappa: int) -> float | None:
        """Add the best of κ random candidates to S; the FLOP estimate of the step, or None
        when no admissible candidate is left."""
        n, t, blocks, sigma = self.n, self.t, self.blocks, self.sigma
        Qb = self.Q_bottom[:t, :t]
        flops = 0.0
        while self.pool.size:
            M = self.pool.sample(kappa)
            width = max(1, min(len(M), self.chunk_bytes // (8 * (n + 2 * t + 1))))
            best = (-np.inf, None)
            for lo in range(0, len(M), width):
                Mc = M[lo: lo + width]
                t0 = perf_counter()
                P, sq = blocks.project(Mc, self.W)  # yᵀK_M, Q_topᵀK_M, ‖K_M‖²
                g = sq + self.lam * self.diag[Mc]  # ‖a‖²
                t1 = perf_counter()
                if t:
                    F = sla.solve_triangular(self.L_K[:t, :t], blocks.block(self.S, Mc),
                                             lower=True, check_finite=False)
                    d2 = self.diag[Mc] - np.einsum("ij,ij->j", F, F)
                    t2 = perf_counter()
                    r = P[1:] + Qb.T @ (sigma * F)  # Qᵀa
                    top = blocks.residual_norms(Mc, self.W, r)
                    bottom = sigma * F - Qb @ r
                    schur = top + np.einsum("ij,ij->j", bottom, bottom) + self.lam * np.maximum(
                        d2, 0.0)
                    num = P[0] - r.T @ self.chol.z[:t]  # ỹᵀa − zᵀQᵀa = ỹᵀ(residual of a)
                    t3 = perf_counter()
                else:
                    F, r = np.zeros((0, len(Mc))), np.zeros((0, len(Mc)))
                    d2 = self.diag[Mc]
                    schur, num = g, P[0]
                    t2 = t3 = perf_counter()
                self.seconds["project"] += t1 - t0
                self.seconds["block_sm"] += t2 - t1
                self.seconds["solve"] += t3 - t2
                t4 = perf_counter()
                # degenerate: in span(A) to the residual's accuracy, or a repeated input of
                # K_SS (its own Schur complement at round-off: F_S would be singular)
                ok = (schur > DEGENERATE_RTOL * g) & (d2 > DEGENERATE_RTOL * self.diag[Mc])
                flops += 4.0 * n * len(Mc) * (self.d + t + 1) + t * t * len(Mc)
                for i in Mc[~ok]:
                    self.pool.remove(int(i))
                self.n_degenerate += int((~ok).sum())
                if ok.any():
                    scores = np.where(ok, 0.5 * num**2 / np.where(ok, schur, 1.0), -np.inf)
                    j = int(np.argmax(scores))
                    if scores[j] > best[0]:
                        best = (scores[j], (int(Mc[j]), r[:, j].copy(), F[:, j].copy(),
                                            float(d2[j])))
                self.seconds["scores"] += perf_counter() - t4
            if best[1] is not None:
                self._append(*best[1])
                return flops
            # every sampled candidate was degenerate: draw again
        return None

    def _append(self, i: int, r: np.ndarray, f: np.ndarray, d2: float) -> None:
        """Append column a_i = [K_{:i}; σf; σ√d2] to A = QR: its residual w = a_i − Q(Qᵀa_i)
        orthogonalised once more, q = w/‖w‖ (Gram–Schmidt twice is enough)."""
        t, sigma = self.t, self.sigma
        Qb = self.Q_bottom[:t, :t]
        s_top, _, _ = self.W.append_residual(self.blocks.inputs([i]), r)  # K_{:i} − Q_top r
        w_bottom = np.zeros(t + 1)
        w_bottom[:t] = sigma * f - Qb @ r
        w_bottom[t] = sigma * np.sqrt(max(d2, 0.0))
        s = s_top + Qb.T @ w_bottom[:t]  # Qᵀw, whole
        w_bottom[:t] -= Qb @ s
        top_sq, y_w = self.W.reorthogonalise(s)
        delta = float(np.sqrt(top_sq + w_bottom @ w_bottom))
        self.W.commit(delta)
        self.Q_bottom[: t + 1, t] = w_bottom / delta
        self.chol.append_exact(r + s, delta, y_w / delta)  # z_t = qᵀỹ = q_topᵀy
        self.L_K[t, :t], self.L_K[t, t] = f, np.sqrt(d2)
        self.S.append(i)
        self.pool.remove(i)

    def upper_variance_terms(self, X_new: np.ndarray) -> np.ndarray:
        """‖(I − QQᵀ)[k(X, x); 0]‖² for each row x of X_new, explicitly: σ² times the width
        of the primal's bound on kᵀ(K + σ²I)⁻¹k (002 eq. 8, the module sgma's docstring)."""
        t = self.t
        P, _ = self.blocks.project_points(X_new, self.W)
        r = P[1: t + 1]  # Q_topᵀk
        top = self.blocks.residual_norms_points(X_new, self.W, r)
        bottom = self.Q_bottom[:t, :t] @ r
        return top + np.einsum("ij,ij->j", bottom, bottom)


class DualGreedy(_GreedySupport):
    """Greedy minimisation of the dual L*(Pβ*) = −y_Sᵀβ* + ½β*ᵀ(σ²I + K_SS)β* (the dual half of
    002 Algorithm 1). It needs only K_SS and K_{S,M}: O(κ t) kernel values per step."""

    def __init__(self, blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
                 diag: np.ndarray | None = None, chunk_bytes: int = 2**28) -> None:
        self.blocks, self.y, self.lam = blocks, y, lam
        self.d = blocks.d
        self.diag = blocks.diag() if diag is None else diag
        super().__init__(blocks.n, rng)
        self.chunk_bytes = chunk_bytes

    def step(self, kappa: int) -> float | None:
        """Add the best of κ random candidates to S*; the FLOP estimate, or None when no
        admissible candidate is left. As in the primal, a candidate whose Schur complement of
        σ²I + K_SS is at round-off level (σ² → 0 with K_SS singular) is dropped from the pool."""
        t, y = self.t, self.y
        flops = 0.0
        while self.pool.size:
            M = self.pool.sample(kappa)
            width = max(1, min(len(M), self.chunk_bytes // (8 * (2 * t + 1))))
            best = (-np.inf, None)
            for lo in range(0, len(M), width):
                Mc = M[lo: lo + width]
                g = self.lam + self.diag[Mc]
                if t:
                    C = self.chol.solve_c(self.blocks.block(self.S, Mc))
                    num = y[Mc] - C.T @ self.chol.z[:t]
                    schur = g - np.einsum("ij,ij->j", C, C)
                else:
                    C, num, schur = np.zeros((0, len(Mc))), y[Mc], g
                flops += 2.0 * t * len(Mc) * (self.d + 1) + t * t * len(Mc)
                ok = schur > DEGENERATE_RTOL * g
                for i in Mc[~ok]:
                    self.pool.remove(int(i))
                if not ok.any():
                    continue
                scores = np.where(ok, 0.5 * num**2 / np.where(ok, schur, 1.0), -np.inf)
                j = int(np.argmax(scores))
                if scores[j] > best[0]:
                    best = (scores[j], (int(Mc[j]), C[:, j].copy(), float(schur[j]),
                                        float(y[Mc[j]])))
            if best[1] is not None:
                i, c, schur_i, b_i = best[1]
                self.chol.append(c, schur_i, b_i)
                self.S.append(i)
                self.pool.remove(i)
                return flops
        return None

