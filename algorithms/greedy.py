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
        t = self.t
        if t == len(self.z):  # grow by doubling: O(t²) memory, amortised O(t²) copying
            R, z = self.R, self.z
            self.R, self.z = np.zeros((2 * t, 2 * t)), np.zeros(2 * t)
            self.R[:t, :t], self.z[:t] = R, z
        delta = np.sqrt(schur)
        self.R[t, :t] = c
        self.R[t, t] = delta
        self.z[t] = (b_i - c @ self.z[:t]) / delta
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
    Algorithm 1): each :meth:`step` scores κ random unselected candidates with one GEMM and
    appends the best to S, K_{:S} and the Cholesky factor of G = σ²K_SS + K_{:S}ᵀK_{:S}.

    With κ = 1 this is random selection with an exact refit (Zhang's Algorithm 2).
    """

    def __init__(self, blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
                 t_max: int, chunk_bytes: int = 2**28) -> None:
        self.blocks, self.y, self.lam = blocks, y, lam
        self.n, self.d = blocks.n, getattr(blocks, "d", 0)
        self.diag = blocks.diag()
        super().__init__(self.n, rng)
        self.t_max, self.chunk_bytes = t_max, chunk_bytes
        self.n_degenerate = 0
        # seconds spent so far in the fused projection (kernel columns and [y, K_{:S}]ᵀK_{:M}),
        # the block K_SM, the triangular solve and the scores (the benchmark's breakdown)
        self.seconds = dict.fromkeys(("project", "block_sm", "solve", "scores"), 0.0)
        # [y, K[:, S]], held by the provider: y in column 0 so that one product
        # [y, K_{:S}]ᵀK_{:M} gives b and G_SM
        self.YKS = blocks.columns(y, t_max)

    def coef(self) -> np.ndarray:
        return self.chol.coef()

    def predict(self, X_new: np.ndarray) -> Prediction:
        """The mean of the current support, k(X_new, X_S) β."""
        return Prediction(self.blocks.cross(X_new, self.S) @ self.coef())

    def step(self, kappa: int) -> float | None:
        """Add the best of κ random candidates to S; the FLOP estimate of the step, or None
        when no admissible candidate is left."""
        n, t, lam, blocks = self.n, self.t, self.lam, self.blocks
        flops = 0.0
        while self.pool.size:
            M = self.pool.sample(kappa)
            width = max(1, min(len(M), self.chunk_bytes // (8 * (n + 2 * t + 1))))
            best = (-np.inf, None)
            for lo in range(0, len(M), width):
                Mc = M[lo: lo + width]
                t0 = perf_counter()
                # [y, K_{:S}]ᵀK_{:M} and diag(K_{:M}ᵀK_{:M}) in one pass over the kernel
                # columns of the candidates, never held whole (KernelBlocks.project)
                P, sq = blocks.project(Mc, self.YKS)
                t1 = perf_counter()
                b = P[0]
                g = lam * self.diag[Mc] + sq
                if t:
                    G_SM = P[1:]
                    G_SM += lam * blocks.block(self.S, Mc)
                    t2 = perf_counter()
                    C = self.chol.solve_c(G_SM)
                    t3 = perf_counter()
                    num = b - C.T @ self.chol.z[:t]
                    schur = g - np.einsum("ij,ij->j", C, C)
                else:
                    C, num, schur = np.zeros((0, len(Mc))), b, g
                    t2 = t3 = perf_counter()
                self.seconds["project"] += t1 - t0
                self.seconds["block_sm"] += t2 - t1
                self.seconds["solve"] += t3 - t2
                self.seconds["scores"] += perf_counter() - t3
                flops += 2.0 * n * len(Mc) * (self.d + t + 2) + t * t * len(Mc)
                ok = schur > DEGENERATE_RTOL * g
                for i in Mc[~ok]:
                    self.pool.remove(int(i))
                self.n_degenerate += int((~ok).sum())
                if not ok.any():
                    continue
                scores = np.where(ok, 0.5 * num**2 / np.where(ok, schur, 1.0), -np.inf)
                j = int(np.argmax(scores))
                if scores[j] > best[0]:
                    best = (scores[j], (int(Mc[j]), C[:, j].copy(), float(schur[j]),
                                        float(b[j])))
            if best[1] is not None:
                self._append(*best[1])
                return flops
            # every sampled candidate was degenerate: draw again
        return None

    def _append(self, i: int, c: np.ndarray, schur: float, b_i: float) -> None:
        self.YKS.append(i)  # the chosen column K[:, i]
        self.chol.append(c, schur, b_i)
        self.S.append(i)
        self.pool.remove(i)


class DualGreedy(_GreedySupport):
    """Greedy minimisation of the dual L*(Pβ*) = −y_Sᵀβ* + ½β*ᵀ(σ²I + K_SS)β* (the dual half of
    002 Algorithm 1). It needs only K_SS and K_{S,M}: O(κ t) kernel values per step."""

    def __init__(self, blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
                 diag: np.ndarray | None = None, chunk_bytes: int = 2**28) -> None:
        self.blocks, self.y, self.lam = blocks, y, lam
        self.d = getattr(blocks, "d", 0)
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

