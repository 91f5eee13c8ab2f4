"""Kernel hyperparameters and noise by maximising the log marginal likelihood (004 §3.6).

Which likelihood (``method``): ``subset``, the dense form (:mod:`algorithms.marginal_likelihood`)
on a random subset of at most ``subset`` training points (the subset form of §3.6:
O(subset³) per evaluation whatever n); ``lowrank``, Titsias' collapsed bound or the
subset-of-regressors evidence on every training point with a basis of ``basis`` points chosen
by pivoted Cholesky at each start (:mod:`algorithms.marginal_likelihood_lowrank`,
O(n·basis²)); ``exact``, the dense form on every training point (O(n³), n² memory).

:func:`learn` runs scipy's L-BFGS-B on −log p from a first start and from ``restarts`` random
starts drawn log-uniformly over the whole bounds box [1e-5, 1e5] of every parameter (as
scikit-learn's ``n_restarts_optimizer`` draws them; a local move around the first start
never left a white-noise basin: abalone's raw targets under ℓ at its 1e-5 bound, LML −7535.7
against scikit-learn's −4398.8), and keeps the best optimum. The first start is the median
heuristic (``init="median"``, the default): every length scale at half the median distance r̃
between points (on many standardised inputs ℓ = 1 makes K ≈ I, where the gradient vanishes;
at ℓ = r̃ the RBF is e^{−1/2} at the median pair, so flat over the data that the optimiser
leaves it for white noise — on pumadyn32nm (d = 32, r̃ ≈ 8) ℓ = 8 and ℓ = 10 both end at the
white-noise likelihood, ℓ = 1.5 … 4 all at the same optimum with four relevant inputs; ℓ = r̃/2
puts the median pair at e^{−2}), the variance at var(y) and σ² at the configured ``lam``; or
the configured kernel and ``lam`` (``init="kernel"``). It returns the best optimum with the
whole optimiser trace. With ``max_iter = 0`` it returns the first start itself, evaluated but
not optimised, and draws no restarts: the start from which a method that learns by itself
(``protocol=own``, :mod:`pipeline.job.protocol`) trains.

The prior mean is a constant, the training targets' mean (``center_y``, the default): the
targets are centred before the learning, and the job fits and scores the centred targets
(:mod:`pipeline.job.hyper`; a shift changes neither RMSE nor NLPD). Under a zero mean, raw
targets far from 0 (abalone's rings, mean ≈ 10) are explained by a large variance or by noise.

A learned parameter within 1 % of the log-width of the bounds box of a bound (a factor 1.26 of
1e-5 or 1e5) is named in ``at_bound`` (:func:`at_bound`): a length scale at its lower bound
or a noise at its upper one is a white-noise model; an ARD length scale at its upper bound is
an input the model ignores.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from algorithms.errors import InputError
from algorithms.kernels import LEARNABLE, Kernel
from algorithms.marginal_likelihood import (
    BOUNDS,
    Parameters,
    length_scale_of,
    log_marginal_likelihood,
)
from algorithms.marginal_likelihood_lowrank import (
    BOUNDS_OF_LOWRANK,
    LowRankObjective,
    pivoted_basis,
)
from algorithms.options import SEED_MAX, Option

METHODS = ("subset", "lowrank", "exact")  # hyper.method: which marginal likelihood is maximised

__all__ = ["BOUNDS", "LEARNABLE", "OPTIONS", "Learned", "Parameters", "at_bound", "learn",
           "log_marginal_likelihood", "median_distance", "median_start", "memory_bytes",
           "standard_start"]

OPTIONS: dict[str, Option] = {
    "method": Option("subset", "choice", "subset: the dense marginal likelihood on a random "
                     "subset; lowrank: Titsias' bound (or the SoR evidence) on every training "
                     "point with a pivoted-Cholesky basis, O(n·basis²); exact: the dense one on "
                     "every training point, O(n³)", choices=METHODS),
    "subset": Option(2000, "int", "method=subset: learn on a random subset of this many "
                     "training points (one evaluation is O(subset³))", lo=2),
    "basis": Option(512, "int", "method=lowrank: basis points, chosen by pivoted Cholesky of "
                    "the kernel at the first start", lo=1),
    "bound": Option("vfe", "choice", "method=lowrank: vfe (Titsias' collapsed bound) or sor "
                    "(the subset-of-regressors evidence)", choices=BOUNDS_OF_LOWRANK),
    "restarts": Option(5, "int", "L-BFGS-B runs from random starts, log-uniform over the "
                       "bounds box, besides the first start (init)", lo=0),
    "ard": Option(False, "bool", "one length scale per input dimension (else one for all)"),
    "init": Option("median", "choice", "first start: every length scale at half the median "
                   "distance between subset points, the variance at var(y) and σ² at lam "
                   "(median), every length scale at √(d/2), the variance at 1 and σ² at lam, "
                   "from the input dimension d alone (standard: data-independent, for "
                   "standardised inputs and targets), the configured kernel and lam (kernel), "
                   "or none of its own, the given starts only (shared: e.g. the optimum of "
                   "hyper.shared_start, refined)",
                   choices=("median", "standard", "kernel", "shared")),
    "center_y": Option(True, "bool", "a constant prior mean, the training targets' mean: "
                       "learn, fit and score the centred targets"),
    "max_iter": Option(1000, "int", "L-BFGS-B iterations per run (0: the first start only, "
                       "not optimised: the start a method that learns by itself trains from)",
                       lo=0),
    "seed": Option(0, "int", "seeds the subset and the random starts", lo=0,
                   hi=SEED_MAX),
    "budget_seconds": Option(None, "float", "wall seconds the learning may take: past them the "
                             "current L-BFGS-B run stops at the end of its iteration, its "
                             "iterate kept, and no further start runs (the learning is "
                             "recorded as stopped by its budget); null: none", lo=0.0,
                             none_ok=True),
}


@dataclass(frozen=True)
class Learned:
    """The optimum of :func:`learn` and how it was reached.

    ``trace`` has one row per objective evaluation of every run: ``run``, the log marginal
    likelihood and θ. ``kernel`` and ``lam`` are the best run's; ``log_marginal_likelihood``
    its value on the ``n_subset`` (centred) targets; ``at_bound`` its parameters on a bound."""

    kernel: Kernel
    lam: float
    log_marginal_likelihood: float
    n_subset: int
    seconds: float
    names: list[str]
    trace: Mapping[str, np.ndarray]
    runs: list[dict[str, Any]] = field(default_factory=list)
    y_offset: float = 0.0  # the constant prior mean subtracted from the targets (center_y)
    at_bound: list[str] = field(default_factory=list)  # :func:`at_bound` of the optimum
    method: str = "subset"  # which marginal likelihood (:data:`METHODS`)
    n_basis: int = 0  # method=lowrank: basis points
    jitter: float = 0.0  # method=lowrank: the largest jitter added to K_mm
    cpu_seconds: float = 0.0  # CPU time of the process (every thread) while learning

    def summary(self) -> dict[str, Any]:
        """Flat scalars for a result record (learned values, optimiser outcome)."""
        out: dict[str, Any] = {"hyper_kernel": str(self.kernel),
                               "hyper_log_marginal_likelihood": self.log_marginal_likelihood,
                               "hyper_n_subset": self.n_subset, "hyper_seconds": self.seconds,
                               "hyper_cpu_seconds": self.cpu_seconds,
                               "hyper_lam": self.lam, "hyper_variance": self.kernel.variance,
                               "hyper_evaluations": len(self.trace["run"]),
                               "hyper_runs": len(self.runs), "hyper_y_offset": self.y_offset,
                               "hyper_iterations": sum(int(r.get("iterations", 0))
                                                       for r in self.runs),
                               "hyper_stop_reason": stop_reason(self.runs),
                               "hyper_method": self.method, "hyper_n_basis": self.n_basis,
                               "hyper_jitter": self.jitter,
                               "hyper_at_bound": ",".join(self.at_bound)}
        ls = self.kernel.lengthscales
        if ls is None:
            out["hyper_lengthscale"] = length_scale_of(self.kernel)[1]
        else:
            out.update({f"hyper_lengthscale_{j}": float(v) for j, v in enumerate(ls)})
        return out


def stop_reason(runs: Sequence[Mapping[str, Any]]) -> str:
    """Why a learning stopped, from its runs: ``budget`` where its budget stopped a run,
    ``cap`` where a run reached its iteration cap, ``start`` where nothing was optimised
    (max_iter = 0), else ``converged``."""
    stops = [r.get("stop", "converged" if r.get("converged") else
                   "start" if r.get("iterations") == 0 and "max_iter = 0" in
                   str(r.get("message", "")) else "cap") for r in runs]
    for reason in ("budget", "cap", "start"):
        if reason in stops:
            return reason
    return "converged"


def median_distance(X: np.ndarray, rng: np.random.Generator, pairs: int = 4000) -> float:
    """The median distance between random pairs of rows of X (ℓ = 1 on d standardised inputs
    puts most pairs at r² ≈ 2d, where K ≈ 0 and the gradient vanishes; :func:`learn` starts
    from half this distance)."""
    a, b = rng.integers(0, len(X), size=(2, pairs))
    d = np.sqrt(((X[a] - X[b]) ** 2).sum(1))
    d = d[d > 0]
    return float(np.median(d)) if len(d) else 1.0


def median_theta(params: Parameters, X: np.ndarray, y: np.ndarray, lam: float,
                 rng: np.random.Generator) -> np.ndarray:
    """θ of the median-heuristic start (module docstring): the variance at var(y), every
    length scale at half the median distance between rows of X (:func:`median_distance`),
    σ² = ``lam``; clipped to the bounds box."""
    theta = np.empty(params.n_lengths + 2)
    theta[0] = math.log(max(float(np.var(y)), BOUNDS[0]))
    theta[1:-1] = math.log(0.5 * median_distance(X, rng))
    theta[-1] = math.log(lam)
    return np.clip(theta, *np.log(BOUNDS))


def median_start(X: np.ndarray, y: np.ndarray, kernel: Kernel, lam: float,
                 rng: np.random.Generator) -> tuple[Kernel, float]:
    """(kernel, σ²) of the median-heuristic start (:func:`median_theta`) in ``kernel``'s family,
    ARD if ``kernel`` has one length scale per input: the first start of :func:`learn`, for a
    method that learns by itself (the peers' ``starts``)."""
    X = np.asarray(X, dtype=np.float64)
    params = Parameters.of(kernel, X.shape[1], kernel.lengthscales is not None)
    return params.kernel(median_theta(params, X, np.asarray(y, dtype=np.float64), lam, rng))


# square arrays alive in one dense evaluation, at most: the Matérns' and the Laplacian's distances,
# exponentials, K and G beside the array factored in place (the RBF: that one array)
DENSE_ARRAYS = 5


def memory_bytes(options: Mapping[str, Any], n: int) -> tuple[float, str]:
    """(bytes, what they hold) of one marginal-likelihood evaluation of ``options["method"]``
    on n training points: the dense form's :data:`DENSE_ARRAYS` square arrays (on every point
    or on the subset), the low-rank form's seven m × n arrays."""
    if options["method"] == "lowrank":
        m = min(options["basis"], n)
        return 7 * 8.0 * m * n, f"7 arrays of {m}×{n}"
    rows = n if options["method"] == "exact" else min(options["subset"], n)
    return DENSE_ARRAYS * 8.0 * rows * rows, f"{DENSE_ARRAYS} arrays of {rows}×{rows}"


def at_bound(theta: np.ndarray, names: list[str], fraction: float = 0.01) -> list[str]:
    """The names of the log-parameters ``theta`` within ``fraction`` of the log-width of the
    bounds box of a bound, each as ``name=lower`` or ``name=upper``."""
    lo, hi = np.log(BOUNDS)
    near = fraction * (hi - lo)
    return [f"{name}={'lower' if t - lo <= near else 'upper'}"
            for name, t in zip(names, theta, strict=True) if t - lo <= near or hi - t <= near]


def standard_theta(params: Parameters, d: int, lam: float) -> np.ndarray:
    """θ of the data-independent start (``init="standard"``): the variance at 1 and every
    length scale at √(d/2), σ² = ``lam``; clipped to the bounds box. On d standardised inputs
    the distance between two rows is about √(2d) (r² is a sum of d terms of mean 2), so
    √(d/2) is the median heuristic's half median distance computed from d alone: the start
    depends on no training row and on no other method's learning."""
    theta = np.empty(params.n_lengths + 2)
    theta[0] = 0.0
    theta[1:-1] = 0.5 * math.log(max(d, 1) / 2.0)
    theta[-1] = math.log(lam)
    return np.clip(theta, *np.log(BOUNDS))


def standard_start(d: int, kernel: Kernel, lam: float) -> tuple[Kernel, float]:
    """(kernel, σ²) of the data-independent start (:func:`standard_theta`) in ``kernel``'s
    family, ARD if ``kernel`` has one length scale per input: the same start for a method that
    learns by itself (the peers' ``starts=standard``) as for ``hyper.init=standard``."""
    params = Parameters.of(kernel, d, kernel.lengthscales is not None)
    return params.kernel(standard_theta(params, d, lam))


def learn(X: np.ndarray, y: np.ndarray, kernel: Kernel, lam: float, *,
          rng: np.random.Generator, method: str = "subset", subset: int = 2000,
          basis: int = 512, bound: str = "vfe", restarts: int = 5, ard: bool = False,
          max_iter: int = 1000, init: str = "median", center_y: bool = True,
          extra_starts: Sequence[tuple[Kernel, float]] = (),
          budget_seconds: float | None = None) -> Learned:
    """Maximise the marginal likelihood of ``method`` (:data:`METHODS`) from the first start
    (``init``; none with ``init="shared"``), then from each (kernel, σ²) of ``extra_starts``
    (e.g. a kernel learned by another method) and from ``restarts`` log-uniform random starts
    over the bounds box; keep the best (module docstring). With ``method=lowrank`` every start
    chooses its own basis (pivoted Cholesky of the kernel at that start). With ``center_y``
    the targets' mean is subtracted first (``Learned.y_offset``). ``Learned.seconds`` is its
    wall time, ``Learned.cpu_seconds`` the process's CPU time meanwhile (every thread). With
    ``budget_seconds``, a run stops at the end of the first iteration past that wall time
    (its iterate kept, ``stop`` = ``budget``) and the starts after it are not run."""
    start, cpu_start = time.perf_counter(), time.process_time()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = X.shape
    params = Parameters.of(kernel, d, ard)
    y_offset = float(np.mean(y)) if center_y and n else 0.0
    y = y - y_offset
    if method not in METHODS:
        raise InputError(f"hyper.method={method!r}: pass one of {', '.join(METHODS)}")
    if method == "subset" and n > subset:
        rows = np.sort(rng.choice(n, size=subset, replace=False))
        X, y = X[rows], y[rows]
    starts = _starts(params, X, y, kernel, lam, rng, init, extra_starts,
                     restarts if max_iter else 0)
    runs = _Runs(X, y, params, method, basis, bound, starts,
                 None if budget_seconds is None else start + float(budget_seconds))
    for run in range(len(starts)):
        if runs.spent() and runs.runs:  # the budget is spent: no further start
            break
        runs.optimise(run, max_iter)
    if runs.best is None:
        raise InputError(f"hyper=ml: the marginal likelihood could not be evaluated from kernel "
                         f"{kernel}, lam={lam} (K + σ²I not positive definite at every start); "
                         "pass a larger lam or another kernel scale")
    value, theta, best_run = runs.best
    learned, learned_lam = params.kernel(theta)
    n_basis, jitter = runs.basis_of_run[best_run]  # method=lowrank: the best run's basis
    trace = {"run": np.array(runs.rows_run, dtype=np.int64),
             "log_marginal_likelihood": np.array(runs.rows_value),
             "theta": np.array(runs.rows_theta)}
    return Learned(learned, learned_lam, value, len(y), time.perf_counter() - start,
                   params.names(), trace, runs.runs, y_offset, at_bound(theta, params.names()),
                   method, n_basis, jitter, time.process_time() - cpu_start)


def _starts(params: Parameters, X: np.ndarray, y: np.ndarray, kernel: Kernel, lam: float,
            rng: np.random.Generator, init: str, extra_starts: Sequence[tuple[Kernel, float]],
            restarts: int) -> list[np.ndarray]:
    """The runs' starting θ: the first start (``init``), the given ones, then ``restarts``
    log-uniform random ones over the bounds box."""
    d = X.shape[1]
    log_bounds = np.log(BOUNDS)
    given = [np.clip(params.theta(k, s2, d), *log_bounds) for k, s2 in extra_starts]
    if init == "shared":  # no start of its own: the given ones (another learning's optimum)
        if not given:
            raise InputError("hyper.init=shared starts from another learning's optimum only: "
                             "pass hyper.shared_start (e.g. '{subset: 2000}'), or "
                             "hyper.init=median")
        own = []
    else:
        own = [median_theta(params, X, y, lam, rng) if init == "median"
               else standard_theta(params, d, lam) if init == "standard"
               else np.clip(params.theta(kernel, lam, d), *log_bounds)]
    starts = own + given
    return starts + [rng.uniform(*log_bounds, size=len(starts[0])) for _ in range(restarts)]


class _Runs:
    """The L-BFGS-B runs of :func:`learn`, one per start: every evaluation traced, the best
    optimum kept, and with ``method=lowrank`` each run's basis (chosen at its start)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, params: Parameters, method: str,
                 basis: int, bound: str, starts: list[np.ndarray],
                 deadline: float | None = None) -> None:
        self.X, self.y, self.params, self.method = X, y, params, method
        self.deadline = deadline  # perf_counter() past which no iteration starts
        self.basis, self.bound, self.starts = basis, bound, starts
        self.objectives: dict[int, LowRankObjective] = {}
        self.rows_run: list[int] = []
        self.rows_value: list[float] = []
        self.rows_theta: list[np.ndarray] = []
        self.runs: list[dict] = []
        self.best: tuple[float, np.ndarray, int] | None = None
        self.basis_of_run: dict[int, tuple[int, float]] = {}

    def objective_at(self, run: int):
        """The run's objective: with method=lowrank, Titsias' bound on a basis chosen by
        pivoted Cholesky at the run's start (then fixed), else the dense likelihood."""
        if self.method != "lowrank":
            return functools.partial(log_marginal_likelihood, self.X, self.y, self.params)
        if run not in self.objectives:
            kernel = self.params.kernel(self.starts[run])[0]
            chosen = pivoted_basis(self.X, kernel, self.basis)
            self.objectives[run] = LowRankObjective(self.X, self.y, self.X[chosen],
                                                    self.params, self.bound)
        return self.objectives[run]

    def objective(self, theta: np.ndarray, run: int) -> tuple[float, np.ndarray]:
        """(−log likelihood, its gradient) for L-BFGS-B; traced."""
        try:
            value, grad = self.objective_at(run)(theta)
        except np.linalg.LinAlgError:  # K_y not positive definite: a step too far
            value, grad = -math.inf, np.zeros(len(theta))
        self.rows_run.append(run)
        self.rows_value.append(value)
        self.rows_theta.append(theta.copy())
        return (-value if math.isfinite(value) else 1e300), -grad

    def spent(self) -> bool:
        """Whether the learning's budget (its deadline) has passed."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _callback(self, intermediate_result) -> None:
        """Stop L-BFGS-B at the end of an iteration once the budget is spent (scipy ≥ 1.11
        keeps the iterate and reports ``success`` False)."""
        if self.spent():
            raise StopIteration

    def optimise(self, run: int, max_iter: int) -> None:
        """Run ``run`` from its start (evaluated only, with max_iter = 0) and keep its
        optimum if it is the best so far."""
        theta = self.starts[run]
        if not max_iter:  # the first start, evaluated, not optimised
            value = -self.objective(theta, run)[0]
            self.runs.append({"run": run, "log_marginal_likelihood": value, "iterations": 0,
                              "converged": False, "message": "not optimised (max_iter = 0)"})
        else:
            from scipy.optimize import minimize  # here: ~0.13 s of import a fixed-kernel job skips

            log_bounds = tuple(np.log(BOUNDS))
            res = minimize(self.objective, theta, args=(run,), jac=True, method="L-BFGS-B",
                           bounds=[log_bounds] * len(theta), options={"maxiter": max_iter},
                           callback=self._callback if self.deadline is not None else None)
            value, theta = -float(res.fun), res.x
            budget = self.spent() and not res.success
            self.runs.append({"run": run, "log_marginal_likelihood": value,
                              "iterations": int(res.nit), "converged": bool(res.success),
                              "message": str(res.message),
                              "stop": "budget" if budget else
                              "converged" if res.success else "cap"})
        if math.isfinite(value) and value > -1e299 and (self.best is None
                                                         or value > self.best[0]):
            self.best = (value, theta, run)
        # one run's arrays at a time
        self.basis_of_run[run] = _basis_of(self.objectives.pop(run, None))


def _basis_of(objective: LowRankObjective | None) -> tuple[int, float]:
    """(basis points, largest jitter added to K_mm) of a low-rank run's objective; (0, 0) for
    the dense likelihood."""
    return (0, 0.0) if objective is None else (len(objective.Z), float(objective.jitter))
