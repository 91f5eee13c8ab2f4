"""A sweep's progress over its jobs on the console, with tqdm: a bar with the rate and the
time left on a terminal; elsewhere (a log file, a pipe, a batch job's output) plain lines with
no carriage return, one at every tenth of the jobs and at least every minute."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm

# what a line in a log says (tqdm's own fields: its ETA is the remaining jobs at the mean rate)
LOG_FORMAT = "jobs: {n_fmt}/{total_fmt} ({percentage:.0f}%), {elapsed} elapsed, ETA {remaining}"
LOG_EVERY_SECONDS = 60.0


class Progress:
    """Jobs finished out of ``n``, advanced as batches finish (or fail) on the client's side."""

    def __init__(self, n: int, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.n, self.done, self.start = n, 0, time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = (tqdm(total=n, unit="job", desc="jobs", file=self.stream, dynamic_ncols=True,
                         smoothing=0.1) if self.tty and n else None)
        self.logged_tenth, self.logged_at = 0, self.start

    def advance(self, k: int) -> None:
        self.done += k
        if self.bar is not None:
            self.bar.update(k)
            return
        now = time.monotonic()
        tenth = 10 * self.done // max(self.n, 1)
        if tenth > self.logged_tenth or now - self.logged_at >= LOG_EVERY_SECONDS:
            self.logged_tenth, self.logged_at = tenth, now
            print(tqdm.format_meter(self.done, self.n, now - self.start, unit="job",
                                    bar_format=LOG_FORMAT), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
