"""The one line for a file-system error while writing: its real cause, named with the path,
and the fix that cause needs. A full disk is the only error that advises freeing space; a
directory where a file must be (EISDIR), a file where a directory must be (ENOTDIR, EEXIST),
a name too long (ENAMETOOLONG), a link loop (ELOOP) … each says what is in the way.

Building the line never raises: a path the OS cannot even look at (a name longer than the file
system allows, a loop of links) is a part that is not "a file in the way", and any error while
looking gives the generic line with the OS's reason.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

RERUN = "rerun the same command"


def os_reason(err: OSError) -> str:
    """The OS's reason with its symbolic name, e.g. ``Is a directory (EISDIR)``."""
    name = errno.errorcode.get(err.errno or 0)
    return f"{err.strerror or err}" + (f" ({name})" if name else "")


def _is_dir(path: Path) -> bool | None:
    """Whether ``path`` is a directory; None where it does not exist or cannot be looked at
    (ENAMETOOLONG, ELOOP, EACCES: ``Path.exists`` raises for some of them)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None


def file_in_path(path: Path | str) -> Path | None:
    """The first part of ``path``, from the root down, that exists and is not a directory."""
    path = Path(path)
    return next((p for p in reversed([path, *path.parents]) if _is_dir(p) is False), None)


def write_failure(err: OSError, path: Path | str, elsewhere: str = "write elsewhere",
                  rerun: str = RERUN) -> str:
    """``err`` (raised writing ``path``) as ``<cause>; <fix>``: ``elsewhere`` is the command's
    way to write somewhere else (e.g. ``pass another sweep=``), ``rerun`` how to go on once
    the cause is fixed. Never raises (an error message must not become another error)."""
    try:
        return _write_failure(err, path, elsewhere, rerun)
    except Exception:  # noqa: BLE001 -- whatever looking at the path raised
        return (f"cannot write at {path} ({_reason(err)}); {rerun} once that is fixed, or "
                f"{elsewhere}")


def _reason(err: OSError) -> str:
    try:
        return os_reason(err)
    except Exception:  # noqa: BLE001
        return type(err).__name__


def _write_failure(err: OSError, path: Path | str, elsewhere: str, rerun: str) -> str:
    code, reason = err.errno, os_reason(err)
    where = os.fsdecode(err.filename) if err.filename is not None else str(path)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left on the device of {path} ({reason}); free some space (or raise "
                f"the quota) and {rerun}, or {elsewhere}")
    if code == errno.EROFS:
        return f"{path} is on a read-only file system ({reason}); {elsewhere} on a writable one"
    if code in (errno.EACCES, errno.EPERM):
        return (f"{where} is not writable ({reason}); give yourself write permission there and "
                f"{rerun}, or {elsewhere}")
    found = file_in_path(path) or file_in_path(where)
    if code == errno.ENOTDIR or (code == errno.EEXIST and found is not None):
        return (f"{found or where} is a file where a directory must be (to write {path}; "
                f"{reason}); move it away and {rerun}")
    in_the_way = next((Path(os.fsdecode(p)) for p in (err.filename2, err.filename, path)
                       if p is not None and _is_dir(Path(os.fsdecode(p)))), None)
    if code in (errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY) and in_the_way is not None:
        what = "where a file must be" if code == errno.EISDIR else "in the way"
        return (f"{in_the_way} is a directory {what} (to write {path}; {reason}); move it "
                f"away and {rerun}")
    if code == errno.EEXIST:
        return f"{where} is in the way of {path} ({reason}); move it away and {rerun}"
    if code == errno.ENAMETOOLONG:
        return (f"a name in {path} is longer than its file system allows ({reason}; 255 bytes "
                f"a name); use shorter names: {elsewhere}")
    if code == errno.ELOOP:
        return (f"{where} is a symbolic link that loops or may not be followed ({reason}); "
                f"replace it by a directory and {rerun}")
    if code in (errno.EMFILE, errno.ENFILE):
        return (f"too many open files writing {path} ({reason}); raise the limit (ulimit -n) "
                f"and {rerun}")
    if code == errno.EIO:
        return (f"the device of {path} reported an I/O error ({reason}); check the disk or "
                f"network file system and {rerun}")
    if code == errno.ENOENT:
        return (f"{where} does not exist ({reason}; removed while {path} was written?); "
                f"{rerun}")
    return f"cannot write at {path} ({reason}); {rerun} once that is fixed, or {elsewhere}"
