"""Where a fit's kernel blocks come from, beside the in-memory arrays of
:class:`algorithms.kernel_blocks.ArrayKernelBlocks`: one module a provider, registered in
:data:`PROVIDERS` under its ``blocks=`` choice, each with ``provide(job, store, kernel)`` (``job``
its :class:`~pipeline.job.spec.JobSpec`, read through :class:`BlocksJob`), a context giving the
job's :class:`~algorithms.contract.KernelBlocks` over the dataset store:

- ``memory`` (:mod:`~pipeline.blocks.store`): the training rows read from the verified zarr
  store into this process;
- ``cluster`` (:mod:`~pipeline.blocks.cluster` on the client, :mod:`~pipeline.blocks.shards`
  on the workers): the rows spread over a Dask cluster's workers.

- ``device`` (:mod:`~pipeline.blocks.device`): a job whose ``device`` is a PyTorch device
  (``torch:cpu``, ``cuda``, ``cuda:N``) has its rows, and what its fit holds of n, there.

A provider's module is imported when a job chooses it (the cluster's imports distributed, the
device's torch).
Adding a provider: its module with ``provide``, its line here, and its choice in the ``blocks``
key's check (:func:`pipeline.config.keys.check_blocks`; a test holds the two equal).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from algorithms.kernels import Kernel
from pipeline.config.records import DeviceSpec

PROVIDERS: dict[str, str] = {"memory": "pipeline.blocks.store",
                             "cluster": "pipeline.blocks.cluster"}
DEVICE_PROVIDER = "pipeline.blocks.device"


class BlocksJob(Protocol):
    """What a provider reads of its job (a :class:`pipeline.job.spec.JobSpec`, which the job's
    floor defines above this one): its algorithm, ``blocks``, device and precision, and the
    cluster a ``blocks=cluster`` job started on its own connects to."""

    @property
    def algorithm(self) -> str:
        """The algorithm's name (a device job's is checked against the device's)."""

    @property
    def blocks(self) -> str:
        """The provider's choice (:data:`PROVIDERS`)."""

    @property
    def device(self) -> DeviceSpec:
        """Where the fit's numerics run, and in what precision."""

    @property
    def cluster(self) -> Mapping[str, Any] | None:
        """The cluster a ``blocks=cluster`` job started on its own connects to."""


def kernel_blocks(job: BlocksJob, store: Path, kernel: Kernel) -> AbstractContextManager:
    """The job's kernel blocks from the provider its ``blocks`` choice names (validated), or
    on its device where that is not ``cpu``."""
    provider = DEVICE_PROVIDER if job.device.on_torch else PROVIDERS[job.blocks]
    return importlib.import_module(provider).provide(job, store, kernel)
