"""A finished accuracy-against-time run as a publishable folder (the `uci_frontier` results).

    python -m pipeline.publish outputs/uci_frontier/results.zarr --reference <algorithm>[,…] \
        [--out docs/results]

From the store alone it writes to ``--out``:

- ``uci_frontier.csv`` (the store's sweep name): one row per job, the columns of
  :data:`COLUMNS` in that order (:func:`job_table`);
- the report's frontier figures (one per metric and mode), each PNG checked to be ≤
  :data:`MAX_FIGURE_BYTES`;
- ``README.md`` (:func:`readme`, rendered from the CSV's table, not the store): per mode, the
  setting with the lowest mean test RMSE within each time budget per dataset, as mean ± sd
  over the splits; the ``--reference`` algorithms' RMSE and NLPD per dataset; the figures;
  the ``--notes`` as given; the grid; the machine and threads the jobs ran on; the code
  version; the commands that reproduce the folder.

Running it again on the same store rewrites the same files.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.errors import InputError
from pipeline.command import OneLineParser, fail

USAGE = ("python -m pipeline.publish <results.zarr> --reference <algorithm>[,<algorithm>] "
         "[--out docs/results] [--notes <file.md>]")
MAX_FIGURE_BYTES = 300_000
BUDGETS = (10, 60, 600)

# The published table: column → (the store's per-job variable or sweep dim, meaning).
COLUMNS: dict[str, tuple[str, str]] = {
    "dataset": ("dataset", "the data set"),
    "split": ("dataset.split", "the train/test split"),
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
    "fit_seconds": ("final_seconds", "seconds of the fit"),
    "learning_seconds": ("final_hyper_seconds", "seconds of learning the hyperparameters"),
    "certificate_gap": ("final_gap", "the method's relative duality gap (empty: it has none)"),
    "threads": ("final_blas_threads", "BLAS threads of the job"),
    "cpu_model": ("final_cpu_model", "the machine's CPU"),
}


# the sweep dims a published table may have: each is a column (any other swept key would be
# averaged away unseen)
PUBLISHED_DIMS = ("algorithm", "dataset", "dataset.split", "algorithm.max_basis", "protocol")


def job_table(ds) -> pd.DataFrame:
    """One row per job of a results Dataset and mode, the :data:`COLUMNS` in order, sorted by
    mode, dataset, algorithm, basis size and split. A key the run fixed rather than swept
    (one split, one mode) is filled from its config; a column the store does not have is
    empty. Raises :class:`InputError` for a run that swept another key."""
    from pipeline.results.access import tidy
    from pipeline.sweep.compose import lookup

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
            value = lookup(ds.attrs["config"], source)
            jobs[source] = pd.NA if value is None else value
    table = pd.DataFrame({name: jobs[source] if source in jobs else pd.NA
                          for name, (source, _) in COLUMNS.items()})
    return _integer_columns(table).sort_values(
        ["mode", "dataset", "algorithm", "basis_size", "split"], na_position="first",
        kind="stable").reset_index(drop=True)


def read_table(path: str | Path) -> pd.DataFrame:
    """A published table (:func:`job_table` written as CSV) read back with its types: what
    the README is rendered from, so that the committed CSV alone re-renders it."""
    return _integer_columns(pd.read_csv(path, dtype={"cpu_model": str, "status": str}))


def _integer_columns(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its integer columns (split, basis size, threads) as nullable integers
    (empty where a job has none)."""
    for name in ("split", "basis_size", "threads"):
        table[name] = pd.array(pd.to_numeric(table[name]), dtype="Int64")
    return table


def _hydra_record(results: Path):
    """Hydra's record of the run beside its results (``multirun.yaml``), or None."""
    record = results.parent / "multirun.yaml"
    if not record.exists():
        return None
    from omegaconf import OmegaConf

    return OmegaConf.load(record)


def _run_command(record, sweep: str) -> str:
    """The command line that last ran the sweep, from Hydra's ``record`` of it, or the
    experiment of the sweep's name where there is none."""
    from omegaconf import OmegaConf

    task = (OmegaConf.select(record, "hydra.overrides.task", default=None)
            if record is not None else None)
    if task is not None:
        return "python -m pipeline -m " + " ".join(str(o) for o in task)
    return f"python -m pipeline -m experiment={sweep}"


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


def _settings(table: pd.DataFrame) -> pd.DataFrame:
    """Per mode, dataset and setting (algorithm, basis size): over its finished splits the
    mean cost (fit + learning seconds) and the mean and sd of test RMSE and NLPD."""
    ok = table[table["status"] == "ok"].copy()
    ok["cost"] = ok["fit_seconds"].astype(float) + ok["learning_seconds"].astype(
        float).fillna(0.0)
    ok["basis_size"] = ok["basis_size"].astype("Int64")
    keys = ["mode", "dataset", "algorithm", "basis_size"]
    grouped = ok.groupby(keys, dropna=False)
    out = grouped.agg(cost=("cost", "mean"), rmse=("test_rmse", "mean"),
                      rmse_sd=("test_rmse", "std"), nlpd=("test_nlpd", "mean"),
                      nlpd_sd=("test_nlpd", "std"), splits=("split", "nunique"))
    return out.reset_index()


def _setting(row) -> str:
    size = row["basis_size"]
    return row["algorithm"] + ("" if pd.isna(size) else f" (m = {int(size)})")


def _pm(mean: float, sd: float) -> str:
    if not np.isfinite(mean):
        return "—"
    return f"{mean:.4g}" if not np.isfinite(sd) else f"{mean:.4g} ± {sd:.2g}"


def _modes(table: pd.DataFrame, order: list[str]) -> list:
    """The table's modes, those named in ``order`` first and in that order."""
    held = [m for m in table["mode"].unique().tolist() if not pd.isna(m)]
    return [m for m in order if m in held] + sorted(m for m in held if m not in order) + (
        [pd.NA] if table["mode"].isna().any() else [])


TIE = 1e-3  # settings whose mean RMSE is within this fraction of the best tie: the faster wins


def budget_tables(table: pd.DataFrame, budgets=BUDGETS, order: list[str] = ()) -> str:
    """Markdown, per mode (those of ``order`` first): the setting with the lowest mean test
    RMSE among those whose mean cost is within each budget, per dataset (RMSE mean ± sd over
    splits, mean seconds). Only settings that finished every split the dataset's other
    settings ran compete (a mean over fewer splits is not comparable); they are listed under
    the table. Settings within :data:`TIE` of the lowest RMSE tie, and the faster wins."""
    settings = _settings(table)
    parts = []
    for mode in _modes(table, list(order)):
        by_mode = settings[settings["mode"].isna() if pd.isna(mode) else
                           settings["mode"] == mode]
        lines = [f"**{mode}**" if not pd.isna(mode) else "", "",
                 "| dataset | " + " | ".join(f"≤ {b:g} s" for b in budgets) + " |",
                 "|" + " --- |" * (len(budgets) + 1)]
        fewer = []
        for dataset, rows in by_mode.groupby("dataset", sort=True):
            splits = rows["splits"].max()
            short = rows[rows["splits"] < splits]
            fewer += [f"{_setting(r)} on {dataset} ({r['splits']} of {splits})"
                      for _, r in short.iterrows()]
            rows = rows[rows["splits"] == splits]
            cells = []
            for budget in budgets:
                within = rows[rows["cost"] <= budget].dropna(subset=["rmse"])
                if within.empty:
                    cells.append(f"— (least {rows['cost'].min():.3g} s)")
                    continue
                tied = within[within["rmse"] <= within["rmse"].min() * (1 + TIE)]
                best = tied.loc[tied["cost"].idxmin()]
                cells.append(f"{_setting(best)}: {_pm(best['rmse'], best['rmse_sd'])} in "
                             f"{best['cost']:.3g} s")
            lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
        if fewer:
            lines += ["", "Not ranked, having finished fewer splits: " + "; ".join(fewer) + "."]
        parts.append("\n".join(lines).strip())
    return "\n\n".join(parts)


def references_of(reference: str | Sequence[str]) -> list[str]:
    """``--reference`` as a list: one algorithm, or several separated by commas."""
    names = reference.split(",") if isinstance(reference, str) else list(reference)
    return [name.strip() for name in names if name.strip()]


def reference_table(table: pd.DataFrame, reference: str | Sequence[str],
                    order: Sequence[str] = ()) -> str:
    """Markdown: each ``reference`` algorithm's test RMSE and NLPD (mean ± sd over its
    finished splits) and seconds per mode and dataset (several: e.g. the factored exact GP
    and PCG, where the run factored it on some splits only); one row for the modes
    together (those of ``order`` first) where they ran the same jobs."""
    names = references_of(reference)
    rows = _settings(table)
    rows = rows[rows["algorithm"].isin(names)]
    missing = [name for name in names if name not in set(rows["algorithm"])]
    if missing or not names:
        raise InputError(f"--reference {','.join(names) or repr(reference)}: no finished job of "
                         f"{missing[0] if missing else 'an algorithm'} in the results; pass the "
                         "algorithms the run used as its reference (the full GP, factored or "
                         "by PCG), comma-separated")
    rank = {name: i for i, name in enumerate(names)}
    rows = rows.assign(rank=rows["algorithm"].map(rank)).sort_values(
        ["mode", "dataset", "rank"])
    gaps = _relative_gaps(table, names)
    if _same_in_every_mode(table, names):  # one row for the modes together
        modes = ", ".join(str(m) for m in _modes(table, list(order)))
        first = rows["mode"].iloc[0]
        gaps = {(modes, *key[1:]): gap for key, gap in gaps.items() if key[0] == first}
        rows = rows[rows["mode"] == first].assign(mode=modes)
    lines = ["| mode | dataset | algorithm | test RMSE | test NLPD | seconds | splits | "
             f"max \\|RMSE / RMSE of `{names[0]}` − 1\\| (splits both ran) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for _, r in rows.iterrows():
        size = NO_BASIS if pd.isna(r["basis_size"]) else float(r["basis_size"])
        gap, common = gaps.get((r["mode"], r["dataset"], r["algorithm"], size), (np.nan, 0))
        lines.append(f"| {r['mode']} | {r['dataset']} | {_setting(r)} | "
                     f"{_pm(r['rmse'], r['rmse_sd'])} | {_pm(r['nlpd'], r['nlpd_sd'])} | "
                     f"{r['cost']:.3g} | {r['splits']} | "
                     f"{'–' if not common else f'{gap:.2g} ({common})'} |")
    return "\n".join(lines)


NO_BASIS = -1.0  # the basis-size key of a method without one, in the gaps' keys


def _same_in_every_mode(table: pd.DataFrame, names: list[str]) -> bool:
    """Whether the ``names`` algorithms' rows are the same jobs under every mode (they learn
    nothing themselves): equal RMSE and seconds per dataset, split and basis size."""
    mine = table[table["algorithm"].isin(names)]
    if mine["mode"].nunique() < 2:
        return False
    keys = ["dataset", "algorithm", "basis_size", "split"]
    per_job = mine.groupby(keys, dropna=False)[["status", "test_rmse", "fit_seconds"]]
    return bool((per_job.nunique(dropna=False) <= 1).all().all())


def _relative_gaps(table: pd.DataFrame, names: list[str]) -> dict[tuple, tuple[float, int]]:
    """Per (mode, dataset, algorithm, basis size) of ``names[1:]``: the largest relative
    difference of its test RMSE from ``names[0]``'s (a method without a basis size, the full
    GP) over the splits both finished, and how many there were."""
    ok = table[table["status"] == "ok"].assign(
        basis_size=lambda t: t["basis_size"].astype(float).fillna(NO_BASIS))
    keys = ["mode", "dataset", "split"]
    first = ok[ok["algorithm"] == names[0]].groupby(keys)["test_rmse"].first().rename("a")
    out = {}
    for name in names[1:]:
        other = ok[ok["algorithm"] == name].set_index(keys)
        both = other.join(first, how="inner").dropna(subset=["a", "test_rmse"])
        for (mode, dataset, size), group in both.groupby(["mode", "dataset", "basis_size"]):
            gap = float((group["test_rmse"].astype(float) / group["a"].astype(float) - 1)
                        .abs().max())
            out[(mode, dataset, name, size)] = (gap, len(group))
    return out


def readme(table: pd.DataFrame, *, reference: str | Sequence[str], sweep: str, code_version: str,
           commands: list[str], figures: list[str], mode_order: list[str] = (),
           grid: str | None = None, notes: str | None = None,
           budgets=BUDGETS) -> str:
    """The folder's README.md, from the published table alone (plus what the store says of the
    run: its name, code version and commands, and the figures written beside it); ``grid``
    (YAML: the sweep's grid as recorded) and ``notes`` (markdown written for the run: its
    design, the time it took, comparisons with published tables) are added as given."""
    ran = table[table["status"] == "ok"]
    machines = sorted({str(m) for m in ran["cpu_model"].dropna() if str(m).strip()})
    threads = sorted(int(t) for t in ran["threads"].dropna().unique())
    counts = table["status"].value_counts().to_dict()
    schema = "\n".join(f"| `{name}` | {meaning} |" for name, (_, meaning) in COLUMNS.items())
    return "\n".join([
        f"# Results: {sweep}",
        "",
        f"{len(table)} rows, one per job and mode "
        f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}), over "
        f"{table['dataset'].nunique()} data sets and splits "
        f"{', '.join(str(s) for s in sorted(table['split'].dropna().unique()))}. "
        f"Machine: {', '.join(machines) or 'not recorded'}; BLAS threads per job: "
        f"{', '.join(map(str, threads)) or 'not recorded'}. Code version: `{code_version}`.",
        "",
        "## Best method per time budget",
        "",
        "Lowest mean test RMSE among the settings whose mean seconds (learning + fit) are "
        f"within the budget; RMSE as mean ± sd over the splits. Settings within {TIE:.1%} "
        "of the lowest RMSE tie, and the faster is named.",
        "",
        budget_tables(table, budgets, order=mode_order),
        "",
        f"## The reference ({', '.join(f'`{n}`' for n in references_of(reference))})",
        "",
        reference_table(table, reference, order=mode_order),
        "",
        "## Figures",
        "",
        *[f"![{name}]({name})" for name in figures],
        "",
        *([notes.strip(), ""] if notes else []),
        *(["## The grid", "",
           "The sweeper's `params`, then the union of its `grids` (each `params` with the "
           "entry's values), and the caps on the peers' own protocols (`own`), as the run "
           "recorded them:", "", "```yaml", grid, "```", ""] if grid else []),
        f"## The table: `{sweep}.csv`",
        "",
        "| column | meaning |",
        "| --- | --- |",
        schema,
        "",
        "## Reproduce",
        "",
        "```bash",
        *commands,
        "```",
        "",
    ])


def publish(results: str | Path, out: str | Path, reference: str,
            notes: str | Path | None = None) -> Path:
    """Write the folder (module docstring) for ``results`` into ``out``, with the markdown
    file ``notes`` in its README; returns the README."""
    from pipeline.report.frontier import frontier_figures
    from pipeline.results.consolidate import load

    out = Path(out)
    ds = load(results).load()
    sweep = str(ds.attrs["sweep"])
    table = job_table(ds)
    reference_table(table, reference)  # a bad --reference fails before anything is written
    notes_text = None
    if notes is not None:
        try:
            notes_text = Path(notes).read_text()
        except (OSError, UnicodeDecodeError) as err:
            why = getattr(err, "strerror", None) or err
            raise InputError(f"--notes {notes}: cannot read it ({why}); pass a markdown "
                             "file") from None
    spec = (ds.attrs["config"].get("report") or {}).get("frontier")
    try:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / f"{sweep}.csv", index=False)
        table = read_table(out / f"{sweep}.csv")
        names = []
        if spec is not None:
            scratch = out / ".figures"
            scratch.mkdir(exist_ok=True)
            for figure in frontier_figures(ds, spec, scratch, 1):
                path = Path(figure.path)
                if path.stat().st_size > MAX_FIGURE_BYTES:
                    raise InputError(f"{path.name} is {path.stat().st_size} bytes, above "
                                     f"{MAX_FIGURE_BYTES}; lower the report's dpi")
                shutil.move(path, out / path.name)
                names.append(path.name)
            shutil.rmtree(scratch)
        record = _hydra_record(Path(results))
        commands = [_run_command(record, sweep),
                    f"python -m pipeline.publish outputs/{sweep}/results.zarr "
                    f"--reference {','.join(references_of(reference))} --out {out}"
                    + (f" --notes {notes}" if notes is not None else "")]
        text = readme(table, reference=reference, sweep=sweep,
                      code_version=f"git {ds.attrs['git_sha']}",
                      commands=commands, figures=names, grid=_grid(record),
                      notes=notes_text,
                      mode_order=((spec or {}).get("modes") or {}).get("order") or [],
                      budgets=spec["budgets"] if spec and "budgets" in spec else BUDGETS)
        (out / "README.md").write_text(text)
    except OSError as err:
        raise InputError(f"cannot write {out}: {err.strerror or err}; pass --out a writable "
                         "directory") from None
    return out / "README.md"


def main(argv: list[str] | None = None) -> int:
    """The command line; every failure is one ``error: …`` line on stderr and exit code 2."""
    parser = OneLineParser(prog="python -m pipeline.publish", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("results", help="a finished sweep's results.zarr")
    parser.add_argument("--reference", required=True,
                        help="the algorithm whose jobs are the run's reference (the full GP), "
                             "or several, comma-separated: the factored full GP, then PCG")
    parser.add_argument("--out", default="docs/results", help="the folder to write")
    parser.add_argument("--notes", default=None,
                        help="a markdown file written for the run (its design, the time it "
                             "took, comparisons), put in the README after the figures")
    try:
        args = parser.parse_args(argv)
        path = publish(args.results, args.out, args.reference, args.notes)
    except InputError as err:
        return fail(err)
    print(f"published: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
