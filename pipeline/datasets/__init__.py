"""Datasets: load or generate, split, standardise, validate, and store as verified zarr.

- :mod:`~pipeline.datasets.spec`: dataset specs (name + declared options), validation and
  :func:`build` (arrays + provenance attrs);
- :mod:`~pipeline.datasets.sources`: the real data shipped in ``pipeline/data/`` (provenance
  table, sha256 checked before every read) and the user's CSV files;
- :mod:`~pipeline.datasets.synthetic`: generators drawn from ``data_seed``;
- :mod:`~pipeline.datasets.store`: zarr stores (:func:`ingest`, :func:`open_store`).
"""

from pipeline.datasets import sources, synthetic  # noqa: F401  (they register the datasets)
from pipeline.datasets.spec import (
    DATASETS,
    FORMAT_VERSION,
    VARIABLES,
    DatasetSpec,
    StoreError,
    build,
    check_buildable,
    dataset_names,
    distinct_train,
    normalise_spec,
    spec_hash,
    task_of,
    train_shape,
)
from pipeline.datasets.store import (
    REQUIRED_ATTRS,
    attrs_digest,
    content_digest,
    fingerprint,
    ingest,
    load_arrays,
    open_store,
    read_store,
    store_path,
)
from pipeline.datasets.synthetic import friedman1_mean, gaussian_bumps_mean

__all__ = ["DATASETS", "FORMAT_VERSION", "REQUIRED_ATTRS", "VARIABLES", "DatasetSpec",
           "StoreError", "attrs_digest", "build", "content_digest", "dataset_names",
           "distinct_train", "fingerprint", "friedman1_mean", "gaussian_bumps_mean", "ingest",
           "load_arrays", "normalise_spec",
           "open_store", "read_store", "spec_hash", "store_path", "task_of", "train_shape",
           "check_buildable"]
