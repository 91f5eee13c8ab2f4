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
from algorithms.hyper import BOUNDS, Parameters, at_bound, learn, log_marginal_likelihood
from algorithms.kernels import LEARNABLE
from pipeline.datasets import ingest, load_arrays
from pipeline.job.hyper import bound_warning

rng = np.random.default_rng(5)
X = rng.normal(size=(70, 3))
y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=70)
CASES = [(name, ard) for name in LEARNABLE for ard in (False, True)]  # every row's gradient


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


@pytest.mark.parametrize("name,ard", CASES)
def test_value_and_gradient_equal_the_dense_formulas_across_blocks_and_tiles(name, ard):
    """At n = 600 (three block columns of the factorisation, partial gradient tiles) the value
    and gradient equal eq. 62 and eq. 64 written densely: K_y⁻¹ by numpy, M = ααᵀ − K_y⁻¹ and
    one n × n D_j per length scale (to 1e-10 relative)."""
    from algorithms.marginal_likelihood import kernel_and_slope

    gen = np.random.default_rng(9)
    Xb = gen.normal(size=(600, 3))
    yb = np.sin(Xb[:, 0]) + 0.1 * gen.normal(size=600)
    params = Parameters.of(Kernel(name), 3, ard)
    theta = gen.normal(scale=0.3, size=2 + params.n_lengths)
    theta[-1] = math.log(0.05)
    value, grad = log_marginal_likelihood(Xb, yb, params, theta)
    S = Xb / np.exp(theta[1:-1])
    K, G = kernel_and_slope(name, S, S, math.exp(theta[0]))
    Ky = K + math.exp(theta[-1]) * np.eye(600)
    inverse = np.linalg.inv(Ky)
    alpha = inverse @ yb
    ref = -0.5 * yb @ alpha - 0.5 * np.linalg.slogdet(Ky)[1] - 300 * math.log(2 * math.pi)
    M = np.outer(alpha, alpha) - inverse
    per_dim = np.array([0.5 * np.sum(M * G * (S[:, j, None] - S[None, :, j]) ** 2)
                        for j in range(3)])
    expected = np.concatenate([[0.5 * np.sum(M * K)],
                               per_dim if ard else [per_dim.sum()],
                               [0.5 * math.exp(theta[-1]) * np.trace(M)]])
    assert value == pytest.approx(ref, rel=1e-10)
    assert np.abs(grad - expected).max() <= 1e-10 * np.abs(expected).max()


@pytest.mark.parametrize("ard", [False, True])
def test_the_compiled_gradient_pass_equals_numpys(ard, monkeypatch):
    """The RBF from WARM_UP_ROWS rows on takes compiled tiles (the kernel's exp and the
    gradient's elementwise pass, then one GEMM instead of numpy's tiles and a symm): the same
    value and gradient to round-off, here forced at n = 600 on two kernel threads."""
    import algorithms.kernels as kernels
    from algorithms.kernel_threads import use_kernel_threads

    gen = np.random.default_rng(11)
    Xb = gen.normal(size=(600, 4))
    yb = np.cos(Xb[:, 1]) + 0.1 * gen.normal(size=600)
    params = Parameters.of(Kernel("rbf"), 4, ard)
    theta = gen.normal(scale=0.3, size=2 + params.n_lengths)
    numpy_value, numpy_grad = log_marginal_likelihood(Xb, yb, params, theta)
    monkeypatch.setattr(kernels, "WARM_UP_ROWS", 100)
    with use_kernel_threads(2):
        value, grad = log_marginal_likelihood(Xb, yb, params, theta)
    assert value == pytest.approx(numpy_value, rel=1e-12)
    assert np.abs(grad - numpy_grad).max() <= 1e-11 * np.abs(numpy_grad).max()


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
    with pytest.raises(InputError, match=r"hyper=ml learns the kernels rbf, laplacian, matern32, "
                                         r"matern52; kernel 'polynomial'.*pass kernel=rbf \(or "
                                         r"laplacian, matern32, matern52\), or hyper=fixed"):
        learn(X, y, Kernel("polynomial"), 0.1, rng=np.random.default_rng(0))


def test_learn_keeps_the_best_run_and_its_trace():
    res = learn(X, y, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(1),
                restarts=2, subset=50)
    assert res.n_subset == 50 and len(res.runs) == 3  # the first start and 2 random ones
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
    centred = y - y.mean()  # center_y: the prior mean is the targets' mean
    assert res.y_offset == pytest.approx(y.mean())
    _, grad = log_marginal_likelihood(X[subset_rows], centred[subset_rows], params, theta)
    assert np.abs(grad).max() < 1e-3
    # the same seed learns the same values
    again = learn(X, y, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(1),
                  restarts=2, subset=50)
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
                 restarts=0, subset=n, ard=ard, init="kernel", center_y=False)
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
    assert set(ds["hyper_run"].values) == {0, 1, 2}  # the first start and 2 random ones
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
    (["hyper=ml", "kernel=polynomial"], "error: hyper=ml learns the kernels rbf, laplacian, "
                                        "matern32, matern52; kernel 'polynomial'"),
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
         "cluster.dashboard_address=null", "sweep=multirun"], cwd=tmp_path,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(list((tmp_path / "outputs" / "stores" / "hyper").glob("*.json"))) == 1
    ds = xr.open_zarr(tmp_path / "outputs" / "multirun" / "results.zarr")
    assert set(np.unique(ds["status"].values)) == {"ok"}
    lam = ds["final_hyper_lam"].values
    assert np.all(np.isfinite(lam)) and np.unique(lam).size == 1  # one learning for all
    assert ds["hyper_lml"].dims[-1] == "hyper_eval"
    assert np.nanmax(ds["hyper_lml"].values) == pytest.approx(
        float(ds["final_hyper_log_marginal_likelihood"].values.flat[0]))
    # a second sweep of the same jobs (another name) is served the cached learning, with its
    # seconds; relearn=true sets it aside and learns again
    cache = tmp_path / "outputs" / "stores" / "hyper"
    first = next(cache.glob("*.json"))
    again = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", "algorithm=nystrom", "algorithm.max_basis=16",
         "dataset=sine1d", "dataset.n_train=200", "seed=0", "hyper=ml", "hyper.subset=150",
         "hyper.restarts=2", "cluster.n_workers=1", "cluster.dashboard_address=null",
         "sweep=again", "relearn=true"], cwd=tmp_path, capture_output=True, text=True,
        timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "relearn=true: 1 cached learning(s) set aside into " in again.stdout
    aside = list((cache / "set_aside").glob("*.json"))
    assert len(aside) == 1 and aside[0].name.startswith(first.stem + ".")
    assert [p.name for p in cache.glob("*.json")] == [first.name]  # learned again
    relearned = xr.open_zarr(tmp_path / "outputs" / "again" / "results.zarr")
    assert set(np.unique(relearned["status"].values)) == {"ok"}
    # the same data, setting and code: the same optimum, learned again in its own seconds
    assert float(relearned["final_hyper_lam"].values.flat[0]) == pytest.approx(lam.flat[0])
    # a point added to it: the learning its finished job used is kept (not two kernels in one
    # sweep), and that job is not run again
    more = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", "algorithm=nystrom", "algorithm.max_basis=16",
         "dataset=sine1d", "dataset.n_train=200", "seed=0,1", "hyper=ml", "hyper.subset=150",
         "hyper.restarts=2", "cluster.n_workers=1", "cluster.dashboard_address=null",
         "sweep=again", "merge=true", "relearn=true"], cwd=tmp_path, capture_output=True,
        text=True, timeout=600)
    assert more.returncode == 0, more.stdout[-2000:] + more.stderr[-3000:]
    assert "1 already finished, 1 to run" in more.stdout
    assert ("relearn=true: no cached learning set aside; 1 kept, as finished jobs of this "
            "sweep used them") in more.stdout
    assert len(list((cache / "set_aside").glob("*.json"))) == 1


def test_median_start_puts_every_length_scale_at_half_the_median_distance():
    """init=median: the first evaluation has variance var(y), σ² = lam and every ARD length
    scale at half the median pairwise distance of the subset (the start for many inputs)."""
    g = np.random.default_rng(2)
    Xd = g.normal(size=(200, 12))
    yd = np.sin(Xd[:, 0]) + 0.05 * g.normal(size=200)
    res = learn(Xd, yd, Kernel("rbf", {"width": 2.0}), 0.1, rng=np.random.default_rng(0),
                restarts=0, ard=True, init="median", subset=200)
    first = res.trace["theta"][0]
    assert math.exp(first[0]) == pytest.approx(np.var(yd))
    assert math.exp(first[-1]) == pytest.approx(0.1)
    assert np.allclose(first[1:-1], first[1])
    assert 1.5 < math.exp(first[1]) < 3.25  # half the median distance ≈ √(2·12) / 2
    assert res.log_marginal_likelihood > res.trace["log_marginal_likelihood"][0]


def _sklearn_optimum_from(X, y, length_scale, restarts, seed=0):
    """scikit-learn's GPR optimum (C·RBF + White, the same bounds) from variance 1, the given
    length scale and noise 0.1, with ``restarts`` random restarts: (log marginal likelihood,
    length scale, noise)."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = (ConstantKernel(1.0, BOUNDS) * RBF(length_scale, BOUNDS) + WhiteKernel(0.1, BOUNDS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gp = GaussianProcessRegressor(kernel, alpha=0.0, n_restarts_optimizer=restarts,
                                      random_state=seed).fit(X, y)
    return (gp.log_marginal_likelihood_value_, float(gp.kernel_.k1.k2.length_scale),
            gp.kernel_.k2.noise_level)


def test_random_restarts_leave_a_bad_local_optimum_for_scikit_learns():
    """A fast sine (ℓ ≈ 0.08 on [0, 1]) started from ℓ = 10: one L-BFGS-B run stays in the
    basin where everything is noise (LML −160.1); five log-uniform restarts over the bounds
    box reach the optimum scikit-learn finds from inside the signal's basin (ℓ = 0.05 start;
    LML 86.6). (scikit-learn's own five restarts from ℓ = 1, random_state 0, all end in the
    noise basin on this problem.)"""
    g = np.random.default_rng(3)
    Xs = g.uniform(size=(150, 1))
    ys = np.sin(30 * Xs[:, 0]) + 0.1 * g.normal(size=150)
    ys -= ys.mean()  # both fit a zero mean to the same (centred) targets
    far = Kernel("rbf", {"width": 200.0})  # ℓ = 10, a hundred times the data's scale
    stuck = learn(Xs, ys, far, 1.0, rng=np.random.default_rng(0), restarts=0, init="kernel")
    lml, ls, noise = _sklearn_optimum_from(Xs, ys, 0.05, 0)
    assert ls < 0.2 and noise < 0.05  # scikit-learn: the signal, at its noise level
    assert stuck.log_marginal_likelihood < lml - 50  # the noise basin, far below
    ours = learn(Xs, ys, far, 1.0, rng=np.random.default_rng(0), restarts=5, init="kernel")
    assert len(ours.runs) == 6
    assert ours.log_marginal_likelihood >= lml - 1e-3
    assert ours.lam == pytest.approx(noise, rel=1e-2)
    starts = np.array([ours.trace["theta"][ours.trace["run"] == r][0] for r in range(1, 6)])
    assert np.all((starts >= math.log(BOUNDS[0])) & (starts <= math.log(BOUNDS[1])))
    assert np.ptp(starts[:, 1]) > 5  # spread over the box, not around the first start


def test_parameters_on_a_bound_are_named():
    names = ["log_variance", "log_lengthscale", "log_noise"]
    lo, hi = BOUNDS
    # within 1 % of the box's log-width (23.0): a factor e^0.23 = 1.26 of a bound
    assert at_bound(np.log([lo * 1.2, 1.0, hi / 1.2]), names) == ["log_variance=lower",
                                                                 "log_noise=upper"]
    assert at_bound(np.log([lo * 1.3, 1.0, hi / 1.3]), names) == []
    assert "white-noise model" in bound_warning("log_lengthscale=lower")
    assert "inputs the model ignores: 3" in bound_warning("log_lengthscale_3=upper")
    assert "ignores every input" in bound_warning("log_lengthscale=upper")
    assert bound_warning("") is None


def test_a_learning_on_a_bound_is_recorded_and_printed_as_one_warning(tmp_path, _run):
    """One start from a configured kernel in the white-noise plateau (ℓ = 1e-5, its lower
    bound: kernel.width = 2ℓ²) with a zero prior mean on abalone's raw rings, where the
    gradient over ℓ vanishes: the learning stays on the bound, a white-noise model (test RMSE
    9.35). The job records it (``hyper_at_bound``), prints one ``warning:`` line for it (and
    one for the trivial fit), exits 0.
    (From the default width the same protocol ends anywhere on that plateau, ℓ = 1e-5 … 1e-2,
    depending on rounding in the gradient: the start is put on it to test the warning.)"""
    proc = _run(["algorithm=exact", "dataset=abalone", "hyper=ml", "hyper.restarts=0",
                 "hyper.init=kernel", "kernel.width=2e-10", "hyper.center_y=false",
                 "hyper.subset=600"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 2, proc.stderr  # on a bound, and no better than the training mean
    assert warning[0].startswith("warning: hyper=ml learned log_lengthscale=lower (within 1 % "
                                 "of the bounds 1e-05 … 100000, in log): a white-noise model")
    assert warning[1].startswith("warning: test RMSE 9.354 is not below")
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    summary = json.loads(xr.open_dataset(path, engine="scipy").attrs["summary"])
    assert summary["hyper_at_bound"] == "log_lengthscale=lower"
    assert summary["hyper_y_offset"] == 0.0 and summary["test_rmse"] > 9
    assert "on a bound: log_lengthscale=lower" in proc.stdout


def test_a_fit_no_better_than_the_training_mean_is_one_warning(tmp_path, _run):
    """The old protocol on abalone's raw rings (one start from the configured kernel, a zero
    prior mean) ends on the white-noise plateau, ℓ anywhere from 1e-5 to 1e-2 (the length
    scales' gradient vanishes there): its test RMSE 9.35 is far above the training mean's
    1.87, and the job says so in one ``warning:`` line, exit 0."""
    proc = _run(["algorithm=exact", "dataset=abalone", "hyper=ml", "hyper.restarts=0",
                 "hyper.init=kernel", "hyper.center_y=false", "hyper.subset=600"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert any(line.startswith("warning: test RMSE 9.354 is not below the training-mean "
                               "predictor's 1.869") for line in warning), proc.stderr


def test_a_sweep_counts_its_trivial_points_in_one_warning():
    from pipeline.sweep.outcome import _trivial_lines

    ds = xr.Dataset({"final_test_rmse": ("p", [0.5, 1.0, 0.99, np.nan]),
                     "final_baseline_test_rmse": ("p", [1.0, 1.0, 1.0, 1.0]),
                     "status": ("p", ["ok", "ok", "failed", "ok"])})
    assert _trivial_lines(ds) == [
        "warning: 1 of 2 finished sweep points have a test RMSE not below the training-mean "
        "predictor's (at least 0.99 of it): trivial fits, which publish flags and never ranks"]
    assert _trivial_lines(ds.assign(final_test_rmse=("p", [0.5, 0.2, 1.0, 0.5]))) == []


@pytest.mark.slow
def test_the_default_abalone_job_learns_scikit_learns_optimum(tmp_path, _run):
    """`algorithm=exact dataset=abalone hyper=ml` (raw rings, mean ≈ 10): the learned
    marginal likelihood is within 1 nat of scikit-learn's 3-restart optimum on the same
    subset (centred targets for both), and the test RMSE is at most 1.40 (the white-noise
    optimum it used to reach: 9.35). A 600-row subset keeps scikit-learn's side to seconds."""
    proc = _run(["algorithm=exact", "dataset=abalone", "hyper=ml", "hyper.subset=600",
                 "seed=0"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning:" not in proc.stderr
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    summary = json.loads(xr.open_dataset(path, engine="scipy").attrs["summary"])
    store = ingest({"name": "abalone"}, tmp_path / "stores")
    X_train, y_train, _, _ = load_arrays(store)
    rows = np.sort(np.random.default_rng([0, 7]).choice(len(y_train), 600, replace=False))
    lml, _, _ = _sklearn_optimum_from(X_train[rows], y_train[rows] - y_train.mean(), 1.0, 3)
    assert summary["hyper_log_marginal_likelihood"] >= lml - 1.0
    assert summary["test_rmse"] <= 1.40
    assert summary["hyper_y_offset"] == pytest.approx(y_train.mean())


def test_the_report_and_the_sweep_name_each_setting_on_a_bound(monkeypatch):
    """Two algorithms share each split's learning: one line per split that ended on a bound,
    counting its jobs; the sweep's warning names the setting."""
    from pipeline.job.hyper import at_bound_settings
    from pipeline.report.tables import at_bound as at_bound_text
    from pipeline.sweep import outcome

    dims = ("algorithm", "dataset.split")
    ds = xr.Dataset(
        {"status": (dims, np.array([["ok", "ok"], ["ok", "failed"]])),
         "final_hyper_at_bound": (dims, np.array([["log_noise=upper", ""],
                                                  ["log_noise=upper", ""]], dtype=object))},
        coords={"algorithm": ["exact", "nystrom"], "dataset.split": [0, 1]})
    assert at_bound_settings(ds) == [("dataset.split=0", "log_noise=upper", 2)]
    assert at_bound_text(ds) == "- dataset.split=0: log_noise=upper (2 jobs)"
    monkeypatch.setattr("pipeline.results.consolidate.load", lambda path: ds)
    (line,) = outcome.sweep_warnings("results.zarr")
    assert line.startswith("warning: hyper=ml at dataset.split=0 learned log_noise=upper")
    assert at_bound_settings(ds.drop_vars("final_hyper_at_bound")) == []


def _learning_config(tmp_path):
    """A job learning its hyperparameters (its :class:`~pipeline.job.spec.JobSpec`)."""
    from pipeline.job.spec import JobSpec

    return JobSpec.from_config({"algorithm": {"name": "nystrom"},
                                "dataset": {"name": "sine1d", "n_train": 120},
                                "kernel": {"name": "rbf", "width": 2.0},
                                "hyper": {"name": "ml", "subset": 100, "max_iter": 30},
                                "store_root": str(tmp_path / "stores")})


def test_a_damaged_cached_learning_is_learned_again_with_a_note(tmp_path, capsys, monkeypatch):
    """The hyper cache carries the sha256 of its content: a changed digit is never served."""
    import pipeline.job.hyper as hyper
    from pipeline.job.hyper import learned

    calls = []
    real = hyper._learn
    monkeypatch.setattr(hyper, "_learn", lambda *args: calls.append(1) or real(*args))

    config = _learning_config(tmp_path)
    first = learned(config)
    (path,) = (tmp_path / "stores" / "hyper").glob("*.json")
    assert learned(config).lam == first.lam and "note:" not in capsys.readouterr().err
    text = path.read_text()
    lam = json.dumps(json.loads(text)["lam"])
    damaged = text.replace(lam, repr(2 * first.lam), 1)  # a changed number, not just its text
    assert damaged != text
    path.write_text(damaged)
    again = learned(config)
    err = capsys.readouterr().err
    assert f"note: learned hyperparameters {path}" in err and "learned again" in err
    rewritten = json.loads(path.read_text())  # relearned (the same optimum) and rewritten
    assert again.lam == first.lam and rewritten["lam"] == first.lam
    assert len(calls) == 2  # the first learning, and the one the damage caused
    path.write_text("{not json")
    assert learned(config).lam == first.lam
    assert f"note: learned hyperparameters {path}" in capsys.readouterr().err


def test_jobs_needing_one_learning_at_once_learn_it_once(tmp_path, monkeypatch):
    """A lease around the learning: concurrent jobs wait for it and read the cache."""
    import threading

    import pipeline.job.hyper as hyper

    config = _learning_config(tmp_path)
    calls = []
    real = hyper._learn

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(hyper, "_learn", counted)
    out: list = []
    threads = [threading.Thread(target=lambda: out.append(hyper.learned(config).lam))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(out) == 3 and len(set(out)) == 1 and len(calls) == 1


def test_the_learning_benchmark_writes_its_figures_at_small_size(tmp_path, monkeypatch):
    """python -m pipeline.bench.learning size=small: per thread count the same run's GEMM and,
    per setting, one evaluation's seconds, its parts, its arithmetic and their ratio (the
    structure, not the timings)."""
    from pipeline.bench.learning import arithmetic, main

    monkeypatch.chdir(tmp_path)
    assert main(["size=small"]) == 0
    out = tmp_path / "outputs" / "bench_learning_small"
    figures = json.loads((out / "figures.json").read_text())
    assert figures["goal"] == 1.5 and [run["threads"] for run in figures["runs"]] == [1]
    run = figures["runs"][0]
    assert run["gemm_seconds"] > 0
    assert [(r["d"], r["ard"]) for r in run["rows"]] == [(2, False), (2, True), (3, False),
                                                         (3, True)]
    for row in run["rows"]:
        assert row["arithmetic_flops"] == arithmetic(300, row["d"])
        assert row["over_arithmetic"] == pytest.approx(
            row["seconds"] / row["arithmetic_seconds_at_gemm_rate"])
        assert all(row[key] > 0 for key in ("seconds", "kernel_seconds", "gradient_pass_seconds",
                                            "factor_and_invert_seconds",
                                            "lapack_potrf_potri_seconds"))
    assert (out / "learning.png").stat().st_size > 10000
    assert main(["size=huge"]) == 2


def test_a_predictive_variance_below_the_noise_is_a_warning_for_the_job_and_the_sweep():
    from pipeline.job.summary import variance_warning
    from pipeline.sweep.outcome import _variance_lines

    assert variance_warning({"test_var_below_noise": 0.0}) is None
    assert variance_warning({}) is None
    assert variance_warning({"test_var_below_noise": 0.22}).startswith(
        "warning: on 22 % of the test rows the predictive variance of y is below σ²")
    ds = xr.Dataset({"final_test_var_below_noise": ("point", [0.0, 0.5, np.nan, 0.1]),
                     "status": ("point", ["ok", "ok", "ok", "failed"])})
    assert _variance_lines(ds) == [
        "warning: 1 of 2 finished sweep points with a predictive variance have it below σ² on "
        "some test rows (round-off in the method's variance): their test NLPD is not the "
        "method's (final_test_var_below_noise)"]
    assert _variance_lines(ds.drop_vars("final_test_var_below_noise")) == []
