"""The torch back end (``device``: :mod:`algorithms.device`, :mod:`algorithms.torch_blocks`,
:mod:`pipeline.blocks.device`), tested on PyTorch's CPU device (``torch:cpu``) where there is no
GPU: its kernel blocks equal the numpy provider's for every kernel, a job on it records its
device and equals the numpy job to round-off, its identity is its own while a ``cpu`` job's is
unchanged, and a device that is not there is one line. Every fit that runs on a device is
compared with numpy's by the contract suite (``tests/contract.py``,
``check_torch_blocks_equal_memory_blocks``)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import xarray as xr
from hydra import compose, initialize_config_dir

from algorithms import ArrayKernelBlocks, InputError, Kernel
from algorithms.device import LazyTorch, check_device, torch_device, torch_dtype
from algorithms.torch_blocks import TorchKernelBlocks
from pipeline.config import CONF_DIR
from pipeline.job.identity import job_config, job_identity
from pipeline.job.run import run_job

KERNELS = [Kernel("rbf", {"lengthscales": [1.0, 2.0, 0.5], "variance": 2.0}),
           Kernel("rbf", {"width": 3.0}), Kernel("laplacian", {"omega": 1.3}),
           Kernel("matern32", {"mu": 0.7, "variance": 0.5}), Kernel("linear"),
           Kernel("polynomial", {"degree": 3, "c": 0.5})]


def _close(actual, desired, tol: float = 1e-12) -> None:
    desired = np.asarray(desired)
    np.testing.assert_allclose(actual, desired, rtol=tol, atol=tol * np.abs(desired).max())


@pytest.mark.parametrize("kernel", KERNELS, ids=str)
def test_torch_blocks_equal_the_numpy_blocks(kernel):
    """Blocks, diagonal, K·V (narrow, wide, by a held K), projections, kernel columns and the
    pivoted Cholesky columns: the same numbers on torch:cpu as on numpy, to 1e-12."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 3))
    on_numpy, on_torch = ArrayKernelBlocks(X, kernel), TorchKernelBlocks(X, kernel,
                                                                        torch.device("cpu"))
    rows, cols = np.array([5, 2, 99, 7]), slice(10, 50)
    _close(on_torch.block(rows, cols), on_numpy.block(rows, cols))
    _close(on_torch.block(slice(None), slice(None)), on_numpy.block(slice(None), slice(None)))
    _close(on_torch.diag(), on_numpy.diag())
    for V in (rng.normal(size=240), rng.normal(size=(240, 3)), rng.normal(size=(240, 20))):
        _close(on_torch.matmul(V), on_numpy.matmul(V))
    assert on_torch.hold(0.5) == 240 * 240 * 8
    _close(on_torch.matmul(V), on_numpy.matmul(V))
    assert on_torch.held_bytes == 240 * 240 * 8
    on_torch.release()
    W = rng.normal(size=(240, 4))
    for got, want in zip(on_torch.project(rows, W), on_numpy.project(rows, W), strict=True):
        _close(got, want)
    _close(on_torch.cross(X[:7] + 0.1, rows), on_numpy.cross(X[:7] + 0.1, rows))
    y = rng.normal(size=240)
    cols_torch, cols_numpy = on_torch.columns(y, 8), on_numpy.columns(y, 8)
    for c in (cols_torch, cols_numpy):
        c.extend([3, 17, 40])
    _close(cols_torch.array, cols_numpy.array)
    for got, want in zip(on_torch.project(rows, cols_torch),
                         on_numpy.project(rows, cols_numpy), strict=True):
        _close(got, want)


def test_pivoted_cholesky_columns_follow_the_same_pivots():
    """The Nyström state on the device: the same pivots, factor rows, residual trace and Gram
    products as the numpy columns, step by step."""
    from algorithms.lowrank import PartialCholesky

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(300, 4)), rng.normal(size=300)
    kernel = Kernel("rbf", {"width": 4.0})
    chols = [PartialCholesky(blocks, 40, targets=y) for blocks in
             (ArrayKernelBlocks(X, kernel), TorchKernelBlocks(X, kernel, torch.device("cpu")))]
    for _ in range(5):
        pivots = [c.greedy_block(8) for c in chols]
        assert pivots[0] == pivots[1]
        for c, p in zip(chols, pivots, strict=True):
            c.add(p)
        assert chols[1].residual_trace() == pytest.approx(chols[0].residual_trace(), rel=1e-12)
    _close(chols[1].factor(), chols[0].factor())
    for got, want in zip(chols[1].gram(0, 40), chols[0].gram(0, 40), strict=True):
        _close(got, want)


def _job(tmp_path, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return job_config(compose("config", [
            "dataset=friedman1", "dataset.n_train=300", "dataset.n_test=40", "lam=0.1",
            f"store_root={tmp_path / 'stores'}", *overrides]))


@pytest.mark.parametrize("algorithm", ["exact", "cg", "gpytorch_sgpr"])
def test_a_job_on_torch_cpu_records_its_device_and_equals_the_numpy_job(tmp_path, algorithm):
    """The pipeline's job on ``device=torch:cpu`` writes its device, model and precision with
    the result, and its numbers equal the ``device=cpu`` job's to round-off; its identity has
    a device part (the device, the precision, the device code's version), a cpu job's none."""
    results = {}
    for device in ("cpu", "torch:cpu"):
        basis = ["algorithm.max_basis=20"] if algorithm.startswith("gpytorch") else []
        config = _job(tmp_path, f"algorithm={algorithm}", f"device={device}", *basis)
        out = run_job(config, tmp_path / device / "result.nc")
        results[device] = out.result.summary
        with xr.open_dataset(out.result_path) as ds:
            assert ds.attrs["status"] == "ok"
        identity = job_identity(config)
        assert ("device" in identity) == (device != "cpu")
    cpu, dev = results["cpu"], results["torch:cpu"]
    for key in ("test_rmse", "test_nlpd", "objective", "log_marginal_likelihood"):
        if key in cpu:  # NaN where the method has none (CG without error bars: no NLPD)
            assert dev[key] == pytest.approx(cpu[key], rel=1e-10, nan_ok=True), key
    assert dev["device"] == "cpu" and dev["device_model"] == "cpu (torch)"
    assert dev["device_precision"] == "float64"
    assert "device" not in cpu


def test_the_identity_of_a_cpu_job_has_no_device_part(tmp_path):
    """``device`` and ``precision`` are execution keys: a cpu float64 job's identity is the
    identity it had before they existed (no key of theirs in it); another device, or float32,
    is a job of its own."""
    cpu = job_identity(_job(tmp_path, "algorithm=exact"))
    assert not {"device", "precision"} & set(cpu)
    torch_cpu = job_identity(_job(tmp_path, "algorithm=exact", "device=torch:cpu"))
    float32 = job_identity(_job(tmp_path, "algorithm=exact", "device=torch:cpu",
                                "precision=float32"))
    assert torch_cpu["device"]["device"] == "torch:cpu"
    assert float32["device"]["precision"] == "float32"
    assert {k: v for k, v in torch_cpu.items() if k != "device"} == cpu


def test_float32_on_the_device_is_close_to_float64(tmp_path):
    """precision=float32 runs the device's numerics in single precision: its test RMSE within
    1e-3 relative of float64's on a well-conditioned problem (λ = 0.1)."""
    rmse = {}
    for precision in ("float64", "float32"):
        config = _job(tmp_path, "algorithm=exact", "device=torch:cpu", f"precision={precision}")
        rmse[precision] = run_job(config, tmp_path / precision / "r.nc").result.summary[
            "test_rmse"]
    assert rmse["float32"] == pytest.approx(rmse["float64"], rel=1e-3)
    assert rmse["float32"] != rmse["float64"]  # it did run in single precision


def test_a_device_that_is_not_here_is_one_line():
    """cuda without a GPU (or without a CUDA build of torch) names what is missing; on a
    machine with one, cuda is the first GPU. A malformed value names the accepted forms."""
    if torch.cuda.is_available():
        assert torch_device("cuda") == torch.device("cuda", 0)
        count = torch.cuda.device_count()
        with pytest.raises(InputError, match=rf"has {count} CUDA GPU"):
            torch_device(f"cuda:{count}")
    else:
        with pytest.raises(InputError, match=r"^device=cuda: PyTorch .* sees no CUDA GPU here; "
                                             r"pass device=cpu"):
            torch_device("cuda")
    for bad in ("gpu", "cuda:", "cuda:x", "torch:cuda", 1):
        with pytest.raises(InputError, match=r"is not a device; pass cpu, torch:cpu, cuda"):
            check_device(bad)


def test_the_device_runs_out_of_memory_in_one_line_or_falls_back_to_matrix_free(monkeypatch):
    """Free memory is an estimate: when the device runs out after all, the exact GP's factor
    is refused in one line (TooLarge: a failed point in a sweep) and a K held for PCG is
    dropped for the matrix-free product, with the same numbers."""
    from algorithms.errors import TooLarge

    rng = np.random.default_rng(0)
    X, kernel = rng.normal(size=(120, 3)), Kernel("rbf", {"width": 3.0})
    blocks = TorchKernelBlocks(X, kernel, torch.device("cpu"))

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(blocks, "_factor_in_place", out_of_memory)
    with pytest.raises(TooLarge, match=r"^the exact GP on 120 distinct inputs ran out of memory "
                                       r"on cpu \(CUDA out of memory\. Tried to allocate 64\.00 "
                                       r"GiB\); pass algorithm=cg"):
        blocks.factor(None, np.full(120, 0.1))
    real_block = blocks.torch_kernel.block

    def no_room_for_all(A, B):
        if len(A) == 120:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real_block(A, B)

    monkeypatch.setattr(blocks.torch_kernel, "block", no_room_for_all)
    monkeypatch.setattr(TorchKernelBlocks, "_row_step", lambda self, m: 50)
    assert blocks.hold(0.5) == 120 * 120 * 8
    V = rng.normal(size=(120, 2))
    _close(blocks.matmul(V), ArrayKernelBlocks(X, kernel).matmul(V))
    assert blocks.held_bytes == 0


def test_a_fit_on_a_device_is_sized_by_the_device_not_this_machine(tmp_path):
    """The exact GP's n × n factor of a job on a torch device is made and checked there
    (TorchKernelBlocks.factor against the device's free memory), so the job's check against
    this machine's memory does not refuse it; a cpu job is refused as before."""
    from pipeline.job.validate import check_config

    config = {"algorithm": {"name": "exact"}, "dataset": {"name": "kin40k", "split": 0},
              "kernel": {"name": "rbf", "width": 10.0}, "lam": 0.1, "kappa": 5, "seed": 0,
              "store_root": str(tmp_path / "stores")}
    with pytest.raises(InputError, match=r"needs .* of memory but 0\.0 MiB is available"):
        check_config({**config, "device": "cpu"}, available=1)
    check_config({**config, "device": "torch:cpu"}, available=1)
    X = np.random.default_rng(0).normal(size=(50, 2))
    blocks = TorchKernelBlocks(X, Kernel("rbf", {"width": 3.0}), torch.device("cpu"))
    assert blocks.memory_on_device and not getattr(ArrayKernelBlocks(X, blocks.kernel),
                                                   "memory_on_device", False)


FACTOR_PEAK = """
import resource, numpy as np, torch
from algorithms import Kernel
from algorithms.torch_blocks import TorchKernelBlocks
n = 3000
blocks = TorchKernelBlocks(np.random.default_rng(0).normal(size=(n, 3)),
                           Kernel("rbf", {"width": 3.0}), torch.device("cpu"))
blocks.kernel_rows, blocks.kernel_cols
TorchKernelBlocks._row_step = lambda self, m: 100  # blocks of the fill: small, as at large n
small = TorchKernelBlocks(np.ones((9, 3)) * np.arange(9)[:, None], blocks.kernel, blocks.device)
small.factor(None, np.full(9, 0.1)).solve(np.ones(9))  # the libraries' code, loaded
torch.ones(n, n, dtype=torch.float64).sum()  # one n x n matrix: the peak so far
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
factor = blocks.factor(None, np.full(n, 0.1))
factor.solve(np.ones(n))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) * 1024 / (n * n * 8))
"""


def test_the_exact_gps_factor_on_a_device_is_one_matrix():
    """K + σ²I is factored where it was filled and solved against without a copy: the peak
    of the factor and a solve is one n × n matrix (a row-major ``out=`` of ``cholesky_ex``, or
    ``cholesky_solve``, copied it: two, which is 128 GiB too many at n = 131 072 on a GPU)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FACTOR_PEAK], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) < 0.5  # matrices beyond the one (1.2 with a copy)


@pytest.mark.parametrize("line,version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 16 2025\n", "580.159.04"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n",
     "550.54.15"),
    ("something else\n", "unknown")])
def test_a_gpus_driver_is_read_from_its_kernel_module(tmp_path, line, version):
    """A GPU's result records its NVIDIA driver (in ``device_runtime``) from the loaded
    module's version line; ``unknown`` where there is none."""
    from algorithms.device import nvidia_driver

    (tmp_path / "version").write_text(line + "GCC version:  gcc version 12.2.0\n")
    assert nvidia_driver(str(tmp_path / "version")) == version
    assert nvidia_driver(str(tmp_path / "absent")) == "unknown"


def test_pcg_records_the_matrix_free_product_it_fell_back_to(monkeypatch):
    """PCG on a device whose K could not be formed after all (out of memory) runs matrix-free
    with the same posterior and records kernel_held_bytes = 0, not the bytes it asked for."""
    from algorithms import run

    rng = np.random.default_rng(1)
    X, kernel = rng.normal(size=(150, 3)), Kernel("rbf", {"width": 3.0})
    y = np.sin(X).sum(axis=1)
    blocks = TorchKernelBlocks(X, kernel, torch.device("cpu"))
    real_block = blocks.torch_kernel.block

    def no_room_for_all(A, B):
        if len(A) == 150 and blocks.torch_kernel.n_cols(B) == 150:  # all of K at once
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real_block(A, B)

    monkeypatch.setattr(blocks.torch_kernel, "block", no_room_for_all)
    monkeypatch.setattr(TorchKernelBlocks, "_row_step", lambda self, m: 50)
    fell_back = run("cg", blocks, y, lam=0.1, tol=1e-10)
    held = run("cg", ArrayKernelBlocks(X, kernel), y, lam=0.1, tol=1e-10)
    assert fell_back.summary["kernel_held_bytes"] == 0
    assert held.summary["kernel_held_bytes"] == 150 * 150 * 8
    _close(fell_back.solution.coef, held.solution.coef, tol=1e-8)


def test_without_torch_a_torch_device_is_one_line_naming_the_extra(monkeypatch):
    """torch is the optional extra ``peers``: where it is not installed (here: unimportable),
    asking for a torch device or precision is one line naming the extra, not a traceback."""
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ImportError
    fix = r"needs PyTorch, which is not installed: pip install 'sparse-gp-bench\[peers\]'"
    for device in ("torch:cpu", "cuda", "cuda:1"):
        with pytest.raises(InputError, match=rf"^device={device} {fix} \(in a checkout: "
                                             r"pip install -e '\.\[peers\]'\), or pass "
                                             r"device=cpu$"):
            torch_device(device)
    with pytest.raises(InputError, match=rf"^precision=float32 {fix}"):
        torch_dtype("float32")


def test_torch_blocks_import_torch_at_their_first_use():
    """algorithms.torch_blocks is importable without torch (the registry imports it to list
    the algorithms): its ``torch`` is a LazyTorch that becomes the module at its first use."""
    namespace: dict = {}
    lazy = LazyTorch(namespace)
    namespace["torch"] = lazy
    assert lazy.float64 is torch.float64 and namespace["torch"] is torch
