"""The published folder written: :func:`publish` (from a results store, a folder of a run's
legs, or a published CSV with its ``.run.yaml`` beside it: :func:`publish_table`) reads and
checks its inputs, then :func:`write_folder` writes the folder's files (listed in
:mod:`pipeline.publish.cli`) staged beside ``--out`` and switches them in, overwriting or
removing only files an earlier publication recorded with their sha256
(:mod:`pipeline.publish.publication_files`, which states the guarantee)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from algorithms.errors import InputError
from pipeline.atomic import atomic_path, write_text
from pipeline.config.yaml_limits import load_yaml
from pipeline.oserrors import write_failure
from pipeline.publish import comparison, legs
from pipeline.publish import publication_files as files
from pipeline.publish.comparison import BUDGETS, check_reference, references_of
from pipeline.publish.job_table import complete, job_table, read_table, typed
from pipeline.publish.published import readme
from pipeline.publish.render import (
    beside_text,
    cd_figures,
    check_beside,
    notes_text,
    within_figure_limit,
)
from pipeline.publish.run_record import load_store, run_record
from pipeline.publish.untrusted import check_run, plain_name, regular_file

RUN_SUFFIX = ".run.yaml"  # beside the CSV: what the README needs of the run besides the table
SETTINGS_SUFFIX = "_settings.csv"  # beside the CSV: one row per setting, with CI bounds


def write_folder(out: Path, sweep: str, table: pd.DataFrame, run: dict, reference: str,
                 notes: str | Path | None, beside: Sequence[str | Path] = (),
                 inputs: Sequence[Path] = ()) -> Path:
    """Write the CSV, the run's record, the frontier figures and CD diagrams (both from the
    CSV) and the README into ``out``: staged beside it and switched in once all are written,
    overwriting or removing only an earlier publication's files (``inputs``: the CSV and
    record re-rendered, or the legs folder, owned where they are in ``out``;
    :mod:`pipeline.publish.publication_files` says what is guaranteed)."""
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


class _Block(yaml.SafeDumper):
    """The run's record as YAML, a multi-line string (the grid) as a literal block."""


_Block.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def _write_files(stage: Path, out: Path, sweep: str, table: pd.DataFrame, run: dict,
                 reference: str, notes: str | Path | None, beside: Sequence[str | Path] = ()
                 ) -> None:
    """The files of :func:`write_folder`, written into ``stage``; the README's commands name
    ``out``, where they will be."""
    # deferred: matplotlib, which the command line's checks and errors do without
    from pipeline.publish.table_frontier import frontier_figures

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
        within_figure_limit(Path(figure.path), "the frontier figures'")
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
                  notes=notes_text(notes), mode_order=order,
                  budgets=run.get("budgets") or BUDGETS, cd=cd,
                  beside=beside_text(table, beside))
    write_text(stage / "README.md", text)
    record = stage / f"{sweep}{RUN_SUFFIX}"
    names = files.staged(stage)  # each with its sha256: what a next publication may replace
    run = {**run, "files": sorted({*names, record.name}),
           "sha256": {name: files.sha256(stage / name) for name in names}}
    write_text(record, yaml.dump(run, Dumper=_Block, sort_keys=False, allow_unicode=True))


def publish(results: str | Path, out: str | Path, reference: str,
            notes: str | Path | None = None, beside: Sequence[str | Path] = ()) -> Path:
    """Write the folder (:mod:`pipeline.publish.cli`) for ``results`` (a results store, a
    folder of a run's legs, or a published CSV with its ``.run.yaml`` beside it) into ``out``,
    with the markdown file ``notes`` and the numbers of the ``beside`` files in its README;
    returns the README."""
    if str(results).endswith(".csv"):
        return publish_table(results, out, reference, notes, beside)
    inputs: tuple[Path, ...] = ()  # a legs folder inside --out is no foreign file there
    if Path(results).is_dir() and any(Path(results).glob(f"*{legs.LEG_SUFFIX}")):
        sweep, table, run = legs.read_legs(results)
        table = complete(typed(table))
        run["published_from"], inputs = str(results), (Path(results),)
    else:
        ds, sweep, options = load_store(results)
        table = job_table(ds, options)
        run = run_record(ds, Path(results))
    check_reference(table, reference)  # a bad --reference fails before anything is written
    notes_text(notes)
    check_beside(beside)
    return write_folder(Path(out), sweep, table, run, reference, notes, beside, inputs)


def publish_table(csv: str | Path, out: str | Path, reference: str,
                  notes: str | Path | None = None, beside: Sequence[str | Path] = ()) -> Path:
    """Re-render a published folder from its CSV and the run's record beside it
    (``<sweep>.run.yaml``): the CSV rewritten in the current columns (the baselines and flags
    an earlier edition lacks filled in), every figure and the README, drawn from it."""
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
    notes_text(notes)
    check_beside(beside)
    return write_folder(Path(out), sweep, table, run, reference, notes, beside, (csv, record))
