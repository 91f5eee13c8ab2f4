"""Covariance functions, chosen from a table, and an in-memory kernel-block provider.

Kernels (algorithms.md "Kernels"): Gaussian RBF exp(−‖x−x'‖²/(2ω²)) with the width given as
2ω² like the papers, Laplacian exp(−‖x−x'‖/ω), Matérn-3/2 (1+h)e^{−h} with h = ‖x−x'‖/μ,
linear ⟨x,x'⟩ and polynomial (⟨x,x'⟩+c)^p with an integer p ≥ 1. Every kernel is multiplied by
a signal variance ``variance`` (default 1, the papers' unit amplitude). The stationary kernels
also take ``lengthscales``, one length scale ℓ_j per input dimension (ARD): the inputs are
divided by ℓ and the isotropic form is evaluated at unit scale, so the RBF becomes
exp(−½ Σ_j (x_j−x'_j)²/ℓ_j²) (width 2ω² = 2 on the scaled inputs), the Laplacian
exp(−‖(x−x')/ℓ‖) and the Matérn-3/2 (1+h)e^{−h} with h = ‖(x−x')/ℓ‖. With ``lengthscales`` set the
isotropic scale (``width``, ``omega``, ``mu``) is not used and is recorded as null, so a
kernel's parameters always say which form it is. RBF distances are formed with
one GEMM of augmented inputs (‖a‖² + ‖b‖² − 2abᵀ in one product), so a block costs one BLAS-3
call plus one fused pass (exp, variance, finiteness; :mod:`algorithms._fused_exp`); kernels of
the unsquared distance compute direct differences (as scipy's cdist does, exact near zero) and
their map in one fused pass. Blocks are computed in cache-sized row tiles on
:func:`kernel_threads` threads (:meth:`Kernel.__call__`).

:data:`KERNELS` maps a name to a :class:`KernelSpec` (function, diagonal, declared parameters
with their defaults); ``conf/kernel/<name>.yaml`` is tested against it. Every kernel value is
computed by :class:`Kernel` and checked to be finite there: a kernel that overflows on the data
(a large degree, a width of 1e-320) is bad input, refused before any algorithm sees a NaN.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from algorithms.errors import InputError
from algorithms.factor_columns import CholeskyColumns
from algorithms.options import Option, validate


def _rbf_rows(A: np.ndarray, width: float) -> np.ndarray:
    """RBF rows [a, 1, ‖a‖²] of the one-GEMM form (:func:`_rbf`)."""
    d = A.shape[1]
    Aa = np.empty((len(A), d + 2))
    Aa[:, :d] = A
    Aa[:, d] = 1.0
    np.einsum("ij,ij->i", A, A, out=Aa[:, d + 1])
    return Aa


def _rbf_cols(B: np.ndarray, width: float) -> np.ndarray:
    """RBF columns [2b/width, −‖b‖²/width, −1/width]ᵀ of the one-GEMM form (:func:`_rbf`),
    as a (d + 2) × m array."""
    d = B.shape[1]
    Ba = np.empty((d + 2, len(B)))
    np.multiply(B.T, 2.0 / width, out=Ba[:d])
    np.einsum("ij,ij->i", B, B, out=Ba[d])
    Ba[d] *= -1.0 / width
    Ba[d + 1] = -1.0 / width
    return Ba


def _fused():
    """:mod:`algorithms._fused_exp`, imported on first use (numba's import and the loading of
    its compiled functions are paid by processes that compute kernel tiles, not by every
    command)."""
    import algorithms._fused_exp
    return algorithms._fused_exp


# Whether the RBF's tiles take numpy's exp instead of the compiled tail (:mod:`algorithms.
# _fused_exp`): set for one fit by :func:`fit_tails` when the fit is on fewer than WARM_UP_ROWS
# rows (loading numba and the compiled code costs ~0.4-0.6 s of CPU, more than numpy's scalar
# exp, 5.2 ns a value against 1.7 here, costs such a fit). A context variable, seen by the
# tiles' threads (:func:`on_threads`), so that the choice is the fit's alone: the same fit
# takes the same exp whatever ran before it in the process. The two agree to 2.3·10⁻¹⁶.
_NUMPY_EXP: contextvars.ContextVar[bool] = contextvars.ContextVar("numpy_exp", default=False)


def numpy_rbf_tail(out: np.ndarray, variance: float) -> bool:
    """out ← variance·exp(out) with numpy, in place: the compiled ``rbf_tail`` of
    :mod:`algorithms._fused_exp` in numpy's terms; whether every argument was ≤ 709 (not an
    overflow, not NaN) and every value is finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = bool((out <= 709.0).all())  # False for NaN too, as the compiled tail
        np.exp(out, out=out)
        if variance != 1.0:
            out *= variance
    return ok and bool(np.isfinite(out).all())


def _tail(tail, out: np.ndarray, *args: float) -> bool:
    """A fused elementwise tail (:mod:`algorithms._fused_exp`) over ``out`` in place, through a
    contiguous copy when ``out`` is a strided view; whether every value is finite."""
    if out.flags.c_contiguous:
        return tail(out.reshape(-1), *args)
    flat = np.ascontiguousarray(out).reshape(-1)
    ok = tail(flat, *args)
    out[...] = flat.reshape(out.shape)
    return ok


def _rbf(Aa: np.ndarray, Ba: np.ndarray, width: float, out: np.ndarray,
         variance: float) -> bool:
    """variance·exp(−‖a−b‖²/width) as exp(D) with D = (2abᵀ − ‖a‖² − ‖b‖²)/width from one GEMM
    of the augmented rows and columns (:func:`_rbf_rows`, :func:`_rbf_cols`, made once per
    block, not per tile: the norms ride in the product), then one fused pass; whether every
    value is finite."""
    np.matmul(Aa, Ba, out=out)
    # round-off can leave D ≈ +ε(‖a‖² + ‖b‖²)/width where a = b, so a value may exceed 1 by
    # that much; a clamp would cost a pass for no gain in accuracy
    if _NUMPY_EXP.get():  # a small fit's tiles (fit_tails)
        return numpy_rbf_tail(out, variance)
    return _tail(_fused().rbf_tail, out, variance)


def _same_rows(A: np.ndarray, **_: float) -> np.ndarray:
    return A


def _same_cols(B: np.ndarray, **_: float) -> np.ndarray:
    return B


def _columns_by_dimension(B: np.ndarray, **_: float) -> np.ndarray:
    """Columns of the distance kernels' tiles: B as a contiguous d × m array (the fused
    loops run over the m columns for each dimension)."""
    return np.ascontiguousarray(B.T)


def _distance_block(block, A: np.ndarray, Bt: np.ndarray, scale: float, out: np.ndarray,
                    variance: float) -> bool:
    """A fused distance kernel (:mod:`algorithms._fused_exp`) into ``out``, through a
    contiguous buffer when ``out`` is a strided view; whether every value is finite."""
    A = np.ascontiguousarray(A)
    if out.flags.c_contiguous:
        return block(A, Bt, 1.0 / scale, variance, out)
    buf = np.empty(out.shape)
    ok = block(A, Bt, 1.0 / scale, variance, buf)
    out[...] = buf
    return ok


def _laplacian(A: np.ndarray, Bt: np.ndarray, omega: float, out: np.ndarray,
               variance: float) -> bool:
    """variance·exp(−‖a−b‖/ω) from direct differences (√ of the GEMM form would turn
    round-off 1e-16 into distance 1e-8), in one fused pass; whether every value is finite."""
    return _distance_block(_fused().laplacian_block, A, Bt, omega, out, variance)


def _matern32(A: np.ndarray, Bt: np.ndarray, mu: float, out: np.ndarray,
              variance: float) -> bool:
    """variance·(1 + h) e^{−h}, h = ‖a−b‖/μ, in one fused pass; whether every value is
    finite."""
    return _distance_block(_fused().matern32_block, A, Bt, mu, out, variance)


def _finite_times(out: np.ndarray, variance: float) -> bool:
    if variance != 1.0:
        out *= variance
    return bool(np.isfinite(out).all())


def _linear(A: np.ndarray, B: np.ndarray, out: np.ndarray, variance: float) -> bool:
    np.matmul(A, B.T, out=out)
    return _finite_times(out, variance)


def _polynomial(A: np.ndarray, B: np.ndarray, c: float, degree: int, out: np.ndarray,
                variance: float) -> bool:
    np.matmul(A, B.T, out=out)
    out += c
    np.power(out, float(degree), out=out)  # an integer power: defined for a negative base too
    return _finite_times(out, variance)


def _unit_diag(A: np.ndarray, **_: float) -> np.ndarray:
    return np.ones(A.shape[0])


def _linear_diag(A: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", A, A)


def _polynomial_diag(A: np.ndarray, c: float, degree: int) -> np.ndarray:
    return (np.einsum("ij,ij->i", A, A) + c) ** float(degree)


# A tile of this many float64 values (512 KiB) and its operands stay in a core's L2 cache (1 MiB
# here), so the elementwise pass after the GEMM runs from cache, not memory.
TILE_ENTRIES = 1 << 16
# Blocks smaller than this are computed on the calling thread (a thread hand-off costs more).
PARALLEL_ENTRIES = 1 << 17

# the thread count of large kernel blocks, scoped to the job (or task) that set it
# (:func:`use_kernel_threads`): a context variable, so another thread — a Dask worker's next
# task, an actor call, a tile pool's thread — never sees it
_THREADS: contextvars.ContextVar[int] = contextvars.ContextVar("kernel_threads", default=1)
_pools: dict[int, ThreadPoolExecutor] = {}  # one per thread count in use, never shut down
_pools_lock = threading.Lock()
_blas = ThreadpoolController()


@contextlib.contextmanager
def use_kernel_threads(n: int | None) -> Iterator[int]:
    """Within the context, large kernel blocks computed here are computed on ``n`` threads
    (None: every core); yields the count. Elsewhere (outside it, or on another thread) blocks
    use one thread, or the count of the context around them.

    The job runner enters it with the ``threads`` config, beside the BLAS thread count; inside a
    tile BLAS runs single-threaded, so the two never oversubscribe the cores. The count is read
    on the calling thread and handed to the tiles' pool (:func:`on_threads`); a block computed
    on a pool's thread is computed on that thread alone."""
    count = (os.cpu_count() or 1) if n is None else int(n)
    if count < 1:
        raise InputError(f"kernel threads={n} must be at least 1 (or null: every core)")
    token = _THREADS.set(count)
    try:
        yield count
    finally:
        _THREADS.reset(token)


def kernel_threads() -> int:
    """The number of threads large kernel blocks are computed on here
    (:func:`use_kernel_threads`; 1 outside it)."""
    return _THREADS.get()


FUSED_KERNELS = ("rbf", "laplacian", "matern32")  # the kernels whose tiles are compiled loops


WARM_UP_ROWS = 2000  # fit_tails(rows=n): below this n the RBF's tiles take numpy's exp


def warm_up(kernels: Iterable[str] = FUSED_KERNELS) -> None:
    """Load the tiles' compiled loops (:mod:`algorithms._fused_exp`: numba's import and its
    cached code, ~0.4-0.6 s of CPU; compiled the first time on a machine) and compute a tiny
    block of each kernel named, on this thread, so that the loading is not paid inside whatever
    times the first block: a job's fit. Nothing for a kernel without compiled tiles (linear,
    polynomial). At once after the first call. A local Dask worker calls it at its start
    (:func:`pipeline.cluster.prestart.dask_setup`); a fit, through :func:`fit_tails`."""
    names = [name for name in kernels if name in FUSED_KERNELS]
    if names:
        _fused()
    X = np.zeros((2, 1))
    token = _NUMPY_EXP.set(False)
    try:
        for name in names:
            Kernel(name)(X, X)
    finally:
        _NUMPY_EXP.reset(token)


def takes_numpy_exp(kernel: str, rows: int | None) -> bool:
    """Whether a fit of ``kernel`` on ``rows`` training rows (None: not known) takes numpy's
    exp in its tiles rather than the compiled loops: an RBF fit on fewer than
    :data:`WARM_UP_ROWS` rows. A kernel without compiled tiles takes neither."""
    return kernel == "rbf" and rows is not None and rows < WARM_UP_ROWS


@contextlib.contextmanager
def fit_tails(kernel: str, rows: int) -> Iterator[None]:
    """The context of one fit of ``kernel`` on ``rows`` training rows: an RBF fit on fewer
    than :data:`WARM_UP_ROWS` rows takes numpy's exp in its tiles (and never loads numba);
    any other fit has the compiled loops loaded first (:func:`warm_up`, outside whatever the
    caller times inside the context). The job runner and the estimators enter it around a
    fit and its evaluation."""
    small = takes_numpy_exp(kernel, rows)
    if not small:
        warm_up([kernel])
    token = _NUMPY_EXP.set(small)
    try:
        yield
    finally:
        _NUMPY_EXP.reset(token)


def _pool(threads: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if threads not in _pools:
            _pools[threads] = ThreadPoolExecutor(max_workers=threads,
                                                 thread_name_prefix="kernel-tiles")
        return _pools[threads]


def tiles_own_the_cores():
    """A context for a loop whose heavy work is tiled projections (:meth:`ArrayKernelBlocks.
    project`): BLAS runs single-threaded throughout. The tiles are the parallel unit (on
    :func:`kernel_threads` threads), and each BLAS call inside the loop is small (a tile's
    product, a t × κ triangular solve): OpenBLAS's threads cost more in hand-offs there than
    they compute, and its idle workers spin after a multithreaded call and take the cores the
    tiles run on. Measured on 2 cores: SGMA n = 100000, t = 200, 13.1 s with 2 BLAS threads
    against 5.9 s with 1 (two kernel threads) and 9.8 s on one thread; SGMA n = 4000, d = 8,
    κ = 59, 244 basis functions on one kernel thread, 3.14 s with 2 BLAS threads against 0.85 s
    with 1 (n = 2000, d = 2, 100 basis functions: 1.02 s against 0.10 s)."""
    return _blas.limit(limits=1, user_api="blas")


SMALL_FACTOR = 4096  # small_blas: a t × t factor up to this t is worked on one BLAS thread


def small_blas(t: int):
    """A context for the LAPACK/BLAS calls on a growing basis's t × t factors (a Cholesky of
    a block of new pivots, triangular solves against the factor so far) made between large
    multithreaded products: one BLAS thread while t ≤ :data:`SMALL_FACTOR`, else no change.
    numpy and scipy each load their own OpenBLAS, and a library's idle threads spin for a
    while after a multithreaded call: a small scipy call between numpy's large products waits
    for the cores the other library's threads hold. Measured on 2 cores, Nyström n = 4000,
    m = 256: its 12 Cholesky factors of blocks of at most 128 pivots took 0.23 s (19 ms each;
    0.17 ms alone), and its 280 triangular solves 0.08 s."""
    return _blas.limit(limits=1, user_api="blas") if t <= SMALL_FACTOR else contextlib.nullcontext()


def l2_bytes(default: int = 1 << 20) -> int:
    """The per-core L2 cache in bytes (Linux sysfs, cpu0), or ``default`` where unreadable."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(root)):
            with open(f"{root}/{index}/level") as level, open(f"{root}/{index}/size") as size:
                if level.read().strip() == "2":
                    text = size.read().strip().upper()
                    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
                    return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


# K·V's tiles (a narrow V): MATMUL_COLS columns of K by as many rows as fill MATMUL_TILE_BYTES (a
# quarter of the per-core L2), at least MATMUL_TILE_ROWS. A tile of whole rows of K streams all
# n columns' inputs ((d + 2)·n values, 2.9 MB at n = 36 000, d = 8) through the cache for each
# few rows; a block of columns keeps its inputs in cache for every row. Measured at n = 36 000,
# d = 8, 2 threads, 2 MiB L2 (AVX-512, interleaved, min of 3): whole-row tiles of 2 rows 2.3 s a
# pass; 16 × 4096 1.07 s, 32 × 2048 0.97 s, 64 × 1024 0.92 s, 32 × 4096 1.38 s, 32 × 8192 1.51 s
MATMUL_TILE_BYTES = l2_bytes() // 4
MATMUL_COLS = 2048
MATMUL_TILE_ROWS = 2  # a single-row tile pays Python's per-tile overhead on little work
MATMUL_NARROW = 8  # a V of more columns is multiplied by blocks of K's rows, not by tiles


def _numpy_exp_is_vectorised() -> bool:
    """Whether numpy's float64 exp runs in vector registers on this CPU: numpy dispatches it
    to AVX-512F code only (elsewhere it is scalar libm, 5.2 ns a value against the compiled
    tail's 1.7 on an AVX2 host). On an AVX-512 host numpy's is the faster (0.76-0.96 ns a
    value against 1.36-1.85 for the compiled tail, same runs)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__
        except ImportError:
            return False
    return bool(__cpu_features__.get("AVX512F"))


NUMPY_EXP_VECTORISED = _numpy_exp_is_vectorised()


def tile_rows(n_cols: int) -> int:
    """Rows of a tile of ``n_cols`` columns (:data:`TILE_ENTRIES` values)."""
    return max(1, TILE_ENTRIES // max(1, n_cols))


def on_threads(work: Callable[[range], Any], starts: range, entries: int) -> list:
    """``work`` over the tiles' first rows, split into one run per thread (a task per tile
    costs more in hand-offs and GIL traffic than a tile's ~100 µs of work): on this thread
    for one thread or a small block, else on the pool with BLAS single-threaded inside."""
    threads = kernel_threads()
    if threads == 1 or entries < PARALLEL_ENTRIES or len(starts) == 1:
        return [work(starts)]
    runs = [starts[i::threads] for i in range(threads)]
    contexts = [contextvars.copy_context() for _ in runs]  # the caller's context variables
    with _blas.limit(limits=1, user_api="blas"):
        return list(_pool(threads).map(lambda ctx, run: ctx.run(work, run), contexts, runs))


def _positive(default: float, doc: str, none_ok: bool = False) -> Option:
    return Option(default, "float", doc, lo=0.0, lo_open=True, none_ok=none_ok)


def _lengthscales(kernel: str) -> Option:
    """The ARD option of ``kernel``: null, or a non-empty list of finite numbers > 0."""
    def parse(value: Any) -> tuple[float, ...]:
        unit = Option(1.0, "float", lo=0.0, lo_open=True)
        checked = ([] if isinstance(value, (str, bytes)) or not isinstance(value, Iterable)
                   else [unit.check(v) for v in value])
        if not checked or not all(ok for ok, _ in checked):
            raise InputError(f"kernel '{kernel}': kernel.lengthscales={value!r} is invalid; it "
                             "must be a list of numbers > 0, one per input dimension, or null, "
                             "e.g. kernel.lengthscales=[1.0, 2.0]")
        return tuple(v for _, v in checked)

    return Option(None, "any", "a list of length scales > 0, one per input dimension (ARD)",
                  none_ok=True, example=[1.0, 2.0], parse=parse)


VARIANCE = _positive(1.0, "signal variance: the kernel is multiplied by it")


@dataclass(frozen=True)
class KernelSpec:
    """A covariance function k(A, B; params), its diagonal k(a, a; params) and its parameters.
    ``function(A, B, out=, variance=, **shape)`` writes variance·k into ``out`` and returns
    whether every value is finite (checked in the same pass where it can)."""

    name: str
    function: Callable[..., bool]
    diag: Callable[..., np.ndarray]
    params: Mapping[str, Option]
    stationary: bool
    # ARD: (name of the isotropic scale, its value at unit length scale), or None
    unit_scale: tuple[str, float] | None = None
    # the inputs ``function`` takes, made once per block from the (scaled) rows and columns
    rows: Callable[..., np.ndarray] = _same_rows
    cols: Callable[..., np.ndarray] = _same_cols
    # variance·exp(rows·cols) (the RBF): K·V takes exp of the tile's GEMM and scales the sums
    exp_of_product: bool = False

    @property
    def shape_params(self) -> tuple[str, ...]:
        """The parameters of the function itself (not ``variance`` and ``lengthscales``)."""
        return tuple(k for k in self.params if k not in ("variance", "lengthscales"))


KERNELS: dict[str, KernelSpec] = {spec.name: spec for spec in (
    KernelSpec("rbf", _rbf, _unit_diag,
               {"width": _positive(10.0, "2ω² in exp(−‖x−x'‖²/(2ω²))", none_ok=True),
                "variance": VARIANCE, "lengthscales": _lengthscales("rbf")},
               True, ("width", 2.0), _rbf_rows, _rbf_cols, exp_of_product=True),
    KernelSpec("laplacian", _laplacian, _unit_diag,
               {"omega": _positive(1.0, "ω in exp(−‖x−x'‖/ω)", none_ok=True),
                "variance": VARIANCE, "lengthscales": _lengthscales("laplacian")},
               True, ("omega", 1.0), cols=_columns_by_dimension),
    KernelSpec("matern32", _matern32, _unit_diag,
               {"mu": _positive(1.0, "μ in (1+h)e^{−h}, h = ‖x−x'‖/μ", none_ok=True),
                "variance": VARIANCE, "lengthscales": _lengthscales("matern32")},
               True, ("mu", 1.0), cols=_columns_by_dimension),
    KernelSpec("linear", _linear, _linear_diag, {"variance": VARIANCE}, False),
    KernelSpec("polynomial", _polynomial, _polynomial_diag,
               {"c": Option(1.0, "float", "offset c in (⟨x,x'⟩ + c)^degree"),
                "degree": Option(2, "int", "the power, a positive integer", lo=1),
                "variance": VARIANCE}, False),
)}


@dataclass(frozen=True)
class Kernel:
    """A kernel from :data:`KERNELS` with its parameters (missing ones take their defaults)."""

    name: str
    params: dict[str, float | int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in KERNELS:
            raise InputError(f"unknown kernel '{self.name}'; choose one of: "
                             + ", ".join(KERNELS))
        spec = KERNELS[self.name]
        full = validate(spec.params, dict(self.params), owner=f"kernel '{self.name}'",
                        prefix="kernel.")
        if spec.unit_scale is not None:
            scale = spec.unit_scale[0]
            if full["lengthscales"] is not None:
                full[scale] = None  # not used: recorded as null (module docstring)
            elif full[scale] is None:
                raise InputError(f"kernel '{self.name}': kernel.{scale} is null and no "
                                 f"kernel.lengthscales are given; pass e.g. kernel.{scale}="
                                 f"{spec.params[scale].default} or kernel.lengthscales=[1.0, 2.0]")
        object.__setattr__(self, "params", full)  # floats, and ints for integer parameters
        shape = {k: full[k] for k in spec.shape_params}
        if full.get("lengthscales") is not None:
            shape[spec.unit_scale[0]] = spec.unit_scale[1]
        object.__setattr__(self, "_shape", shape)

    @property
    def variance(self) -> float:
        return self.params["variance"]

    @property
    def lengthscales(self) -> np.ndarray | None:
        ls = self.params.get("lengthscales")
        return None if ls is None else np.asarray(ls, dtype=np.float64)

    def scaled(self, A: np.ndarray) -> np.ndarray:
        """``A`` as float64, divided by the ARD length scales (unchanged without them)."""
        A = np.asarray(A, dtype=np.float64)
        ls = self.lengthscales
        if ls is None:
            return A
        if A.ndim != 2 or A.shape[1] != len(ls):
            raise InputError(f"kernel {self} has {len(ls)} length scales but the inputs have "
                             f"{A.shape[-1]} dimensions; pass one length scale per dimension")
        return A / ls

    @property
    def spec(self) -> KernelSpec:
        return KERNELS[self.name]

    def __str__(self) -> str:
        """``name(param=value, ...)``, as the user spells the kernel in messages (a unit
        variance and absent length scales left out)."""
        shown = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()
                 if v is not None and not (k == "variance" and v == 1.0)}  # the papers' form
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """k(A, B), shape (len(A), len(B)), float64; raises :class:`InputError` if a value is
        NaN/inf (every block, diagonal and prediction is computed here).

        The block is computed in row tiles of about :data:`TILE_ENTRIES` values, each finished
        (every elementwise pass, the variance, the finiteness check) while it is in cache, on
        :func:`kernel_threads` threads for large blocks; the values are those of one
        untiled evaluation (the GEMM may round a row at a tile edge differently, by a few
        ulp)."""
        return self.block(self.rows(A), self.cols(B))

    def block(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """k(A, B) for rows and columns already in the tiles' form (:meth:`rows`,
        :meth:`cols`; a provider makes its training rows' once), into ``out`` if given; as
        :meth:`__call__`."""
        K = np.empty((len(A), self._n_cols(B))) if out is None else out
        rows = tile_rows(K.shape[1])

        def run(starts: range) -> bool:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                return all([self.tile(A[lo: lo + rows], B, K[lo: lo + rows])
                            for lo in starts])

        if all(on_threads(run, range(0, len(A), rows), K.size)):
            return K
        raise self._overflow(K)

    def rows(self, A: np.ndarray) -> np.ndarray:
        """The rows of a block as :meth:`tile` takes them: scaled (:meth:`scaled`), then in the
        kernel's own form (the RBF's augmented inputs)."""
        return self.spec.rows(self.scaled(A), **self._shape)

    def cols(self, B: np.ndarray) -> np.ndarray:
        """The columns of a block as :meth:`tile` takes them (see :meth:`rows`)."""
        return self.spec.cols(self.scaled(B), **self._shape)

    def col_block(self, B: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Columns ``lo:hi`` of a block's columns from :meth:`cols` (a view)."""
        return B[:, lo:hi] if self.spec.cols is not _same_cols else B[lo:hi]

    def _n_cols(self, B: np.ndarray) -> int:
        """Columns of a block from :meth:`cols` (the RBF keeps its columns as a (d + 2) × m
        array: measured faster in the tiles' GEMM than the transpose of an m × (d + 2) one)."""
        return B.shape[1] if self.spec.cols is not _same_cols else len(B)

    def tile(self, A: np.ndarray, B: np.ndarray, out: np.ndarray) -> bool:
        """k(A, B) into ``out`` for rows and columns from :meth:`rows` and :meth:`cols`;
        whether every value is finite (checked while the tile is in cache). Call it under
        ``np.errstate(over="ignore", invalid="ignore", divide="ignore")``: an overflow is
        reported by the finiteness check, not as a warning."""
        return self.spec.function(A, B, out=out, variance=self.variance, **self._shape)

    def diag(self, A: np.ndarray) -> np.ndarray:
        """k(a, a) for each row a of A (checked like :meth:`__call__`)."""
        A = self.scaled(A)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._finite(self.variance * self.spec.diag(A, **self._shape))

    def _finite(self, K: np.ndarray) -> np.ndarray:
        """K itself if all finite (one pass over a block already in memory), else the
        one-line error naming the kernel, its parameters and the fix."""
        if np.isfinite(K).all():
            return K
        raise self._overflow(K)

    def _overflow(self, K: np.ndarray) -> InputError:
        bad = int(K.size - np.isfinite(K).sum())
        defaults = " ".join(f"kernel.{k}={self.spec.params[k].default}"
                            for k in self.spec.shape_params)
        return InputError(f"kernel {self} is NaN/inf for {bad} of {K.size} values on these "
                          "inputs (overflow); pass parameters of moderate size"
                          + (f" (defaults: {defaults})" if defaults else "")
                          + " or rescale the inputs (e.g. dataset.standardize_x=true)")


def tiled_matmul(kernel: Kernel, A: np.ndarray, B: np.ndarray, W: np.ndarray) -> np.ndarray:
    """k(rows, cols)·W for rows ``A`` and columns ``B`` in the tiles' form (:meth:`Kernel.rows`,
    :meth:`Kernel.cols`) and W of shape (m, b), b ≤ :data:`MATMUL_NARROW`, by 2-D tiles on
    :func:`kernel_threads` threads: each tile, :data:`MATMUL_COLS` columns by the rows that fill
    :data:`MATMUL_TILE_BYTES`, is computed, multiplied into its rows of the output while in
    cache and dropped; a row's sum runs over the blocks of columns in order, so a row's value
    does not depend on which other rows are computed with it (a shard's rows of K·W equal the
    whole product's). The RBF's tile is exp of one GEMM of its augmented inputs, and its
    variance multiplies the sums once: numpy's exp where it is vectorised
    (:data:`NUMPY_EXP_VECTORISED`, the outputs then checked finite at the end), else the
    compiled tail (which checks each value)."""
    n, m, b = len(A), kernel._n_cols(B), W.shape[1]
    cols = max(1, min(m, MATMUL_COLS))
    rows = max(MATMUL_TILE_ROWS, MATMUL_TILE_BYTES // (8 * cols))
    blocks = [(lo, np.ascontiguousarray(kernel.col_block(B, lo, min(m, lo + cols))))
              for lo in range(0, m, cols)]  # contiguous: the compiled tiles' own layout
    exp_form = kernel.spec.exp_of_product
    numpy_exp = NUMPY_EXP_VECTORISED or _NUMPY_EXP.get()
    tail = None if numpy_exp or not exp_form else _fused().rbf_tail
    out = np.zeros((n, b))

    def run(starts: range) -> bool:
        buf, acc, ok = np.empty(rows * cols), np.empty((rows, b)), True
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for lo in starts:
                a = A[lo: lo + rows]
                r, o = len(a), out[lo: lo + rows]
                for c, Bc in blocks:
                    width = kernel._n_cols(Bc)
                    T = buf[: r * width].reshape(r, width)
                    if not exp_form:
                        ok &= kernel.tile(a, Bc, T)
                    else:
                        np.matmul(a, Bc, out=T)
                        if tail is None:
                            np.exp(T, out=T)
                        else:
                            ok &= tail(buf[: r * width], 1.0)
                    np.matmul(T, W[c: c + width], out=acc[:r])
                    o += acc[:r]
        return ok

    ok = all(on_threads(run, range(0, n, rows), n * m))
    if exp_form and kernel.variance != 1.0:
        with np.errstate(over="ignore", invalid="ignore"):
            out *= kernel.variance
    if not (ok and np.isfinite(out).all()):
        raise kernel._overflow(out)
    return out


def row_block_matmul(kernel: Kernel, X_rows: np.ndarray, X: np.ndarray, V: np.ndarray,
                     block_bytes: int) -> np.ndarray:
    """k(X_rows, X)·V: by :func:`tiled_matmul` for a narrow V (a row's value then equals its
    value in the whole product), else in row blocks of about ``block_bytes`` of kernel
    values."""
    V = np.asarray(V, dtype=np.float64)
    W = V.reshape(len(X), -1)
    if W.shape[1] <= MATMUL_NARROW:
        return tiled_matmul(kernel, kernel.rows(X_rows), kernel.cols(X), W).reshape(
            len(X_rows), *V.shape[1:])
    rows = max(1, int(block_bytes) // (8 * max(len(X), 1)))
    out = np.empty((len(X_rows), *V.shape[1:]))
    for lo in range(0, len(X_rows), rows):
        out[lo: lo + rows] = kernel(X_rows[lo: lo + rows], X) @ V
    return out


class ArrayKernelBlocks:
    """Kernel blocks over training inputs held in memory (numpy, or anything np.asarray takes).

    Blocks are computed on demand; nothing of size n×n is stored. ``X`` may be a lazy array
    (e.g. dask over zarr): it is materialised once, on first use, as an (n, d) float64 array,
    which costs n·d·8 bytes, not n²·8.
    """

    def __init__(self, X, kernel: Kernel) -> None:
        self._source = X
        self._X: np.ndarray | None = None
        self._rows: np.ndarray | None = None
        self.kernel = kernel
        if len(X.shape) != 2:
            raise InputError(f"X has shape {tuple(X.shape)}; it must be (n, d)")
        self.n, self.d = (int(s) for s in X.shape)

    @property
    def X(self) -> np.ndarray:
        if self._X is None:
            self._X = np.ascontiguousarray(np.asarray(self._source, dtype=np.float64))
        return self._X

    @property
    def kernel_rows(self) -> np.ndarray:
        """All training inputs as the kernel's tiles take them (:meth:`Kernel.rows`), made
        once: n·(d + 2) values for the RBF."""
        if self._rows is None:
            self._rows = self.kernel.rows(self.X)
        return self._rows

    def inputs(self, rows) -> np.ndarray:
        return self.X[rows]

    def block(self, rows, cols) -> np.ndarray:
        X = self.X
        return self.kernel(X[rows], X[cols])

    def diag(self) -> np.ndarray:
        return self.kernel.diag(self.X)

    def matmul(self, V: np.ndarray, block_bytes: int = 2**25) -> np.ndarray:
        """K·V for V of shape (n,) or (n, b) (K is never formed): CG's product, on
        :func:`kernel_threads` threads. For a narrow V (at most :data:`MATMUL_NARROW` columns)
        each tile of K, :data:`MATMUL_COLS` columns by the rows that fill
        :data:`MATMUL_TILE_BYTES`, is computed, multiplied into its rows of the output while in
        cache and dropped (:meth:`_narrow_matmul`). For a wide V (the error bars' batched CG)
        row tiles fill a block of about ``block_bytes`` of K's rows per thread, multiplied by V
        in one GEMM: a product of a few rows by V streams all of V from memory for little
        arithmetic (measured at n = 8000, b = 256, 2 threads on a loaded machine: 8.8 s a pass
        with 8-row tiles, 3.7 s with 524-row blocks, 2.3 s for the same product with a dense
        K)."""
        W = np.asarray(V, dtype=np.float64).reshape(self.n, -1)
        if W.shape[1] <= MATMUL_NARROW:
            return self._narrow_matmul(W).reshape(V.shape)
        kernel, A = self.kernel, self.kernel_rows
        B = kernel.cols(self.X)
        n = self.n
        out = np.empty((n, W.shape[1]))
        tile = tile_rows(n)
        rows = max(tile, min(n, int(block_bytes) // (8 * n)))

        def run(starts: range) -> bool:
            buf, ok = np.empty((rows, n)), True
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                for lo in starts:
                    T = buf[: min(rows, n - lo)]
                    for t in range(0, len(T), tile):  # each tile while it is in cache
                        ok &= kernel.tile(A[lo + t: lo + min(t + tile, len(T))], B,
                                          T[t: t + tile])
                    np.matmul(T, W, out=out[lo: lo + len(T)])
            return ok

        if not all(on_threads(run, range(0, n, rows), n * n)):
            kernel(self.X, self.X[:1])  # raises the one-line overflow error
        return out.reshape(V.shape)

    def _narrow_matmul(self, W: np.ndarray) -> np.ndarray:
        """K·W for W of shape (n, b), b ≤ :data:`MATMUL_NARROW`: :func:`tiled_matmul`."""
        kernel = self.kernel
        return tiled_matmul(kernel, self.kernel_rows, kernel.cols(self.X), W)

    def columns(self, first: np.ndarray, capacity: int) -> KernelColumns:
        """An n × p matrix [first, K[:, i₁], K[:, i₂], …] to which kernel columns are appended
        (:class:`KernelColumns`; SGMA's [y, K_{:S}]), room made for ``capacity`` of them."""
        return KernelColumns(self, first, capacity)

    def cholesky_columns(self, capacity: int, targets: np.ndarray | None = None
                         ) -> CholeskyColumns:
        """The rows of a pivoted Cholesky factor of K with room for ``capacity`` columns, and
        their reductions (:class:`~algorithms.factor_columns.CholeskyColumns`; the Nyström
        and incomplete-Cholesky state), with the ``targets`` y for its Gram products."""
        return CholeskyColumns(self, targets, capacity)

    def project(self, cols, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ K[:, cols], the column sums of K[:, cols]²) for W of shape (n, p) (an array or
        :class:`KernelColumns`), without forming K[:, cols]: see :meth:`project_points`."""
        return self.project_points(self.X[cols], W)

    def project_points(self, X_cols: np.ndarray, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ k(X, X_cols), the column sums of k(X, X_cols)²) for W of shape (n, p): each row
        tile of k(X, X_cols) is computed, multiplied into the running product while in cache
        and dropped, on :func:`kernel_threads` threads (one partial product per thread,
        summed). One pass over W and no n × len(X_cols) array: the greedy methods' candidate
        scores are these two quantities, and with X_cols test inputs they give the Nyström and
        SGMA variance terms."""
        W = W.array if isinstance(W, KernelColumns) else W
        kernel, A = self.kernel, self.kernel_rows
        B = kernel.cols(np.asarray(X_cols, dtype=np.float64))
        n, m, p = self.n, kernel._n_cols(B), W.shape[1]
        rows = tile_rows(m)

        def run(starts: range) -> tuple[np.ndarray, np.ndarray, bool]:
            P, sq, ok = np.zeros((p, m)), np.zeros(m), True
            buf, prod = np.empty((rows, m)), np.empty((p, m))
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                for lo in starts:
                    T = buf[: min(rows, n - lo)]
                    ok &= kernel.tile(A[lo: lo + len(T)], B, T)
                    np.matmul(W[lo: lo + len(T)].T, T, out=prod)
                    P += prod
                    sq += np.einsum("ij,ij->j", T, T)
            return P, sq, ok

        parts = on_threads(run, range(0, n, rows), n * m)
        if not all(ok for _, _, ok in parts):
            kernel(self.X, X_cols)  # raises the one-line overflow error
        return sum(P for P, _, _ in parts), sum(sq for _, sq, _ in parts)

    def cross(self, X_new: np.ndarray, cols) -> np.ndarray:
        return self.kernel(X_new, self.X[cols])


def _memory() -> int:
    """This machine's physical memory in bytes (0 where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class KernelColumns:
    """An n × p matrix held by a kernel-block provider: ``first`` (n × p₀, e.g. y as one
    column) followed by kernel columns K[:, i] appended by index (SGMA's [y, K_{:S}]).

    An algorithm only appends to it (:meth:`append`, :meth:`extend`) and hands it to the
    provider's :meth:`~ArrayKernelBlocks.project` / ``project_points``, so a provider may keep
    its rows wherever the training rows are (in memory here, on the Dask workers that own them
    with ``blocks=cluster``). Room for ``capacity`` appended columns is made at once when that
    is at most 2 GiB, or 4096 columns within half this machine's memory (memory is taken as
    columns are written), else the buffer doubles as it fills, never past ``capacity``.
    """

    BATCH = 32  # columns computed at once by extend
    WHOLE_COLUMNS = 4096

    def __init__(self, blocks: ArrayKernelBlocks, first: np.ndarray, capacity: int) -> None:
        first = np.asarray(first, dtype=np.float64).reshape(blocks.n, -1)
        n, p0 = first.shape
        # made whole when it is small or of a basis size: its pages are taken as columns are
        # written (no copy when it fills); else it doubles from 64 (e.g. max_basis = n)
        size = n * (p0 + capacity) * 8
        whole = size <= 2**31 or (capacity <= self.WHOLE_COLUMNS and size <= _memory() // 2)
        room = capacity if whole else min(capacity, 64)
        self.blocks, self.capacity = blocks, p0 + capacity
        self._buf = np.empty((n, p0 + room), order="F")
        self._buf[:, :p0] = first
        self.width = p0

    @property
    def nbytes(self) -> int:
        return self._buf.nbytes

    @property
    def array(self) -> np.ndarray:
        """The columns so far, an (n, width) view."""
        return self._buf[:, : self.width]

    def append(self, i: int) -> None:
        """Append the kernel column K[:, i]."""
        self.extend([i])

    def extend(self, indices) -> None:
        """Append the kernel columns K[:, indices] (one block)."""
        self.extend_points(self.blocks.X[list(indices)])

    def extend_points(self, X_cols: np.ndarray) -> None:
        """Append the columns k(X, X_cols) of any inputs (one block)."""
        need = self.width + len(X_cols)
        if need > self._buf.shape[1]:
            cols = max(need, min(2 * self._buf.shape[1], self.capacity))
            grown = np.empty((self._buf.shape[0], cols), order="F")
            grown[:, : self.width] = self.array
            self._buf = grown
        kernel, rows = self.blocks.kernel, self.blocks.kernel_rows
        for lo in range(0, len(X_cols), self.BATCH):  # n × BATCH at a time, not n × len
            hi = min(lo + self.BATCH, len(X_cols))
            block = kernel.block(rows, kernel.cols(np.asarray(X_cols[lo:hi], dtype=np.float64)))
            self._buf[:, self.width + lo: self.width + hi] = block
        self.width = need
