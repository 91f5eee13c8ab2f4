"""Shared tiny problems, and a real Dask scheduler with two workers."""

import os
import subprocess
import time

import numpy as np
import pytest
from distributed import Client

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


@pytest.fixture
def dask_processes(tmp_path):
    """A real `dask scheduler` and two `dask worker` processes (with nannies) on 127.0.0.1."""
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    procs = [subprocess.Popen(
        ["dask", "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(scheduler_file)], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.time() + 60
    while not scheduler_file.exists() and time.time() < deadline:
        time.sleep(0.2)
    for name in ("w1", "w2"):
        procs.append(subprocess.Popen(
            ["dask", "worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1",
             "--name", name, "--no-dashboard", "--host", "127.0.0.1"], cwd=tmp_path, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    client = Client(scheduler_file=str(scheduler_file), timeout=60)
    client.wait_for_workers(2, timeout=60)
    try:
        yield client
    finally:
        client.close()
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
