"""A job's own log, ``<job dir>/<job name>.log`` (``pipeline.log``), as Hydra's job logging
names it: what the job did, in Hydra's default record format, for one job or each job of a
sweep.

The records are those of the ``pipeline.job`` logger made on the job's thread: the job's
config line, each phase :func:`pipeline.watch.announce` names (reading the dataset, learning,
the fit, the certificate), the one-screen summary of the result, and a failure with its
traceback (a sweep records one line per failed point; the traceback is here). A worker runs
several jobs at once on threads when ``cluster.threads_per_worker`` > 1, so the file takes
only the records of its job's thread. The logger does not propagate: nothing of it reaches the
console or Dask's log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.atomic import NoFollowFileHandler

LOGGER = logging.getLogger("pipeline.job")
LOG_NAME = "pipeline.log"  # Hydra's ${hydra.job.name}.log (pipeline.app names the job)
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default job_logging


@contextmanager
def job_log(directory: Path) -> Iterator[logging.Logger]:
    """Append this thread's ``pipeline.job`` records to ``directory/pipeline.log`` while the
    block runs; an exception leaving the block is recorded with its traceback (and raised)."""
    handler = NoFollowFileHandler(directory / LOG_NAME, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(FORMAT))
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)
    # set here, not once at import: a logging configuration made since (Hydra's, a test's)
    # may have reset them
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
    LOGGER.addHandler(handler)
    try:
        yield LOGGER
    except BaseException as err:
        LOGGER.error("the job failed: %s: %s", type(err).__name__, err,
                     exc_info=not isinstance(err, KeyboardInterrupt))
        raise
    finally:
        LOGGER.removeHandler(handler)
        handler.close()
