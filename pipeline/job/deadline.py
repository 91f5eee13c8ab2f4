"""``job_timeout=<seconds>``: a job running longer is stopped and becomes a failed point.

A job runs on a thread of its process (a Dask worker's task thread, or the command line's main
thread). When the time is up, a timer thread raises an exception in the job's thread
(CPython's ``PyThreadState_SetAsyncExc``): it takes effect at the job's next Python bytecode,
so a fit stops between two steps, BLAS calls or kernel tiles, and the job fails like any other
(:class:`JobTimedOut`, recorded by the sweep with one line). A job still inside one native call
:data:`GRACE_SECONDS` later (a LAPACK factorisation of minutes, which no exception can
interrupt) is ended with its process by ``on_stuck``: a sweep's worker records the failure and
kills itself (its nanny starts a fresh one, and the sweep reruns the batch's other jobs); a
single job prints its one line and exits. A worker whose timer cannot run (the process frozen,
or a native call holding the GIL) is caught by the sweep's client, which measures the same
limit from its side (:mod:`pipeline.sweep.deadlines`).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

GRACE_SECONDS = 10.0


class JobTimedOut(Exception):
    """The job ran past ``job_timeout``."""


class _Expired(BaseException):
    """Raised inside the job's thread when its time is up (a BaseException, so that no
    ``except Exception`` of the job's own code takes it for an error of its numerics)."""


def timeout_message(seconds: float) -> str:
    return (f"the job ran past job_timeout={seconds:g} s and was stopped; raise job_timeout "
            "(or null: no limit) to let it finish")


@contextmanager
def deadline(seconds: float | None, on_stuck: Callable[[str], None],
             grace: float = GRACE_SECONDS) -> Iterator[None]:
    """Run the block with at most ``seconds`` (None: no limit) of wall time: past it the block
    raises :class:`JobTimedOut`; if it has not returned ``grace`` seconds later (stuck in
    native code), ``on_stuck(message)`` is called on the timer's thread."""
    if seconds is None:
        yield
        return
    thread = threading.get_ident()
    lock = threading.Lock()
    running, fired = [True], [False]
    left = threading.Event()  # the block has returned or raised

    def expire() -> None:
        with lock:
            if not running[0]:
                return
            fired[0] = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread),
                                                       ctypes.py_object(_Expired))
        if not left.wait(grace):
            on_stuck(f"{timeout_message(seconds)} (still in a native call {grace:g} s later: "
                     "its process was ended)")

    def leave() -> None:  # on the job's thread
        with lock:
            running[0] = False
            if fired[0]:  # an exception not raised yet: the block is over, drop it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), None)
        left.set()
        timer.cancel()

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        try:
            yield
        finally:
            leave()
    except _Expired:
        leave()
        raise JobTimedOut(timeout_message(seconds)) from None
