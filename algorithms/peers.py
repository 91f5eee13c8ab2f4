"""The peer libraries (scikit-learn, GPyTorch): what they need and how our kernels read in them.

The peers are algorithms that call another library (:mod:`algorithms.sklearn_peers`,
:mod:`algorithms.gpytorch_peers`); the libraries are the optional extra ``peers`` of
pyproject.toml, declared on each spec as :class:`~algorithms.contract.Requirement` s and
imported only inside the fit functions, so the registry loads without them.

Kernel translations, ours ↔ scikit-learn ↔ GPyTorch: each kernel's row declares its own
(:class:`algorithms.kernels.Peer`: the libraries' classes and the factor between their length
scale and ours); this module adds the signal variance, the bounds and the way back. Both
libraries write the stationary kernels with a length scale ℓ dividing the inputs:

==============  ===================================  ==========================================
ours            scikit-learn                          GPyTorch
==============  ===================================  ==========================================
rbf, width      ConstantKernel(v) * RBF(ℓ),           ScaleKernel(RBFKernel), ℓ = √(width/2)
                ℓ = √(width/2): exp(−‖x−x'‖²/width)
matern32, μ     ConstantKernel(v) * Matern(ν=1.5,     ScaleKernel(MaternKernel(ν=1.5)), ℓ = √3·μ
                ℓ = √3·μ): (1+h)e^{−h}, h = ‖x−x'‖/μ
matern52, μ     ConstantKernel(v) * Matern(ν=2.5,     ScaleKernel(MaternKernel(ν=2.5)), ℓ = √5·μ
                ℓ = √5·μ): (1+h+h²/3)e^{−h}, same h
laplacian, ω    ConstantKernel(v) * Matern(ν=0.5,     ScaleKernel(MaternKernel(ν=0.5)), ℓ = ω
                ℓ = ω): exp(−‖x−x'‖/ω)
==============  ===================================  ==========================================

The signal variance v is ``ConstantKernel`` / ``ScaleKernel.outputscale``. ARD
``lengthscales`` ℓ_j become a vector length scale (``RBF(ℓ)`` / ``ard_num_dims = d``), times
√3 for the Matérn-3/2 and √5 for the Matérn-5/2 (our h = ‖(x−x')/ℓ‖, the libraries'
√3·‖(x−x')/ℓ‖ and √5·‖(x−x')/ℓ‖; Rasmussen & Williams eq. 4.17). The linear and polynomial
kernels' rows give no translation: a one-line InputError
(:func:`algorithms.kernels.peer_of`).

Starts (the peers' ``starts`` option, :func:`start_points`, :func:`starts_option`): one or more
of :data:`START_LABELS` joined by '+', each trained in turn and the best final objective kept:
``given``, the job's kernel and λ (under ``protocol=own`` the kernel and σ² that ``hyper=ml``
gave for the dataset and split, :mod:`pipeline.job.protocol`); ``median``, the median-heuristic
start of :func:`algorithms.hyper.median_start` (variance var(y), every length scale at half the
median distance between training inputs, σ² = :data:`MEDIAN_NOISE`·var(y): on standardised
targets the σ² = 0.1 that ``hyper=ml`` starts from in uci_frontier); ``standard``, the
data-independent start of :func:`algorithms.hyper.standard_start` (variance 1, every length
scale √(d/2) from the input dimension d alone, σ² = λ), the same as ``hyper.init=standard``;
e.g. ``given+median``.

Timing. :class:`Clock` measures a method's own learning (wall and process CPU seconds, the
summary's ``own_learning_seconds`` and ``own_learning_cpu_seconds``); :func:`over_budget` is
the ``budget_seconds`` option's test on it (:data:`BUDGET_OPTION`: the learning stops at the
end of the iteration or epoch in which its wall seconds passed the budget,
``own_stop_reason`` ``budget``). A fit's seconds (its last trace row's, the summary's
``seconds``) cover the whole call a user makes before the first prediction:
:func:`ready_at_last_step` moves the last row's clocks to the moment the predictor is ready, a
library's lazily built prediction caches included (GPyTorch builds them on the first
predictive call: for SGPR at n = 40 000, m = 512 that call took 7.5 s after a 2.2 s fit).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from algorithms.contract import Requirement
from algorithms.errors import InputError
from algorithms.hyper import median_start, standard_start
from algorithms.kernel_threads import kernel_threads
from algorithms.kernels import KERNELS, Kernel, peer_of
from algorithms.options import Option

if TYPE_CHECKING:
    from algorithms.evaluation import Recorder

EXTRA = "peers"
SKLEARN = Requirement("sklearn", "scikit-learn", "")  # a dependency of the package itself
TORCH = Requirement("torch", "PyTorch", EXTRA)
GPYTORCH = Requirement("gpytorch", "GPyTorch", EXTRA)

START_LABELS = ("given", "median", "standard")  # the peers' ``starts``, '+'-joined (docstring)
MEDIAN_NOISE = 0.1  # σ² of the median start, a fraction of var(y)

DEFAULT_BOUNDS = (1e-5, 1e5)  # scikit-learn's default hyperparameter bounds


def check_translatable(kernel: Kernel, owner: str) -> None:
    """A one-line InputError unless ``kernel``'s row gives it a translation
    (:func:`algorithms.kernels.peer_of`)."""
    peer_of(kernel.name, owner)


def library_lengths(kernel: Kernel) -> tuple[np.ndarray, bool]:
    """(ℓ as the libraries write it, one entry or one per dimension; whether it is ARD):
    the row's factor times our length (√(width/2) for the RBF's width, μ, ω or ARD ℓ_j)."""
    factor = peer_of(kernel.name, "the peers").factor
    ls = kernel.lengthscales
    if ls is not None:
        return factor * ls, True
    ours = kernel.spec.to_length(kernel.params[kernel.spec.unit_scale[0]])
    return np.array([factor * ours]), False


def our_kernel(name: str, variance: float, lengths: np.ndarray, ard: bool) -> Kernel:
    """The inverse of :func:`library_lengths`: our Kernel with signal variance ``variance`` and
    library length scales ``lengths`` (a learned kernel translated back)."""
    ours = np.asarray(lengths, dtype=np.float64).ravel() / peer_of(name, "the peers").factor
    if ard:
        return Kernel(name, {"variance": float(variance), "lengthscales": ours.tolist()})
    spec = KERNELS[name]
    return Kernel(name, {"variance": float(variance),
                         spec.unit_scale[0]: spec.from_length(ours[0])})


def hyper_bounds(values: np.ndarray) -> tuple[float, float]:
    """scikit-learn's default bounds, widened to hold the starting values."""
    return (min(DEFAULT_BOUNDS[0], float(np.min(values))),
            max(DEFAULT_BOUNDS[1], float(np.max(values))))


def sklearn_kernel(kernel: Kernel, owner: str) -> Any:
    """``ConstantKernel(v) * RBF/Matern(ℓ)``, scikit-learn's form of ``kernel`` (module
    docstring); its bounds are scikit-learn's defaults widened to hold the values."""
    from sklearn.gaussian_process import kernels as sk

    peer = peer_of(kernel.name, owner)
    lengths, ard = library_lengths(kernel)
    length = lengths if ard else float(lengths[0])
    base = peer.sklearn(sk, length, hyper_bounds(lengths))
    variance = kernel.variance
    return sk.ConstantKernel(variance, hyper_bounds(np.array([variance]))) * base


def kernel_from_sklearn(name: str, product: Any) -> Kernel:
    """Our Kernel from scikit-learn's ``ConstantKernel * RBF/Matern`` (e.g. a learned one)."""
    lengths = np.atleast_1d(np.asarray(product.k2.length_scale, dtype=np.float64))
    return our_kernel(name, product.k1.constant_value, lengths,
                      ard=np.ndim(product.k2.length_scale) > 0)


def import_gpytorch() -> tuple[Any, Any]:
    """(torch, gpytorch), imported on first use without the DeprecationWarnings their imports
    raise (e.g. torch.jit's), so that a fit's recorded library warnings are its own."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import gpytorch
        import torch
    return torch, gpytorch


def gpytorch_kernel(kernel: Kernel, d: int, owner: str) -> Any:
    """``ScaleKernel(RBFKernel / MaternKernel)`` in float64 holding ``kernel``'s values (module
    docstring); ARD length scales give ``ard_num_dims = d``."""
    torch, gpytorch = import_gpytorch()

    peer = peer_of(kernel.name, owner)
    lengths, ard = library_lengths(kernel)
    base = peer.gpytorch(gpytorch.kernels, d if ard else None)
    scaled = gpytorch.kernels.ScaleKernel(base).double()  # float64 before any value is set
    scaled.outputscale = torch.tensor(kernel.variance, dtype=torch.float64)
    base.lengthscale = torch.tensor(lengths, dtype=torch.float64).reshape(1, -1)
    return scaled


def kernel_from_gpytorch(name: str, scaled: Any) -> Kernel:
    """Our Kernel from a (learned) ``ScaleKernel(RBFKernel / MaternKernel)``."""
    base = scaled.base_kernel
    lengths = base.lengthscale.detach().cpu().numpy().ravel()
    return our_kernel(name, float(scaled.outputscale.detach()), lengths,
                      ard=base.ard_num_dims is not None)


def seed_from(rng: np.random.Generator) -> int:
    """An integer seed for a library's own random state, drawn from the job's generator."""
    return int(rng.integers(2**31 - 1))


@contextmanager
def library_warnings(record: list[str]) -> Iterator[None]:
    """Collect the library's warnings (convergence, added jitter) into ``record`` instead of
    printing them: the fit reports their number and first text in its summary."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    record.extend(" ".join(str(w.message).split()) for w in caught)


@contextmanager
def torch_threads(torch: Any) -> Iterator[None]:
    """torch's intra-op threads at the kernel-thread count of the calling context
    (:func:`~algorithms.kernel_threads.kernel_threads`: a job's ``threads``, one outside a
    job), put back afterwards: GPyTorch computes on the cores our own fits are given, not on
    torch's default of every core beside other jobs (a sweep's workers, pytest's xdist
    workers: three processes of two spinning OpenMP threads each on two cores made one scikit-
    learn check of SVGP take 34 s instead of 1–4 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(kernel_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)


def torch_linalg_errors() -> tuple[type[BaseException], ...]:
    """The exceptions torch and linear_operator raise for a failed factorisation (converted
    to numpy's LinAlgError, which the evaluator turns into its one-line error)."""
    import torch
    from linear_operator.utils.errors import NotPSDError

    return (torch.linalg.LinAlgError, NotPSDError)


def check_starts(value: Any, owner: str) -> str:
    """``value`` if it is one or more of :data:`START_LABELS` joined by '+', each at most once
    (e.g. ``given+median``); else a one-line InputError naming it and the fix."""
    labels = value.split("+") if isinstance(value, str) else []
    if not labels or any(label not in START_LABELS for label in labels) \
            or len(set(labels)) < len(labels):
        raise InputError(f"{owner}: algorithm.starts={value!r} is invalid; it must be one or "
                         f"more of {', '.join(START_LABELS)} joined by '+', each once, e.g. "
                         "algorithm.starts=given+median")
    return value


def starts_option(owner: str, doc: str) -> Option:
    """The peers' ``starts`` option (default ``given``), validated by :func:`check_starts`."""
    return Option("given", "any", doc, example="given+median",
                  parse=lambda value: check_starts(value, owner))


# the peers' learning budget (the option ``budget_seconds``; pipeline: hyper.budget_seconds)
BUDGET_OPTION = Option(None, "float", "stop the own learning at the end of the iteration (SVGP: "
                       "the epoch; scikit-learn: its L-BFGS-B iteration) in which its wall "
                       "seconds passed this budget; own_stop_reason budget, no further start "
                       "begun (null: no budget)", lo=0.0, lo_open=True, none_ok=True,
                       example=600.0)


def start_points(starts: str, kernel: Kernel, lam: float, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator) -> list[tuple[str, Kernel, float]]:
    """(label, kernel, σ²) of each start in ``starts`` (:func:`check_starts`, module
    docstring), in order; the median start draws its pairs of rows from ``rng``, the standard
    one (:func:`algorithms.hyper.standard_start`) depends on the input dimension alone."""
    out = []
    for label in check_starts(starts, "starts").split("+"):
        if label == "given":
            out.append(("given", kernel, lam))
        elif label == "median":
            noise = MEDIAN_NOISE * max(float(np.var(y)), 1e-5)
            out.append(("median", *median_start(X, y, kernel, noise, rng)))
        else:
            out.append(("standard", *standard_start(X.shape[1], kernel, lam)))
    return out


class Clock:
    """Wall and process CPU seconds (all threads) since it was made, or frozen by :meth:`stop`.
    Given the fit's ``recorder``, its clocks, up to the last step recorded: the learning is
    then timed as the fit is (test evaluations left out; the fit's seconds are its last
    step's), so a learning never outlasts its fit."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self.now = ((time.perf_counter, time.process_time) if recorder is None
                    else (recorder.elapsed, recorder.cpu_elapsed))
        self.wall0, self.cpu0 = (f() for f in self.now)
        self.wall = self.cpu = 0.0

    def elapsed(self) -> float:
        """Wall seconds since the clock was made, read now (a running clock; with a recorder,
        test evaluations left out)."""
        return self.now[0]() - self.wall0

    def stop(self) -> Clock:
        rows = self.recorder.rows if self.recorder is not None else []
        wall, cpu = ((rows[-1]["seconds"], rows[-1]["cpu_seconds"]) if rows
                     else (self.now[0](), self.now[1]()))
        self.wall, self.cpu = max(0.0, wall - self.wall0), max(0.0, cpu - self.cpu0)
        return self


def over_budget(clock: Clock, budget: float | None) -> bool:
    """Whether the learning timed by ``clock`` has run past ``budget`` wall seconds (never with
    ``budget`` None): the ``budget_seconds`` test, made at the end of each iteration."""
    return budget is not None and clock.elapsed() > budget


def ready_at_last_step(recorder: Recorder) -> None:
    """Move the last trace row's wall and CPU seconds to now, once the predictor a user calls
    is ready (a library's lazily built prediction caches included): the fit's seconds are its
    last row's, so the fit then covers the whole call up to the first prediction. The last
    row is the final state's; a learning's :class:`Clock` stopped before keeps its seconds,
    and what is added here counts as the fit's."""
    if recorder.rows:
        recorder.rows[-1]["seconds"] = recorder.elapsed()
        recorder.rows[-1]["cpu_seconds"] = recorder.cpu_elapsed()
