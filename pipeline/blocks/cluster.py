"""Kernel blocks across a Dask cluster: one fit whose n × t state — the kernel columns an
algorithm keeps, SGMA's [y, K_{:S}] — is spread over the workers with the rows it belongs to
(``blocks=cluster``).

The training inputs are split into one contiguous row range per worker; each worker reads its
rows from the dataset's zarr store (never through the task graph) and keeps them, with its rows
of every :class:`ClusterColumns`, as a *shard*. The fit itself runs in the calling process and
sees an ordinary kernel-block provider (:class:`algorithms.contract.KernelBlocks`): a projection
Wᵀk(X, X_M) is a map-reduce over the shards — one call per worker that appends the columns
chosen since the last step, computes its rows' tiles of k(X_B, X_M) and returns its (p × |M|)
partial product and column sums — so a step moves O(t κ) numbers per worker, never a kernel
column, in one round trip. The calls go through one Dask actor per worker (:class:`ShardHost`:
an RPC relayed by the scheduler, not a task, so no scheduling and no batched streams on the way)
and run in the worker's actor thread, beside its task threads. Everything else an algorithm asks
for (rows of X, small blocks such as K_SM, the diagonal, predictions) is computed in the calling
process from its copy of X: n·d values (160 MB at n = 2·10⁶, d = 10), against the n·t of the
columns (4.8 GB at t = 300). A row fetched from its shard would cost a round trip (a few ms) per
use.

Shards and their actors are pinned to their workers. A worker lost during the fit loses its
rows: the fit stops with a one-line error (:class:`ClusterFitError`) within :data:`POLL_SECONDS`
of the scheduler noticing, and nothing is written; rerunning the job starts it afresh. So does a
worker that Dask has paused for :data:`PAUSED_SECONDS` because its memory is full (the rows are
not Dask-managed data: they cannot be spilled). A scheduler that stops answering ends it in one
line too. However the fit ends, its shards are dropped on the workers' event loops
(:meth:`ClusterKernelBlocks.close`), so a worker busy with another job frees them at once. A
shard call computes on its worker's threads (``nthreads``), set for the actor's own thread only
(:func:`algorithms.kernel_threads.use_kernel_threads`): a job running on the same worker
process keeps its count.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import CancelledError
from pathlib import Path

import numpy as np
from distributed import Client, wait

from algorithms.kernel_blocks import ArrayKernelBlocks
from algorithms.kernels import Kernel
from pipeline.blocks import BlocksJob
from pipeline.blocks.cluster_columns import ClusterColumns
from pipeline.blocks.shards import (
    ClusterFitError,
    ShardHost,
    close_shards,
    held_bytes,
    nbytes_of,
    open_shard,
    shard_factor_append,
    shard_factor_gram,
    shard_factor_rows,
    shard_factor_rows_all,
    shard_factor_top,
    shard_hold,
    shard_matmul,
    shard_new_columns,
    shard_new_factor,
    shard_peak_rss,
    shard_project,
    shard_release,
    shard_residual_norms,
    worker_status,
    worker_threads,
)
from pipeline.datasets import read_store

POLL_SECONDS = 1.0


PAUSED_SECONDS = 30.0  # a worker paused this long (memory full) ends the fit


CLOSE_SECONDS = 10.0  # the most a fit's end waits for its shards to be dropped


class _DropLostResults(logging.Filter):
    """Dask's "Couldn't gather N keys, rescheduling" warning: a result lost with its worker,
    which the fit reports in its own one line (:meth:`ClusterKernelBlocks._await`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Couldn't gather")


_DROP_LOST_RESULTS = _DropLostResults()



def _workers(client: Client) -> dict[str, str]:
    """The workers connected now and their status (running, paused, …), asked of the
    scheduler itself (``scheduler_info`` returns a cached identity that a periodic update may
    have emptied of workers)."""
    return client.run_on_scheduler(worker_status)


def row_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous row ranges of about equal size covering 0..n (none empty)."""
    bounds = np.linspace(0, n, min(parts, n) + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]


class ClusterKernelBlocks(ArrayKernelBlocks):
    """Kernel blocks of the training inputs of the store at ``store`` whose n × t columns
    (:meth:`columns`) and their projections live on the workers of ``client``, one contiguous
    row range each; see the module docstring. Small blocks, rows, the diagonal and
    predictions are computed here from X (n·d values, read once from the store). Use it as a
    context manager, or call :meth:`close`: the shards are dropped from the workers."""

    def __init__(self, client: Client, store: str | os.PathLike, kernel: Kernel,
                 workers: Sequence[str] | None = None) -> None:
        self.client, self.store = client, str(Path(store))
        self.dataset = read_store(store, verify=False)
        X = self.dataset["X_train"][...]  # read here (a numpy array), not by the cluster
        super().__init__(X, kernel)
        workers = sorted(workers or [w for w, s in _workers(client).items()
                                     if s in ("running", "paused")])
        if not workers:
            raise ClusterFitError("blocks=cluster needs at least one Dask worker; none is "
                                  "connected")
        self.ranges = row_ranges(self.n, len(workers))
        self.owners = workers[: len(self.ranges)]
        self.key = f"sgp-shard-{uuid.uuid4().hex[:12]}"
        self.bounds = np.array([lo for lo, _ in self.ranges] + [self.n])
        self._names = itertools.count()
        self._hosts: list = []  # one ShardHost actor per owner
        self._closed = False
        logging.getLogger("distributed.client").addFilter(_DROP_LOST_RESULTS)
        # columns the fit no longer holds: a finalizer may add one from another thread, and a
        # deque's append and popleft are atomic
        self._dropped: deque[str] = deque()
        self.bytes_moved = 0  # results received from the shards (the reductions)
        try:
            nthreads = client.run_on_scheduler(worker_threads)
            futures = [client.submit(ShardHost, max(1, nthreads.get(w, 1)), workers=[w],
                                     allow_other_workers=False, actor=True, pure=False)
                       for w in self.owners]
            self._hosts = self._await(lambda: self._fetch_actors(futures),
                                      lambda: client.cancel(futures))
            self.shard_bytes = self._run(open_shard, lambda b: (self.store, *self.ranges[b],
                                                                 kernel))
        except Exception:
            self.close()  # the shards the other workers opened
            raise

    # -- plumbing
    def _shard_key(self, b: int) -> str:
        return f"{self.key}-{b}"

    def _fetch_actors(self, futures: list) -> list:
        """The actors the tasks ``futures`` made, waited for at most :data:`POLL_SECONDS`
        (TimeoutError)."""
        with self.client.as_current():  # an actor handle binds to the current client
            wait(futures, timeout=POLL_SECONDS)
            return [f.result(timeout=POLL_SECONDS) for f in futures]

    def _await(self, fetch, cancel) -> list:
        """``fetch()`` (results, or TimeoutError after about :data:`POLL_SECONDS`) until it
        returns; :class:`ClusterFitError` (one line) as soon as a shard's worker is gone or has
        been paused for :data:`PAUSED_SECONDS` (a call pinned to it would wait for ever), after
        ``cancel()``."""
        paused_since: dict[str, float] = {}
        while True:
            try:
                results = fetch()
                break
            except TimeoutError:
                pass
            except _Unreachable as err:  # the connection to a shard's worker broke
                cancel()
                raise ClusterFitError(self._lost(err.worker)) from None
            except (CancelledError, OSError) as err:  # the scheduler went away
                raise ClusterFitError(_gone(err)) from None
            try:
                status = _workers(self.client)
            except (CancelledError, OSError) as err:
                raise ClusterFitError(_gone(err)) from None
            lost = [w for w in self.owners if w not in status]
            now = time.monotonic()
            for w in self.owners:
                if status.get(w) == "paused":
                    paused_since.setdefault(w, now)
                else:
                    paused_since.pop(w, None)
            stuck = [w for w, t in paused_since.items() if now - t >= PAUSED_SECONDS]
            if lost or stuck:
                cancel()
                if lost:
                    raise ClusterFitError(self._lost(lost[0]))
                w = stuck[0]
                lo, hi = self.ranges[self.owners.index(w)]
                raise ClusterFitError(
                    f"worker {w} holding training rows {lo}..{hi - 1} of this blocks=cluster "
                    f"fit has been paused for {PAUSED_SECONDS:.0f} s: its memory is above "
                    "Dask's pause fraction of its limit; give the workers more memory "
                    "(cluster.memory_limit) or add workers")
        self.bytes_moved += sum(nbytes_of(r) for r in results)
        return results

    def _lost(self, worker: str) -> str:
        lo, hi = self.ranges[self.owners.index(worker)]
        return (f"worker {worker} holding training rows {lo}..{hi - 1} of this blocks=cluster "
                "fit was lost; rerun the job (a fit is not resumed mid-way)")

    def _run(self, fn, args) -> list:
        """``fn(shard key, *args(b))`` on every owner b, through its actor (all calls go out
        before the first result is awaited); their results in owner order."""
        calls = []
        for b, host in enumerate(self._hosts):
            try:
                calls.append(host.call(fn, self._shard_key(b), *args(b)))
            except RuntimeError as err:  # the handle knows its worker is gone
                if not str(err).startswith("Worker holding Actor was lost"):
                    raise
                raise ClusterFitError(self._lost(self.owners[b])) from None
        results: list = []

        def fetch() -> list:
            for b in range(len(results), len(calls)):
                try:
                    results.append(calls[b].result(timeout=POLL_SECONDS))
                except TimeoutError:  # an OSError too: not a broken connection
                    raise
                except OSError as err:  # "Unable to contact Actor's worker"
                    raise _Unreachable(self.owners[b]) from err
            return results

        return self._await(fetch, lambda: None)

    def close(self) -> None:
        """Drop the shards from the workers that are still connected, however the fit ended
        (a lost worker has none left). It runs on each worker's event loop, not as a task, so
        a worker busy with another job (a mixed sweep) or paused frees its shard at once;
        given up after :data:`CLOSE_SECONDS` (a worker that stopped answering)."""
        if self._closed:
            return
        self._closed = True
        self._hosts = []  # released: each worker drops its actor

        def drop() -> None:
            with contextlib.suppress(Exception):
                connected = _workers(self.client)
                owners = [w for w in self.owners if w in connected]
                if owners:
                    self.client.run(close_shards, self.key, workers=owners, on_error="ignore")

        closing = threading.Thread(target=drop, name="close-shards", daemon=True)
        closing.start()
        closing.join(CLOSE_SECONDS)

    def __enter__(self) -> ClusterKernelBlocks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the n × t state and its projections, on the shards (the rest: ArrayKernelBlocks)
    def columns(self, first: np.ndarray, capacity: int) -> ClusterColumns:
        first = np.asarray(first, dtype=np.float64).reshape(self.n, -1)
        name = str(next(self._names))
        dropped = self._take_dropped()
        self._run(shard_new_columns, lambda b: (name, first[slice(*self.ranges[b])], capacity,
                                           dropped))
        return ClusterColumns(self, name, first.shape[1])

    def cholesky_columns(self, capacity: int, targets: np.ndarray | None = None
                         ) -> ClusterCholeskyColumns:
        """Pivoted-Cholesky factor columns whose rows (and residual diagonal) live in the
        shards (:class:`ClusterCholeskyColumns`)."""
        name = str(next(self._names))
        dropped = self._take_dropped()
        y = None if targets is None else np.asarray(targets, dtype=np.float64)
        parts = self._run(shard_new_factor, lambda b: (
            name, None if y is None else y[slice(*self.ranges[b])], capacity, dropped))
        return ClusterCholeskyColumns(self, name, parts)

    def project_points(self, X_cols: np.ndarray, W: ClusterColumns
                       ) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(W, ClusterColumns):
            raise TypeError("blocks=cluster projects only its own columns (blocks.columns)")
        pending = W.take_pending()
        X_cols = np.asarray(X_cols, dtype=np.float64)
        dropped = self._take_dropped()
        parts = self._run(shard_project, lambda b: (W.name, pending, X_cols, dropped))
        return sum(P for P, _ in parts), sum(sq for _, sq in parts)

    def residual_norms(self, cols, W: ClusterColumns, B: np.ndarray) -> np.ndarray:
        """The column sums of (K[:, cols] − W[:, 1:]·B)², each shard's rows' part summed."""
        return self.residual_norms_points(self.inputs(cols), W, B)

    def residual_norms_points(self, X_cols: np.ndarray, W: ClusterColumns,
                              B: np.ndarray) -> np.ndarray:
        if not isinstance(W, ClusterColumns):
            raise TypeError("blocks=cluster projects only its own columns (blocks.columns)")
        pending, dropped = W.take_pending(), self._take_dropped()
        X_cols, B = np.asarray(X_cols, dtype=np.float64), np.asarray(B, dtype=np.float64)
        return sum(self._run(shard_residual_norms,
                             lambda b: (W.name, pending, X_cols, B, dropped)))

    def hold(self, share: float) -> int:
        """Each worker holds its rows of K, k(X_B, X), formed by the next product, where they
        take at most ``share`` of the memory it could take (its Dask memory limit counted:
        :func:`~pipeline.blocks.shards.worker_available`); the bytes held on all workers (0:
        every shard computes its rows each product). K's n²·8 bytes are thus spread over the
        workers' memory."""
        return int(sum(self._run(shard_hold, lambda b: (self.n, share))))

    def release(self) -> None:
        """Drop the workers' rows of K (:meth:`hold`)."""
        self._run(shard_release, lambda b: ())

    def matmul(self, V: np.ndarray, block_bytes: int = 2**25) -> np.ndarray:
        """K·V as the shards' rows k(X_B, X)·V (V goes to every worker; the result's rows
        come back: n·b numbers each way, against the n²·b of the product)."""
        V = np.asarray(V, dtype=np.float64)
        return np.concatenate(self._run(shard_matmul, lambda b: (self.store, V, block_bytes)))

    def _drop_columns(self, name: str) -> None:
        self._dropped.append(name)  # done by the shards' next projection (or the close)

    def _take_dropped(self) -> list[str]:
        taken = []
        while self._dropped:
            taken.append(self._dropped.popleft())
        return taken

    def summary(self) -> dict:
        """What a job records of its cluster blocks (pipeline.results.variables)."""
        peaks = self._run(shard_peak_rss, lambda b: ())
        return {"cluster_workers": len(self.owners), "cluster_bytes_moved": self.bytes_moved,
                "cluster_shard_bytes_max": max(self.shard_nbytes()),
                "cluster_worker_peak_rss_max": max(peaks),
                "cluster_worker_peak_rss_min": min(peaks)}

    def shard_nbytes(self) -> list[int]:
        """Bytes each worker holds for this fit (its rows and columns)."""
        return self._run(held_bytes, lambda b: ())


class ClusterCholeskyColumns:
    """:class:`~algorithms.factor_columns.ArrayCholeskyColumns` whose rows live in the shards: an
    append is one call per shard that computes its rows of the new columns and returns its
    residual trace and best pivot with that pivot's factor row, so incomplete Cholesky's
    next pivot costs no further round trip; the Gram products are one reduction."""

    def __init__(self, blocks: ClusterKernelBlocks, name: str, reductions: list) -> None:
        self.blocks, self.name, self.t = blocks, name, 0
        self._reduce(reductions)
        weakref.finalize(self, blocks._drop_columns, name)

    def _reduce(self, parts: list) -> None:
        self._trace = float(sum(trace for trace, _ in parts))
        self._best = None  # the first maximum in row order, as numpy's argmax over all rows
        for _, best in parts:
            if best is not None and (self._best is None or best[1] > self._best[1]):
                self._best = best

    def rows(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if self._best is not None and len(rows) == 1 and rows[0] == self._best[0]:
            return self._best[2][None, :]
        out = np.empty((len(rows), self.t))
        for mine, F_rows in self.blocks._run(shard_factor_rows, lambda b: (self.name, rows)):
            out[mine] = F_rows
        return out

    def append(self, X_new: np.ndarray, F_new_rows: np.ndarray, L_B: np.ndarray,
               considered: np.ndarray) -> None:
        args = (self.name, np.asarray(X_new, dtype=np.float64), F_new_rows, L_B,
                np.asarray(considered, dtype=np.int64))
        self._reduce(self.blocks._run(shard_factor_append, lambda b: args))
        self.t += len(X_new)

    def residual_trace(self) -> float:
        return self._trace

    def best(self) -> tuple[int, float, np.ndarray] | None:
        return self._best

    def top(self, k: int) -> np.ndarray:
        """The ``k`` best pivots over every shard, largest residual first (ties: the lowest
        row), as :meth:`algorithms.factor_columns.ArrayCholeskyColumns.top` over all rows."""
        parts = self.blocks._run(shard_factor_top, lambda b: (self.name, k))
        rows = np.concatenate([r for r, _ in parts]).astype(np.int64)
        values = np.concatenate([v for _, v in parts])
        return rows[np.lexsort((rows, -values))[:k]]

    def gram(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        parts = self.blocks._run(shard_factor_gram, lambda b: (self.name, t0, t1))
        return sum(c for c, _ in parts), sum(f for _, f in parts)

    def factor(self) -> np.ndarray:
        """F (n × t) gathered from the shards (n·t values: for small factors, e.g. a CG
        preconditioner)."""
        return np.concatenate(self.blocks._run(shard_factor_rows_all, lambda b: (self.name,)))


class _Unreachable(Exception):
    """An actor call whose connection to its worker broke (the worker is gone)."""

    def __init__(self, worker: str) -> None:
        super().__init__(worker)
        self.worker = worker


def _gone(err: BaseException) -> str:
    return (f"the Dask scheduler of this blocks=cluster fit stopped answering "
            f"({type(err).__name__}); rerun the job when the cluster is back")


CLUSTER_FIT_LOCK = "sgp-bench-cluster-blocks"  # a Dask Lock: one blocks=cluster fit at a time


@contextlib.contextmanager
def provide(job: BlocksJob, store: Path, kernel: Kernel):
    """``blocks=cluster`` (:mod:`pipeline.blocks`): the kernel blocks over the store's rows
    spread over a Dask cluster's workers: the sweep's own cluster when the job runs on one of
    its workers (its thread leaves the worker's pool while it waits, and one such fit runs at
    a time), else the cluster the job's ``cluster`` block describes, started for this job."""
    from distributed import Lock, get_worker, worker_client

    from pipeline.cluster.connect import connect
    from pipeline.cluster.hydra_job import released_while_seceded

    try:
        on_worker = get_worker() is not None
    except ValueError:  # not in a Dask task: a job of its own
        on_worker = False
    if on_worker:
        # out of the worker's pool while it waits: the worker's next task may run meanwhile
        with released_while_seceded(), worker_client() as client, Lock(CLUSTER_FIT_LOCK), \
                ClusterKernelBlocks(client, store, kernel) as blocks:
            yield blocks
    else:
        with connect(job.cluster) as client, _one_fit_at_a_time(Lock(
                CLUSTER_FIT_LOCK, scheduler_rpc=client.scheduler, loop=client.loop)), \
                ClusterKernelBlocks(client, store, kernel) as blocks:
            yield blocks


@contextlib.contextmanager
def _one_fit_at_a_time(lock):
    """Hold the cluster's fit lock (a fit uses every worker): other command lines' and sweeps'
    ``blocks=cluster`` fits on the same scheduler wait, and this one says so if it waits."""
    if not lock.acquire(blocking=False):
        print("note: another blocks=cluster fit is running on this cluster; this one starts "
              "when it ends", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
