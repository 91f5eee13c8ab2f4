"""The elementwise tails of the stationary kernels' tiles, compiled with numba: one pass over a
tile in cache that applies exp (with the Laplacian's and the Matérn-3/2's maps around it), the
signal variance, and checks that every value is finite.

Why not numpy's ``np.exp``: numpy's float64 exp is vectorised only on CPUs with AVX-512; on
AVX2 machines (this project's 2-core AMD EPYC hosts among them) it is scalar libm code,
measured at 5.2 ns a value against 0.3 for a GEMM-fed copy — the whole cost of a kernel block.
The exp here is branch-free, so the compiler vectorises it for the host's vector unit (1.7 ns
a value on one core here, 3× numpy's):

    k = round(x·log₂e),  r = x − k·ln2 (ln2 in two parts, Cody–Waite: r exact to ~1 ulp),
    eʳ = Σ_{i ≤ 13} rⁱ/i! (|r| ≤ ln2/2: truncation < 2·10⁻¹⁷ relative), eˣ = eʳ·2ᵏ,

with 2ᵏ added into the exponent bits of eʳ (k is read from the low bits of x·log₂e + 1.5·2⁵²).
Measured error against ``np.exp``: ≤ 2.3·10⁻¹⁶ relative over [−708, 0]. Below x = −708 the
value is 0 (eˣ < 3.4·10⁻³⁰⁸: the exponent field would underflow); an argument above 709 or NaN
(an input that overflowed) makes the tile not finite, reported as an overflow by the caller.

:func:`rbf_tail` works in place on a C-contiguous 1-D view of a tile the GEMM wrote;
:func:`laplacian_block` and :func:`matern32_block` compute a tile row by row from direct
differences (the distance, its map and the check in one pass over a row in L1). Each releases
the GIL (the tiles run on several threads) and returns whether every value written is finite.
Compiled when first imported and cached (numba's ``cache=True``) in the user's cache directory,
never in the source tree: ``NUMBA_CACHE_DIR`` when set, else
``$XDG_CACHE_HOME/sparse-gp-bench/numba`` (``~/.cache/sparse-gp-bench/numba``); a cache
directory that cannot be written turns the cache off (each process compiles, ~1 s).
"""

from __future__ import annotations

import math
import os
import tempfile

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 = _LN2_HI + _LN2_LO; _LN2_HI·k exact for |k| < 2¹¹
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0  # 1.5·2⁵²: x + _SHIFTER rounds x to an integer in the low bits
_LOW, _HIGH = -708.0, 709.0
_C = tuple(1.0 / math.factorial(i) for i in range(14))


def _cache_dir() -> str | None:
    """Where the compiled functions are cached: ``NUMBA_CACHE_DIR`` if the user set it, else
    ``sparse-gp-bench/numba`` in the user's cache directory (XDG); None (no cache) when that
    directory cannot be made or written."""
    path = os.environ.get("NUMBA_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):  # unset, or relative (which XDG says to ignore)
            base = os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "sparse-gp-bench", "numba")
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return None
    return os.path.abspath(path)


_CACHE_DIR = _cache_dir()
_JIT = {"nogil": True, "cache": _CACHE_DIR is not None, "boundscheck": False,
        "fastmath": {"contract"}}


def cached_njit(**options):
    """``numba.njit`` with :data:`_JIT`, cached in :data:`_CACHE_DIR`. numba picks a function's
    cache directory when it is decorated (its first locator, ``config.CACHE_DIR``), so the
    setting is made for the decoration only: other numba code in the process keeps numba's own
    (the source tree's ``__pycache__`` unless the user set ``NUMBA_CACHE_DIR``)."""
    def decorate(function):
        saved = numba.config.CACHE_DIR
        numba.config.CACHE_DIR = _CACHE_DIR or ""
        try:
            return numba.njit(**_JIT, **options)(function)
        finally:
            numba.config.CACHE_DIR = saved
    return decorate


@intrinsic
def _bits(typingctx, x):
    """The IEEE-754 bits of a float64, as an int64."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, x):
    """The float64 whose bits are the int64 ``x``."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@cached_njit(inline="always")
def _exp(x: float) -> float:
    """eˣ for −708 ≤ x ≤ 709; 0 below (and for NaN: the callers flag x > 709 and NaN by
    :func:`_in_range`, so a value that is not eˣ never leaves unflagged)."""
    w = x if x > _LOW else _LOW
    w = w if w < _HIGH else _HIGH
    t = w * _LOG2E + _SHIFTER
    k = t - _SHIFTER
    r = (w - k * _LN2_HI) - k * _LN2_LO
    c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = _C[2:]
    p = c13
    p = p * r + c12
    p = p * r + c11
    p = p * r + c10
    p = p * r + c9
    p = p * r + c8
    p = p * r + c7
    p = p * r + c6
    p = p * r + c5
    p = p * r + c4
    p = p * r + c3
    p = p * r + c2
    p = p * r + 1.0
    p = p * r + 1.0
    e = _float(_bits(p) + (_bits(t) << 52))  # ·2ᵏ: k sits in t's low bits
    return e if x > _LOW else 0.0


@cached_njit(inline="always")
def _in_range(x: float) -> bool:
    return x <= _HIGH  # False for NaN too


@cached_njit(inline="always")
def _finite(v: float) -> bool:
    return abs(v) < np.inf  # False for NaN too


@cached_njit()
def rbf_tail(x: np.ndarray, variance: float) -> bool:
    """x ← variance·exp(x) (x the RBF's D = −‖a − b‖²/width); whether all are finite."""
    ok = True
    for i in range(x.size):
        d = x[i]
        v = variance * _exp(d)
        x[i] = v
        ok &= _in_range(d) & _finite(v)
    return ok


@cached_njit(inline="always")
def _distances(A: np.ndarray, Bt: np.ndarray, i: int, row: np.ndarray) -> None:
    """row ← ‖A[i] − b_j‖ for the columns b_j of Bt (d × m): direct differences, summed over
    the dimensions in order, as scipy's cdist does (exact near zero, unlike the GEMM form)."""
    m = Bt.shape[1]
    for j in range(m):
        row[j] = 0.0
    for k in range(A.shape[1]):
        a = A[i, k]
        for j in range(m):
            diff = a - Bt[k, j]
            row[j] += diff * diff
    for j in range(m):
        row[j] = np.sqrt(row[j])


@cached_njit()
def laplacian_block(A: np.ndarray, Bt: np.ndarray, inv_omega: float, variance: float,
                    out: np.ndarray) -> bool:
    """out ← variance·exp(−‖a − b‖/ω) for the rows a of A and the columns b of Bt (d × m),
    row by row in one pass; whether all are finite."""
    ok = True
    for i in range(A.shape[0]):
        row = out[i]
        _distances(A, Bt, i, row)
        for j in range(row.size):
            h = row[j] * inv_omega
            v = variance * _exp(-h)
            row[j] = v
            ok &= (h == h) & _finite(v)  # an infinite distance has the kernel value 0
    return ok


@cached_njit()
def matern32_block(A: np.ndarray, Bt: np.ndarray, inv_mu: float, variance: float,
                   out: np.ndarray) -> bool:
    """out ← variance·(1 + h)·exp(−h), h = ‖a − b‖/μ, for the rows a of A and the columns b
    of Bt (d × m), row by row in one pass; whether all are finite."""
    ok = True
    for i in range(A.shape[0]):
        row = out[i]
        _distances(A, Bt, i, row)
        for j in range(row.size):
            h = row[j] * inv_mu
            v = variance * (1.0 + h) * _exp(-h)
            row[j] = v
            ok &= _finite(h) & _finite(v)
    return ok


def _load() -> None:
    """Load (or compile, the first time) every function here, once per process: at the
    import, which :mod:`algorithms.kernel_tiles` makes at a process's first tile."""
    x, out = np.zeros((1, 1)), np.empty((1, 1))
    rbf_tail(out.reshape(-1), 1.0)
    laplacian_block(x, x, 1.0, 1.0, out)
    matern32_block(x, x, 1.0, 1.0, out)


_load()
