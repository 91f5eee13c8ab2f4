"""The one evaluator: per-step trace rows, test metrics and timing for every algorithm.

An algorithm reports each step to a :class:`Recorder` with its diagnostics and a predictor of
its current state (benchopt's ``Objective.compute``); the recorder times the step, evaluates
the predictor on the test set every ``eval_every`` steps (RMSE, and NLPD and ±2σ coverage where
the predictor has a variance) and keeps the time spent evaluating out of ``seconds``.
:func:`run` validates the inputs and options of a registered algorithm, runs it, evaluates its
final predictor and returns the immutable :class:`~algorithms.contract.Fit`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.contract import (
    EVALUATOR_OPTIONS,
    TRACE_KEYS,
    AlgorithmSpec,
    Fit,
    Prediction,
    Predictor,
    Solution,
    check_kappa,
    check_lam,
    check_targets,
    check_test,
)
from algorithms.options import validate
from algorithms.registry import get

METRICS = ("test_rmse", "test_nlpd", "test_coverage_2sd")


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def gaussian_nlpd(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Mean negative log predictive density of y under N(mean, var)."""
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def coverage_2sd(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Fraction of targets inside mean ± 2·sd (calibration of the error bars; 0.954 if exact)."""
    return float(np.mean(np.abs(y - mean) <= 2.0 * np.sqrt(var)))


def metrics(prediction: Prediction, y: np.ndarray) -> dict[str, float]:
    out = {"test_rmse": rmse(prediction.mean, y), "test_nlpd": math.nan,
           "test_coverage_2sd": math.nan}
    if prediction.var is not None:
        out["test_nlpd"] = gaussian_nlpd(y, prediction.mean, prediction.var)
        out["test_coverage_2sd"] = coverage_2sd(y, prediction.mean, prediction.var)
    return out


class Recorder:
    """Trace rows of one run; see the module docstring. ``test`` is (X_test, y_test) or None."""

    def __init__(self, test: tuple[np.ndarray, np.ndarray] | None = None,
                 eval_every: int = 1) -> None:
        self.test = test
        self.eval_every = eval_every
        self.rows: list[dict[str, float]] = []
        self.eval_seconds = 0.0
        self.start = time.perf_counter()

    @property
    def test_inputs(self) -> np.ndarray | None:
        """X_test, for diagnostics that are about test points (SGMA's per-point error-bar
        basis sizes); None without a test set."""
        return None if self.test is None else self.test[0]

    def elapsed(self) -> float:
        """Seconds of the algorithm's own work so far (evaluation excluded)."""
        return time.perf_counter() - self.start - self.eval_seconds

    def step(self, predict: Predictor | None = None, **values: float) -> None:
        """Record one step: its diagnostics (``n_basis``, ``objective``, ``gap``, ...) and,
        on evaluation steps, the test metrics of ``predict`` (the predictor of this step)."""
        row = {"seconds": self.elapsed(), **{k: float(v) for k, v in values.items()},
               **dict.fromkeys(METRICS, math.nan)}
        if (self.test is not None and predict is not None
                and (len(self.rows) + 1) % self.eval_every == 0):
            row.update(self._evaluate(predict))
        self.rows.append(row)

    def _evaluate(self, predict: Predictor) -> dict[str, float]:
        t0 = time.perf_counter()
        out = metrics(predict(self.test[0]), self.test[1])
        self.eval_seconds += time.perf_counter() - t0
        return out

    def trace(self) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(k for row in self.rows for k in row))
        return {k: np.array([row.get(k, math.nan) for row in self.rows], dtype=np.float64)
                for k in keys}

    def finish(self, name: str, solution: Solution) -> Fit:
        """The immutable Fit: the final predictor scored on the test set (also the metrics of
        the last trace step, whose state it is), reasons for what does not apply."""
        final: dict[str, float] = dict.fromkeys(METRICS, math.nan)
        reasons = dict(solution.not_applicable)
        if self.test is not None and len(solution.coef):
            final = self._evaluate(solution.predict)
            if self.rows:  # the last step's state is the final one: score it in full
                self.rows[-1].update(final)
        if self.test is None:
            reasons.update(dict.fromkeys(METRICS, "no test set"))
        elif not len(solution.coef):
            reasons.update(dict.fromkeys(METRICS, "the fit selected no basis function"))
        elif solution.variance_bounds is None:
            why = reasons.get("variance", f"{name} has no predictive variance")
            reasons.update({"test_nlpd": why, "test_coverage_2sd": why})
        trace = self.trace()
        n_steps = len(self.rows)
        for key in TRACE_KEYS:
            trace.setdefault(key, np.full(n_steps, np.nan))
        summary = {"seconds": float(trace["seconds"][-1]) if n_steps else 0.0,
                   **solution.summary, **final}
        return Fit(name, trace, summary, reasons, solution)


def run(algorithm: str | AlgorithmSpec, blocks, y: np.ndarray, *, lam: float,
        kappa: int | None = None, rng: np.random.Generator | int | None = None,
        test: tuple[np.ndarray, np.ndarray] | None = None, **options: Any) -> Fit:
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
    **options : the algorithm's options (``algorithm.<option>``); others take their defaults.
    """
    spec = get(algorithm) if isinstance(algorithm, str) else algorithm
    lam = check_lam(lam)
    y = check_targets(y, blocks.n)
    test = check_test(test, getattr(blocks, "d", None))
    opts = options_of(spec, options)
    if spec.uses_kappa:
        opts["kappa"] = check_kappa(kappa, blocks.n)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng or 0)
    recorder = Recorder(test, **{k: opts.pop(k) for k in EVALUATOR_OPTIONS if k in opts})
    return recorder.finish(spec.name, spec.fit(blocks, y, lam=lam, rng=rng, recorder=recorder,
                                               **opts))


def options_of(spec: AlgorithmSpec, given: Mapping[str, Any]) -> dict[str, Any]:
    """The validated options of ``spec`` (defaults filled in)."""
    return validate(spec.options, given, owner=spec.owner, prefix="algorithm.")
