"""A lease on a marker file that nothing can hold forever: the job claims and the sweep's lock
(:mod:`pipeline.job.claims`).

The holder creates the marker exclusively (``O_CREAT | O_EXCL``: exactly one creator wins, on
a local or a shared file system, where ``flock`` is not to be trusted across hosts), writes its
record into it (one JSON line: host, pid, the process's start time, when it took the lease,
a random token) and, while it holds the lease, a heartbeat thread touches the marker every
``heartbeat`` seconds. Release removes the marker (only if it is still the holder's own).

A waiter polls. It breaks the marker, with a ``note:`` line on stderr naming it:

- at once, when the record names a process on this host that is gone (or whose pid now
  belongs to a process started later);
- when the marker has not changed (inode, size, modification time) for ``seconds``,
  timed on the waiter's own clock, whatever it holds: a record whose heartbeat stopped (its
  holder died on another host, or is frozen), an empty marker (a crash between its creation
  and its record), a record that cannot be read or is not one.

So a heart-beating holder, on any host, is respected, and no marker makes a waiter wait longer
than ``seconds`` (plus one poll) after it first saw it. Breaking moves the marker aside
under a unique name and removes it only if it is the very marker judged stale (same inode and
modification time); if a peer replaced it meanwhile, that fresh marker is linked back. A path
that is not a regular file (a directory, a symbolic link) was not written by a lease: it is
refused with one line (:class:`~algorithms.errors.InputError`), never removed.

filelock's ``SoftFileLease``, used before, never breaks an empty marker (older filelock
holders kept theirs empty for the whole hold), so a crash between create and write blocked
every later sweep forever; hence this module.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import secrets
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from algorithms.errors import InputError

MAX_RECORD_BYTES = 4096  # a record is ~150 bytes; more is not a record


@dataclass(frozen=True)
class Holder:
    """What a marker's record says of its holder."""

    host: str
    pid: int
    start: float | None  # the process's start time (psutil), against pid reuse
    since: float         # when it took the lease (time.time())
    token: str

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on {self.host}, since {when}"


def _record(token: str) -> bytes:
    pid = os.getpid()
    try:
        start = psutil.Process(pid).create_time()
    except psutil.Error:
        start = None
    return (json.dumps({"host": platform.node(), "pid": pid, "start": start,
                        "since": time.time(), "token": token}) + "\n").encode()


def read_holder(path: Path) -> tuple[Holder | None, str]:
    """The holder a marker names, or None and why it names none (empty, unreadable, ...)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, "gone"
    except OSError as err:
        return None, f"unreadable ({type(err).__name__}: {err.strerror})"
    try:
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError as err:
        return None, f"unreadable ({type(err).__name__}: {err.strerror})"
    finally:
        os.close(fd)
    if not data:
        return None, "empty (left by a crash between its creation and its record)"
    try:
        record = json.loads(data.decode())
        holder = Holder(str(record["host"]), int(record["pid"]),
                        None if record.get("start") is None else float(record["start"]),
                        float(record["since"]), str(record["token"]))
        if not (0 < holder.pid < 2**31 and math.isfinite(holder.since)
                and (holder.start is None or math.isfinite(holder.start))):
            raise ValueError("out of range")
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        size = f"over {MAX_RECORD_BYTES}" if len(data) > MAX_RECORD_BYTES else str(len(data))
        return None, f"not a lock record ({size} bytes)"
    return holder, ""


def holder_is_gone(holder: Holder) -> bool:
    """Whether ``holder`` is a process of this host that no longer runs (its pid free, or
    taken by a process started after it). A holder on another host is never judged gone
    here: only its heartbeat tells."""
    if holder.host != platform.node():
        return False
    try:
        started = psutil.Process(holder.pid).create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # exists, but not ours to inspect
        return False
    return holder.start is not None and abs(started - holder.start) > 1.0


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Lease:
    """An exclusive lease on the marker ``path``; see the module's docstring.

    ``seconds``: how long a marker may stay unchanged before a waiter breaks it;
    ``heartbeat``: seconds between the holder's touches (well below ``seconds``); ``poll``:
    seconds between a waiter's looks."""

    def __init__(self, path: str | os.PathLike, seconds: float, heartbeat: float,
                 poll: float) -> None:
        if not 0 < heartbeat < seconds:
            raise ValueError(f"heartbeat ({heartbeat} s) must be positive and below the lease "
                             f"({seconds} s)")
        self.path = Path(path)
        self.seconds, self.heartbeat, self.poll = seconds, heartbeat, poll
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False  # the marker was broken or replaced while held

    # ------------------------------------------------------------------ holding

    def acquire(self) -> None:
        """Take the lease, waiting while a live holder keeps it (breaking a stale marker)."""
        seen: tuple[tuple[int, int, int, int], float] | None = None  # signature, first seen
        while not self._try_create():
            try:
                st = os.lstat(self.path)
            except FileNotFoundError:
                continue  # released meanwhile: try again at once
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{self.path} is not a lock file (a "
                                 f"{_kind(st.st_mode)}); remove it, then rerun")
            now = time.monotonic()
            if seen is None or seen[0] != _signature(st):
                seen = (_signature(st), now)
            holder, why = read_holder(self.path)
            if holder is not None and holder_is_gone(holder):
                why = f"its holder ({holder.describe()}) is gone"
            elif now - seen[1] >= self.seconds:
                why = (f"its holder ({holder.describe()}) stopped heart-beating" if holder
                       else why) + f": unchanged for {self.seconds:g} s"
            else:
                time.sleep(self.poll)
                continue
            if self._break(seen[0]):
                print(f"note: broke the lock {self.path}: {why}", file=sys.stderr, flush=True)
            seen = None

    def _try_create(self) -> bool:
        token = secrets.token_hex(16)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, _record(token))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        self._fd, self.lost = fd, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(fd, self._stop),
                                        name=f"lease-{self.path.name}", daemon=True)
        self._thread.start()
        return True

    def _beat(self, fd: int, stop: threading.Event) -> None:
        """The heartbeat: touch the marker while it is still this holder's own."""
        while not stop.wait(self.heartbeat):
            if not self._still_ours(fd):
                self.lost = True
                print(f"note: lost the lock {self.path} (broken by another process after its "
                      "heartbeat stalled)", file=sys.stderr, flush=True)
                return
            with contextlib.suppress(OSError):  # a transient error: the next beat retries
                os.utime(fd) if os.utime in os.supports_fd else os.utime(self.path)

    def _still_ours(self, fd: int) -> bool:
        try:
            return os.path.samestat(os.lstat(self.path), os.fstat(fd))
        except OSError:
            return False

    def release(self) -> None:
        """Give the lease back: stop the heartbeat, remove the marker if it is still ours."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        try:
            if self._still_ours(fd):
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ breaking

    def _break(self, stale: tuple[int, int, int, int]) -> bool:
        """Remove the marker judged stale (signature ``stale``); True if this call did."""
        aside = self.path.with_name(f"{self.path.name}.break.{os.getpid()}.{secrets.token_hex(8)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # another waiter broke it, or its holder released it
        try:
            moved = os.lstat(aside)
            if _signature(moved) == stale:
                return True
            # a peer broke it first and took the lease anew: give its marker back (same inode,
            # so its heartbeat goes on); if yet another took the path, that peer's heartbeat
            # sees its marker lost
            with contextlib.suppress(OSError):
                os.link(aside, self.path)
            return False
        finally:
            with contextlib.suppress(OSError):
                aside.unlink()

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


@contextlib.contextmanager
def lease(path: str | os.PathLike, seconds: float, heartbeat: float,
          poll: float) -> Iterator[Lease]:
    """Hold a :class:`Lease` on ``path`` for the duration of the block."""
    with Lease(path, seconds, heartbeat, poll) as held:
        yield held
