"""``device=torch:cpu``, ``cuda`` or ``cuda:N`` (:mod:`algorithms.device`): the kernel blocks of a
fit on a PyTorch device (:class:`algorithms.torch_blocks.TorchKernelBlocks`) over the training
rows of the verified dataset store, in the job's ``precision`` (float64 unless float32 is asked
for). Only the algorithms whose fits reach the data through the blocks' protocol alone run so
(:data:`algorithms.torch_blocks.DEVICE_ALGORITHMS`); another is refused in one line.

Imported only by a job on a torch device: torch is not imported by a job with ``device=cpu``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from algorithms.device import describe, torch_device, torch_dtype
from algorithms.errors import InputError
from algorithms.kernels import Kernel
from algorithms.torch_blocks import DEVICE_ALGORITHMS, FLOAT64_ONLY, TorchKernelBlocks
from pipeline.blocks.store import open_dataset_cached


class StoreDeviceBlocks(TorchKernelBlocks):
    """Kernel blocks of a dataset store's ``X_train`` on a torch device."""

    def __init__(self, store: Path, kernel: Kernel, device, dtype) -> None:
        self.store = store
        self.dataset = open_dataset_cached(store, verify=False)
        super().__init__(self.dataset["X_train"], kernel, device, dtype)

    def summary(self) -> dict:
        """What a job records of its device (pipeline.results.variables)."""
        return {**describe(self.device), "device_precision": str(self.dtype).removeprefix(
            "torch.")}


def check_device_job(config: Mapping) -> None:
    """A job on a torch device: its algorithm runs on one, its rows are in this process."""
    name = config["algorithm"]["name"]
    if name not in DEVICE_ALGORITHMS:
        raise InputError(f"algorithm {name} does not run on device={config['device']}; pass "
                         f"device=cpu, or one of: {', '.join(DEVICE_ALGORITHMS)}")
    if config["precision"] != "float64" and name in FLOAT64_ONLY:
        raise InputError(f"algorithm {name} computes in float64 only; pass precision=float64 "
                         f"with device={config['device']}")
    if config["blocks"] != "memory":
        raise InputError(f"blocks={config['blocks']} runs on the CPU workers; with "
                         f"device={config['device']} pass blocks=memory")


@contextlib.contextmanager
def provide(config: Mapping, store: Path, kernel: Kernel) -> Iterator[StoreDeviceBlocks]:
    """The kernel blocks over the store's training rows on the job's device (the store
    verified by :func:`~pipeline.datasets.ingest` just before)."""
    check_device_job(config)
    device = torch_device(config["device"])
    if device.type == "cpu":
        import torch

        from pipeline.cluster.threads import blas_threads

        torch.set_num_threads(max(1, blas_threads()))  # the job's threads, as BLAS's
    yield StoreDeviceBlocks(store, kernel, device, torch_dtype(config["precision"]))
