"""Csató–Opper sparse online GP with KL-optimal basis-vector removal (001; Csató & Opper 2002).

One pass (or ``passes``) over the data in an order drawn from the seed, keeping at most
``max_basis`` basis vectors (BV). State after t BVs: α (t), C (t×t), Q = K_BV⁻¹ (t×t); the
posterior has mean μ(x) = k_BV(x)ᵀα and covariance k(x,x') + k_BV(x)ᵀ C k_BV(x'). With Gaussian
noise σ₀² (the pipeline's ``lam``), for a new (x, y), k = k_BV(x), k* = k(x,x) (001 §3):

    σ_x² = k* + kᵀCk,  q = (y − αᵀk)/(σ₀² + σ_x²),  r = −1/(σ₀² + σ_x²),
    ê = Qk,  γ = k* − kᵀê   (squared distance of φ(x) from span(BV)).

- γ < ``tol``·k* (relative to k*, so that the choice does not depend on the units of f):
  sparse update s = Ck + ê; α += q s; C += r s sᵀ.
- otherwise x joins BV: s = [Ck; 1]; α = [α; 0] + q s; C = [C 0; 0 0] + r s sᵀ;
  Q = [Q 0; 0 0] + γ⁻¹ [ê; −1][ê; −1]ᵀ.
- if |BV| > max_basis, the element with the lowest score is removed by the KL-optimal
  projection (a* = α_i, c* = C_ii, q* = Q_ii; C*, Q* the i-th columns without row i):
  α ← α − a* Q*/q*;  C ← C + c* Q*Q*ᵀ/q*² − (Q*C*ᵀ + C*Q*ᵀ)/q*;  Q ← Q − Q*Q*ᵀ/q*.
  Scores: ``approx`` ε_i = α_i²/(Q_ii + C_ii) (eq. 85); ``exact`` the KL divergence between the
  GP and its projection without i (eq. 83), computed as the KL of two GPs on one BV set
  (:func:`kl_same_basis`).

These are the paper's quantities, and :func:`remove`, :func:`scores` and :func:`kl_same_basis`
compute them densely. The fit holds the same posterior in whitened square-root form instead
(:class:`_Posterior`): at a high signal-to-noise ratio C tends to −K_BV⁻¹, the variance
k* + kᵀCk is a difference of nearly equal numbers, and the updates of C and Q above lose
every digit (bike's learned kernel, variance/σ₀² = 5.4e7, turned it negative); there the
variance is a sum of squares and Q is never formed.

Time O(n t²) per pass with O(t²) state; kernel values come from the block provider in row
chunks: k(X_chunk, X_BV) and k(X_chunk, X_chunk) once per ``chunk_rows`` points, the second
giving the column of every point of the chunk that joins BV (never n×n).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

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


# γ/k(x,x) below −GAMMA_ROUNDING is not rounding (that stays below 1e-13 even at K_BV's
# condition number of 3e11, bike's learned kernel at 512 basis vectors)
GAMMA_ROUNDING = 1e-8

SELF_BLOCK_ROWS = 1024  # a chunk's k(X_chunk, X_chunk) is computed at once up to these rows

# Rows of U or P updated at once by a rank-1 update: the temporary (rows × columns) stays small
# (no fresh t×c array, hence no page faults, per processed point).
UPDATE_ROWS = 64


def _add_rank_one(A: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
    """A += u vᵀ in place, in blocks of :data:`UPDATE_ROWS` rows."""
    for lo in range(0, A.shape[0], UPDATE_ROWS):
        A[lo: lo + UPDATE_ROWS] += np.outer(u[lo: lo + UPDATE_ROWS], v)


def _columns(capacity: int) -> int:
    """Columns of T's and P's buffers: a join adds one, a full buffer is compressed to t (an
    O(t²c) QR): an eighth of spare columns keeps the compressions O(t²) per join amortised
    and the rank-1 updates at ≤ 9/8 of t×t."""
    return capacity + max(8, capacity // 8)


class _Posterior:
    """The posterior of 001's online GP on the t current BVs, in whitened square-root form.

    The process stays the prior conditioned on u = f(BV). With K = K_BV = LLᵀ and u = Lv, the
    prior of v is N(0, I) and its posterior is held as N(m, TTᵀ) (T: t × c, c ≥ t); then
    α = L⁻ᵀm and C = L⁻ᵀ(TTᵀ − I)L⁻¹ are the module docstring's, and at x, with a = L⁻¹k,
    the latent mean is aᵀm and the variance γ(x) + ‖Tᵀa‖², γ = k* − aᵀa: sums of squares,
    where C's form k* + kᵀCk cancels (C → −K⁻¹ at a high signal-to-noise ratio) and turns
    negative. The updates are 001's, in these terms:

    - a point is the observation y = aᵀv + ε, ε ~ N(0, γ + σ₀²): Potter's square-root Kalman
      update T ← T(I − β bbᵀ), b = Tᵀa, β = 1/(s + R + √(R(s + R))), s = bᵀb, R = γ + σ₀²
      (TTᵀ becomes TTᵀ − Tb(Tb)ᵀ/(s + R), positive semidefinite by construction);
    - a point that joins BV adds the coordinate v' = (f(x) − aᵀv)/√γ, a priori N(0, 1) and
      independent: L gains the row [aᵀ, √γ], T the row and column of an identity; then
      y = [a; √γ]ᵀv + ε is observed with R = σ₀²;
    - removing BV i (the KL-optimal projection) marginalises u_i out: L loses row i, and
      Givens rotations G re-triangularise it (a Cholesky delete), L_{-i}G = [L' 0]; v ← Gᵀv,
      whose last coordinate no longer enters u and is dropped with its row of m and T.

    For the removal scores (eq. 85) P = K⁻¹U, U = LT (Q + C = PPᵀ), is updated alongside:
    P ← P(I − β bbᵀ); on a join P gains the column [−w; 1]/√γ (w = K⁻¹k); on a removal
    P ← P − qP_i/q_i, q = K⁻¹e_i. T and P gain a column per joined point; when their buffers
    (:func:`_columns`) are full they are compressed to t columns by a QR factorisation (TTᵀ
    unchanged)."""

    def __init__(self, capacity: int) -> None:
        self.t = self.c = 0
        self._L = np.zeros((capacity, capacity))
        # T in the first _columns(capacity) columns, m in the last: a rotation turns both
        self._Tm = np.zeros((capacity, _columns(capacity) + 1))
        self._P = np.zeros((capacity, _columns(capacity)))

    def frozen(self) -> _Posterior:
        """A copy for prediction: L, T and m at their current size, and no P (the removal
        scores' factor) nor room to grow; the fit's buffers may then be reused."""
        copy = _Posterior.__new__(_Posterior)
        copy.t, copy.c = self.t, self.c
        copy._L, copy._Tm = self.L.copy(), np.column_stack([self.T, self.m])
        copy._P = None
        return copy

    @property
    def capacity(self) -> int:
        return len(self._L)

    @property
    def L(self) -> np.ndarray:
        return self._L[: self.t, : self.t]

    @property
    def m(self) -> np.ndarray:
        return self._Tm[: self.t, -1]

    @property
    def T(self) -> np.ndarray:
        return self._Tm[: self.t, : self.c]

    @property
    def P(self) -> np.ndarray:
        return self._P[: self.t, : self.c]

    def whiten(self, k: np.ndarray) -> np.ndarray:
        """a = L⁻¹k (k: t values, or t rows)."""
        if self.t == 0:
            return np.zeros((0, *np.shape(k)[1:]))
        return solve_triangular(self.L, k, lower=True, check_finite=False)

    def alpha(self) -> np.ndarray:
        """α = L⁻ᵀm."""
        if self.t == 0:
            return np.zeros(0)
        return solve_triangular(self.L, self.m, lower=True, trans="T", check_finite=False)

    def dense(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(α, C, Q) of the module docstring: O(t³), for the exact score and the KL traces."""
        if self.t == 0:
            return np.zeros(0), np.zeros((0, 0)), np.zeros((0, 0))
        Linv = solve_triangular(self.L, np.eye(self.t), lower=True, check_finite=False)
        Q = Linv.T @ Linv
        B = Linv.T @ self.T
        return self.alpha(), B @ B.T - Q, Q

    def latent(self, Kx: np.ndarray, kx_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Latent mean aᵀm and variance γ(x) + ‖Tᵀa‖² at the rows of ``Kx`` = k(X, BV);
        γ(x) = k(x,x) − ‖a‖² is a squared distance, and its rounding below 0 counts as 0."""
        if self.t == 0:
            return np.zeros(len(kx_diag)), kx_diag.copy()
        A = self.whiten(Kx.T)
        B = self.T.T @ A
        gamma = kx_diag - np.einsum("ij,ij->j", A, A)
        return A.T @ self.m, np.maximum(gamma, 0.0) + np.einsum("ij,ij->j", B, B)

    def observe(self, a: np.ndarray, y: float, noise: float) -> float:
        """Condition on y = aᵀv + ε, ε ~ N(0, ``noise``) (Potter's update, class docstring);
        returns s + R, the observation's predictive variance."""
        t = self.t
        b = self.T.T @ a
        s = float(b @ b)
        total = s + noise
        Tb, Pb = self.T @ b, self.P @ b
        self._Tm[:t, -1] += Tb * ((y - a @ self.m) / total)
        beta = 1.0 / (total + math.sqrt(noise * total))
        _add_rank_one(self.T, -beta * Tb, b)
        _add_rank_one(self.P, -beta * Pb, b)
        return total

    def add(self, a: np.ndarray, gamma: float, y: float, noise: float) -> None:
        """A new BV x with a = L⁻¹k and γ = k* − aᵀa ≥ tol, observed as y (class docstring)."""
        t = self.t
        if t == self.capacity:  # only when a later pass re-adds a point (tol = 0) beyond the
            self._grow(2 * t)   # points: doubling keeps the copies O(t²) amortised
        if self.c == self._P.shape[1]:
            self._compress()
        c, root = self.c, math.sqrt(gamma)
        w = solve_triangular(self.L, a, lower=True, trans="T", check_finite=False) if t else a
        self._L[t, :t], self._L[t, t] = a, root
        self._Tm[t, :], self._Tm[:t, c], self._Tm[t, c] = 0.0, 0.0, 1.0
        self._P[:t, c], self._P[t, :c], self._P[t, c] = -w / root, 0.0, 1.0 / root
        self.t, self.c = t + 1, c + 1
        self.observe(np.append(a, root), y, noise)

    def remove(self, i: int) -> None:
        """Marginalise BV i out (class docstring); the later BVs move up one slot."""
        t, c = self.t, self.c
        q = np.zeros(t)  # K⁻¹e_i: L⁻¹e_i is zero above row i
        q[i:] = solve_triangular(self._L[i:t, i:t], np.eye(t - i)[:, 0], lower=True,
                                 check_finite=False)
        q = solve_triangular(self.L, q, lower=True, trans="T", check_finite=False)
        _add_rank_one(self.P, -q / q[i], self._P[i, :c].copy())
        self._P[i: t - 1] = self._P[i + 1: t]
        self._P[t - 1] = 0.0
        L, Tm = self._L, self._Tm
        L[i: t - 1, :t] = L[i + 1: t, :t]
        L[t - 1, :t] = 0.0
        for k in range(i, t - 1):  # zero L[k, k + 1], the superdiagonal left by row i
            x, z = L[k, k], L[k, k + 1]
            r = math.hypot(x, z)
            cs, sn = x / r, z / r
            L[k:t - 1, k:k + 2] = L[k:t - 1, k:k + 2] @ np.array([[cs, -sn], [sn, cs]])
            L[k, k + 1] = 0.0
            Tm[k:k + 2] = np.array([[cs, sn], [-sn, cs]]) @ Tm[k:k + 2]
        Tm[t - 1] = 0.0
        self.t = t - 1

    def approx_scores(self) -> np.ndarray:
        """ε_i = α_i²/(Q_ii + C_ii) (001 eq. 85), with Q + C = K⁻¹SK⁻¹ = PPᵀ."""
        return self.alpha() ** 2 / np.einsum("ij,ij->i", self.P, self.P)

    def _grow(self, capacity: int) -> None:
        extra, wider = capacity - self.capacity, _columns(capacity) - self._P.shape[1]
        self._L = np.pad(self._L, (0, extra))
        self._Tm = np.concatenate([np.pad(self._Tm[:, :-1], ((0, extra), (0, wider))),
                                   np.pad(self._Tm[:, -1:], ((0, extra), (0, 0)))], axis=1)
        self._P = np.pad(self._P, ((0, extra), (0, wider)))

    def _compress(self) -> None:
        """T = RᵀZᵀ from Tᵀ = ZR: T ← Rᵀ (t columns), P ← PZ."""
        Z, R = np.linalg.qr(self.T.T)
        t, c = self.t, self.c
        self._Tm[:t, :t], self._P[:t, :t] = R.T, self.P @ Z
        self._Tm[:t, t:c], self._P[:t, t:c] = 0.0, 0.0
        self.c = t


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
        mean, latent = self.post.latent(Kx, self.kernel.diag(X_new))
        return Prediction(mean, latent + self.sigma2)

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
            previous = (list(BV), *post.dense()[:2]) if trace_kl else None
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
                forward, backward = _successive_kl(blocks, previous, (BV, *post.dense()[:2]))
                kl = {"kl_forward": forward, "kl_backward": backward}
            recorder.step(self.predict, n_basis=len(BV), removals=self.removals, **kl)

    def _absorb(self, j: int, k: np.ndarray) -> bool:
        """The update by point j with k = k(x_j, BV) (the module docstring's; in square-root
        form, :class:`_Posterior`): whether j joined BV (γ ≥ tol·k*) or only updated the
        posterior (the sparse update). A γ below −:data:`GAMMA_ROUNDING`·k* is no rounding:
        L⁻¹k has lost its digits (K_BV is numerically singular) and the fit stops."""
        post, k_star = self.post, self.diag[j]
        a = post.whiten(k)
        gamma = k_star - a @ a
        if gamma < -GAMMA_ROUNDING * k_star:
            raise InputError(
                f"algorithm sparse_online: K_BV became numerically singular (point {j}'s "
                f"squared distance from span(BV) came out {gamma / k_star:.2g}·k(x,x) < 0 with "
                f"{post.t} basis vectors) with lam={self.sigma2:g} and kernel {self.kernel}; "
                f"pass a larger algorithm.tol (now {self.tol:g}) or a smaller "
                "algorithm.max_basis")
        if gamma < self.tol * k_star or gamma <= 0.0:  # (γ = 0: x is in span(BV) already)
            post.observe(a, self.y[j], self.sigma2 + max(gamma, 0.0))
            return False
        post.add(a, gamma, self.y[j], self.sigma2)
        self.BV.append(j)
        return True

    def _remove_one(self, K_chunk: np.ndarray) -> None:
        """Remove the BV element of least score (eq. 85, or the exact KL of eq. 83); the later
        elements move up one slot, in BV and in ``K_chunk``'s columns."""
        post, BV = self.post, self.BV
        exact = self.score == "exact" or self.compare_scores
        dense = post.dense() if exact else None
        K_BV = self.blocks.block(BV, BV) if exact else None
        own = (post.approx_scores() if self.score == "approx"
               else scores(*dense, K_BV, "exact"))
        worst = int(np.argmin(own))
        if self.compare_scores:
            other = (scores(*dense, K_BV, "exact") if self.score == "approx"
                     else post.approx_scores())
            self.compared += 1
            self.differ += int(np.argmin(other) != worst)
        post.remove(worst)
        del BV[worst]
        t = len(BV)
        K_chunk[:, worst:t] = K_chunk[:, worst + 1: t + 1]
        self.removals += 1

    def solution(self, stop_reason: str) -> Solution:
        """The final posterior as the fit's Solution."""
        post = self.post
        alpha, C, Q = post.dense()
        if not np.all(np.isfinite(alpha)):
            raise FloatingPointError("sparse online GP produced non-finite coefficients; raise "
                                     "lam or tol")
        BV, kernel, sigma2 = self.BV, self.kernel, self.sigma2
        basis = np.asarray(BV, dtype=np.int64)
        X_basis = self.blocks.inputs(basis)
        final = post.frozen()

        def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            var = final.latent(kernel(X_new, X_basis), kernel.diag(X_new))[1] + sigma2
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
                    np.argmin(post.approx_scores())
                    != np.argmin(scores(alpha, C, Q, K_BV, "exact")))
        return Solution(basis, alpha, X_basis, kernel, sigma2, summary, variance_bounds,
                        extras={"C": C, "Q": Q}, not_applicable=reasons)


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
        "tol": Option(1e-6, "float", "γ/k(x,x) below which a point only updates α, C", lo=0.0),
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
