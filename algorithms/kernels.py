"""Covariance functions and an in-memory kernel-block provider.

Kernels (algorithms.md "Kernels"): Gaussian RBF exp(−‖x−x'‖²/(2ω²)) with the width given as
2ω² like the papers, Laplacian exp(−‖x−x'‖/ω), Matérn-3/2 (1+h)e^{−h} with h = ‖x−x'‖/μ,
linear ⟨x,x'⟩ and polynomial (⟨x,x'⟩+c)^p. RBF distances are formed with one GEMM
(‖a‖² + ‖b‖² − 2abᵀ), so a block costs one BLAS-3 call plus an elementwise map; kernels of the
unsquared distance use scipy's cdist, whose distances stay exact near zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.distance import cdist

KERNEL_PARAMS: dict[str, dict[str, float]] = {
    "rbf": {"width": 1.0},  # width = 2ω²
    "laplacian": {"omega": 1.0},
    "matern32": {"mu": 1.0},
    "linear": {},
    "polynomial": {"c": 1.0, "degree": 2.0},
}


def _rbf(A: np.ndarray, B: np.ndarray, width: float) -> np.ndarray:
    """exp(−‖a−b‖²/width) as exp(min(2abᵀ − ‖a‖² − ‖b‖², 0)/width): one GEMM, three passes."""
    D = A @ (B.T * (2.0 / width))
    D -= (np.einsum("ij,ij->i", A, A) / width)[:, None]
    D -= (np.einsum("ij,ij->i", B, B) / width)[None, :]
    np.minimum(D, 0.0, out=D)  # round-off can make a squared distance slightly negative
    return np.exp(D, out=D)


@dataclass(frozen=True)
class Kernel:
    """A stationary or dot-product kernel with named parameters (see ``KERNEL_PARAMS``)."""

    name: str
    params: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from algorithms.base import InputError

        if self.name not in KERNEL_PARAMS:
            raise InputError(f"unknown kernel '{self.name}'; choose one of: "
                             + ", ".join(KERNEL_PARAMS))
        allowed = KERNEL_PARAMS[self.name]
        unknown = set(self.params) - set(allowed)
        if unknown:
            raise InputError(f"kernel '{self.name}' has no parameter {sorted(unknown)[0]!r}; "
                             f"allowed: {', '.join(allowed) or '(none)'}")
        full = {**allowed, **{k: float(v) for k, v in self.params.items()}}
        for key in ("width", "omega", "mu"):
            if key in full and not full[key] > 0:
                raise InputError(f"kernel.{key}={full[key]} must be > 0; pass e.g. "
                                 f"kernel.{key}=1.0")
        object.__setattr__(self, "params", full)

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """k(A, B), shape (len(A), len(B)), float64."""
        A = np.asarray(A, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        p = self.params
        if self.name == "linear":
            return A @ B.T
        if self.name == "polynomial":
            K = A @ B.T
            K += p["c"]
            return K ** p["degree"]
        if self.name == "rbf":
            return _rbf(A, B, p["width"])
        # √ of the GEMM form would turn round-off 1e-16 into distance 1e-8: use direct distances
        D = cdist(A, B)
        if self.name == "laplacian":
            D *= -1.0 / p["omega"]
            return np.exp(D, out=D)
        # matern32: (1 + h) e^{-h}, h = r / μ
        D *= 1.0 / p["mu"]
        E = np.exp(-D)
        D += 1.0
        D *= E
        return D

    def diag(self, A: np.ndarray) -> np.ndarray:
        """k(a, a) for each row a of A."""
        A = np.asarray(A, dtype=np.float64)
        if self.name in ("rbf", "laplacian", "matern32"):
            return np.ones(A.shape[0])
        sq = np.einsum("ij,ij->i", A, A)
        if self.name == "linear":
            return sq
        return (sq + self.params["c"]) ** self.params["degree"]


class ArrayKernelBlocks:
    """Kernel blocks over training inputs held in memory (numpy, or anything np.asarray takes).

    Blocks are computed on demand; nothing of size n×n is stored. ``X`` may be a lazy array
    (e.g. dask over zarr): it is materialised once, on first use, as an (n, d) float64 array,
    which costs n·d·8 bytes, not n²·8.
    """

    def __init__(self, X, kernel: Kernel) -> None:
        self._source = X
        self._X: np.ndarray | None = None
        self.kernel = kernel
        self.n, self.d = (int(s) for s in X.shape)

    @property
    def X(self) -> np.ndarray:
        if self._X is None:
            X = np.ascontiguousarray(np.asarray(self._source, dtype=np.float64))
            if X.ndim != 2:
                from algorithms.base import InputError

                raise InputError(f"X has shape {X.shape}; it must be (n, d)")
            self._X = X
        return self._X

    def inputs(self, rows) -> np.ndarray:
        return self.X[rows]

    def block(self, rows, cols) -> np.ndarray:
        X = self.X
        return self.kernel(X[rows], X[cols])

    def diag(self) -> np.ndarray:
        return self.kernel.diag(self.X)

    def cross(self, X_new: np.ndarray, cols) -> np.ndarray:
        return self.kernel(X_new, self.X[cols])
