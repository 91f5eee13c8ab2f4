"""GP classification by the Laplace approximation (algorithms/laplace.py) against scikit-learn's
GaussianProcessClassifier, its low-rank form against the full one, its quadrature, and the
classification datasets, metrics and task checks around it."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
from scipy.integrate import quad
from scipy.special import expit

from algorithms import ArrayKernelBlocks, InputError, Kernel, run
from algorithms.evaluation import classification_metrics
from algorithms.laplace import predictive_probability
from pipeline.datasets import build

ELL, VARIANCE = 3.0, 2.0
KERNEL = Kernel("rbf", {"width": 2 * ELL**2, "variance": VARIANCE})


@pytest.fixture(scope="module")
def cancer():
    arrays, _ = build({"name": "breast_cancer"})
    return arrays["X_train"], arrays["y_train"], arrays["X_test"], arrays["y_test"]


def laplace(X, y, test=None, **options):
    return run("gp_laplace", ArrayKernelBlocks(X, KERNEL), y, lam=1.0, test=test, rng=0,
               **options)


def test_full_form_equals_scikit_learn(cancer):
    """Latent mode and approximate log marginal likelihood equal GaussianProcessClassifier's
    with the same fixed kernel (optimizer=None) on the 400 training rows of breast_cancer."""
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    X, y, X_test, y_test = cancer
    ours = laplace(X, y, (X_test, y_test))
    theirs = GaussianProcessClassifier(ConstantKernel(VARIANCE, "fixed") * RBF(ELL, "fixed"),
                                       optimizer=None).fit(X, (y > 0).astype(int))
    est = theirs.base_estimator_
    np.testing.assert_allclose(ours.extras["latent_mode"], est.f_cached, rtol=0, atol=1e-6)
    assert ours.summary["log_marginal_likelihood"] == pytest.approx(
        est.log_marginal_likelihood_value_, rel=1e-6)
    # probabilities: our quadrature vs scikit-learn's erf approximation of the same integral
    np.testing.assert_allclose(ours.predict_proba(X_test), theirs.predict_proba(X_test)[:, 1],
                               atol=1e-3)
    assert ours.summary["test_error_rate"] < 0.06  # 3.0 % here (5 of 169)


@pytest.mark.parametrize("subset", ["random", "pivoted"])
def test_low_rank_with_every_point_is_the_full_form(cancer, subset):
    X, y, X_test, _ = cancer
    full = laplace(X, y)
    low = laplace(X, y, m=len(y), subset=subset)
    np.testing.assert_allclose(low.extras["latent_mode"], full.extras["latent_mode"], atol=1e-9)
    assert low.summary["log_marginal_likelihood"] == pytest.approx(
        full.summary["log_marginal_likelihood"], rel=1e-10)
    np.testing.assert_allclose(low.predict_proba(X_test), full.predict_proba(X_test),
                               atol=1e-9)


def test_low_rank_error_falls_as_m_grows(cancer):
    """Pivoted subsets: the largest error of the latent mode shrinks with every doubling of m
    (measured: 2.1, 0.75, 0.33, 0 at m = 50, 100, 200, 400)."""
    X, y, _, _ = cancer
    exact = laplace(X, y).extras["latent_mode"]
    errors = [np.abs(laplace(X, y, m=m, subset="pivoted").extras["latent_mode"] - exact).max()
              for m in (50, 100, 200, 400)]
    assert errors[0] > errors[1] > errors[2] > errors[3] and errors[3] < 1e-9, errors


def test_newton_raises_the_log_posterior_every_iteration(cancer):
    X, y, X_test, y_test = cancer
    fit = laplace(X, y, (X_test, y_test), m=100)
    objective = fit.trace["objective"]  # −Ψ
    assert len(objective) >= 3 and np.all(np.diff(objective) <= 1e-9 * abs(objective[-1]))
    assert np.isfinite(fit.trace["test_error_rate"]).all()


def test_predictive_probability_is_the_gaussian_integral():
    mean = np.array([-3.0, -0.4, 0.0, 1.2, 6.0])
    var = np.array([0.01, 2.0, 5.0, 0.5, 30.0])
    want = [quad(lambda z, m=m, v=v: expit(z) * math.exp(-(z - m) ** 2 / (2 * v))
                 / math.sqrt(2 * math.pi * v), -math.inf, math.inf, epsabs=1e-14)[0]
            for m, v in zip(mean, var, strict=True)]
    np.testing.assert_allclose(predictive_probability(mean, var), want, atol=1e-10)
    np.testing.assert_allclose(predictive_probability(mean, np.zeros(5)), expit(mean),
                               atol=1e-15)


def test_classification_metrics_by_hand():
    prob = np.array([0.9, 0.2, 0.5, 0.3])
    y = np.array([1.0, 1.0, -1.0, -1.0])
    out = classification_metrics(prob, y)
    assert out["test_error_rate"] == 0.5  # 0.2 → −1 (wrong), 0.5 → +1 (wrong)
    assert out["test_log_loss"] == pytest.approx(
        -np.mean(np.log([0.9, 0.2, 0.5, 0.7])), rel=1e-15)
    assert out["test_brier"] == pytest.approx(np.mean([0.01, 0.64, 0.25, 0.09]), rel=1e-15)


def test_bad_labels_and_bad_m_are_one_line_errors(cancer):
    X, y, _, _ = cancer
    with pytest.raises(InputError, match=r"y has 253 labels outside \{-1, \+1\} \(first 0\.0 "
                                         r"at index 1\); a binary classifier needs labels -1"):
        laplace(X, 0.5 * (y + 1))  # 0/1 labels
    with pytest.raises(InputError, match="algorithm.m=401 must be between 1 and n_train=400"):
        laplace(X, y, m=401)


@pytest.mark.parametrize("name,n,d,positive", [("breast_cancer", 569, 30, 212),
                                               ("abalone_binary", 4177, 10, 2081),
                                               ("two_moons", 600, 2, None)])
def test_classification_datasets(name, n, d, positive):
    arrays, attrs = build({"name": name})
    y = np.concatenate([arrays["y_train"], arrays["y_test"]])
    assert attrs["task"] == "classification" and len(y) == n
    assert arrays["X_train"].shape[1] == d and set(np.unique(y)) == {-1.0, 1.0}
    if positive is not None:
        assert int((y > 0).sum()) == positive
    assert attrs["standardisation"]["y_mean"] is None  # labels are never standardised


def _pipeline(args, cwd, multirun=False):
    return subprocess.run([sys.executable, "-m", "pipeline", *(["-m"] if multirun else []),
                           *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args,message", [
    (["algorithm=gp_laplace", "dataset=abalone"],
     "error: algorithm gp_laplace is a classification algorithm but dataset abalone is a "
     "regression set; pass a classification dataset (abalone_binary, breast_cancer, "),
    (["algorithm=exact", "dataset=two_moons"],
     "error: algorithm exact is a regression algorithm but dataset two_moons is a "
     "classification set; pass a regression dataset ("),
])
def test_task_mismatch_is_one_line_before_any_data(tmp_path, args, message, in_process):
    proc = in_process(tmp_path, "pipeline", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "outputs" / "stores").exists()


def test_a_classification_sweep_consolidates_into_one_dataset(tmp_path):
    """Full and low-rank Laplace on two classification sets: one Dataset with the
    classification metrics, lam ignored (one job per setting whatever lam)."""
    proc = _pipeline(["algorithm=gp_laplace", "algorithm.m=null,30", "dataset=two_moons,"
                      "breast_cancer", "dataset.n_train=120", "kernel.width=4.0",
                      "cluster.n_workers=1", "cluster.dashboard_address=null",
                      "sweep=multirun"], tmp_path, multirun=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ds = xr.open_zarr(tmp_path / "outputs" / "multirun" / "results.zarr")
    assert set(np.unique(ds["status"].values)) == {"ok"}
    err = ds["final_test_error_rate"].values
    assert err.size == 4 and np.all((err >= 0) & (err < 0.3)), err
    assert np.isfinite(ds["final_test_log_loss"].values).all()
    assert "final_test_brier" in ds and "test_error_rate" in ds
    summary = json.loads(xr.open_dataset(next((tmp_path / "outputs" / "multirun" / "jobs")
                                              .glob("*/result.nc")), engine="scipy")
                         .attrs["summary"])
    assert summary["newton_iterations"] >= 2


def test_sklearn_gpc_peer_equals_gp_laplace_and_its_library(cancer):
    """The peer ``sklearn_gpc`` (scikit-learn's GaussianProcessClassifier through the contract)
    has gp_laplace's latent mean and log marginal likelihood, and the library's probabilities."""
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    X, y, X_test, y_test = cancer
    peer = run("sklearn_gpc", ArrayKernelBlocks(X, KERNEL), y, lam=1.0, test=(X_test, y_test))
    ours = laplace(X, y, (X_test, y_test))
    np.testing.assert_allclose(peer.predict(X_test), ours.predict(X_test), atol=1e-10)
    assert peer.summary["log_marginal_likelihood"] == pytest.approx(
        ours.summary["log_marginal_likelihood"], rel=1e-12)
    direct = GaussianProcessClassifier(ConstantKernel(VARIANCE, "fixed") * RBF(ELL, "fixed"),
                                       optimizer=None).fit(X, (y > 0).astype(int))
    np.testing.assert_allclose(peer.predict_proba(X_test), direct.predict_proba(X_test)[:, 1],
                               rtol=0, atol=1e-12)
    assert peer.summary["test_error_rate"] == ours.summary["test_error_rate"]
