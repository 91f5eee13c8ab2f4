"""How busy the rest of the machine was while a job or a learning ran: the cores that other
processes, and the hypervisor (steal time), kept busy on average over the interval.

The kernel's CPU accounting (``/proc/stat``'s first line: user, nice, system, irq, softirq and
steal ticks over every CPU) counts what every process on the machine ran, and what the
hypervisor took from this virtual machine; this process's own CPU time (every thread:
:func:`time.process_time`) is taken away. What is left, over the wall seconds, is the average
number of cores busy with someone else's work: on a quiet machine only the sweep's own client,
scheduler and nanny (0.07–0.10 of a core, measured over 30 s windows on a 2-core host while a
sweep's job ran, 2026-12-01) and the ticks' 10 ms grain. A 1-minute load average counts the
job's own runnable threads too (a job whose BLAS threads spin while its kernel tiles run keeps
3 threads runnable on 2 cores) and lags by a minute, so it cannot tell a job from its
neighbour; this can.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (guest is in user)


def machine_busy_seconds(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds every CPU of the machine has spent busy since boot (``stat``'s first line),
    steal time included; NaN where the OS does not tell."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        ticks = sum(int(fields[1 + i]) for i in BUSY_FIELDS)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return math.nan


@dataclass(frozen=True)
class BusyMark:
    """The wall clock, the machine's busy CPU seconds and this process's CPU seconds now."""

    wall: float
    machine: float
    process: float


def mark() -> BusyMark:
    """A :class:`BusyMark` of now."""
    return BusyMark(time.perf_counter(), machine_busy_seconds(), time.process_time())


def other_cores(start: BusyMark, end: BusyMark | None = None) -> float:
    """The cores that other processes and the hypervisor kept busy, on average, between
    ``start`` and ``end`` (now by default): (machine busy seconds − this process's CPU
    seconds) / wall seconds, at least 0; NaN where the machine's accounting is unknown or no
    time passed."""
    end = mark() if end is None else end
    wall = end.wall - start.wall
    if not (wall > 0 and math.isfinite(end.machine) and math.isfinite(start.machine)):
        return math.nan
    others = (end.machine - start.machine) - (end.process - start.process)
    return max(0.0, others / wall)
