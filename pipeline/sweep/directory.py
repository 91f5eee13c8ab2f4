"""A sweep directory's state checked before anything is written into it: every part of its
path a directory, its ``jobs/`` a directory, and the place it is written to writable with
room for a file. Each problem is one line naming the path and what is wrong with it (a Python
or Hydra traceback, or a misleading "free space", otherwise).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from algorithms.errors import InputError
from pipeline.oserrors import file_in_path, write_failure
from pipeline.outputs import check_job_links
from pipeline.results.ownership import foreign_entry

RERUN = ("rerun the command (a sweep: python -m pipeline resume=last; its finished jobs are "
         "kept)")


class OutOfSpace(InputError):
    """The disk filled up during the sweep: it stopped, the finished jobs are kept and the
    rest run when it is rerun."""


OUT_OF_SPACE = "out_of_space"  # a job's record status: its result could not be written


def out_of_space(err: BaseException) -> bool:
    """Whether ``err`` (an OSError, or a result's WriteError) is a full disk or quota."""
    return getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT)


def check_sweep_directory(sweep_dir: Path) -> None:
    """Raise InputError (one line) unless the sweep can write into ``sweep_dir``: no file in
    its path, its ``jobs/`` and each ``jobs/<hash>`` a directory of its own (not a symbolic
    link, through which the jobs would write elsewhere: :func:`check_job_links`), and room
    for a file where it writes."""
    sweep_dir = Path(sweep_dir)
    part = file_in_path(sweep_dir)
    if part is not None:
        raise InputError(f"{part} is a file, not a directory, so the sweep directory "
                         f"{sweep_dir} cannot be made; move that file away or pass another "
                         "sweep=")
    jobs = sweep_dir / "jobs"
    check_job_links(sweep_dir)
    if os.path.lexists(jobs) and not jobs.is_dir():
        raise InputError(f"{jobs} is not a directory (the sweep keeps one result directory per "
                         "job there); move it away and " + RERUN)
    try:
        target = next(p for p in (jobs, sweep_dir, *sweep_dir.parents) if p.is_dir())
    except OSError as err:  # a name longer than the file system allows, say
        raise write_error(err, sweep_dir) from None
    try:
        with tempfile.NamedTemporaryFile(dir=target, prefix=".write-check-") as probe:
            probe.write(b"x" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as err:
        raise write_error(err, target) from None


# what a sweep writes in its directory: a sweep inside one of these would be deleted or
# overwritten with it (results.zarr is replaced whole by each consolidation)
SWEEP_FILES = ("results.zarr", "jobs", "report", "manifest.json", "multirun.yaml",
               "manifest.multirun.yaml", "sweep.lock", "dask.log")
SWEEP_MARKERS = ("manifest.json", "multirun.yaml")  # a directory holding one is a sweep's


def check_not_nested(sweep_dir: Path, store_root: Path | None = None) -> None:
    """Raise InputError (one line naming both paths) when the sweep directory ``sweep_dir``
    lies inside another sweep's files (its results.zarr, jobs/, report/ …), inside any zarr
    store or the dataset stores' ``store_root``; or when its own results.zarr, which the run
    replaces, holds something consolidation did not write (another sweep's directory)."""
    sweep_dir = Path(sweep_dir).resolve()
    hint = "pass a sweep= of its own beside the others, e.g. sweep=<name>"
    for parent in (sweep_dir, *sweep_dir.parents):
        if parent.suffix == ".zarr":
            raise InputError(f"the sweep directory {sweep_dir} lies inside the zarr store "
                             f"{parent}, which is replaced or rebuilt whole; {hint}")
    if store_root is not None:
        root = Path(store_root).expanduser().resolve()
        if sweep_dir == root or root in sweep_dir.parents:
            raise InputError(f"the sweep directory {sweep_dir} lies inside store_root {root} "
                             f"(the dataset stores); {hint}")
    for parent in sweep_dir.parents:
        if any((parent / marker).is_file() for marker in SWEEP_MARKERS):
            part = parent / sweep_dir.relative_to(parent).parts[0]
            if part.name in SWEEP_FILES:
                raise InputError(f"the sweep directory {sweep_dir} lies inside {part}, a file "
                                 f"of the sweep in {parent}, whose runs rewrite it; {hint}")
    foreign = foreign_entry(sweep_dir / "results.zarr")
    if foreign is not None:
        raise InputError(f"{foreign} lies inside {sweep_dir / 'results.zarr'}, which this "
                         "sweep's run replaces whole; move it out of the store (e.g. into "
                         f"{sweep_dir / 'export'}), then rerun")


def write_error(err: OSError, path: Path | str) -> InputError:
    """The one line for an OSError writing at ``path``: its cause and its fix
    (:func:`pipeline.oserrors.write_failure`)."""
    return InputError(write_failure(err, path, elsewhere="pass another sweep=", rerun=RERUN))
