"""Smola & Bartlett in full: error-bar precision, exact suboptimality traces, experiments."""

import numpy as np
import pytest

from algorithms import Kernel, run
from algorithms.sgma import error_bar_basis_sizes
from tests.conftest import make_problem


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
