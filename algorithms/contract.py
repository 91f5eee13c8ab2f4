"""The contract every algorithm follows: kernel blocks in, a declared spec, one result schema.

- :class:`KernelBlocks`: an algorithm sees the training inputs only through this provider, so
  the same code runs on numpy in tests and on a verified zarr store in the pipeline, and sparse
  methods never form the n×n matrix. With what it hands out (:class:`KernelColumns`,
  :class:`CholeskyColumns`, :class:`CholeskyFactor`) it is the whole back-end contract: every
  capability an algorithm uses is a member, with the in-memory default where back ends differ.
- :class:`AlgorithmSpec`: one per algorithm, declared in its module as ``SPECS``: name, fit
  function, options (defaults and validation) and capabilities. :mod:`algorithms.registry`
  collects them; the pipeline reads capabilities from the spec, never from a name.
- A fit function ``fit(blocks, y, *, lam, rng, recorder, [kappa,] **options) -> Solution``
  reports every step to the :class:`~algorithms.evaluation.Recorder` (the one evaluator: test
  metrics and timing) and returns its final :class:`Solution`.
- :class:`Fit` (a fit) and :class:`Curve` (a learning curve) are the two declared variants of a
  :class:`Result`: trace variables of equal length over steps and final scalars, with the keys
  of :data:`TRACE_KEYS` / :data:`SUMMARY_KEYS` always present and a reason in
  ``not_applicable`` wherever a required quantity is NaN. Results are immutable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from algorithms.errors import InputError
from algorithms.kernels import Kernel
from algorithms.options import INT_MAX, Option

# ----------------------------------------------------------------------------- kernel blocks

BLOCK_BYTES = 2**25  # ≈ 32 MiB of float64 kernel values per block of rows (streamed products)


def block_rows(n_cols: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows per block of a row-streamed kernel product with ``n_cols`` columns: ≈
    ``block_bytes`` of float64 values per block, at least one row."""
    return max(1, block_bytes // (8 * max(n_cols, 1)))


def distinct_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, inverse, counts) of the rows of X: the index of each distinct row's first
    occurrence, in the order they first occur; for every row of X the position of its distinct
    row in ``first``; and how many rows of X each distinct row stands for. O(n·d·log n)."""
    _, first, inverse, counts = np.unique(X, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    order = np.argsort(first, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return first[order], position[np.ravel(inverse)], counts[order]


def fill_kernel(blocks: KernelBlocks, out: np.ndarray) -> np.ndarray:
    """out = K (an n×n array or view), filled in blocks of ≈ BLOCK_BYTES of kernel rows so
    that no kernel's temporaries are n×n; returns ``out``."""
    n = blocks.n
    rows = block_rows(n)
    for lo in range(0, n, rows):
        out[lo: lo + rows] = blocks.block(slice(lo, lo + rows), slice(None))
    return out


class KernelColumns(Protocol):
    """An n × p matrix [first, K[:, i₁], …] a provider holds (:meth:`KernelBlocks.columns`):
    kernel columns appended by index, or an orthonormal basis built column by column; only the
    provider's :meth:`~KernelBlocks.project` and :meth:`~KernelBlocks.residual_norms` (and their
    ``_points`` forms) read it. Back ends: :class:`algorithms.kernel_blocks.ArrayKernelColumns`
    (memory), :class:`algorithms.torch_blocks.TorchKernelColumns` (a torch device),
    :class:`pipeline.blocks.cluster_columns.ClusterColumns` (a Dask cluster's row shards)."""

    width: int  # p, the columns so far (the providers' projections)

    def append(self, i: int) -> None:
        """Append the kernel column K[:, i]."""

    def extend(self, indices) -> None:
        """Append the kernel columns K[:, indices], one block."""

    def extend_points(self, X_cols: np.ndarray) -> None:
        """Append the columns k(X, X_cols) of any inputs, one block."""

    def append_residual(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Start appending w = k(X, x) − W[:, 1:]·r: (W[:, 1:]ᵀw, ‖w‖², W[:, 0]ᵀw); SGMA's primal
        in QR form (:class:`algorithms.greedy.PrimalGreedy`), then :meth:`reorthogonalise`,
        :meth:`commit`."""

    def reorthogonalise(self, s: np.ndarray) -> tuple[float, float]:
        """w −= W[:, 1:]·s; (‖w‖², W[:, 0]ᵀw) (:class:`algorithms.greedy.PrimalGreedy`)."""

    def commit(self, delta: float) -> None:
        """Append w/δ as the next column (:class:`algorithms.greedy.PrimalGreedy`)."""


class CholeskyColumns(Protocol):
    """The rows of a pivoted Cholesky factor F of K (K ≈ FFᵀ), its residual diagonal and their
    reductions, held by a provider (:meth:`KernelBlocks.cholesky_columns`); global row numbers
    in every argument. :class:`algorithms.lowrank.PartialCholesky` decides the pivots and drives
    it (the Nyström method, incomplete Cholesky, PCG's preconditioner). Back ends:
    :class:`algorithms.factor_columns.ArrayCholeskyColumns`, :class:`algorithms.torch_blocks.
    TorchCholeskyColumns`, :class:`pipeline.blocks.cluster.ClusterCholeskyColumns`."""

    t: int  # columns of F so far

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """F[rows, :t] (the pivots' rows: PartialCholesky.add)."""

    def append(self, X_new: np.ndarray, F_new_rows: np.ndarray, L_B: np.ndarray,
               considered: np.ndarray) -> None:
        """Add the factor columns (K[:, B] − F F[B]ᵀ) L_B⁻ᵀ of accepted pivots with inputs
        ``X_new`` (004 §4.3) and update the residual diagonal; every index in ``considered``
        leaves the admissible set (PartialCholesky.add)."""

    def residual_trace(self) -> float:
        """Σ max(residual, 0) over the admissible rows: the stopping rule."""

    def best(self) -> tuple[int, float, np.ndarray] | None:
        """The admissible row with the largest non-degenerate residual as (row, residual,
        F[row, :t]), or None (PartialCholesky.greedy_pivot)."""

    def top(self, k: int) -> np.ndarray:
        """Up to ``k`` admissible rows with the largest non-degenerate residuals, largest first
        (PartialCholesky.greedy_block: PCG's preconditioner)."""

    def gram(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """(F[:, :t1]ᵀ F[:, t0:t1], F[:, t0:t1]ᵀ y) (:class:`algorithms.lowrank.LowRankSolve`)."""

    def factor(self) -> np.ndarray:
        """F (n × t) on the host, gathered where it is spread (PCG's preconditioner)."""


class CholeskyFactor(Protocol):
    """The exact GP's factor L of K_d + diag(noise) = LLᵀ (:meth:`KernelBlocks.factor`) and
    what :mod:`algorithms.exact` computes with it (004 §3.4 eqs. 47-48). Back ends:
    :class:`algorithms.cholesky.HostCholesky`, :class:`algorithms.torch_blocks.DeviceCholesky`."""

    def solve(self, b: np.ndarray) -> np.ndarray:
        """(LLᵀ)⁻¹b (eq. 47)."""

    def log_diag_sum(self) -> float:
        """Σ log L_ii, half of log det (the log marginal likelihood)."""

    def variance_bounds(self, kernel: Kernel, lam: float
                        ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """x ↦ k(x,x) + σ² − ‖L⁻¹k(X_d, x)‖² (eq. 48), twice (lower = upper)."""


@runtime_checkable
class KernelBlocks(Protocol):
    """Kernel matrix K = k(X, X) of the training inputs, computed block by block on demand.

    The whole contract between an algorithm and a back end: an algorithm reads a provider
    through these members only, never probing for others. The root back ends subclass this
    class (:class:`algorithms.kernel_blocks.ArrayKernelBlocks`, memory;
    :class:`algorithms.torch_blocks.TorchKernelBlocks`, a torch device) and so inherit the
    in-memory defaults of the capabilities below that only some back ends change
    (``memory_on_device``, ``hold_dropped``, ``device``, :meth:`summary`); the zarr, cluster
    and store-on-device providers subclass those (tests/test_backend_contract.py holds every
    back end to every member, and algorithms/ to no ``getattr`` probe)."""

    n: int  # training rows (every algorithm)
    d: int  # input dimension (size checks, the greedy methods' FLOP counts, learning curves)
    kernel: Kernel  # the kernel k (every algorithm)
    # where the fit's n × n matrices live: True when on a device that checks them against its
    # own free memory where they are made, so the evaluator's check against this machine's
    # memory is skipped (algorithms.evaluation.run)
    memory_on_device: bool = False
    # whether the K asked for by hold() could not be formed after all (a device ran out of
    # memory): the products were matrix-free (algorithms.cg records 0 held bytes)
    hold_dropped: bool = False
    # the torch device the blocks live on, None for numpy (GPyTorch's peers train there)
    device: Any = None

    def summary(self) -> dict[str, Any]:
        """Final scalars the job records of its back end (a cluster's bytes moved, a device's
        model: pipeline.job.run); none in memory."""
        return {}

    def block(self, rows: np.ndarray | slice, cols: np.ndarray | slice) -> np.ndarray:
        """K[rows, cols] as a dense float64 array."""

    def diag(self) -> np.ndarray:
        """diag(K), length n."""

    def project(self, cols: np.ndarray, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ K[:, cols], column sums of K[:, cols]²) for W of shape (n, p) — an array, or
        columns from :meth:`columns` — in one pass over the kernel columns without holding
        them (the greedy methods' hot loop)."""

    def project_points(self, X_cols: np.ndarray, W) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`project` with the columns k(X, X_cols) of any inputs (test points)."""

    def residual_norms(self, cols: np.ndarray, W, B: np.ndarray) -> np.ndarray:
        """Column sums of (K[:, cols] − W[:, 1:]·B)², the residuals formed explicitly (SGMA's
        primal in QR form); W from :meth:`columns`, whose columns after the first the
        algorithm appended by ``append_residual``/``reorthogonalise``/``commit``."""

    def residual_norms_points(self, X_cols: np.ndarray, W, B: np.ndarray) -> np.ndarray:
        """As :meth:`residual_norms` with the columns k(X, X_cols) of any inputs."""

    def matmul(self, V: np.ndarray, block_bytes: int) -> np.ndarray:
        """K·V for V of shape (n,) or (n, b), in row blocks of about ``block_bytes`` of kernel
        values (K is not formed unless :meth:`hold` said it would be)."""

    def hold(self, share: float) -> int:
        """Let later :meth:`matmul` calls form K (or the rows of it a worker multiplies) once
        and multiply by it where it takes at most ``share`` of the memory available there;
        returns the bytes held (0: matrix-free)."""

    def release(self) -> None:
        """Drop what :meth:`hold` kept."""

    def columns(self, first: np.ndarray, capacity: int) -> KernelColumns:
        """An n × p matrix [first, K[:, i₁], …] held by the provider (:class:`KernelColumns`),
        to which kernel columns are appended by index and which only :meth:`project` and
        :meth:`project_points` read: an algorithm's n × t state (SGMA's [y, K_{:S}]) then
        lives wherever the provider keeps the training rows."""

    def cholesky_columns(self, capacity: int, targets: np.ndarray | None) -> CholeskyColumns:
        """The rows of a pivoted Cholesky factor F of K (K ≈ FFᵀ), its residual diagonal and
        their reductions, held by the provider (:class:`CholeskyColumns`): the Nyström and
        incomplete-Cholesky n × t state (:class:`algorithms.lowrank.PartialCholesky` drives
        it)."""

    def factor(self, index: np.ndarray | None, noise: np.ndarray) -> CholeskyFactor:
        """The exact GP's L with K_d + diag(noise) = LLᵀ for the inputs ``index`` (None: every
        row), made where the provider keeps its n × n matrices (:class:`CholeskyFactor`;
        :mod:`algorithms.exact`)."""

    def cross(self, X_new: np.ndarray, cols: np.ndarray | slice) -> np.ndarray:
        """k(X_new, X[cols]), shape (len(X_new), len(cols))."""

    def inputs(self, rows: np.ndarray | slice) -> np.ndarray:
        """The training inputs X[rows] (needed to make a self-contained predictor)."""


# ----------------------------------------------------------------------------- input checks

def check_lam(lam: float) -> float:
    """Validate the regulariser λ = σ² (noise variance)."""
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)) \
            or not math.isfinite(lam) or lam <= 0:
        raise InputError(f"lam={lam!r} must be a finite number > 0 (the noise variance σ²); "
                         "pass e.g. lam=0.1")
    return float(lam)


def check_kappa(kappa: int | None, n: int) -> int:
    """Validate the candidate-subset size κ; κ ≥ n means full greedy and is clipped to n."""
    if kappa is None or isinstance(kappa, bool) or not isinstance(kappa, (int, np.integer)):
        raise InputError(f"kappa={kappa!r} must be an integer ≥ 1 (candidate subset size); "
                         "pass e.g. kappa=59")
    if kappa < 1:
        raise InputError(f"kappa={kappa} must be ≥ 1 (candidate subset size); pass e.g. kappa=59, "
                         "or kappa=n for full greedy")
    if kappa > INT_MAX:
        raise InputError(f"kappa={kappa} must be ≤ {INT_MAX} (candidate subset size; any κ ≥ n "
                         "is the full greedy); pass e.g. kappa=59")
    return int(min(kappa, n))


def check_targets(y: np.ndarray, n: int, name: str = "y") -> np.ndarray:
    """Validate a target vector against the number of training inputs."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise InputError(f"{name} has shape {y.shape}; it must be one-dimensional (n,)")
    if y.shape[0] != n:
        raise InputError(f"{name} has {y.shape[0]} entries but there are {n} inputs; "
                         "pass one target per input row")
    bad = ~np.isfinite(y)
    if bad.any():
        raise InputError(f"{name} has {int(bad.sum())} NaN/inf values (first at index "
                         f"{int(np.flatnonzero(bad)[0])}); remove or impute them")
    return y


def check_test(test: tuple[np.ndarray, np.ndarray] | None, d: int | None) -> tuple | None:
    """Validate an optional held-out set (X_test, y_test); an empty one counts as none."""
    if test is None:
        return None
    X_test, y_test = (np.asarray(a, dtype=np.float64) for a in test)
    if X_test.ndim != 2 or (d is not None and X_test.shape[1] != d):
        raise InputError(f"X_test has shape {X_test.shape}; it must be (n_test, {d})")
    y_test = check_targets(y_test, X_test.shape[0], "y_test")
    if not np.isfinite(X_test).all():
        raise InputError("X_test has NaN/inf values; remove or impute them")
    return (X_test, y_test) if len(y_test) else None


# ----------------------------------------------------------------------------- predictions

@dataclass(frozen=True)
class Prediction:
    """Predictive mean of f and, where the algorithm has one, the predictive variance of y
    (noise included) at some inputs; for a binary classifier also the predictive probability
    p(y = +1 | x) of each input (``prob``)."""

    mean: np.ndarray
    var: np.ndarray | None = None
    prob: np.ndarray | None = None


Predictor = Callable[[np.ndarray], Prediction]


@dataclass(frozen=True)
class Solution:
    """What a fit function returns: the final predictor f(x) = k(x, X_basis) @ coef, its
    variance where one exists, final scalars and the reasons for quantities it cannot give.

    ``variance_bounds`` maps inputs to (lower, upper) bounds of the predictive variance of y;
    an exact variance has lower == upper. The evaluator scores the upper bound. A binary
    classifier's f is its latent function and ``probability`` maps inputs to p(y = +1 | x),
    which the evaluator scores (:data:`CLASSIFICATION_METRICS`).
    """

    basis: np.ndarray
    coef: np.ndarray
    X_basis: np.ndarray
    kernel: Kernel
    lam: float
    summary: Mapping[str, Any]
    variance_bounds: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    probability: Callable[[np.ndarray], np.ndarray] | None = None

    def mean(self, X_new: np.ndarray) -> np.ndarray:
        """k(X_new, X_basis) @ coef in blocks of X_new rows (:func:`block_rows`): ≈
        :data:`BLOCK_BYTES` of kernel values at a time, never all len(X_new) × len(coef)."""
        X_new = np.asarray(X_new, dtype=np.float64)
        out = np.empty(len(X_new))
        rows = block_rows(len(self.coef))
        for lo in range(0, len(X_new), rows):
            out[lo: lo + rows] = self.kernel(X_new[lo: lo + rows], self.X_basis) @ self.coef
        return out

    def predict(self, X_new: np.ndarray) -> Prediction:
        var = None if self.variance_bounds is None else self.variance_bounds(X_new)[1]
        prob = None if self.probability is None else self.probability(X_new)
        return Prediction(self.mean(X_new), var, prob)


# ----------------------------------------------------------------------------- result schema

REGRESSION_METRICS = ("test_rmse", "test_nlpd", "test_coverage_2sd")
# binary classification: error rate of sign(p − ½), mean −log p(y | x), mean (p − [y = +1])²
CLASSIFICATION_METRICS = ("test_error_rate", "test_log_loss", "test_brier")
TASK_METRICS = {"regression": REGRESSION_METRICS, "classification": CLASSIFICATION_METRICS}
_BASE_TRACE_KEYS = ("n_basis", "objective", "gap", "seconds")
_BASE_SUMMARY_KEYS = ("n_basis", "objective", "gap", "seconds", "stop_reason", "jitter")
TRACE_KEYS = _BASE_TRACE_KEYS + REGRESSION_METRICS
SUMMARY_KEYS = _BASE_SUMMARY_KEYS + REGRESSION_METRICS


def trace_keys(task: str) -> tuple[str, ...]:
    """The trace variables every fit for ``task`` carries."""
    return _BASE_TRACE_KEYS + TASK_METRICS[task]


def summary_keys(task: str) -> tuple[str, ...]:
    """The final scalars every fit for ``task`` carries."""
    return _BASE_SUMMARY_KEYS + TASK_METRICS[task]


class FrozenMap(Mapping):
    """A read-only mapping (picklable, unlike ``types.MappingProxyType``)."""

    def __init__(self, data: Mapping) -> None:
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def _frozen_array(values) -> np.ndarray:
    a = np.array(values, dtype=np.float64)
    a.flags.writeable = False
    return a


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


@dataclass(frozen=True)
class Result:
    """The common schema of every result; see the module docstring."""

    algorithm: str
    trace: Mapping[str, np.ndarray]
    summary: Mapping[str, Any]
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    kind: ClassVar[str] = "result"
    trace_keys: ClassVar[tuple[str, ...]] = TRACE_KEYS
    summary_keys: ClassVar[tuple[str, ...]] = SUMMARY_KEYS

    def required(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(trace keys, summary keys) this result must carry."""
        return self.trace_keys, self.summary_keys

    def __post_init__(self) -> None:
        trace = {k: _frozen_array(v) for k, v in self.trace.items()}
        lengths = {k: len(v) for k, v in trace.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{self.algorithm}: trace variables differ in length: {lengths}")
        need_trace, need_summary = self.required()
        missing = [k for k in need_trace if k not in trace]
        missing += [k for k in need_summary if k not in self.summary]
        if missing:
            raise ValueError(f"{self.algorithm}: result lacks required {', '.join(missing)}")
        unexplained = [k for k in need_summary
                       if _is_nan(self.summary[k]) and k not in self.not_applicable]
        unexplained += [k for k in need_trace if len(trace[k]) and np.isnan(trace[k]).all()
                        and k not in self.not_applicable]
        if unexplained:
            raise ValueError(f"{self.algorithm}: {', '.join(sorted(set(unexplained)))} "
                             "NaN without a reason in not_applicable")
        object.__setattr__(self, "trace", FrozenMap(trace))
        object.__setattr__(self, "summary", FrozenMap(self.summary))
        object.__setattr__(self, "not_applicable", FrozenMap(self.not_applicable))

    @property
    def n_steps(self) -> int:
        return len(self.trace["seconds"])

    def variables(self) -> dict[str, tuple[str, np.ndarray]]:
        """Arrays beyond the trace to store with the result: name -> (dim, values)."""
        return {}


@dataclass(frozen=True)
class Fit(Result):
    """A fitted predictor f(x) = k(x, X_basis) @ coef with its per-step trace; its test
    metrics are those of its ``task`` (:data:`TASK_METRICS`)."""

    solution: Solution | None = None
    task: str = "regression"
    kind: ClassVar[str] = "fit"

    def required(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return trace_keys(self.task), summary_keys(self.task)

    @property
    def basis(self) -> np.ndarray:
        return self.solution.basis

    @property
    def coef(self) -> np.ndarray:
        return self.solution.coef

    @property
    def kernel(self) -> Kernel:
        return self.solution.kernel

    @property
    def lam(self) -> float:
        return self.solution.lam

    @property
    def extras(self) -> Mapping[str, np.ndarray]:
        return self.solution.extras

    @property
    def variance_bounds(self):
        return self.solution.variance_bounds

    def predict(self, X_new: np.ndarray) -> np.ndarray:
        """Predictive mean k(X_new, X_basis) @ coef."""
        return self.solution.mean(X_new)

    def predict_proba(self, X_new: np.ndarray) -> np.ndarray | None:
        """p(y = +1 | x) of a classifier, or None."""
        probability = self.solution.probability
        return None if probability is None else probability(X_new)

    def predict_var(self, X_new: np.ndarray) -> np.ndarray | None:
        """Predictive variance of y (the upper bound where only bounds exist), or None."""
        bounds = self.solution.variance_bounds
        return None if bounds is None else bounds(X_new)[1]

    def with_summary(self, **values: Any) -> Fit:
        """A copy with more final scalars (e.g. a certificate); this one is unchanged. The
        reasons stay: they also explain the trace."""
        return Fit(self.algorithm, self.trace, {**self.summary, **values},
                   self.not_applicable, self.solution, self.task)

    def variables(self) -> dict[str, tuple[str, np.ndarray]]:
        return {"basis": ("basis", np.asarray(self.basis, dtype=np.int32)),  # netCDF3: no i8
                "coef": ("basis", np.asarray(self.coef, dtype=np.float64))}


CURVE_TRACE_KEYS = ("n_train", "n_basis", "xbar_error", "xbar_error_se", "seconds")
CURVE_SUMMARY_KEYS = ("n_basis", "n_train", "xbar_error", "plateau", "draws", "seconds",
                      "stop_reason")


@dataclass(frozen=True)
class Curve(Result):
    """A Lemma-4 learning curve: one step per training-set size n (``n_train``); ``errors``
    holds the x̄-error of every draw, shape (len(n grid), draws)."""

    errors: np.ndarray | None = None
    kind: ClassVar[str] = "learning_curve"
    trace_keys: ClassVar[tuple[str, ...]] = CURVE_TRACE_KEYS
    summary_keys: ClassVar[tuple[str, ...]] = CURVE_SUMMARY_KEYS


# ----------------------------------------------------------------------------- specs

@dataclass(frozen=True)
class ExactLimit:
    """The options (plus κ = n) under which an algorithm reproduces the exact GP; ``n`` in an
    option value stands for the number of training points. ``variance``: the predictive
    variance is exact too."""

    options: Mapping[str, Any]
    variance: bool = False


@dataclass(frozen=True)
class CurveModel:
    """How an algorithm's Lemma-4 x̄-error is computed (003): ``xbar_error(kernel, density,
    basis, X, sigma2)`` for one draw X of training inputs; ``basis`` is the Mercer basis of
    eigenfunctions when ``needs_basis`` (as many as the algorithm option ``basis_option``),
    else None."""

    xbar_error: Callable[..., float]
    needs_basis: bool
    basis_option: str = "m"


TASKS = tuple(TASK_METRICS)
EVALUATOR_OPTIONS = ("eval_every",)  # spec options the evaluator consumes, not the fit function
SIZE_OPTION = "max_n"  # a spec option refusing n above it, checked before the data are read
N_MARK = "n"  # in ExactLimit.options: "the number of training points"


@dataclass(frozen=True)
class Requirement:
    """An optional library a fit function imports: ``module`` is its import name (checked with
    :func:`importlib.util.find_spec`), ``library`` the name users know it by, ``extra`` the
    optional-dependency group of pyproject.toml that installs it ("" for a dependency of the
    package itself)."""

    module: str
    library: str
    extra: str


def lowrank_own_hyper(options: Mapping[str, Any]) -> dict[str, Any]:
    """The own protocol of a low-rank method with a basis size ``max_basis`` = m: its kernel
    and σ² learned on every training row by Titsias' collapsed bound with a basis of m
    pivoted-Cholesky rows (``hyper.method=lowrank``, ``hyper.basis`` = m; the ``hyper``
    block's basis where max_basis is null), the bound GPyTorch's SGPR trains on, so the two
    compare like for like at equal m."""
    basis = options.get("max_basis")
    return {"method": "lowrank", "bound": "vfe", **({"basis": int(basis)} if basis else {})}


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything the pipeline may know about an algorithm.

    ``options``: the ``algorithm.<option>`` keys with defaults and validation (the fit
    function takes exactly these, plus ``kappa`` if ``uses_kappa``);
    ``uses_kappa``: κ means something; ``seed_free``: the result does not depend on the seed;
    ``has_variance``: the final predictor has a predictive variance;
    ``learning_curve``: Lemma-4 learning curves are available; ``task``: regression or
    classification; ``exact_limit``: where it reproduces the exact GP (None: it does not);
    ``check_options``: a small, fast setting for the contract tests;
    ``memory_bytes(n, d, options)``: the measured peak memory of a fit on n training points of
    dimension d (None: not declared, e.g. the O(n·t) of a sparse method). With it and an
    option named :data:`SIZE_OPTION`, :func:`~algorithms.evaluation.check_size` refuses a fit
    that is too large from n and d alone, so the pipeline can do so before ingesting the data.
    ``certifiable``: Theorem 1's certificate (:func:`algorithms.certificate.certify`) applies to
    the final solution, i.e. its predictor is k(x, X[basis]) @ coef on training rows with the
    job's kernel and λ; a callable decides from the validated options (a peer library that
    learns its kernel, noise or inducing inputs is not certifiable then), and the pipeline
    skips the certificate where it does not apply (:meth:`certifies`).
    ``requires``: optional libraries the fit imports (:class:`Requirement`); one that is not
    installed is a one-line error when the options are validated
    (:func:`~algorithms.evaluation.options_of`), before any data are read.
    ``cluster_blocks``: the fit's O(n·t) or O(n²) work goes through the provider's columns
    (:meth:`KernelBlocks.columns`, :meth:`KernelBlocks.project`), its pivoted-Cholesky
    columns (:meth:`KernelBlocks.cholesky_columns`) or :meth:`KernelBlocks.matmul`,
    and otherwise it reads only rows, small blocks, the diagonal and n-vectors, so it runs
    with those parts spread over a Dask cluster (``blocks=cluster``,
    :mod:`pipeline.blocks.cluster`); tested against the in-memory run.
    ``device_blocks``: the fit reaches the training data through :class:`KernelBlocks` alone,
    so it runs with its blocks on a torch device (``device=torch:cpu``, ``cuda``:
    :class:`algorithms.torch_blocks.TorchKernelBlocks`), what dominates it there; tested
    against the numpy run. ``float64_only``: with ``device_blocks``, the fit computes in
    float64 whatever the blocks' precision (GPyTorch's peers), so ``precision=float32`` is
    refused. Both are checked with the rest of the job's config, before any data are read
    (:func:`pipeline.job.validate.check_device`).
    ``own_protocol``: for a method that learns its hyperparameters itself as its users run it
    (the peers: GPyTorch's trained SGPR and SVGP, scikit-learn's optimiser), the option values
    of that training; the pipeline's ``protocol=own`` applies them instead of fitting at a
    shared learned kernel (None: the method learns nothing itself, so its own protocol is the
    shared one).
    ``own_hyper``: for a method whose own protocol learns its kernel by the pipeline's
    ``hyper=ml`` in another form (our low-rank methods: Titsias' bound on every training row
    with a basis of the method's own size, :func:`lowrank_own_hyper`), a function of the
    job's algorithm options giving the ``hyper`` options of that learning (None: the shared
    learning, or the method's own training where ``own_protocol`` is set).
    ``too_large``: what to run instead when :func:`~algorithms.evaluation.check_size` refuses
    a fit as too large, named first in its one-line error (None: a sparse algorithm).
    ``distinct_inputs``: the fit merges training rows with equal inputs into one (an exact
    reduction, as the exact GP's: :func:`distinct_rows`), so ``memory_bytes`` and ``max_n`` are
    of the number of distinct inputs, not of n.
    ``blas_lead``: the package whose BLAS carries the fit's heavy work (``scipy``: its
    factorisations and solves, most fits; ``numpy``: its matmul, as CG's K·v); the evaluator
    runs the fit with the other package's own BLAS on one thread
    (:func:`~algorithms.kernel_threads.lead_blas`: two OpenBLAS copies with threads each spin
    against each other).
    """

    name: str
    fit: Callable[..., Solution]
    doc: str
    options: Mapping[str, Option] = field(default_factory=dict)
    uses_kappa: bool = False
    seed_free: bool = False
    has_variance: bool = False
    learning_curve: CurveModel | None = None
    task: str = "regression"
    exact_limit: ExactLimit | None = None
    check_options: Mapping[str, Any] = field(default_factory=dict)
    memory_bytes: Callable[[int, int, Mapping[str, Any]], float] | None = None
    certifiable: bool | Callable[[Mapping[str, Any]], bool] = True
    requires: tuple[Requirement, ...] = ()
    cluster_blocks: bool = False
    device_blocks: bool = False
    float64_only: bool = False
    own_protocol: Mapping[str, Any] | None = None
    own_hyper: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    too_large: str | None = None
    distinct_inputs: bool = False
    blas_lead: str = "scipy"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"{self.name}: task {self.task!r} is not one of {TASKS}")
        if self.float64_only and not self.device_blocks:
            raise ValueError(f"{self.name}: float64_only applies to device_blocks only")

    def certifies(self, options: Mapping[str, Any]) -> bool:
        """Whether Theorem 1's certificate applies to a fit with these (validated) options."""
        return bool(self.certifiable(options) if callable(self.certifiable) else self.certifiable)

    @property
    def owner(self) -> str:
        return f"algorithm {self.name}"
