"""How long this process has been running, for the sweep's whole-process overhead figure.

The command line (:func:`pipeline.cli.main`) marks the process as one whose age is the sweep's
start-up time (interpreter, imports, Hydra's composition of the config and of every sweep
point before the launcher runs); a sweep started from a long-lived process (a notebook's
``run_sweep``) has no such start-up and reports none.
"""

from __future__ import annotations

import time

import psutil

_cli = False


def mark_command_line() -> None:
    """This process runs the command line: its age at launch is the sweep's start-up."""
    global _cli
    _cli = True


def startup_seconds() -> float | None:
    """Seconds since this process started, if it runs the command line, else None."""
    if not _cli:
        return None
    return max(0.0, time.time() - psutil.Process().create_time())
