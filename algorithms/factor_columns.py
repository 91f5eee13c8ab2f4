"""The rows of a partial pivoted Cholesky factor F (K ≈ FFᵀ) that a kernel-block provider
holds: the n × t state of the Nyström method and of incomplete Cholesky
(:class:`algorithms.lowrank.PartialCholesky` decides the pivots; this class does the work that
is a sum or a map over rows).

A provider holds one :class:`ArrayCholeskyColumns` over all rows in memory
(``ArrayKernelBlocks.cholesky_columns``), or one per row range on the workers of a cluster
(``blocks=cluster``), each updated by the same calls with the same small arguments:

- :meth:`append` adds the factor columns of accepted pivots B with
  F_new = (K[:, B] − F F[B]ᵀ) L_B⁻ᵀ (004 §4.3; L_B the Cholesky factor of the pivots' Schur
  block, computed by the caller) — one GEMM and one triangular solve on the held rows, both
  written in place into F's next columns (Fortran order: no temporaries, no copy) — and
  updates the residual diagonal diag(K − FFᵀ);
- :meth:`best` and :meth:`residual_trace` reduce the residual diagonal (symmetric diagonal
  pivoting takes its argmax; the trace is the stopping rule);
- :meth:`gram` returns (F[:, :t₁]ᵀ F[:, t₀:t₁], F[:, t₀:t₁]ᵀ y), all the low-rank regression
  needs of the rows (:class:`algorithms.lowrank.LowRankSolve`).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

# A pivot whose Schur complement is below this fraction of its k(x,x) is numerically in the
# span of the pivots before it (the value SGMA uses for its candidates): never a best pivot.
DEGENERATE_RTOL = 1e-10


def _into(target: np.ndarray, result: np.ndarray) -> None:
    """Make sure a BLAS call asked to overwrite ``target`` left its ``result`` there (it does
    for a Fortran-contiguous float64 target; a copy otherwise, written back here)."""
    if not np.shares_memory(target, result):
        target[...] = result


class ArrayCholeskyColumns:
    """Rows ``lo``..``lo + n`` of a pivoted Cholesky factor, its residual diagonal and the
    targets of those rows. ``blocks`` is an in-memory kernel-block provider over these rows
    (``blocks.X`` and ``blocks.kernel``); global row numbers are used in every argument."""

    def __init__(self, blocks, targets: np.ndarray | None, capacity: int, lo: int = 0) -> None:
        self.blocks, self.lo, self.n = blocks, lo, blocks.n
        self.diag = np.asarray(blocks.diag(), dtype=np.float64)
        self.resid = self.diag.copy()
        self.admissible = np.ones(self.n, dtype=bool)
        self.y = None if targets is None else np.asarray(targets, dtype=np.float64)
        self.F = np.zeros((self.n, max(1, capacity)), order="F")
        self.t = 0

    def _local(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``rows`` of the rows held here, their local numbers)."""
        rows = np.asarray(rows, dtype=np.int64)
        mine = np.flatnonzero((rows >= self.lo) & (rows < self.lo + self.n))
        return mine, rows[mine] - self.lo

    def held_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``rows`` of the rows held here, F[those rows, :t])."""
        mine, local = self._local(rows)
        return mine, self.F[local, : self.t]

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """F[rows, :t]; every row must be held here (a provider over all rows)."""
        mine, F_rows = self.held_rows(rows)
        if len(mine) != len(rows):
            raise IndexError(f"rows outside {self.lo}..{self.lo + self.n - 1} are not held here")
        return F_rows

    def append(self, X_new: np.ndarray, F_new_rows: np.ndarray, L_B: np.ndarray,
               considered: np.ndarray) -> None:
        """Add the factor columns of the accepted pivots with inputs ``X_new`` (b × d), their
        rows F[B, :t] (``F_new_rows``) and the Cholesky factor ``L_B`` (b × b, lower) of their
        Schur block; every index in ``considered`` (accepted or dropped) leaves the admissible
        set with residual 0."""
        t, b = self.t, len(X_new)
        if b:
            if t + b > self.F.shape[1]:
                grown = np.zeros((self.n, max(2 * self.F.shape[1], t + b)), order="F")
                grown[:, :t] = self.F[:, :t]
                self.F = grown
            new = self.F[:, t: t + b]  # F-contiguous: every step below writes it in place
            kernel = self.blocks.kernel  # K[:, B] (n × b) from the rows' tile form, made once
            new[...] = kernel.block(self.blocks.kernel_rows,
                                    kernel.cols(np.asarray(X_new, dtype=np.float64)))
            if t:  # the Schur complement columns K[:, B] − F F[B]ᵀ: one GEMM (GEMV), in place
                if b == 1:
                    _into(new[:, 0], sla.blas.dgemv(-1.0, self.F[:, :t], F_new_rows[0],
                                                    beta=1.0, y=new[:, 0], overwrite_y=1))
                else:
                    _into(new, sla.blas.dgemm(-1.0, self.F[:, :t], F_new_rows, beta=1.0,
                                              c=new, trans_b=1, overwrite_c=1))
            if b == 1:  # one pivot (incomplete Cholesky): a column scaled by 1/L_B
                new /= L_B[0, 0]
            else:  # F_new L_Bᵀ = C: one triangular solve from the right, in place
                _into(new, sla.blas.dtrsm(1.0, np.asarray(L_B, dtype=np.float64, order="F"),
                                          new, side=1, lower=1, trans_a=1, overwrite_b=1))
            for j in range(b):  # the residual diagonal, column by contiguous column
                self.resid -= new[:, j] * new[:, j]
            self.t = t + b
        _, local = self._local(considered)
        self.resid[local] = 0.0  # exactly reproduced (accepted) or excluded (dropped)
        self.admissible[local] = False

    def residual_trace(self) -> float:
        """Σ max(residual, 0) over the admissible rows held here."""
        return float(np.maximum(self.resid[self.admissible], 0.0).sum())

    def best(self) -> tuple[int, float, np.ndarray] | None:
        """The admissible row with the largest residual above ``DEGENERATE_RTOL``·k(x,x), as
        (global row, residual, F[row, :t]); None when there is none here (ties: the lowest
        row)."""
        ok = self.admissible & (self.resid > DEGENERATE_RTOL * self.diag)
        if not ok.any():
            return None
        i = int(np.argmax(np.where(ok, self.resid, -np.inf)))
        return self.lo + i, float(self.resid[i]), self.F[i, : self.t].copy()

    def top(self, k: int) -> np.ndarray:
        """Up to ``k`` admissible global rows with the largest residuals above
        ``DEGENERATE_RTOL``·k(x,x), largest first (ties: the lowest row): a block of pivots at
        once, for :meth:`algorithms.lowrank.PartialCholesky.greedy_block`."""
        idx = np.flatnonzero(self.admissible & (self.resid > DEGENERATE_RTOL * self.diag))
        return self.lo + idx[np.lexsort((idx, -self.resid[idx]))[:k]]

    def gram(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """(F[:, :t1]ᵀ F[:, t0:t1], F[:, t0:t1]ᵀ y) over the rows held here."""
        if self.y is None:
            raise ValueError("these factor columns were made without targets")
        F_new = self.F[:, t0:t1]
        return self.F[:, :t1].T @ F_new, F_new.T @ self.y

    def factor(self) -> np.ndarray:
        """F[held rows, :t] (a view)."""
        return self.F[:, : self.t]

    @property
    def nbytes(self) -> int:
        return self.F.nbytes + self.resid.nbytes + self.diag.nbytes
