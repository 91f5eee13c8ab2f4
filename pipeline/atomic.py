"""Writing files so that a reader never sees half of one, and opening bookkeeping files
without following a symlink.

Every output the product writes (reports, figures, tables, publish folders, a sweep's records)
goes through :func:`atomic_path` (or :func:`write_text` / :func:`write_bytes` on top of it): the
content is written to a temporary sibling in the same directory and renamed onto the target
with :func:`os.replace`, so a process killed mid-write leaves the previous file whole (and at
worst a ``.<name>.tmp-…`` sibling, never a truncated target). The rename replaces a symlink at
the target by the new file; it never writes through it.

Bookkeeping files the product appends to (``fits.log``, ``pipeline.log``, ``dask.log``) are
opened with :func:`open_append` (:class:`NoFollowFileHandler` for a log): a symlink there is
replaced by a file of the product's own, never followed to a file elsewhere; :func:`open_nofollow`
refuses one. (The lock files are :mod:`pipeline.lease`'s, created with ``O_EXCL`` and
``O_NOFOLLOW``; the manifest and result files are written by :func:`atomic_path`.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from algorithms.errors import InputError


def temporary_sibling(path: str | os.PathLike) -> Path:
    """A fresh hidden name beside ``path`` with the same suffix (so writers that pick the
    format from it, as matplotlib's ``savefig`` does, still do)."""
    path = Path(path)
    return path.with_name(f".{path.stem}.tmp-{uuid.uuid4().hex[:8]}{path.suffix}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; when the block ends without an
    exception it is renamed onto ``path`` (:func:`os.replace`, atomic on one file system),
    otherwise removed and ``path`` is left as it was."""
    path = Path(path)
    tmp = temporary_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):  # renamed already, or never made
            tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`); returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_path`); returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def save_figure(fig, path: str | os.PathLike, **kwargs) -> Path:
    """``fig.savefig(path, **kwargs)`` atomically (the format from ``path``'s suffix)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or None, **kwargs)
    return path


class SymlinkRefused(InputError):
    """A bookkeeping file is a symlink: the product writes its own files, never through a
    link to another one."""


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)``: a file descriptor, or :class:`SymlinkRefused`
    (one line naming the path) when ``path`` is a symlink."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as err:
        if os.path.islink(path):
            raise symlink_refused(path) from None
        raise err


def symlink_refused(path: str | os.PathLike) -> SymlinkRefused:
    """The one line for a bookkeeping file found to be a symlink."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return SymlinkRefused(f"{path} is a symlink{target}; the product writes "
                          "its own bookkeeping files and never follows a link there; remove "
                          "the link and rerun")


def open_append(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """Open the text file ``path`` for appending (made if missing), never through a symlink:
    a symlink there is replaced by a file of its own (its target untouched) with a ``note:``
    on stderr."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = open_nofollow(path, flags)
    except SymlinkRefused:
        target = os.readlink(path) if os.path.islink(path) else "?"
        os.unlink(path)  # the link itself, not what it points to
        fd = open_nofollow(path, flags | os.O_EXCL)
        print(f"note: {path} was a symlink (to {target}); replaced by a file of its own, "
              "the link's target untouched", file=sys.stderr, flush=True)
    return os.fdopen(fd, "a", encoding=encoding)


class NoFollowFileHandler(logging.FileHandler):
    """:class:`logging.FileHandler` (append mode) whose file is opened by :func:`open_append`:
    a log file that is a symlink is replaced, never written through."""

    def _open(self) -> IO[str]:
        return open_append(self.baseFilename, encoding=self.encoding or "utf-8")

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        """A record the disk refuses (full, gone read-only) is dropped without logging's
        "--- Logging error ---" traceback on stderr: the write that matters (the result, the
        manifest) meets the same error and reports it in one line."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handleError(record)
