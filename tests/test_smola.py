"""Smola & Bartlett in full: error-bar precision, exact suboptimality traces, experiments."""

import numpy as np
import pytest

from algorithms import Kernel, run
from algorithms.sgma import error_bar_basis_sizes
from pipeline.report import render
from pipeline.results.consolidate import load
from tests.conftest import make_problem
from tests.test_experiments import run_experiment


@pytest.mark.parametrize("eps", [0.2, 0.025])
def test_bracket_criterion_pins_down_the_error_bar_quadratic(eps):
    blocks, _, X_test, _ = make_problem(n=150, d=3, kernel=Kernel("rbf", {"width": 1.0}))
    lam = 0.1
    K = blocks.block(slice(None), slice(None))
    for x in X_test[:5]:
        k = blocks.cross(x[None, :], slice(None))[0]
        q = k @ np.linalg.solve(K + lam * np.eye(blocks.n), k)
        sgma = run("sgma", blocks, k, lam=lam, kappa=10, rng=np.random.default_rng(0), eps=eps,
                   criterion="bracket")
        q_lo = -2 * sgma.summary["dual_objective"]
        q_hi = (k @ k + 2 * sgma.summary["objective"]) / lam
        assert q_lo <= q * (1 + 1e-10) and q <= q_hi * (1 + 1e-10)
        assert q_hi - q_lo < eps * 0.5 * (q_hi + q_lo)
        assert sgma.summary["stop_reason"] == f"bracket < eps={eps}"
    sizes, by_gap = error_bar_basis_sizes(blocks, X_test[:5], lam, 10,
                                          np.random.default_rng(0), 0.025)
    assert np.all(sizes >= by_gap) and np.all(sizes >= 1)


@pytest.mark.parametrize("reference", ["dense", "cg"])
def test_suboptimality_traces_use_the_exact_optimum(problem, reference):
    blocks, y, _, _ = problem
    exact = run("exact", blocks, y, lam=0.1)
    sgma = run("sgma", blocks, y, lam=0.1, kappa=blocks.n, rng=np.random.default_rng(0),
               eps=0.0, reference=reference)
    primal, dual = sgma.trace["primal_subopt"], sgma.trace["dual_subopt"]
    L = sgma.trace["objective"]
    L_min = exact.summary["objective"]
    np.testing.assert_allclose(primal, (L - L_min) / abs(L_min), rtol=1e-8, atol=1e-12)
    assert np.all(primal >= -1e-10) and np.all(dual >= -1e-10)
    assert primal[-1] < 1e-9 and dual[-1] < 1e-9
    assert np.isnan(run("sgma", blocks, y, lam=0.1, kappa=5, rng=np.random.default_rng(0),
                        max_basis=3).trace["primal_subopt"]).all()


def test_convergence_experiment_reduced(tmp_path):
    path = run_experiment(tmp_path, "experiment=smola2000_convergence",
                          "kappa=1,59", "seed=range(0,3)", "dataset.standardize_y=false",
                          "algorithm.max_basis=40")
    ds = load(path).load()
    gap = ds["gap"].sel(step=40).squeeze()
    assert gap.sel(kappa=59).mean() < gap.sel(kappa=1).mean()  # larger subsets converge faster
    assert (ds["final_gap_certified"] >= ds["primal_subopt"].sel(step=40) - 1e-12).all()
    report = render(path).read_text()
    assert "gap at step 20" in report and "Fig. 1" in report


def test_errorbar_and_generalisation_experiments_reduced(tmp_path):
    path = run_experiment(tmp_path, "experiment=smola2000_errorbars",
                          "kernel.width=10.0,50.0")  # the command line overrides params
    ds = load(path).load()
    means = ds["final_error_bar_basis_mean"].squeeze()
    assert 5 < means.sel({"kernel.width": 10.0}) < 40  # paper: 17 ± 16
    assert means.sel({"kernel.width": 50.0}) < means.sel({"kernel.width": 10.0})  # paper: 8 ± 5
    assert "79±61" in render(path).read_text()

    path = run_experiment(tmp_path, "experiment=smola2000_generalisation",
                          "dataset.split_seed=range(0,3)", "dataset.standardize_y=false")
    ds = load(path).load()
    rmse = ds["final_test_rmse"].squeeze()
    assert np.all(np.abs(rmse.sel(algorithm="sgma") - rmse.sel(algorithm="exact")) < 0.05)
    text = render(path).read_text()
    assert "Paired t-tests" in text and "| final_test_rmse | – | sgma | exact |" in text
