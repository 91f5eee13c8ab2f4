"""Where a fit's kernel blocks come from, beside the in-memory arrays of
:class:`algorithms.kernel_blocks.ArrayKernelBlocks`: one module a provider, registered in
:data:`PROVIDERS` under its ``blocks=`` choice, each with ``provide(config, store, kernel)``, a
context giving the job's :class:`~algorithms.contract.KernelBlocks` over the dataset store:

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

from algorithms.kernels import Kernel

PROVIDERS: dict[str, str] = {"memory": "pipeline.blocks.store",
                             "cluster": "pipeline.blocks.cluster"}
DEVICE_PROVIDER = "pipeline.blocks.device"


def kernel_blocks(config: Mapping, store: Path, kernel: Kernel) -> AbstractContextManager:
    """The job's kernel blocks from the provider its ``blocks`` key chooses (validated), or
    on its device where that is not ``cpu``."""
    provider = PROVIDERS[config["blocks"]] if config["device"] == "cpu" else DEVICE_PROVIDER
    return importlib.import_module(provider).provide(config, store, kernel)
