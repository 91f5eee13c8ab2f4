"""An untimed warm-up before a process's first fit of an algorithm (issue 50, item 5).

The first fit of an algorithm in a process pays costs that are not the algorithm's: importing
its libraries (torch and GPyTorch, scikit-learn, scipy.optimize), loading compiled code and
first-call set-ups. A job's ``seconds`` should not hold them, nor depend on whether the job was
its worker's first. So before the first fit of each (algorithm, kernel family) in a process —
a Dask worker or a command line — the job runs the same algorithm with the same options, λ and
kernel on a tiny synthetic problem (:data:`ROWS` training rows of the job's dimension,
:data:`TEST_ROWS` test rows), untimed, and records how long it took (``warmup_seconds``; 0 when
the process is already warm).

The warm-up draws its data from its own generator and restores the process-wide generators
(numpy's legacy one, Python's ``random``, torch's) afterwards, so the job's fit computes what
it would have computed unwarmed. A warm-up that fails is not silent: its one-line error is
returned (``warmup_error`` in the summary) and the job's own fit runs and reports whatever
fails there.
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from algorithms.contract import AlgorithmSpec
from algorithms.evaluation import run
from algorithms.kernel_blocks import ArrayKernelBlocks
from algorithms.kernels import Kernel

ROWS = 64  # training rows of the warm-up problem
TEST_ROWS = 16  # its test rows (the predictive mean and variance run too)
WARM: set[tuple[str, str]] = set()  # (algorithm, kernel family) warmed in this process
_LOCK = threading.Lock()  # a worker's threads warm an algorithm once, one at a time


def warm_up(spec: AlgorithmSpec, kernel: Kernel, lam: float, kappa: int | None,
            options: Mapping[str, Any], d: int) -> tuple[float, str | None]:
    """(seconds, error) of the warm-up of ``spec`` with ``kernel`` in this process: a fit on a
    tiny synthetic problem of dimension ``d`` with the job's ``options``, λ and κ; (0.0, None)
    when this process has already warmed this algorithm and kernel family. ``error`` is the
    warm-up fit's one-line error, or None."""
    key = (spec.name, kernel.name)
    with _LOCK:
        if key in WARM:
            return 0.0, None
        start = time.perf_counter()
        error = None
        with preserved_random_state():
            try:
                _tiny_fit(spec, kernel, lam, kappa, options, d)
            except Exception as err:  # reported: the job's own fit runs and reports its own
                error = f"{type(err).__name__}: " + " ".join(str(err).split())[:200]
        WARM.add(key)
        return time.perf_counter() - start, error


def _tiny_fit(spec: AlgorithmSpec, kernel: Kernel, lam: float, kappa: int | None,
              options: Mapping[str, Any], d: int) -> None:
    """Fit ``spec`` on :data:`ROWS` standard-normal inputs with a smooth target (regression)
    or its sign (classification, both labels present), scored on :data:`TEST_ROWS` more."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((ROWS + TEST_ROWS, d))
    f = np.sin(X.sum(axis=1) / np.sqrt(d))
    if spec.task == "classification":
        y = np.where(f >= 0.0, 1.0, -1.0)
        y[:2] = (1.0, -1.0)
    else:
        y = f + 0.1 * rng.standard_normal(len(f))
    blocks = ArrayKernelBlocks(X[:ROWS], kernel)
    run(spec, blocks, y[:ROWS], lam=lam, kappa=kappa, rng=np.random.default_rng(0),
        test=(X[ROWS:], y[ROWS:]), **options)


@contextlib.contextmanager
def preserved_random_state() -> Iterator[None]:
    """Leave the process-wide random generators as they were: numpy's legacy global one,
    Python's ``random`` and, where torch is loaded, torch's (one the block imports is put back
    at its initial seed, as a fresh import has it)."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    torch = sys.modules.get("torch")
    torch_state = torch.random.get_rng_state() if torch is not None else None
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "random"):
            if torch_state is not None:
                torch.random.set_rng_state(torch_state)
            else:
                torch.manual_seed(torch.initial_seed())
