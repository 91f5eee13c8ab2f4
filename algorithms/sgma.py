"""Sparse greedy quadratic minimisation, SGMA (Smola & Bartlett 2000, Algorithm 1; 004 §4.3-4.7).

Two greedy minimisations run in lock-step, each adding one basis index per iteration:

- primal L(Pβ) with G = σ²K_SS + K_{:S}ᵀK_{:S}, b = K_{:S}ᵀy, β = G⁻¹b, L = −½bᵀβ (002 eq. 12);
- dual  L*(Pβ*) with G* = σ²I + K_S*S*, b* = y_S*, L* = −½b*ᵀG*⁻¹b*.

Each keeps a lower Cholesky factor G = RRᵀ grown one row at a time (004 eq. 89 in Cholesky
form) and z = R⁻¹b, so L = −½‖z‖². Adding candidate i with c_i = R⁻¹G_{S,i} lowers L by
½(b_i − c_iᵀz)² / (G_ii − ‖c_i‖²); all κ candidates of a step are scored together with one GEMM
K_{:S}ᵀK_{:M} and one triangular solve. The candidate set M is a fresh random subset of κ
unselected indices (κ ≥ remaining: full greedy). Iteration stops when the relative duality gap
(002 §3) falls below ε. Memory is O(n·t) for K_{:S}; K is never formed.

Error bars (004 eq. 83, 002 eqs. 8/10): with q = kᵀ(K+σ²I)⁻¹k, the dual support gives
q ≥ −2L*_k = ‖R*⁻¹k_S*‖² and the primal support gives q ≤ σ⁻²(‖k‖² − ‖R⁻¹K_{:S}ᵀk‖²), so the
predictive variance k(x,x) + σ² − q is bracketed from both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

import numpy as np
import scipy.linalg as sla

from algorithms.contract import (
    AlgorithmSpec,
    ExactLimit,
    KernelBlocks,
    Solution,
    lowrank_own_hyper,
)
from algorithms.evaluation import Recorder
from algorithms.greedy import DualGreedy, PrimalGreedy
from algorithms.kernel_threads import kernel_threads, tiles_own_the_cores
from algorithms.objectives import REFERENCES, relative_gap, solve_reference
from algorithms.options import BYTES_MAX, Option


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, kappa: int,
        rng: np.random.Generator, recorder: Recorder, eps: float, max_basis: int | None,
        chunk_bytes: int, error_bar_eps: float | None, criterion: str,
        reference: str) -> Solution:
    """Run SGMA until gap < ``eps`` or ``max_basis`` indices are selected.

    Parameters
    ----------
    blocks : kernel-block provider over the n training inputs.
    y : (n,) targets.
    lam : noise variance σ² > 0.
    kappa : candidate subset size κ ≥ 1 (κ ≥ n: full greedy, as in 002 with M = I).
    rng : random generator (candidate subsets; primal and dual get independent streams).
    recorder : the evaluator; each iteration is one step (the test mean of the primal support).
    eps : stop when gap(α, α*) < eps (002 Algorithm 1).
    max_basis : cap on the size of each support, primal and dual (None: n).
    chunk_bytes : memory budget for one block of candidate kernel columns.
    error_bar_eps : if set (and there is a test set), also count for every test point the
        basis size SGMA needs to pin down its error-bar quadratic to error_bar_eps (002 Table
        2, second row; criterion "bracket" below); the summary gets their mean, sd and median,
        and the same counts under the plain gap criterion.
    criterion : "gap" stops on the relative duality gap of 002 §3. "bracket" stops when the
        Theorem 1 bracket on q = yᵀ(K+σ²I)⁻¹y, q_lo = −2L*(α*) ≤ q ≤ q_hi = (‖y‖² + 2L(α))/σ²
        (002 eqs. 8, 10), has relative width (q_hi − q_lo)/((q_hi + q_lo)/2) < eps: the
        precision of an error bar when y = k(X, x). With eps = 0.025 it reproduces the counts
        of 002 Table 2 (e.g. 80 ± 55 vs the paper's 79 ± 61 at 2ω² = 1), which the plain gap
        does not (it is relative to ‖k‖², so 1–5 basis functions already satisfy it).
    reference : "none", "cg" or "dense": solve (K+σ²I)α = y exactly once (see
        objectives.solve_reference) and trace the primal and dual suboptimalities
        (L − L_min)/|L_min| and (L* − L*_min)/|L*_min| separately.
    """
    n = blocks.n
    t_max = n if max_basis is None else int(max_basis)  # in [1, n]: run clips (clip_to_n)
    half_yy = 0.5 * float(y @ y)
    with recorder.untimed():  # a diagnostic, not SGMA's work
        dual_min = -0.5 * float(y @ solve_reference(blocks, y, lam, reference))  # L*_min
    primal_min = -half_yy - lam * dual_min  # L_min (Theorem 1)
    primal_rng, dual_rng = rng.spawn(2)
    primal = PrimalGreedy(blocks, y, lam, primal_rng, t_max, chunk_bytes)
    dual = DualGreedy(blocks, y, lam, dual_rng, primal.diag, chunk_bytes)
    with tiles_own_the_cores():  # the projections' tiles use the cores, not BLAS
        gaps, stop_reason = _iterate(primal, dual, y, lam, kappa, t_max, recorder,
                                     _Stop(criterion, eps, half_yy, lam),
                                     (primal_min, dual_min))

    summary: dict = {
        "n_basis": int(primal.t),
        "n_basis_dual": int(dual.t),
        "objective": primal.objective,
        "dual_objective": dual.objective,
        "gap": gaps[-1] if gaps else np.nan,
        "stop_reason": stop_reason,
        "n_degenerate_candidates": primal.n_degenerate,
        "jitter": 0.0,
        "objective_lower_bound": -half_yy - lam * dual.objective,  # Theorem 1
    }
    reasons = {} if gaps else {"gap": "no step was taken", "objective": "no step was taken"}
    X_test = recorder.test_inputs
    if error_bar_eps is not None and X_test is not None and primal.t:
        sizes, by_gap = error_bar_basis_sizes(blocks, X_test, lam, kappa, rng, error_bar_eps)
        for label, counts in (("", sizes), ("_by_gap", by_gap)):
            summary[f"error_bar_basis{label}_mean"] = float(counts.mean())
            summary[f"error_bar_basis{label}_sd"] = float(counts.std(ddof=1))
        summary["error_bar_basis_median"] = float(np.median(sizes))
    basis = np.asarray(primal.S, dtype=np.int64)
    return Solution(basis, primal.coef(), blocks.inputs(basis), blocks.kernel, lam, summary,
                    _variance_bounds(blocks, primal, dual, lam, chunk_bytes) if primal.t
                    else None,
                    extras={"basis_dual": np.asarray(dual.S, dtype=np.int64),
                            "coef_dual": dual.chol.coef()},
                    not_applicable=reasons)


# A duality gap below −GAP_ROUNDING is rounding error grown past what the primal and dual
# objectives resolve (both are O(‖y‖²), accurate to ~1e-12 relative): a breakdown, not a stop.
GAP_ROUNDING = 1e-8


@dataclass(frozen=True)
class _Stop:
    """The stopping rule: ``gap`` < eps (002 §3), or the Theorem 1 ``bracket`` on
    q = yᵀ(K+σ²I)⁻¹y, q_lo = −2L*(α*) ≤ q ≤ q_hi = (‖y‖² + 2L(α))/σ², narrower than eps
    relative (002 eqs. 8, 10)."""

    criterion: str
    eps: float
    half_yy: float
    lam: float

    def met(self, gap: float, primal: float, dual: float) -> bool:
        if self.criterion == "gap":
            return gap < self.eps
        q_lo, q_hi = -2.0 * dual, (2.0 * self.half_yy + 2.0 * primal) / self.lam
        return q_hi - q_lo < self.eps * 0.5 * (q_hi + q_lo)


def _iterate(primal: PrimalGreedy, dual: DualGreedy, y: np.ndarray, lam: float, kappa: int,
             t_max: int, recorder: Recorder, stop: _Stop, minima: tuple[float, float]
             ) -> tuple[list[float], str]:
    """002 Algorithm 1's loop: a primal and a dual step per iteration, each traced, until the
    stopping rule, ``t_max`` or no admissible candidate; (the gaps, why it stopped)."""
    primal_min, dual_min = minima
    gaps: list[float] = []
    while primal.t < t_max:
        # Once every remaining column is numerically in span(K_{:S}) the primal is at its
        # minimum; the dual goes on alone so that the gap can still close, but never past
        # max_basis (with eps = 0 it would otherwise grow towards n at O(t²) per step).
        before = (primal.t, dual.t)
        spent = dict(primal.seconds)
        flops = primal.step(kappa) or 0.0
        t0 = perf_counter()
        if dual.t < t_max:
            flops += dual.step(kappa) or 0.0
        parts = {f"{k}_seconds": v - spent[k] for k, v in primal.seconds.items()}
        parts["dual_seconds"] = perf_counter() - t0
        if (primal.t, dual.t) == before:
            return gaps, ("no admissible candidate left" if dual.t < t_max else
                          f"numerical rank: no admissible primal candidate after "
                          f"{primal.t} basis functions, dual at max_basis")
        gap = relative_gap(primal.objective, dual.objective, y, lam)
        gaps.append(gap)
        recorder.step(primal.predict, n_basis=primal.t, n_basis_dual=dual.t,
                      objective=primal.objective, dual_objective=dual.objective, gap=gap,
                      primal_subopt=(primal.objective - primal_min) / abs(primal_min),
                      dual_subopt=(dual.objective - dual_min) / abs(dual_min), flops=flops,
                      **parts)
        if not np.isfinite(primal.objective) or not np.isfinite(dual.objective):
            raise FloatingPointError(f"SGMA objective became non-finite at step {primal.t}; "
                                     "check the kernel parameters and lam")
        if gap < -GAP_ROUNDING:  # 002 Theorem 1 makes it ≥ 0: the factors lost their accuracy
            # (the evaluator's guard names lam, the kernel and the fix)
            raise FloatingPointError(f"SGMA's duality gap turned negative ({gap:.3g}) after "
                                     f"{primal.t} basis functions: rounding")
        if stop.met(gap, primal.objective, dual.objective):
            return gaps, f"{stop.criterion} < eps={stop.eps}"
    return gaps, "max_basis"


def _variance_bounds(blocks: KernelBlocks, primal: PrimalGreedy, dual: DualGreedy, lam: float,
                     chunk_bytes: int) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The predictive variance's bracket of the module docstring (004 eq. 83, 002 eqs. 8/10)
    from the primal and dual supports; the primal's side is the explicit residual of
    [k(X, x); 0] from span(A) (:meth:`~algorithms.greedy.PrimalGreedy.upper_variance_terms`),
    not ‖k‖² − ‖R⁻¹K_{:S}ᵀk‖²."""
    kernel = blocks.kernel
    basis_dual = np.asarray(dual.S, dtype=np.int64)
    R_dual = dual.chol.factor()

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) bounds on k(x,x) + σ² − kᵀ(K+σ²I)⁻¹k at each row of X_new."""
        X_new = np.asarray(X_new, dtype=np.float64)
        if not len(X_new):
            return np.empty(0), np.empty(0)
        q_lo, q_hi = [], []
        # a chunk's (t + 1) × m partial products, one per kernel thread and their sum, hold
        # about chunk_bytes
        step = max(1, chunk_bytes // (8 * (primal.t + 1) * (kernel_threads() + 1)))
        for lo in range(0, X_new.shape[0], step):
            X_chunk = X_new[lo: lo + step]
            Kdx = blocks.cross(X_chunk, basis_dual).T
            Vd = sla.solve_triangular(R_dual, Kdx, lower=True, check_finite=False)
            q_lo.append(np.einsum("ij,ij->j", Vd, Vd))
            q_hi.append(primal.upper_variance_terms(X_chunk) / lam)
        prior = kernel.diag(X_new) + lam
        # the variance of y is never below σ², so max(·, σ²) keeps the lower bound valid
        return np.maximum(prior - np.concatenate(q_hi), lam), prior - np.concatenate(q_lo)

    return variance_bounds


def error_bar_basis_sizes(blocks: KernelBlocks, X_new: np.ndarray, lam: float, kappa: int,
                          rng: np.random.Generator, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row x of X_new, the basis size SGMA needs on the error-bar quadratic
    min_a −kᵀa + ½aᵀ(σ²I + K)a with k = k(X, x) (002 eq. 10, Table 2), i.e. SGMA with y = k:
    (sizes for the bracket criterion < eps, sizes for the plain gap < eps)."""
    sizes, by_gap = [], []
    for x in np.asarray(X_new, dtype=np.float64):
        k = blocks.cross(x[None, :], slice(None))[0]
        recorder = Recorder()
        run = fit(blocks, k, lam=lam, kappa=kappa, rng=rng, recorder=recorder, eps=eps,
                  max_basis=None, chunk_bytes=2**28, error_bar_eps=None, criterion="bracket",
                  reference="none")
        trace = recorder.trace()
        sizes.append(run.summary["n_basis"])
        below = np.flatnonzero(trace["gap"] < eps)
        by_gap.append(trace["n_basis"][below[0]] if len(below) else run.summary["n_basis"])
    return np.asarray(sizes, dtype=np.float64), np.asarray(by_gap, dtype=np.float64)


SPECS = [AlgorithmSpec(
    "sgma", fit, "Smola & Bartlett's sparse greedy quadratic minimisation with its duality gap",
    options={
        "eps": Option(0.025, "float", "stop when the relative duality gap < eps", lo=0.0),
        "max_basis": Option(None, "int", "cap on the basis size (null = n)", lo=1,
                            none_ok=True, example=200, clip_to_n=True),
        "eval_every": Option(10, "int", "trace test metrics every this many steps", lo=1),
        "chunk_bytes": Option(2**28, "int", "memory for one block of candidate columns", lo=1,
                              hi=BYTES_MAX),
        "error_bar_eps": Option(None, "float", "per-test-point error-bar basis sizes (Table 2)",
                                lo=0.0, lo_open=True, none_ok=True, example=0.025),
        "criterion": Option("gap", "choice", "stopping rule", choices=("gap", "bracket")),
        "reference": Option("none", "choice", "exact optimum for suboptimality traces",
                            choices=REFERENCES),
    },
    uses_kappa=True, has_variance=True,
    exact_limit=ExactLimit({"eps": 0.0}, variance=True),
    check_options={"max_basis": 8, "eps": 0.0},
    cluster_blocks=True, device_blocks=True,
    own_hyper=lowrank_own_hyper,
)]

