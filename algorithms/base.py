"""The shared contract: kernel blocks in, a :class:`Fit` with a per-step trace out.

An algorithm is a function ``fit(blocks, y, *, lam, kappa, rng, test, **options) -> Fit``
(κ only where it means something). It sees the training inputs only through a
:class:`KernelBlocks` provider, so it never needs to know where the data live (numpy in tests,
a zarr store in the pipeline) and sparse methods never form the n×n matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from algorithms.kernels import Kernel


class InputError(ValueError):
    """Bad input from the user: the message is one line naming the value and the fix."""


@runtime_checkable
class KernelBlocks(Protocol):
    """Kernel matrix K = k(X, X) of the training inputs, computed block by block on demand."""

    n: int
    kernel: Kernel

    def block(self, rows: np.ndarray | slice, cols: np.ndarray | slice) -> np.ndarray:
        """K[rows, cols] as a dense float64 array."""

    def diag(self) -> np.ndarray:
        """diag(K), length n."""

    def cross(self, X_new: np.ndarray, cols: np.ndarray | slice) -> np.ndarray:
        """k(X_new, X[cols]), shape (len(X_new), len(cols))."""

    def inputs(self, rows: np.ndarray | slice) -> np.ndarray:
        """The training inputs X[rows] (needed to make a self-contained predictor)."""


@dataclass(frozen=True)
class Fit:
    """Result of one algorithm run.

    The predictive mean is ``f(x) = k(x, X_basis) @ coef``. ``trace`` holds one array per
    diagnostic, all of the same length (one entry per step; ``n_basis`` gives the basis size at
    that step). ``summary`` holds final scalars (objective, gap, stop reason, ...);
    ``extras`` holds further arrays (e.g. the dual solution of SGMA).
    ``variance_bounds`` maps test inputs to (lower, upper) bounds of the predictive variance of
    y (noise included); the exact GP returns lower == upper.
    """

    algorithm: str
    basis: np.ndarray
    coef: np.ndarray
    X_basis: np.ndarray
    kernel: Kernel
    lam: float
    trace: dict[str, np.ndarray]
    summary: dict[str, float | int | str]
    variance_bounds: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = field(
        default=None, repr=False, compare=False
    )
    extras: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def predict(self, X_new: np.ndarray) -> np.ndarray:
        """Predictive mean k(X_new, X_basis) @ coef."""
        return self.kernel(np.asarray(X_new, dtype=np.float64), self.X_basis) @ self.coef


def check_lam(lam: float) -> float:
    """Validate the regulariser λ = σ² (noise variance)."""
    if not isinstance(lam, (int, float, np.floating)) or not math.isfinite(lam) or lam <= 0:
        raise InputError(f"lam={lam!r} must be a finite number > 0 (the noise variance σ²); "
                         "pass e.g. lam=0.1")
    return float(lam)


def check_kappa(kappa: int | None, n: int) -> int:
    """Validate the candidate-subset size κ; κ ≥ n means full greedy and is clipped to n."""
    if kappa is None or isinstance(kappa, bool) or not isinstance(kappa, (int, np.integer)):
        raise InputError(f"kappa={kappa!r} must be an integer ≥ 1 (candidate subset size); "
                         "pass e.g. kappa=59")
    if kappa < 1:
        raise InputError(f"kappa={kappa} must be ≥ 1 (candidate subset size); pass e.g. kappa=59, "
                         "or kappa=n for full greedy")
    return int(min(kappa, n))


def check_targets(y: np.ndarray, n: int, name: str = "y") -> np.ndarray:
    """Validate a target vector against the number of training inputs."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise InputError(f"{name} has shape {y.shape}; it must be one-dimensional (n,)")
    if y.shape[0] != n:
        raise InputError(f"{name} has {y.shape[0]} entries but there are {n} inputs; "
                         "pass one target per input row")
    bad = ~np.isfinite(y)
    if bad.any():
        raise InputError(f"{name} has {int(bad.sum())} NaN/inf values (first at index "
                         f"{int(np.flatnonzero(bad)[0])}); remove or impute them")
    return y


def check_test(test: tuple[np.ndarray, np.ndarray] | None, d: int | None) -> tuple | None:
    """Validate an optional held-out set (X_test, y_test) used for the trace's test RMSE."""
    if test is None:
        return None
    X_test, y_test = (np.asarray(a, dtype=np.float64) for a in test)
    if X_test.ndim != 2 or (d is not None and X_test.shape[1] != d):
        raise InputError(f"X_test has shape {X_test.shape}; it must be (n_test, {d})")
    y_test = check_targets(y_test, X_test.shape[0], "y_test")
    if not np.isfinite(X_test).all():
        raise InputError("X_test has NaN/inf values; remove or impute them")
    return X_test, y_test


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def gaussian_nlpd(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Mean negative log predictive density of y under N(mean, var)."""
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def coverage_2sd(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Fraction of targets inside mean ± 2·sd (calibration of the error bars; 0.954 if exact)."""
    return float(np.mean(np.abs(y - mean) <= 2.0 * np.sqrt(var)))
