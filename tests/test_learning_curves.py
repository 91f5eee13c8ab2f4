"""Lemma-4 learning curves (003 §3–§5): the GP's x̄-error, the ordering of the predictors, the
plateaux σ² + Σ_{i>m} λ_i and the detaching points n̄ = σ²/λ_m."""

import numpy as np
import pytest

from algorithms import REGISTRY, InputError, Kernel
from algorithms.curve_jobs import _curve_spec
from algorithms.learning_curves import gp_xbar_error, predictor_xbar_error
from algorithms.learning_curves import learning_curve as _learning_curve
from algorithms.projected import empirical_density, mercer, uniform_density

MATERN = Kernel("matern32", {"mu": 0.1})
UNIFORM = uniform_density(2000)


def learning_curve(name, kernel, density, *, baseline=None, **kw):
    """The curve of registered algorithm ``name`` (and ``baseline``, by name) via its spec's
    CurveModel."""
    paired = None if baseline is None else (baseline, REGISTRY[baseline].learning_curve)
    return _learning_curve(name, REGISTRY[name].learning_curve, kernel, density,
                           baseline=paired, **kw)


def test_gp_error_equals_g_optimal_on_the_complete_eigenbasis():
    """g° with every quadrature eigenfunction is the GP predictor (ΦΛ²Φᵀ = K_x̄Z W K_Zx̄)."""
    density = uniform_density(300)
    basis = mercer(MATERN, density, 300)
    rng = np.random.default_rng(0)
    for n, sigma2 in ((5, 1.0), (40, 0.1), (120, 0.01)):
        X = density.sample(rng, (1, n))[0]
        exact = gp_xbar_error(MATERN, density, X, sigma2)
        assert predictor_xbar_error("finite_full", basis, X, sigma2) == pytest.approx(exact,
                                                                                      rel=1e-8)


def test_gp_error_matches_monte_carlo():
    """E_f(n, x̄) against squared errors of the GP mean on GP draws at random test inputs."""
    rng = np.random.default_rng(1)
    sigma2, n, n_test, n_draws = 0.5, 12, 400, 600
    X = rng.uniform(size=(n, 1))
    Z = rng.uniform(size=(n_test, 1))
    A = np.vstack([X, Z])
    chol = np.linalg.cholesky(MATERN(A, A) + 1e-10 * np.eye(len(A)))
    f = chol @ rng.standard_normal((len(A), n_draws))
    t = f + np.sqrt(sigma2) * rng.standard_normal(f.shape)
    H = MATERN(X, X) + sigma2 * np.eye(n)
    mean = MATERN(Z, X) @ np.linalg.solve(H, t[:n])
    mc = np.mean((t[n:] - mean) ** 2)
    # the test inputs Z are a Monte-Carlo quadrature of p: use them for E_f as well
    assert gp_xbar_error(MATERN, empirical_density(Z), X, sigma2) == pytest.approx(mc, rel=0.03)
    # and the U(0,1) quadrature agrees with that to the sampling error of Z
    assert gp_xbar_error(MATERN, UNIFORM, X, sigma2) == pytest.approx(mc, rel=0.05)


def test_ordering_of_the_predictors_draw_by_draw():
    """Same seed ⇒ same x̄: E_f ≤ E_g° ≤ E_h° ≤ E_b and E_h° ≤ E_u° for every draw."""
    kw = {"lam": 0.1, "n_grid": [2, 6, 30, 100], "draws": 8, "seed": 3, "m": 5}
    errors = {name: learning_curve(name, MATERN, UNIFORM, **kw).errors
              for name in ("exact", "finite_full", "finite_optimal", "pbr", "finite_diagonal")}
    tol = 1e-10
    assert np.all(errors["exact"] <= errors["finite_full"] + tol)
    assert np.all(errors["finite_full"] <= errors["finite_optimal"] + tol)
    assert np.all(errors["finite_optimal"] <= errors["pbr"] + tol)
    assert np.all(errors["finite_optimal"] <= errors["finite_diagonal"] + tol)
    assert np.any(errors["finite_optimal"] < errors["pbr"] - 1e-4)


def test_h_optimal_reaches_its_plateau():
    """σ² = 1, m = 3: E_h°(n) falls towards σ² + Σ_{i>3} λ_i = 1.2344 from above."""
    curve = learning_curve("finite_optimal", MATERN, UNIFORM, lam=1.0, n_grid=[50, 400, 3000],
                           draws=4, seed=0, m=3)
    plateau = curve.summary["plateau"]
    assert plateau == pytest.approx(1.2344274, abs=1e-6)
    excess = curve.trace["xbar_error"] - plateau
    assert np.all(excess > 0) and np.all(np.diff(excess) < 0)
    assert excess[-1] < 0.003


@pytest.mark.parametrize("m", [3, 5, 8])
def test_detaching_point(m):
    """E_h° ≃ E_f well before n̄ = σ²/λ_m and close to the plateau gap Σ_{i>m} λ_i after it."""
    probe = learning_curve("finite_optimal", MATERN, UNIFORM, lam=1.0, n_grid=[1], draws=1,
                           seed=0, m=m)
    n_bar = probe.summary["detaching_point"]
    omitted = probe.summary["plateau"] - 1.0  # Σ_{i>m} λ_i
    grid = [max(1, round(n_bar / 3)), round(10 * n_bar)]
    kw = {"lam": 1.0, "n_grid": grid, "draws": 20, "seed": 1}
    h = learning_curve("finite_optimal", MATERN, UNIFORM, m=m, baseline="exact", **kw)
    detach = h.trace["xbar_error_minus_baseline"] / omitted
    assert detach[0] < 0.15 and detach[1] > 0.5


def test_pbr_gap_is_positive_and_vanishes():
    """003 Fig. 1b (σ² = 0.1): E_b − E_h° > 0, paired draw by draw, and → 0 as n grows."""
    curve = learning_curve("pbr", MATERN, UNIFORM, lam=0.1, n_grid=[3, 10, 30, 1000],
                           draws=20, seed=2, m=5, baseline="finite_optimal")
    gap = curve.trace["xbar_error_minus_baseline"]
    assert np.all(gap > 0)
    assert gap[-1] < 1e-3 * gap.max()
    # pairing: the baseline's own curve with the same seed gives the same difference
    h = learning_curve("finite_optimal", MATERN, UNIFORM, lam=0.1, n_grid=[3, 10, 30, 1000],
                       draws=20, seed=2, m=5)
    np.testing.assert_allclose(curve.trace["xbar_error"] - h.trace["xbar_error"], gap,
                               rtol=1e-9, atol=1e-14)


def test_bound7_holds_for_u_optimal():
    curve = learning_curve("finite_diagonal", MATERN, UNIFORM, lam=0.5, n_grid=[1, 5, 50, 300],
                           draws=40, seed=4, m=6)
    t = curve.trace
    assert np.all(t["xbar_error"] <= t["bound7_u_optimal"] + 3 * t["xbar_error_se"])


def test_empirical_density_draws_from_the_inputs():
    X = np.random.default_rng(5).normal(size=(300, 3))
    rbf = Kernel("rbf", {"width": 4.0})
    density = empirical_density(X)
    curve = learning_curve("finite_optimal", rbf, density, lam=0.1, n_grid=[5, 50], draws=3,
                           seed=0, m=20, baseline="exact")
    assert curve.summary["eigen_trace"] == pytest.approx(1.0)
    assert np.all(curve.trace["xbar_error_minus_baseline"] >= -1e-10)
    drawn = density.sample(np.random.default_rng(0), (2, 7))
    assert drawn.shape == (2, 7, 3) and all(any((row == X).all(1)) for row in drawn[0])


@pytest.mark.parametrize("name, label, message", [
    ("sgma", "algorithm", "algorithm='sgma' has no Lemma-4 learning curve"),
    ("nope", "learning_curve.baseline", "learning_curve.baseline='nope' has no Lemma-4 learning "
                                        "curve"),
])
def test_algorithm_without_a_learning_curve_is_refused(name, label, message):
    """The check moved from learning_curve to algorithms.curve_jobs, which resolves names to
    specs."""
    with pytest.raises(InputError, match=message) as err:
        _curve_spec(name, label)
    able = [n for n, spec in REGISTRY.items() if spec.learning_curve is not None]
    assert str(err.value).endswith("choose one of: " + ", ".join(able))
    assert "\n" not in str(err.value)
    assert _curve_spec("finite_optimal", label) is REGISTRY["finite_optimal"]


@pytest.mark.parametrize("kwargs, message", [
    ({"n_grid": [0, 5]}, "learning_curve.n=[0, 5]"),
    ({"draws": 0}, "learning_curve.draws=0"),
    ({"m": 0}, "m=0 must be an integer between 1"),
    ({"lam": -1.0}, "lam=-1.0"),
])
def test_bad_input(kwargs, message):
    args = {"name": "finite_optimal", "lam": 1.0, "n_grid": [5], "draws": 2, "m": 3, **kwargs}
    name = args.pop("name")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        learning_curve(name, MATERN, uniform_density(50), seed=0, **args)


def test_h_optimal_with_fewer_distinct_inputs_than_eigenfunctions():
    """x̄ drawn with replacement from 12 inputs, m = 10, n = 6, 11, 40: ΦᵀHΦ is singular when
    fewer than m distinct inputs are drawn (n = 11 has about 7); h° is still the optimum over
    FΦᵀ (between g° and b, draw by draw)."""
    X = np.random.default_rng(6).uniform(size=(12, 1))
    density = empirical_density(X)
    kw = {"lam": 0.2, "n_grid": [6, 11, 40], "draws": 6, "seed": 0, "m": 10}
    e = {name: learning_curve(name, MATERN, density, **kw).errors
         for name in ("finite_full", "finite_optimal", "pbr")}
    assert np.isfinite(e["finite_optimal"]).all()
    assert np.all(e["finite_full"] <= e["finite_optimal"] + 1e-9)
    assert np.all(e["finite_optimal"] <= e["pbr"] + 1e-9)
