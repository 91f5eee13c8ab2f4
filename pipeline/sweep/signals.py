"""Ctrl-C and Dask's logging during a sweep: one line for the user, not the chatter of a
cluster torn down mid-conversation.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import sys
import threading


def silence_dask_logging() -> None:
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


# a Ctrl-C seen by the handler: kept, because the KeyboardInterrupt it raises can be lost. The
# handler runs between any two bytecodes of the main thread, a finalizer's too (a Dask
# Future's __del__, run when a loop variable is rebound), and Python ignores what __del__
# raises; the sweep's loop and the end of silent_on_interrupt raise it again
_PENDING = threading.Event()


def _interrupted(signum, frame) -> None:
    # silenced before the KeyboardInterrupt exists: Dask reacts to it on its event-loop thread
    # at once (distributed's sync() schedules a cancel that can fail with a NameError when the
    # call had not started yet, logged by tornado with a traceback), racing an except clause
    silence_dask_logging()
    _PENDING.set()
    raise KeyboardInterrupt


def _quiet_lost_interrupt(report, unraisable) -> None:
    # Python reports what a finalizer raises through sys.unraisablehook ("Exception ignored
    # in: <WeakSet._remove>" and a traceback on stderr); a KeyboardInterrupt lost there is
    # already pending and raised again, so it is not reported; anything else is, by `report`
    if not (issubclass(unraisable.exc_type, KeyboardInterrupt) and _PENDING.is_set()):
        report(unraisable)


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C came within :func:`silent_on_interrupt` (its own
    KeyboardInterrupt may have been lost in a finalizer)."""
    if _PENDING.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def silent_on_interrupt():
    """On Ctrl-C the cluster is torn down mid-conversation; what Dask and asyncio log about
    the broken connections is noise beside the one line the CLI prints."""
    handler = None
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        _PENDING.clear()
        handler = signal.signal(signal.SIGINT, _interrupted)
        hook = sys.unraisablehook
        sys.unraisablehook = functools.partial(_quiet_lost_interrupt, hook)
    try:
        yield
        if handler is not None:
            check_interrupt()  # a Ctrl-C whose KeyboardInterrupt a finalizer swallowed
    except KeyboardInterrupt:
        silence_dask_logging()
        raise
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
            sys.unraisablehook = hook
            _PENDING.clear()


def quiet_dask_logging() -> None:
    # Hydra configures the root logger at INFO: keep Dask's connection chatter out of the console
    for name in ("distributed", "dask", "tornado"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("bokeh").setLevel(logging.ERROR)  # the dashboard's host-wildcard notice

