"""``device=torch:cpu``, ``cuda`` or ``cuda:N`` (:mod:`algorithms.device`): the kernel blocks of a
fit on a PyTorch device (:class:`algorithms.torch_blocks.TorchKernelBlocks`) over the training
rows of the verified dataset store, in the job's ``precision`` (float64 unless float32 is asked
for). Only the algorithms whose fits reach the data through the blocks' protocol alone run so
(``device_blocks`` on their :class:`~algorithms.contract.AlgorithmSpec`); another is refused in
one line with the rest of the job's config, before its data are read
(:func:`pipeline.job.validate.check_device`).

Imported only by a job on a torch device: torch is not imported by a job with ``device=cpu``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from algorithms.device import describe, torch_device, torch_dtype
from algorithms.kernels import Kernel
from algorithms.torch_blocks import TorchKernelBlocks
from pipeline.blocks import BlocksJob
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


@contextlib.contextmanager
def provide(job: BlocksJob, store: Path, kernel: Kernel) -> Iterator[StoreDeviceBlocks]:
    """The kernel blocks over the store's training rows on the job's device (the store
    verified by :func:`~pipeline.datasets.ingest` just before; the job's algorithm, precision
    and blocks checked with its config: :func:`pipeline.job.validate.check_device`)."""
    device = torch_device(job.device.name)
    if device.type == "cpu":
        import torch

        from pipeline.cluster.threads import blas_threads

        torch.set_num_threads(max(1, blas_threads()))  # the job's threads, as BLAS's
    yield StoreDeviceBlocks(store, kernel, device, torch_dtype(job.device.precision))
