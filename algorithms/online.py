"""Csató–Opper sparse online GP with KL-optimal basis-vector removal (001; Csató & Opper 2002).

One pass (or ``passes``) over the data in an order drawn from the seed, keeping at most
``max_basis`` basis vectors (BV). State after t BVs: α (t), C (t×t), Q = K_BV⁻¹ (t×t); the
posterior has mean μ(x) = k_BV(x)ᵀα and covariance k(x,x') + k_BV(x)ᵀ C k_BV(x'). With Gaussian
noise σ₀² (the pipeline's ``lam``), for a new (x, y), k = k_BV(x), k* = k(x,x) (001 §3):

    σ_x² = k* + kᵀCk,  q = (y − αᵀk)/(σ₀² + σ_x²),  r = −1/(σ₀² + σ_x²),
    ê = Qk,  γ = k* − kᵀê   (squared distance of φ(x) from span(BV)).

- γ < ``tol``: sparse update s = Ck + ê; α += q s; C += r s sᵀ.
- otherwise x joins BV: s = [Ck; 1]; α = [α; 0] + q s; C = [C 0; 0 0] + r s sᵀ;
  Q = [Q 0; 0 0] + γ⁻¹ [ê; −1][ê; −1]ᵀ.
- if |BV| > max_basis, the element with the lowest score is removed by the KL-optimal
  projection (a* = α_i, c* = C_ii, q* = Q_ii; C*, Q* the i-th columns without row i):
  α ← α − a* Q*/q*;  C ← C + c* Q*Q*ᵀ/q*² − (Q*C*ᵀ + C*Q*ᵀ)/q*;  Q ← Q − Q*Q*ᵀ/q*.
  Scores: ``approx`` ε_i = α_i²/(Q_ii + C_ii) (eq. 85); ``exact`` the KL divergence between the
  GP and its projection without i (eq. 83), computed as the KL of two GPs on one BV set
  (:func:`kl_same_basis`).

Time O(n t²) per pass with O(t²) state; kernel values come from the block provider in row
chunks: k(X_chunk, X_BV) and k(X_chunk, X_chunk) once per ``chunk_rows`` points, the second
giving the column of every point of the chunk that joins BV (never n×n).
"""

from __future__ import annotations

import math

import numpy as np

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Prediction, Solution
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.options import Option


def remove(alpha: np.ndarray, C: np.ndarray, Q: np.ndarray, i: int):
    """KL-optimal removal of basis vector i (001, Csató & Opper 2002 eq. 3.19 form)."""
    keep = np.arange(len(alpha)) != i
    a_s, c_s, q_s = alpha[i], C[i, i], Q[i, i]
    Q_s, C_s = Q[keep, i], C[keep, i]
    alpha_new = alpha[keep] - a_s * Q_s / q_s
    C_new = (C[np.ix_(keep, keep)] + c_s * np.outer(Q_s, Q_s) / q_s**2
             - (np.outer(Q_s, C_s) + np.outer(C_s, Q_s)) / q_s)
    Q_new = Q[np.ix_(keep, keep)] - np.outer(Q_s, Q_s) / q_s
    return alpha_new, C_new, Q_new


def kl_same_basis(K: np.ndarray, alpha1: np.ndarray, C1: np.ndarray, alpha2: np.ndarray,
                  C2: np.ndarray) -> float:
    """KL(GP₁‖GP₂) for two GPs on the same BV set (K = K_BV): the KL of two Gaussians, in the
    BV set's coordinates:
    2KL = Δαᵀ K (I + C₂K)⁻¹ Δα + tr(KC₁) − tr(W₂K(I + C₁K)) + log|I + C₂K| − log|I + C₁K|,
    W₂ = C₂(I + KC₂)⁻¹, Δα = α₂ − α₁."""
    eye = np.eye(len(alpha1))
    d_alpha = alpha2 - alpha1
    W2 = np.linalg.solve((eye + K @ C2).T, C2.T).T  # C₂(I + KC₂)⁻¹ by a solve, no inverse
    quad = d_alpha @ K @ np.linalg.solve(eye + C2 @ K, d_alpha)
    logdet2 = np.linalg.slogdet(eye + C2 @ K)[1]
    logdet1 = np.linalg.slogdet(eye + C1 @ K)[1]
    return 0.5 * float(quad + np.trace(K @ C1) - np.trace(W2 @ K @ (eye + C1 @ K))
                       + logdet2 - logdet1)


def scores(alpha: np.ndarray, C: np.ndarray, Q: np.ndarray, K: np.ndarray | None,
           kind: str) -> np.ndarray:
    """Removal scores of every BV: ``approx`` (eq. 85) or ``exact`` KL (eq. 83; needs K_BV)."""
    if kind == "approx":
        return alpha**2 / (np.diag(Q) + np.diag(C))
    out = np.empty(len(alpha))
    for i in range(len(alpha)):  # KL to the projection, embedded with a zero row/column for i
        a2, C2, _ = remove(alpha, C, Q, i)
        keep = np.arange(len(alpha)) != i
        alpha_e, C_e = np.zeros_like(alpha), np.zeros_like(C)
        alpha_e[keep], C_e[np.ix_(keep, keep)] = a2, C2
        out[i] = kl_same_basis(K, alpha, C, alpha_e, C_e)
    return out


SELF_BLOCK_ROWS = 1024  # a chunk's k(X_chunk, X_chunk) is computed at once up to these rows

# Rows of C or Q updated at once by a rank-1 or rank-2 update: the temporary (rows × t) stays
# small (no fresh t×t array, hence no page faults, per processed point).
UPDATE_ROWS = 64


def _add_low_rank(A: np.ndarray, U: np.ndarray, V: np.ndarray) -> None:
    """A += U Vᵀ in place, in blocks of :data:`UPDATE_ROWS` rows (U, V: (t, k), k ≤ 2)."""
    for lo in range(0, A.shape[0], UPDATE_ROWS):
        A[lo: lo + UPDATE_ROWS] += U[lo: lo + UPDATE_ROWS] @ V.T


class _Posterior:
    """α, C, Q on the t current BVs, held in buffers of ``capacity`` rows and updated in place
    (the updates of the module docstring; a removal moves the last BV into the freed slot, so
    the BV order is a permutation of the order of insertion)."""

    def __init__(self, capacity: int) -> None:
        self.t = 0
        self._alpha = np.zeros(capacity)
        self._C = np.zeros((capacity, capacity))
        self._Q = np.zeros((capacity, capacity))

    @property
    def capacity(self) -> int:
        return len(self._alpha)

    @property
    def alpha(self) -> np.ndarray:
        return self._alpha[: self.t]

    @property
    def C(self) -> np.ndarray:
        return self._C[: self.t, : self.t]

    @property
    def Q(self) -> np.ndarray:
        return self._Q[: self.t, : self.t]

    def update(self, s: np.ndarray, q: float, r: float) -> None:
        """α += q s; C += r s sᵀ (s over the current BVs, or one longer after :meth:`add`)."""
        t = len(s)
        self._alpha[:t] += q * s
        _add_low_rank(self._C[:t, :t], (r * s)[:, None], s[:, None])

    def add(self, Ck: np.ndarray, e_hat: np.ndarray, gamma: float, q: float, r: float) -> None:
        """A new BV: s = [Ck; 1], α = [α; 0] + q s, C = [C 0; 0 0] + r s sᵀ,
        Q = [Q 0; 0 0] + γ⁻¹ [ê; −1][ê; −1]ᵀ."""
        t = self.t
        # full only when a later pass re-adds a point (tol = 0) and max_basis exceeds the
        # points: doubling keeps the copies O(t²) amortised
        if t == self.capacity:
            cap = 2 * t
            self._alpha = np.pad(self._alpha, (0, cap - t))
            self._C = np.pad(self._C, (0, cap - t))
            self._Q = np.pad(self._Q, (0, cap - t))
        self._alpha[t] = 0.0
        for M in (self._C, self._Q):
            M[t, : t + 1] = 0.0
            M[: t + 1, t] = 0.0
        self.t = t + 1
        self.update(np.append(Ck, 1.0), q, r)
        u = np.append(e_hat, -1.0)
        _add_low_rank(self.Q, (u / gamma)[:, None], u[:, None])

    def remove(self, i: int) -> int:
        """KL-optimal removal of BV i (the projection of the module docstring, applied as a
        rank-2 update of the whole t×t state, row and column i included, which are then
        overwritten by the last BV's); returns the index of that last BV."""
        t = self.t
        a_s, c_s, q_s = self._alpha[i], self._C[i, i], self._Q[i, i]
        Q_s, C_s = self._Q[:t, i].copy(), self._C[:t, i].copy()
        self._alpha[:t] -= a_s * Q_s / q_s
        _add_low_rank(self.C, np.column_stack([c_s / q_s**2 * Q_s - C_s / q_s, -Q_s / q_s]),
                      np.column_stack([Q_s, C_s]))
        _add_low_rank(self.Q, (-Q_s / q_s)[:, None], Q_s[:, None])
        last = t - 1
        self._alpha[i] = self._alpha[last]
        for M in (self._C, self._Q):
            M[i, :t] = M[last, :t]
            M[:t, i] = M[:t, last]
        self.t = last
        return last


def fit(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
        recorder: Recorder, max_basis: int | str, tol: float, score: str, passes: int,
        n_points: int | None, compare_scores: bool, trace_kl: bool,
        chunk_rows: int) -> Solution:
    """Sparse online GP over the training set in a seeded random order; see module docstring.

    ``max_basis`` is a count, ``"NN%"`` (a percentage of the points processed per pass) or
    ``"none"`` (no sparsity). Each processed point is one step of the trace: ``n_basis``,
    ``removals`` (cumulative); the recorder scores the current posterior (mean and variance)
    every ``eval_every`` points and at the end. Options for the experiments of 001:

    - ``n_points``: process only the first n_points of each pass's permutation (a random
      training subset of that size, drawn from the seed);
    - ``compare_scores``: at every removal (and once at the end) find the element the
      approximate score (eq. 85) and the exact KL score (eq. 83) would remove; the summary gets
      ``omission_rate`` (fraction of removals where they differ) and ``end_omission``
      (whether they differ at the end, the no-sparsity case of Fig. 3.4);
    - ``trace_kl``: trace ``kl_forward`` KL(GP_t‖GP_{t+1}) and ``kl_backward`` KL(GP_{t+1}‖GP_t)
      between successive GPs (Fig. 3.2), both on the union of their BV sets.
    """
    n = blocks.n
    if n_points is not None and not 1 <= n_points <= n:
        raise InputError(f"algorithm.n_points={n_points} must be between 1 and n_train={n}; "
                         f"pass e.g. algorithm.n_points={n}")
    max_basis = _resolve_max_basis(max_basis, n_points or n)
    gp = _OnlineGP(blocks, y, lam, tol, max_basis, score, compare_scores,
                   _Posterior(min(max_basis, n_points or n) + 1))
    for _ in range(passes):
        order = rng.permutation(n)[:n_points]
        for lo in range(0, len(order), chunk_rows):
            gp.run_chunk(order[lo: lo + chunk_rows], recorder, trace_kl)
    return gp.solution(f"{passes} pass(es) over {n_points or n} points")


class _OnlineGP:
    """The state of 001's sparse online GP over the points seen so far: the BV set, its
    posterior (:class:`_Posterior`) and the removal counts."""

    def __init__(self, blocks: KernelBlocks, y: np.ndarray, sigma2: float, tol: float,
                 max_basis: int, score: str, compare_scores: bool, post: _Posterior) -> None:
        self.blocks, self.y, self.sigma2, self.tol = blocks, y, sigma2, tol
        self.max_basis, self.score, self.compare_scores = max_basis, score, compare_scores
        self.diag, self.kernel = blocks.diag(), blocks.kernel
        self.post = post
        self.BV: list[int] = []
        self.removals = self.compared = self.differ = 0

    def predict(self, X_new: np.ndarray) -> Prediction:
        Kx = self.blocks.cross(X_new, self.BV)
        return Prediction(Kx @ self.post.alpha,
                          _variance(self.kernel, X_new, Kx, self.post.C, self.sigma2))

    def run_chunk(self, chunk: np.ndarray, recorder: Recorder, trace_kl: bool) -> None:
        """Process the points ``chunk`` in order, one traced step each."""
        blocks, post, BV = self.blocks, self.post, self.BV
        # k(x, BV) for the whole chunk in one block, in a buffer whose columns follow BV
        K_chunk = np.zeros((len(chunk), post.capacity))
        K_chunk[:, : len(BV)] = blocks.block(chunk, BV) if BV else 0.0
        # k(x, x') within the chunk: the column of a point that joins BV (most do) is already
        # here, one block per chunk instead of a kernel call per added point (up to
        # SELF_BLOCK_ROWS rows: chunk_rows² values; a longer chunk computes columns)
        K_self = blocks.block(chunk, chunk) if len(chunk) <= SELF_BLOCK_ROWS else None
        for row, j in enumerate(chunk):
            previous = (list(BV), post.alpha.copy(), post.C.copy()) if trace_kl else None
            t = len(BV)
            if self._absorb(int(j), K_chunk[row, :t]):
                if post.capacity > K_chunk.shape[1]:  # the state grew (see _Posterior.add)
                    K_chunk = np.pad(K_chunk, ((0, 0), (0, post.capacity - K_chunk.shape[1])))
                K_chunk[:, t] = (K_self[:, row] if K_self is not None
                                 else blocks.block(chunk, [j])[:, 0])
                if len(BV) > self.max_basis:
                    self._remove_one(K_chunk)
            kl = {}
            if trace_kl:
                forward, backward = _successive_kl(blocks, previous, (BV, post.alpha, post.C))
                kl = {"kl_forward": forward, "kl_backward": backward}
            recorder.step(self.predict, n_basis=len(BV), removals=self.removals, **kl)

    def _absorb(self, j: int, k: np.ndarray) -> bool:
        """The update by point j with k = k(x_j, BV) (the module docstring's q, r, ê, γ):
        whether j joined BV (γ ≥ tol) or only updated the posterior (the sparse update)."""
        post, diag = self.post, self.diag
        Ck = post.C @ k
        denom = self.sigma2 + diag[j] + k @ Ck
        q, r = (self.y[j] - post.alpha @ k) / denom, -1.0 / denom
        e_hat = post.Q @ k
        gamma = diag[j] - k @ e_hat
        if gamma < self.tol:
            post.update(Ck + e_hat, q, r)
            return False
        post.add(Ck, e_hat, gamma, q, r)
        self.BV.append(j)
        return True

    def _remove_one(self, K_chunk: np.ndarray) -> None:
        """Remove the BV element of least score (eq. 85, or the exact KL of eq. 83); the last
        element moves into its slot, in BV and in ``K_chunk``'s columns."""
        post, BV = self.post, self.BV
        alpha, C, Q = post.alpha, post.C, post.Q
        exact = self.score == "exact" or self.compare_scores
        K_BV = self.blocks.block(BV, BV) if exact else None
        worst = int(np.argmin(scores(alpha, C, Q, K_BV, self.score)))
        if self.compare_scores:
            other = "exact" if self.score == "approx" else "approx"
            self.compared += 1
            self.differ += int(np.argmin(scores(alpha, C, Q, K_BV, other)) != worst)
        last = post.remove(worst)  # the last BV moves into slot ``worst``
        BV[worst] = BV[last]
        del BV[last]
        K_chunk[:, worst] = K_chunk[:, last]
        self.removals += 1

    def solution(self, stop_reason: str) -> Solution:
        """The final posterior as the fit's Solution."""
        alpha, C, Q = self.post.alpha.copy(), self.post.C.copy(), self.post.Q.copy()
        if not np.all(np.isfinite(alpha)):
            raise FloatingPointError("sparse online GP produced non-finite coefficients; raise "
                                     "lam or tol")
        BV, kernel, sigma2 = self.BV, self.kernel, self.sigma2
        basis = np.asarray(BV, dtype=np.int64)
        X_basis = self.blocks.inputs(basis)

        def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            var = _variance(kernel, X_new, kernel(X_new, X_basis), C, sigma2)
            return var, var

        summary: dict = {"n_basis": len(BV), "removals": self.removals, "gap": math.nan,
                         "objective": math.nan, "stop_reason": stop_reason, "jitter": 0.0}
        reasons = {"gap": "the sparse online GP has no dual problem, hence no duality gap",
                   "objective": "L(α) is not tracked online (the certificate computes the "
                                "final one)"}
        if self.compare_scores:
            summary["omission_rate"] = (self.differ / self.compared if self.compared
                                        else math.nan)
            summary["n_removals_compared"] = self.compared
            if len(BV) > 1:
                K_BV = self.blocks.block(BV, BV)
                summary["end_omission"] = float(
                    np.argmin(scores(alpha, C, Q, K_BV, "approx"))
                    != np.argmin(scores(alpha, C, Q, K_BV, "exact")))
        return Solution(basis, alpha, X_basis, kernel, sigma2, summary, variance_bounds,
                        extras={"C": C, "Q": Q}, not_applicable=reasons)


def _variance(kernel, X_new: np.ndarray, Kx: np.ndarray, C: np.ndarray,
              sigma2: float) -> np.ndarray:
    """Predictive variance of y: k(x,x) + k_BV(x)ᵀ C k_BV(x) + σ₀², with Kx = k(X_new, BV)."""
    return kernel.diag(X_new) + np.einsum("ij,jk,ik->i", Kx, C, Kx) + sigma2


def _successive_kl(blocks: KernelBlocks, before: tuple, after: tuple) -> tuple[float, float]:
    """(KL(GP_before‖GP_after), KL(GP_after‖GP_before)), both embedded in the union BV set."""
    union = list(dict.fromkeys([*before[0], *after[0]]))
    if not union:
        return 0.0, 0.0
    index = {j: u for u, j in enumerate(union)}
    K = blocks.block(union, union)

    def embed(state: tuple) -> tuple[np.ndarray, np.ndarray]:
        basis, alpha, C = state
        pos = [index[j] for j in basis]
        a, Cu = np.zeros(len(union)), np.zeros((len(union), len(union)))
        a[pos], Cu[np.ix_(pos, pos)] = alpha, C
        return a, Cu

    (a1, C1), (a2, C2) = embed(before), embed(after)
    return kl_same_basis(K, a1, C1, a2, C2), kl_same_basis(K, a2, C2, a1, C1)


def _resolve_max_basis(max_basis: int | str, points: int) -> int:
    if isinstance(max_basis, str):
        text = max_basis.strip().lower()
        if text == "none":
            return points
        if text.endswith("%"):
            try:
                return max(1, math.ceil(float(text[:-1]) / 100 * points))
            except ValueError:
                pass
    elif isinstance(max_basis, (int, np.integer)) and max_basis >= 1:
        return int(max_basis)
    raise InputError(f"max_basis={max_basis!r} must be an integer ≥ 1, a percentage like '90%' "
                     "or 'none'")


def _check_max_basis(value: int | str) -> int | str:
    try:
        _resolve_max_basis(value, 1)  # the form only; percentages resolve against the data
    except InputError as err:
        raise InputError(f"algorithm sparse_online: algorithm.{err}") from None
    return value


SPECS = [AlgorithmSpec(
    "sparse_online", fit, "Csató & Opper's sparse online GP with KL-optimal removal",
    options={
        "max_basis": Option(50, "any", "an integer ≥ 1, a percentage like '90%' or 'none'",
                            parse=_check_max_basis, clip_to_n=True),
        "tol": Option(1e-6, "float", "γ below which a point only updates α, C", lo=0.0),
        "score": Option("approx", "choice", "removal score: approx (eq. 85) or exact (eq. 83)",
                        choices=("approx", "exact")),
        "passes": Option(1, "int", "passes over the data", lo=1),
        "eval_every": Option(500, "int", "trace test metrics every this many points", lo=1),
        "n_points": Option(None, "int", "points of each pass's permutation (null = all)", lo=1,
                           none_ok=True, example=100),
        "compare_scores": Option(False, "bool", "record approx vs exact score disagreements"),
        "trace_kl": Option(False, "bool", "trace KL divergences between successive GPs"),
        "chunk_rows": Option(256, "int", "kernel rows computed this many points at a time", lo=1),
    },
    has_variance=True,
    exact_limit=ExactLimit({"max_basis": "none", "tol": 0.0}, variance=True),
    check_options={"max_basis": 8},
)]
