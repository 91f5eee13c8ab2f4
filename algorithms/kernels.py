"""Covariance functions, chosen from a table: :data:`KERNELS` and :class:`Kernel`.

Kernels: Gaussian RBF exp(−‖x−x'‖²/(2ω²)) with the width given as 2ω² like the papers,
Laplacian exp(−‖x−x'‖/ω) (the Matérn-1/2), Matérn-3/2 (1+h)e^{−h} and Matérn-5/2
(1+h+h²/3)e^{−h} with h = ‖x−x'‖/μ (Rasmussen & Williams eq. 4.17, whose length scale is ℓ =
√3·μ and √5·μ respectively), linear ⟨x,x'⟩ and polynomial (⟨x,x'⟩+c)^p with an integer p ≥ 1.
Every kernel is multiplied by a signal variance ``variance`` (default 1, the papers' unit
amplitude). The stationary kernels also take ``lengthscales``, one length scale ℓ_j per input
dimension (ARD): the inputs are divided by ℓ and the isotropic form is evaluated at unit scale,
so the RBF becomes exp(−½ Σ_j (x_j−x'_j)²/ℓ_j²) (width 2ω² = 2 on the scaled inputs), the
Laplacian exp(−‖(x−x')/ℓ‖) and the Matérns with h = ‖(x−x')/ℓ‖. With ``lengthscales`` set the
isotropic scale (``width``, ``omega``, ``mu``) is not used and is recorded as null, so a
kernel's parameters always say which form it is. RBF distances are formed with one GEMM of
augmented inputs (‖a‖² + ‖b‖² − 2abᵀ in one product), so a block costs one BLAS-3 call plus one
fused pass (exp, variance, finiteness; :mod:`algorithms._fused_exp`); kernels of the unsquared
distance compute direct differences (as scipy's cdist does, exact near zero) and their map in
one fused pass (the tiles: :mod:`algorithms.kernel_tiles`; the Matérn-5/2's is plain numpy on
scipy's cdist, :func:`matern52_tile`). Blocks are computed in cache-sized row tiles on
:func:`~algorithms.kernel_threads.kernel_threads` threads (:meth:`Kernel.__call__`,
:mod:`algorithms.kernel_threads`); the in-memory block provider and K·V are
:mod:`algorithms.kernel_blocks`.

:data:`KERNELS` maps a name to a :class:`KernelSpec`: a kernel is one row, everything the
rest of the code needs of it declared together — its numpy tile and diagonal, its declared
parameters with their defaults, its torch tile (:class:`algorithms.device.TorchKernel`), its
length-scale gradient (:class:`Gradient`, read by :mod:`algorithms.marginal_likelihood`) and its
translation to the peer libraries (:class:`Peer`, read by :mod:`algorithms.peers`), or an
explicit None where it has none (the linear and polynomial kernels: no length scale to learn,
no peer translation; asking for either is a one-line error). No module branches on a kernel's
name: adding a kernel is one row here (its functions beside it) and ``conf/kernel/<name>.yaml``,
which is tested against the row. The compiled loops of the RBF, Laplacian and Matérn-3/2 stay in
:mod:`algorithms.kernel_tiles` and :mod:`algorithms._fused_exp`, implementations their rows
point to. Every kernel value is computed by :class:`Kernel` and checked to be finite there: a
kernel that overflows on the data (a large degree, a width of 1e-320) is bad input, refused
before any algorithm sees a NaN.
"""

from __future__ import annotations

import contextlib
import math
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

WARM_UP_ROWS = 2000  # fit_tails(rows=n): below this n the RBF's tiles take numpy's exp


def warm_up(kernels: Iterable[str] | None = None) -> None:
    """Load the tiles' compiled loops (:mod:`algorithms._fused_exp`: numba's import and its
    cached code, ~0.4-0.6 s of CPU; compiled the first time on a machine) and compute a tiny
    block of each kernel named, on this thread, so that the loading is not paid inside whatever
    times the first block: a job's fit. Nothing for a kernel without compiled tiles (linear,
    polynomial, Matérn-5/2); None: every kernel with compiled tiles (:data:`FUSED_KERNELS`). At
    once after the first call. A local Dask worker calls it at its start
    (:func:`pipeline.cluster.prestart.dask_setup`); a fit, through :func:`fit_tails`."""
    names = [name for name in (FUSED_KERNELS if kernels is None else kernels)
             if name in FUSED_KERNELS]
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
    :data:`WARM_UP_ROWS` rows (a kernel whose tile is exp of a product,
    :attr:`KernelSpec.exp_of_product`). A kernel without compiled tiles takes neither."""
    spec = KERNELS.get(kernel)
    return spec is not None and spec.exp_of_product and rows is not None \
        and rows < WARM_UP_ROWS


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
class Gradient:
    """What the marginal likelihood's gradient (eq. 64, :mod:`algorithms.marginal_likelihood`)
    needs of a stationary kernel k(r), r = ‖s − s'‖ on inputs s = x/ℓ at unit length scale.
    ``slope(S1, S2, variance)`` returns (K, G) between two such input sets, with
    ∂K/∂log ℓ_j = G∘D_j, D_j = (s_j − s'_j)²: since ∂r/∂log ℓ_j = −D_j/r, G = −k'(r)/r (the
    variance's derivative is K itself). ``slope_is_kernel``: G = K (the RBF), so the dense
    gradient takes K from the kernel's own tiles and P = M∘K by the compiled pass."""

    slope: Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, np.ndarray]]
    slope_is_kernel: bool = False


@dataclass(frozen=True)
class Peer:
    """How both peer libraries write a stationary kernel (the translations of
    :mod:`algorithms.peers`): ``sklearn(kernels, ℓ, bounds)`` builds scikit-learn's base kernel
    from :mod:`sklearn.gaussian_process.kernels`, ``gpytorch(kernels, dims)`` GPyTorch's from
    :mod:`gpytorch.kernels` (``dims``: ``ard_num_dims``, None if isotropic); the modules are
    passed in, imported by a peer's fit only. Both libraries divide the inputs by a length scale
    ℓ = ``factor`` × our length (:attr:`KernelSpec.to_length`, or an ARD ℓ_j); the signal
    variance is their ``ConstantKernel`` / ``ScaleKernel``, added by :mod:`algorithms.peers`."""

    factor: float
    sklearn: Callable[[Any, Any, tuple[float, float]], Any]
    gpytorch: Callable[[Any, int | None], Any]


def _same(value: float) -> float:
    """A scale parameter that is the length ℓ itself (ω, μ)."""
    return value


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: every part of it the code reads, declared together (module docstring).

    ``function(A, B, out=, variance=, **shape)`` writes variance·k into ``out`` (rows and
    columns in the forms ``rows`` and ``cols`` make) and returns whether every value is finite
    (checked in the same pass where it can); ``diag(A, **shape)`` is k(a, a) at unit variance.
    ``torch_tile(A, B, **shape)`` is k at unit variance on torch tensors of the same forms
    (torch imported inside it, never here). ``gradient`` and ``peer`` are required, None
    stating that the kernel has none (:func:`gradient_of`, :func:`peer_of` then raise the
    one-line error)."""

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
    # variance·exp(rows·cols) (the RBF): K·V takes exp of the tile's GEMM and scales the sums;
    # a small fit takes numpy's exp in its tiles (:func:`takes_numpy_exp`)
    exp_of_product: bool = False
    # its tiles are compiled loops (:mod:`algorithms._fused_exp`): :func:`warm_up` loads them
    compiled: bool = False
    # the isotropic scale parameter as a length ℓ, and back (the RBF's width is 2ℓ²)
    to_length: Callable[[float], float] = _same
    from_length: Callable[[float], float] = _same
    torch_tile: Callable[..., Any] = field(kw_only=True)
    gradient: Gradient | None = field(kw_only=True)
    peer: Peer | None = field(kw_only=True)

    @property
    def shape_params(self) -> tuple[str, ...]:
        """The parameters of the function itself (not ``variance`` and ``lengthscales``)."""
        return tuple(k for k in self.params if k not in ("variance", "lengthscales"))


# -- the RBF: exp(−‖x−x'‖²/width), width = 2ℓ² ------------------------------------------------

def rbf_torch(A: Any, B: Any, width: float) -> Any:
    """exp((2abᵀ − ‖a‖² − ‖b‖²)/width) on torch: one GEMM of the augmented rows and columns
    (:func:`~algorithms.kernel_tiles.rbf_rows`, :func:`~algorithms.kernel_tiles.rbf_cols`)."""
    T = A @ B
    T.exp_()  # in place: one n_a × n_b matrix at the peak, not two
    return T


def rbf_slope(S1: np.ndarray, S2: np.ndarray, variance: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """(K, G) of the RBF v·exp(−r²/2): G = −k'(r)/r = K."""
    R2 = S1 @ (-2.0 * S2.T)
    R2 += np.einsum("ij,ij->i", S1, S1)[:, None]
    R2 += np.einsum("ij,ij->i", S2, S2)[None, :]
    np.maximum(R2, 0.0, out=R2)
    K = np.exp(-0.5 * R2)
    K *= variance
    return K, K


def _rbf_sklearn(kernels: Any, length: Any, bounds: tuple[float, float]) -> Any:
    return kernels.RBF(length, length_scale_bounds=bounds)


def _rbf_gpytorch(kernels: Any, dims: int | None) -> Any:
    return kernels.RBFKernel(ard_num_dims=dims)


def _width_to_length(width: float) -> float:
    return math.sqrt(width / 2.0)


def _length_to_width(ell: float) -> float:
    return 2.0 * ell * ell


# -- the distance kernels: Laplacian (Matérn-1/2), Matérn-3/2, Matérn-5/2 of h = r/scale ------

def _torch_distances(A: Any, B: Any) -> Any:
    """‖a − b‖ between torch rows A and B (n_b × d) from direct differences (``torch.cdist``
    without its GEMM form: exact near zero, as the numpy tiles)."""
    import torch

    return torch.cdist(A, B, compute_mode="donot_use_mm_for_euclid_dist")


def _distances(S1: np.ndarray, S2: np.ndarray) -> np.ndarray:
    from scipy.spatial.distance import cdist  # here: scipy.spatial is ~0.08 s of import

    return cdist(S1, S2)


def _matern_peer(nu: float, factor: float) -> Peer:
    """The libraries' Matérn of smoothness ``nu``, ℓ = ``factor`` × ours."""
    return Peer(factor,
                lambda kernels, length, bounds: kernels.Matern(
                    length, length_scale_bounds=bounds, nu=nu),
                lambda kernels, dims: kernels.MaternKernel(nu=nu, ard_num_dims=dims))


def laplacian_torch(A: Any, B: Any, omega: float) -> Any:
    """exp(−‖a−b‖/ω) on torch (columns B by dimension, d × m)."""
    import torch

    h = _torch_distances(A, B.T.contiguous())
    h /= omega
    return torch.exp(-h)


def laplacian_slope(S1: np.ndarray, S2: np.ndarray, variance: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(K, G) of the Laplacian v·e^{−r}: G = −k'(r)/r = K/r (0 at r = 0)."""
    R = _distances(S1, S2)
    E = np.exp(-R)
    E *= variance
    with np.errstate(divide="ignore", invalid="ignore"):
        return E, np.where(R > 0, E / np.where(R > 0, R, 1.0), 0.0)


def matern32_torch(A: Any, B: Any, mu: float) -> Any:
    """(1 + h)e^{−h}, h = ‖a−b‖/μ, on torch (columns B by dimension, d × m)."""
    import torch

    h = _torch_distances(A, B.T.contiguous())
    h /= mu
    return (1.0 + h) * torch.exp(-h)


def matern32_slope(S1: np.ndarray, S2: np.ndarray, variance: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(K, G) of the Matérn-3/2 v(1 + r)e^{−r}: k'(r) = −v r e^{−r}, so G = v e^{−r}."""
    R = _distances(S1, S2)
    E = np.exp(-R)
    E *= variance
    return (1.0 + R) * E, E


def matern52_tile(A: np.ndarray, B: np.ndarray, mu: float, out: np.ndarray,
                  variance: float) -> bool:
    """variance·(1 + h + h²/3)e^{−h}, h = ‖a−b‖/μ (Rasmussen & Williams eq. 4.17 with
    ℓ = √5·μ), from scipy's cdist (direct differences: exact near zero) and numpy, the
    polynomial in Horner form 1 + h(1 + h/3); whether every value is finite (an infinite
    distance gives inf·0: not finite, as the Matérn-3/2's tile)."""
    h = _distances(A, B)
    h /= mu
    E = np.exp(-h)
    np.divide(h, 3.0, out=out)
    out += 1.0
    out *= h
    out += 1.0
    out *= E
    if variance != 1.0:
        out *= variance
    return bool(np.isfinite(out).all())


def matern52_torch(A: Any, B: Any, mu: float) -> Any:
    """:func:`matern52_tile` on torch, operation for operation (rows B, n_b × d)."""
    import torch

    h = _torch_distances(A, B)
    h /= mu
    T = h / 3.0
    T += 1.0
    T *= h
    T += 1.0
    T *= torch.exp(-h)
    return T


def matern52_slope(S1: np.ndarray, S2: np.ndarray, variance: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(K, G) of the Matérn-5/2 v(1 + r + r²/3)e^{−r}: k'(r) = −v r(1 + r)e^{−r}/3, so
    G = v(1 + r)e^{−r}/3. In place: R, e^{−r}, K and G alive at once (two arrays beside the
    dense gradient's own, as the Matérn-3/2; :data:`algorithms.hyper.DENSE_ARRAYS`)."""
    R = _distances(S1, S2)
    E = np.exp(-R)
    E *= variance
    G = R + 1.0
    G *= E
    G /= 3.0
    K = R / 3.0
    K += 1.0
    K *= R
    K += 1.0
    K *= E
    return K, G


# -- the dot-product kernels ----------------------------------------------------------------

def linear_torch(A: Any, B: Any) -> Any:
    """⟨a, b⟩ on torch (rows B)."""
    return A @ B.T


def polynomial_torch(A: Any, B: Any, c: float, degree: int) -> Any:
    """(⟨a, b⟩ + c)^degree on torch, an integer power (rows B)."""
    return (A @ B.T + c) ** int(degree)


def _scale(default: float, doc: str) -> Option:
    return _positive(default, doc, none_ok=True)


KERNELS: dict[str, KernelSpec] = {spec.name: spec for spec in (
    KernelSpec("rbf", rbf_tile, unit_diag,
               {"width": _scale(10.0, "2ω² in exp(−‖x−x'‖²/(2ω²))"),
                "variance": VARIANCE, "lengthscales": _lengthscales("rbf")},
               True, ("width", 2.0), rbf_rows, rbf_cols, exp_of_product=True, compiled=True,
               to_length=_width_to_length, from_length=_length_to_width,
               torch_tile=rbf_torch, gradient=Gradient(rbf_slope, slope_is_kernel=True),
               peer=Peer(1.0, _rbf_sklearn, _rbf_gpytorch)),
    KernelSpec("laplacian", laplacian_tile, unit_diag,
               {"omega": _scale(1.0, "ω in exp(−‖x−x'‖/ω)"),
                "variance": VARIANCE, "lengthscales": _lengthscales("laplacian")},
               True, ("omega", 1.0), cols=columns_by_dimension, compiled=True,
               torch_tile=laplacian_torch, gradient=Gradient(laplacian_slope),
               peer=_matern_peer(0.5, 1.0)),
    KernelSpec("matern32", matern32_tile, unit_diag,
               {"mu": _scale(1.0, "μ in (1+h)e^{−h}, h = ‖x−x'‖/μ"),
                "variance": VARIANCE, "lengthscales": _lengthscales("matern32")},
               True, ("mu", 1.0), cols=columns_by_dimension, compiled=True,
               torch_tile=matern32_torch, gradient=Gradient(matern32_slope),
               peer=_matern_peer(1.5, math.sqrt(3.0))),  # (1+h)e^{−h}: ℓ = √3·μ
    KernelSpec("matern52", matern52_tile, unit_diag,
               {"mu": _scale(1.0, "μ in (1+h+h²/3)e^{−h}, h = ‖x−x'‖/μ (ℓ = √5·μ)"),
                "variance": VARIANCE, "lengthscales": _lengthscales("matern52")},
               True, ("mu", 1.0),
               torch_tile=matern52_torch, gradient=Gradient(matern52_slope),
               peer=_matern_peer(2.5, math.sqrt(5.0))),  # (1+h+h²/3)e^{−h}: ℓ = √5·μ
    KernelSpec("linear", linear_tile, linear_diag, {"variance": VARIANCE}, False,
               torch_tile=linear_torch, gradient=None,  # no length scale to learn
               peer=None),  # not translated to the peers (algorithms.peers)
    KernelSpec("polynomial", polynomial_tile, polynomial_diag,
               {"c": Option(1.0, "float", "offset c in (⟨x,x'⟩ + c)^degree"),
                "degree": Option(2, "int", "the power, a positive integer", lo=1),
                "variance": VARIANCE}, False,
               torch_tile=polynomial_torch, gradient=None,  # no length scale to learn
               peer=None),  # not translated to the peers (algorithms.peers)
)}

FUSED_KERNELS = tuple(name for name, spec in KERNELS.items() if spec.compiled)
LEARNABLE = tuple(name for name, spec in KERNELS.items() if spec.gradient is not None)
TRANSLATABLE = tuple(name for name, spec in KERNELS.items() if spec.peer is not None)


def gradient_of(name: str) -> Gradient:
    """The length-scale gradient of kernel ``name``'s row; a one-line InputError for a kernel
    without one (hyper=ml cannot learn it)."""
    gradient = KERNELS[name].gradient
    if gradient is None:
        raise InputError(f"hyper=ml learns the kernels {', '.join(LEARNABLE)}; kernel "
                         f"'{name}' has no length-scale gradient here: pass "
                         f"kernel={LEARNABLE[0]} (or {', '.join(LEARNABLE[1:])}), or "
                         "hyper=fixed")
    return gradient


def peer_of(name: str, owner: str) -> Peer:
    """The peer libraries' form of kernel ``name``; a one-line InputError naming ``owner`` for a
    kernel the row gives none."""
    peer = KERNELS[name].peer
    if peer is None:
        raise InputError(f"{owner} supports kernels {', '.join(TRANSLATABLE)}, not kernel "
                         f"'{name}' (no translation to the peer library); pass e.g. "
                         f"kernel={TRANSLATABLE[0]}")
    return peer


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
