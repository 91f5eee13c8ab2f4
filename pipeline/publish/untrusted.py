"""Checks on what :mod:`pipeline.publish` reads that it did not write itself: a leg's record, a
run record, a published CSV, ``--notes`` and ``--beside`` files.

Every such input may come from elsewhere (a folder copied from another machine, a clone, a
download), and any checksum in it (a leg's seal, a sha256 a record lists) can be recomputed by
whoever wrote it: it finds accidental damage, it proves nothing. So a name read from one is
used for a file only when :func:`plain_name` accepts it, a file is opened only once
:func:`regular_file` found it regular (a FIFO would block the reader for ever, a device would
stream without end), and a run record's values are checked for their types
(:func:`check_run`) before the README is drawn from them. Each refusal is one line naming the
value and the fix (``InputError``).
"""

from __future__ import annotations

import gzip
import math
import os
import re
import stat
import zlib
from collections.abc import Mapping
from pathlib import Path

from algorithms.errors import InputError
from pipeline.oserrors import os_reason

MAX_NAME_BYTES = 100  # a name read from a record or a table (a sweep, a mode, a data set)
MAX_FILE_NAME_BYTES = 255  # a file name made of such names (the common file-system limit)
PLAIN_NAME = re.compile(r"[\w\-][\w.\-]*")  # one path component, not hidden
# the errors of reading a gzip stream that is cut short or is no gzip at all
GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def plain_name(name: object, what: str, suffix: str = "", limit: int = MAX_NAME_BYTES,
               fix: str = "the file was not written by the product: publish the run's own "
                          "results.zarr") -> str:
    """``name`` when it is a plain file name: one path component (no ``/``, ``\\``, NUL),
    not hidden, no ``..``, at most ``limit`` bytes of UTF-8, ending in ``suffix``; otherwise
    InputError. A name read from a store, a record or a table then never reads or writes
    outside the folder it is joined to."""
    ok = (isinstance(name, str) and PLAIN_NAME.fullmatch(name) is not None and ".." not in name
          and len(name.encode("utf-8", "replace")) <= limit and name.endswith(suffix))
    if not ok:
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise InputError(f"{what} {shown} is not a plain file name (letters, digits, '.', "
                         f"'-', '_', at most {limit} bytes, no '..', not starting with "
                         f"'.'{', ending ' + suffix if suffix else ''}); {fix}")
    return name


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"))
    return next((words for test, words in kinds if test(mode)), "not a file")


def regular_file(path: str | os.PathLike, what: str, fix: str,
                 follow: bool = True) -> Path:
    """``path`` when it is a regular file (a symlink to one where ``follow``), found by
    ``stat`` before anything opens it; otherwise InputError naming what it is and ``fix``."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as err:
        raise InputError(f"{what} {path}: cannot read it ({os_reason(err)}); {fix}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path} is not a regular file (it is {_kind(st.st_mode)}); "
                         f"{fix}")
    return Path(path)


def read_regular(path: str | os.PathLike, what: str, fix: str, limit: int,
                 follow: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (:func:`regular_file`), opened non-blocking and
    checked again once open (it may have been swapped for a FIFO in between); at most
    ``limit`` bytes, else InputError."""
    regular_file(path, what, fix, follow)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (
        0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise InputError(f"{what} {path} is not a regular file; {fix}")
            data = f.read(limit + 1)
    except OSError as err:
        raise InputError(f"{what} {path}: cannot read it ({os_reason(err)}); {fix}") from None
    if len(data) > limit:
        raise InputError(f"{what} {path} is larger than the {limit} bytes read here; {fix}")
    return data


def read_failure(err: BaseException) -> str:
    """Why a file could not be read, in words: a gzip stream cut short or not gzip at all is
    said to be so (its reader says only "Compressed file ended before ...")."""
    text = str(err).splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, GZIP_ERRORS):
        return f"it is truncated or not gzip: {text}"
    return os_reason(err) if isinstance(err, OSError) else text


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _budgets(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in value)


RUN_KEYS = {  # a run record's keys the README is drawn from: (check, what it must be)
    "command": (lambda v: isinstance(v, str), "a string"),
    "code_version": (lambda v: isinstance(v, str), "a string"),
    "grid": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "mode_order": (lambda v: v is None or _strings(v), "a list of strings"),
    "mode_labels": (lambda v: v is None or (isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(t, str) for k, t in v.items())),
        "a mapping of strings to strings"),
    "standardize_y": (lambda v: v is None or isinstance(v, bool), "true or false"),
    "budgets": (lambda v: v is None or _budgets(v), "a list of positive numbers of seconds"),
    "published_from": (lambda v: v is None or isinstance(v, str), "a string"),
}
REQUIRED = ("command", "code_version")


def check_run(run: object, where: str, fix: str) -> dict:
    """``run`` (a run's record: :func:`pipeline.publish.run_record.run_record`, a leg's
    ``run``) when it is a mapping whose :data:`RUN_KEYS` have their types (``command`` and
    ``code_version`` present); otherwise InputError naming ``where``, the key and ``fix``."""
    if not isinstance(run, Mapping):
        raise InputError(f"{where} is not a mapping of a run's record (command, code_version, "
                         f"mode_order, budgets, grid); {fix}")
    for key in REQUIRED:
        if key not in run:
            raise InputError(f"{where} has no {key}; {fix}")
    for key, (ok, words) in RUN_KEYS.items():
        if key in run and not ok(run[key]):
            raise InputError(f"{where}: {key} is {str(run[key])[:60]!r}, not {words}; {fix}")
    return dict(run)
