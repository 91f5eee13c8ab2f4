"""Where a fit's dominant numerics run: the ``device`` of a job, and the kernels on a PyTorch
device.

``device`` is ``cpu`` (numpy, scipy and the compiled tiles of :mod:`algorithms.kernels`: every
fit's default, and the only path that never imports torch) or a PyTorch device:
``torch:cpu`` (the torch back end on the CPU, how it is tested without a GPU), ``cuda`` or
``cuda:N``. On a torch device the kernel blocks (:mod:`algorithms.torch_blocks`) keep the
training inputs, the factor columns and the held kernel matrix on the device; the exact GP
factors its matrix there (:func:`algorithms.torch_blocks.TorchKernelBlocks.factor`). Every
value is float64 unless the job asks for ``float32`` (its accuracy against float64 is
measured by ``experiment=bench_device``).

The kernels here are those of :data:`algorithms.kernels.KERNELS`, each by the torch tile its
row declares (:class:`~algorithms.kernels.KernelSpec`'s ``torch_tile``), in the numpy tile's
arithmetic: the RBF as exp of one GEMM of the augmented rows and columns
(:func:`~algorithms.kernel_tiles.rbf_rows`, :func:`~algorithms.kernel_tiles.rbf_cols`), the
Laplacian and the Matérns from direct differences (``torch.cdist`` without its GEMM form:
exact near zero), the linear and polynomial kernels from one GEMM. On ``torch:cpu`` they equal
the numpy tiles to a few ulp of their arguments (``tests/test_device.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.errors import InputError
from algorithms.kernel_tiles import same_cols
from algorithms.kernels import Kernel

CPU = "cpu"
DEVICE_FORMS = "cpu, torch:cpu, cuda or cuda:N (N the GPU's index)"
DTYPES = ("float64", "float32")
DIST, EXTRA = "sparse-gp-bench", "peers"  # the distribution and the extra that installs torch


def is_torch(device: str) -> bool:
    """Whether ``device`` names a PyTorch device (anything but the numpy path ``cpu``)."""
    return device != CPU


def check_device(device: Any) -> str:
    """``device`` if it has one of the accepted forms (:data:`DEVICE_FORMS`); else the
    one-line error. Whether the device exists is :func:`torch_device`'s business (at the
    fit, on the machine that runs it)."""
    if not isinstance(device, str) or not re.fullmatch(r"cpu|torch:cpu|cuda(:\d+)?", device):
        raise InputError(f"device={device!r} is not a device; pass {DEVICE_FORMS}")
    return device


def torch_device(device: str):
    """The ``torch.device`` that ``device`` names (not ``cpu``: that is the numpy path), or
    one line naming what is missing: torch itself, a CUDA build, a visible GPU."""
    check_device(device)
    if not is_torch(device):
        raise ValueError("device=cpu is the numpy path: no torch device")
    torch = import_torch(f"device={device}")
    if device == "torch:cpu":
        return torch.device("cpu")
    if torch.version.cuda is None or not torch.cuda.is_available():
        build = ("a CPU-only build" if torch.version.cuda is None
                 else f"built for CUDA {torch.version.cuda}")
        raise InputError(f"device={device}: PyTorch {torch.__version__} ({build}) sees no CUDA "
                         "GPU here; pass device=cpu (or device=torch:cpu), or run where a GPU "
                         "and a CUDA build of torch are both present")
    index = int(device.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise InputError(f"device={device}: this machine has {count} CUDA GPU(s), "
                         f"cuda:0 … cuda:{count - 1}; pass one of those")
    return torch.device("cuda", index)


def import_torch(needed_by: str = "a torch device"):
    """The ``torch`` module, imported here, at the first use of a torch device: torch is in
    the optional extra ``peers`` only, so the default install (every numpy path, listing the
    algorithms) must never import it at module level. Missing, it is the one-line
    InputError naming what needed it and the extra that installs it."""
    try:
        import torch
    except ImportError:
        raise InputError(f"{needed_by} needs PyTorch, which is not installed: pip install "
                         f"'{DIST}[{EXTRA}]' (in a checkout: pip install -e '.[{EXTRA}]'), "
                         "or pass device=cpu") from None
    return torch


class LazyTorch:
    """A stand-in for the ``torch`` module in a module's globals, bound as ``torch =
    LazyTorch(globals())``: its first attribute lookup imports torch (:func:`import_torch`)
    and rebinds the module's global ``torch`` to the real module, so the module is importable
    without torch (the registry imports every module of the package) while its code keeps
    writing ``torch.xxx``."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        torch = import_torch()
        self._namespace["torch"] = torch
        return getattr(torch, name)


def torch_dtype(dtype: str):
    """The torch dtype that ``dtype`` (:data:`DTYPES`) names."""
    if dtype not in DTYPES:
        raise InputError(f"dtype={dtype!r} is not a floating type; pass float64 (the default) "
                         "or float32")
    return getattr(import_torch(f"precision={dtype}"), dtype)


NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"  # the loaded kernel module's version line


def nvidia_driver(path: str = NVIDIA_DRIVER_FILE) -> str:
    """The NVIDIA driver's version (``580.159.04``) from its kernel module's version line, or
    ``unknown`` where the file is not there or says none."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "unknown"
    found = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return found.group(1) if found else "unknown"


def describe(device) -> dict[str, str]:
    """The device a fit ran on, recorded with its result: the device, its model and, for a
    GPU, the CUDA runtime, the NVIDIA driver, the compute capability and the memory."""
    import torch

    if device.type != "cuda":
        return {"device": str(device), "device_model": "cpu (torch)",
                "device_runtime": f"torch {torch.__version__}"}
    props = torch.cuda.get_device_properties(device)
    return {"device": str(device), "device_model": props.name,
            "device_runtime": f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
                              f"driver {nvidia_driver()}, "
                              f"compute capability {props.major}.{props.minor}, "
                              f"{props.total_memory / 2**30:.1f} GiB"}


def device_memory(device) -> int:
    """Bytes free on ``device`` now (a CPU device: this machine's available memory). On a GPU,
    what the driver has free once torch's caching allocator has given back the segments no
    tensor uses (``empty_cache``): one n × n matrix needs one free range, which the unused
    parts of segments still in use cannot give, so they are not counted."""
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


class TorchKernel:
    """A :class:`~algorithms.kernels.Kernel` evaluated on a torch device: rows and columns in
    the tiles' form (:meth:`Kernel.rows`, :meth:`Kernel.cols`) made once with numpy and moved
    to the device, blocks computed there (:meth:`tile`)."""

    def __init__(self, kernel: Kernel, device, dtype) -> None:
        self.kernel, self.device, self.dtype = kernel, device, dtype
        self.name = kernel.name
        self.variance = float(kernel.variance)
        self._shape = dict(kernel._shape)

    def tensor(self, a: np.ndarray):
        import torch

        # a copy: the rows of a linear kernel are the store's read-only array itself
        return torch.tensor(np.ascontiguousarray(a), dtype=self.dtype, device=self.device)

    def rows(self, A: np.ndarray):
        """The rows of a block, in the tiles' form, on the device."""
        return self.tensor(self.kernel.rows(A))

    def cols(self, B: np.ndarray):
        """The columns of a block, in the tiles' form, on the device."""
        return self.tensor(self.kernel.cols(B))

    @property
    def _by_column(self) -> bool:
        """Whether a block's columns are the columns of :meth:`cols` (the stationary kernels'
        (d + 2) × m or d × m form) rather than its rows."""
        return self.kernel.spec.cols is not same_cols

    def n_cols(self, B) -> int:
        return int(B.shape[1]) if self._by_column else len(B)

    def col_block(self, B, lo: int, hi: int):
        return B[:, lo:hi] if self._by_column else B[lo:hi]

    def select(self, B, index):
        """The columns ``index`` (a device tensor of positions) of a block's columns."""
        return B[:, index] if self._by_column else B[index]

    def tile(self, A, B):
        """k(A, B) for device rows and columns from :meth:`rows` and :meth:`cols`: the torch
        tile of the kernel's row (:class:`~algorithms.kernels.KernelSpec`'s ``torch_tile``),
        times the variance."""
        T = self.kernel.spec.torch_tile(A, B, **self._shape)
        if self.variance != 1.0:
            T *= self.variance
        return T

    def block(self, A, B):
        """:meth:`tile`, checked finite: the one-line overflow error of the numpy path."""
        import torch

        T = self.tile(A, B)
        if not bool(torch.isfinite(torch.stack(torch.aminmax(T))).all()):  # NaN propagates
            raise self.kernel._overflow(T.cpu().numpy())
        return T

