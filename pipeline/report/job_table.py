"""The published table: one row per job and mode of an accuracy-against-time run
(:func:`job_table`, from a results store), its :data:`COLUMNS` and their meaning, read back with
its types (:func:`read_table`), and completed with the baselines and flags the run did not
record (:func:`complete`). :mod:`pipeline.publish` writes it; :mod:`pipeline.report.legs` keeps
a long run's legs in it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.errors import InputError
from pipeline.report.comparison import as_floats

OWN = "own"  # the protocol under which a method learns itself (pipeline.job.protocol)

# The published table: column → (where it comes from: the store's per-job variable or sweep
# dim, or ``=`` and how it is derived; meaning).
COLUMNS: dict[str, tuple[str, str]] = {
    "dataset": ("dataset", "the data set"),
    "split": ("dataset.split", "the train/test split"),
    "seed": ("seed", "the seed of the method's random choices (empty: the job does not depend "
             "on it, or it was not recorded)"),
    "algorithm": ("algorithm", "the method"),
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
}

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
INTEGERS = ("split", "seed", "basis_size", "threads", "cores")
FLAGS = ("contended", "trivial", "nlpd_above_mean", "converged")

# the sweep dims a published table may have: each is a column (any other swept key would be
# averaged away unseen)
PUBLISHED_DIMS = ("algorithm", "dataset", "dataset.split", "algorithm.max_basis", "protocol",
                  "seed")


def job_table(ds, dataset_options: dict | None = None, extra: tuple[str, ...] = ()
              ) -> pd.DataFrame:
    """One row per job of a results Dataset and mode, the :data:`COLUMNS` in order, sorted by
    mode, dataset, algorithm, basis size, split and seed. A key the run fixed rather than
    swept (one split, one mode) is filled from its config; a column the store does not have is
    empty; the flags and missing baselines are filled by :func:`complete`. A job that does not
    depend on the swept seed (the same hash for every seed) is one row with an empty seed.
    ``extra`` names per-job variables of the store appended after the columns (a leg's
    ``job_hash``: :mod:`pipeline.report.legs`). Raises :class:`InputError` for a run that swept
    another key."""
    from pipeline.config import lookup
    from pipeline.results.access import decoded_attrs, tidy

    other = [d for d in ds["job_hash"].dims if d not in PUBLISHED_DIMS and ds.sizes[d] > 1]
    if other:
        raise InputError(f"the run sweeps {', '.join(other)} besides {', '.join(PUBLISHED_DIMS)}"
                         "; the table would average over it: publish a run that fixes it, or "
                         "select one value with python -m pipeline.report --select")
    jobs = tidy(ds, per="job")
    mode_dim = COLUMNS["mode"][0]
    if mode_dim in ds.dims:  # a job that does not depend on the mode: one row under each
        shared = jobs[mode_dim].isna()
        jobs = pd.concat([jobs[~shared]] + [jobs[shared].assign(**{mode_dim: mode})
                                            for mode in ds[mode_dim].values.tolist()])
    for source in PUBLISHED_DIMS:
        if source not in jobs:  # fixed by the run: every job has its config's value
            value = lookup(decoded_attrs(ds)["config"], source)
            jobs[source] = pd.NA if value is None else value
    table = pd.DataFrame({name: _column(jobs, name, source)
                          for name, (source, _) in COLUMNS.items()})
    for name in extra:
        table[name] = jobs[name].to_numpy()
    return complete(typed(table), dataset_options)


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


def read_table(path: str | Path) -> pd.DataFrame:
    """A published table (:func:`job_table` written as CSV) read back with its types: what
    the README is rendered from, so that the committed CSV alone re-renders it. A column the
    CSV lacks (an earlier edition's) is empty."""
    table = pd.read_csv(path, dtype={"cpu_model": str, "status": str})
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
    computed by their rules (:func:`pipeline.report.stats.trivial`,
    :func:`pipeline.report.stats.nlpd_above_mean`, :func:`pipeline.report.stats.contended`)."""
    from pipeline.report import stats

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
    from algorithms.evaluation import gaussian_nlpd, rmse
    from pipeline.datasets import StoreError, build

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
