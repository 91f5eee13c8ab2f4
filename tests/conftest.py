"""Shared tiny problems."""

import numpy as np
import pytest

from algorithms import ArrayKernelBlocks, Kernel
from tests.bad_input import make_seed_dir


def make_problem(n=60, d=3, n_test=25, seed=0, kernel=None, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X_test = rng.normal(size=(n_test, d))
    f = lambda Z: np.sin(Z[:, 0]) + 0.5 * Z[:, 1] ** 2 - Z[:, -1]  # noqa: E731
    y = f(X) + np.sqrt(noise) * rng.normal(size=n)
    y_test = f(X_test) + np.sqrt(noise) * rng.normal(size=n_test)
    blocks = ArrayKernelBlocks(X, kernel or Kernel("rbf", {"width": 2.0}))
    return blocks, y, X_test, y_test


@pytest.fixture
def problem():
    return make_problem()


@pytest.fixture(scope="session")
def seed_dir(tmp_path_factory):
    """A finished tiny sweep and its report, copied into each bad-input case's workdir
    (``tests/bad_input.py``); built once for every case table."""
    return make_seed_dir(tmp_path_factory.mktemp("seed"))
