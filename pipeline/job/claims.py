"""Per-job claims, so that sweeps sharing a directory fit each job once.

Before a job runs, its task takes the lease ``<job dir>/claim.lock``
(:class:`pipeline.lease.Lease`: a marker file created exclusively, holding its holder's
host, pid and start time, touched by a heartbeat every :data:`HEARTBEAT_SECONDS`), released
(the marker removed) when the job's result is on disk. A task that finds the job claimed
waits, then looks at the disk (the claimant has usually written the result by then). The lease
is broken, with a ``note:`` line naming the file, at once when its holder's process is gone on
this host, and otherwise once the marker has not changed for :data:`LEASE_SECONDS` on the
waiting process's own clock: a holder that died on another host or hangs, and a marker that is
empty (a crash between its creation and its record), unreadable or garbage. So a killed or
frozen sweep or worker never blocks a rerun for longer than that. The sweep's own lock
(:mod:`pipeline.sweep.manifest`) is the same lease.

Every fit also appends a line to ``<job dir>/fits.log`` (time, host, pid, worker): the record
that a job was fitted once, and of every attempt that died.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.atomic import open_append
from pipeline.lease import lease

CLAIM_FILE = "claim.lock"
FITS_FILE = "fits.log"
HEARTBEAT_SECONDS = 5.0
LEASE_SECONDS = 30.0
POLL_SECONDS = 0.25


@contextmanager
def claim(path: str | os.PathLike) -> Iterator[None]:
    """Hold the lease ``path`` for the duration of the block; waits while another live
    process holds it, at most :data:`LEASE_SECONDS` for a stale one (see the module's
    docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with lease(path, LEASE_SECONDS, HEARTBEAT_SECONDS, POLL_SECONDS):
        yield


def claim_job(job_dir: str | os.PathLike) -> contextlib.AbstractContextManager[None]:
    """Hold the claim on a job's directory (:func:`claim` on ``<job_dir>/claim.lock``)."""
    return claim(Path(job_dir) / CLAIM_FILE)


def record_fit(job_dir: str | os.PathLike, worker: str) -> None:
    """Append one line to the job's ``fits.log``: a fit is starting."""
    line = json.dumps({"time": time.time(), "host": platform.node(), "pid": os.getpid(),
                       "worker": worker})
    with open_append(Path(job_dir) / FITS_FILE) as f:  # a symlink there is not followed
        f.write(line + "\n")


def count_fits(job_dir: str | os.PathLike) -> int:
    """How many fits of this job were started (lines of its ``fits.log``)."""
    try:
        return len((Path(job_dir) / FITS_FILE).read_text().splitlines())
    except FileNotFoundError:
        return 0
