"""Worker plugins of the sweeps' clusters, in a module of their own: :mod:`pipeline.sweep.signals`
is imported by every command (one job too), and Dask's import is ~0.4 s of CPU."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from distributed import WorkerPlugin

from pipeline.atomic import NoFollowFileHandler

DASK_LOGGERS = ("distributed", "dask", "tornado")
LOG_FILE = "dask.log"  # in the sweep directory
_FORMAT = "%(asctime)s %(name)s %(levelname)s [pid %(process)d] %(message)s"


class QuietCancellations(WorkerPlugin):
    """On the workers: the state machine's warning for each task cancelled by Ctrl-C ("Async
    instruction ... ended with CancelledError", one per running task) would follow the CLI's
    one error line on the terminal the workers share; only its errors are kept."""

    name = "sgp-quiet-cancellations"

    def setup(self, worker) -> None:
        logging.getLogger("distributed.worker.state_machine").setLevel(logging.ERROR)


class DaskLogToFile(WorkerPlugin):
    """On the workers: Dask's own log records (a heartbeat that fails while a stopped sweep's
    scheduler goes away, a task's "Compute Failed") go to the sweep's ``dask.log``, not to the
    terminal the workers share with the command line, whose stderr carries the product's
    lines only. ``restore``: put the workers' own handlers back when the plugin is removed
    (workers the sweep did not start)."""

    name = "sgp-dask-log-file"

    def __init__(self, path: str, restore: bool) -> None:
        self.path = path
        self.restore = restore
        self._moved: list | None = None

    def setup(self, worker) -> None:
        self._moved = _to_file(Path(self.path))

    def teardown(self, worker) -> None:
        if self.restore and self._moved is not None:
            _put_back(self._moved)


@contextlib.contextmanager
def dask_log_to_file(path: Path) -> Iterator[None]:
    """In this process (the command line, where a local cluster's scheduler and nannies run):
    Dask's log records go to ``path`` while the sweep runs."""
    moved = _to_file(path)
    try:
        yield
    finally:
        _put_back(moved)


def _to_file(path: Path) -> list:
    handler = NoFollowFileHandler(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    moved = []
    for name in DASK_LOGGERS:
        logger = logging.getLogger(name)
        streams = [h for h in logger.handlers if type(h) is logging.StreamHandler]
        for h in streams:
            logger.removeHandler(h)
        logger.addHandler(handler)
        moved.append((logger, handler, streams, logger.propagate))
        logger.propagate = False  # not to the root logger's console either
    return moved


def _put_back(moved: list) -> None:
    for logger, handler, streams, propagate in moved:
        logger.removeHandler(handler)
        for h in streams:
            logger.addHandler(h)
        logger.propagate = propagate
        handler.close()
