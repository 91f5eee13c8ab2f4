"""Long names and units of everything a job file or a sweep's ``results.zarr`` holds:
the algorithms' own trace and summary keys (:mod:`algorithms.variables`), what the pipeline
adds (certificate, learned hyperparameters, threads, job bookkeeping), the dims, and the swept
config keys. :func:`describe_dataset` writes them as CF-style ``long_name`` / ``units`` attrs
on every variable and coordinate."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from algorithms.variables import TARGET, TARGET2
from algorithms.variables import describe as describe_key

if TYPE_CHECKING:
    import xarray as xr

STEP = ("iteration of the fit (1-based; the basis size at each step is the n_basis variable; "
        "test metrics exist only at evaluated steps: use .sgp.last() or final_<name>)", "1")

PIPELINE: dict[str, tuple[str, str]] = {
    # dims
    "algorithm": ("algorithm (registry name)", "1"),
    "dataset": ("dataset", "1"),
    "lam": ("noise variance σ² (λ)", TARGET2),
    "kappa": ("random candidate-subset size κ", "1"),
    "seed": ("seed of the algorithm's random choices", "1"),
    "step": STEP,
    "hyper_eval": ("evaluation of the marginal likelihood while learning hyperparameters "
                   "(every restart, in order)", "1"),
    # job bookkeeping
    "job_seconds": ("job wall time (data, learning, fit, certificate, writing; not the "
                    "warm-up)", "s"),
    "warmup_seconds": ("untimed warm-up before the process's first fit of this algorithm and "
                       "kernel (a tiny synthetic fit: imports, compiled code; 0 when warm)", "s"),
    "warmup_error": ("one-line error of a warm-up fit that failed (the job's fit ran anyway)",
                     "1"),
    "load_start": ("1-minute load average of the machine at the job's start (os.getloadavg)",
                   "1"),
    "load_end": ("1-minute load average of the machine at the job's end (os.getloadavg)", "1"),
    "cores": ("CPUs the job's process may run on (sched_getaffinity)", "1"),
    "other_cores": ("cores that other processes and the hypervisor (steal time) kept busy, on "
                    "average, while the job ran (/proc/stat less the job's process)", "1"),
    "status": ("job status: ok, failed or missing (not run)", "1"),
    "error": ("one-line error of a failed job", "1"),
    "worker": ("Dask worker that ran the job", "1"),
    "job_hash": ("job identity (hash of its resolved config and code version)", "1"),
    "blas_threads": ("BLAS threads the job ran with", "1"),
    "cpu_model": ("CPU model of the machine that ran the job", "1"),
    "kernel_threads": ("threads the job's kernel blocks were computed on", "1"),
    "device": ("the torch device of a fit off the numpy path (device=…; pipeline.blocks.device)",
               "1"),
    "device_model": ("the model of that device (a GPU's name)", "1"),
    "device_runtime": ("torch's version, and a GPU's CUDA runtime, NVIDIA driver, compute "
                       "capability and memory", "1"),
    "device_precision": ("the floating type of the device's numerics (precision=…)", "1"),
    "cluster_workers": ("Dask workers holding the training rows (blocks=cluster)", "1"),
    "cluster_bytes_moved": ("bytes the blocks=cluster shards returned to the fit", "bytes"),
    "cluster_shard_bytes_max": ("largest memory of one worker's rows and columns "
                                "(blocks=cluster)", "bytes"),
    "cluster_worker_peak_rss_max": ("largest peak resident memory of a worker holding rows "
                                    "(blocks=cluster)", "bytes"),
    "cluster_worker_peak_rss_min": ("smallest peak resident memory of a worker holding rows "
                                    "(blocks=cluster)", "bytes"),
    # the training-mean predictor on the job's test rows
    # (algorithms.evaluation.mean_predictor_metrics)
    "baseline_test_rmse": ("test root mean squared error of the training mean", TARGET),
    "baseline_test_nlpd": ("test negative log predictive density of N(training mean, training "
                           "variance) (mean over points)", "nats"),
    # Theorem 1 certificate (pipeline.job)
    "gap_certified": ("certified relative suboptimality (L − L_min)/|L_min| (Theorem 1)", "1"),
    "certified_lower_bound": ("certified lower bound on min L (Theorem 1)", TARGET2),
    "certificate_dual_steps": ("dual greedy steps the certificate ran", "1"),
    # learned hyperparameters (pipeline.job.hyper, 004 eq. 62)
    "hyper_kernel": ("learned kernel", "1"),
    "hyper_log_marginal_likelihood": ("log marginal likelihood at the learned "
                                      "hyperparameters", "nats"),
    "hyper_n_subset": ("training rows the marginal likelihood was learned on", "1"),
    "hyper_seconds": ("time to learn the hyperparameters", "s"),
    "hyper_cpu_seconds": ("CPU time of the process (every thread) while learning the "
                          "hyperparameters", "s"),
    "hyper_start_seconds": ("time to learn the kernel this learning started from "
                            "(hyper.shared_start; not in hyper_seconds)", "s"),
    "hyper_other_cores": ("cores that other processes and the hypervisor kept busy, on average, "
                          "while learning the hyperparameters (the most over this learning "
                          "and the one it started from)", "1"),
    "hyper_blas_threads": ("BLAS threads the hyperparameters were learned on", "1"),
    "hyper_start_cpu_seconds": ("CPU time of the process while learning the kernel this "
                                "learning started from", "s"),
    "hyper_lam": ("learned noise variance σ²", TARGET2),
    "hyper_variance": ("learned kernel variance", TARGET2),
    "hyper_evaluations": ("marginal-likelihood evaluations while learning", "1"),
    "hyper_runs": ("L-BFGS-B runs of the learning (first start and random restarts)", "1"),
    "hyper_iterations": ("L-BFGS-B iterations of the learning, every run together", "1"),
    "hyper_stop_reason": ("why the learning stopped: converged (every run met scipy's rule), "
                          "cap (a run reached hyper.max_iter), budget (hyper.budget_seconds "
                          "was spent), start (max_iter = 0: the start itself)", "1"),
    "hyper_y_offset": ("constant prior mean subtracted from the targets (hyper.center_y)",
                       TARGET),
    "hyper_at_bound": ("learned log-parameters within 1 % of a bound (name=lower|upper)", "1"),
    "hyper_method": ("marginal likelihood maximised (hyper.method)", "1"),
    "hyper_n_basis": ("basis points of the low-rank marginal likelihood (0: dense)", "1"),
    "hyper_jitter": ("jitter added to K_mm's diagonal by the low-rank likelihood", TARGET2),
    "hyper_lengthscale": ("learned length scale", "input units"),
    "hyper_run": ("restart of the hyperparameter optimiser", "1"),
    "hyper_lml": ("log marginal likelihood at this evaluation", "nats"),
    "hyper_log_variance": ("log kernel variance at this evaluation", "1"),
    "hyper_log_lengthscale": ("log length scale at this evaluation", "1"),
    "hyper_log_noise": ("log noise variance at this evaluation", "1"),
}

SWEPT: dict[str, tuple[str, str]] = {
    "kernel.width": ("kernel width 2ω²", "input units²"),
    "kernel.variance": ("kernel variance", TARGET2),
    "kernel.mu": ("Matérn kernel scale μ", "1/input units"),
    "dataset.n_train": ("training set size", "1"),
    "dataset.n_test": ("test set size", "1"),
    "dataset.split": ("data split (seed of the random train/test split)", "1"),
    "dataset.split_seed": ("data split (seed of the random train/test split)", "1"),
    "dataset.data_seed": ("seed of the generated data", "1"),
    "dataset.standardize": ("targets standardised", "1"),
    "algorithm.max_basis": ("maximum basis size m", "1"),
    "algorithm.steps": ("optimiser steps of the peer", "1"),
    "algorithm.m": ("basis size m", "1"),
    "algorithm.n_points": ("training points (a random subset drawn from the seed)", "1"),
    "algorithm.epochs": ("passes over the training rows of the peer's minibatch training", "1"),
    "protocol": ("shared: every method at one kernel; own: each peer learns by itself", "1"),
}

SYMBOLS: dict[str, str] = {
    # the short names of swept keys in legends and table rows ("σ² = 0.1, κ = 10")
    "lam": "σ²",
    "kappa": "κ",
    "kernel.width": "2ω²",
    "kernel.mu": "μ",
    "kernel.omega": "ω",
    "algorithm.max_basis": "m",
    "algorithm.m": "m",
    "algorithm.n_points": "n",
    "dataset.n_train": "n",
    "dataset.split": "split",
    "dataset.split_seed": "split",
    "dataset.standardize_y": "standardised y",
    "n_train": "n",
}

TWO_VALUED: dict[str, tuple[str, str]] = {  # a swept yes/no key: its false and true text
    "dataset.standardize_y": ("raw y", "standardised y"),
}

_NUMBERED = re.compile(r"^(hyper_(?:log_)?lengthscale)_(\d+)$")


def describe(name: str) -> tuple[str, str]:
    """(long_name, units) of a variable, coordinate or swept key of a results store.

    ``final_<key>`` is a job's final value of ``<key>``; ``hyper_lengthscale_<j>`` the j-th ARD
    length scale; a swept ``<group>.<option>`` not listed is named by its config key."""
    if name.startswith("final_"):
        long_name, units = describe(name.removeprefix("final_"))
        return f"final {long_name}", units
    known = PIPELINE.get(name) or SWEPT.get(name) or describe_key(name)
    if known is not None:
        return known
    numbered = _NUMBERED.match(name)
    if numbered:
        long_name, units = PIPELINE[numbered.group(1)]
        return f"{long_name} of input {numbered.group(2)}", units
    if "." in name:
        group, _, option = name.partition(".")
        return f"{group} option {option}", "1"
    raise KeyError(f"{name} has no description: add it to pipeline/results/variables.py or "
                   "algorithms/variables.py")


# Unit labels of the tables above that are no UDUNITS unit: quantities in the dataset's own
# units, which no dataset records (a results store mixes datasets). Their variables get no
# ``units`` attribute, and a ``comment`` saying what they are measured in.
DATA_UNITS = (TARGET, TARGET2, "input units", "input units²", "1/input units")
# A natural-log quantity (a log-likelihood in nats) is a number in UDUNITS.
NATS = "nats"
NOT_DESCRIBED = " (not described)"  # the long name's tail of a variable no table describes


def cf_attrs(long_name: str, units: str, dtype) -> dict[str, str]:
    """The CF ``long_name`` / ``units`` attributes of a variable of this dtype described as
    (``long_name``, ``units``): a valid UDUNITS string, or no ``units`` at all (text, and
    quantities in the data's own units, :data:`DATA_UNITS`, with a ``comment`` instead)."""
    if getattr(dtype, "kind", "f") in "OUSb" or not units:  # text, flags: no units
        return {"long_name": long_name}
    if units in DATA_UNITS:
        return {"long_name": long_name,
                "comment": f"in {units} (the dataset's own, not recorded)"}
    if units == NATS:
        return {"long_name": f"{long_name} (nats)", "units": "1"}
    return {"long_name": long_name, "units": units}


def symbol(name: str) -> str:
    """The short name of a swept key in a legend or a table row: σ² for ``lam``, κ for
    ``kappa``, m for a basis size, …; else its option name (``algorithm.subset`` → subset)."""
    return SYMBOLS.get(name) or name.rpartition(".")[2].replace("_", " ")


def setting_text(dim: str, value: object) -> str:
    """``σ² = 0.1`` for ``(lam, 0.1)``: a swept key's symbol and its value (a yes/no key of
    ``TWO_VALUED`` as its text, e.g. ``raw y``)."""
    if dim in TWO_VALUED and str(value) in ("False", "True"):
        return TWO_VALUED[dim][str(value) == "True"]
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{symbol(dim)} = {value}"


def short_label(name: str, ds: xr.Dataset | None = None, units: bool = True) -> str:
    """A table header: the long name without ``final``, a defining formula after `` = `` or a
    trailing parenthesis, with its units (``units=False``: without), e.g. ``job wall time
    [s]``; an undescribed name as its words (``final_error_bar_basis_mean`` → ``error bar basis
    mean``)."""
    found = _described(name, ds)
    if found is None or found[1] == "not described":
        return name.removeprefix("final_").replace("_", " ")
    text, unit = found
    text = text.removeprefix("final ").split(" = ")[0]
    text = re.sub(r"\s+\([^()]*\)$", "", text) or text
    return text if unit in ("1", "") or not units else f"{text} [{unit}]"


def describe_dataset(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with CF ``long_name`` and ``units`` attrs on every variable and coordinate
    (:func:`cf_attrs`: units valid for UDUNITS, or absent where they cannot be)."""
    for name in ds.variables:
        try:
            long_name, units = describe(str(name))
            traced = str(name).removeprefix("final_")
            if name != traced and (traced not in ds or "step" not in ds[traced].dims):
                long_name = long_name.removeprefix("final ")  # a per-job quantity only
        except KeyError:  # undescribed (the contract tests prevent it): say so, never guess
            ds[name].attrs.update(long_name=f"{name}{NOT_DESCRIBED}")
            continue
        ds[name].attrs.update(cf_attrs(long_name, units, ds[name].dtype))
    return ds


def _described(name: str, ds: xr.Dataset | None) -> tuple[str, str] | None:
    """(long name, unit label) of ``name``: the table's (:func:`describe`; its labels, such as
    ``target units``, make axis labels, and read ``standardised target units`` where ``ds``
    standardised y: :func:`_target_label`), else ``ds[name]``'s ``long_name``/``units``
    attrs."""
    try:
        long_name, unit = describe(name)
        return long_name, _target_label(unit, ds)
    except KeyError:
        pass
    if ds is not None and name in ds.variables and "long_name" in ds[name].attrs:
        long_name = str(ds[name].attrs["long_name"])
        if not long_name.endswith(NOT_DESCRIBED):
            return long_name, str(ds[name].attrs.get("units", "1"))
    return None


def _target_label(unit: str, ds: xr.Dataset | None) -> str:
    """``unit`` with ``target units`` read as ``standardised target units`` where every job of
    ``ds`` standardised its targets (``dataset.standardize_y`` true in the run's config and not
    swept): the numbers are then in units of the training targets' standard deviation."""
    if ds is None or TARGET not in unit:
        return unit
    config = ds.attrs.get("config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return unit
    swept = ds.attrs.get("swept_keys") or ()
    if isinstance(swept, str):  # JSON text, as load() returns it
        try:
            swept = json.loads(swept)
        except ValueError:
            return unit
    standardised = (isinstance(config, dict) and "dataset.standardize_y" not in swept
                    and (config.get("dataset") or {}).get("standardize_y") is True)
    return unit.replace(TARGET, f"standardised {TARGET}") if standardised else unit


def long_name(name: str, ds: xr.Dataset | None = None) -> str:
    """The long name of ``name`` (from ``ds``'s attrs if given), or ``name`` itself."""
    found = _described(name, ds)
    return name if found is None else found[0]


def axis_label(name: str, ds: xr.Dataset | None = None) -> str:
    """An axis label from the long name and units (``ds``'s attrs if given), e.g. ``test root
    mean squared error [target units]`` (no units shown for ``1``; the name where it has
    none)."""
    found = _described(name, ds)
    if found is None:
        return name
    text, units = found
    return text if units == "1" else f"{text} [{units}]"
