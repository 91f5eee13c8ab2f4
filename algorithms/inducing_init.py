"""Where the inducing inputs of a trained sparse GP start (the peers' ``inducing_init``).

- ``random``: m training rows drawn without replacement (GPyTorch's examples take the first or
  random rows).
- ``kmeans``: scikit-learn's k-means centres of the training inputs (KMeans, one k-means++
  initialisation; MiniBatchKMeans in batches of :data:`KMEANS_BATCH` rows above
  :data:`KMEANS_FULL_ROWS` rows), the common choice of SVGP users (Hensman et al. 2013 start
  from k-means centres).
- ``greedy_variance``: the greedy conditional-variance selection of Burt, Rasmussen & van der
  Wilk (2020, JMLR 21(131), Alg. 1; Foster et al. 2009): repeatedly take the training input
  whose variance under the prior conditioned on the inputs taken so far, k(x, x) − Q(x, x),
  is largest. That is the pivot rule of the pivoted (incomplete) Cholesky factorisation of K,
  one pivot at a time (:class:`algorithms.lowrank.PartialCholesky`, ``greedy_pivot``), at
  the start's kernel. Ober et al. (2024, "Recommendations for baselines and benchmarking
  approximate Gaussian processes") recommend it for SGPR. A kernel of lower numerical rank
  than m (repeated inputs) yields fewer pivots; the rest are random rows not yet taken.

Each returns (Z, rows): the starting inducing inputs and, per input, the training row it is
(random, greedy_variance) or the nearest training row to it (kmeans).
"""

from __future__ import annotations

import numpy as np

from algorithms.kernel_blocks import ArrayKernelBlocks
from algorithms.kernels import Kernel
from algorithms.lowrank import PartialCholesky

INDUCING_INITS = ("random", "kmeans", "greedy_variance")
KMEANS_FULL_ROWS = 10_000  # above this many rows, MiniBatchKMeans
KMEANS_BATCH = 4096


def greedy_variance_rows(X: np.ndarray, kernel: Kernel, m: int,
                         rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """(rows, pivots): m rows of X by greedy conditional variance (module docstring), in the
    order chosen, the first ``pivots`` of them pivots of the Cholesky factorisation and the
    rest (a kernel of numerical rank below m) random rows not already taken."""
    m = min(m, len(X))
    chol = PartialCholesky(ArrayKernelBlocks(X, kernel), m)
    while chol.t < chol.capacity:
        pivot = chol.greedy_pivot()
        if pivot is None:
            break
        chol.add([pivot])
    rows = np.asarray(chol.pivots, dtype=np.int64)
    pivots = len(rows)
    if pivots < m:
        rest = np.setdiff1d(np.arange(len(X)), rows)
        rows = np.concatenate([rows, rng.choice(rest, m - pivots, replace=False)])
    return rows, pivots


def kmeans_centres(X: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """m k-means centres of the rows of X (module docstring), seeded from ``rng``."""
    from sklearn.cluster import KMeans, MiniBatchKMeans

    m = min(m, len(X))
    seed = int(rng.integers(2**31 - 1))
    if len(X) > KMEANS_FULL_ROWS:
        model = MiniBatchKMeans(n_clusters=m, n_init=1, batch_size=KMEANS_BATCH,
                                random_state=seed)
    else:
        model = KMeans(n_clusters=m, n_init=1, random_state=seed)
    return np.asarray(model.fit(X).cluster_centers_, dtype=np.float64)


def nearest_rows(X: np.ndarray, Z: np.ndarray, block: int = 4096) -> np.ndarray:
    """For each row of Z, the index of its nearest row of X (squared Euclidean), in blocks of
    X's rows (O(block·m) memory)."""
    best = np.full(len(Z), np.inf)
    where = np.zeros(len(Z), dtype=np.int64)
    zz = np.einsum("ij,ij->i", Z, Z)
    for lo in range(0, len(X), block):
        part = X[lo: lo + block]
        d2 = np.einsum("ij,ij->i", part, part)[:, None] - 2.0 * part @ Z.T + zz[None, :]
        arg = np.argmin(d2, axis=0)
        value = d2[arg, np.arange(len(Z))]
        better = value < best
        best[better], where[better] = value[better], lo + arg[better]
    return where


def initial_inducing(X: np.ndarray, kernel: Kernel, m: int, how: str,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """(Z, rows, note): the m starting inducing inputs by ``how`` (:data:`INDUCING_INITS`), the
    training rows they are or are nearest to, and a note for the stopping reason."""
    m = min(m, len(X))
    if how == "random":
        rows = np.sort(rng.choice(len(X), m, replace=False))
        return X[rows].copy(), rows, f"{m} random rows"
    if how == "kmeans":
        Z = kmeans_centres(X, m, rng)
        return Z, nearest_rows(X, Z), f"{len(Z)} k-means centres"
    if how == "greedy_variance":
        rows, pivots = greedy_variance_rows(X, kernel, m, rng)
        note = f"{m} rows by greedy variance" + (
            f" ({pivots} pivots, {m - pivots} random: K's numerical rank)" if pivots < m else "")
        return X[rows].copy(), rows, note
    raise ValueError(f"inducing_init={how!r}: one of {INDUCING_INITS}")
