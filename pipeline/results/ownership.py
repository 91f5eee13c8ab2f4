"""What a results store holds that consolidation did not write.

``results.zarr`` is replaced whole by each consolidation (the previous copy renamed aside and
removed), so anything else inside it (another sweep's directory, a user's file, a table
exported into it) would be removed with it. :func:`foreign_entry` finds such a thing, so that
the sweep and the consolidation refuse to run instead.

A store records the files it was written with in :data:`WRITTEN` (a JSON list of paths
relative to the store, :func:`record_written`), so that a file is the store's only when the
store wrote it, whatever its name; a store written before that list was kept is judged by
the names zarr gives its files (metadata files and chunk keys).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from pipeline import atomic

ARRAY_OR_GROUP = (".zarray", ".zgroup", "zarr.json")  # what marks a zarr array or group
WRITTEN = ".written.json"  # inside the store: the files consolidation wrote there
ZARR_METADATA = (".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json")
CHUNK_KEY = re.compile(r"\d+(\.\d+)*")  # a zarr format 2 chunk's name: 0, 0.3, 1.0.2


def record_written(store: str | os.PathLike) -> list[str]:
    """Write :data:`WRITTEN` into ``store`` (just written, not yet in place): every file in it,
    relative to it, sorted. Returns that list."""
    store = Path(store)
    files = sorted((Path(top) / name).relative_to(store).as_posix()
                   for top, _, names in os.walk(store) for name in names)
    atomic.write_text(store / WRITTEN, json.dumps(files))
    return files


def written(store: Path) -> set[str] | None:
    """The files ``store`` records it was written with; None when it keeps no such list (an
    older store) or the list cannot be read: its files are then judged by their names."""
    try:
        files = json.loads((store / WRITTEN).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return set(files)


def foreign_entry(store: str | os.PathLike) -> Path | None:
    """The first path inside the zarr store ``store`` that consolidation did not write
    there: a symlink, a directory that is no zarr array or group (another sweep's directory,
    a user's folder), or a file the store's :data:`WRITTEN` list does not name (without a
    list: a file whose name zarr never gives one). None when there is none, or no store. A
    store that is itself a symlink is foreign: its target is never read or removed."""
    store = Path(store)
    if store.is_symlink():
        return store
    if not store.is_dir():
        return None
    known = written(store)
    for top, dirs, files in os.walk(store):
        here = Path(top)
        for name in sorted(dirs + files):
            if (here / name).is_symlink():
                return here / name
        if here != store and not any(marker in files for marker in ARRAY_OR_GROUP):
            return here
        for name in sorted(files):
            relative = (here / name).relative_to(store).as_posix()
            if relative == WRITTEN:
                continue
            if (relative not in known) if known is not None else not _zarr_name(name):
                return here / name
    return None


def _zarr_name(name: str) -> bool:
    """Whether zarr names a file of an array or group so (its metadata, a chunk)."""
    return name in ZARR_METADATA or CHUNK_KEY.fullmatch(name) is not None


def not_a_file(path: str | os.PathLike) -> str | None:
    """What is wrong with ``path`` (where a job's ``result.nc`` goes) when something other
    than a regular file is there: a directory (a user's, or a copy gone wrong), a FIFO, a
    socket or a device, which no job wrote, which a job's result cannot replace and which
    reading would fail on (or, a FIFO, hang on); said with its fix. None for a file or for
    nothing there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # nothing there (or unreadable: reading it says why)
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"is a directory, not a job's result file (remove it: rm -r {path})"
    return f"is not a regular file (a FIFO, socket or device), not a job's result file " \
           f"(remove it: rm {path})"


def enclosing_store(path: str | os.PathLike) -> Path | None:
    """The zarr store (a ``*.zarr`` directory: a sweep's ``results.zarr``, a dataset store)
    that ``path`` lies inside, if any: a file written there would make the store's next
    replacement refuse (:func:`foreign_entry`), so writers of tables and copies refuse it."""
    for parent in Path(path).absolute().parents:
        if parent.suffix == ".zarr":
            return parent
    return None


def inside_store_error(path: str | os.PathLike, store: Path, flag: str = "") -> str:
    """The one line refusing to write ``path`` inside ``store`` (``flag``: the option that
    named it, e.g. ``--out``), with where to write it instead."""
    beside = store.parent / "export" / Path(path).name
    return (f"{flag + ' ' if flag else ''}{path} lies inside the zarr store {store}, which "
            "is replaced whole when it is rebuilt (and is not rebuilt while it holds a file "
            f"it did not write); write it beside the store instead, e.g. {beside}")
