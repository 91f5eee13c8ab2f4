"""Nothing waits forever on a lock (issue 51, class 4): a job's ``claim.lock`` and a sweep's
``sweep.lock`` that are empty, unreadable, garbage or whose heartbeat stopped are broken
within the lease (:data:`pipeline.job.claims.LEASE_SECONDS`, shortened here) with a
``note:`` naming the file; a heart-beating holder is respected; a holder gone on this host is
broken at once; a path that is no lock file is refused in one line, never removed."""

import json
import os
import platform
import subprocess
import sys
import threading
import time

import psutil
import pytest

from algorithms.errors import InputError
from pipeline import lease
from pipeline.job import claims
from pipeline.job.claims import CLAIM_FILE, claim, claim_job
from pipeline.sweep.manifest import SWEEP_LOCK, sweep_lock

LEASE = 1.0  # the lease in these tests: seconds, not the product's 30


@pytest.fixture(autouse=True)
def short_lease(monkeypatch):
    monkeypatch.setattr(claims, "LEASE_SECONDS", LEASE)
    monkeypatch.setattr(claims, "HEARTBEAT_SECONDS", 0.2)
    monkeypatch.setattr(claims, "POLL_SECONDS", 0.05)


def _old(path):
    """Give ``path`` an old modification time (irrelevant: waiters time on their own clock)."""
    os.utime(path, (time.time() - 3600, time.time() - 3600))


def _timed(enter):
    start = time.monotonic()
    with enter:
        held = time.monotonic() - start
    return held


def _record(pid, host=None, start=None):
    return json.dumps({"host": host or platform.node(), "pid": pid, "start": start,
                       "since": time.time(), "token": "x" * 32}) + "\n"


STALE_CONTENTS = {
    "empty": (b"", "empty"),
    "garbage": (b"\x00\xffnot a record\n", "not a lock record"),
    "json but no record": (b'{"pid": "twelve"}\n', "not a lock record"),
    "huge": (b"x" * 100_000, "not a lock record (over"),
    "another host's record": (_record(4242, host="elsewhere.example").encode(),
                              "stopped heart-beating"),
    "filelock's record": (b"filelock/2\npid=1\nhost=h\nmode=lease\n", "not a lock record"),
}


@pytest.mark.parametrize("kind", list(STALE_CONTENTS))
@pytest.mark.parametrize("which", ["claim", "sweep"])
def test_a_stale_lock_is_broken_within_the_lease_with_a_note(tmp_path, capsys, kind, which):
    content, why = STALE_CONTENTS[kind]
    path = tmp_path / (CLAIM_FILE if which == "claim" else SWEEP_LOCK)
    path.write_bytes(content)
    _old(path)
    waited = _timed(claim_job(tmp_path) if which == "claim" else sweep_lock(tmp_path))
    assert LEASE * 0.9 <= waited < LEASE + 2.0  # the lease, not forever, not at once
    err = capsys.readouterr().err
    assert f"note: broke the lock {path}" in err and why in err, err
    assert not path.exists()  # released
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing left aside


def test_an_unreadable_lock_is_broken_within_the_lease(tmp_path, capsys, monkeypatch):
    path = tmp_path / CLAIM_FILE
    path.write_text(_record(os.getpid()))
    real_open = os.open

    def refuse(p, flags, *args):
        if str(p) == str(path) and not flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, flags, *args)

    monkeypatch.setattr(lease.os, "open", refuse)  # root may read any file: simulate it
    assert LEASE * 0.9 <= _timed(claim(path)) < LEASE + 2.0
    err = capsys.readouterr().err
    assert f"note: broke the lock {path}: unreadable (PermissionError" in err, err


def test_a_lock_whose_holder_is_gone_on_this_host_is_broken_at_once(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / CLAIM_FILE
    path.write_text(_record(dead.pid))
    assert _timed(claim(path)) < LEASE / 2
    assert "is gone" in capsys.readouterr().err


def test_a_reused_pid_does_not_keep_a_lock(tmp_path, capsys):
    """The record's pid now runs another process (started later): the holder is gone."""
    path = tmp_path / CLAIM_FILE
    start = psutil.Process(os.getpid()).create_time()
    path.write_text(_record(os.getpid(), start=start - 1000))
    assert _timed(claim(path)) < LEASE / 2
    assert "is gone" in capsys.readouterr().err


def test_a_heart_beating_holder_is_respected(tmp_path, capsys):
    """Another thread holds the claim for three leases: the waiter waits for its release and
    breaks nothing."""
    path = tmp_path / CLAIM_FILE
    held, go = threading.Event(), threading.Event()

    def holder():
        with claim(path):
            held.set()
            time.sleep(3 * LEASE)
        go.set()

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait()
    start = time.monotonic()
    with claim(path):
        waited = time.monotonic() - start
        assert go.is_set()
    thread.join()
    assert waited >= 2 * LEASE
    assert "note:" not in capsys.readouterr().err


def test_a_live_holder_of_another_process_is_respected(tmp_path, capsys):
    """A holder in another process (same host) that heart-beats keeps the lock past the
    lease; the waiter takes it when that process releases it."""
    path = tmp_path / SWEEP_LOCK
    code = ("import sys, time\n"
            "from pipeline.job import claims\n"
            "claims.HEARTBEAT_SECONDS = 0.2\n"
            "with claims.claim(sys.argv[1]):\n"
            "    print('held', flush=True)\n"
            f"    time.sleep({3 * LEASE})\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "held"
        start = time.monotonic()
        with sweep_lock(tmp_path):
            assert proc.poll() is not None or time.monotonic() - start >= 2 * LEASE
    finally:
        proc.wait(timeout=30)
    assert "note:" not in capsys.readouterr().err


def test_the_record_names_its_holder(tmp_path):
    path = tmp_path / CLAIM_FILE
    with claim(path):
        holder, why = lease.read_holder(path)
    assert holder is not None and why == ""
    assert (holder.host, holder.pid) == (platform.node(), os.getpid())
    assert abs(holder.since - time.time()) < 60


def test_a_holder_whose_lock_was_broken_notes_it_and_leaves_the_new_one(tmp_path, capsys):
    path = tmp_path / CLAIM_FILE
    with claim(path):
        os.unlink(path)  # as a waiter that judged it stale would
        path.write_text(_record(os.getpid()))  # the waiter's own marker
        time.sleep(0.5)
    assert path.exists()  # release removed only its own marker
    assert f"note: lost the lock {path}" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_a_path_that_is_no_lock_file_is_refused_in_one_line(tmp_path, kind):
    path = tmp_path / CLAIM_FILE
    if kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match=f"{path} is not a lock file"):
        with claim(path):
            pass
    assert os.path.lexists(path)  # not removed: this program did not write it
