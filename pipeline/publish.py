"""A finished accuracy-against-time run as a publishable folder (the `uci_frontier` results).

    python -m pipeline.publish outputs/uci_frontier/results.zarr --reference <algorithm>[,…]
    python -m pipeline.publish docs/results/uci_frontier.csv --reference … [--out …]

From the store it writes to ``--out`` (default ``outputs/published``; the project's published
results are written with ``--out docs/results``, a directory given explicitly):

- ``uci_frontier.csv`` (the sweep's name): one row per job and mode, :data:`COLUMNS`
  (:func:`job_table`; missing baselines and the ``trivial``/``contended`` flags: :func:`complete`);
- ``uci_frontier_settings.csv``: one row per setting, each mean with its 95 % t interval's
  bounds over the splits (:func:`pipeline.report.comparison.settings_table`);
- ``uci_frontier.run.yaml``: the run's command, code version, grid, modes, budgets, figures;
- frontier figures drawn from the CSV (per mode, metric, and fit-only or learning + fit
  seconds; only ranked settings: :mod:`pipeline.report.table_frontier`) and a
  critical-difference diagram per mode and metric (:func:`cd_figures`), each PNG checked to
  be ≤ :data:`MAX_FIGURE_BYTES`;
- ``README.md`` (:func:`readme`, from the CSV's table by :mod:`pipeline.report.comparison`):
  means with 95 % t intervals, the best per budget with paired-t ties, every setting against
  the reference, ranks across sets, the flags' rules, the notes, grid, machine and commands.

Given a published CSV (with its ``.run.yaml`` beside it) instead of a store, it rewrites the
CSV in the current columns and draws every figure and the README again from it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.errors import InputError
from pipeline.atomic import atomic_path, write_text
from pipeline.command import OneLineParser, fail
from pipeline.oserrors import write_failure
from pipeline.report import comparison
from pipeline.report.comparison import (  # noqa: F401  (the published tables, re-exported)
    BUDGETS,
    as_floats,
    budget_tables,
    check_reference,
    reference_table,
    references_of,
)

USAGE = ("python -m pipeline.publish <results.zarr | published.csv> --reference "
         "<algorithm>[,<algorithm>] [--out docs/results] [--notes <file.md>]")
DEFAULT_OUT = "outputs/published"  # under outputs/, as every default output; --out elsewhere
MAX_FIGURE_BYTES = 300_000

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
    "contended": ("= stats.contended", "whether the job's seconds were measured on a busy "
                  "machine (the rule is in the README; empty: not recorded)"),
    "baseline_rmse": ("final_baseline_test_rmse", "test RMSE of the training-mean predictor "
                      "on the job's test rows (from the data where the run did not record it)"),
    "baseline_nlpd": ("final_baseline_test_nlpd", "test NLPD of the mean predictor's Gaussian "
                      "N(ȳ_train, var(y_train))"),
    "trivial": ("= stats.trivial", "whether the job's predictor is no better than the "
                "training mean (the rule is in the README); a trivial job's setting is never "
                "ranked"),
    "converged": ("final_own_converged", "whether a method's own learning met its stopping "
                  "rule (empty: it learns nothing itself, or not recorded)"),
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
FLAGS = ("contended", "trivial", "converged")

# the sweep dims a published table may have: each is a column (any other swept key would be
# averaged away unseen)
PUBLISHED_DIMS = ("algorithm", "dataset", "dataset.split", "algorithm.max_basis", "protocol",
                  "seed")


def job_table(ds, dataset_options: dict | None = None) -> pd.DataFrame:
    """One row per job of a results Dataset and mode, the :data:`COLUMNS` in order, sorted by
    mode, dataset, algorithm, basis size, split and seed. A key the run fixed rather than
    swept (one split, one mode) is filled from its config; a column the store does not have is
    empty; the flags and missing baselines are filled by :func:`complete`. A job that does not
    depend on the swept seed (the same hash for every seed) is one row with an empty seed. Raises
    :class:`InputError` for a run that swept another key."""
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
    return complete(_typed(table), dataset_options)


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
    return _typed(table.reindex(columns=list(COLUMNS)))


def _typed(table: pd.DataFrame) -> pd.DataFrame:
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
    (:func:`baselines`), and its ``trivial`` and ``contended`` flags computed by their rules
    (:func:`pipeline.report.stats.trivial`, :func:`pipeline.report.stats.contended`)."""
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
    flag = stats.trivial(*(as_floats(table[c]) for c in
                           ("test_rmse", "test_nlpd", "baseline_rmse", "baseline_nlpd")))
    known = table["baseline_rmse"].notna().to_numpy() & ok
    table["trivial"] = pd.array([bool(f) if k else pd.NA for f, k in zip(flag, known,
                                                                           strict=True)],
                                dtype="boolean")
    timing = [stats.contended(as_floats(table[wall]), as_floats(table[cpu]),
                              as_floats(table["load_start"]), as_floats(table["load_end"]),
                              as_floats(table["cores"]))
              for wall, cpu in (("fit_seconds", "fit_cpu_seconds"),
                                ("learning_seconds", "learning_cpu_seconds"))]
    both = np.fmax(timing[0], timing[1])  # either part busy; NaN only if neither is known
    table["contended"] = pd.array([pd.NA if np.isnan(v) or not o else bool(v)
                                   for v, o in zip(both, ok, strict=True)], dtype="boolean")
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


def _hydra_record(results: Path):
    """Hydra's record of the run beside its results (``multirun.yaml``), or None."""
    if not (record := results.parent / "multirun.yaml").exists():
        return None
    from omegaconf import OmegaConf

    from pipeline.config.yaml_limits import load_yaml

    load_yaml(record)  # size, depth and aliases bounded before OmegaConf copies them
    return OmegaConf.load(record)


def _run_command(record, sweep: str, invocations: str | None = None) -> str:
    """The command lines that made the sweep (its ``invocations`` attr: a merged sweep's every
    command, joined by "; then "), else the one in Hydra's ``record``, else its experiment."""
    from omegaconf import OmegaConf

    task = None if record is None else OmegaConf.select(record, "hydra.overrides.task")
    tasks = [c for c in (i.get("command") for i in json.loads(invocations or "[]"))
             if isinstance(c, list) and c] or ([task] if task is not None else [])
    return "; then ".join("python -m pipeline -m " + " ".join(str(o) for o in t)
                          for t in tasks) or f"python -m pipeline -m experiment={sweep}"


def _grid(record) -> str | None:
    """The run's grid in Hydra's ``record`` of it: the sweeper's ``params`` and ``grids`` and
    the ``own`` caps, as YAML; None without a record."""
    if record is None:
        return None
    import yaml
    from omegaconf import OmegaConf

    grid = {key: OmegaConf.select(record, path, default=None) for key, path in
            (("params", "hydra.sweeper.params"), ("grids", "hydra.sweeper.grids"),
             ("own", "own"))}
    grid = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
            for k, v in grid.items() if v is not None}
    return yaml.safe_dump(grid, sort_keys=False, allow_unicode=True).strip()


def _within_figure_limit(path: Path, whose: str) -> None:
    """Raise the one-line error for a PNG above :data:`MAX_FIGURE_BYTES` (``whose`` dpi to
    lower)."""
    size = path.stat().st_size
    if size > MAX_FIGURE_BYTES:
        raise InputError(f"{path.name} is {size} bytes, above {MAX_FIGURE_BYTES}; lower "
                         f"{whose} dpi")


def cd_figures(table: pd.DataFrame, out: Path, order: Sequence[str] = ()) -> dict:
    """Draw the CD diagram (:mod:`pipeline.report.critical_difference`) of every mode and
    metric with enough methods into ``out``; (mode, metric) → the file's name."""
    from pipeline.report.critical_difference import cd_diagram

    names = {}
    for mode in comparison.modes(table, order):
        for metric, (_, words) in comparison.METRICS.items():
            result = comparison.ranks(table, mode, metric)
            if not len(result["ranks"]):
                continue
            tag = "all" if pd.isna(mode) else str(mode)
            path = cd_diagram(result["names"], result["ranks"], result["cd"],
                              out / f"cd_{tag}_{metric}.png",
                              title=f"{tag}: average rank of {words} over {result['n']} "
                                    "data sets")
            _within_figure_limit(path, "the CD diagram's")
            names[(tag, metric)] = path.name
    return names


def readme(table: pd.DataFrame, **kwargs) -> str:
    """The folder's README.md from the published ``table`` alone
    (:func:`pipeline.report.published.readme`, with the schema :data:`COLUMNS`)."""
    from pipeline.report.published import readme as render

    return render(table, columns=COLUMNS, **kwargs)


def _notes_text(notes: str | Path | None) -> str | None:
    if notes is None:
        return None
    try:
        return Path(notes).read_text()
    except (OSError, UnicodeDecodeError) as err:
        why = getattr(err, "strerror", None) or err
        raise InputError(f"--notes {notes}: cannot read it ({why}); pass a markdown "
                         "file") from None


RUN_SUFFIX = ".run.yaml"  # beside the CSV: what the README needs of the run besides the table
SETTINGS_SUFFIX = "_settings.csv"  # beside the CSV: one row per setting, with CI bounds


def _write(out: Path, sweep: str, table: pd.DataFrame, run: dict, reference: str,
           notes: str | Path | None) -> Path:
    """Write the CSV, the run's record, the frontier figures and CD diagrams (both from the
    CSV) and the README into ``out``."""
    for mode in table["mode"].dropna().unique().tolist():  # they name figure files
        _plain_name(str(mode), "the table's mode")
    try:
        out.mkdir(parents=True, exist_ok=True)
        return _write_files(out, sweep, table, run, reference, notes)
    except OSError as err:
        raise InputError(f"cannot write {out}: " + write_failure(
            err, out, elsewhere="pass --out a writable directory", rerun="rerun")) from None


def _write_files(out: Path, sweep: str, table: pd.DataFrame, run: dict, reference: str,
                 notes: str | Path | None) -> Path:
    import yaml

    from pipeline.report.table_frontier import frontier_figures

    names = references_of(reference)
    with atomic_path(out / f"{sweep}.csv") as tmp:
        table.to_csv(tmp, index=False)
    table = read_table(out / f"{sweep}.csv")
    with atomic_path(out / f"{sweep}{SETTINGS_SUFFIX}") as tmp:
        comparison.settings_table(table).to_csv(tmp, index=False)
    order = run.get("mode_order") or []
    figures = frontier_figures(table, out, run.get("budgets") or BUDGETS, order,
                               run.get("mode_labels"), run.get("standardize_y", True))
    for figure in figures:
        _within_figure_limit(Path(figure.path), "the frontier figures'")
    run = {**run, "figures": [Path(f.path).name for f in figures]}

    class Block(yaml.SafeDumper):  # a multi-line string (the grid) as a literal block
        pass

    Block.add_representer(str, lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))
    write_text(out / f"{sweep}{RUN_SUFFIX}", yaml.dump(run, Dumper=Block, sort_keys=False,
                                                       allow_unicode=True))
    cd = cd_figures(table, out, order)
    commands = [run["command"],
                f"python -m pipeline.publish outputs/{sweep}/results.zarr "
                f"--reference {','.join(names)} --out {out}"
                + (f" --notes {notes}" if notes is not None else ""),
                f"# or, from the published table and {sweep}{RUN_SUFFIX} alone:",
                f"python -m pipeline.publish {out}/{sweep}.csv --reference {','.join(names)} "
                f"--out {out}" + (f" --notes {notes}" if notes is not None else "")]
    text = readme(table, reference=names, sweep=sweep, code_version=run["code_version"],
                  commands=commands, figures=figures, grid=run.get("grid"),
                  notes=_notes_text(notes), mode_order=order,
                  budgets=run.get("budgets") or BUDGETS, cd=cd)
    write_text(out / "README.md", text)
    return out / "README.md"


def _plain_name(name: str, what: str, suffix: str = "") -> str:
    """``name`` when it is a plain file name (no directory part, not hidden, ending in
    ``suffix``): a name read from a store or a record never writes or reads elsewhere."""
    if not re.fullmatch(r"[\w\-][\w.\-]*", name) or not name.endswith(suffix):
        raise InputError(f"{what} {name!r} is not a plain file name (letters, digits, '.', "
                         f"'-', '_'{', ending ' + suffix if suffix else ''}); the file was "
                         "not written by the product: publish the run's own results.zarr")
    return name


def publish(results: str | Path, out: str | Path, reference: str,
            notes: str | Path | None = None) -> Path:
    """Write the folder (module docstring) for ``results`` (a results store, or a published
    CSV with its ``.run.yaml`` beside it) into ``out``, with the markdown file ``notes`` in
    its README; returns the README."""
    if str(results).endswith(".csv"):
        return publish_table(results, out, reference, notes)
    from pipeline.config import lookup
    from pipeline.results.consolidate import load

    out = Path(out)
    ds = load(results).load()
    sweep = _plain_name(str(ds.attrs["sweep"]), f"{results}: its sweep name")
    standardize = lookup(config := ds.sgp.attrs["config"], "dataset.standardize_y")
    table = job_table(ds, None if standardize is None else {"standardize_y": standardize})
    check_reference(table, reference)  # a bad --reference fails before anything is written
    _notes_text(notes)
    spec = (config.get("report") or {}).get("frontier") or {}
    record = _hydra_record(Path(results))
    modes = spec.get("modes") or {}
    run = {"command": _run_command(record, sweep, ds.attrs.get("invocations")),
           "code_version": f"git {ds.attrs['git_sha']}",
           "mode_order": list(modes.get("order") or []),
           "mode_labels": {str(k): str(v) for k, v in (modes.get("labels") or {}).items()},
           "standardize_y": standardize is None or bool(standardize),
           "budgets": list(spec.get("budgets") or BUDGETS), "grid": _grid(record)}
    return _write(out, sweep, table, run, reference, notes)


def publish_table(csv: str | Path, out: str | Path, reference: str,
                  notes: str | Path | None = None) -> Path:
    """Re-render a published folder from its CSV and the run's record beside it
    (``<sweep>.run.yaml``): the CSV rewritten in the current columns (the baselines and flags
    an earlier edition lacks filled in), every figure and the README, drawn from it."""
    from pipeline.config.yaml_limits import load_yaml

    csv, out = Path(csv), Path(out)
    sweep = csv.name.removesuffix(".csv")
    record = csv.with_name(f"{sweep}{RUN_SUFFIX}")
    if not csv.exists():
        raise InputError(f"{csv} does not exist; pass a published table (<sweep>.csv)")
    if not record.exists():
        raise InputError(f"{record} does not exist; publish the run's results.zarr once, or "
                         f"write {record.name} beside the table (command, code_version, "
                         "mode_order, budgets, grid)")
    run = load_yaml(record)  # size, depth and aliases bounded (pipeline.config.yaml_limits)
    table = complete(read_table(csv))
    check_reference(table, reference)
    _notes_text(notes)
    return _write(Path(out), sweep, table, run, reference, notes)


def main(argv: list[str] | None = None) -> int:
    """The command line; every failure is one ``error: …`` line on stderr and exit code 2."""
    parser = OneLineParser(prog="python -m pipeline.publish", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("results", help="a finished sweep's results.zarr, or a published "
                                        "table (<sweep>.csv, its <sweep>.run.yaml beside it)")
    parser.add_argument("--reference", required=True,
                        help="the algorithm whose jobs are the run's reference (the full GP), "
                             "or several, comma-separated: the factored full GP, then PCG")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"the folder to write (default {DEFAULT_OUT}; the published "
                             "results: --out docs/results)")
    parser.add_argument("--notes", default=None,
                        help="a markdown file written for the run (its design, the time it "
                             "took, comparisons), put in the README after the figures")
    try:
        args = parser.parse_args(argv)
        path = publish(args.results, args.out, args.reference, args.notes)
    except InputError as err:
        return fail(err)
    except (TypeError, ValueError, KeyError) as err:  # a table this code did not foresee
        return fail(InputError(
            f"cannot publish {args.results} with --reference {args.reference}: "
            f"{type(err).__name__}: {err}; check that the run finished the reference's jobs on "
            "every data set (python -m pipeline.report <results.zarr>), else report this line"))
    print(f"published: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
