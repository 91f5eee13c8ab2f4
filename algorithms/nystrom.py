"""The Nyström method for GP regression (004 §4.1, Williams & Seeger 2001).

A uniformly random subset S of ``max_basis`` training points gives K ≈ K_{:S}K_SS⁻¹K_{S:}
(004 eq. 73 with U = K_SS⁻¹K_{S:}); mean and variance then follow by Woodbury (004 eq. 74) in
O(n·m²) time and O(n·m) memory without forming n×n (:mod:`algorithms.lowrank`). The landmarks
are the prefixes of one random permutation, so the factor of the first m landmarks is the
leading block of the factor of all of them and one run traces the basis sizes
m = 8, 16, 32, …, max_basis (each row: the solution on that prefix, timed cumulatively).

The mean equals scikit-learn's ``Nystroem`` features followed by ``Ridge(alpha=σ²)`` on the
same landmarks; the variance is the DTC one (see :mod:`algorithms.lowrank`). A landmark that
is numerically in the span of the earlier ones (a repeated input) is dropped and the next
point of the permutation drawn instead; ``n_dropped`` counts them.
"""

from __future__ import annotations

import numpy as np

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Solution, lowrank_own_hyper
from algorithms.evaluation import Recorder
from algorithms.lowrank import (
    LowRankSolve,
    PartialCholesky,
    basis_grid,
    record,
    solution,
)
from algorithms.options import Option


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_basis: int) -> Solution:
    """Nyström GP regression on ``max_basis`` random landmarks (noise variance ``lam``)."""
    n = blocks.n
    m = int(max_basis)  # in [1, n]: validated and clipped by run (Option.clip_to_n)
    order = rng.permutation(n)
    chol = PartialCholesky(blocks, m, y)
    solve = LowRankSolve(chol, y, lam)
    drawn, stop_reason = 0, f"max_basis = {m} landmarks"
    for target in basis_grid(m):
        while chol.t < target and drawn < n:
            take = order[drawn: drawn + target - chol.t]
            drawn += len(take)
            chol.add(take)
        solve.update()
        if solve.t:
            record(recorder, solve)
        if chol.t < target:
            stop_reason = (f"every point drawn: K has numerical rank {chol.t} "
                           f"({chol.n_dropped} landmarks dropped as degenerate)")
            break
    return solution(solve, stop_reason)


SPECS = [AlgorithmSpec(
    "nystrom", fit, "Nyström low-rank GP (random landmarks, Woodbury; Williams & Seeger)",
    options={"max_basis": Option(256, "int", "landmarks m (the trace covers 8, 16, …, m)",
                                 lo=1, clip_to_n=True)},
    has_variance=True,
    exact_limit=ExactLimit({"max_basis": "n"}, variance=True),
    check_options={"max_basis": 20},
    cluster_blocks=True, device_blocks=True,
    own_hyper=lowrank_own_hyper,
)]
