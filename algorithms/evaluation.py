"""The one evaluator: per-step trace rows, test metrics and timing for every algorithm.

An algorithm reports each step to a :class:`Recorder` with its diagnostics and a predictor of
its current state (benchopt's ``Objective.compute``); the recorder times the step, evaluates
the predictor on the test set every ``eval_every`` steps (RMSE, and NLPD and ±2σ coverage where
the predictor has a variance) and keeps the time spent evaluating out of ``seconds`` (wall
clock) and ``cpu_seconds`` (the process's CPU time, every thread of it:
:func:`time.process_time`; above ``seconds`` when BLAS or the kernel tiles run on several
threads, below it when the process waits).
:func:`run` validates the inputs and options of a registered algorithm, runs it, evaluates its
final predictor and returns the immutable :class:`~algorithms.contract.Fit`.

Non-finite arithmetic is handled here once for every algorithm (:func:`numerical_guard`): the
fit and its evaluation run with numpy's overflow/invalid/divide raising, a NaN/inf final
coefficient or applicable summary value counts as the same breakdown, and each becomes one
:class:`~algorithms.errors.InputError` naming ``lam`` and the kernel, never a traceback.
"""

from __future__ import annotations

import importlib.util
import math
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import psutil

from algorithms.contract import (
    EVALUATOR_OPTIONS,
    SIZE_OPTION,
    TASK_METRICS,
    AlgorithmSpec,
    Fit,
    Prediction,
    Predictor,
    Solution,
    check_kappa,
    check_lam,
    check_targets,
    check_test,
    distinct_rows,
    summary_keys,
    trace_keys,
)
from algorithms.errors import InputError, TooLarge
from algorithms.kernel_threads import lead_blas
from algorithms.kernels import Kernel
from algorithms.options import clip_to_n, validate
from algorithms.registry import get

PROB_FLOOR = float(np.finfo(np.float64).eps)  # log loss: p clipped to [eps, 1 − eps]


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def gaussian_nlpd(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Mean negative log predictive density of y under N(mean, var)."""
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def coverage_2sd(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Fraction of targets inside mean ± 2·sd (calibration of the error bars; 0.954 if exact)."""
    return float(np.mean(np.abs(y - mean) <= 2.0 * np.sqrt(var)))


def mean_predictor_metrics(y_train: np.ndarray, y_test: np.ndarray) -> dict[str, float]:
    """The training-mean predictor on the test targets: ``baseline_test_rmse`` of the constant
    ȳ_train and ``baseline_test_nlpd`` under N(ȳ_train, var(y_train)) (the variance with
    divisor n, the Gaussian's maximum-likelihood fit to the training targets; absent for
    constant training targets, whose variance is 0). A model that does not beat these has
    learned nothing from the inputs."""
    y_train = np.asarray(y_train, dtype=np.float64)
    y_test = np.asarray(y_test, dtype=np.float64)
    mean, var = float(np.mean(y_train)), float(np.var(y_train))
    out = {"baseline_test_rmse": rmse(np.full(len(y_test), mean), y_test)}
    if var > 0.0:
        out["baseline_test_nlpd"] = gaussian_nlpd(y_test, np.full(len(y_test), mean),
                                                  np.full(len(y_test), var))
    return out


def classification_metrics(prob: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Error rate of the decision p ≥ ½ ⇒ +1, log loss −mean log p(y_i | x_i) (p clipped to
    [eps, 1 − eps], as scikit-learn's ``log_loss``) and Brier score mean (p − [y = +1])², for
    labels y ∈ {−1, +1} and p = p(y = +1 | x)."""
    prob = np.asarray(prob, dtype=np.float64)
    positive = np.asarray(y) > 0
    p_true = np.clip(np.where(positive, prob, 1.0 - prob), PROB_FLOOR, 1.0 - PROB_FLOOR)
    return {"test_error_rate": float(np.mean((prob >= 0.5) != positive)),
            "test_log_loss": float(-np.mean(np.log(p_true))),
            "test_brier": float(np.mean((prob - positive) ** 2))}


VAR_FLOOR_RTOL = 1e-6  # relative round-off allowed below σ² before a variance counts as lost


def var_below_noise(var: np.ndarray, lam: float) -> float:
    """The fraction of rows whose predictive variance of y is below the noise σ² = ``lam``
    (less :data:`VAR_FLOOR_RTOL` of it). A GP's is k** − (a PSD form) + σ² with the first two
    together the latent variance, never negative: a variance below σ² is digits lost to
    round-off (GPyTorch's SGPR at a small σ², docs/uci_frontier_notes.md), and its NLPD is
    then not the method's."""
    var = np.asarray(var, dtype=np.float64)
    if not len(var) or not np.isfinite(lam):
        return math.nan
    return float(np.mean(var < lam * (1.0 - VAR_FLOOR_RTOL)))


def metrics(prediction: Prediction, y: np.ndarray, task: str = "regression"
            ) -> dict[str, float]:
    """The test metrics of ``task`` (:data:`~algorithms.contract.TASK_METRICS`); NaN where the
    prediction lacks what a metric needs (a variance, a probability)."""
    out = dict.fromkeys(TASK_METRICS[task], math.nan)
    if task == "classification":
        if prediction.prob is not None:
            out.update(classification_metrics(prediction.prob, y))
        return out
    out["test_rmse"] = rmse(prediction.mean, y)
    if prediction.var is not None:
        out["test_nlpd"] = gaussian_nlpd(y, prediction.mean, prediction.var)
        out["test_coverage_2sd"] = coverage_2sd(y, prediction.mean, prediction.var)
    return out


class MemoryProfile:
    """Peak bytes allocated through Python's allocators (numpy arrays included) above the
    level at the last :meth:`reset`, by :mod:`tracemalloc`; a context manager that starts and
    stops tracing (unless it was already running). BLAS/LAPACK workspace outside numpy is not
    counted; it is O(block) for every algorithm here."""

    def __enter__(self) -> MemoryProfile:
        self.started = not tracemalloc.is_tracing()
        if self.started:
            tracemalloc.start()
        self.reset()
        return self

    def reset(self) -> None:
        tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]

    def peak(self) -> float:
        return float(tracemalloc.get_traced_memory()[1] - self.base)

    def __exit__(self, *exc) -> None:
        if self.started:
            tracemalloc.stop()


class Recorder:
    """Trace rows of one run; see the module docstring. ``test`` is (X_test, y_test) or None;
    ``task`` chooses the metrics (regression or classification)."""

    def __init__(self, test: tuple[np.ndarray, np.ndarray] | None = None,
                 eval_every: int = 1, task: str = "regression") -> None:
        self.test = test
        self.eval_every = eval_every
        self.task = task
        self.metric_keys = TASK_METRICS[task]
        self.rows: list[dict[str, float]] = []
        self.eval_seconds = 0.0
        self.eval_cpu_seconds = 0.0
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()
        Recorder.latest = weakref.ref(self)  # the running fit's steps, for a progress display
        self.expected_steps: int | None = None  # set by a fit that knows how many it takes

    latest: weakref.ref[Recorder] | None = None

    @property
    def test_inputs(self) -> np.ndarray | None:
        """X_test, for diagnostics that are about test points (SGMA's per-point error-bar
        basis sizes); None without a test set."""
        return None if self.test is None else self.test[0]

    def elapsed(self) -> float:
        """Seconds of the algorithm's own work so far (evaluation excluded)."""
        return time.perf_counter() - self.start - self.eval_seconds

    def cpu_elapsed(self) -> float:
        """CPU seconds of the process (all its threads) so far, evaluation excluded as in
        :meth:`elapsed`."""
        return time.process_time() - self.cpu_start - self.eval_cpu_seconds

    @contextmanager
    def _excluded(self) -> Iterator[None]:
        """Leave the wall and CPU seconds of the block out of :meth:`elapsed` and
        :meth:`cpu_elapsed`."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.eval_seconds += time.perf_counter() - t0
            self.eval_cpu_seconds += time.process_time() - c0

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Work that is not the algorithm's own (the exact reference solve behind its
        suboptimality diagnostics): its seconds are left out of :meth:`elapsed` (and its CPU
        seconds out of :meth:`cpu_elapsed`), as the test evaluations' are."""
        with self._excluded():
            yield

    def step(self, predict: Predictor | None = None, **values: float) -> None:
        """Record one step: its diagnostics (``n_basis``, ``objective``, ``gap``, ...) and,
        on evaluation steps, the test metrics of ``predict`` (the predictor of this step)."""
        row = {"seconds": self.elapsed(), "cpu_seconds": self.cpu_elapsed(),
               **{k: float(v) for k, v in values.items()},
               **dict.fromkeys(self.metric_keys, math.nan)}
        if (self.test is not None and predict is not None
                and (len(self.rows) + 1) % self.eval_every == 0):
            row.update(self._evaluate(predict))
        self.rows.append(row)

    def _evaluate(self, predict: Predictor) -> dict[str, float]:
        with self._excluded():
            return metrics(predict(self.test[0]), self.test[1], self.task)

    def trace(self) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(k for row in self.rows for k in row))
        return {k: np.array([row.get(k, math.nan) for row in self.rows], dtype=np.float64)
                for k in keys}

    def _evaluate_final(self, solution: Solution, memory: MemoryProfile | None
                        ) -> tuple[dict[str, float], dict[str, float]]:
        """Test metrics of the final predictor, and the cost of predicting on the test set:
        seconds (and, profiled, peak bytes) of the mean and of the error bars separately
        (004 Table 1 rows "Prediction: Mean / Error Bars")."""
        X, y = self.test
        costs: dict[str, float] = {}
        if memory is not None:
            memory.reset()
        t0 = time.perf_counter()
        mean = solution.mean(X)
        costs["predict_mean_seconds"] = time.perf_counter() - t0
        if memory is not None:
            costs["predict_mean_peak_bytes"] = memory.peak()
        var = prob = None
        if solution.probability is not None:
            t0 = time.perf_counter()
            prob = solution.probability(X)
            costs["predict_prob_seconds"] = time.perf_counter() - t0
        elif solution.variance_bounds is not None:
            if memory is not None:
                memory.reset()
            t0 = time.perf_counter()
            var = solution.variance_bounds(X)[1]
            costs["predict_var_seconds"] = time.perf_counter() - t0
            if memory is not None:
                costs["predict_var_peak_bytes"] = memory.peak()
            costs["test_var_below_noise"] = var_below_noise(var, solution.lam)
        return metrics(Prediction(mean, var, prob), y, self.task), costs

    def finish(self, name: str, solution: Solution,
               memory: MemoryProfile | None = None) -> Fit:
        """The immutable Fit: the final predictor scored on the test set (also the metrics of
        the last trace step, whose state it is), reasons for what does not apply. With
        ``memory`` (a running :class:`MemoryProfile`), the fit's peak is read first."""
        keys = self.metric_keys
        final: dict[str, float] = dict.fromkeys(keys, math.nan)
        costs: dict[str, float] = {}
        if memory is not None:
            costs["fit_peak_bytes"] = memory.peak()
        reasons = dict(solution.not_applicable)
        if self.test is not None and len(solution.coef):
            final, more = self._evaluate_final(solution, memory)
            costs.update(more)
            if self.rows:  # the last step's state is the final one: score it in full
                self.rows[-1].update(final)
        if self.test is None:
            reasons.update(dict.fromkeys(keys, "no test set"))
        elif not len(solution.coef):
            reasons.update(dict.fromkeys(keys, "the fit selected no basis function"))
        elif self.task == "classification":
            if solution.probability is None:
                reasons.update(dict.fromkeys(keys, f"{name} gives no class probabilities"))
        elif solution.variance_bounds is None:
            why = reasons.get("variance", f"{name} has no predictive variance")
            reasons.update({"test_nlpd": why, "test_coverage_2sd": why})
        trace = self.trace()
        n_steps = len(self.rows)
        for key in trace_keys(self.task):
            trace.setdefault(key, np.full(n_steps, np.nan))
        summary = {"seconds": float(trace["seconds"][-1]) if n_steps else 0.0,
                   "cpu_seconds": float(trace["cpu_seconds"][-1]) if n_steps else 0.0,
                   **solution.summary, **final, **costs}
        _check_finite(solution, summary, reasons, self.task)
        return Fit(name, trace, summary, reasons, solution, self.task)


def _check_finite(solution: Solution, summary: Mapping[str, Any],
                  reasons: Mapping[str, str], task: str) -> None:
    """FloatingPointError if the coefficients, or a required summary value that applies, are
    NaN/inf: the arithmetic broke down (converted by :func:`numerical_guard`)."""
    if not np.isfinite(solution.coef).all():
        raise FloatingPointError("the coefficients are NaN/inf")
    for key in summary_keys(task):
        value = summary[key]
        if (isinstance(value, (float, np.floating)) and not math.isfinite(value)
                and key not in reasons):
            raise FloatingPointError(f"{key} = {value}")


def check_lam_scale(lam: float, kernel: Kernel, diag: np.ndarray) -> None:
    """Refuse a noise variance σ² = ``lam`` that float64 cannot combine with the kernel's scale
    s = max k(x,x) (``diag`` on the training inputs): below eps·s, s + σ² rounds to s and
    K + σ²I is K (as if σ² = 0: an interpolation problem, singular for repeated inputs); above
    s/eps, K + σ²I rounds to σ²I and the fit is the prior (every gap of 002 stays at 2)."""
    scale = float(np.max(diag, initial=0.0))
    eps = float(np.finfo(np.float64).eps)
    if not 0.0 < scale < math.inf:
        return
    where = f"with kernel {kernel} (max k(x,x) = {scale:.3g})"
    if lam < eps * scale:
        raise InputError(f"lam={lam:g} is below the float64 resolution of K + lam·I {where}: it "
                         f"rounds to K; pass a larger lam (≥ {eps * scale:.2g}), e.g. "
                         f"lam={1e-3 * scale:.3g}")
    if lam > scale / eps:
        raise InputError(f"lam={lam:g} swamps the kernel in K + lam·I {where}: it rounds to "
                         f"lam·I; pass a smaller lam (≤ {scale / eps:.2g}), e.g. lam={scale:.3g}")


NUMERICAL_ERRORS = (FloatingPointError, OverflowError, ZeroDivisionError, np.linalg.LinAlgError)


@contextmanager
def numerical_guard(owner: str, kernel: Kernel, lam: float,
                    diag: Callable[[], np.ndarray], task: str = "regression") -> Iterator[None]:
    """Run numerics with numpy's overflow, invalid and divide-by-zero raising, and turn any
    breakdown of the arithmetic (:data:`NUMERICAL_ERRORS`) into one :class:`InputError` that
    names ``lam`` and ``kernel`` and says which way to move lam; ``diag`` gives the kernel's
    diagonal k(x,x) on the data (its scale, for the advice)."""
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            yield
    except NUMERICAL_ERRORS as err:
        if task == "classification":  # no noise variance: only the kernel can be at fault
            why = " ".join(str(err).split())[:100]
            raise InputError(f"{owner}: the arithmetic broke down ({why}) with kernel {kernel}; "
                             "pass other kernel parameters (e.g. a smaller kernel.variance or "
                             "a longer length scale)") from None
        raise numerical_error(owner, kernel, lam, diag, err) from None


def numerical_error(owner: str, kernel: Kernel, lam: float, diag: Callable[[], np.ndarray],
                    err: BaseException) -> InputError:
    """The one-line error for non-finite arithmetic at noise variance ``lam``: σ² far below the
    kernel's scale max k(x,x) makes K + σ²I numerically singular, far above it overflows the
    fit (002 eq. 5: L has terms in σ²K and KᵀK); in between, the kernel parameters are the
    suspects."""
    with np.errstate(all="ignore"):
        scale = float(np.max(diag(), initial=0.0))
    why = "overflow" if isinstance(err, OverflowError) else " ".join(str(err).split())[:100]
    if 0.0 < scale < math.inf and lam < 1e-6 * scale:
        fix = f"pass a larger lam, e.g. lam={1e-3 * scale:.3g} (max k(x,x) = {scale:.3g})"
    elif 0.0 < scale < math.inf and lam > 1e6 * scale:
        fix = f"pass a smaller lam, e.g. lam={scale:.3g} (max k(x,x) = {scale:.3g})"
    else:
        fix = "pass a larger lam or other kernel parameters"
    return InputError(f"{owner}: the arithmetic broke down ({why}) with lam={lam:g} and kernel "
                      f"{kernel}; {fix}")


def run(algorithm: str | AlgorithmSpec, blocks, y: np.ndarray, *, lam: float,
        kappa: int | None = None, rng: np.random.Generator | int | None = None,
        test: tuple[np.ndarray, np.ndarray] | None = None, profile_memory: bool = False,
        **options: Any) -> Fit:
    """Fit a registered algorithm (by name or spec) and evaluate it.

    Parameters
    ----------
    algorithm : name or spec.
    blocks : KernelBlocks over the n training inputs.
    y : (n,) targets.
    lam : noise variance σ² > 0.
    kappa : candidate-subset size κ (algorithms with ``uses_kappa``; ignored otherwise).
    rng : random generator or seed (default seed 0).
    test : optional (X_test (n_test, d), y_test (n_test,)) for the test metrics.
    profile_memory : also record the peak memory of the fit (``fit_peak_bytes``, trace
        evaluations included) and of predicting the test mean and error bars
        (``predict_mean_peak_bytes``, ``predict_var_peak_bytes``) with :class:`MemoryProfile`.
        The seconds of predicting (``predict_mean_seconds``, ``predict_var_seconds``) are
        always recorded when there is a test set.
    **options : the algorithm's options (``algorithm.<option>``); others take their defaults.

    Raises
    ------
    InputError
        Bad inputs or options, a kernel that is NaN/inf on the data, or arithmetic that broke
        down at this ``lam`` (FloatingPointError, LinAlgError, a NaN/inf result; one line).
    """
    spec = get(algorithm) if isinstance(algorithm, str) else algorithm
    lam = check_lam(lam)
    if spec.task == "regression":  # a classifier has no noise variance: lam is not used
        check_lam_scale(lam, blocks.kernel, blocks.diag())
    y = check_targets(y, blocks.n)
    test = check_test(test, blocks.d)
    if spec.task == "classification":
        check_labels(y, "y")
        if test is not None:
            check_labels(test[1], "y_test")
    opts, clipped = clip_to_n(spec.options, options_of(spec, options), blocks.n,
                              prefix="algorithm.")
    distinct = (len(distinct_rows(blocks.inputs(slice(None)))[0]) if spec.distinct_inputs
                else None)
    check_size(spec, blocks.n, blocks.d, opts, distinct=distinct,
               available=math.inf if blocks.memory_on_device else None)
    if spec.uses_kappa:
        opts["kappa"] = check_kappa(kappa, blocks.n)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng or 0)
    recorder = Recorder(test, **{k: opts.pop(k) for k in EVALUATOR_OPTIONS if k in opts},
                        task=spec.task)
    with numerical_guard(spec.owner, blocks.kernel, lam, blocks.diag, spec.task), \
            lead_blas(spec.blas_lead), \
            (MemoryProfile() if profile_memory else nullcontext()) as memory:
        solution = spec.fit(blocks, y, lam=lam, rng=rng, recorder=recorder, **opts)
        fit = recorder.finish(spec.name, solution, memory)
    return fit.with_summary(clipped_options=clipped) if clipped else fit


def check_labels(y: np.ndarray, name: str) -> None:
    """A binary classifier's labels must be −1 and +1."""
    bad = ~np.isin(y, (-1.0, 1.0))
    if bad.any():
        raise InputError(f"{name} has {int(bad.sum())} labels outside {{-1, +1}} (first "
                         f"{float(y[bad][0])!r} at index {int(np.flatnonzero(bad)[0])}); a "
                         "binary classifier needs labels -1 and +1 (a classification dataset)")


def check_size(spec: AlgorithmSpec, n: int, d: int, options: Mapping[str, Any],
               available: float | None = None, distinct: int | None = None) -> None:
    """Refuse a fit on n training points of dimension d that is too large: n above the spec's
    :data:`~algorithms.contract.SIZE_OPTION` (``max_n``), or a declared memory need
    (``spec.memory_bytes``) above the ``available`` bytes (default: the memory the OS can give
    now, psutil's ``virtual_memory().available``), in one line naming ``spec.too_large`` (what
    to run instead) first. For a spec that merges equal inputs (``spec.distinct_inputs``) both
    are of ``distinct``, the number of distinct training inputs, where it is known. Needs only
    n, d (and that number), so the pipeline calls it before ingesting the data; :func:`run`
    calls it too."""
    rows = distinct if spec.distinct_inputs and distinct is not None else n
    what = f"n_train={n}" if rows == n else f"n_train={n} ({rows} distinct inputs)"
    need = None if spec.memory_bytes is None else float(spec.memory_bytes(rows, d, options))
    needs = "" if need is None else f" (a fit needs {_size(need)} of memory)"
    instead = f"{spec.too_large}, a sparse algorithm" if spec.too_large else "a sparse algorithm"
    limit = options.get(SIZE_OPTION)
    if limit is not None and rows > limit:
        raise TooLarge(f"{spec.owner}: {what} exceeds algorithm.{SIZE_OPTION}={limit}"
                         f"{needs}; use {instead}, fewer training points "
                         f"(dataset.n_train) or raise algorithm.{SIZE_OPTION}")
    if need is None:
        return
    available = psutil.virtual_memory().available if available is None else available
    if need > available:
        raise TooLarge(f"{spec.owner}: a fit on {what} needs {_size(need)} of memory but "
                         f"{_size(available)} is available; use {instead} or fewer "
                         "training points (dataset.n_train)")


def _size(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.1f} MiB"


def options_of(spec: AlgorithmSpec, given: Mapping[str, Any]) -> dict[str, Any]:
    """The validated options of ``spec`` (defaults filled in). First, every optional library
    the spec requires must be installed (:func:`check_requires`): the pipeline validates the
    options before it reads any data, so a missing one stops a job before its ingest."""
    check_requires(spec)
    return validate(spec.options, given, owner=spec.owner, prefix="algorithm.")


def check_requires(spec: AlgorithmSpec) -> None:
    """One-line InputError naming the first library of ``spec.requires`` that is not installed
    and the extra that installs it (found with importlib, without importing it)."""
    for need in spec.requires:
        try:
            found = importlib.util.find_spec(need.module) is not None
        except (ImportError, ValueError):  # a parent package missing, or a broken entry
            found = False
        if not found:
            fix = f"pip install -e '.[{need.extra}]'" if need.extra else \
                "pip install -e . (a dependency of the package: the install is incomplete)"
            raise InputError(f"{spec.owner} needs {need.library}: {fix}")
