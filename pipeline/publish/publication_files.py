"""A publication's files on disk (:mod:`pipeline.publish`): which files in ``--out`` are an
earlier publication's, and the switch of a staged publication into ``--out``.

Ownership. A publication's run record (``<sweep>.run.yaml``) lists every file it wrote
(``files``) and the sha256 of each but itself (``sha256``). Anyone can write such a record, so
it proves nothing by itself: a file counts as the earlier publication's only where its name is
plain and of a kind publish writes (:func:`published_kind`) and the sha256 of its content,
computed now, is the recorded one. A publication into ``--out`` overwrites only such files (or
the CSV and record it re-renders in place: the command names them, as it names a legs folder
kept in ``--out``) and removes only those of them it does not write again. It refuses, in one
line and before writing anything, a non-empty ``--out`` that holds no record of the sweep (a
foreign folder), a file it would overwrite that no record vouches for, and a record whose
files differ from their recorded sha256 (edited since, or not publish's record). A record of
an earlier edition (no ``sha256``) vouches for its files to be overwritten, never removed.

Staging and the switch: the guarantee. Every file is written first into a staging folder
beside ``--out`` (``.<out>.publishing``, on the same file system; ``<out>/.publishing`` where
``--out`` is a mount point) that names who writes it (host, pid): a second publication into
the same ``--out`` at once is refused. Once every file is written and ``--out`` is checked,
the staging folder gets a journal (the files to move in, the earlier files to remove and the
sha256 each must have), then the files are renamed into ``--out``, the run record last, and
the earlier publication's files not written again are removed. A publication that fails or is
killed before its journal leaves ``--out`` as it was (the next one removes its staging
folder). One killed during the switch (a few renames) leaves ``--out`` mixed, with its journal
beside it: the next publication into ``--out`` first completes that switch; until then a
reader can tell the mix by the run record, whose sha256 do not match the files moved in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from algorithms.errors import InputError
from pipeline.atomic import write_text
from pipeline.config.yaml_limits import MAX_YAML_BYTES, yaml_problem
from pipeline.lines import note, one_line
from pipeline.publish.untrusted import MAX_FILE_NAME_BYTES, plain_name, read_regular

RECORD_SUFFIX = ".run.yaml"
OWNER = ".owner.json"  # in the staging folder: who writes it
JOURNAL = ".switch.json"  # in the staging folder: written once every file is, before the switch
LEFTOVER_SECONDS = 60  # a staging folder that names no owner this long: a killed one's
HEX64 = re.compile(r"[0-9a-f]{64}")
FIGURE = re.compile(r"(fig\d+_frontier_|cd_)[\w.\-]+\.png")


def _fix(sweep: str) -> str:
    return f"choose an empty or new --out, or the folder of a previous publication of {sweep}"


def sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def staged(stage: Path) -> list[str]:
    """The publication's files in ``stage`` (not its owner or journal), sorted."""
    return sorted(name for name in os.listdir(stage) if name not in (OWNER, JOURNAL))


def published_kind(name: str, sweep: str) -> bool:
    """Whether ``name`` is of a kind a publication of ``sweep`` writes: its CSVs, its record,
    the README, a frontier figure or a CD diagram."""
    return (name in ("README.md", f"{sweep}.csv", f"{sweep}_settings.csv",
                     f"{sweep}{RECORD_SUFFIX}") or FIGURE.fullmatch(name) is not None)


def inside(out: Path, name: str) -> Path:
    """``out/name`` once ``name`` is plain and the path stays a child of ``out``: every path
    the switch writes or removes."""
    plain_name(name, "a publication's file", limit=MAX_FILE_NAME_BYTES,
               fix="only publish's own files are moved into --out")
    real = out.resolve()
    path = Path(os.path.abspath(real / name))
    if path.parent != real:
        raise InputError(f"{path} is not inside --out {out}; only publish's own files are "
                         "moved into it")
    return path


def _recorded(out: Path, sweep: str, noting: bool, mine: set[str]
              ) -> dict[str, str | None] | None:
    """The files the run record of ``sweep`` in ``out`` vouches for (name → sha256, None where
    the record predates them), each present one checked against its sha256 (but ``mine``:
    the inputs the command names, re-rendered in place whatever they hold); None without a
    record; InputError for a record that fails."""
    record = out / f"{sweep}{RECORD_SUFFIX}"
    if not os.path.lexists(record):
        return None
    refuse = f"move it out of {out}, or {_fix(sweep)}"
    data = read_regular(record, "the run record", refuse, MAX_YAML_BYTES, follow=False)
    problem = yaml_problem(data, str(record))
    try:
        doc = None if problem else yaml.safe_load(data)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        problem = f"{record} is not YAML ({one_line(err)[:80]})"
    files, digests = (doc.get("files") or [], doc.get("sha256")) if isinstance(
        doc, dict) else (None, None)
    if problem or not isinstance(files, list) or not isinstance(digests, (dict, type(None))):
        raise InputError(f"{problem or f'{record} is not a run record publish wrote'}; {refuse}")
    owned: dict[str, str | None] = {record.name: None}
    for name in files:
        if not isinstance(name, str) or not published_kind(name, sweep):
            raise InputError(f"{record} lists {str(name)[:60]!r}, not a file publish writes; "
                             f"{refuse}")
        path = inside(out, name)
        digest = None if digests is None else digests.get(name)
        if name == record.name:
            continue
        if digests is not None and not (isinstance(digest, str) and HEX64.fullmatch(digest)):
            raise InputError(f"{record} lists {name} without its sha256; {refuse}")
        if digest is not None and name not in mine and os.path.lexists(path) and (
                path.is_symlink() or not path.is_file() or sha256(path) != digest):
            raise InputError(f"{path} is not the file publish wrote there (its sha256 is not "
                             f"the one {record.name} records: edited since, or the record is "
                             f"not publish's); move it out of {out} or restore it, or "
                             f"{_fix(sweep)}")
        owned[name] = digest
    if digests is None and noting and len(owned) > 1:
        note(f"{record} records no sha256 of its files (an earlier edition): the files it "
             "lists are overwritten where this publication writes them, and none is removed")
    return owned


def claim(out: Path, sweep: str, new: Iterable[str], inputs: Iterable[str | Path] = (),
          stage: Path | None = None, noting: bool = False) -> dict[str, str]:
    """Check that a publication of ``sweep`` writing the files ``new`` may write into
    ``out`` (module docstring: ownership; ``inputs`` are the CSV and record re-rendered, owned
    where they are in ``out``); returns the earlier files to remove (name → their sha256)."""
    real = out.resolve()
    try:
        entries = set(os.listdir(real)) - ({stage.name} if stage is not None else set())
    except FileNotFoundError:
        return {}
    if not entries:
        return {}
    mine = {Path(p).name for p in inputs if Path(p).resolve().parent == real}
    recorded = _recorded(real, sweep, noting, mine)
    if recorded is None and not mine:
        raise InputError(f"--out {out} is not empty and holds no publication of {sweep} (no "
                         f"{sweep}{RECORD_SUFFIX}); {_fix(sweep)}")
    clash = sorted((set(new) & entries) - set(recorded or {}) - mine)
    if clash:
        more = f" (and {len(clash) - 1} more)" if len(clash) > 1 else ""
        raise InputError(f"--out {out} holds {clash[0]}{more}, which no publication of {sweep} "
                         f"wrote ({sweep}{RECORD_SUFFIX} does not vouch for it); move it away, "
                         f"or {_fix(sweep)}")
    return {name: digest for name, digest in (recorded or {}).items()
            if digest is not None and name not in set(new)}


def stage_path(out: Path) -> Path:
    """Where a publication into ``out`` stages its files: beside ``out``, on its file system
    (inside it where ``out`` is a mount point, so that the renames stay on one)."""
    real = out.resolve()
    if real.is_dir() and real.stat().st_dev != real.parent.stat().st_dev:
        return real / ".publishing"
    return real.parent / f".{real.name}.publishing"


def _at_work(stage: Path) -> str | None:
    """Who may be writing ``stage`` now (words), or None where it is a killed one's."""
    try:
        owner = json.loads(read_regular(stage / OWNER, "owner", "", 4096, follow=False))
        host, pid = str(owner["host"]), int(owner["pid"])
    except (InputError, ValueError, KeyError, TypeError):
        young = time.time() - stage.lstat().st_mtime < LEFTOVER_SECONDS
        return "a publication starting" if young else None
    if host != socket.gethostname():
        return f"pid {pid} on {host}"
    if pid <= 0 or pid == os.getpid():  # this process's own, stopped by an exception
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return f"pid {pid}"


def _journal(stage: Path) -> dict | None:
    """The journal of a switch that began in ``stage``, checked; None where none began."""
    path = stage / JOURNAL
    if not os.path.lexists(path):
        return None
    fix = f"remove {stage} (a publication's staging folder) and publish again"
    try:
        doc = json.loads(read_regular(path, "the journal", fix, 1 << 20, follow=False))
        move, remove = doc["move"], doc["remove"]
        ok = isinstance(move, list) and isinstance(remove, dict) and all(
            isinstance(d, str) and HEX64.fullmatch(d) for d in remove.values())
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise InputError(f"{path} is not a journal publish wrote; {fix}")
    return {"move": move, "remove": remove}


def _move(stage: Path, out: Path, journal: dict) -> None:
    """Rename the journal's files from ``stage`` into ``out`` (those still in ``stage``), then
    remove each earlier file whose content is still the one recorded."""
    for name in journal["move"]:
        target, source = inside(out, name), stage / name
        if os.path.lexists(source):
            if source.is_symlink() or not source.is_file():
                raise InputError(f"{source} is not a regular file; remove {stage} and publish "
                                 "again")
            os.replace(source, target)
    for name, digest in journal["remove"].items():
        path = inside(out, name)
        if not path.is_symlink() and path.is_file() and sha256(path) == digest:
            path.unlink()


def _recover(stage: Path, out: Path) -> None:
    """Complete the switch a killed publication into ``out`` began (its journal in
    ``stage``), or remove its staging folder where none began; InputError where another
    publication may be at work."""
    if not os.path.lexists(stage):
        return
    if stage.is_symlink() or not stage.is_dir():
        raise InputError(f"{stage} is in the way of the staging folder of a publication into "
                         f"{out}; remove it")
    who = _at_work(stage)
    if who is not None:
        raise InputError(f"another publication into {out} is at work ({who}, staging in "
                         f"{stage}); wait for it to end, or remove {stage} if none is")
    journal = _journal(stage)
    if journal is not None:
        _move(stage, out, journal)
        note(f"completed the publication into {out} that was stopped while it moved its files "
             f"in ({stage})")
    shutil.rmtree(stage)


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A new staging folder for a publication into the folder ``out`` (which exists), once
    a killed publication's leftover is completed or removed; removed when the block ends,
    unless a switch began there and failed: the next publication completes it."""
    stage = stage_path(out)
    _recover(stage, out)
    try:
        stage.mkdir()
    except FileExistsError:
        raise InputError(f"another publication into {out} is at work (staging in {stage}); "
                         "wait for it to end") from None
    try:
        write_text(stage / OWNER, json.dumps({"host": socket.gethostname(),
                                              "pid": os.getpid()}))
        yield stage
    finally:
        if stage.is_dir() and not (stage / JOURNAL).exists():
            shutil.rmtree(stage, ignore_errors=True)


def switch(stage: Path, out: Path, sweep: str, inputs: Iterable[str | Path] = ()) -> None:
    """Move the publication staged in ``stage`` into ``out`` (module docstring: the files
    checked by :func:`claim`, the journal, the renames with the run record last, the earlier
    files not written again removed), then remove ``stage``."""
    names = staged(stage)
    record = f"{sweep}{RECORD_SUFFIX}"
    remove = claim(out, sweep, names, inputs, stage, noting=True)
    journal = {"move": [n for n in names if n != record] + [record], "remove": remove}
    for name in journal["move"]:
        inside(out, name)
    write_text(stage / JOURNAL, json.dumps(journal, indent=1))
    _move(stage, out, journal)
    shutil.rmtree(stage, ignore_errors=True)
