"""The kernels' tiles: the functions that write a tile of each kernel, in the forms its rows
and columns are made in once per block (the RBF's augmented inputs, whose one GEMM gives the
squared distances; the distance kernels' columns by dimension), and the elementwise tails
(exp, variance, finiteness) of :mod:`algorithms._fused_exp` or numpy's exp.

Which exp a tile takes: the compiled tail by default; numpy's exp for a small fit
(:data:`NUMPY_EXP`, set by :func:`algorithms.kernels.fit_tails`: loading numba costs more than
it saves there) and, in K·V's tiles, wherever numpy's float64 exp is vectorised
(:data:`NUMPY_EXP_VECTORISED`). The two agree to 2.3·10⁻¹⁶. The table of kernels that uses
these functions is :data:`algorithms.kernels.KERNELS`.
"""

from __future__ import annotations

import contextvars

import numpy as np


def rbf_rows(A: np.ndarray, width: float) -> np.ndarray:
    """RBF rows [a, 1, ‖a‖²] of the one-GEMM form (:func:`rbf_tile`)."""
    d = A.shape[1]
    Aa = np.empty((len(A), d + 2))
    Aa[:, :d] = A
    Aa[:, d] = 1.0
    np.einsum("ij,ij->i", A, A, out=Aa[:, d + 1])
    return Aa


def rbf_cols(B: np.ndarray, width: float) -> np.ndarray:
    """RBF columns [2b/width, −‖b‖²/width, −1/width]ᵀ of the one-GEMM form (:func:`rbf_tile`),
    as a (d + 2) × m array."""
    d = B.shape[1]
    Ba = np.empty((d + 2, len(B)))
    np.multiply(B.T, 2.0 / width, out=Ba[:d])
    np.einsum("ij,ij->i", B, B, out=Ba[d])
    Ba[d] *= -1.0 / width
    Ba[d + 1] = -1.0 / width
    return Ba


def fused():
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
NUMPY_EXP: contextvars.ContextVar[bool] = contextvars.ContextVar("numpy_exp", default=False)


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


def rbf_tile(Aa: np.ndarray, Ba: np.ndarray, width: float, out: np.ndarray,
         variance: float) -> bool:
    """variance·exp(−‖a−b‖²/width) as exp(D) with D = (2abᵀ − ‖a‖² − ‖b‖²)/width from one GEMM
    of the augmented rows and columns (:func:`rbf_rows`, :func:`rbf_cols`, made once per
    block, not per tile: the norms ride in the product), then one fused pass; whether every
    value is finite."""
    np.matmul(Aa, Ba, out=out)
    # round-off can leave D ≈ +ε(‖a‖² + ‖b‖²)/width where a = b, so a value may exceed 1 by
    # that much; a clamp would cost a pass for no gain in accuracy
    if NUMPY_EXP.get():  # a small fit's tiles (fit_tails)
        return numpy_rbf_tail(out, variance)
    return _tail(fused().rbf_tail, out, variance)


def same_rows(A: np.ndarray, **_: float) -> np.ndarray:
    return A


def same_cols(B: np.ndarray, **_: float) -> np.ndarray:
    return B


def columns_by_dimension(B: np.ndarray, **_: float) -> np.ndarray:
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


def laplacian_tile(A: np.ndarray, Bt: np.ndarray, omega: float, out: np.ndarray,
               variance: float) -> bool:
    """variance·exp(−‖a−b‖/ω) from direct differences (√ of the GEMM form would turn
    round-off 1e-16 into distance 1e-8), in one fused pass; whether every value is finite."""
    return _distance_block(fused().laplacian_block, A, Bt, omega, out, variance)


def matern32_tile(A: np.ndarray, Bt: np.ndarray, mu: float, out: np.ndarray,
              variance: float) -> bool:
    """variance·(1 + h) e^{−h}, h = ‖a−b‖/μ, in one fused pass; whether every value is
    finite."""
    return _distance_block(fused().matern32_block, A, Bt, mu, out, variance)


def _finite_times(out: np.ndarray, variance: float) -> bool:
    if variance != 1.0:
        out *= variance
    return bool(np.isfinite(out).all())


def linear_tile(A: np.ndarray, B: np.ndarray, out: np.ndarray, variance: float) -> bool:
    np.matmul(A, B.T, out=out)
    return _finite_times(out, variance)


def polynomial_tile(A: np.ndarray, B: np.ndarray, c: float, degree: int, out: np.ndarray,
                variance: float) -> bool:
    np.matmul(A, B.T, out=out)
    out += c
    np.power(out, float(degree), out=out)  # an integer power: defined for a negative base too
    return _finite_times(out, variance)


def unit_diag(A: np.ndarray, **_: float) -> np.ndarray:
    return np.ones(A.shape[0])


def linear_diag(A: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", A, A)


def polynomial_diag(A: np.ndarray, c: float, degree: int) -> np.ndarray:
    return (np.einsum("ij,ij->i", A, A) + c) ** float(degree)


# A tile of this many float64 values (512 KiB) and its operands stay in a core's L2 cache (1 MiB
# here), so the elementwise pass after the GEMM runs from cache, not memory.
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
