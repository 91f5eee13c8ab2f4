"""The low-rank marginal likelihood (algorithms/marginal_likelihood_lowrank.py): equal to the
dense one when the basis is every point, its gradient against finite differences, Titsias'
bound below the exact value, and ``hyper.method=lowrank`` through learn and a job."""

import json

import numpy as np
import pytest
import xarray as xr

from algorithms import ArrayKernelBlocks, Kernel, run
from algorithms.hyper import learn
from algorithms.kernels import LEARNABLE
from algorithms.marginal_likelihood import Parameters, log_marginal_likelihood
from algorithms.marginal_likelihood_lowrank import LowRankObjective, pivoted_basis

rng = np.random.default_rng(5)
X = rng.normal(size=(70, 3))
y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=70)
CASES = [(name, ard, bound) for name in LEARNABLE for ard in (False, True)  # every row's
         for bound in ("vfe", "sor")]


def _theta(params, seed):
    return np.random.default_rng(seed).normal(scale=0.4, size=2 + params.n_lengths)


@pytest.mark.parametrize("name,ard,bound", CASES)
def test_every_point_as_basis_is_the_dense_marginal_likelihood(name, ard, bound):
    """Z = X: Q = K and tr(K − Q) = 0, so both forms are eq. 62 and its gradient eq. 64."""
    params = Parameters.of(Kernel(name), 3, ard)
    theta = _theta(params, 1)
    dense, dense_grad = log_marginal_likelihood(X, y, params, theta)
    value, grad = LowRankObjective(X, y, X, params, bound)(theta)
    assert abs(value - dense) <= 1e-8 * abs(dense)
    np.testing.assert_allclose(grad, dense_grad, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name,ard,bound", CASES)
def test_gradient_equals_finite_differences(name, ard, bound):
    """A 20-point pivoted-Cholesky basis; central differences with step 1e-6 in log θ."""
    params = Parameters.of(Kernel(name), 3, ard)
    theta = _theta(params, 2)
    Z = X[pivoted_basis(X, params.kernel(theta)[0], 20)]
    objective = LowRankObjective(X, y, Z, params, bound)
    _, grad = objective(theta)
    h = 1e-6
    fd = np.array([(objective(theta + e, False)[0] - objective(theta - e, False)[0]) / (2 * h)
                   for e in np.eye(len(theta)) * h])
    assert np.all(np.abs(grad - fd) <= 1e-6 * np.maximum(np.abs(fd), 1.0)), (grad, fd)
    assert objective.jitter == 0.0


def test_titsias_bound_is_below_the_exact_value_and_rises_with_the_basis():
    params = Parameters.of(Kernel("rbf"), 3, True)
    theta = _theta(params, 3)
    dense, _ = log_marginal_likelihood(X, y, params, theta, gradient=False)
    values = [LowRankObjective(X, y, X[pivoted_basis(X, params.kernel(theta)[0], m)], params,
                               "vfe")(theta, False)[0] for m in (5, 10, 20, 40, 70)]
    assert all(v <= dense + 1e-9 for v in values)
    assert np.all(np.diff(values) >= -1e-9) and values[-1] == pytest.approx(dense, rel=1e-10)


def test_the_basis_is_distinct_sorted_rows_of_largest_residual():
    kernel = Kernel("rbf", {"width": 2.0})
    chosen = pivoted_basis(X, kernel, 25)
    assert len(chosen) == 25 and np.all(np.diff(chosen) > 0)
    assert set(pivoted_basis(X, kernel, 70)) == set(range(70))  # m = n: every point


def test_the_basis_is_greedy_one_pivot_at_a_time_across_clusters():
    """Two clusters, the first 64 rows all in the first: at the start every residual ties at
    k(x, x), so a block of the top residuals would be rows 0..m−1, all in one cluster. One
    greedy pivot at a time takes row 0, then the other cluster (its residual is still ≈ k(x, x)),
    and so on: rows of both clusters, the pivot set of our incomplete Cholesky. A kernel of
    numerical rank below m (five inputs repeated) stops at its rank."""
    g = np.random.default_rng(11)
    X2 = np.vstack([g.normal(scale=0.3, size=(64, 2)), 6.0 + g.normal(scale=0.3, size=(36, 2))])
    y2 = np.sin(X2[:, 0]) + 0.1 * g.normal(size=100)
    kernel = Kernel("rbf", {"width": 1.0})
    chosen = pivoted_basis(X2, kernel, 8)
    assert len(chosen) == 8 and np.all(np.diff(chosen) > 0)
    assert (chosen < 64).any() and (chosen >= 64).any()
    ours = run("incomplete_cholesky", ArrayKernelBlocks(X2, kernel), y2, lam=0.1,
               max_basis=8).basis
    np.testing.assert_array_equal(chosen, np.sort(ours))
    repeated = np.repeat(g.normal(size=(5, 2)), 4, axis=0)
    low = pivoted_basis(repeated, kernel, 8)
    assert len(low) == 5 and len({tuple(x) for x in repeated[low]}) == 5


def test_learn_lowrank_with_every_point_reaches_the_dense_optimum():
    """method=lowrank with basis = n is the exact marginal likelihood: the same optimum as
    method=exact from the same starts."""
    kernel = Kernel("rbf", {"width": 2.0})
    exact = learn(X, y, kernel, 0.1, rng=np.random.default_rng(0), method="exact", restarts=1)
    low = learn(X, y, kernel, 0.1, rng=np.random.default_rng(0), method="lowrank", basis=70,
                restarts=1)
    assert low.method == "lowrank" and low.n_basis == 70 and exact.n_subset == low.n_subset == 70
    assert low.log_marginal_likelihood == pytest.approx(exact.log_marginal_likelihood, rel=1e-8)
    assert low.lam == pytest.approx(exact.lam, rel=1e-4)


def test_a_job_learns_from_every_point_with_the_lowrank_bound(tmp_path, run_cli):
    proc = run_cli(tmp_path, "algorithm=nystrom", "algorithm.max_basis=32", "dataset=friedman1",
                   "dataset.n_train=3000", "hyper=ml", "hyper.method=lowrank",
                   "hyper.basis=40", "hyper.restarts=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    summary = json.loads(xr.open_dataset(path, engine="scipy").attrs["summary"])
    assert summary["hyper_method"] == "lowrank" and summary["hyper_n_basis"] == 40
    assert summary["hyper_n_subset"] == 3000  # every training point
    assert np.isfinite(summary["test_rmse"])


def test_exact_learning_beyond_the_memory_is_one_line(tmp_path, run_cli):
    proc = run_cli(tmp_path, "algorithm=nystrom", "dataset=kin40k", "hyper=ml",
                   "hyper.method=exact")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: hyper.method=exact on n_train=36000 needs 48.3 GiB "
                                  "(5 arrays of 36000×36000) but ") and proc.stderr.count("\n") == 1
