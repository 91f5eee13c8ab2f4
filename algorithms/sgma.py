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

from time import perf_counter

import numpy as np
import scipy.linalg as sla

from algorithms.contract import (
    AlgorithmSpec,
    ExactLimit,
    KernelBlocks,
    Prediction,
    Solution,
)
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.kernels import kernel_threads, tiles_own_the_cores
from algorithms.objectives import REFERENCES, relative_gap, solve_reference
from algorithms.options import Option

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
    t_max = n if max_basis is None else int(max_basis)
    if not 1 <= t_max <= n:
        raise InputError(f"max_basis={max_basis} must be between 1 and n={n}")
    half_yy = 0.5 * float(y @ y)
    dual_min = -0.5 * float(y @ solve_reference(blocks, y, lam, reference))  # L*_min
    primal_min = -half_yy - lam * dual_min  # L_min (Theorem 1)
    primal_rng, dual_rng = rng.spawn(2)
    primal = PrimalGreedy(blocks, y, lam, primal_rng, t_max, chunk_bytes)
    diag = primal.diag
    dual = DualGreedy(blocks, y, lam, dual_rng, diag, chunk_bytes)
    gaps: list[float] = []
    stop_reason = "max_basis"
    with tiles_own_the_cores():  # the projections' tiles use the cores, not BLAS
        while True:
            if primal.t >= t_max:
                stop_reason = "max_basis"
                break
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
                stop_reason = ("no admissible candidate left" if dual.t < t_max else
                               f"numerical rank: no admissible primal candidate after "
                               f"{primal.t} basis functions, dual at max_basis")
                break
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
            if criterion == "gap":
                converged = gap < eps
            else:
                q_lo = -2.0 * dual.objective
                q_hi = (2.0 * half_yy + 2.0 * primal.objective) / lam
                converged = q_hi - q_lo < eps * 0.5 * (q_hi + q_lo)
            if converged:
                stop_reason = f"{criterion} < eps={eps}"
                break

    basis = np.asarray(primal.S, dtype=np.int64)
    coef = primal.coef()
    R, R_dual = primal.chol.factor(), dual.chol.factor()
    basis_dual = np.asarray(dual.S, dtype=np.int64)
    coef_dual = dual.chol.coef()
    kernel = blocks.kernel

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) bounds on k(x,x) + σ² − kᵀ(K+σ²I)⁻¹k at each row of X_new."""
        X_new = np.asarray(X_new, dtype=np.float64)
        if not len(X_new):
            return np.empty(0), np.empty(0)
        # K_{:S}, recomputed (held by the provider) to keep the Fit small; K_{:S}ᵀk(X, x) and
        # ‖k(X, x)‖² come from one pass over the kernel columns of the new points
        K_basis = blocks.columns(np.empty((n, 0)), len(basis))
        K_basis.extend(basis)
        q_lo, q_hi = [], []
        # a chunk's (t + 1) × m partial products, one per kernel thread and their sum, hold
        # about chunk_bytes
        step = max(1, chunk_bytes // (8 * (len(basis) + 1) * (kernel_threads() + 1)))
        for lo in range(0, X_new.shape[0], step):
            X_chunk = X_new[lo: lo + step]
            KSx, kk = blocks.project_points(X_chunk, K_basis)
            Kdx = blocks.cross(X_chunk, basis_dual).T
            Vd = sla.solve_triangular(R_dual, Kdx, lower=True, check_finite=False)
            Vp = sla.solve_triangular(R, KSx, lower=True, check_finite=False)
            q_lo.append(np.einsum("ij,ij->j", Vd, Vd))
            q_hi.append((kk - np.einsum("ij,ij->j", Vp, Vp)) / lam)
        K_basis = None
        prior = kernel.diag(X_new) + lam
        # the variance of y is never below σ², so max(·, σ²) keeps the lower bound valid
        return np.maximum(prior - np.concatenate(q_hi), lam), prior - np.concatenate(q_lo)

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
    return Solution(basis, coef, blocks.inputs(basis), kernel, lam, summary,
                    variance_bounds if primal.t else None,
                    extras={"basis_dual": basis_dual, "coef_dual": coef_dual},
                    not_applicable=reasons)


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
                            none_ok=True, example=200),
        "eval_every": Option(10, "int", "trace test metrics every this many steps", lo=1),
        "chunk_bytes": Option(2**28, "int", "memory for one block of candidate columns", lo=1),
        "error_bar_eps": Option(None, "float", "per-test-point error-bar basis sizes (Table 2)",
                                lo=0.0, lo_open=True, none_ok=True, example=0.025),
        "criterion": Option("gap", "choice", "stopping rule", choices=("gap", "bracket")),
        "reference": Option("none", "choice", "exact optimum for suboptimality traces",
                            choices=REFERENCES),
    },
    uses_kappa=True, has_variance=True,
    exact_limit=ExactLimit({"eps": 0.0}, variance=True),
    check_options={"max_basis": 8, "eps": 0.0},
    cluster_blocks=True,
)]
