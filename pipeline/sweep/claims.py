"""Per-job claims, so that sweeps sharing a directory fit each job once.

Before a job runs, its task creates ``<job dir>/claim.json`` atomically (``O_CREAT | O_EXCL``:
exactly one creator wins, on a local or a shared file system) and keeps it alive by touching it
every :data:`HEARTBEAT_SECONDS`; the claim is removed when the job's result is on disk. A task
that finds the job claimed waits, then looks at the disk (the claimant has usually written the
result by then). A claim is *stale*, and is broken, when its heartbeat is older than
:data:`LEASE_SECONDS` (its process died on another host, or hangs) or when its process is gone
on this host; so a killed sweep or worker never blocks a rerun for long.

Every fit also appends a line to ``<job dir>/fits.log`` (time, host, pid, worker): the record
that a job was fitted once, and of every attempt that died.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CLAIM_FILE = "claim.json"
FITS_FILE = "fits.log"
HEARTBEAT_SECONDS = 5.0
LEASE_SECONDS = 30.0
POLL_SECONDS = 0.25


def _alive_here(info: dict) -> bool:
    """False when the claimant ran on this host and its process is gone."""
    if info.get("host") != platform.node():
        return True
    try:
        os.kill(int(info["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    return True


def _read(path: Path) -> tuple[dict, float] | None:
    """(claim contents, heartbeat time) or None if there is no claim."""
    try:
        mtime = path.stat().st_mtime
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text), mtime
    except ValueError:  # being written: judge by its age only
        return {}, mtime


def _dead_here(info: dict) -> bool:
    return bool(info) and not _alive_here(info)


def _try_create(path: Path, token: str) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({"token": token, "host": platform.node(), "pid": os.getpid(),
                   "since": time.time()}, f)
    return True


def _break(path: Path, seen: dict) -> None:
    """Remove a stale claim, unless another process replaced it in the meantime."""
    aside = path.with_name(f"{CLAIM_FILE}.stale-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    moved = _read(aside)
    if moved is not None and moved[0].get("token") != seen.get("token"):
        try:  # took a fresh claim by mistake: put it back if nobody claimed since
            os.link(aside, path)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)


@contextmanager
def claim(path: str | os.PathLike) -> Iterator[None]:
    """Hold the claim file ``path`` for the duration of the block; waits while another live
    process holds it. A claim is stale when its heartbeat (the file's mtime) has not changed
    for :data:`LEASE_SECONDS` as timed here (no clock is compared with another host's), or at
    once when its process is gone on this host."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    seen: tuple[float, float] | None = None  # (heartbeat seen, when it was first seen here)
    while not _try_create(path, token):
        held = _read(path)
        if held is None:
            continue
        info, mtime = held
        if seen is None or seen[0] != mtime:
            seen = (mtime, time.monotonic())
        if _dead_here(info) or time.monotonic() - seen[1] > LEASE_SECONDS:
            _break(path, info)
            seen = None
        else:
            time.sleep(POLL_SECONDS)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(path)
            except OSError:  # e.g. moved aside for a moment by a process judging it: go on
                continue

    beat = threading.Thread(target=heartbeat, name="claim-heartbeat", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        held = _read(path)
        if held is not None and held[0].get("token") == token:
            path.unlink(missing_ok=True)


def claim_job(job_dir: str | os.PathLike) -> contextlib.AbstractContextManager[None]:
    """Hold the claim on a job's directory (:func:`claim` on ``<job_dir>/claim.json``)."""
    return claim(Path(job_dir) / CLAIM_FILE)


def record_fit(job_dir: str | os.PathLike, worker: str) -> None:
    """Append one line to the job's ``fits.log``: a fit is starting."""
    line = json.dumps({"time": time.time(), "host": platform.node(), "pid": os.getpid(),
                       "worker": worker})
    with open(Path(job_dir) / FITS_FILE, "a") as f:
        f.write(line + "\n")


def count_fits(job_dir: str | os.PathLike) -> int:
    """How many fits of this job were started (lines of its ``fits.log``)."""
    try:
        return len((Path(job_dir) / FITS_FILE).read_text().splitlines())
    except FileNotFoundError:
        return 0
