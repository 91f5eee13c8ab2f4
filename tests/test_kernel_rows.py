"""A kernel is one row of :data:`algorithms.kernels.KERNELS` (its numpy tile, torch tile,
length-scale gradient and peer translation declared together): every row has every part, or
says explicitly that it has none and then asking for it is a one-line error; each part agrees
with an independent reference (the torch tile with the numpy tile, the gradient with finite
differences, the peer translation with the libraries' values). The Matérn-5/2 (added as one
row and its yaml) against Rasmussen & Williams eq. 4.17 written out here, scikit-learn's
``Matern(nu=2.5)`` and GPyTorch's ``MaternKernel(nu=2.5)`` built here, and an exact GP with it
against the dense closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from algorithms import ArrayKernelBlocks, Kernel, run
from algorithms.device import TorchKernel
from algorithms.errors import InputError
from algorithms.kernels import (
    FUSED_KERNELS,
    KERNELS,
    LEARNABLE,
    TRANSLATABLE,
    Gradient,
    Peer,
    gradient_of,
    peer_of,
    takes_numpy_exp,
)
from algorithms.peers import gpytorch_kernel, sklearn_kernel

rng = np.random.default_rng(11)
A, B = rng.normal(size=(23, 3)), rng.normal(size=(13, 3))
SQRT5 = math.sqrt(5.0)
LENGTHS = [0.6, 1.4, 2.2]


def matern52_closed_form(X: np.ndarray, Z: np.ndarray, ell, variance: float) -> np.ndarray:
    """Rasmussen & Williams eq. 4.17, ν = 5/2, with their length scale ℓ (one, or one per
    input): v(1 + √5 r/ℓ + 5r²/(3ℓ²)) exp(−√5 r/ℓ)."""
    r = np.sqrt((((X[:, None, :] - Z[None, :, :]) / np.asarray(ell)) ** 2).sum(-1))
    return variance * (1.0 + SQRT5 * r + 5.0 * r ** 2 / 3.0) * np.exp(-SQRT5 * r)


def examples(name: str) -> list[Kernel]:
    """Kernels of row ``name``: its defaults with a variance, and an ARD one if stationary."""
    spec = KERNELS[name]
    out = [Kernel(name, {"variance": 1.3})]
    if spec.unit_scale is not None:
        scale = spec.unit_scale[0]
        out += [Kernel(name, {scale: spec.from_length(0.8), "variance": 0.7}),
                Kernel(name, {"lengthscales": LENGTHS, "variance": 1.9})]
    return out


@pytest.mark.parametrize("name", KERNELS)
def test_every_row_has_every_part_or_says_it_has_none(name):
    spec = KERNELS[name]
    assert callable(spec.function) and callable(spec.diag) and callable(spec.torch_tile)
    assert spec.gradient is None or (isinstance(spec.gradient, Gradient)
                                     and callable(spec.gradient.slope))
    assert spec.peer is None or (isinstance(spec.peer, Peer) and spec.peer.factor > 0
                                 and callable(spec.peer.sklearn) and callable(spec.peer.gpytorch))
    assert (spec.unit_scale is not None) == spec.stationary
    if spec.stationary:  # the scale parameter as a length and back
        assert spec.to_length(spec.from_length(1.7)) == pytest.approx(1.7, rel=1e-15)
    assert (name in LEARNABLE) == (spec.gradient is not None)
    assert (name in TRANSLATABLE) == (spec.peer is not None)
    assert (name in FUSED_KERNELS) == spec.compiled
    if spec.gradient is None:
        with pytest.raises(InputError, match=rf"hyper=ml learns the kernels .*kernel '{name}' "
                                             r"has no length-scale gradient.*hyper=fixed") as err:
            gradient_of(name)
        assert "\n" not in str(err.value)
    if spec.peer is None:
        with pytest.raises(InputError, match=rf"algorithm sklearn_gpr supports kernels .*not "
                                             rf"kernel '{name}' \(no translation") as err:
            run("sklearn_gpr", ArrayKernelBlocks(A, Kernel(name)), A[:, 0], lam=0.1)
        assert "\n" not in str(err.value)
        with pytest.raises(InputError, match="no translation to the peer library"):
            peer_of(name, "algorithm gpytorch_sgpr")


@pytest.mark.parametrize("name", KERNELS)
def test_every_torch_tile_equals_the_numpy_tile(name):
    """The row's torch tile on torch:cpu, float64, against its numpy tile: 1e-12 relative to
    the block's largest value (the variance applied by the caller)."""
    for kernel in examples(name):
        tk = TorchKernel(kernel, torch.device("cpu"), torch.float64)
        got = tk.block(tk.rows(A), tk.cols(B)).numpy()
        want = kernel(A, B)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("name", LEARNABLE)
def test_every_slope_is_the_derivative_of_its_kernel(name):
    """The row's (K, G): K is the kernel at unit length scale, and G∘D_j is the derivative of
    K by log ℓ_j (central differences of K with the inputs' j-th column divided by e^{±h})."""
    v, h = 1.6, 1e-6
    slope = gradient_of(name).slope
    K, G = slope(A, B, v)
    spec = KERNELS[name]
    unit = Kernel(name, {spec.unit_scale[0]: spec.unit_scale[1], "variance": v})
    np.testing.assert_allclose(K, unit(A, B), rtol=1e-12, atol=1e-14)
    for j in range(A.shape[1]):
        w = np.ones(A.shape[1])
        w[j] = math.exp(-h)
        up = slope(A * w, B * w, v)[0]
        w[j] = math.exp(h)
        down = slope(A * w, B * w, v)[0]
        fd = (up - down) / (2 * h)
        D = (A[:, None, j] - B[None, :, j]) ** 2
        np.testing.assert_allclose(G * D, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", TRANSLATABLE)
def test_every_peer_translation_has_our_values(name):
    """scikit-learn's and GPyTorch's kernels built from the row hold our kernel's values."""
    for kernel in examples(name):
        want = kernel(A, B)
        np.testing.assert_allclose(sklearn_kernel(kernel, "test")(A, B), want, rtol=1e-12,
                                   atol=1e-14)
        with torch.no_grad():
            theirs = gpytorch_kernel(kernel, A.shape[1], "test")(
                torch.tensor(A), torch.tensor(B)).to_dense().numpy()
        np.testing.assert_allclose(theirs, want, rtol=1e-10, atol=1e-12)


def test_matern52_is_rasmussen_williams_eq_4_17():
    """Isotropic (μ = ℓ/√5), with a variance, and ARD (ℓ_j = √5·lengthscales_j)."""
    iso = Kernel("matern52", {"mu": 0.45, "variance": 2.5})
    np.testing.assert_allclose(iso(A, B), matern52_closed_form(A, B, 0.45 * SQRT5, 2.5),
                               rtol=1e-13, atol=1e-15)
    ard = Kernel("matern52", {"lengthscales": LENGTHS})
    np.testing.assert_allclose(ard(A, B), matern52_closed_form(A, B, SQRT5 * np.array(LENGTHS),
                                                               1.0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(iso.diag(A), np.full(len(A), 2.5))
    np.testing.assert_array_equal(np.diag(iso(A, A)), np.full(len(A), 2.5))
    assert not takes_numpy_exp("matern52", 100) and "matern52" not in FUSED_KERNELS


def test_matern52_is_the_libraries_matern_nu_2_5():
    """scikit-learn's ConstantKernel · Matern(ν = 2.5) and GPyTorch's
    ScaleKernel(MaternKernel(ν = 2.5)), built here with ℓ = √5·μ."""
    import gpytorch
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern

    mu, v = 0.45, 2.5
    ours = Kernel("matern52", {"mu": mu, "variance": v})(A, B)
    theirs = (ConstantKernel(v) * Matern(length_scale=SQRT5 * mu, nu=2.5))(A, B)
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-15)
    base = gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=3)
    scaled = gpytorch.kernels.ScaleKernel(base).double()
    scaled.outputscale = torch.tensor(v, dtype=torch.float64)
    base.lengthscale = torch.tensor(SQRT5 * np.array(LENGTHS)).reshape(1, -1)
    with torch.no_grad():
        gp = scaled(torch.tensor(A), torch.tensor(B)).to_dense().numpy()
    ard = Kernel("matern52", {"lengthscales": LENGTHS, "variance": v})(A, B)
    np.testing.assert_allclose(ard, gp, rtol=1e-10, atol=1e-12)


def test_an_overflowing_matern52_is_the_one_line_error():
    with pytest.raises(InputError, match=r"kernel matern52\(mu=1e-320\) is NaN/inf") as err:
        Kernel("matern52", {"mu": 1e-320})(A, B)
    assert "\n" not in str(err.value)


def test_an_exact_gp_with_matern52_is_the_dense_closed_form():
    """Mean k*ᵀ(K + λI)⁻¹y, variance k** − k*ᵀ(K + λI)⁻¹k* + λ and the log marginal
    likelihood (eq. 62), every kernel value from eq. 4.17 written out here."""
    gen = np.random.default_rng(4)
    X, X_test = gen.uniform(-2, 2, size=(90, 2)), gen.uniform(-2.5, 2.5, size=(30, 2))
    y = np.sin(X).sum(1) + 0.1 * gen.normal(size=90)
    lam, mu, v = 0.05, 0.7, 1.8
    fit = run("exact", ArrayKernelBlocks(X, Kernel("matern52", {"mu": mu, "variance": v})), y,
              lam=lam)
    K = matern52_closed_form(X, X, SQRT5 * mu, v) + lam * np.eye(90)
    Ks = matern52_closed_form(X_test, X, SQRT5 * mu, v)
    np.testing.assert_allclose(fit.predict(X_test), Ks @ np.linalg.solve(K, y), rtol=1e-9,
                               atol=1e-10)
    var = v - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T)) + lam
    np.testing.assert_allclose(fit.predict_var(X_test), var, rtol=1e-9, atol=1e-10)
    logpdf = multivariate_normal(np.zeros(90), K).logpdf(y)
    assert fit.summary["log_marginal_likelihood"] == pytest.approx(logpdf, rel=1e-10)


def test_sklearn_gpr_with_matern52_is_scikit_learn():
    """The peer through the row's translation against scikit-learn called directly."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern

    gen = np.random.default_rng(6)
    X, X_test = gen.uniform(-2, 2, size=(120, 3)), gen.uniform(-2, 2, size=(40, 3))
    y = np.sin(X).sum(1) + 0.2 * gen.normal(size=120)
    kernel = Kernel("matern52", {"lengthscales": LENGTHS, "variance": 0.9})
    fit = run("sklearn_gpr", ArrayKernelBlocks(X, kernel), y, lam=0.1, rng=0)
    gpr = GaussianProcessRegressor(ConstantKernel(0.9) * Matern(SQRT5 * np.array(LENGTHS),
                                                                nu=2.5),
                                   alpha=0.1, optimizer=None).fit(X, y)
    mean, std = gpr.predict(X_test, return_std=True)
    np.testing.assert_allclose(fit.predict(X_test), mean, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(fit.predict_var(X_test), std ** 2 + 0.1, rtol=1e-9, atol=1e-10)
