"""How long this process has been running, for the sweep's whole-process overhead figure.

The command line (:func:`pipeline.cli.main`) marks the process as one whose age is the sweep's
start-up time (interpreter, imports, Hydra's composition of the config and of every sweep
point before the launcher runs); a sweep started from a long-lived process (a notebook's
``run_sweep``) has no such start-up and reports none.
"""

from __future__ import annotations

import os
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
    return max(0.0, process_age())


def process_age() -> float:
    """This process's age. On Linux from its start in clock ticks since boot (/proc/self/stat)
    against the clock since boot, to 10 ms: psutil's create_time adds the boot time, which the
    kernel gives in whole seconds (an age up to a second off)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time() - psutil.Process().create_time()
