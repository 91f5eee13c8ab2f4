"""The command line's watcher: a process killed by a signal still ends with one line.

A fit can die without Python seeing it: a SIGSEGV or SIGBUS inside the BLAS library, or the
kernel's out-of-memory killer (SIGKILL). A process that dies that way prints nothing and exits
with 128 + the signal's number (139, 137). So ``python -m pipeline`` and ``sgp-bench`` run the
program in a forked child and wait for it (:func:`watched`); the parent imports nothing beyond
the standard library, so it cannot crash the same way. When the child dies by a signal, the
parent prints ``error: <what the child was doing> was killed by <signal> (<likely cause>);
<fix>`` and exits 1 (the job failed; its input was fine).

What the child was doing is announced with :func:`announce` (a job's fit: the algorithm, the
dataset and n) into a page of memory shared with the parent, so the parent can name it after
the child is gone; outside a watched command (tests, Dask workers, the Python API)
:func:`announce` does nothing. The child runs in its own process group: the parent forwards
Ctrl-C (SIGINT), SIGTERM and SIGHUP to it once, and the child dies with the parent
(``PR_SET_PDEATHSIG``), so a killed parent leaves no orphan behind.

A sweep's jobs run in Dask workers: their deaths by signal are read from the local cluster's
nanny (:func:`signal_cause`, used by :mod:`pipeline.sweep.schedule`).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from pipeline.console import show_phase

_JOB_LOG = logging.getLogger("pipeline.job")  # pipeline.job.log's logger (stdlib only here)
_PAGE = 4096
_shared: mmap.mmap | None = None  # set in a watched child: what it is doing, NUL-terminated

NATIVE_CRASH = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# what an interrupted or killed command says: a sweep's finished jobs are on disk, and
# resume=last reruns its command in its directory (pipeline.sweep.naming)
RESUME = ("a sweep resumes with python -m pipeline resume=last (finished jobs are kept and not "
          "fitted again)")
INTERRUPTED = f"interrupted; {RESUME}"

def announce(doing: str) -> None:
    """Record what this process is doing (e.g. ``the exact fit on kin40k at n_train=36000``),
    for the watcher's message if the process is killed (a no-op when nothing watches), and in
    the job's log (:mod:`pipeline.job.log`; nothing when no job log is open)."""
    if _JOB_LOG.handlers:
        _JOB_LOG.info(doing)
    show_phase(doing)  # a single job's console (pipeline.console), when one is open
    if _shared is None:
        return
    data = doing.encode("utf-8", "replace")[: _PAGE - 1]
    _shared[: len(data) + 1] = data + b"\0"


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def signal_cause(sig: int) -> str:
    """The likely cause of a death by ``sig`` and its fix, for an ``error:`` line."""
    name = signal_name(sig)
    if sig in NATIVE_CRASH:
        return (f"killed by {name}, a crash inside native code (the BLAS/LAPACK library or a "
                "compiled kernel); rerun with threads=1 to rule out a threading fault of the "
                "BLAS library, and report the command if it still crashes")
    if sig == signal.SIGKILL:
        return (f"killed by {name}, most likely by the operating system's out-of-memory killer "
                "(dmesg names it); use fewer training points (dataset.n_train), a sparse "
                "algorithm, or a machine with more memory")
    return f"killed by {name} from outside this program; {RESUME}"


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _doing(shared: mmap.mmap) -> str:
    text = bytes(shared[:_PAGE]).split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    return text or "the command"


def watched(program: Callable[[], int]) -> NoReturn:
    """Run ``program`` (which returns an exit code) in a forked child and exit with its code;
    if the child is killed by a signal, print one ``error:`` line naming it and exit 1
    (130 for Ctrl-C)."""
    global _shared
    shared = mmap.mmap(-1, _PAGE)  # anonymous and shared: the child's writes reach the parent
    parent = os.getpid()
    for sig in FORWARDED:  # blocked across the fork: none is lost before the handlers exist
        signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)  # its own group: a terminal's Ctrl-C reaches it once, via the parent
        _die_with_parent(parent)
        _shared = shared
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        try:
            code = program()  # an exception propagates as in any Python program
            sys.stdout.flush()
        except BrokenPipeError:  # its reader left (`sgp-bench --help | head -1`): not a fault
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 0
        sys.stderr.flush()
        os._exit(code)

    def forward(sig: int, _frame) -> None:
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    _, status = os.waitpid(child, 0)  # retried across the forwarded signals (PEP 475)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status)
    if sig == signal.SIGINT:
        print(f"error: {INTERRUPTED}", file=sys.stderr)
        os._exit(130)
    print(f"error: {_doing(shared)} was {signal_cause(sig)}", file=sys.stderr, flush=True)
    os._exit(1)
