"""A job's identity: the hash of what determines its numbers, and nothing else.

:func:`job_identity` is made of the resolved job config without the keys that say where or how
it runs, the content of its dataset (:func:`pipeline.datasets.content_digest`: the stored
arrays and split, not the code that built the store), the version of the code under
``algorithms/`` that computes it (:func:`algorithm_version`) and that of the modules of
``pipeline/`` that change the numbers a fit sees or reports
(:data:`pipeline.codeversion.NUMERIC_PIPELINE`: how options and data reach the fit,
hyperparameter learning, kernel blocks, the result file's writer). The rest of ``pipeline/``
(scheduling, reporting, logging) is not part of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

from omegaconf import DictConfig, OmegaConf

from algorithms.contract import AlgorithmSpec
from algorithms.errors import InputError
from algorithms.registry import get
from pipeline.codeversion import cached_under, code_version, module_of, pipeline_version
from pipeline.config import complete
from pipeline.config.keys import keys_of_role
from pipeline.datasets import StoreError, content_digest
from pipeline.datasets.spec import memory_read_once
from pipeline.job.hyper import hyper_options
from pipeline.job.numbers import declared_floats

# Config keys that say where or how a job runs, or whose effect is written into the algorithm's
# node before it is named: not part of its identity (their roles: pipeline.config.keys)
NOT_IDENTITY = keys_of_role("location", "execution", "applied")


# Modules whose code computes every result beside the algorithm's own module: the evaluator, the
# Theorem 1 certificate and the learning-curve jobs (with what they import under algorithms/)
SHARED_NUMERICS = ("algorithms.evaluation", "algorithms.certificate", "algorithms.curve_jobs")
# and what a job on a torch device computes with beside them (pipeline.blocks.device)
DEVICE_NUMERICS = ("algorithms.torch_blocks", "algorithms.device")


def job_config(cfg: DictConfig, resolve: bool = True) -> dict:
    """The job config (no hydra node) as a plain dict, resolved unless ``resolve=False``."""
    job_keys = [key for key in cfg.keys() if key != "hydra"]
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, job_keys), resolve=resolve)


def job_identity(config: Mapping, write_data: bool = True) -> dict:
    """Everything that determines a job's result: its config without location keys (κ dropped
    for algorithms that ignore it, λ for classifiers, the seed for deterministic ones; a
    learning curve depends on the seed through its draws of training inputs), the content of
    its dataset (:func:`pipeline.datasets.content_digest`: the stored arrays and split; the
    store is ingested first if it is not there, or built in memory when ``write_data`` is
    false, as for a dry run), the version of the code under ``algorithms/`` that computes
    the result (:func:`algorithm_version`) and that of the number-changing modules of
    ``pipeline/`` (:func:`pipeline.codeversion.pipeline_version`).

    A dataset whose store cannot be had (a damaged shipped file, a store root that cannot be
    written) raises its :class:`~pipeline.datasets.StoreError`: a sweep stops before any job
    is named after data it does not have; any other bad dataset spec is the job's to report."""
    config = declared_floats(complete(config))  # lam=1 and lam=1.0: one job
    # the code versions computed once are kept beside the stores (read, not written, on a dry
    # run)
    with cached_under(config.get("store_root"), keep=write_data):
        return _identity(config, write_data)


# within planning(): (dataset spec, store root, write) → its content digest, or None
_PLANNED_DATA: ContextVar[dict[str, str | None] | None] = ContextVar("planned_data",
                                                                    default=None)


@contextlib.contextmanager
def planning() -> Iterator[None]:
    """Within the block (one sweep's planning, this thread), :func:`job_identity` takes the
    content digest of each distinct dataset spec and store root once (its points share a few
    datasets, and each digest is a normalised spec, its hash and a store path: ~0.2 ms), and
    the datasets' checks read the memory available once
    (:func:`pipeline.datasets.spec.memory_read_once`)."""
    token = _PLANNED_DATA.set({})
    try:
        with memory_read_once():  # and the datasets' checks read the free memory once
            yield
    finally:
        _PLANNED_DATA.reset(token)


def _identity(config: Mapping, write_data: bool) -> dict:
    ident = _config_part(config)
    spec = spec_or_none(config)
    ident["code_version"] = algorithm_version(spec) if spec is not None else None
    ident["pipeline_code"] = pipeline_version()
    if config["device"] != "cpu" or config["precision"] != "float64":
        ident["device"] = device_part(config)
    try:
        if hyper_options(config["hyper"]) is not None:  # the fit depends on the learning code
            ident["hyper_code"] = code_version("algorithms.hyper")
    except InputError:
        pass  # a bad hyper block: the job reports it
    planned = _PLANNED_DATA.get()
    key = None if planned is None else json.dumps(
        [config.get("dataset"), config.get("store_root"), write_data], sort_keys=True,
        default=repr)
    if planned is not None and key in planned:
        ident["data"] = planned[key]
        return ident
    try:
        ident["data"] = content_digest(config["dataset"], config["store_root"],
                                       write=write_data)
    except StoreError:
        raise
    except (InputError, KeyError, TypeError):
        ident["data"] = None  # a bad dataset spec: the job reports it
    if planned is not None:
        planned[key] = ident["data"]
    return ident


def _config_part(config: Mapping) -> dict:
    """The part of a job's identity its config gives: every key but the location and execution
    keys, with κ, the seed and λ null where the algorithm's spec says they do not matter."""
    ident = {k: v for k, v in config.items()
             if k not in NOT_IDENTITY}
    spec = spec_or_none(config)
    if spec is not None and not spec.uses_kappa:
        ident["kappa"] = None
    if spec is not None and spec.seed_free and not config["learning_curve"]:
        ident["seed"] = None
    if spec is not None and spec.task == "classification":
        ident["lam"] = None  # no noise variance: a classifier does not use lam
    return ident


def device_part(config: Mapping) -> dict:
    """A job on a torch device: the device, the precision and the version of the device's
    code (:data:`DEVICE_NUMERICS` with what they import under ``algorithms/``), in its
    identity, with the provider's (:mod:`pipeline.blocks.device`); a job with ``device=cpu``
    and float64 has none, so its identity is that of
    every job before the device existed. A GPU's sums round differently from the CPU's (to
    ~1e-13 relative in float64) and float32 differs by far more: a device's results are its
    own."""
    return {"device": config["device"], "precision": config["precision"],
            "code": code_version(*DEVICE_NUMERICS),
            "pipeline_code": pipeline_version(("pipeline.blocks.device",))}


def algorithm_version(spec: AlgorithmSpec) -> str:
    """Version of the code behind ``spec``'s results: its module and the shared numerics
    (evaluator, certificate, learning curves) with every module under ``algorithms/`` they
    import (:func:`pipeline.codeversion.code_version`; comments and docstrings do not
    count)."""
    return code_version(module_of(spec.fit), *SHARED_NUMERICS)


def setting_hash(config: Mapping) -> str:
    """Hash of a job's settings: its identity without the data content and code version (the
    same settings on edited data or code are the same sweep point, rerun)."""
    ident = _config_part(declared_floats(complete(config)))
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_hash(config: Mapping, write_data: bool = True) -> str:
    """Stable hash of a job's identity (names its result; equal hashes are one job)."""
    blob = json.dumps(job_identity(config, write_data), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def spec_or_none(config: Mapping) -> AlgorithmSpec | None:
    try:
        return get(config["algorithm"]["name"])
    except InputError:
        return None  # reported by the job itself

