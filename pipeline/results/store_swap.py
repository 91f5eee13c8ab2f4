"""Replacing a zarr store whole (a sweep's ``results.zarr``, a combined store) so that a
process killed at any point leaves a store a reader can trust, or a clear line.

The new copy is written to a temporary sibling (``<store>.tmp-…``), read back, and swapped in
with two renames: the old store aside (``<store>.old-…``), the new one into place; then the old
one is removed. Before anything is written the names of both are recorded beside the store in
``<store>.swap`` (:func:`swap_record`). A kill therefore leaves one of:

- the old store in place (killed while the new copy was written): readers read it;
- no store, the old one aside (killed between the renames): a reader says in one line that
  consolidation was interrupted and that rerunning the sweep completes it
  (:func:`interrupted`);
- the new store in place (killed while the old one was removed): readers read it.

The next replacement (the sweep's rerun, under its directory's lock) first puts a store set
aside back and removes the siblings the record names (:func:`recover`): only what the record
says this code wrote is ever removed, and a store holding what it did not write is refused
(:func:`pipeline.results.ownership.foreign_entry`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from algorithms.errors import InputError
from pipeline import atomic
from pipeline.oserrors import write_failure
from pipeline.results.job_file import WriteError
from pipeline.results.ownership import foreign_entry, record_written

if TYPE_CHECKING:
    import xarray as xr


def swap_record(path: Path) -> Path:
    """Where the replacement of the store ``path`` records its temporary and old copies."""
    return path.with_name(f"{path.name}.swap")


def _recorded(path: Path) -> tuple[Path, Path] | None:
    """(new copy, old copy) that the swap record of ``path`` names; None when there is no
    record, or one that is unreadable or names anything but ``path``'s own siblings (never
    followed: only what this module names is removed)."""
    try:
        record = json.loads(swap_record(path).read_text())
        new, old = record["new"], record["old"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    for name, kind in ((new, "tmp"), (old, "old")):
        if not (isinstance(name, str) and name.startswith(f"{path.name}.{kind}-")
                and "/" not in name and os.sep not in name):
            return None
    return path.with_name(new), path.with_name(old)


def interrupted(path: Path) -> Path | None:
    """The swap record of ``path`` when a replacement of that store stopped between its
    renames (no store at ``path``; its old copy set aside): what a reader names. None
    otherwise."""
    if os.path.lexists(path):
        return None
    record = swap_record(path)
    return record if os.path.lexists(record) else None


def recover(path: Path) -> None:
    """Finish what a killed replacement of ``path`` left (the caller holds the lock that
    serialises replacements): a store set aside is put back where there is none, then the
    temporary and old copies the record names are removed, and the record."""
    record = swap_record(path)
    if not os.path.lexists(record):
        return
    named = _recorded(path)
    if named is not None:
        new, old = named
        if not os.path.lexists(path) and old.is_dir() and not old.is_symlink():
            os.rename(old, path)  # the previous store, whole: the rebuild starts from it
        for leftover in (new, old):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover)
    record.unlink()


class Swap:
    """One replacement of the store at ``path`` by ``ds``: :meth:`steps` does it a step at a
    time (a test stops after any step, as a kill would), :meth:`undo` puts things back after
    an exception."""

    def __init__(self, path: Path) -> None:
        self.path = path
        token = uuid.uuid4().hex[:8]
        self.tmp = path.with_name(f"{path.name}.tmp-{token}")
        self.old = path.with_name(f"{path.name}.old-{token}")
        self.record = swap_record(path)
        self.recorded = self.moved_old = False

    def steps(self, ds: xr.Dataset, check: Callable[[Path], None] | None) -> Iterator[str]:
        """Write, check and swap in the new store; yields the name of each step done."""
        foreign = foreign_entry(self.path)  # removed with the old copy: refuse instead
        if foreign is not None:
            raise InputError(f"{foreign} lies inside {self.path}, which is replaced whole; "
                             f"move it out of the store (e.g. beside it, into "
                             f"{self.path.parent}), then rerun")
        atomic.write_text(self.record, json.dumps({"new": self.tmp.name,
                                                   "old": self.old.name}))
        self.recorded = True
        yield "recorded"
        ds.to_zarr(self.tmp, mode="w", zarr_format=2, consolidated=True)
        record_written(self.tmp)
        if check is not None:
            check(self.tmp)
        yield "written"
        if os.path.lexists(self.path):
            os.rename(self.path, self.old)
            self.moved_old = True
            yield "moved aside"
        os.rename(self.tmp, self.path)
        yield "moved in"
        if self.moved_old:
            shutil.rmtree(self.old, ignore_errors=True)
            yield "old removed"
        self.record.unlink()
        yield "done"

    def undo(self) -> None:
        """After an exception: the old store back in place if it was set aside and the new
        one is not there, the temporary copy removed, and this swap's record (kept where the
        old store could not be put back, for :func:`recover`)."""
        if self.moved_old and not os.path.lexists(self.path):
            with contextlib.suppress(OSError):
                os.rename(self.old, self.path)
        for leftover in (self.tmp, self.old if os.path.lexists(self.path) else None):
            if leftover is not None and leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
        if self.recorded and (not self.moved_old or os.path.lexists(self.path)):
            with contextlib.suppress(OSError):
                self.record.unlink(missing_ok=True)


def replace_store(ds: xr.Dataset, path: str | os.PathLike, *,
                  check: Callable[[Path], None] | None = None) -> Path:
    """Write ``ds`` as the zarr store ``path`` (format 2, consolidated metadata, the list of
    files it wrote: :func:`pipeline.results.ownership.record_written`), replacing the store
    there whole, as the module docstring says; ``check(tmp)`` reads the written copy back
    before it replaces anything.

    Raises :class:`InputError` when the store there holds what it did not write (nothing is
    touched), :class:`~pipeline.results.job_file.WriteError` naming ``path`` and the OS's
    reason when the write fails: the store already there is then left as it was and no
    temporary sibling remains."""
    path = Path(path)
    swap = Swap(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        recover(path)
        for _ in swap.steps(ds, check):
            pass
    except OSError as err:
        swap.undo()
        raise WriteError(f"cannot write {path}: " + write_failure(
            err, path, elsewhere=f"make {path.parent} writable", rerun="rerun"),
                         err.errno) from None
    except BaseException:
        swap.undo()
        raise
    return path
