"""Marginal-likelihood hyperparameters (004 §3.6): the value and its gradient against dense and
finite-difference references, the optimum against scikit-learn's GaussianProcessRegressor on
abalone, and ``hyper=ml`` through a job and a sweep (learned values, trace, cache)."""

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
import xarray as xr
from scipy.stats import multivariate_normal

from algorithms import InputError, Kernel
from algorithms.hyper import BOUNDS, Parameters, learn, log_marginal_likelihood
from pipeline.datasets import ingest, load_arrays

rng = np.random.default_rng(5)
X = rng.normal(size=(70, 3))
y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=70)
CASES = [(name, ard) for name in ("rbf", "matern32", "laplacian") for ard in (False, True)]


@pytest.mark.parametrize("name,ard", CASES)
def test_value_is_the_gaussian_log_density(name, ard):
    params = Parameters.of(Kernel(name), 3, ard)
    theta = rng.normal(scale=0.4, size=2 + params.n_lengths)
    value, _ = log_marginal_likelihood(X, y, params, theta, gradient=False)
    kernel, lam = params.kernel(theta)
    ref = multivariate_normal(np.zeros(len(y)), kernel(X, X) + lam * np.eye(len(y))).logpdf(y)
    assert value == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("name,ard", CASES)
def test_gradient_equals_finite_differences(name, ard):
    """eq. 64 against central differences of eq. 62 (step 1e-6 in log-parameters)."""
    params = Parameters.of(Kernel(name), 3, ard)
    theta = rng.normal(scale=0.4, size=2 + params.n_lengths)
    _, grad = log_marginal_likelihood(X, y, params, theta)
    h = 1e-6
    fd = np.array([(log_marginal_likelihood(X, y, params, theta + e)[0]
                    - log_marginal_likelihood(X, y, params, theta - e)[0]) / (2 * h)
                   for e in np.eye(len(theta)) * h])
    assert np.all(np.abs(grad - fd) <= 1e-6 * np.maximum(np.abs(fd), 1.0)), (grad, fd)


def test_theta_round_trips_through_the_kernel():
    for kernel, d in ((Kernel("rbf", {"width": 3.0, "variance": 2.0}), 3),
                      (Kernel("matern32", {"lengthscales": [1.0, 2.0, 4.0]}), 3)):
        for ard in (False, True):
            params = Parameters.of(kernel, d, ard)
            theta = params.theta(kernel, 0.3, d)
            back, lam = params.kernel(theta)
            assert lam == pytest.approx(0.3) and back.variance == pytest.approx(kernel.variance)
    # an isotropic RBF of width 2ℓ² is ℓ
    theta = Parameters.of(Kernel("rbf"), 3, False).theta(Kernel("rbf", {"width": 8.0}), 0.1, 3)
    assert math.exp(theta[1]) == pytest.approx(2.0)


def test_kernels_without_a_gradient_are_refused():
    with pytest.raises(InputError, match=r"hyper=ml learns the kernels rbf, matern32, laplacian; "
                                         r"kernel 'polynomial'.*or hyper=fixed"):
        learn(X, y, Kernel("polynomial"), 0.1, rng=np.random.default_rng(0))


def test_learn_keeps_the_best_run_and_its_trace():
    res = learn(X, y, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(1),
                restarts=3, subset=50)
    assert res.n_subset == 50 and len(res.runs) == 3
    assert res.log_marginal_likelihood == max(r["log_marginal_likelihood"] for r in res.runs)
    assert set(res.trace["run"]) == {0, 1, 2}
    assert res.trace["theta"].shape == (len(res.trace["run"]), 3)
    assert np.nanmax(res.trace["log_marginal_likelihood"]) == pytest.approx(
        res.log_marginal_likelihood)
    # the optimum is stationary: its gradient vanishes (interior of the bounds)
    params = Parameters.of(res.kernel, 3, False)
    theta = params.theta(res.kernel, res.lam, 3)
    assert np.all((theta > math.log(BOUNDS[0]) + 1) & (theta < math.log(BOUNDS[1]) - 1))
    subset_rows = np.sort(np.random.default_rng(1).choice(70, size=50, replace=False))
    _, grad = log_marginal_likelihood(X[subset_rows], y[subset_rows], params, theta)
    assert np.abs(grad).max() < 1e-3
    # the same seed learns the same values
    again = learn(X, y, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(1),
                  restarts=3, subset=50)
    assert again.kernel == res.kernel and again.lam == res.lam


@pytest.fixture(scope="module")
def abalone(tmp_path_factory):
    store = ingest({"name": "abalone", "standardize_y": True}, tmp_path_factory.mktemp("stores"))
    X_train, y_train, _, _ = load_arrays(store)
    return X_train, y_train


def _sklearn_optimum(X, y, ard):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = (ConstantKernel(1.0, BOUNDS) * RBF(np.ones(X.shape[1]) if ard else 1.0, BOUNDS)
              + WhiteKernel(0.1, BOUNDS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bound warnings for irrelevant ARD inputs
        gp = GaussianProcessRegressor(kernel, alpha=0.0, n_restarts_optimizer=0).fit(X, y)
    k = gp.kernel_
    return (gp.log_marginal_likelihood_value_, k.k1.k1.constant_value,
            np.atleast_1d(k.k1.k2.length_scale), k.k2.noise_level)


@pytest.mark.slow
@pytest.mark.parametrize("ard,n", [(False, 1000), (True, 600)])
def test_optimum_equals_scikit_learn_on_abalone(abalone, ard, n):
    """Same start (variance 1, ℓ = 1, σ² = 0.1), same bounds, one L-BFGS-B run each: the same
    optimum. The first n training rows of abalone (standardised targets)."""
    Xa, ya = abalone[0][:n], abalone[1][:n]
    ours = learn(Xa, ya, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(0),
                 restarts=1, subset=n, ard=ard)
    lml, variance, ls, noise = _sklearn_optimum(Xa, ya, ard)
    assert ours.log_marginal_likelihood == pytest.approx(lml, rel=1e-4)
    assert ours.kernel.variance == pytest.approx(variance, rel=1e-2)
    assert ours.lam == pytest.approx(noise, rel=1e-2)
    ours_ls = (ours.kernel.lengthscales if ard else
               np.array([math.sqrt(ours.kernel.params["width"] / 2)]))
    # ARD scales at the upper bound (irrelevant inputs) only need to be large for both
    relevant = ls < 1e3
    np.testing.assert_allclose(ours_ls[relevant], ls[relevant], rtol=1e-2)
    assert np.all(ours_ls[~relevant] > 1e2)


@pytest.fixture
def _run(in_process):
    """``_run(args, cwd)``: what ``python -m pipeline args...`` in ``cwd`` does (in-process)."""
    return lambda args, cwd: in_process(cwd, "pipeline", *args)


def test_a_job_fits_with_learned_hyperparameters_and_records_them(tmp_path, _run):
    args = ["algorithm=nystrom", "algorithm.max_basis=32", "dataset=sine1d", "dataset.n_train=300",
            "hyper=ml", "hyper.subset=200", "hyper.restarts=2", "lam=0.5", "kernel.width=1.0"]
    proc = _run(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "learned (ML)     kernel rbf(" in proc.stdout
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    ds = xr.open_dataset(path, engine="scipy")
    summary = json.loads(ds.attrs["summary"])
    assert summary["hyper_n_subset"] == 200 and summary["hyper_lam"] != 0.5
    assert summary["blas_threads"] >= 1
    assert ds["hyper_lml"].dims == ("hyper_eval",)
    assert np.nanmax(ds["hyper_lml"].values) == pytest.approx(
        summary["hyper_log_marginal_likelihood"])
    assert set(ds["hyper_run"].values) == {0, 1}
    # the recorded kernel is the best evaluation of the trace (the RBF's width = 2ℓ²)
    best = np.nanargmax(ds["hyper_lml"].values)
    width = 2 * math.exp(ds["hyper_log_lengthscale"].values[best]) ** 2
    assert f"width={width!r}"[:12] in summary["hyper_kernel"]
    (cache,) = (tmp_path / "outputs" / "stores" / "hyper").glob("*.json")
    before = cache.stat().st_mtime_ns
    again = _run(args + ["seed=1"], tmp_path)  # another job, same learning: read from cache
    assert again.returncode == 0, again.stderr[-2000:]
    assert cache.stat().st_mtime_ns == before
    assert "learned (ML)     kernel " + summary["hyper_kernel"] in again.stdout


@pytest.mark.parametrize("args,message", [
    (["hyper=ml", "kernel=polynomial"], "error: hyper=ml learns the kernels rbf, matern32, "
                                        "laplacian; kernel 'polynomial'"),
    (["hyper=ml", "hyper.subset=1"], "error: hyper: hyper.subset=1 is invalid; it must be an "
                                     "integer ≥ 2"),
    (["hyper=ml", "hyper.ard=maybe"], "error: hyper: hyper.ard='maybe' is invalid"),
    (["hyper=bayes"], "error: "),
])
def test_bad_hyper_input_is_one_line(tmp_path, args, message, _run):
    proc = _run(["algorithm=nystrom", "dataset=sine1d", *args], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "outputs" / "stores").exists()  # refused before any data is built


def test_a_sweep_learns_once_per_setting_and_records_it(tmp_path):
    """Two algorithms × two seeds on one dataset share one learning task; the sweep Dataset
    has the learned values (``final_hyper_*``) and the optimiser trace over ``hyper_eval``."""
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", "algorithm=nystrom,zhang_random",
         "algorithm.max_basis=16", "dataset=sine1d", "dataset.n_train=200", "seed=0,1",
         "hyper=ml", "hyper.subset=150", "hyper.restarts=2", "cluster.n_workers=2",
         "cluster.dashboard_address=:0"], cwd=tmp_path, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(list((tmp_path / "outputs" / "stores" / "hyper").glob("*.json"))) == 1
    ds = xr.open_zarr(tmp_path / "outputs" / "multirun" / "results.zarr")
    assert set(np.unique(ds["status"].values)) == {"ok"}
    lam = ds["final_hyper_lam"].values
    assert np.all(np.isfinite(lam)) and np.unique(lam).size == 1  # one learning for all
    assert ds["hyper_lml"].dims[-1] == "hyper_eval"
    assert np.nanmax(ds["hyper_lml"].values) == pytest.approx(
        float(ds["final_hyper_log_marginal_likelihood"].values.flat[0]))


def test_median_start_puts_every_length_scale_at_half_the_median_distance():
    """init=median: the first evaluation has variance var(y), σ² = lam and every ARD length
    scale at half the median pairwise distance of the subset (the start for many inputs)."""
    g = np.random.default_rng(2)
    Xd = g.normal(size=(200, 12))
    yd = np.sin(Xd[:, 0]) + 0.05 * g.normal(size=200)
    res = learn(Xd, yd, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(0),
                restarts=1, ard=True, init="median", subset=200)
    first = res.trace["theta"][0]
    assert math.exp(first[0]) == pytest.approx(np.var(yd))
    assert math.exp(first[-1]) == pytest.approx(0.1)
    assert np.allclose(first[1:-1], first[1])
    assert 1.5 < math.exp(first[1]) < 3.25  # half the median distance ≈ √(2·12) / 2
    assert res.log_marginal_likelihood > res.trace["log_marginal_likelihood"][0]
