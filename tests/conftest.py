"""Shared tiny problems, a real Dask scheduler with two workers, and the test pyramid's
markers (``unit``, ``contract``, ``e2e``), assigned here to every collected test."""

import inspect
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

from algorithms import ArrayKernelBlocks, Kernel
from tests.bad_input import Ran, make_seed_dir, run_in_process


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


@pytest.fixture
def in_process(capfd, monkeypatch):
    """``in_process(cwd, module, *args, env=None)``: what ``python -m module args...`` run in
    ``cwd`` does (exit code, stdout, stderr), run in this process through the same ``main``
    (``tests/bad_input.py``: :func:`~tests.bad_input.run_in_process`)."""
    def run(cwd, module: str, *args: str, env=None) -> Ran:
        return run_in_process([module, *args], Path(cwd), capfd, monkeypatch, env)
    return run


@pytest.fixture
def run_cli(in_process):
    """``run_cli(cwd, *args)``: what ``python -m pipeline args...`` in ``cwd`` does (in-process)."""
    return lambda cwd, *args: in_process(cwd, "pipeline", *args)


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
        # the workers first, while their scheduler is still there to say goodbye to (a
        # nanny stopped after its scheduler retries the connection for ~20 s)
        for group in (procs[1:], procs[:1]):
            for proc in group:
                proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


# ----------------------------------------------------------------------------- markers

# files whose every test checks a contract: every registered algorithm against the algorithm
# contract, the scikit-learn estimator checks, the CLI's bad-input tables (one error line)
CONTRACT_FILES = re.compile(r"test_(contract|estimators|bad_input_\w+)\.py")
# what a test (or a helper or fixture of its file) does to start another process, a Dask
# cluster or SLURM (a sweep run in this process, ``run_cli(cwd, "-m", …)``, starts its
# LocalCluster's workers): it is e2e
STARTS_PROCESSES = re.compile(r"\bsubprocess\.|\bPopen\(|\bLocalCluster\(|\brun_sweep\(|"
                              r"\bmake_seed_dir\(|\bdask_processes\b|\brun_cli\(\w+, \"-m\"")
PYRAMID = ("unit", "contract", "e2e")


def _starting_functions(module) -> set[str]:
    """Names of the module's functions (helpers, fixtures) that start processes, directly or
    through another such function of the module."""
    sources = {}
    for name, obj in vars(module).items():
        func = getattr(obj, "__wrapped__", obj)  # a fixture's function
        if inspect.isfunction(func) and getattr(func, "__module__", None) == module.__name__:
            try:
                sources[name] = inspect.getsource(func)
            except (OSError, TypeError):
                continue
    starting = {n for n, src in sources.items() if STARTS_PROCESSES.search(src)}
    while True:
        calls = re.compile(rf"\b({'|'.join(map(re.escape, starting))})\b") if starting else None
        more = {n for n, src in sources.items()
                if n not in starting and calls is not None and calls.search(src)}
        if not more:
            return starting
        starting |= more


def pytest_collection_modifyitems(config, items):
    """Every test gets its pyramid markers (explicit ones are kept): ``contract`` by file
    (:data:`CONTRACT_FILES`); ``e2e`` when it starts another process, a Dask cluster or SLURM
    (:data:`STARTS_PROCESSES` in its source, a helper's or a fixture's of its module, or in
    the fixtures it uses: ``dask_processes``, ``slurm``, ...); ``unit`` when neither."""
    cache: dict[str, set[str]] = {}
    for item in items:
        function = getattr(item, "function", None)
        module = getattr(item, "module", None)
        if function is None or module is None:
            continue
        if module.__name__ not in cache:
            cache[module.__name__] = _starting_functions(module)
        starting = cache[module.__name__]
        have = {m.name for m in item.iter_markers() if m.name in PYRAMID}
        if CONTRACT_FILES.fullmatch(item.path.name):
            have.add("contract")
            item.add_marker("contract")
        if "e2e" not in have and _starts_processes(item, function, starting):
            have.add("e2e")
            item.add_marker("e2e")
        if not have:
            item.add_marker("unit")
    _long_modules_first(items)


def _long_modules_first(items) -> None:
    """The modules that hold a ``slow`` test run first, each kept whole (its module-scoped
    fixtures made once per xdist worker, as before), in their order; the rest after. xdist
    hands out the collection in order, so its two workers end on short tests rather than one
    of them waiting out a 30-40 s test at the end of the alphabet."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: each module's order kept


def _starts_processes(item, function, starting: set[str]) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & (starting | {"dask_processes", "slurm"}):
        return True
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    if STARTS_PROCESSES.search(source):
        return True
    return bool(starting) and re.search(
        rf"\b({'|'.join(map(re.escape, starting))})\(", source) is not None


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread_per_xdist_worker():
    """Under pytest-xdist (``-n 3``) each worker process computes on one BLAS thread: two
    processes with the BLAS library's default count each oversubscribe the cores (idle BLAS
    threads spin). A job run in-process still sets its own count (``threads=auto``)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield
