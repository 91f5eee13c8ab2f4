"""Covariance functions, chosen from a table: :data:`KERNELS` and :class:`Kernel`.

Kernels: Gaussian RBF exp(−‖x−x'‖²/(2ω²)) with the width given as
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
their map in one fused pass (the tiles: :mod:`algorithms.kernel_tiles`). Blocks are computed in
cache-sized row tiles on :func:`~algorithms.kernel_threads.kernel_threads` threads
(:meth:`Kernel.__call__`, :mod:`algorithms.kernel_threads`); the in-memory block provider and
K·V are :mod:`algorithms.kernel_blocks`.

:data:`KERNELS` maps a name to a :class:`KernelSpec` (function, diagonal, declared parameters
with their defaults); ``conf/kernel/<name>.yaml`` is tested against it. Every kernel value is
computed by :class:`Kernel` and checked to be finite there: a kernel that overflows on the data
(a large degree, a width of 1e-320) is bad input, refused before any algorithm sees a NaN.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from algorithms.errors import InputError
from algorithms.kernel_threads import on_threads, tile_rows
from algorithms.kernel_tiles import (
    NUMPY_EXP,
    columns_by_dimension,
    fused,
    laplacian_tile,
    linear_diag,
    linear_tile,
    matern32_tile,
    polynomial_diag,
    polynomial_tile,
    rbf_cols,
    rbf_rows,
    rbf_tile,
    same_cols,
    same_rows,
    unit_diag,
)
from algorithms.options import Option, validate

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
        fused()
    X = np.zeros((2, 1))
    token = NUMPY_EXP.set(False)
    try:
        for name in names:
            Kernel(name)(X, X)
    finally:
        NUMPY_EXP.reset(token)


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
    token = NUMPY_EXP.set(small)
    try:
        yield
    finally:
        NUMPY_EXP.reset(token)


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
    rows: Callable[..., np.ndarray] = same_rows
    cols: Callable[..., np.ndarray] = same_cols
    # variance·exp(rows·cols) (the RBF): K·V takes exp of the tile's GEMM and scales the sums
    exp_of_product: bool = False

    @property
    def shape_params(self) -> tuple[str, ...]:
        """The parameters of the function itself (not ``variance`` and ``lengthscales``)."""
        return tuple(k for k in self.params if k not in ("variance", "lengthscales"))


KERNELS: dict[str, KernelSpec] = {spec.name: spec for spec in (
    KernelSpec("rbf", rbf_tile, unit_diag,
               {"width": _positive(10.0, "2ω² in exp(−‖x−x'‖²/(2ω²))", none_ok=True),
                "variance": VARIANCE, "lengthscales": _lengthscales("rbf")},
               True, ("width", 2.0), rbf_rows, rbf_cols, exp_of_product=True),
    KernelSpec("laplacian", laplacian_tile, unit_diag,
               {"omega": _positive(1.0, "ω in exp(−‖x−x'‖/ω)", none_ok=True),
                "variance": VARIANCE, "lengthscales": _lengthscales("laplacian")},
               True, ("omega", 1.0), cols=columns_by_dimension),
    KernelSpec("matern32", matern32_tile, unit_diag,
               {"mu": _positive(1.0, "μ in (1+h)e^{−h}, h = ‖x−x'‖/μ", none_ok=True),
                "variance": VARIANCE, "lengthscales": _lengthscales("matern32")},
               True, ("mu", 1.0), cols=columns_by_dimension),
    KernelSpec("linear", linear_tile, linear_diag, {"variance": VARIANCE}, False),
    KernelSpec("polynomial", polynomial_tile, polynomial_diag,
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
        return B[:, lo:hi] if self.spec.cols is not same_cols else B[lo:hi]

    def _n_cols(self, B: np.ndarray) -> int:
        """Columns of a block from :meth:`cols` (the RBF keeps its columns as a (d + 2) × m
        array: measured faster in the tiles' GEMM than the transpose of an m × (d + 2) one)."""
        return B.shape[1] if self.spec.cols is not same_cols else len(B)

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
