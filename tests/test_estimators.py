"""The Python API: every registered algorithm as a scikit-learn estimator (scikit-learn's own
estimator checks over the registry), the estimator against the algorithm run directly, and a
sweep run from Python."""

import copy
import pickle

import numpy as np
import pytest
import xarray as xr
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from algorithms import REGISTRY, ArrayKernelBlocks, InputError, Kernel, run
from algorithms.kernels import fit_tails
from pipeline.cli import FailedPointsWarning, SweepFailed, run_sweep
from pipeline.estimators import SparseGPClassifier, SparseGPRegressor, default_algorithm

# Ferrari-Trecate et al.'s finite-dimensional predictors keep m (default 10) eigenfunctions of
# a Mercer basis built for Lemma 4's learning curves: a deliberately restricted model whose R²
# on scikit-learn's regression check data is below the check's 0.5; pbr's one-feature failure
# is the evaluator's one-line arithmetic error, not scikit-learn's expected wording.
RESTRICTED = {"check_regressors_train": "a fixed m-term Mercer expansion (003), not a "
                                        "general-purpose regressor"}
EXPECTED_FAILURES = {"finite_diagonal": RESTRICTED, "finite_full": RESTRICTED,
                     "finite_optimal": RESTRICTED,
                     "pbr": {**RESTRICTED, "check_fit2d_1feature": "its one-feature breakdown "
                             "is the evaluator's one-line error, worded for the pipeline"}}


# the checks are of the API, not of the training: GPyTorch's SVGP with its default 200 Adam
# steps made 62 of the checks' 80 s (its numerics are checked in tests/test_peers.py)
CHECK_PARAMS = {"gpytorch_svgp": {"epochs": 12, "batch_size": 64}}


def _estimator(name: str):
    cls = SparseGPClassifier if REGISTRY[name].task == "classification" else SparseGPRegressor
    return cls(algorithm=name, random_state=0, algorithm_params=CHECK_PARAMS.get(name))


@parametrize_with_checks([_estimator(name) for name in sorted(REGISTRY)],
                         expected_failed_checks=lambda est: EXPECTED_FAILURES.get(
                             est.algorithm, {}))
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def _problem(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def test_regressor_equals_the_algorithm_run_directly():
    X, y = _problem()
    kernel = Kernel("rbf", {"width": 2.0})
    est = SparseGPRegressor(algorithm="sgma", kernel_params={"width": 2.0}, lam=0.1, kappa=20,
                            algorithm_params={"max_basis": 30, "eps": 0.0},
                            random_state=3).fit(X, y)
    with fit_tails("rbf", len(y)):  # the kernel tiles a fit of this size takes, as a job's
        direct = run("sgma", ArrayKernelBlocks(X, kernel), y, lam=0.1, kappa=20,
                     rng=np.random.default_rng(3), max_basis=30, eps=0.0)
        expected_mean = direct.predict(X[:10])
        expected_std = np.sqrt(direct.predict_var(X[:10]))  # SGMA: the upper bound
    mean, std = est.predict(X[:10], return_std=True)
    np.testing.assert_array_equal(mean, expected_mean)
    np.testing.assert_array_equal(std, expected_std)
    np.testing.assert_array_equal(est.basis_, direct.basis)
    assert est.n_basis_ == 30 and isinstance(est.trace_, xr.Dataset)
    assert est.trace_.sizes["step"] == 30 and "gap" in est.trace_
    assert est.trace_["gap"].attrs["units"] == "1" and est.trace_["seconds"].attrs["units"] == "s"
    assert est.score(X, y) > 0.9


def test_params_clone_and_pickle_keep_the_model():
    X, y = _problem()
    est = SparseGPRegressor(algorithm="nystrom", lam=0.05, random_state=1)
    assert est.get_params()["lam"] == 0.05
    est.set_params(lam=0.2)
    assert clone(est).get_params() == est.get_params()
    est.fit(X, y)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    np.testing.assert_array_equal(again.predict(X, return_std=True)[1],
                                  est.predict(X, return_std=True)[1])


def test_default_algorithm_and_bad_input():
    X, y = _problem(60)
    assert SparseGPRegressor().fit(X, y).fit_.algorithm == default_algorithm()
    with pytest.raises(InputError, match="algorithm='nope' is not registered"):
        SparseGPRegressor(algorithm="nope").fit(X, y)
    with pytest.raises(InputError, match="a classification algorithm; SparseGPRegressor"):
        SparseGPRegressor(algorithm="gp_laplace").fit(X, y)
    with pytest.raises(InputError, match="sklearn_nystroem has no predictive variance"):
        SparseGPRegressor(algorithm="sklearn_nystroem").fit(X, y).predict(X, return_std=True)
    for bad in ("x", -1, True, 1.5):  # scikit-learn's convention, the bad value named
        with pytest.raises(ValueError, match=f"random_state={bad!r} must be None, an int"):
            SparseGPRegressor(random_state=bad).fit(X, y)
    same = [SparseGPRegressor(random_state=r).fit(X, y).predict(X)
            for r in (np.random.RandomState(3), np.random.RandomState(3))]
    np.testing.assert_array_equal(*same)
    SparseGPRegressor(random_state=np.random.default_rng(0)).fit(X, y)


@pytest.mark.parametrize("cls", [SparseGPRegressor, SparseGPClassifier])
def test_predictions_never_follow_the_callers_arrays_after_fit(cls):
    """fit keeps its own copy: X and y changed in place after fit change no prediction, and a
    pickled or deep-copied estimator (which recomputes its fit from what it kept) predicts
    exactly what the original did."""
    X, y = _problem(60)
    if cls is SparseGPClassifier:
        y = np.where(y > 0, 1.0, 0.0)
    X_test = X[:15].copy()
    est = cls(random_state=0).fit(X, y)
    expected = est.predict_proba(X_test) if cls is SparseGPClassifier else est.predict(X_test)

    def predicted(model):
        return model.predict_proba(X_test) if cls is SparseGPClassifier else \
            model.predict(X_test)
    X *= 3.0
    X[:, 0] += 1.0
    y[:] = y[::-1]
    for model in (est, pickle.loads(pickle.dumps(est)), copy.deepcopy(est)):
        np.testing.assert_array_equal(predicted(model), expected)
    assert not np.shares_memory(est._training[0], X) and not est._training[0].flags.writeable


def test_the_classifier_fits_with_its_defaults():
    """SparseGPClassifier() fits a small two-class problem well above chance (a job's default
    algorithm is a regression one, which a classifier cannot fit)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    labels = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, "yes", "no")
    est = SparseGPClassifier().fit(X, labels)
    assert est.fit_.algorithm == default_algorithm("classification")
    assert REGISTRY[est.fit_.algorithm].task == "classification"
    assert set(est.predict(X)) <= {"no", "yes"} and est.score(X, labels) > 0.8


def test_classifier_takes_any_two_labels():
    X, y = _problem()
    labels = np.where(y > 0, "up", "down")
    est = SparseGPClassifier(algorithm="gp_laplace", kernel_params={"width": 2.0}).fit(X, labels)
    assert list(est.classes_) == ["down", "up"]
    proba = est.predict_proba(X)
    assert proba.shape == (len(y), 2) and np.allclose(proba.sum(1), 1.0)
    assert est.score(X, labels) > 0.9


def test_run_sweep_returns_the_consolidated_dataset(tmp_path, monkeypatch):
    """The Dataset of every point; a failed point (here λ below float64's resolution) is a
    FailedPointsWarning naming it and its error, or with errors="raise" a SweepFailed that
    carries the Dataset."""
    monkeypatch.chdir(tmp_path)
    overrides = ["algorithm=exact,nystrom", "algorithm.max_basis=16", "dataset=sine1d",
                 "dataset.n_train=60", "lam=0.1,1e-300", "seed=0", "cluster.n_workers=1",
                 "cluster.dashboard_address=null"]
    with pytest.warns(FailedPointsWarning) as warned:
        ds = run_sweep(overrides)
    assert set(ds["algorithm"].values) == {"exact", "nystrom"}
    ok = ds.sel(lam=0.1)
    assert set(np.unique(ok["status"].values)) == {"ok"}
    assert np.isfinite(ok["final_test_rmse"].values).all()
    assert set(np.unique(ds.sel(lam=1e-300)["status"].values)) == {"failed"}
    failed = [w for w in warned if issubclass(w.category, FailedPointsWarning)]
    assert len(failed) == 1, [str(w.message) for w in warned]
    message = str(failed[0].message).splitlines()
    assert message[0].startswith("2 of 4 sweep points failed")
    assert message[1].startswith("  algorithm=exact, lam=1e-300: InputError: lam=1e-300")
    with pytest.raises(SweepFailed, match="2 of 4 sweep points failed") as raised:
        run_sweep(overrides, errors="raise")
    assert raised.value.results["status"].size == 4
    with pytest.raises(InputError):
        run_sweep(["algorithm=nope"])


# ---------------------------------------------------------------- round trips over the registry
# a fit is a function of the parameters and the data: pickle, clone + fit and set_params after
# fit keep every algorithm's predictions exactly, for every kind of random_state
ROUND_TRIP_PARAMS = {"gpytorch_svgp": {"epochs": 2, "batch_size": 16},
                     "gpytorch_sgpr": {"steps": 3}, "rvm": {"max_iter": 30},
                     "rvm_classifier": {"max_iter": 10}}
RANDOM_STATES = {"None": lambda: None, "int": lambda: 3,
                 "RandomState": lambda: np.random.RandomState(3),
                 "Generator": lambda: np.random.default_rng(3)}


def _round_trip_case(name: str, random_state):
    X, y = _problem(40)
    cls = SparseGPClassifier if REGISTRY[name].task == "classification" else SparseGPRegressor
    if cls is SparseGPClassifier:
        y = np.where(y > 0, 1, 0)
    est = cls(algorithm=name, random_state=random_state,
              algorithm_params=ROUND_TRIP_PARAMS.get(name))

    def predicted(model):
        return model.predict_proba(X) if cls is SparseGPClassifier else model.predict(X)
    return est, X, y, predicted


@pytest.mark.parametrize("kind", sorted(RANDOM_STATES))
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_pickle_and_clone_keep_the_predictions_exactly(name, kind):
    est, X, y, predicted = _round_trip_case(name, RANDOM_STATES[kind]())
    fresh = clone(est)  # before fit: the random_state in the state the estimator got it
    expected = predicted(est.fit(X, y))
    np.testing.assert_array_equal(predicted(pickle.loads(pickle.dumps(est))), expected)
    np.testing.assert_array_equal(predicted(clone(est).fit(X, y)), expected)
    np.testing.assert_array_equal(predicted(fresh.fit(X, y)), expected)
    np.testing.assert_array_equal(predicted(est.fit(X, y)), expected)  # fit again: the same


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_set_params_after_fit_takes_effect_at_the_next_fit_only(name):
    """Predictions use what fit recorded, on the estimator and on its unpickled copy (which
    recomputes its fit): a parameter set after fit is never mixed into them; the next fit
    uses it, as a new estimator with that parameter would."""
    est, X, y, predicted = _round_trip_case(name, np.random.default_rng(5))
    expected = predicted(est.fit(X, y))
    coef = est.coef_.copy()
    unpickled = pickle.loads(pickle.dumps(est))
    for model in (est, unpickled):
        model.set_params(lam=5.0, kernel_params={"width": 0.3}, random_state=11)
        np.testing.assert_array_equal(predicted(model), expected)
        np.testing.assert_array_equal(model.coef_, coef)
    refit = predicted(unpickled.fit(X, y))
    np.testing.assert_array_equal(refit, predicted(clone(unpickled).fit(X, y)))
    assert not np.array_equal(refit, expected)
