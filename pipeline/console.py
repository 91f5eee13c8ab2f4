"""A single job's phases on the console: what it is doing while it runs.

The phases are those :func:`pipeline.watch.announce` names (reading the dataset, learning the
hyperparameters, the fit, the certificate, writing the result). On a terminal the current
phase's line is redrawn twice a second with its seconds so far and, during the fit, the steps
the algorithm has recorded (with the time left, at the rate so far, when the algorithm knows
how many it takes: Zhang's methods, a step per basis function); in a pipe or a log file each
phase is one plain line on stdout, written as it starts, before the summary (stderr then holds
nothing but a failure's one ``error:`` line). A sweep's jobs stay silent (the sweep shows its
own progress); their phases are in each job's ``pipeline.log``.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

REDRAW_SECONDS = 0.5
FIT = re.compile(r"the \S+ fit on ")  # the phase whose steps are counted (pipeline.job.run)


class PhaseConsole:
    """Phase lines on ``stream``: redrawn on a terminal, one plain line each elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.doing: str | None = None
        self.since = time.perf_counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, name="job-phases", daemon=True)
            self._ticker.start()

    def phase(self, doing: str) -> None:
        with self._lock:
            if self.tty and self.doing is not None:
                self._draw(final=True)
            self.doing, self.since = doing, time.perf_counter()
            if self.tty:
                self._draw()
            else:
                self.stream.write(f"… {doing}\n")
                self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2 * REDRAW_SECONDS)
        with self._lock:
            if self.tty and self.doing is not None:
                self._draw(final=True)
            self.doing = None

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_SECONDS):
            with self._lock:
                if self.doing is not None:
                    self._draw()

    def _draw(self, final: bool = False) -> None:
        seconds = time.perf_counter() - self.since
        steps, total = _steps() if self.doing and FIT.match(self.doing) else (0, None)
        text = f"… {self.doing}: {seconds:.1f} s"
        if steps:
            text += f", step {steps}" + (f" of {total}" if total else "")
        if steps and total and not final:  # the rest at the rate so far
            text += f", ETA {seconds / steps * max(total - steps, 0):.0f} s"
        self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
        self.stream.flush()


def _steps() -> tuple[int, int | None]:
    """(the steps the running fit has recorded, how many it takes when it knows:
    :attr:`algorithms.evaluation.Recorder.latest`), read without importing the numerics."""
    evaluation = sys.modules.get("algorithms.evaluation")
    latest = getattr(getattr(evaluation, "Recorder", None), "latest", None)
    recorder = latest() if latest is not None else None  # a weak reference: the fit's own
    return len(getattr(recorder, "rows", ())), getattr(recorder, "expected_steps", None)


_CONSOLE: list[PhaseConsole] = []


@contextmanager
def phases_on_console(stream: TextIO | None = None) -> Iterator[None]:
    """Show the phases announced inside the block (a single job run from the command line)."""
    # a terminal: the redrawn line on stderr; a pipe: plain lines on stdout, before the
    # summary, so that stderr holds nothing but an error's one line
    console = PhaseConsole(stream or (sys.stderr if sys.stderr.isatty() else sys.stdout))
    _CONSOLE.append(console)
    try:
        yield
    finally:
        _CONSOLE.remove(console)
        console.close()


def show_phase(doing: str) -> None:
    """Show ``doing`` as the current phase, when a single job's console is open."""
    if _CONSOLE:
        _CONSOLE[-1].phase(doing)
