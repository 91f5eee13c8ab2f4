import numpy as np
import pytest

from algorithms import REGISTRY, USES_KAPPA, Kernel
from algorithms.certificate import certify, primal_value
from algorithms.objectives import primal_objective
from tests.conftest import make_problem

SETTINGS = {"sgma": {"max_basis": 8, "eps": 0.0}, "zhang_greedy": {"max_basis": 8},
            "zhang_kappa_greedy": {"max_basis": 8}, "zhang_random": {"max_basis": 8},
            "exact": {}, "sparse_online": {"max_basis": 8}, "pbr": {"m": 6},
            "finite_full": {"m": 6}, "finite_optimal": {"m": 6}, "finite_diagonal": {"m": 6}}


def test_every_registered_algorithm_has_a_certificate_setting():
    assert set(SETTINGS) == set(REGISTRY)


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kernel", [Kernel("rbf", {"width": 2.0}), Kernel("matern32")])
def test_certified_bound_is_never_below_the_true_suboptimality(name, seed, kernel):
    blocks, y, _, _ = make_problem(n=70, d=3, seed=seed, kernel=kernel)
    lam = 0.2
    K = blocks.block(slice(None), slice(None))
    exact = REGISTRY["exact"](blocks, y, lam=lam)
    L_min = exact.summary["objective"]
    kw = {"kappa": 7} if name in USES_KAPPA else {}
    fit = REGISTRY[name](blocks, y, lam=lam, rng=np.random.default_rng(seed), **kw,
                         **SETTINGS[name])
    for max_dual in (3, 20, 70):  # weak and strong dual solutions
        cert = certify(blocks, y, lam, fit.basis, fit.coef, rng=np.random.default_rng(9),
                       max_dual=max_dual, tol=0.0)
        alpha = np.zeros(blocks.n)
        alpha[fit.basis] = fit.coef
        L = primal_objective(K @ alpha, alpha, y, lam)
        assert cert["objective"] == pytest.approx(L, rel=1e-10)
        assert cert["objective_lower_bound"] <= L_min + 1e-9 * abs(L_min)
        true = (L - L_min) / abs(L_min)
        assert cert["gap_certified"] >= true - 1e-9
    if name == "exact":
        assert cert["gap_certified"] < 1e-6  # a full dual greedy certifies the optimum


def test_certificate_stops_at_tol_and_uses_a_given_dual(problem):
    blocks, y, _, _ = problem
    fit = REGISTRY["sgma"](blocks, y, lam=0.1, kappa=10, rng=np.random.default_rng(0), eps=1e-4)
    given = certify(blocks, y, 0.1, fit.basis, fit.coef, rng=np.random.default_rng(1),
                    dual_objective=fit.summary["dual_objective"], tol=0.5)
    assert given["n_dual"] == 0 and given["gap_certified"] < 0.5
    assert given["objective_lower_bound"] == pytest.approx(fit.summary["objective_lower_bound"])
    assert primal_value(blocks, y, 0.1, np.array([], dtype=int), np.array([])) == 0.0
