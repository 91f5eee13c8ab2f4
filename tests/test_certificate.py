import numpy as np
import pytest

from algorithms import REGISTRY, Kernel, run
from algorithms.certificate import certify, primal_value
from algorithms.evaluation import options_of
from algorithms.objectives import primal_objective
from tests.conftest import make_problem


def exact_anyway(spec):
    """Reproduces the exact GP whatever its options (so also with its check_options)."""
    return spec.exact_limit is not None and not spec.exact_limit.options and not spec.uses_kappa


def test_every_registered_algorithm_has_a_certificate_setting():
    """The setting is each spec's check_options (no list to edit here): it must be a valid
    setting of that algorithm, and some registered algorithm must be exact under it."""
    for spec in REGISTRY.values():
        options_of(spec, spec.check_options)  # raises InputError unless a valid setting
    assert "exact" in [name for name, spec in REGISTRY.items() if exact_anyway(spec)]


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items()
                                         if s.task == "regression"))  # Theorem 1: regression
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kernel", [Kernel("rbf", {"width": 2.0}), Kernel("matern32")])
def test_certified_bound_is_never_below_the_true_suboptimality(name, seed, kernel):
    blocks, y, _, _ = make_problem(n=70, d=3, seed=seed, kernel=kernel)
    lam = 0.2
    K = blocks.block(slice(None), slice(None))
    exact = run("exact", blocks, y, lam=lam)
    L_min = exact.summary["objective"]
    spec = REGISTRY[name]
    # kappa is ignored by the algorithms that do not use it
    fit = run(spec, blocks, y, lam=lam, kappa=7, rng=np.random.default_rng(seed),
              **spec.check_options)
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
    if exact_anyway(spec):  # the exact GP
        assert cert["gap_certified"] < 1e-6  # a full dual greedy certifies the optimum


def test_certificate_stops_at_tol_and_uses_a_given_dual(problem):
    blocks, y, _, _ = problem
    fit = run("sgma", blocks, y, lam=0.1, kappa=10, rng=np.random.default_rng(0), eps=1e-4)
    given = certify(blocks, y, 0.1, fit.basis, fit.coef, rng=np.random.default_rng(1),
                    dual_objective=fit.summary["dual_objective"], tol=0.5)
    assert given["n_dual"] == 0 and given["gap_certified"] < 0.5
    assert given["objective_lower_bound"] == pytest.approx(fit.summary["objective_lower_bound"])
    assert primal_value(blocks, y, 0.1, np.array([], dtype=int), np.array([])) == 0.0
