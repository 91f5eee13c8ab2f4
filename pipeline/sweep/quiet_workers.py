"""A worker plugin of the sweeps' clusters, in a module of its own: :mod:`pipeline.sweep.signals`
is imported by every command (one job too), and Dask's import is ~0.4 s of CPU."""

from __future__ import annotations

import logging

from distributed import WorkerPlugin


class QuietCancellations(WorkerPlugin):
    """On the workers: the state machine's warning for each task cancelled by Ctrl-C ("Async
    instruction ... ended with CancelledError", one per running task) would follow the CLI's
    one error line on the terminal the workers share; only its errors are kept."""

    name = "sgp-quiet-cancellations"

    def setup(self, worker) -> None:
        logging.getLogger("distributed.worker.state_machine").setLevel(logging.ERROR)
