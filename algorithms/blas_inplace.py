"""BLAS-3 and LAPACK calls that work in place on strided views, through scipy's ``cython_blas``
and ``cython_lapack`` function pointers.

Why not ``scipy.linalg.blas``/``lapack``: their f2py wrappers copy any operand that is not a
contiguous Fortran array, and a block of a larger matrix (``A[k1:, k0:k1]``) never is, so a
blocked factorisation through them pays a copy of each block in and out (a memory pass per
call, at n = 2000 about as long as the block's arithmetic). The functions here hand the view's
first address and leading dimension to the same OpenBLAS that ``scipy.linalg`` uses (so a
thread limit set with ``threadpoolctl`` applies) and write the result where the view is.

Every array argument must be a float64 column-major view: unit stride down a column
(``strides[0] == 8``) and the leading dimension ``strides[1] / 8`` (any view of a Fortran-ordered
array, or the transpose of a view of a C-ordered one). Shapes are checked (a wrong one would
make BLAS read or write outside the array); the BLAS argument letters are as in the reference
BLAS (side "L"/"R", uplo "L"/"U", trans "N"/"T", diag "N"/"U"). LAPACK's ``info`` is returned.
"""

from __future__ import annotations

import ctypes

import numpy as np
import scipy.linalg.cython_blas as _cython_blas
import scipy.linalg.cython_lapack as _cython_lapack

_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_pointer.restype = ctypes.c_void_p
_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def _function(module, name: str, n_args: int):
    """The C function ``name`` of scipy's ``cython_blas``/``cython_lapack``: every argument a
    pointer (Fortran's by-reference convention), no return value; ctypes releases the GIL."""
    capsule = module.__pyx_capi__[name]
    address = _pointer(capsule, _capsule_name(capsule))
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * n_args)(address)


_DGEMM = _function(_cython_blas, "dgemm", 13)
_DSYRK = _function(_cython_blas, "dsyrk", 10)
_DTRMM = _function(_cython_blas, "dtrmm", 11)
_DSYMM = _function(_cython_blas, "dsymm", 12)
_DPOTRF = _function(_cython_lapack, "dpotrf", 5)
_DTRTRI = _function(_cython_lapack, "dtrtri", 6)
_DLAUUM = _function(_cython_lapack, "dlauum", 5)


def _char(letter: str):
    return ctypes.byref(ctypes.c_char(letter.encode()))


def _int(value: int):
    return ctypes.byref(ctypes.c_int(value))


def _double(value: float):
    return ctypes.byref(ctypes.c_double(value))


def _matrix(a: np.ndarray) -> tuple[ctypes.c_void_p, object]:
    """(address, leading dimension) of a float64 column-major view (module docstring)."""
    if a.dtype != np.float64 or a.ndim != 2 or (a.shape[0] > 1 and a.strides[0] != 8) \
            or (a.shape[1] > 1 and a.strides[1] < 8 * a.shape[0]):
        raise ValueError(f"not a float64 column-major view: shape {a.shape}, dtype {a.dtype}, "
                         f"strides {a.strides}")
    if not a.flags.writeable:
        raise ValueError("the array is read-only")
    lead = a.strides[1] // 8 if a.shape[1] > 1 else a.shape[0]
    return ctypes.c_void_p(a.ctypes.data), _int(max(1, lead))


def _rows(a: np.ndarray, trans: str) -> tuple[int, int]:
    return a.shape if trans == "N" else a.shape[::-1]


def gemm(alpha: float, a: np.ndarray, b: np.ndarray, beta: float, c: np.ndarray,
         trans_a: str = "N", trans_b: str = "N") -> None:
    """c ← alpha·op(a)·op(b) + beta·c."""
    (m, k), (k2, n) = _rows(a, trans_a), _rows(b, trans_b)
    if c.shape != (m, n) or k2 != k:
        raise ValueError(f"gemm shapes: op(a) {m}×{k}, op(b) {k2}×{n}, c {c.shape}")
    if m and n:
        _DGEMM(_char(trans_a), _char(trans_b), _int(m), _int(n), _int(k), _double(alpha),
               *_matrix(a), *_matrix(b), _double(beta), *_matrix(c))


def syrk(alpha: float, a: np.ndarray, beta: float, c: np.ndarray, uplo: str = "L",
         trans: str = "N") -> None:
    """The ``uplo`` triangle of c ← alpha·op(a)·op(a)ᵀ + beta·c (op(a) = a or aᵀ)."""
    n, k = _rows(a, trans)
    if c.shape != (n, n):
        raise ValueError(f"syrk shapes: op(a) {n}×{k}, c {c.shape}")
    if n:
        _DSYRK(_char(uplo), _char(trans), _int(n), _int(k), _double(alpha), *_matrix(a),
               _double(beta), *_matrix(c))


def trmm(alpha: float, a: np.ndarray, b: np.ndarray, side: str = "L", uplo: str = "L",
         trans: str = "N", diag: str = "N") -> None:
    """b ← alpha·op(a)·b (side "L") or alpha·b·op(a) (side "R"), a triangular (its ``uplo``
    triangle read)."""
    m, n = b.shape
    if a.shape != ((m, m) if side == "L" else (n, n)):
        raise ValueError(f"trmm shapes: a {a.shape}, b {b.shape}, side {side}")
    if m and n:
        _DTRMM(_char(side), _char(uplo), _char(trans), _char(diag), _int(m), _int(n),
               _double(alpha), *_matrix(a), *_matrix(b))


def symm(alpha: float, a: np.ndarray, b: np.ndarray, beta: float, c: np.ndarray,
         side: str = "L", uplo: str = "L") -> None:
    """c ← alpha·a·b + beta·c (side "L"), a symmetric, only its ``uplo`` triangle read."""
    m, n = c.shape
    if b.shape != (m, n) or a.shape != ((m, m) if side == "L" else (n, n)):
        raise ValueError(f"symm shapes: a {a.shape}, b {b.shape}, c {c.shape}")
    if m and n:
        _DSYMM(_char(side), _char(uplo), _int(m), _int(n), _double(alpha), *_matrix(a),
               *_matrix(b), _double(beta), *_matrix(c))


def _square(a: np.ndarray, what: str) -> int:
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{what} needs a square matrix, got shape {a.shape}")
    return a.shape[0]


def potrf(a: np.ndarray, uplo: str = "L") -> int:
    """The Cholesky factor of a's ``uplo`` triangle in place (a = LLᵀ); LAPACK's info (k > 0:
    the leading minor of order k is not positive definite)."""
    n, info = _square(a, "potrf"), ctypes.c_int(0)
    if n:
        _DPOTRF(_char(uplo), _int(n), *_matrix(a), ctypes.byref(info))
    return info.value


def trtri(a: np.ndarray, uplo: str = "L", diag: str = "N") -> int:
    """The inverse of the triangular a in place; LAPACK's info (k > 0: a_kk is zero)."""
    n, info = _square(a, "trtri"), ctypes.c_int(0)
    if n:
        _DTRTRI(_char(uplo), _char(diag), _int(n), *_matrix(a), ctypes.byref(info))
    return info.value


def lauum(a: np.ndarray, uplo: str = "L") -> int:
    """LᵀL (uplo "L", L the lower triangle of a) or UUᵀ (uplo "U") into that triangle."""
    n, info = _square(a, "lauum"), ctypes.c_int(0)
    if n:
        _DLAUUM(_char(uplo), _int(n), *_matrix(a), ctypes.byref(info))
    return info.value
