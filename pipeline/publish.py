"""A finished accuracy-against-time run as a publishable folder (the `uci_frontier` results).

    python -m pipeline.publish outputs/uci_frontier/results.zarr --reference <algorithm>[,…]
    python -m pipeline.publish docs/results/uci_frontier.csv --reference … [--out …]

From the store it writes to ``--out`` (default ``outputs/published``; the project's published
results are written with ``--out docs/results``, a directory given explicitly):

- ``uci_frontier.csv`` (the sweep's name): one row per job and mode, :data:`COLUMNS`
  (:func:`job_table`; missing baselines and the ``trivial``/``contended`` flags: :func:`complete`);
- ``uci_frontier_settings.csv``: one row per setting, each mean with its corrected 95 % t
  interval's bounds over the splits (:func:`pipeline.report.comparison.settings_table`);
- ``uci_frontier.run.yaml``: the run's command, code version, grid, modes, budgets, figures;
- frontier figures drawn from the CSV (per mode, metric, and fit-only or learning + fit
  seconds; only settings with no trivial or failed split: :mod:`pipeline.report.table_frontier`)
  and a critical-difference diagram per mode and metric (:func:`cd_figures`), each PNG checked
  to be ≤ :data:`MAX_FIGURE_BYTES`;
- ``README.md`` (:func:`readme`; :mod:`pipeline.report.comparison`, :mod:`~.ranking`): the
  ranks, the best per budget, every setting against the reference, the flags' rules, numbers
  published elsewhere (``--beside``, :mod:`pipeline.report.elsewhere`), notes, grid, commands.

Given a published CSV (with its ``.run.yaml`` beside it) instead of a store, it rewrites the
CSV in the current columns and draws every figure and the README again from it.

``--out`` is a new or empty folder or an earlier publication's: the files are staged beside it
and switched in, overwriting or removing only files an earlier publication recorded with their
sha256 (:mod:`pipeline.report.publication_files`, which states the guarantee). Every input is
untrusted (:mod:`pipeline.report.untrusted`): names read from records are plain, inputs that
are not regular files are refused before they are opened.

A run longer than the life of the machine that holds its ``outputs/`` is published from its
legs (:mod:`pipeline.report.legs`): after each leg, ``--legs <folder>`` keeps every finished
(data set, split) of the store as a small verified record; the folder, given in place of the
store, publishes their union, checked to be one protocol and one code version::

    python -m pipeline.publish outputs/uci_frontier/results.zarr \
        --legs docs/results/uci_frontier_legs
    python -m pipeline.publish docs/results/uci_frontier_legs --reference <algorithm> \
        --out docs/results
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from algorithms.errors import InputError
from pipeline.atomic import atomic_path, write_text
from pipeline.command import OneLineParser, fail
from pipeline.oserrors import write_failure
from pipeline.report import comparison, legs, ranking
from pipeline.report import publication_files as files
from pipeline.report.comparison import (  # noqa: F401  (the published tables, re-exported)
    BUDGETS,
    as_floats,
    check_reference,
    reference_table,
    references_of,
)
from pipeline.report.job_table import (  # noqa: F401  (the published table, re-exported)
    COLUMNS,
    DERIVED,
    FLAGS,
    INTEGERS,
    PUBLISHED_DIMS,
    baselines,
    complete,
    job_table,
    read_table,
    typed,
)
from pipeline.report.ranking import budget_tables  # noqa: F401  (re-exported)
from pipeline.report.untrusted import check_run, plain_name, read_regular, regular_file

USAGE = ("python -m pipeline.publish <results.zarr | legs folder | published.csv> --reference "
         "<algorithm>[,<algorithm>] [--out docs/results] [--notes <file.md>] [--beside "
         "<file.csv> …]; or "
         "python -m pipeline.publish <results.zarr> --legs <folder>")
DEFAULT_OUT = "outputs/published"  # under outputs/, as every default output; --out elsewhere
MAX_FIGURE_BYTES = 300_000
MAX_NOTES_BYTES = 1 << 22  # a --notes file: markdown written for the run


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


def cd_figures(table: pd.DataFrame, out: Path, order: Sequence[str] = (),
               solvers: Sequence[str] = ()) -> dict:
    """Draw the CD diagram (:mod:`pipeline.report.critical_difference`) of every mode and
    metric with enough entries (:func:`pipeline.report.ranking.ranks`, the exact GP's
    ``solvers`` one entry) into ``out``; (mode, metric) → the file's name."""
    from pipeline.report.critical_difference import cd_diagram

    names = {}
    for mode in comparison.modes(table, order):
        for metric, (_, words) in comparison.METRICS.items():
            result = ranking.ranks(table, mode, metric, solvers)
            if not len(result.ranks):
                continue
            tag = "all" if pd.isna(mode) else str(mode)
            labels = [name.split(" [")[0] for name in result.names]
            path = cd_diagram(labels, result.ranks, result.cd,
                              out / f"cd_{tag}_{metric}.png",
                              title=f"{tag}: average rank of {words} over {result.n} "
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
    """The ``--notes`` file's text; a FIFO, a device or a directory is refused before it is
    opened (:func:`~pipeline.report.untrusted.read_regular`: reading one would block)."""
    if notes is None:
        return None
    data = read_regular(notes, "--notes", "pass a markdown file", MAX_NOTES_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"--notes {notes}: cannot read it ({err.reason} at byte {err.start}); "
                         "pass a markdown file in UTF-8") from None


def _check_beside(beside: Sequence[str | Path]) -> None:
    """Read every ``--beside`` file (each checked, :func:`~pipeline.report.elsewhere.
    read_beside`): a bad one fails before anything is written; they are rendered once, from
    the written CSV, by :func:`_beside_text`."""
    if beside:
        from pipeline.report.elsewhere import read_beside

        for path in beside:
            read_beside(path)


def _beside_text(table: pd.DataFrame, beside: Sequence[str | Path]) -> str | None:
    """The tables of numbers published elsewhere (:mod:`pipeline.report.elsewhere`) from the
    ``--beside`` files, one after another; None without any."""
    if not beside:
        return None
    from pipeline.report.elsewhere import beside_tables, read_beside

    return "\n\n".join(beside_tables(table, read_beside(path)) for path in beside)


RUN_SUFFIX = ".run.yaml"  # beside the CSV: what the README needs of the run besides the table
SETTINGS_SUFFIX = "_settings.csv"  # beside the CSV: one row per setting, with CI bounds


def _write(out: Path, sweep: str, table: pd.DataFrame, run: dict, reference: str,
           notes: str | Path | None, beside: Sequence[str | Path] = (),
           inputs: Sequence[Path] = ()) -> Path:
    """Write the CSV, the run's record, the frontier figures and CD diagrams (both from the
    CSV) and the README into ``out``: staged beside it and switched in once all are written,
    overwriting or removing only an earlier publication's files (``inputs``: the CSV and
    record re-rendered, or the legs folder, owned where they are in ``out``;
    :mod:`pipeline.report.publication_files` says what is guaranteed)."""
    sweep = plain_name(sweep, "the sweep name", fix="name the sweep (or the published CSV) "
                                                    "with letters, digits, '.', '-', '_'")
    for mode in table["mode"].dropna().unique().tolist():  # they name figure files
        plain_name(str(mode), "the table's mode")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with files.staging(out) as stage:
            files.claim(out, sweep, (), inputs, stage)  # a foreign --out: before any figure
            _write_files(stage, out, sweep, table, run, reference, notes, beside)
            files.switch(stage, out, sweep, inputs)
    except OSError as err:
        raise InputError(f"cannot write {out}: " + write_failure(
            err, out, elsewhere="pass --out a writable directory", rerun="rerun")) from None
    return out / "README.md"


def _write_files(stage: Path, out: Path, sweep: str, table: pd.DataFrame, run: dict,
                 reference: str, notes: str | Path | None, beside: Sequence[str | Path] = ()
                 ) -> None:
    """The files of :func:`_write`, written into ``stage``; the README's commands name
    ``out``, where they will be."""
    import yaml

    from pipeline.report.table_frontier import frontier_figures

    names = references_of(reference)
    with atomic_path(stage / f"{sweep}.csv") as tmp:
        table.to_csv(tmp, index=False)
    table = read_table(stage / f"{sweep}.csv")
    with atomic_path(stage / f"{sweep}{SETTINGS_SUFFIX}") as tmp:
        comparison.settings_table(table).to_csv(tmp, index=False)
    order = run.get("mode_order") or []
    figures = frontier_figures(table, stage, run.get("budgets") or BUDGETS, order,
                               run.get("mode_labels"), run.get("standardize_y", True))
    for figure in figures:
        _within_figure_limit(Path(figure.path), "the frontier figures'")
    run = {**run, "figures": [Path(f.path).name for f in figures]}
    cd = cd_figures(table, stage, order, names)
    extra = (f" --notes {notes}" if notes is not None else "") + "".join(
        f" --beside {path}" for path in beside)
    commands = [run["command"],
                f"python -m pipeline.publish "
                f"{run.get('published_from') or f'outputs/{sweep}/results.zarr'} "
                f"--reference {','.join(names)} --out {out}{extra}",
                f"# or, from the published table and {sweep}{RUN_SUFFIX} alone:",
                f"python -m pipeline.publish {out}/{sweep}.csv --reference {','.join(names)} "
                f"--out {out}{extra}"]
    text = readme(table, reference=names, sweep=sweep, code_version=run["code_version"],
                  commands=commands, figures=figures, grid=run.get("grid"),
                  notes=_notes_text(notes), mode_order=order,
                  budgets=run.get("budgets") or BUDGETS, cd=cd,
                  beside=_beside_text(table, beside))
    write_text(stage / "README.md", text)

    class Block(yaml.SafeDumper):  # a multi-line string (the grid) as a literal block
        pass

    Block.add_representer(str, lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))
    record = stage / f"{sweep}{RUN_SUFFIX}"
    names = files.staged(stage)  # each with its sha256: what a next publication may replace
    run = {**run, "files": sorted({*names, record.name}),
           "sha256": {name: files.sha256(stage / name) for name in names}}
    write_text(record, yaml.dump(run, Dumper=Block, sort_keys=False, allow_unicode=True))


def _run_record(ds, results: Path) -> dict:
    """What the README needs of the run besides its table: the commands, the code version, the
    modes, budgets and grid (from the store's attrs and Hydra's record beside it)."""
    from pipeline.config import lookup

    standardize = lookup(config := ds.sgp.attrs["config"], "dataset.standardize_y")
    spec = (config.get("report") or {}).get("frontier") or {}
    record = _hydra_record(results)
    modes = spec.get("modes") or {}
    return {"command": _run_command(record, str(ds.attrs["sweep"]), ds.attrs.get("invocations")),
            "code_version": f"git {ds.attrs['git_sha']}",
            "mode_order": list(modes.get("order") or []),
            "mode_labels": {str(k): str(v) for k, v in (modes.get("labels") or {}).items()},
            "standardize_y": standardize is None or bool(standardize),
            "budgets": list(spec.get("budgets") or BUDGETS), "grid": _grid(record)}


def _store(results: str | Path):
    """The verified store, its sweep's plain name and its job table's dataset options."""
    from pipeline.config import lookup
    from pipeline.results.consolidate import load

    ds = load(results).load()
    sweep = plain_name(str(ds.attrs["sweep"]), f"{results}: its sweep name")
    standardize = lookup(ds.sgp.attrs["config"], "dataset.standardize_y")
    return ds, sweep, None if standardize is None else {"standardize_y": standardize}


def publish(results: str | Path, out: str | Path, reference: str,
            notes: str | Path | None = None, beside: Sequence[str | Path] = ()) -> Path:
    """Write the folder (module docstring) for ``results`` (a results store, a folder of a
    run's legs, or a published CSV with its ``.run.yaml`` beside it) into ``out``, with the
    markdown file ``notes`` and the numbers of the ``beside`` files in its README; returns the
    README."""
    if str(results).endswith(".csv"):
        return publish_table(results, out, reference, notes, beside)
    inputs: tuple[Path, ...] = ()  # a legs folder inside --out is no foreign file there
    if Path(results).is_dir() and any(Path(results).glob(f"*{legs.LEG_SUFFIX}")):
        sweep, table, run = legs.read_legs(results)
        table = complete(typed(table))
        run["published_from"], inputs = str(results), (Path(results),)
    else:
        ds, sweep, options = _store(results)
        table = job_table(ds, options)
        run = _run_record(ds, Path(results))
    check_reference(table, reference)  # a bad --reference fails before anything is written
    _notes_text(notes)
    _check_beside(beside)
    return _write(Path(out), sweep, table, run, reference, notes, beside, inputs)


def save_legs(results: str | Path, folder: str | Path) -> tuple[list, list, list, list]:
    """Keep each finished (data set, split) unit of ``results`` as a leg in ``folder``
    (:mod:`pipeline.report.legs`); returns the units (saved, already there, unfinished) and
    (unit, why) of those not saved because their jobs of one algorithm ran on two code
    versions (a point of an earlier command, left from before a code change, beside the rerun
    of the current grid: a leg is one code version)."""
    from pipeline.results.job_file import job_path, load_job_attrs

    ds, sweep, options = _store(results)
    table = job_table(ds, options, extra=("job_hash", "job_seconds"))
    versions = {}
    for name in table["job_hash"].dropna().unique().tolist():
        try:
            attrs = load_job_attrs(path := job_path(Path(results).parent, str(name)))
        except FileNotFoundError:
            raise InputError(f"{path} is missing: a leg is saved from a sweep's own "
                             "results.zarr, its jobs/ beside it; run the sweep again") from None
        versions[name] = (attrs.get("code_version"), attrs.get("pipeline_code_version"))
    table["code_version"] = [versions.get(h, (None, None))[0] for h in table["job_hash"]]
    table["pipeline_code_version"] = [versions.get(h, (None, None))[1]
                                      for h in table["job_hash"]]
    run = _run_record(ds, Path(results))
    invocations = json.loads(ds.attrs.get("invocations") or "[]")
    done, unfinished = legs.finished_units(table)
    saved, there, mixed = [], [], []
    for unit in done:
        if legs.is_kept(Path(folder), unit):  # left as it is, whatever the store holds now
            there.append(unit)
            continue
        rows = table[(table["dataset"] == unit[0]) & (table["split"] == unit[1])]
        pair = legs.two_code_versions(rows)
        if pair is not None:
            mixed.append((unit, f"{pair[0]['algorithm']} ran on two code versions here, "
                                f"{legs.version_text(pair[0])} and {legs.version_text(pair[1])}"))
            continue
        seconds = float(rows.drop_duplicates("job_hash")["job_seconds"].astype(float).sum())
        ran = [i for i in invocations if set(i.get("ran") or ()) & set(rows["job_hash"])]
        leg = {"commit": str(ds.attrs["git_sha"]), "job_seconds": round(seconds, 1),
               "last_run": max((str(i.get("last_run", "")) for i in ran), default=None)}
        unit_run = {**run, "command": _run_command(None, sweep, json.dumps(ran))}
        legs.write_unit(Path(folder), sweep, unit, rows, unit_run, leg)
        saved.append(unit)
    return saved, there, unfinished, mixed


def publish_table(csv: str | Path, out: str | Path, reference: str,
                  notes: str | Path | None = None, beside: Sequence[str | Path] = ()) -> Path:
    """Re-render a published folder from its CSV and the run's record beside it
    (``<sweep>.run.yaml``): the CSV rewritten in the current columns (the baselines and flags
    an earlier edition lacks filled in), every figure and the README, drawn from it."""
    import yaml

    from pipeline.config.yaml_limits import load_yaml

    csv, out = Path(csv), Path(out)
    sweep = csv.name.removesuffix(".csv")
    record = csv.with_name(f"{sweep}{RUN_SUFFIX}")
    if not csv.exists():
        raise InputError(f"{csv} does not exist; pass a published table (<sweep>.csv)")
    fix = (f"publish the run's results.zarr once, or write {record.name} beside the table "
           "(command, code_version, mode_order, budgets, grid)")
    if not record.exists():
        raise InputError(f"{record} does not exist; {fix}")
    regular_file(csv, "the published table", "pass a published table (<sweep>.csv)")
    try:  # size, depth and aliases bounded (pipeline.config.yaml_limits); a FIFO refused
        run = check_run(load_yaml(record), str(record), fix)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise InputError(f"{record} is not YAML ({str(err).splitlines()[0]}); {fix}") from None
    table = complete(read_table(csv))
    check_reference(table, reference)
    _notes_text(notes)
    _check_beside(beside)
    return _write(Path(out), sweep, table, run, reference, notes, beside, (csv, record))


def main(argv: list[str] | None = None) -> int:
    """The command line; every failure is one ``error: …`` line on stderr and exit code 2."""
    parser = OneLineParser(prog="python -m pipeline.publish", description=__doc__,
                           usage_line=USAGE)
    parser.add_argument("results", help="a finished sweep's results.zarr, a folder of a run's "
                                        "legs, or a published table (<sweep>.csv, its "
                                        "<sweep>.run.yaml beside it)")
    parser.add_argument("--reference",
                        help="the algorithm whose jobs are the run's reference (the full GP), "
                             "or several, comma-separated: the factored full GP, then PCG")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"the folder to write (default {DEFAULT_OUT}; the published "
                             "results: --out docs/results)")
    parser.add_argument("--notes", default=None,
                        help="a markdown file written for the run (its design, the time it "
                             "took, comparisons), put in the README after the figures")
    parser.add_argument("--beside", action="append", default=[], metavar="FILE.csv",
                        help="numbers published elsewhere to set beside the run's, one row "
                             "each (pipeline.report.elsewhere: source, data set, their method, "
                             "metric, mean, sd, trials, the setting of this run, where read); "
                             "repeat for several files")
    parser.add_argument("--legs", default=None,
                        help="instead of publishing: keep each finished (data set, split) of "
                             "the store as a leg in this folder (pipeline.report.legs)")
    try:
        args = parser.parse_args(argv)
        if args.legs is not None:
            return _print_legs(args.legs, *save_legs(args.results, args.legs))
        if args.reference is None:
            raise InputError("--reference is missing: name the run's reference algorithm(s), "
                             "the full GP's (or pass --legs <folder> to keep legs)")
        path = publish(args.results, args.out, args.reference, args.notes, args.beside)
    except InputError as err:
        return fail(err)
    except (TypeError, ValueError, KeyError) as err:  # a table this code did not foresee
        return fail(InputError(
            f"cannot publish {args.results} with --reference {args.reference}: "
            f"{type(err).__name__}: {err}; check that the run finished the reference's jobs on "
            "every data set (python -m pipeline.report <results.zarr>), else report this line"))
    print(f"published: {path}")
    return 0


def _print_legs(folder: str, saved: list, there: list, unfinished: list, mixed: list) -> int:
    def units(pairs: list) -> str:
        return ", ".join(f"{d} split {s}" for d, s in pairs) or "none"

    print(f"legs in {folder}: saved {units(saved)}; already there (left as they are): "
          f"{units(there)}; unfinished (jobs missing; not saved): {units(unfinished)}")
    for (dataset, split), why in mixed:
        print(f"error: {dataset} split {split} not saved: {why} (a point of an earlier "
              "command beside the rerun of the current grid); run the unit again in a fresh "
              "sweep directory (sweep=<name>)", file=sys.stderr)
    return 1 if mixed else 0


if __name__ == "__main__":
    sys.exit(main())
