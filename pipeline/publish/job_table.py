"""The published table: one row per job and mode of an accuracy-against-time run
(:func:`job_table`, from a results store), its :data:`COLUMNS` and their meaning, read back with
its types (:func:`read_table`), and completed with the baselines and flags the run did not
record (:func:`complete`). :mod:`pipeline.publish.folder` writes it;
:mod:`pipeline.publish.legs` keeps a long run's legs in it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.errors import InputError
from algorithms.evaluation import gaussian_nlpd, rmse
from algorithms.kernels import Kernel
from algorithms.marginal_likelihood import length_scale_of
from algorithms.registry import REGISTRY
from pipeline.config import lookup
from pipeline.datasets import StoreError, build
from pipeline.publish import stats
from pipeline.publish.comparison import as_floats

OWN = "own"  # the protocol under which a method learns itself (pipeline.job.protocol)

# The published table: column → (where it comes from: the store's per-job variable or sweep
# dim, or ``=`` and how it is derived; meaning).
COLUMNS: dict[str, tuple[str, str]] = {
    "dataset": ("dataset", "the data set"),
    "split": ("dataset.split", "the train/test split"),
    "seed": ("seed", "the seed of the method's random choices (empty: the job does not depend "
             "on it, or it was not recorded)"),
    "algorithm": ("algorithm", "the method, with the values of its own options a run swept "
                  "beside the others in brackets: name[diagonal_correction=false] is GPyTorch's "
                  "SGPR predicting in the DTC form"),
    "mode": ("protocol", "shared: one learned kernel for all; own: each peer learns its own "
             "(a job the mode does not change, e.g. of a method that learns nothing itself, is "
             "listed under each mode)"),
    "basis_size": ("algorithm.max_basis", "basis functions / inducing points (empty: the "
                   "method has none)"),
    "status": ("status", "ok, failed (the error is in the run's results), or missing"),
    "test_rmse": ("final_test_rmse", "test root mean squared error (standardised targets)"),
    "test_nlpd": ("final_test_nlpd", "test negative log predictive density, nats per point"),
    "coverage_2sd": ("final_test_coverage_2sd", "fraction of test targets within ±2 sd"),
    "fit_seconds": ("= final_seconds − final_own_learning_seconds", "wall seconds of the fit "
                    "alone: a method's own learning of its hyperparameters is not in it (where "
                    "the run recorded it apart; the first edition did not)"),
    "learning_seconds": ("= final_hyper_seconds + final_hyper_start_seconds + "
                         "final_own_learning_seconds", "wall seconds of learning the "
                         "hyperparameters: the shared kernel's (or a method's own learning by "
                         "hyper=ml and the shared learning it starts from), and a method's "
                         "own learning inside its fit"),
    "certificate_gap": ("final_gap", "the method's relative duality gap (empty: it has none)"),
    "threads": ("final_blas_threads", "BLAS threads of the job"),
    "cpu_model": ("final_cpu_model", "the machine's CPU"),
    "fit_cpu_seconds": ("= final_cpu_seconds − final_own_learning_cpu_seconds", "process CPU "
                        "seconds (all threads) of the fit alone"),
    "learning_cpu_seconds": ("= final_hyper_cpu_seconds + final_hyper_start_cpu_seconds + "
                             "final_own_learning_cpu_seconds",
                             "process CPU seconds of learning the hyperparameters"),
    "load_start": ("final_load_start", "the machine's 1-minute load average at the job's start"),
    "load_end": ("final_load_end", "… and at its end"),
    "cores": ("final_cores", "the CPUs the job's process could run on"),
    "other_cores": ("final_other_cores", "cores that other processes and the hypervisor (steal) "
                    "kept busy, on average, while the job ran (pipeline.cluster.busy; empty: "
                    "not recorded)"),
    "learning_other_cores": ("final_hyper_other_cores", "… while its shared or low-rank "
                             "learning ran (the most over that learning and the one it started "
                             "from)"),
    "contended": ("= stats.contended", "whether the job's seconds were measured on a busy "
                  "machine (the rule is in the README; empty: not recorded)"),
    "baseline_rmse": ("final_baseline_test_rmse", "test RMSE of the training-mean predictor "
                      "on the job's test rows (from the data where the run did not record it)"),
    "baseline_nlpd": ("final_baseline_test_nlpd", "test NLPD of the mean predictor's Gaussian "
                      "N(ȳ_train, var(y_train))"),
    "trivial": ("= stats.trivial", "whether the job's predictor is no better than the "
                "training mean in test RMSE (the rule is in the README); a trivial job's "
                "setting is never ranked"),
    "nlpd_above_mean": ("= stats.nlpd_above_mean", "whether the job's test NLPD is above the "
                        "mean predictor's Gaussian's; such a job's setting is left out of "
                        "every NLPD comparison"),
    "converged": ("final_own_converged", "whether a method's own learning met its stopping "
                  "rule (empty: it learns nothing itself, the row is not of the own "
                  "protocol, or not recorded)"),
    # the hyperparameters the fit used and the learning that chose them (_hyperparameters):
    # with dataset, split, seed, algorithm and basis size, enough to fit the job again
    "kernel": ("= final_learned_kernel, else final_hyper_kernel, else the config's kernel",
               "the covariance function's name (its parameters besides the length scales "
               "and signal variance, if any, are the run's config: its command)"),
    "lengthscales": ("= as kernel", "the kernel's length scales ℓ, joined by ';' and "
                     "written to round trip (Python's repr): one per input dimension in the "
                     "data set's column order (ARD), or one for every dimension (an "
                     "isotropic kernel; an RBF's width is 2ℓ²); read back with [float(v) for "
                     "v in str(cell).split(';')]; empty for a kernel without one"),
    "signal_variance": ("= as kernel", "the kernel's signal variance (it multiplies the "
                        "kernel)"),
    "noise_variance": ("= final_learned_lam, else final_hyper_lam, else the config's lam",
                       "σ², the noise variance (lam) the fit used"),
    "y_offset": ("= final_hyper_y_offset, else 0 under hyper=fixed", "the constant prior "
                 "mean subtracted from the training targets before the learning and the fit "
                 "(hyper.center_y: the training targets' mean; 0: not centred); the "
                 "predictions are offset + the fit's, the test metrics those of the "
                 "centred targets (the same numbers)"),
    "hyper_from": ("= which record", "where these hyperparameters come from: shared (the "
                   "hyper=ml learning of the row's setting, final_hyper_*: the kernel every "
                   "method of it fits with), own (the method's own learning under the own "
                   "protocol: a peer's training, final_learned_kernel and final_learned_lam, "
                   "or ours by hyper=ml's low-rank bound, final_hyper_*), config (hyper=fixed:"
                   " the run's kernel and lam); empty: not recorded (a failed job's learning)"),
    "learning_iterations": ("= final_own_iterations_total or final_hyper_iterations",
                            "iterations of the learning that chose them, every start "
                            "together (L-BFGS iterations; a peer trained by Adam: epochs); "
                            "empty: none (config), or not recorded"),
    "learning_stop_reason": ("= final_own_stop_reason or final_hyper_stop_reason", "why that "
                             "learning stopped, in its own words (hyper=ml: converged, cap, "
                             "budget, start; a peer: e.g. gradient, relative_change, stalled, "
                             "cap, untrained)"),
    "learning_converged": ("= final_own_converged, or final_hyper_stop_reason = converged",
                           "whether that learning met its stopping rule rather than a cap or "
                           "budget, under either protocol (empty: not recorded)"),
    "var_below_noise": ("final_test_var_below_noise", "fraction of test rows whose predictive "
                        "variance of y is below σ² (impossible for a GP: round-off in the "
                        "method's variance; its test NLPD is then not the method's)"),
}

# the columns added after the second edition (issue 85): its committed CSV lacks them, and
# read_table leaves them empty there
ADDED_AFTER_SECOND_EDITION = ("kernel", "lengthscales", "signal_variance", "noise_variance",
                              "y_offset", "hyper_from", "learning_iterations",
                              "learning_stop_reason", "learning_converged", "var_below_noise")
HYPER_COLUMNS = ADDED_AFTER_SECOND_EDITION[:-1]  # filled by _hyperparameters
TEXT_COLUMNS = ("cpu_model", "status", "kernel", "lengthscales", "hyper_from",
                "learning_stop_reason")  # read back as text (a single length scale too)

# what a derived column is made of: column → (store variable, sign) terms, summed; a missing
# term counts as 0 unless every term is missing
DERIVED = {
    "fit_seconds": (("final_seconds", 1), ("final_own_learning_seconds", -1)),
    "learning_seconds": (("final_hyper_seconds", 1), ("final_hyper_start_seconds", 1),
                         ("final_own_learning_seconds", 1)),
    "fit_cpu_seconds": (("final_cpu_seconds", 1), ("final_own_learning_cpu_seconds", -1)),
    "learning_cpu_seconds": (("final_hyper_cpu_seconds", 1), ("final_hyper_start_cpu_seconds", 1),
                             ("final_own_learning_cpu_seconds", 1)),
}
INTEGERS = ("split", "seed", "basis_size", "threads", "cores", "learning_iterations")
FLAGS = ("contended", "trivial", "nlpd_above_mean", "converged", "learning_converged")

# the sweep dims a published table may have: each is a column (any other swept key would be
# averaged away unseen)
PUBLISHED_DIMS = ("algorithm", "dataset", "dataset.split", "algorithm.max_basis", "protocol",
                  "seed")


VARIANT_PREFIX = "algorithm."  # a swept option of the method: part of the method's name


def variant_name(algorithm: str, options: dict) -> str:
    """``algorithm[option=value,…]`` for the method's swept options that the job set (a
    missing one, or one the method does not take, is left out): e.g.
    ``<method>[diagonal_correction=false]``, parsed back by :func:`variant_options`."""
    parts = []
    for key, value in options.items():
        if value is None or (not isinstance(value, str) and pd.isna(value)) or value == "null":
            continue
        if not _takes(algorithm, key.removeprefix(VARIANT_PREFIX)):
            continue  # an option the method does not take: the sweep ignored it for its jobs
        text = str(value).lower() if str(value) in ("True", "False") else str(value)
        parts.append(f"{key.removeprefix(VARIANT_PREFIX)}={text}")
    return algorithm + (f"[{','.join(parts)}]" if parts else "")


def variant_options(name: str) -> tuple[str, dict[str, str]]:
    """(algorithm, {option: value text}) of a published method name (:func:`variant_name`)."""
    if not name.endswith("]") or "[" not in name:
        return name, {}
    algorithm, _, inside = name[:-1].partition("[")
    return algorithm, dict(part.split("=", 1) for part in inside.split(",") if "=" in part)


def job_table(ds, dataset_options: dict | None = None, extra: tuple[str, ...] = ()
              ) -> pd.DataFrame:
    """One row per job of a results Dataset and mode, the :data:`COLUMNS` in order, sorted by
    mode, dataset, algorithm, basis size, split and seed. A key the run fixed rather than
    swept (one split, one mode) is filled from its config; a column the store does not have is
    empty; the flags and missing baselines are filled by :func:`complete`. A job that does not
    depend on the swept seed (the same hash for every seed) is one row with an empty seed.
    ``extra`` names per-job variables of the store appended after the columns (a leg's
    ``job_hash``: :mod:`pipeline.publish.legs`). Raises :class:`InputError` for a run that swept
    another key."""
    # deferred: the store's access loads xarray, which a published CSV or a leg does without
    from pipeline.results.access import decoded_attrs, tidy

    swept = [d for d in ds["job_hash"].dims if d not in PUBLISHED_DIMS and ds.sizes[d] > 1]
    # a method's own option swept beside the published keys (SGPR's two predictive forms):
    # each value its own method, named in the column `algorithm` (:func:`variant_name`)
    variants = [d for d in swept if d.startswith(VARIANT_PREFIX)]
    other = [d for d in swept if d not in variants]
    if other:
        raise InputError(f"the run sweeps {', '.join(other)} besides {', '.join(PUBLISHED_DIMS)}"
                         "; the table would average over it: publish a run that fixes it, or "
                         "select one value with python -m pipeline.report --select")
    jobs = tidy(ds, per="job")
    if variants:
        jobs["algorithm"] = [variant_name(name, {d: row[d] for d in variants})
                             for name, (_, row) in zip(jobs["algorithm"], jobs.iterrows(),
                                                       strict=True)]
    mode_dim = COLUMNS["mode"][0]
    if mode_dim in ds.dims:  # a job that does not depend on the mode: one row under each
        shared = jobs[mode_dim].isna()
        jobs = pd.concat([jobs[~shared]] + [jobs[shared].assign(**{mode_dim: mode})
                                            for mode in ds[mode_dim].values.tolist()])
    for source in PUBLISHED_DIMS:
        if source not in jobs:  # fixed by the run: every job has its config's value
            value = lookup(decoded_attrs(ds)["config"], source)
            jobs[source] = pd.NA if value is None else value
            if value is not None and source.startswith("algorithm."):  # … that takes it
                option = source.removeprefix("algorithm.")
                takes = [_takes(name, option) for name in jobs["algorithm"].tolist()]
                jobs[source] = jobs[source].where(np.array(takes, dtype=bool))
    table = pd.DataFrame({name: _column(jobs, name, source)
                          for name, (source, _) in COLUMNS.items()})
    for name, values in _hyperparameters(jobs, decoded_attrs(ds)["config"]).items():
        table[name] = (pd.array(values, dtype=object) if name in TEXT_COLUMNS + FLAGS
                       + INTEGERS else as_floats(pd.Series(values, dtype=object)).to_numpy())
    for name in extra:
        table[name] = jobs[name].to_numpy()
    return complete(typed(table), dataset_options)


def _takes(algorithm, option: str) -> bool:
    """Whether ``algorithm`` (a registered name) has ``option``: a run that fixes an option
    some of its methods do not take (the sweep ignores it for them) gives them none."""
    spec = REGISTRY.get(variant_options(algorithm)[0]) if isinstance(algorithm, str) else None
    return spec is None or option in spec.options


def _column(jobs: pd.DataFrame, name: str, source: str):
    """Column ``name`` of the job table from the tidy ``jobs``."""
    if name in DERIVED:
        terms = [(as_floats(jobs[var]) * sign) for var, sign in DERIVED[name] if var in jobs]
        if not terms:
            return pd.NA
        total = sum(t.fillna(0.0) for t in terms)
        return total.where(~pd.concat(terms, axis=1).isna().all(axis=1))
    if source.startswith("="):
        return pd.NA  # computed by complete()
    return jobs[source] if source in jobs else pd.NA


def _text(jobs: pd.DataFrame, name: str) -> list[str]:
    """The store's text variable ``name`` per job, '' where empty or absent."""
    if name not in jobs:
        return [""] * len(jobs)
    return ["" if pd.isna(v) else str(v) for v in jobs[name].tolist()]


def _numbers(jobs: pd.DataFrame, name: str) -> np.ndarray:
    """The store's numeric variable ``name`` per job, NaN where empty or absent."""
    if name not in jobs:
        return np.full(len(jobs), np.nan)
    return as_floats(jobs[name]).to_numpy(dtype=np.float64)


def kernel_from_text(text: str):
    """The :class:`~algorithms.kernels.Kernel` spelled ``text`` as the kernel spells itself
    (``rbf(width=28.4, variance=21.5)``, ``rbf(variance=2.0, lengthscales=[1.0, 0.5])``: its
    name and parameters, the floats as Python writes them, so that they round trip); raises
    :class:`InputError` (one line) for any other text."""
    try:
        call = ast.parse(text.strip(), mode="eval").body if len(text) < 100_000 else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and not call.args and all(k.arg for k in call.keywords)):
            raise ValueError(text)
        params = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise InputError(f"the kernel {text[:120]!r} recorded by the run is not a kernel as "
                         "the product spells it (name(parameter=value, …)); publish a store "
                         "the product wrote") from None
    return Kernel(call.func.id, params)


def kernel_columns(kernel) -> tuple[str, str, float]:
    """(name, length scales as the ``lengthscales`` column writes them, signal variance) of
    ``kernel``: its ARD length scales, or its isotropic scale as a length ℓ
    (:func:`algorithms.marginal_likelihood.length_scale_of`), '' for a kernel without one."""
    scales = kernel.lengthscales
    if scales is None and kernel.spec.unit_scale is not None:
        scales = [length_scale_of(kernel)[1]]
    text = "" if scales is None else ";".join(repr(float(v)) for v in scales)
    return kernel.name, text, float(kernel.variance)


def _hyperparameters(jobs: pd.DataFrame, config: dict) -> dict[str, list]:
    """The :data:`HYPER_COLUMNS` of each job of the tidy ``jobs``, read from the record of
    what its fit used: the method's own (``learned_kernel``, ``learned_lam``: a peer records
    the kernel it predicted with, trained or given), else hyper=ml's learning
    (``hyper_kernel``, ``hyper_lam``, ``hyper_y_offset``), else, under hyper=fixed, the
    run's ``config`` (its kernel and lam; targets not centred). The learning columns are the
    method's own training where the row is of the own protocol and the method recorded one,
    else hyper=ml's learning (the shared one, or ours by hyper.method=lowrank under the own
    protocol)."""
    fixed = lookup(config, "hyper.name") == "fixed"
    configured = None
    if fixed and isinstance(lookup(config, "kernel"), dict):
        kernel = {k: v for k, v in config["kernel"].items() if k != "name"}
        configured = kernel_columns(Kernel(config["kernel"]["name"], kernel))
    lam = lookup(config, "lam")
    mode = jobs[COLUMNS["mode"][0]].astype(object).tolist()
    learned, hyper = _text(jobs, "final_learned_kernel"), _text(jobs, "final_hyper_kernel")
    learned_lam, hyper_lam = _numbers(jobs, "final_learned_lam"), _numbers(jobs,
                                                                          "final_hyper_lam")
    offset = _numbers(jobs, "final_hyper_y_offset")
    own_converged = _numbers(jobs, "final_own_converged")
    own_stop, hyper_stop = (_text(jobs, "final_own_stop_reason"),
                            _text(jobs, "final_hyper_stop_reason"))
    own_iterations = np.where(np.isnan(total := _numbers(jobs, "final_own_iterations_total")),
                              _numbers(jobs, "final_own_iterations"), total)
    hyper_iterations = _numbers(jobs, "final_hyper_iterations")
    out: dict[str, list] = {name: [] for name in HYPER_COLUMNS}
    for i in range(len(jobs)):
        own = mode[i] == OWN and bool(learned[i] or own_stop[i]
                                      or not np.isnan(own_converged[i]))
        if learned[i]:
            values = (*kernel_columns(kernel_from_text(learned[i])), learned_lam[i])
        elif hyper[i]:
            values = (*kernel_columns(kernel_from_text(hyper[i])), hyper_lam[i])
        elif fixed and configured is not None and isinstance(lam, (int, float)):
            values = (*configured, float(lam))
        else:
            values = (pd.NA,) * 4
        if learned[i] and own:  # a peer's own training
            learning = (own_iterations[i], own_stop[i], _flag_value(own_converged[i]))
        elif hyper[i]:  # hyper=ml's: the shared learning, or ours under the own protocol
            converged = (_flag_value(own_converged[i]) if own and not np.isnan(own_converged[i])
                         else hyper_stop[i] == "converged" if hyper_stop[i] else pd.NA)
            learning = (hyper_iterations[i], hyper_stop[i], converged)
        else:
            learning = (np.nan, "", pd.NA)
        known = values[0] is not pd.NA
        source = ("own" if own else "shared" if hyper[i] else "config" if fixed and known
                  else "")
        y_offset = (offset[i] if not np.isnan(offset[i])
                    else 0.0 if fixed and known else np.nan)  # hyper=fixed centres nothing
        row = (*values, y_offset, source, *learning)
        for name, value in zip(HYPER_COLUMNS, row, strict=True):
            empty = value is pd.NA or (isinstance(value, str) and not value) or (
                isinstance(value, float) and np.isnan(value))
            out[name].append(pd.NA if empty else value)
    return out


def read_table(path: str | Path) -> pd.DataFrame:
    """A published table (:func:`job_table` written as CSV) read back with its types: what
    the README is rendered from, so that the committed CSV alone re-renders it. A column the
    CSV lacks (an earlier edition's) is empty."""
    table = pd.read_csv(path, dtype=dict.fromkeys(TEXT_COLUMNS, str))
    return typed(table.reindex(columns=list(COLUMNS)))


def typed(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its integer columns (split, seed, basis size, threads, cores) as
    nullable integers and its flags as nullable booleans (empty where a job has none), sorted
    by mode, dataset, algorithm, basis size, split and seed."""
    for name in INTEGERS:
        table[name] = pd.array(pd.to_numeric(table[name]), dtype="Int64")
    for name in FLAGS:
        table[name] = pd.array([_flag_value(v) for v in table[name]], dtype="boolean")
    return table.sort_values(["mode", "dataset", "algorithm", "basis_size", "split", "seed"],
                             na_position="first", kind="stable").reset_index(drop=True)


def _flag_value(value):
    if isinstance(value, str):
        return {"true": True, "false": False, "1": True, "0": False, "1.0": True,
                "0.0": False}.get(value.strip().lower(), pd.NA)
    return pd.NA if pd.isna(value) else bool(value)


def complete(table: pd.DataFrame, dataset_options: dict | None = None) -> pd.DataFrame:
    """``table`` with the baselines the run did not record computed from the shipped data
    (:func:`baselines`), and its ``trivial``, ``nlpd_above_mean`` and ``contended`` flags
    computed by their rules (:func:`pipeline.publish.stats.trivial`,
    :func:`pipeline.publish.stats.nlpd_above_mean`, :func:`pipeline.publish.stats.contended`)."""
    table = table.copy()
    missing = table["baseline_rmse"].isna() & table["split"].notna()
    if missing.any():
        pairs = table.loc[missing, ["dataset", "split"]].drop_duplicates()
        known = baselines([(d, int(s)) for d, s in pairs.itertuples(index=False)],
                          dataset_options)
        for column, i in (("baseline_rmse", 0), ("baseline_nlpd", 1)):
            table.loc[missing, column] = [known.get((d, int(s)), (np.nan, np.nan))[i]
                                          for d, s in table.loc[missing, ["dataset", "split"]]
                                          .itertuples(index=False)]
    ok = (table["status"] == "ok").to_numpy()
    known = table["baseline_rmse"].notna().to_numpy() & ok
    for name, flag in (
            ("trivial", stats.trivial(as_floats(table["test_rmse"]),
                                      as_floats(table["baseline_rmse"]))),
            ("nlpd_above_mean", stats.nlpd_above_mean(as_floats(table["test_nlpd"]),
                                                      as_floats(table["baseline_nlpd"])))):
        table[name] = pd.array([bool(f) if k else pd.NA for f, k in zip(flag, known,
                                                                         strict=True)],
                               dtype="boolean")
    timing = [stats.contended(as_floats(table[wall]), as_floats(table[cpu]),
                              as_floats(table["load_start"]), as_floats(table["load_end"]),
                              as_floats(table["cores"]), as_floats(table[others]))
              for wall, cpu, others in (
                  ("fit_seconds", "fit_cpu_seconds", "other_cores"),
                  ("learning_seconds", "learning_cpu_seconds", "learning_other_cores"))]
    both = np.fmax(timing[0], timing[1])  # either part busy; NaN only if neither is known
    table["contended"] = pd.array([pd.NA if np.isnan(v) or not o else bool(v)
                                   for v, o in zip(both, ok, strict=True)], dtype="boolean")
    # a method learns itself only under the own protocol: elsewhere a peer's record of its
    # training (GPyTorch's SGPR at the shared kernel reports an untrained run as not
    # converged) is not a learning that stopped at its cap
    table.loc[table["mode"].astype(object) != OWN, "converged"] = pd.NA
    return table


_BASELINES: dict[tuple, tuple[float, float]] = {}


def baselines(pairs: list[tuple[str, int]], dataset_options: dict | None = None
              ) -> dict[tuple[str, int], tuple[float, float]]:
    """(test RMSE, test NLPD) of the training-mean predictor per (dataset, split): the data
    set built as the run built it (:func:`pipeline.datasets.build`, in memory: split k, the
    targets standardised with the training rows' mean and sd unless ``dataset_options`` say
    otherwise), predicting ȳ_train with variance var(y_train) on the test rows. Cached per
    (dataset, split, options); a data set that cannot be built here (not shipped, or no
    ``split`` option) is left out."""
    options = {"standardize_y": True, **(dataset_options or {})}
    out = {}
    for dataset, split in pairs:
        key = (dataset, split, tuple(sorted(options.items())))
        if key not in _BASELINES:
            try:
                arrays, _ = build({"name": dataset, "split": split, **options})
            except (InputError, StoreError, KeyError, ValueError):
                continue
            y, test = arrays["y_train"], arrays["y_test"]
            mean = np.full_like(test, y.mean())
            _BASELINES[key] = (rmse(test, mean), gaussian_nlpd(test, mean,
                                                                np.full_like(test, y.var())))
        out[(dataset, split)] = _BASELINES[key]
    return out
