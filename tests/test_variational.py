"""GP classification by the Jaakkola–Jordan variational bounds (algorithms/variational.py,
004 §4.2 eqs. 76–77): the per-point bounds, the closing bracket on the log posterior's maximum
Ψ(f̂) (taken from gp_laplace's Newton iteration), the lower bound's Gaussian classifier against
its dense formulas and against the Laplace approximation, and bad options."""

import numpy as np
import pytest
from scipy.special import expit

from algorithms import ArrayKernelBlocks, InputError, Kernel, run
from algorithms.laplace import log_sigmoid, predictive_probability
from algorithms.variational import (
    binary_entropy,
    jj_lambda,
    log_sigmoid_lower,
    log_sigmoid_upper,
)
from pipeline.datasets import build

CANCER_KERNEL = Kernel("rbf", {"width": 18.0, "variance": 2.0})
MOONS_KERNEL = Kernel("rbf", {"width": 0.5, "variance": 10.0})  # |f̂| up to 5.8: slower MM
ROUND_OFF = 1e-12  # relative slack of "≤" between two computations of Ψ(f̂)


def problem(name, kernel):
    arrays, _ = build({"name": name})
    X, y = arrays["X_train"], arrays["y_train"]
    return ArrayKernelBlocks(X, kernel), y, (arrays["X_test"], arrays["y_test"])


@pytest.fixture(scope="module", params=[("breast_cancer", CANCER_KERNEL),
                                        ("two_moons", MOONS_KERNEL)], ids=lambda p: p[0])
def fits(request):
    """(name, blocks, y, test, gp_laplace fit, gp_variational fit at the default tol)."""
    name, kernel = request.param
    blocks, y, test = problem(name, kernel)
    laplace = run("gp_laplace", blocks, y, lam=1.0, rng=0, test=test)
    variational = run("gp_variational", blocks, y, lam=1.0, rng=0, test=test)
    return name, blocks, y, test, laplace, variational


# ----------------------------------------------------------------------------- eqs. 76–77

def test_per_point_bounds_enclose_log_sigmoid_and_touch_it():
    """For every t on a grid and random ν ∈ ℝ, μ ∈ [0, 1]: (76) ≤ log σ(t) ≤ (77), with
    equality at ν = ±t and at μ = σ(−t)."""
    rng = np.random.default_rng(0)
    t = np.linspace(-30.0, 30.0, 1201)[:, None]
    nu = np.concatenate([[0.0, 1e-5, -1e-5], rng.normal(0.0, 6.0, 200)])[None, :]
    mu = np.concatenate([[0.0, 1.0, 0.5], rng.uniform(0.0, 1.0, 200)])[None, :]
    exact = log_sigmoid(t)
    slack = 1e-13 * (1.0 + np.abs(t))  # round-off of the quadratic in t
    assert (log_sigmoid_lower(t, nu) <= exact + slack).all()
    assert (log_sigmoid_upper(t, mu) >= exact - slack).all()
    # the bound is not tight away from its parameter: at t = 5, ν = 0 it is 5/2 − 25/8 − log 2
    assert log_sigmoid_lower(5.0, 0.0) == pytest.approx(2.5 - 25 / 8 - np.log(2), rel=1e-15)
    t = t[:, 0]
    for nu_star in (t, -t, np.abs(t)):
        np.testing.assert_allclose(log_sigmoid_lower(t, nu_star), log_sigmoid(t),
                                   rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(log_sigmoid_upper(t, expit(-t)), log_sigmoid(t),
                               rtol=1e-12, atol=1e-14)


def test_lower_bound_is_the_papers_formula():
    """The implementation's −log 2cosh(ν/2) + t/2 form is eq. 76 as printed, λ(ν) is
    (σ(ν) − ½)/(2ν), continuous through its series near 0 with λ(0) = 1/8, and H is the
    binary entropy."""
    t = np.linspace(-8.0, 8.0, 33)[:, None]
    nu = np.array([-7.0, -0.3, 0.01, 0.5, 2.0, 9.0])[None, :]
    lam = (expit(nu) - 0.5) / (2.0 * nu)
    np.testing.assert_allclose(jj_lambda(nu), lam, rtol=1e-12)
    printed = log_sigmoid(nu) + (t - nu) / 2 - lam * (t * t - nu * nu)
    np.testing.assert_allclose(log_sigmoid_lower(t, nu), printed, rtol=1e-12, atol=1e-13)
    assert jj_lambda(0.0) == 0.125
    below, above = jj_lambda(np.nextafter(1e-4, 0.0)), jj_lambda(1e-4)
    assert abs(below - above) < 1e-16 and abs(above - (0.125 - 1e-8 / 96)) < 1e-17
    mu = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(binary_entropy(mu),
                               [0.0, *(-m * np.log(m) - (1 - m) * np.log(1 - m)
                                       for m in mu[1:4]), 0.0], rtol=1e-15, atol=0)


# ----------------------------------------------------------------------------- the bracket

def test_bracket_encloses_the_laplace_maximum_and_closes(fits):
    """At every iteration lower ≤ Ψ(f̂) ≤ upper (Ψ(f̂) of gp_laplace); the lower bound never
    falls (minorise–maximise) and the upper never rises (Armijo); at the stop the relative
    width is below tol = 1e-9 and both are within 2e-9 relative of Ψ(f̂).

    Measured (widths upper − lower, first → last iteration):
    breast_cancer 220.1 → 6.2e-8 in 33 iterations (Ψ(f̂) = −78.40; the upper bound is at
    Ψ(f̂) to round-off from iteration 6, the lower closes linearly at a rate ≈ 0.55);
    two_moons 655.5 → 3.2e-8 in 66 iterations (Ψ(f̂) = −34.67, rate ≈ 0.75)."""
    name, _, _, _, laplace, variational = fits
    psi = laplace.summary["log_posterior"]
    lower = variational.trace["log_posterior_lower"]
    upper = variational.trace["log_posterior_upper"]
    slack = ROUND_OFF * abs(psi)
    assert len(lower) >= 10  # a real iteration, not a one-step solve
    assert (lower <= psi + slack).all() and (upper >= psi - slack).all()
    assert (np.diff(lower) >= -slack).all() and (np.diff(upper) <= slack).all()
    width = upper - lower
    np.testing.assert_allclose(variational.trace["bracket_width"], width, rtol=0, atol=0)
    np.testing.assert_allclose(variational.trace["gap"], width / (1 + np.abs(lower)),
                               rtol=1e-15)
    np.testing.assert_allclose(variational.trace["objective"], -lower, rtol=0)
    assert width[0] > 100.0 and width[-1] < 1e-9 * (1 + abs(lower[-1]))
    summary = variational.summary
    assert summary["stop_reason"].startswith("bracket width")
    assert summary["gap"] < 1e-9 and summary["iterations"] == len(lower)
    assert summary["log_posterior_lower"] == pytest.approx(psi, rel=2e-9)
    assert summary["log_posterior_upper"] == pytest.approx(psi, rel=2e-9)
    # Ψ at the lower bound's maximiser lies between the bound and Ψ(f̂)
    assert lower[-1] - slack <= summary["log_posterior"] <= psi + slack


def test_the_maximisers_are_the_laplace_mode(fits):
    """Closed to tol = 1e-13, the lower bound's maximiser is the Laplace mode f̂ (measured
    1.9e-6 on breast_cancer, 4.3e-6 on two_moons) and the upper bound's μ is the tight
    σ(−y∘f̂) (4e-12, 1e-11): the bracket closes at the same point from both sides."""
    name, blocks, y, test, laplace, _ = fits
    tight = run("gp_variational", blocks, y, lam=1.0, rng=0, tol=1e-13)
    f_hat = laplace.extras["latent_mode"]
    np.testing.assert_allclose(tight.extras["latent_mode"], f_hat, rtol=0, atol=1e-5)
    np.testing.assert_allclose(tight.extras["mu"], expit(-y * f_hat), rtol=0, atol=1e-9)


def test_classifier_is_close_to_laplace_and_more_confident(fits):
    """Same test error as gp_laplace (measured 5/169 on breast_cancer, 13/300 on two_moons).
    The lower bound's Gaussian has precision K⁻¹ + 2Λ ⪰ K⁻¹ + W (2λ(ν) = tanh(ν/2)/(2ν) ≥
    σ(ν)(1 − σ(ν)) as sinh ν ≥ ν), so with nearly the same mean its probabilities are
    further from ½ wherever the latent mean is not near 0 (measured: all 166 / 299 such test
    points, by at least 2e-5 / 1.6e-3; log loss 0.204 vs 0.207 and 0.113 vs 0.125)."""
    name, _, _, test, laplace, variational = fits
    X_test, y_test = test
    assert variational.summary["test_error_rate"] == laplace.summary["test_error_rate"]
    assert variational.summary["test_log_loss"] < laplace.summary["test_log_loss"]
    mean = laplace.predict(X_test)
    np.testing.assert_allclose(variational.predict(X_test), mean, rtol=0, atol=1e-3)
    away = np.abs(mean) > 0.1
    p_var, p_lap = variational.predict_proba(X_test), laplace.predict_proba(X_test)
    assert away.sum() > 0.9 * len(mean)
    assert (np.abs(p_var - 0.5)[away] > np.abs(p_lap - 0.5)[away]).all()


def test_predictor_equals_the_dense_formulas():
    """On 60 two_moons points, the stable forms (Cholesky of I + SKS, S = (2Λ)^½) equal the
    dense ones with Λ = λ(ν) of the final bound: coef = K⁻¹m = (I + 2ΛK)⁻¹y/2 (an unsymmetric
    solve; K itself is too ill-conditioned to invert here), maximiser m = K·coef, latent
    variance k(x,x) − k(x)ᵀ(K + (2Λ)⁻¹)⁻¹k(x), and p = ∫σ N(mean, var)."""
    arrays, _ = build({"name": "two_moons", "n_train": 60, "n_test": 40, "data_seed": 5})
    X, y, X_test = arrays["X_train"], arrays["y_train"], arrays["X_test"]
    kernel = Kernel("rbf", {"width": 1.0, "variance": 3.0})
    fit = run("gp_variational", ArrayKernelBlocks(X, kernel), y, lam=1.0, rng=0)
    K = kernel(X, X)
    two_lam = 2.0 * jj_lambda(fit.extras["nu"])
    coef = np.linalg.solve(np.eye(len(y)) + two_lam[:, None] * K, y / 2)
    np.testing.assert_allclose(fit.coef, coef, rtol=0, atol=1e-10)
    np.testing.assert_allclose(fit.extras["latent_mode"], K @ coef, rtol=0, atol=1e-10)
    Kx = kernel(X_test, X)
    var = kernel.diag(X_test) - np.einsum(
        "ij,ji->i", Kx, np.linalg.solve(K + np.diag(1.0 / two_lam), Kx.T))
    np.testing.assert_allclose(fit.predict(X_test), Kx @ fit.coef, rtol=1e-12)
    np.testing.assert_allclose(fit.predict_proba(X_test),
                               predictive_probability(Kx @ fit.coef, var), rtol=0, atol=1e-10)


def test_upper_bound_reaches_extreme_modes():
    """With a huge prior variance the mode reaches |f̂| = 146, so σ(−y_i f̂_i) ≈ 1e-64: the
    Newton step taken in the logit of μ still brings the upper bound to Ψ(f̂) in 22 steps (a
    box [ε, 1 − ε] with steps cut short at its boundary stalled at U − Ψ(f̂) ≈ 2600), while
    the lower bound's minorise–maximise iteration is slow there (its curvature 2λ(ν) ≈ 1/(2ν)
    dwarfs the likelihood's e^−ν): after 30 iterations it is still 5.4 below (after 1000,
    0.67)."""
    blocks, y, _ = problem("two_moons", Kernel("rbf", {"width": 0.5, "variance": 1e5}))
    laplace = run("gp_laplace", blocks, y, lam=1.0, rng=0)
    psi = laplace.summary["log_posterior"]
    assert np.abs(laplace.extras["latent_mode"]).max() > 100
    fit = run("gp_variational", blocks, y, lam=1.0, rng=0, max_iter=30)
    assert fit.summary["stop_reason"] == "max_iter = 30 iterations"
    assert fit.summary["log_posterior_upper"] == pytest.approx(psi, rel=1e-10)
    assert psi - 10.0 < fit.summary["log_posterior_lower"] < psi - 1.0
    assert np.isfinite(fit.coef).all() and fit.extras["mu"].min() < 1e-60


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("options,message", [
    ({"max_iter": 0}, "algorithm gp_variational: algorithm.max_iter=0 is invalid; it must be "
                      "an integer ≥ 1, e.g. algorithm.max_iter=1000"),
    ({"tol": -1e-9}, "algorithm gp_variational: algorithm.tol=-1e-09 is invalid; it must be "
                     "a number ≥ 0, e.g. algorithm.tol=1e-09"),
    ({"max_iter": "many"}, "algorithm gp_variational: algorithm.max_iter='many' is invalid"),
    ({"eval_every": 0}, "algorithm gp_variational: algorithm.eval_every=0 is invalid"),
    ({"m": 10}, "algorithm gp_variational has no option 'm'; its options: eval_every, "
                "max_iter, tol"),
])
def test_bad_options_are_one_line_errors(options, message):
    blocks, y, _ = problem("two_moons", MOONS_KERNEL)
    with pytest.raises(InputError) as err:
        run("gp_variational", blocks, y, lam=1.0, rng=0, **options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_bad_labels_are_one_line_errors():
    blocks, y, _ = problem("two_moons", MOONS_KERNEL)
    with pytest.raises(InputError, match=r"^y has \d+ labels outside \{-1, \+1\}") as err:
        run("gp_variational", blocks, 0.5 * (y + 1), lam=1.0, rng=0)
    assert "\n" not in str(err.value)
