"""Why a local cluster's workers died, as their nannies log it: the signal that killed each
worker process (``Worker process <pid> was killed by signal <n>``) and the memory monitor's
terminations (``... exceeded 95% memory budget``). A job whose workers kept dying ends as
Dask's ``KilledWorker``; :func:`pipeline.sweep.schedule.killed_worker_hint` turns what was
seen here into the job's one-line failure (pipeline.watch names the signal's likely cause).

The nannies of a local cluster run in this process; a remote cluster's nannies (SLURM, PBS,
an address) log elsewhere, and nothing is seen here."""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import signal
from collections.abc import Iterator

KILLED = re.compile(r"Worker process (\d+) was killed by signal (\d+)")
DIED = re.compile(r"Worker process (\d+) (was killed|exited with status)")
MEMORY = re.compile(r"exceeded \d+% memory budget")
NANNY_LOGGER = "distributed.nanny"


class WorkerDeaths(logging.Handler):
    """Counts the nannies' death messages; passes their warnings on as before (the nanny's
    logger is set to INFO so that its death messages reach this handler, and stops
    propagating: its records at WARNING and above go on to ``distributed``'s handlers)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.signals: collections.Counter[int] = collections.Counter()
        self.memory_terminations = 0
        self.died = 0  # every worker process that ended other than by the sweep's own close
        self.frozen: set[int] = set()  # pids the sweep ended (pipeline.cluster.liveness)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if DIED.search(message):
            self.died += 1
        killed = KILLED.search(message)
        if killed:
            if int(killed.group(1)) not in self.frozen:  # the sweep's own SIGKILL: no cause
                self.signals[int(killed.group(2))] += 1
        elif MEMORY.search(message):
            self.memory_terminations += 1
        if record.levelno >= logging.WARNING:
            logging.getLogger("distributed").handle(record)

    def signal(self) -> int | None:
        """The signal that killed most workers, or None if none was seen."""
        return self.signals.most_common(1)[0][0] if self.signals else None

    def summary(self) -> str:
        """The deaths seen, in a few words: "12 died (9 killed by SIGSEGV, 2 ended by the
        sweep)"."""
        parts = [f"{n} killed by {_name(sig)}" for sig, n in self.signals.most_common()]
        if self.memory_terminations:
            parts.append(f"{self.memory_terminations} over their memory limit")
        if self.frozen:
            parts.append(f"{len(self.frozen)} ended by the sweep")
        return f"{self.died} died" + (f" ({', '.join(parts)})" if parts else "")


def _name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


@contextlib.contextmanager
def watching_worker_deaths() -> Iterator[WorkerDeaths]:
    """A :class:`WorkerDeaths` on the nanny's logger for the duration of the block."""
    logger = logging.getLogger(NANNY_LOGGER)
    handler = WorkerDeaths()
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
