"""scikit-learn as a peer: its exact GP, its Nyström features with ridge regression, and its
Laplace GP classifier.

- ``sklearn_gpr``: :class:`sklearn.gaussian_process.GaussianProcessRegressor` (Rasmussen &
  Williams Alg. 2.1: Cholesky of K + αI) with our kernel translated to scikit-learn's
  (:mod:`algorithms.peers`). ``optimize=false``: the kernel is fixed (``optimizer=None``) and
  the noise is ``alpha = lam``: the exact GP, to round-off (tests/test_peers.py: ≤ 1e-8 from
  our ``exact``). ``optimize=true``: scikit-learn maximises the log marginal likelihood by
  L-BFGS-B over the kernel's parameters and a ``WhiteKernel(lam)`` noise term (then
  ``alpha = 1e-10``, recorded as ``jitter``), from the job's kernel and λ and from
  ``n_restarts`` further log-uniform random starts seeded from the job's generator; the
  learned kernel (translated back) and noise are the solution's. ``starts``
  (:func:`algorithms.peers.start_points`: ``given``, ``median``, ``standard`` or several joined
  by '+') names the kernels and σ² it starts from: one scikit-learn fit per start (the
  ``n_restarts`` random restarts added to the first one's), the best log marginal likelihood
  kept; with ``optimize=false`` the fixed kernel is the start's. The optimiser is a callable
  ``optimizer`` that makes scikit-learn's own default call, ``scipy.optimize.minimize(...,
  method="L-BFGS-B", jac=True, bounds=bounds)`` (``GaussianProcessRegressor.
  _constrained_optimization``), and keeps its result: with ``budget_seconds`` its ``callback``
  raises StopIteration at the end of the L-BFGS-B iteration in which the learning passed the
  budget (scipy ≥ 1.11 then returns the last iterate, status 99, "`callback` raised
  `StopIteration`"), and later restarts and starts do not run. The summary has the wall and
  CPU seconds of that learning (``own_learning_seconds``, ``own_learning_cpu_seconds``; they
  include the final factorisation, one of the optimiser's), ``own_starts``,
  ``own_best_start``, ``own_iterations`` (the kept run's L-BFGS-B iterations),
  ``own_iterations_total``, ``own_start_summary`` (every run's log marginal likelihood,
  iterations and scipy's message) and ``own_converged`` (false where an L-BFGS-B run did not
  converge, ``own_stop_reason`` then ``failed_to_converge``, or ``budget``). The predictor is
  k(x, X) @ α with scikit-learn's own α (``alpha_``), its variance scikit-learn's
  ``predict(return_std=True)`` squared, plus λ for the fixed kernel (the WhiteKernel already
  holds the noise otherwise).
- ``sklearn_nystroem``: :class:`sklearn.kernel_approximation.Nystroem` (Williams & Seeger
  2001: features φ(x) = N k(landmarks, x), N = K_SS^{-1/2} from an SVD with eigenvalues
  clipped at 1e-12) on ``max_basis`` landmarks drawn by scikit-learn with a random state from
  the job's generator, then ``Ridge(alpha=lam, fit_intercept=False, solver="cholesky")``. Its
  prediction φ(x)ᵀw = k(x, X_S) (Nᵀw) is held exactly as k(x, X[basis]) @ coef with basis the
  landmarks' training rows (``component_indices_``) and coef = ``normalization_.T @ coef_``.
  Ridge has no predictive variance. On the same landmarks the mean equals our ``nystrom``'s.

- ``sklearn_gpc``: :class:`sklearn.gaussian_process.GaussianProcessClassifier` (binary, the
  Laplace approximation of Rasmussen & Williams Alg. 3.1–3.2) with our kernel fixed
  (``optimizer=None``) or learned (``optimize=true``: L-BFGS-B on its approximate log marginal
  likelihood, ``n_restarts`` random restarts). Latent mean k(x, X) @ (t − π(f̂)) with its own
  mode ``f_cached``; probabilities are scikit-learn's ``predict_proba`` (its erf
  approximation of ∫σ(z)N(z | f̄, V)dz). Equals our ``gp_laplace`` to round-off in the mode and
  log marginal likelihood (tests/test_laplace.py).

All take every training input into memory (the libraries need X): O(n·d), and scikit-learn's
GPR O(n²) more (see :func:`gpr_memory_bytes`). Their libraries' warnings are counted in the
summary (``library_warnings``, the first in ``first_warning``), not printed. The certificate
applies except to a GPR whose hyperparameters were learned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Solution, block_rows
from algorithms.evaluation import Recorder
from algorithms.kernels import Kernel
from algorithms.options import Option
from algorithms.peers import (
    BUDGET_OPTION,
    SKLEARN,
    Clock,
    hyper_bounds,
    kernel_from_sklearn,
    library_warnings,
    over_budget,
    seed_from,
    sklearn_kernel,
    start_points,
    starts_option,
)

OPTIMIZE_ALPHA = 1e-10  # GPR's alpha when a WhiteKernel holds the noise (scikit-learn's default)
NO_GAP = "scikit-learn solves no dual problem (no duality gap)"


def _library() -> str:
    import sklearn

    return f"scikit-learn {sklearn.__version__}"


def _warnings_summary(caught: list[str]) -> dict[str, Any]:
    return {"library_warnings": len(caught), "first_warning": caught[0] if caught else ""}


def gpr_memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of a ``sklearn_gpr`` fit: 3 n×n float64 arrays with the kernel fixed (its
    kernel matrix with temporaries and the Cholesky copy; tracemalloc, n = 2000: 3.00·n²·8);
    optimising, 3 per hyperparameter, at most d length scales, the variance and the noise
    (the gradient K_gradient, its stacked copies and the inner term; n = 1000, d = 5:
    9.0·n²·8 isotropic, 21.0·n²·8 ARD); plus X and 64 MiB."""
    factor = 3 * (d + 2) if options.get("optimize") else 3
    return 8.0 * (factor * n * n + n * d) + 2**26


class BudgetedLbfgsb:
    """scikit-learn's default optimiser as a callable ``optimizer(obj_func, initial_theta,
    bounds)``: the same ``scipy.optimize.minimize`` call, every result kept (``results``), and
    with a ``budget`` of wall seconds on ``clock`` a callback that stops L-BFGS-B at the end of
    the iteration in which the budget passed (StopIteration: scipy keeps the last iterate).
    A run asked for once the budget has passed is not run: its start is returned with the
    value +inf, so scikit-learn keeps an earlier optimum."""

    def __init__(self, clock: Clock, budget: float | None) -> None:
        self.clock, self.budget = clock, budget
        self.results: list[Any] = []
        self.skipped = 0

    def spent(self) -> bool:
        return over_budget(self.clock, self.budget)

    def _callback(self, intermediate_result: Any) -> None:
        if self.spent():
            raise StopIteration

    def __call__(self, obj_func: Any, initial_theta: np.ndarray,
                 bounds: np.ndarray) -> tuple[np.ndarray, float]:
        from scipy.optimize import minimize

        if self.results and self.spent():
            self.skipped += 1
            return initial_theta, math.inf
        res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds,
                       callback=self._callback if self.budget is not None else None)
        self.results.append(res)
        return res.x, res.fun

    @staticmethod
    def stopped(res: Any) -> bool:
        """Whether the run was stopped by the budget (scipy's status 99: the callback raised
        StopIteration)."""
        return res.status == 99 or "StopIteration" in str(res.message)


def fit_gpr(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
            recorder: Recorder, optimize: bool, n_restarts: int, starts: str = "given",
            budget_seconds: float | None = None) -> Solution:
    """scikit-learn's GaussianProcessRegressor (module docstring) with noise variance ``lam``
    from each of ``starts``; ``optimize``: learn the kernel and the noise (``n_restarts``
    random restarts), for at most about ``budget_seconds``."""
    owner = "algorithm sklearn_gpr"
    n = blocks.n
    X = blocks.inputs(slice(None))
    sklearn_kernel(blocks.kernel, owner)  # a kernel it cannot translate: refused first
    seed = seed_from(rng)
    caught: list[str] = []
    clock = Clock()
    points = start_points(starts, blocks.kernel, lam, X, y, rng)
    optimizer = BudgetedLbfgsb(clock, budget_seconds)
    with library_warnings(caught):
        fits, skipped = _fit_each_start(points, X, y, optimize, optimizer, n_restarts, seed,
                                        owner)
    clock.stop()
    best = max(range(len(fits)), key=lambda i: fits[i][3].log_marginal_likelihood_value_)
    label, start, start_noise, gpr, _ = fits[best]
    alpha = np.asarray(gpr.alpha_, dtype=np.float64).ravel()
    if optimize:  # kernel_ = ConstantKernel * base + WhiteKernel
        fitted, noise = kernel_from_sklearn(blocks.kernel.name, gpr.kernel_.k1), \
            float(gpr.kernel_.k2.noise_level)
        added = 0.0  # scikit-learn's predictive variance holds the WhiteKernel's noise
    else:
        fitted, noise, added = start, start_noise, start_noise
    log_ml = float(gpr.log_marginal_likelihood_value_)
    recorder.step(n_basis=n, objective=math.nan, gap=math.nan, log_marginal_likelihood=log_ml)
    rows = block_rows(n)

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """scikit-learn's predictive variance of f (+ the noise), in blocks of test rows."""
        X_new = np.asarray(X_new, dtype=np.float64)
        var = np.empty(len(X_new))
        with library_warnings([]):
            for lo in range(0, len(X_new), rows):
                var[lo: lo + rows] = gpr.predict(X_new[lo: lo + rows], return_std=True)[1] ** 2
        var += added
        return var, var

    reasons = {"gap": NO_GAP}
    start_note = "" if starts == "given" else f", started at {label} ({starts})"
    if optimize:
        reasons["objective"] = ("hyperparameters learned by scikit-learn: L(α) of the job's "
                                "kernel and lam does not describe this predictor")
        reasons["gap_certified"] = "no certificate: the kernel and noise were learned"
        own = _own_gpr(fits, best, skipped, optimizer, clock, n_restarts, budget_seconds)
        stop = (f"L-BFGS-B on the log marginal likelihood from {own['own_starts']} starts"
                f"{start_note}: {own['own_stop_reason']}")
    else:
        reasons["objective"] = "not computed by scikit-learn (the certificate computes L(α))"
        if starts != "given":
            reasons["gap_certified"] = "no certificate: the kernel and lam are a start's"
        stop = f"fixed kernel (optimizer=None){start_note}"
        own = {}
    summary = {"n_basis": n, "objective": math.nan, "gap": math.nan, "stop_reason": stop, **own,
               "jitter": OPTIMIZE_ALPHA if optimize else 0.0,
               "log_marginal_likelihood": log_ml, "learned_kernel": str(fitted),
               "learned_lam": noise, "library": _library(), **_warnings_summary(caught)}
    return Solution(np.arange(n), alpha, X, fitted, noise, summary, variance_bounds,
                    not_applicable=reasons)


def _fit_each_start(points: list, X: np.ndarray, y: np.ndarray, optimize: bool,
                    optimizer: BudgetedLbfgsb, n_restarts: int, seed: int, owner: str
                    ) -> tuple[list[tuple[str, Kernel, float, Any, list[Any]]], list[str]]:
    """One scikit-learn fit from each start of ``points`` ((label, kernel, σ²)), the random
    restarts on the first; a start after the budget is spent is skipped (its label kept)."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import WhiteKernel

    fits: list[tuple[str, Kernel, float, Any, list[Any]]] = []
    skipped: list[str] = []
    for index, (label, start, noise) in enumerate(points):
        if fits and optimize and optimizer.spent():
            skipped.append(label)
            continue
        kernel = sklearn_kernel(start, owner)
        if optimize:
            gpr = GaussianProcessRegressor(
                kernel + WhiteKernel(noise, hyper_bounds(np.array([noise]))),
                alpha=OPTIMIZE_ALPHA, optimizer=optimizer,
                n_restarts_optimizer=n_restarts if index == 0 else 0,
                random_state=seed, copy_X_train=False)
        else:
            gpr = GaussianProcessRegressor(kernel, alpha=noise, optimizer=None,
                                           random_state=seed, copy_X_train=False)
        before = len(optimizer.results)
        gpr.fit(X, y)
        fits.append((label, start, noise, gpr, optimizer.results[before:]))
    return fits, skipped


def _own_gpr(fits: list, best: int, skipped: list[str], optimizer: BudgetedLbfgsb,
             clock: Clock, n_restarts: int, budget: float | None) -> dict[str, Any]:
    """The own-protocol keys of a learning ``sklearn_gpr`` (module docstring): the kept run is
    the kept start's best L-BFGS-B run."""
    runs = [res for *_, results in fits for res in results]
    kept = fits[best][4]
    chosen = min(kept, key=lambda res: res.fun) if kept else None
    budget_hit = bool(skipped or optimizer.skipped or any(map(optimizer.stopped, runs)))
    failed = [res for res in runs if res.status != 0 and not optimizer.stopped(res)]
    stop = "budget" if budget_hit else "failed_to_converge" if failed else "converged"
    parts = [f"{label} run {i}: log marginal likelihood {-res.fun:.10g}, {res.nit} iterations, "
             f"{' '.join(str(res.message).split())}"
             for label, *_, results in fits for i, res in enumerate(results)]
    if budget_hit:
        parts.append(f"budget_seconds={budget:g} passed: {optimizer.skipped} restarts and "
                     f"{len(skipped)} starts ({'+'.join(skipped) or 'none'}) not run")
    return {"own_learning_seconds": clock.wall, "own_learning_cpu_seconds": clock.cpu,
            "own_starts": len(fits) + n_restarts - optimizer.skipped,
            "own_best_start": fits[best][0], "own_converged": stop == "converged",
            "own_stop_reason": stop, "own_iterations": int(chosen.nit) if chosen else 0,
            "own_iterations_total": int(sum(res.nit for res in runs)),
            "own_start_summary": "; ".join(parts)}


def fit_nystroem(blocks: KernelBlocks, y: np.ndarray, *, lam: float,
                 rng: np.random.Generator, recorder: Recorder, max_basis: int) -> Solution:
    """scikit-learn's Nystroem features on ``max_basis`` random landmarks and Ridge with
    ``alpha = lam`` (module docstring)."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge

    owner = "algorithm sklearn_nystroem"
    n = blocks.n
    m = min(max_basis, n)
    X = blocks.inputs(slice(None))
    features = Nystroem(kernel=sklearn_kernel(blocks.kernel, owner), n_components=m,
                        random_state=seed_from(rng))
    ridge = Ridge(alpha=lam, fit_intercept=False, solver="cholesky")
    caught: list[str] = []
    with library_warnings(caught):
        ridge.fit(features.fit_transform(X), y)
    basis = np.asarray(features.component_indices_, dtype=np.int64)
    # φ(x)ᵀw = k(x, X_S) Nᵀ w: the same predictor as a kernel expansion on the landmarks
    coef = features.normalization_.T @ np.asarray(ridge.coef_, dtype=np.float64).ravel()
    recorder.step(n_basis=m, objective=math.nan, gap=math.nan)
    reasons = {"variance": "scikit-learn's Ridge has no predictive variance",
               "objective": "not computed by scikit-learn (the certificate computes L(α))",
               "gap": NO_GAP}
    stop = f"max_basis = {m} landmarks" + (f" (every point: n = {n})" if m < max_basis else "")
    summary = {"n_basis": m, "objective": math.nan, "gap": math.nan, "stop_reason": stop,
               "jitter": 0.0, "library": _library(), **_warnings_summary(caught)}
    return Solution(basis, coef, X[basis], blocks.kernel, lam, summary, None,
                    not_applicable=reasons)


def gpc_memory_bytes(n: int, d: int, options: Mapping[str, Any]) -> float:
    """Peak memory of a ``sklearn_gpc`` fit: K, W^½K, B and its factor (4 n×n), and when
    optimising the kernel gradient (one n×n per hyperparameter); plus X and 64 MiB."""
    factor = 4 + ((d + 1) if options.get("optimize") else 0)
    return 8.0 * (factor * n * n + n * d) + 2**26


def fit_gpc(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
            recorder: Recorder, optimize: bool, n_restarts: int) -> Solution:
    """scikit-learn's GaussianProcessClassifier on labels y ∈ {−1, +1} (module docstring);
    ``lam`` is not used (no noise variance)."""
    from sklearn.gaussian_process import GaussianProcessClassifier

    owner = "algorithm sklearn_gpc"
    n = blocks.n
    X = blocks.inputs(slice(None))
    gpc = GaussianProcessClassifier(sklearn_kernel(blocks.kernel, owner),
                                    optimizer="fmin_l_bfgs_b" if optimize else None,
                                    n_restarts_optimizer=n_restarts,
                                    random_state=seed_from(rng), copy_X_train=False)
    caught: list[str] = []
    with library_warnings(caught):
        gpc.fit(X, (y > 0).astype(int))
    est = gpc.base_estimator_
    fitted = kernel_from_sklearn(blocks.kernel.name, est.kernel_) if optimize else blocks.kernel
    mode = np.asarray(est.f_cached, dtype=np.float64)
    coef = 0.5 * (y + 1.0) - 1.0 / (1.0 + np.exp(-mode))  # t − π(f̂): latent mean k(x, X) @ coef
    log_ml = float(est.log_marginal_likelihood_value_)
    recorder.step(n_basis=n, objective=math.nan, gap=math.nan, log_marginal_likelihood=log_ml)
    rows = block_rows(n)

    def probability(X_new: np.ndarray) -> np.ndarray:
        X_new = np.asarray(X_new, dtype=np.float64)
        out = np.empty(len(X_new))
        with library_warnings([]):
            for lo in range(0, len(X_new), rows):
                out[lo: lo + rows] = gpc.predict_proba(X_new[lo: lo + rows])[:, 1]
        return out

    reasons = {"gap": NO_GAP, "objective": "scikit-learn reports no log posterior"}
    stop = ("L-BFGS-B on the approximate log marginal likelihood from "
            f"{1 + n_restarts} starts" if optimize else "fixed kernel (optimizer=None)")
    summary = {"n_basis": n, "objective": math.nan, "gap": math.nan, "stop_reason": stop,
               "jitter": 0.0, "log_marginal_likelihood": log_ml, "learned_kernel": str(fitted),
               "library": _library(), **_warnings_summary(caught)}
    return Solution(np.arange(n), coef, X, fitted, lam, summary, extras={"latent_mode": mode},
                    not_applicable=reasons, probability=probability)


SPECS = [
    AlgorithmSpec(
        "sklearn_gpr", fit_gpr,
        "scikit-learn's GaussianProcessRegressor (exact GP; optionally learns kernel and noise)",
        options={
            "optimize": Option(False, "bool", "learn the kernel and a WhiteKernel noise by "
                               "scikit-learn's L-BFGS-B (false: the job's kernel and lam)"),
            "n_restarts": Option(0, "int", "further random starts of the optimiser (added to "
                                 "the first of starts)", lo=0),
            "starts": starts_option(
                "algorithm sklearn_gpr", "the kernels and noise it starts from, one or more "
                "joined by '+' (one scikit-learn fit each, the best log marginal likelihood "
                "kept): given (the job's kernel and lam), median (the median heuristic), "
                "standard (variance 1, every length scale sqrt(d/2), lam), e.g. given+median"),
            "budget_seconds": BUDGET_OPTION,
        },
        has_variance=True, memory_bytes=gpr_memory_bytes,
        exact_limit=ExactLimit({"optimize": False}, variance=True),
        certifiable=lambda options: not options["optimize"] and options["starts"] == "given",
        requires=(SKLEARN,),
        own_protocol={"optimize": True, "n_restarts": 5},
    ),
    AlgorithmSpec(
        "sklearn_nystroem", fit_nystroem,
        "scikit-learn's Nystroem features + Ridge (random landmarks; no variance)",
        options={"max_basis": Option(256, "int", "landmarks m (Nystroem's n_components)",
                                     lo=1, clip_to_n=True)},
        has_variance=False, exact_limit=ExactLimit({"max_basis": "n"}),
        check_options={"max_basis": 20}, requires=(SKLEARN,),
        blas_lead="numpy",  # its features' products (n = 8000: 0.046 s against 0.059 s)
    ),
    AlgorithmSpec(
        "sklearn_gpc", fit_gpc,
        "scikit-learn's GaussianProcessClassifier (Laplace, binary; optionally learns the "
        "kernel)",
        options={
            "optimize": Option(False, "bool", "learn the kernel by scikit-learn's L-BFGS-B "
                               "(false: the job's kernel)"),
            "n_restarts": Option(0, "int", "further random starts of the optimiser", lo=0),
        },
        task="classification", memory_bytes=gpc_memory_bytes, certifiable=False,
        requires=(SKLEARN,), own_protocol={"optimize": True, "n_restarts": 5},
    ),
]
