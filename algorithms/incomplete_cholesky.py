"""Incomplete Cholesky with symmetric diagonal pivoting: 004's "sparse decomposition"
(Table 1, column 3; §4.3 and reference [12], Fine & Scheinberg 2001).

Each step takes as pivot the point with the largest residual diagonal (K − FFᵀ)_ii, computes its
kernel column and one column of the factor F (O(n·t) per step: O(n·m²) time, O(n·m) memory,
kernel columns only), and stops at rank ``max_basis`` or when the residual trace
tr(K − FFᵀ) falls to ``tol``·tr(K). The regression on the pivots is the same low-rank solve as
the Nyström method's (:mod:`algorithms.lowrank`), updated once per :data:`SOLVE_BLOCK` pivots:
the pivot choice needs only the residual diagonal, and a block update is one GEMM Fᵀ F_new
and one blocked triangular solve where a per-pivot update is an n·t matrix-vector pass and two
t×t triangular solves (kin40k, m = 1024, one thread: 57 s → see the README's benchmark). The
objectives of every prefix come out of the block update, so the trace still has a row per
pivot; its ``seconds`` are exact at the end of each block. The trace has one row per rank: residual
trace, primal objective L (002 eq. 5), the dual L* on the same pivots and their gap, Theorem 1's
certified suboptimality, and every ``eval_every`` ranks the test metrics.
"""

from __future__ import annotations

import numpy as np

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Solution, lowrank_own_hyper
from algorithms.evaluation import Recorder
from algorithms.lowrank import (
    LowRankSolve,
    PartialCholesky,
    record_prefixes,
    solution,
)
from algorithms.options import Option

SOLVE_BLOCK = 64  # pivots per update of the low-rank solve (module docstring)


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_basis: int, tol: float) -> Solution:
    """Pivoted incomplete Cholesky of K to rank ``max_basis`` or residual trace ≤ tol·tr(K),
    then the low-rank GP (noise variance ``lam``). Deterministic: ``rng`` is not used."""
    m = int(max_basis)  # in [1, n]: validated and clipped by run (Option.clip_to_n)
    chol = PartialCholesky(blocks, m, y)
    solve = LowRankSolve(chol, y, lam)
    total = float(chol.diag.sum())
    stop_reason = f"rank max_basis = {m}"
    pending: list[tuple[int, float, int]] = []  # (rank, residual trace, dropped) per pivot
    while chol.t < m:
        if chol.residual_trace() <= tol * total:
            stop_reason = f"residual trace ≤ tol·tr(K) = {tol:g}·{total:.4g}"
            break
        pivot = chol.greedy_pivot()
        if pivot is None:
            stop_reason = f"numerical rank {chol.t} reached (every residual is degenerate)"
            break
        chol.add([pivot])
        if chol.t:
            pending.append((chol.t, chol.residual_trace(), chol.n_dropped))
        if len(pending) == SOLVE_BLOCK:
            solve.update()
            record_prefixes(recorder, solve, pending)
            pending = []
    solve.update()
    record_prefixes(recorder, solve, pending)
    return solution(solve, stop_reason)


SPECS = [AlgorithmSpec(
    "incomplete_cholesky", fit,
    "pivoted incomplete Cholesky (largest residual diagonal first) and the low-rank GP",
    options={
        "max_basis": Option(256, "int", "rank m of the factor", lo=1, clip_to_n=True),
        "tol": Option(0.0, "float", "stop when tr(K − FFᵀ) ≤ tol·tr(K)", lo=0.0, example=1e-3),
        "eval_every": Option(8, "int", "trace test metrics every this many ranks", lo=1),
    },
    seed_free=True, has_variance=True,
    exact_limit=ExactLimit({"max_basis": "n"}, variance=True),
    check_options={"max_basis": 20},
    cluster_blocks=True, device_blocks=True,
    own_hyper=lowrank_own_hyper,
)]
