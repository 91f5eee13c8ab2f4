"""Learning curves by Lemma 4 (003, Ferrari-Trecate, Williams & Opper, NIPS 1998, §3–§5).

The generalisation error of a predictor ŷ(x) = k(x)ᵀ L t is the mean over training inputs
x̄ ~ pⁿ of its x̄-error (Lemma 4, eq. 3)

    E(n, x̄) = Σ_i λ_i + σ² + tr(L H Lᵀ − 2 L Φ Λ),

and for the full GP ŷ(x) = k_x̄(x)ᵀ H⁻¹ t (the m → ∞ limit of g°, eq. 4)

    E_f(n, x̄) = ∫C(x,x)p(x)dx + σ² − tr(H⁻¹ M),  M_jk = ∫C(x_j,x)C(x,x_k)p(x)dx,

with M computed by the same quadrature that defines the eigenbasis. :func:`learning_curve`
estimates E^g(n) = E_x̄[E(n, x̄)] on a grid of n by ``draws`` independent x̄ per n. The x̄ of a
given (seed, n) do not depend on the predictor, so curves of different predictors with the same
seed are paired draw by draw (003 Fig. 1b) and ``baseline`` records the paired difference.

An m-dimensional predictor detaches from the GP at n̄ = σ²/λ_m (§4) and its error tends to the
plateau σ² + Σ_{i>m} λ_i (§5) as n → ∞.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import scipy.linalg as sla

from algorithms.contract import Curve, CurveModel, check_lam
from algorithms.errors import InputError
from algorithms.evaluation import numerical_guard
from algorithms.kernels import Kernel
from algorithms.projected import (
    Density,
    bound7,
    detaching_point,
    diag_moments,
    kernel_trace,
    mercer,
    predictor_xbar_error,
)

__all__ = ["gp_xbar_error", "learning_curve", "predictor_xbar_error", "check_n_grid"]
DENSITIES = ("uniform", "empirical")  # the densities of algorithms.projected.Density


def gp_xbar_error(kernel: Kernel, density: Density, X: np.ndarray, sigma2: float) -> float:
    """E_f(n, x̄) of the full GP predictor: ∫C(x,x)p + σ² − tr(H⁻¹ K_x̄Z W K_Zx̄)."""
    H = kernel(X, X)
    H[np.diag_indices_from(H)] += sigma2
    factor = sla.cholesky(H, lower=True)
    G = sla.solve_triangular(factor, kernel(X, density.nodes) * np.sqrt(density.weights),
                             lower=True)  # tr(H⁻¹ M) = ‖chol(H)⁻¹ K_x̄Z W^½‖²_F
    return kernel_trace(kernel, density) + sigma2 - float(np.sum(G * G))


def check_n_grid(n_grid: Sequence[int]) -> np.ndarray:
    values = np.asarray(list(n_grid))
    if values.ndim != 1 or not len(values) or values.dtype.kind not in "iu" or values.min() < 1:
        raise InputError(f"learning_curve.n={list(n_grid)!r} must be a non-empty list of "
                         "integers ≥ 1 (training set sizes); pass e.g. [1, 10, 100]")
    return values.astype(int)


def _standard_error(values: np.ndarray) -> np.ndarray:
    """Standard error of the mean over draws (axis 1); NaN for a single draw."""
    if values.shape[1] < 2:
        return np.full(len(values), np.nan)
    return values.std(axis=1, ddof=1) / np.sqrt(values.shape[1])


def learning_curve(name: str, model: CurveModel, kernel: Kernel, density: Density, *,
                   lam: float, n_grid: Sequence[int], draws: int, seed: int,
                   m: int | None = None, baseline: tuple[str, CurveModel] | None = None
                   ) -> Curve:
    """E^g(n) of predictor ``name`` (its :class:`CurveModel`; ``m`` eigenfunctions where it
    needs a Mercer basis) for each n in ``n_grid``, averaged over ``draws`` x̄ ~ pⁿ.

    Trace (per n): ``n_train``, ``xbar_error`` (the mean, E^g(n)), ``xbar_error_se`` (its
    standard error), ``n_basis``, ``seconds``; for m-dimensional predictors also ``plateau``
    (σ² + Σ_{i>m}λ_i) and ``bound7_u_optimal`` (eq. 7); with ``baseline`` = (name, model) the
    paired mean and standard error of E_name − E_baseline over the same draws. Non-finite
    arithmetic is one InputError naming lam and the kernel
    (:func:`~algorithms.evaluation.numerical_guard`).
    """
    sigma2 = check_lam(lam)
    with numerical_guard(f"learning curve of {name}", kernel, sigma2,
                         lambda: kernel.diag(density.nodes)):
        return _learning_curve(name, model, kernel, density, sigma2, n_grid, draws, seed, m,
                               baseline)


def _learning_curve(name: str, model: CurveModel, kernel: Kernel, density: Density,
                    sigma2: float, n_grid: Sequence[int], draws: int, seed: int, m: int | None,
                    baseline: tuple[str, CurveModel] | None) -> Curve:
    grid = check_n_grid(n_grid)
    if not isinstance(draws, (int, np.integer)) or draws < 1:
        raise InputError(f"learning_curve.draws={draws!r} must be an integer ≥ 1")
    models = [model] + ([baseline[1]] if baseline is not None else [])
    basis = mercer(kernel, density, m) if any(mod.needs_basis for mod in models) else None
    trace_all = kernel_trace(kernel, density)
    start = time.perf_counter()
    errors = np.empty((len(grid), draws))
    diffs = np.full((len(grid), draws), np.nan)
    seconds = np.empty(len(grid))

    def errors_of(mod: CurveModel, X: np.ndarray) -> np.ndarray:
        return np.array([mod.xbar_error(kernel, density, basis, x, sigma2) for x in X])

    for i, n in enumerate(grid):
        X = density.sample(np.random.default_rng([seed, int(n)]), (draws, int(n)))
        errors[i] = errors_of(model, X)
        if baseline is not None:
            diffs[i] = errors[i] - errors_of(baseline[1], X)
        seconds[i] = time.perf_counter() - start
    if not np.isfinite(errors).all():
        raise FloatingPointError(f"{name}: a Lemma-4 error is not finite (σ² = {sigma2:g})")
    n_basis = int(m) if model.needs_basis else grid
    trace = {"n_train": grid.astype(float), "xbar_error": errors.mean(axis=1),
             "xbar_error_se": _standard_error(errors), "seconds": seconds,
             "n_basis": np.broadcast_to(np.asarray(n_basis, dtype=float), len(grid))}
    summary: dict[str, float | int | str] = {
        "eigen_trace": trace_all, "xbar_error": float(trace["xbar_error"][-1]),
        "n_train": int(grid[-1]), "draws": int(draws), "seconds": float(seconds[-1]),
        "stop_reason": f"learning curve over {len(grid)} values of n, {draws} draws each",
        "n_basis": int(m) if model.needs_basis else int(grid[-1]), "plateau": sigma2}
    reasons = {} if draws > 1 else {"xbar_error_se": "one draw per n: no standard error"}
    if model.needs_basis:
        lam_m = basis.eigenvalues
        summary.update({"m": int(m), "lambda_m": float(lam_m[-1]),
                        "detaching_point": detaching_point(lam_m, sigma2),
                        "plateau": sigma2 + trace_all - float(lam_m.sum())})
        trace["plateau"] = np.full(len(grid), summary["plateau"])
        moments = diag_moments(basis)
        trace["bound7_u_optimal"] = np.array([bound7(lam_m, trace_all, sigma2, int(n), moments)
                                              for n in grid])
    if baseline is not None:
        trace["xbar_error_minus_baseline"] = diffs.mean(axis=1)
        trace["xbar_error_minus_baseline_se"] = _standard_error(diffs)
        summary["baseline"] = baseline[0]
    return Curve(name, trace, summary, reasons, errors)
