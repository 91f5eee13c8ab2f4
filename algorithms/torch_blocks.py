"""Kernel blocks on a PyTorch device (:class:`TorchKernelBlocks`): the provider of
:class:`~algorithms.contract.KernelBlocks` whose training inputs, kernel columns, pivoted
Cholesky factor and held kernel matrix live on the device (a GPU, or ``torch:cpu``), so that
what dominates the exact GP, PCG, the Nyström method, incomplete Cholesky and SGMA runs there,
while the algorithms keep their numpy code: every method returns numpy arrays of the sizes
the numpy provider (:class:`~algorithms.kernel_blocks.ArrayKernelBlocks`) returns, only small
ones (a block the caller asked for, n × b products, p × m projections) cross to the host.

The exact GP factors K + diag(noise) on the device (:meth:`TorchKernelBlocks.factor`): the
matrix is filled there in blocks of rows and factored by ``torch.linalg.cholesky_ex``; a
matrix above the device's free memory is refused in one line before it is made (PCG is the
way to the same posterior: :data:`algorithms.exact.TOO_LARGE`).

Used only by a fit whose ``device`` is a torch device (:mod:`algorithms.device`): importing
this module does not import torch (the registry imports it to list the algorithms, on an
install without torch too); torch is imported at the first use of a block.
"""

from __future__ import annotations

import numpy as np

from algorithms.contract import KernelBlocks
from algorithms.device import LazyTorch, TorchKernel, device_memory
from algorithms.errors import InputError, TooLarge
from algorithms.factor_columns import DEGENERATE_RTOL
from algorithms.kernels import Kernel

# kernel values computed at once on the device: a block of rows of K (CG's products, the
# projections, the exact GP's fill) is about this many bytes
DEVICE_BLOCK_BYTES = 2**27
# what the exact GP's matrix that does not fit the device is pointed to
TOO_LARGE_INSTEAD = "pass algorithm=cg (the same posterior by PCG, matrix-free) or device=cpu"

# torch, imported at its first use (algorithms.device.LazyTorch): the registry imports this
# module on the default install, where torch is not installed, to list the algorithms
torch = LazyTorch(globals())


class TorchKernelBlocks(KernelBlocks):
    """Kernel blocks over training inputs ``X`` (an (n, d) array, or anything np.asarray
    takes) on ``device`` in ``dtype`` (float64 unless float32 is asked for): the torch back end
    of :class:`~algorithms.contract.KernelBlocks`. The algorithms that run on it declare
    ``device_blocks`` (:class:`~algorithms.contract.AlgorithmSpec`): their fits reach the data
    through the protocol alone, so what dominates them runs here (the exact GP's fill and
    factor, PCG's products and preconditioner, the pivoted Cholesky of the Nyström method and
    incomplete Cholesky, SGMA's projections), and GPyTorch's peers train on its device."""

    # The n × n matrices of a fit (the exact GP's factor, a held K) live on the device and
    # are checked against its free memory where they are made (:meth:`factor`, :meth:`hold`),
    # not against this machine's (algorithms.evaluation.check_size).
    memory_on_device = True

    def __init__(self, X, kernel: Kernel, device, dtype=None) -> None:
        if dtype is None:
            dtype = torch.float64
        if len(X.shape) != 2:
            raise InputError(f"X has shape {tuple(X.shape)}; it must be (n, d)")
        self._source = X
        self._X: np.ndarray | None = None
        self.kernel = kernel
        self.device, self.dtype = device, dtype
        self.torch_kernel = TorchKernel(kernel, device, dtype)
        self.n, self.d = (int(s) for s in X.shape)
        self._rows = self._cols = None
        self._hold = False
        self._K = None
        self.hold_dropped = False  # whether the K asked for by hold() did not fit after all
        if device.type == "cuda":  # an earlier fit's cached segments, given back: this fit's
            torch.cuda.empty_cache()  # small tensors would split them and pin them in use

    # ------------------------------------------------------------------ inputs, on demand

    @property
    def X(self) -> np.ndarray:
        if self._X is None:
            self._X = np.ascontiguousarray(np.asarray(self._source, dtype=np.float64))
        return self._X

    @property
    def kernel_rows(self):
        """All training rows in the kernel tiles' form, on the device (made once)."""
        if self._rows is None:
            self._rows = self.torch_kernel.rows(self.X)
        return self._rows

    @property
    def kernel_cols(self):
        """All training inputs as a block's columns, on the device (made once)."""
        if self._cols is None:
            self._cols = self.torch_kernel.cols(self.X)
        return self._cols

    def _row_step(self, width: int) -> int:
        """Rows of a block ``width`` wide in about :data:`DEVICE_BLOCK_BYTES` of the dtype."""
        return max(1, DEVICE_BLOCK_BYTES // (self.dtype.itemsize * max(width, 1)))

    def _tensor(self, a):
        """``a`` copied to the device (a store's arrays are read-only: never shared)."""
        return torch.tensor(np.asarray(a, dtype=np.float64), dtype=self.dtype,
                            device=self.device)

    @staticmethod
    def _host(t) -> np.ndarray:
        return t.to(dtype=torch.float64, device="cpu").numpy()

    def _index(self, sel):
        if isinstance(sel, slice):
            return sel
        return torch.as_tensor(np.asarray(sel, dtype=np.int64), device=self.device)

    def _col_select(self, sel):
        tk, B = self.torch_kernel, self.kernel_cols
        if isinstance(sel, slice):
            lo, hi, step = sel.indices(self.n)
            if step == 1:
                return tk.col_block(B, lo, hi)
            sel = np.arange(lo, hi, step)
        return tk.select(B, self._index(sel))

    # ------------------------------------------------------------------ the protocol

    def inputs(self, rows) -> np.ndarray:
        return self.X[rows]

    def block(self, rows, cols) -> np.ndarray:
        """K[rows, cols], computed on the device and returned to the host."""
        A = self.kernel_rows[self._index(rows)]
        return self._host(self.torch_kernel.block(A, self._col_select(cols)))

    def diag(self) -> np.ndarray:
        return self.kernel.diag(self.X)

    def cross(self, X_new: np.ndarray, cols) -> np.ndarray:
        """k(X_new, X[cols]) computed on the device."""
        A = self.torch_kernel.rows(np.asarray(X_new, dtype=np.float64))
        return self._host(self.torch_kernel.block(A, self._col_select(cols)))

    def hold(self, share: float) -> int:
        """Form K on the device at the next product when its bytes are at most ``share`` of
        the device's free memory; the bytes it will hold (0: matrix-free)."""
        need = self.n * self.n * self.dtype.itemsize
        self._hold = need <= share * device_memory(self.device)
        self.hold_dropped = False
        if not self._hold:
            self._K = None
        return need if self._hold else 0

    def release(self) -> None:
        self._hold, self._K = False, None

    @property
    def held_bytes(self) -> int:
        return 0 if self._K is None else self._K.numel() * self._K.element_size()

    def matmul(self, V: np.ndarray, block_bytes: int = 2**25) -> np.ndarray:
        """K·V for V of shape (n,) or (n, b): by the held K after :meth:`hold`, else by row
        blocks of K computed on the device (about :data:`DEVICE_BLOCK_BYTES` each), each
        multiplied into its rows and dropped."""
        W = self._tensor(np.asarray(V).reshape(self.n, -1))
        if self._hold and self._K is None:
            try:
                self._K = self.torch_kernel.block(self.kernel_rows, self.kernel_cols)
            except torch.OutOfMemoryError:  # another allocation took the room: matrix-free
                self._hold, self.hold_dropped = False, True
        if self._hold:
            return self._host(self._K @ W).reshape(np.shape(V))
        out = torch.empty((self.n, W.shape[1]), dtype=self.dtype, device=self.device)
        step = self._row_step(self.n)
        for lo in range(0, self.n, step):
            T = self.torch_kernel.block(self.kernel_rows[lo: lo + step], self.kernel_cols)
            torch.matmul(T, W, out=out[lo: lo + step])
        return self._host(out).reshape(np.shape(V))

    def project(self, cols, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ K[:, cols], the column sums of K[:, cols]²): the training columns selected on
        the device, where they are held."""
        return self._project(self._col_select(cols), W)

    def project_points(self, X_cols: np.ndarray, W) -> tuple[np.ndarray, np.ndarray]:
        """(Wᵀ k(X, X_cols), the column sums of k(X, X_cols)²) for W of shape (n, p) (an array
        or :class:`TorchKernelColumns`), by row blocks of k(X, X_cols) on the device."""
        return self._project(self.torch_kernel.cols(np.asarray(X_cols, dtype=np.float64)), W)

    def _project(self, B, W) -> tuple[np.ndarray, np.ndarray]:
        Wt = W.tensor if isinstance(W, TorchKernelColumns) else self._tensor(W)
        m = self.torch_kernel.n_cols(B)
        P = torch.zeros((Wt.shape[1], m), dtype=self.dtype, device=self.device)
        sq = torch.zeros(m, dtype=self.dtype, device=self.device)
        step = self._row_step(m)
        for lo in range(0, self.n, step):
            T = self.torch_kernel.block(self.kernel_rows[lo: lo + step], B)
            P += Wt[lo: lo + step].T @ T
            sq += (T * T).sum(dim=0)
        return self._host(P), self._host(sq)

    def residual_norms(self, cols, W, B: np.ndarray) -> np.ndarray:
        """The column sums of (K[:, cols] − W[:, 1:]·B)² on the device (:meth:`algorithms.
        kernel_blocks.ArrayKernelBlocks.residual_norms`)."""
        return self._residual_norms(self._col_select(cols), W, B)

    def residual_norms_points(self, X_cols: np.ndarray, W, B: np.ndarray) -> np.ndarray:
        return self._residual_norms(
            self.torch_kernel.cols(np.asarray(X_cols, dtype=np.float64)), W, B)

    def _residual_norms(self, Bx, W, B) -> np.ndarray:
        Wt = (W.tensor if isinstance(W, TorchKernelColumns) else self._tensor(W))[:, 1:]
        Bt = self._tensor(np.asarray(B, dtype=np.float64).reshape(Wt.shape[1], -1))
        m = self.torch_kernel.n_cols(Bx)
        sq = torch.zeros(m, dtype=self.dtype, device=self.device)
        step = self._row_step(m)
        for lo in range(0, self.n, step):
            T = self.torch_kernel.block(self.kernel_rows[lo: lo + step], Bx)
            T -= Wt[lo: lo + step] @ Bt
            sq += (T * T).sum(dim=0)
        return self._host(sq)

    def columns(self, first: np.ndarray, capacity: int) -> TorchKernelColumns:
        return TorchKernelColumns(self, first, capacity)

    def cholesky_columns(self, capacity: int, targets: np.ndarray | None = None
                         ) -> TorchCholeskyColumns:
        return TorchCholeskyColumns(self, targets, capacity)

    # ------------------------------------------------------------------ the exact GP

    def factor_bytes(self, m: int) -> int:
        """Device bytes of :meth:`factor` on m inputs: the m × m matrix and one block."""
        return m * m * self.dtype.itemsize + DEVICE_BLOCK_BYTES

    def factor(self, index: np.ndarray | None, noise: np.ndarray) -> DeviceCholesky:
        """L with K_d + diag(noise) = LLᵀ on the device, for the inputs ``index`` (None: every
        row), filled in blocks of rows and factored in place (``torch.linalg.cholesky_ex``);
        a matrix larger than the device's free memory is refused in one line."""
        m = len(noise)
        need, free = self.factor_bytes(m), device_memory(self.device)
        if need > free:
            raise TooLarge(f"the exact GP on {m} distinct inputs needs {need / 2**30:.1f} GiB "
                           f"on {self.device} but {free / 2**30:.1f} GiB is free there; "
                           f"{TOO_LARGE_INSTEAD}")
        rows = self.kernel_rows if index is None else self.kernel_rows[self._index(index)]
        cols = self.kernel_cols if index is None else self._col_select(index)
        try:
            return DeviceCholesky(self, self._factor_in_place(rows, cols, m, noise), cols)
        except torch.OutOfMemoryError as err:  # the free memory was an estimate
            raise TooLarge(f"the exact GP on {m} distinct inputs ran out of memory on "
                           f"{self.device} ({' '.join(str(err).split())[:160]}); "
                           f"{TOO_LARGE_INSTEAD}") from None

    def _factor_in_place(self, rows, cols, m: int, noise: np.ndarray):
        """K[rows, cols] + diag(noise), filled by row blocks and overwritten by its L."""
        A = torch.empty((m, m), dtype=self.dtype, device=self.device)
        step = self._row_step(m)
        for lo in range(0, m, step):
            A[lo: lo + step] = self.torch_kernel.block(rows[lo: lo + step], cols)
        A.diagonal().add_(self._tensor(noise))
        info = torch.empty((), dtype=torch.int32, device=self.device)
        # In place: LAPACK and cuSOLVER factor a column-major matrix, which A's transpose is;
        # K + σ²I is symmetric, so its upper factor there is L in A (an out= of row-major A
        # itself is factored in a copy: a second m × m matrix, 128 GiB at m = 131 072).
        try:
            torch.linalg.cholesky_ex(A.mT, upper=True, out=(A.mT, info))
        except torch.OutOfMemoryError:
            raise
        except RuntimeError:  # a torch whose out= may not alias the input: a second matrix
            A, info = torch.linalg.cholesky_ex(A)
        if int(info):
            raise np.linalg.LinAlgError(f"K + σ²I is not positive definite in {self.dtype} on "
                                        f"{self.device} (leading minor {int(info)})")
        return A


class DeviceCholesky:
    """The exact GP's factor L (K_d + diag(noise) = LLᵀ) on the device, and what the exact GP
    computes with it (004 §3.4 eqs. 47-48): solves, log det and the predictive variance."""

    def __init__(self, blocks: TorchKernelBlocks, L, basis_cols) -> None:
        self.blocks, self.L, self.basis_cols = blocks, L, basis_cols

    def solve(self, b: np.ndarray) -> np.ndarray:
        """(LLᵀ)⁻¹b, by two triangular solves (``cholesky_solve`` copies L first)."""
        rhs = self.blocks._tensor(b).reshape(len(b), -1)
        z = torch.linalg.solve_triangular(self.L, rhs, upper=False)
        x = torch.linalg.solve_triangular(self.L.mT, z, upper=True)
        return self.blocks._host(x).reshape(np.shape(b))

    def log_diag_sum(self) -> float:
        """Σ log L_ii (half of log det)."""
        return float(torch.log(torch.diagonal(self.L)).sum())

    def variance_bounds(self, kernel: Kernel, lam: float):
        """x ↦ k(x,x) + σ² − ‖L⁻¹k(X_d, x)‖² (eq. 48), by blocks of test rows on the device;
        the exact value twice (lower and upper bound)."""
        blocks = self.blocks
        tk = blocks.torch_kernel

        def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            X_new = np.asarray(X_new, dtype=np.float64)
            var = kernel.diag(X_new) + lam
            step = blocks._row_step(len(self.L))
            for lo in range(0, len(X_new), step):
                Kx = tk.block(tk.rows(X_new[lo: lo + step]), self.basis_cols)  # (b, m)
                V = torch.linalg.solve_triangular(self.L, Kx.T, upper=False)
                var[lo: lo + step] -= blocks._host((V * V).sum(dim=0))
            return var, var

        return variance_bounds


class TorchKernelColumns:
    """An n × p matrix on the device, [first, K[:, i₁], …], to which kernel columns are
    appended by index (SGMA's [y, K_{:S}]); read by :meth:`TorchKernelBlocks.project`."""

    def __init__(self, blocks: TorchKernelBlocks, first: np.ndarray, capacity: int) -> None:
        first = np.asarray(first, dtype=np.float64).reshape(blocks.n, -1)
        p0 = first.shape[1]
        self.blocks, self.width = blocks, p0
        self._buf = torch.empty((blocks.n, p0 + capacity), dtype=blocks.dtype,
                                device=blocks.device)
        self._buf[:, :p0] = blocks._tensor(first)

    @property
    def tensor(self):
        return self._buf[:, : self.width]

    @property
    def array(self) -> np.ndarray:
        return self.blocks._host(self.tensor)

    @property
    def nbytes(self) -> int:
        return self._buf.numel() * self._buf.element_size()

    def append(self, i: int) -> None:
        self.extend([i])

    def extend(self, indices) -> None:
        self.extend_points(self.blocks.X[list(indices)])

    def _room(self, need: int) -> None:
        if need > self._buf.shape[1]:
            grown = torch.empty((self._buf.shape[0], need), dtype=self._buf.dtype,
                                device=self._buf.device)
            grown[:, : self.width] = self.tensor
            self._buf = grown

    def append_residual(self, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, float, float]:
        """As :meth:`algorithms.kernel_blocks.ArrayKernelColumns.append_residual`, on the
        device."""
        blocks, tk = self.blocks, self.blocks.torch_kernel
        k = tk.block(blocks.kernel_rows, tk.cols(np.asarray(x, dtype=np.float64)))[:, 0]
        Q = self.tensor[:, 1:]
        self._w = k - Q @ blocks._tensor(np.asarray(r, dtype=np.float64).reshape(-1))
        return (blocks._host(Q.T @ self._w), float(self._w @ self._w),
                float(self.tensor[:, 0] @ self._w))

    def reorthogonalise(self, s: np.ndarray) -> tuple[float, float]:
        self._w -= self.tensor[:, 1:] @ self.blocks._tensor(np.asarray(s).reshape(-1))
        return float(self._w @ self._w), float(self.tensor[:, 0] @ self._w)

    def commit(self, delta: float) -> None:
        self._room(self.width + 1)
        self._buf[:, self.width] = self._w / delta
        self.width += 1
        self._w = None

    def extend_points(self, X_cols: np.ndarray) -> None:
        need = self.width + len(X_cols)
        self._room(need)
        tk = self.blocks.torch_kernel
        block = tk.block(self.blocks.kernel_rows, tk.cols(np.asarray(X_cols, dtype=np.float64)))
        self._buf[:, self.width: need] = block
        self.width = need


class TorchCholeskyColumns:
    """The rows of a pivoted Cholesky factor F (K ≈ FFᵀ), its residual diagonal and targets,
    on the device: :class:`algorithms.factor_columns.ArrayCholeskyColumns` (the same calls, the
    same arguments and results on the host) for :class:`TorchKernelBlocks`."""

    def __init__(self, blocks: TorchKernelBlocks, targets: np.ndarray | None,
                 capacity: int) -> None:
        self.blocks, self.lo, self.n = blocks, 0, blocks.n
        self.diag = blocks._tensor(blocks.diag())
        self.resid = self.diag.clone()
        self.admissible = torch.ones(self.n, dtype=torch.bool, device=blocks.device)
        self.y = None if targets is None else blocks._tensor(targets)
        self.F = torch.zeros((self.n, max(1, capacity)), dtype=blocks.dtype,
                             device=blocks.device)
        self.t = 0

    def held_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.asarray(rows, dtype=np.int64)
        return np.arange(len(rows)), self.rows(rows)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """F[rows, :t] on the host."""
        idx = self.blocks._index(np.asarray(rows, dtype=np.int64))
        return self.blocks._host(self.F[idx, : self.t])

    def append(self, X_new: np.ndarray, F_new_rows: np.ndarray, L_B: np.ndarray,
               considered: np.ndarray) -> None:
        """As :meth:`algorithms.factor_columns.ArrayCholeskyColumns.append`:
        F_new = (K[:, B] − F F[B]ᵀ) L_B⁻ᵀ on the device, and the residual diagonal."""
        t, b = self.t, len(X_new)
        blocks = self.blocks
        if b:
            if t + b > self.F.shape[1]:
                grown = torch.zeros((self.n, max(2 * self.F.shape[1], t + b)),
                                    dtype=self.F.dtype, device=self.F.device)
                grown[:, :t] = self.F[:, :t]
                self.F = grown
            tk = blocks.torch_kernel
            new = tk.block(blocks.kernel_rows, tk.cols(np.asarray(X_new, dtype=np.float64)))
            if t:
                new -= self.F[:, :t] @ blocks._tensor(F_new_rows).T
            L = blocks._tensor(L_B)
            new = torch.linalg.solve_triangular(L, new.T, upper=False).T  # C L_B⁻ᵀ
            self.F[:, t: t + b] = new
            self.resid -= (new * new).sum(dim=1)
            self.t = t + b
        idx = blocks._index(np.asarray(considered, dtype=np.int64))
        self.resid[idx] = 0.0
        self.admissible[idx] = False

    def residual_trace(self) -> float:
        return float(torch.clamp(self.resid[self.admissible], min=0.0).sum())

    def _eligible(self):
        return self.admissible & (self.resid > DEGENERATE_RTOL * self.diag)

    def best(self) -> tuple[int, float, np.ndarray] | None:
        ok = self._eligible()
        if not bool(ok.any()):
            return None
        scores = torch.where(ok, self.resid, torch.full_like(self.resid, -torch.inf))
        i = int(torch.argmax(scores))  # the first maximum: ties go to the lowest row
        return i, float(self.resid[i]), self.blocks._host(self.F[i, : self.t])

    def top(self, k: int) -> np.ndarray:
        idx = np.flatnonzero(self.blocks._host(self._eligible().to(torch.float64)) > 0)
        resid = self.blocks._host(self.resid)
        return idx[np.lexsort((idx, -resid[idx]))[:k]]

    def gram(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        if self.y is None:
            raise ValueError("these factor columns were made without targets")
        F_new = self.F[:, t0:t1]
        return (self.blocks._host(self.F[:, :t1].T @ F_new),
                self.blocks._host(F_new.T @ self.y))

    def factor(self) -> np.ndarray:
        """F[:, :t] on the host (PCG's preconditioner applies it there: O(n·t) a product)."""
        return self.blocks._host(self.F[:, : self.t])

    @property
    def nbytes(self) -> int:
        return (self.F.numel() + 2 * self.n) * self.F.element_size()
