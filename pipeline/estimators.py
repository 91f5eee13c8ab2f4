"""scikit-learn estimators over the registry: any regression algorithm as ``SparseGPRegressor``,
any binary classifier as ``SparseGPClassifier``.

    from pipeline.estimators import SparseGPRegressor
    model = SparseGPRegressor(algorithm=..., kernel="rbf", kernel_params={"width": 10.0},
                              lam=0.1, kappa=59, random_state=0).fit(X, y)
    mean, std = model.predict(X_test, return_std=True)

Parameters follow scikit-learn's conventions (stored as given, validated in :meth:`fit`;
``get_params``/``set_params``/``clone`` work): ``algorithm`` (a registered name; None: for
the regressor the default of ``conf/config.yaml``, a job's; for the classifier
:data:`algorithms.registry.DEFAULT_CLASSIFIER`, so that both fit with their defaults),
``kernel`` and ``kernel_params`` (the kernel table of
:mod:`algorithms.kernels`), ``lam`` (σ²), ``kappa`` (κ, where the algorithm uses it),
``algorithm_params`` (the algorithm's options, as ``algorithm.<option>`` in a job) and
``random_state``. A ``max_basis`` option left at its default is capped at the number of
training points (the default of 256 is larger than many small sets). Fitted attributes end in
``_``: ``fit_`` (the :class:`~algorithms.contract.Fit`), ``basis_``, ``coef_``,
``X_basis_``, ``n_basis_``, ``summary_`` (dict) and ``trace_`` (an xarray Dataset over
``step``, as in a job's result file).

``predict(X, return_std=True)`` returns the predictive standard deviation of y (noise
included) where the algorithm has a variance; for algorithms that only bound it (SGMA's
primal/dual bracket, CG's) it is the upper bound, the one the evaluator scores. An algorithm
without a variance raises a one-line error.

A fit is a function of the parameters and the data: a ``RandomState`` or ``Generator``
random_state is read, not advanced (its draw, or a copy, seeds the fit), so ``clone(est).fit``
and a second ``fit`` give the same model. ``fit`` records what it fitted with (the parameters
and the seed); predictions use only that record and the fitted attributes, so ``set_params``
after ``fit`` takes effect at the next ``fit`` (scikit-learn's convention). ``fit`` copies
the training data it keeps (the fit reads its own read-only copy, never the caller's arrays),
so changing X or y after ``fit`` changes no prediction. Estimators pickle (and deep-copy):
the fitted predictor keeps closures, so pickling keeps that copy and the record, and the same
fit is recomputed from them when an unpickled estimator is first used.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr
from omegaconf import OmegaConf
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from algorithms import REGISTRY, ArrayKernelBlocks, Fit, InputError, Kernel, run
from algorithms.contract import AlgorithmSpec
from algorithms.kernels import fit_tails
from algorithms.registry import DEFAULT_CLASSIFIER
from pipeline.config import CONF_DIR
from pipeline.results.variables import describe_dataset


def default_algorithm(task: str = "regression") -> str:
    """The algorithm an estimator of ``task`` fits when none is named: for regression the
    ``algorithm`` of ``conf/config.yaml``'s defaults list (a job's default); for
    classification :data:`~algorithms.registry.DEFAULT_CLASSIFIER` (a job's default is a
    regression algorithm, which a classifier cannot fit)."""
    if task == "classification":
        return DEFAULT_CLASSIFIER
    defaults = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"))["defaults"]
    return next(entry["algorithm"] for entry in defaults
                if isinstance(entry, dict) and "algorithm" in entry)


class _SparseGP(BaseEstimator):
    """Shared by the regressor and the classifier (module docstring)."""

    _task = "regression"

    def __init__(self, algorithm: str | None = None, kernel: str = "rbf",
                 kernel_params: Mapping[str, Any] | None = None, lam: float = 0.1,
                 kappa: int = 59, algorithm_params: Mapping[str, Any] | None = None,
                 random_state: int | None = None) -> None:
        self.algorithm = algorithm
        self.kernel = kernel
        self.kernel_params = kernel_params
        self.lam = lam
        self.kappa = kappa
        self.algorithm_params = algorithm_params
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def _spec(self) -> AlgorithmSpec:
        name = default_algorithm(self._task) if self.algorithm is None else self.algorithm
        if name not in REGISTRY:
            raise InputError(f"algorithm={name!r} is not registered; choose one of "
                             + ", ".join(sorted(n for n, s in REGISTRY.items()
                                                if s.task == self._task)))
        spec = REGISTRY[name]
        if spec.task != self._task:
            raise InputError(f"algorithm={name!r} is a {spec.task} algorithm; "
                             f"{type(self).__name__} takes a {self._task} algorithm")
        return spec

    def _options(self, spec: AlgorithmSpec, n: int) -> dict[str, Any]:
        options = dict(self.algorithm_params or {})
        size = spec.options.get("max_basis")
        if size is not None and "max_basis" not in options and size.default is not None:
            options["max_basis"] = min(size.default, n)
        return options

    def _recipe(self, n: int) -> dict[str, Any]:
        """What a fit is a function of besides the data, read from the parameters once, at
        :meth:`fit`: the algorithm, kernel, λ, κ, the options and the resolved seed (a
        ``Generator`` random_state copied in its state of that moment). Predictions and the
        recomputation of an unpickled fit use this record, never the parameters, which
        ``set_params`` may have changed since (they take effect at the next ``fit``)."""
        spec = self._spec()
        return {"algorithm": spec.name, "kernel": self.kernel,
                "kernel_params": copy.deepcopy(dict(self.kernel_params or {})),
                "lam": self.lam, "kappa": self.kappa,
                "options": copy.deepcopy(self._options(spec, n)),
                "seed": _seed(self.random_state)}

    def _fit(self, X: np.ndarray, y: np.ndarray) -> Fit:
        """Fit with the parameters as they are now; the record of what was fitted is kept
        in ``_fitted_recipe`` (:meth:`_recipe`), once the fit succeeded."""
        recipe = self._recipe(len(y))
        fit = _run_recipe(recipe, X, y)
        self._fitted_recipe = recipe
        return fit

    def _store(self, X: np.ndarray, y: np.ndarray, fit: Fit) -> None:
        self.fit_ = fit
        self.basis_ = np.asarray(fit.basis)
        self.coef_ = np.asarray(fit.coef)
        self.X_basis_ = np.asarray(fit.solution.X_basis)
        self.n_basis_ = int(len(fit.coef))
        self.summary_ = dict(fit.summary)
        self.trace_ = describe_dataset(xr.Dataset(
            {k: ("step", np.asarray(v)) for k, v in fit.trace.items()},
            coords={"step": np.arange(1, fit.n_steps + 1)}, attrs={"algorithm": fit.algorithm}))
        self._training = (X, y)

    def _tails(self):
        """The kernel tiles of the fit, for its predictions too (the exp its fit took:
        :func:`algorithms.kernels.fit_tails`)."""
        return fit_tails(self._fitted_recipe["kernel"], len(self._training[1]))

    def _fitted(self) -> Fit:
        check_is_fitted(self, "coef_")
        if getattr(self, "fit_", None) is None:  # unpickled: recompute the same fit
            self.fit_ = _run_recipe(self._fitted_recipe, *self._training)
        return self.fit_

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if "fit_" in state:
            state["fit_"] = None  # the predictor holds closures (module docstring)
        return state


def _run_recipe(recipe: Mapping[str, Any], X: np.ndarray, y: np.ndarray) -> Fit:
    """The fit a :meth:`_SparseGP._recipe` describes on ``(X, y)``: the same numbers every
    time (a Generator seed is copied, so the recipe's stays in its state)."""
    kernel = Kernel(recipe["kernel"], dict(recipe["kernel_params"]))
    seed = recipe["seed"]
    rng = np.random.default_rng(copy.deepcopy(seed))
    with fit_tails(kernel.name, len(y)):  # as a job: a small fit never loads numba
        return run(REGISTRY[recipe["algorithm"]],
                   ArrayKernelBlocks(np.asarray(X, dtype=np.float64), kernel),
                   np.asarray(y, dtype=np.float64), lam=recipe["lam"], kappa=recipe["kappa"],
                   rng=rng, **copy.deepcopy(recipe["options"]))


class SparseGPRegressor(RegressorMixin, _SparseGP):
    """Any registered regression algorithm as a scikit-learn regressor (module docstring)."""

    def fit(self, X: Any, y: Any) -> SparseGPRegressor:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        X, y = _own(X), _own(y)
        self._store(X, y, self._fit(X, y))
        return self

    def predict(self, X: Any, return_std: bool = False):
        """The predictive mean; with ``return_std``, also the predictive standard deviation of
        y (the upper bound where the algorithm brackets the variance)."""
        fit = self._fitted()
        X = validate_data(self, X, dtype=np.float64, reset=False)
        with self._tails():
            mean = fit.predict(X)
            var = fit.predict_var(X) if return_std else None
        if not return_std:
            return mean
        if var is None:
            raise InputError(f"algorithm {fit.algorithm} has no predictive variance "
                             f"({fit.not_applicable.get('test_nlpd', 'none')}); call "
                             "predict(X) without return_std")
        return mean, np.sqrt(var)


class SparseGPClassifier(ClassifierMixin, _SparseGP):
    """Any registered binary classifier as a scikit-learn classifier: labels of any two
    values (mapped to −1/+1), ``predict_proba`` from the algorithm's p(y = +1 | x)."""

    _task = "classification"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # binary: the checks use two classes
        return tags

    def fit(self, X: Any, y: Any) -> SparseGPClassifier:
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise InputError(f"Only binary classification is supported: y has "
                             f"{len(self.classes_)} classes; pass labels of two classes")
        X, signs = _own(X), _own(np.where(y == self.classes_[1], 1.0, -1.0))
        self._store(X, signs, self._fit(X, signs))
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        fit = self._fitted()
        X = validate_data(self, X, dtype=np.float64, reset=False)
        with self._tails():
            p = fit.predict_proba(X)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        positive = self.predict_proba(X)[:, 1] >= 0.5
        return self.classes_[positive.astype(int)]


def _own(a: np.ndarray) -> np.ndarray:
    """The estimator's own read-only float64 copy of a training array: ``validate_data``
    returns the caller's array itself when it is already float64, and the fit (its kernel
    blocks, its predictor's closures) and an unpickled estimator's refit read what is kept,
    so a caller changing its array after ``fit`` would change the predictions."""
    own = np.array(a, dtype=np.float64, copy=True)
    own.setflags(write=False)
    return own


def _seed(random_state: Any) -> int | np.random.Generator:
    """What seeds the fit's generator: ``random_state`` (scikit-learn's convention: None, an
    int ≥ 0, a ``numpy.random.RandomState``; a ``numpy.random.Generator`` too), else a
    ValueError naming it. A RandomState or Generator is read, not advanced: its draw (an
    int) or a copy of it seeds the fit, so that a fit is a function of the parameters and
    the data (``clone(est).fit`` and a second ``fit`` give the same model)."""
    if random_state is None:
        return 0
    if isinstance(random_state, np.random.Generator):
        return copy.deepcopy(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(copy.deepcopy(random_state).randint(np.iinfo(np.int32).max))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool) \
            and random_state >= 0:
        return int(random_state)
    raise ValueError(f"random_state={random_state!r} must be None, an int ≥ 0 or a numpy "
                     "RandomState or Generator; pass e.g. random_state=0")
