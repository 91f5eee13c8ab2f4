"""A long run kept in legs: each (data set, split) unit's finished jobs as a small verified
record, published together when the run is done.

A published benchmark of tens of hours outlives the machine (a session, an allocation) whose
``outputs/`` holds it. Each leg keeps what it finished, and the last publishes the union::

    python -m pipeline.publish outputs/<sweep>/results.zarr --legs docs/results/<sweep>_legs
    python -m pipeline.publish docs/results/<sweep>_legs --reference <algorithm> --out docs/results

The first (:func:`save_legs`, each unit by :func:`write_unit`) writes one record
for each (data set, split) whose jobs have all finished (ok or failed, none missing) and that
the folder does not hold yet: ``<dataset>-<split>.csv``, the published table's rows of those
jobs (:data:`pipeline.publish.job_table.COLUMNS`) with each job's name and code versions
(:data:`JOB_COLUMNS`), and ``<dataset>-<split>.leg.json``, sealed (:mod:`pipeline.checksum`):
the CSV's sha256, the run's record (command, grid, modes, budgets), the commit, the number of
jobs and their seconds, when the jobs last ran and when the record was written. A unit is
kept whole: its jobs share the kernel learned once for its data set and split.

The second (:func:`read_legs`) verifies every record (below) and that all were made under
one protocol (modes, labels, budgets, targets) and, job by job, by one code version (each
algorithm's, and the numeric pipeline's: :mod:`pipeline.codeversion`), then gives the union to
:func:`pipeline.publish.folder.publish` as one table. Nothing here overwrites: a unit already in
the folder is left as it is.

A leg folder may come from elsewhere, and its seal is a sha256 anyone can recompute: it finds
accidental damage, it proves nothing. So every value a record carries is checked for what it
may be (:mod:`pipeline.publish.untrusted`: the sweep a plain name, the run's keys their types,
the files regular, never followed through a symlink) and what can be derived from the CSV is
derived from it: its sha256 and, from its rows, the unit and the number of jobs, which must be
the record's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from algorithms.errors import InputError
from pipeline.atomic import atomic_path, write_text
from pipeline.checksum import DamagedFile, open_sealed_json, seal_json
from pipeline.publish.job_table import COLUMNS, job_table, typed
from pipeline.publish.run_record import load_store, run_command, run_record
from pipeline.publish.untrusted import check_run, plain_name, read_failure, read_regular
from pipeline.results.job_file import job_path, load_job_attrs

MAX_RECORD_BYTES = 1 << 20  # a leg's record: its run's command, grid and a few numbers
MAX_CSV_BYTES = 1 << 28  # a unit's rows

LEG_SUFFIX = ".leg.json"
FORMAT = 1
JOB_COLUMNS = ("job_hash", "code_version", "pipeline_code_version")
# what every leg of one published run must share (the run record's keys)
SAME_PROTOCOL = ("mode_order", "mode_labels", "standardize_y", "budgets")


def unit_name(dataset: str, split: int) -> str:
    """The file stem of a unit's record: ``<dataset>-<split>`` (a plain name, or InputError)."""
    name = f"{dataset}-{int(split)}"
    if not re.fullmatch(r"[A-Za-z0-9_][\w.\-]*", name):
        raise InputError(f"data set {dataset!r} does not make a plain file name; legs keep "
                         "data sets whose names are letters, digits, '.', '-' and '_'")
    return name


def finished_units(table: pd.DataFrame) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(complete, incomplete) (data set, split) units of a job table: complete where no job is
    missing (each job ok or failed)."""
    done, partial = [], []
    for (dataset, split), rows in table.groupby(["dataset", "split"], sort=True):
        (partial if rows["status"].eq("missing").any() else done).append((str(dataset),
                                                                           int(split)))
    return done, partial


def is_kept(folder: Path, unit: tuple[str, int]) -> bool:
    """Whether ``folder`` holds ``unit`` already (its CSV or its record)."""
    stem = unit_name(*unit)
    return (folder / f"{stem}.csv").exists() or (folder / f"{stem}{LEG_SUFFIX}").exists()


def write_unit(folder: Path, sweep: str, unit: tuple[str, int], rows: pd.DataFrame,
               run: Mapping, leg: Mapping) -> Path | None:
    """Write the record of ``unit`` (its ``rows``: :data:`COLUMNS` and :data:`JOB_COLUMNS`)
    into ``folder``; None, writing nothing, where the folder holds the unit already."""
    if is_kept(folder, unit):
        return None
    stem = unit_name(*unit)
    csv, record = folder / f"{stem}.csv", folder / f"{stem}{LEG_SUFFIX}"
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(csv) as tmp:
        rows[[*COLUMNS, *JOB_COLUMNS]].to_csv(tmp, index=False)
    doc = {"format": FORMAT, "sweep": sweep, "dataset": unit[0], "split": int(unit[1]),
           "csv": csv.name, "csv_sha256": hashlib.sha256(csv.read_bytes()).hexdigest(),
           "run": dict(run), "jobs": int(rows["job_hash"].nunique()),
           "saved": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **leg}
    write_text(record, seal_json(doc, indent=1).decode() + "\n")
    return record


def save_legs(results: str | Path, folder: str | Path) -> tuple[list, list, list, list]:
    """Keep each finished (data set, split) unit of ``results`` as a leg in ``folder``
    (``python -m pipeline.publish <results.zarr> --legs <folder>``); returns the units (saved,
    already there, unfinished) and (unit, why) of those not saved because their jobs of one
    algorithm ran on two code versions (a point of an earlier command, left from before a code
    change, beside the rerun of the current grid: a leg is one code version)."""
    ds, sweep, options = load_store(results)
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
    run = run_record(ds, Path(results))
    invocations = json.loads(ds.attrs.get("invocations") or "[]")
    done, unfinished = finished_units(table)
    saved, there, mixed = [], [], []
    for unit in done:
        if is_kept(Path(folder), unit):  # left as it is, whatever the store holds now
            there.append(unit)
            continue
        rows = table[(table["dataset"] == unit[0]) & (table["split"] == unit[1])]
        pair = two_code_versions(rows)
        if pair is not None:
            mixed.append((unit, f"{pair[0]['algorithm']} ran on two code versions here, "
                                f"{version_text(pair[0])} and {version_text(pair[1])}"))
            continue
        seconds = float(rows.drop_duplicates("job_hash")["job_seconds"].astype(float).sum())
        ran = [i for i in invocations if set(i.get("ran") or ()) & set(rows["job_hash"])]
        leg = {"commit": str(ds.attrs["git_sha"]), "job_seconds": round(seconds, 1),
               "last_run": max((str(i.get("last_run", "")) for i in ran), default=None)}
        unit_run = {**run, "command": run_command(None, sweep, json.dumps(ran))}
        write_unit(Path(folder), sweep, unit, rows, unit_run, leg)
        saved.append(unit)
    return saved, there, unfinished, mixed


def _open_record(path: Path) -> tuple[dict, pd.DataFrame]:
    """A unit's verified record and its rows (InputError naming the file otherwise)."""
    again = "save the unit again from its results, or leave it out of the folder"
    try:
        doc = open_sealed_json(read_regular(path, "the leg's record", again, MAX_RECORD_BYTES,
                                            follow=False))
    except DamagedFile as err:
        raise InputError(f"{path} {err}: the leg's record is damaged; {again}") from None
    stem = path.name.removesuffix(LEG_SUFFIX)
    unit = (doc.get("dataset"), doc.get("split"))
    if doc.get("format") != FORMAT or doc.get("csv") != f"{stem}.csv" or not isinstance(
            doc.get("run"), dict) or not isinstance(unit[0], str) or not isinstance(
            unit[1], int) or stem != unit_name(*unit):
        raise InputError(f"{path} is not a leg record of this version (format {FORMAT}, csv "
                         f"{stem}.csv); save the unit again with python -m pipeline.publish "
                         "<results.zarr> --legs <folder>")
    plain_name(doc.get("sweep"), f"{path}: its sweep", fix=again)
    check_run(doc["run"], f"{path}: its run", again)
    csv = path.with_name(doc["csv"])
    data = read_regular(csv, "the leg's table", again, MAX_CSV_BYTES, follow=False) if (
        os.path.lexists(csv)) else None
    if data is None or hashlib.sha256(data).hexdigest() != doc.get("csv_sha256"):
        raise InputError(f"{csv} is missing or differs from what its record {path.name} "
                         "sealed; restore it, or save the unit again from its results")
    text = {name: str for name in ("cpu_model", "status", *JOB_COLUMNS)}
    try:
        rows = pd.read_csv(io.BytesIO(data), dtype=text)
        rows = typed(rows.reindex(columns=[*COLUMNS, *JOB_COLUMNS]))
    except (ValueError, TypeError, pd.errors.ParserError) as err:
        raise InputError(f"{csv} is not a leg's table ({read_failure(err)}); {again}") from None
    if not (rows["dataset"].eq(doc["dataset"]).all() and rows["split"].eq(doc["split"]).all()):
        raise InputError(f"{csv} holds rows of another data set or split than its record's "
                         f"({doc['dataset']}, split {doc['split']}); save the unit again")
    if doc.get("jobs") != rows["job_hash"].nunique():  # derived from the rows, not trusted
        raise InputError(f"{csv} holds {rows['job_hash'].nunique()} jobs, its record "
                         f"{path.name} {doc.get('jobs')!r}; {again}")
    return doc, rows


def two_code_versions(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """Two rows whose jobs of one algorithm ran on two code versions, or None (a failed job
    records none: it has no numbers)."""
    versions = rows.dropna(subset=["code_version"]).drop_duplicates(  # failed: none recorded
        ["algorithm", "code_version", "pipeline_code_version"])
    for _, group in versions.groupby("algorithm"):
        if len(group) > 1:
            return group.iloc[0], group.iloc[1]
    return None


def version_text(row: pd.Series) -> str:
    return f"{row['code_version']}/{row['pipeline_code_version']}"


def one_code_version(rows: pd.DataFrame) -> None:
    """InputError naming the algorithm and two units where the legs' jobs of one algorithm ran
    on two code versions."""
    pair = two_code_versions(rows)
    if pair is not None:
        a, b = pair
        raise InputError(
            f"{a['algorithm']} ran on two code versions in these legs: {a['dataset']} split "
            f"{a['split']} ({version_text(a)}) and {b['dataset']} split {b['split']} "
            f"({version_text(b)}); a published run is one code version: run the other units "
            "again on it, or publish them apart")


def _grid(docs: list[dict]) -> str | None:
    """The run's grid: the one every leg recorded, else each grid with the units run under it."""
    grids: dict[str | None, list[str]] = {}
    for doc in docs:
        grids.setdefault(doc["run"].get("grid"), []).append(f"{doc['dataset']}-{doc['split']}")
    if len(grids) == 1:
        return next(iter(grids))
    return "\n".join(f"# units {', '.join(units)}:\n{grid}" for grid, units in grids.items())


def read_legs(folder: str | Path) -> tuple[str, pd.DataFrame, dict]:
    """(sweep, table, run) of the legs in ``folder``: every record verified, one protocol and
    one code version checked, the rows' union (:data:`COLUMNS`), and the run's record with the
    grid, the commands and commits of its legs and a ``legs`` list (unit, commit, jobs, job
    seconds, last run, saved)."""
    folder = Path(folder)
    paths = sorted(folder.glob(f"*{LEG_SUFFIX}"))
    if not paths:
        raise InputError(f"{folder} holds no leg ({LEG_SUFFIX}); save them with python -m "
                         "pipeline.publish <results.zarr> --legs <folder>")
    docs, tables = zip(*(_open_record(p) for p in paths), strict=True)
    first = docs[0]
    for doc, path in zip(docs, paths, strict=True):
        if doc["sweep"] != first["sweep"]:
            raise InputError(f"{path} is a leg of sweep {doc['sweep']!r}, {paths[0].name} of "
                             f"{first['sweep']!r}; keep one run's legs in a folder")
        for key in SAME_PROTOCOL:
            if doc["run"].get(key) != first["run"].get(key):
                raise InputError(f"{path.name} and {paths[0].name} differ in {key}: legs of one "
                                 "published run share its protocol; publish them apart")
    rows = pd.concat(tables, ignore_index=True)
    one_code_version(rows)
    run = {key: first["run"].get(key) for key in SAME_PROTOCOL}
    run["command"] = "; then ".join(dict.fromkeys(d["run"]["command"] for d in docs))
    run["code_version"] = ", ".join(dict.fromkeys(d["run"]["code_version"] for d in docs))
    run["grid"] = _grid(list(docs))
    run["legs"] = [{k: d.get(k) for k in ("dataset", "split", "commit", "jobs", "job_seconds",
                                           "last_run", "saved")} for d in docs]
    table = rows[list(COLUMNS)].copy()
    return str(first["sweep"]), table, run
