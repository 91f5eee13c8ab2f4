"""Dask clusters for sweeps: an embedded LocalCluster, an existing scheduler, or SLURM/PBS.

``cluster.kind`` selects one (conf/cluster/*.yaml):

- ``local``: a LocalCluster in this process, ``n_workers`` single-threaded worker processes;
- ``address``: an existing scheduler, ``scheduler=tcp://host:port`` on the command line;
- ``slurm`` / ``pbs``: dask-jobqueue, ``n_jobs`` batch jobs; ``cluster.dry_run=true`` prints the
  job script and runs nothing.

Every kind declares its options once, in :data:`OPTIONS` (the yaml files are tested against
it), and :func:`check` validates a cluster config against its table before anything starts.
:func:`connect` never waits for ever: the first worker must arrive within
``cluster.start_timeout``, a batch cluster needs its submit command (``sbatch``/``qsub``) on
PATH, and a refused or failed submission or an unreachable scheduler stops at once; each of
these is an :class:`~algorithms.errors.InputError` with one line naming the value and the fix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import dask
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from algorithms.errors import InputError
from pipeline.cluster import prestart
from pipeline.cluster.here import unpin_malloc_thresholds
from pipeline.cluster.kinds import BATCH_KINDS, kind_of
from pipeline.cluster.main_guard import check_main_guard
from pipeline.cluster.options import (
    ALLOWED_FAILURES,
    JOBQUEUE_KEYS,
    WORKER_TTL,
    check,
    seconds,
    worker_memory_limit,
)

# what the scheduler of every cluster a sweep starts is given: how often a task's worker may
# die before the task ends as KilledWorker, and when a silent worker is removed (a local
# cluster turns the ttl off: _local_cluster)
SCHEDULER_SETTINGS: dict[str, Any] = {
    "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
    "distributed.scheduler.worker-ttl": WORKER_TTL,
}

_POLL_SECONDS = 0.25


class _SubmitFailures(logging.Filter):
    """Catches dask-jobqueue's failed submissions: a failed ``sbatch``/``qsub`` is raised in a
    background callback and logged as a multi-line traceback (by tornado, and by asyncio when
    the task is collected). The first failure becomes the sweep's one error line; the logs of
    it are dropped, and any later one is shortened to one line."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        text = str(exc) if exc is not None else ""
        if not (isinstance(exc, RuntimeError) and "Command exited with non-zero" in text):
            return True
        summary = _summarise_command_error(text)
        if summary in self.failures:
            return False
        self.failures.append(summary)
        record.msg, record.args, record.exc_info, record.exc_text = (
            f"batch job submission failed: {summary}", (), None, None)
        return len(self.failures) > 1


def _summarise_command_error(text: str) -> str:
    """One line from dask-jobqueue's "Command exited with non-zero exit code" text."""
    code = re.search(r"Exit code: (\S+)", text)
    command = re.search(r"Command:\n(\S+)", text)
    err = text.partition("stderr:\n")[2].strip() or text.partition("stdout:\n")[2].strip()
    return (f"{command.group(1) if command else 'the submit command'} exited with "
            f"{code.group(1) if code else '?'}: {' '.join(err.split())[:300] or '(no output)'}")


_SUBMIT_FAILURES = _SubmitFailures()


def _watch_submissions() -> _SubmitFailures:
    for name in ("tornado.application", "asyncio"):
        logger = logging.getLogger(name)
        if _SUBMIT_FAILURES not in logger.filters:
            logger.addFilter(_SUBMIT_FAILURES)
    _SUBMIT_FAILURES.failures.clear()
    return _SUBMIT_FAILURES


class _DropStartWarnings(logging.Filter):
    """"Cluster closed without starting up": the cluster's failure is our error line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """``logger_name``'s start-up warnings dropped, and Dask's 4-line UserWarning that the
    dashboard's port is busy (it takes another port: the link the sweep prints shows which)."""
    logger, flt = logging.getLogger(logger_name), _DropStartWarnings()
    logger.addFilter(flt)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Port \d+ is already in use",
                                    category=UserWarning)
            yield
    finally:
        logger.removeFilter(flt)


def _import_jobqueue():
    """dask_jobqueue, imported with this process's Ctrl-C handler kept: its ``runner`` module
    installs ``signal.signal(SIGINT, lambda *_: sys.exit())`` when imported (0.9.0), which
    would turn Ctrl-C during a SLURM/PBS sweep into a silent exit with status 0 instead of the
    sweep's one line and exit 130 (:mod:`pipeline.sweep.signals`)."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue
    finally:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is not handler and handler is not None):
            signal.signal(signal.SIGINT, handler)
    return dask_jobqueue


def _jobqueue_cluster(opts: Mapping, dashboard_address: str | None):
    try:
        dask_jobqueue = _import_jobqueue()
    except ImportError:  # pragma: no cover - dask-jobqueue is a declared dependency
        raise InputError("cluster.kind=" + opts["kind"] + " needs dask-jobqueue; "
                         "pip install dask-jobqueue") from None
    cls = getattr(dask_jobqueue, kind_of(opts).batch.jobqueue_class)
    kwargs = {k: opts[k] for k in JOBQUEUE_KEYS if opts.get(k) is not None}
    kwargs["job_extra_directives"] = list(kwargs.get("job_extra_directives", []))
    try:
        with _quiet("distributed.deploy.spec"):
            return cls(**kwargs, scheduler_options={"dashboard_address": dashboard_address})
    except (RuntimeError, OSError, ValueError) as err:
        raise InputError(f"cluster {opts['kind']} could not start its scheduler "
                         f"({' '.join(str(err).split())[:200]}); check cluster.interface and "
                         "cluster.dashboard_address") from None


def job_script(cfg: Mapping) -> str:
    """The batch script a slurm/pbs cluster would submit (for ``cluster.dry_run=true``); needs
    no submit command, submits nothing."""
    opts = check(cfg)
    if kind_of(opts).batch is None:
        raise InputError(f"cluster {opts['kind']} has no job script; cluster.dry_run is for "
                         f"{' and '.join(f'cluster={kind}' for kind in BATCH_KINDS)}")
    cluster = _jobqueue_cluster(opts, "127.0.0.1:0")  # a dry run serves no dashboard
    try:
        return cluster.job_script()
    finally:
        cluster.close()


def _timeout_text(opts: Mapping) -> str:
    return f"cluster.start_timeout={opts['start_timeout']}"


def _check_reachable(address: str, timeout: float, opts: Mapping) -> None:
    """Fail at once when nothing listens at a tcp-like scheduler address (the port is closed or
    the host unknown), within ``timeout`` when the host does not answer, and within ``timeout``
    when what listens at a ``tcp://`` address is not a Dask scheduler (:func:`_check_greeting`:
    Dask's client would wait for its handshake for ever)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return
    host, port = parse_host_port(location)
    fix = (f"start one there (dask scheduler --port {port}) or pass the address `dask "
           "scheduler` printed as scheduler=")
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if scheme == "tcp":  # tls and ws frame (and encrypt) the greeting otherwise
                _check_greeting(sock, address, deadline, opts)
    except socket.gaierror:
        raise InputError(f"scheduler={address}: host {host!r} is unknown; pass the address "
                         "`dask scheduler` printed as scheduler=") from None
    except TimeoutError:
        raise InputError(f"no answer from scheduler={address} within {_timeout_text(opts)}; is "
                         f"the host up and the port open? {fix}") from None
    except OSError as err:
        raise InputError(f"no Dask scheduler at scheduler={address} ({err.strerror or err}); "
                         f"{fix}") from None


# the key of the handshake a Dask scheduler sends as soon as it accepts a connection
# (distributed.comm.core.Comm.handshake_info), msgpack-encoded as plain bytes
_DASK_GREETING = b"pickle-protocol"
_HTTP_PROBE_SECONDS = 1.0


def _check_greeting(sock: socket.socket, address: str, deadline: float, opts: Mapping) -> None:
    """A Dask scheduler writes its handshake at once on a new connection; what else listens
    sends nothing (an HTTP server waits for a request) or something else. Wait for the
    greeting until shortly before ``deadline``, then ask in HTTP what is there, and raise an
    InputError naming it."""
    fix = ("pass the address `dask scheduler` printed (tcp://<host>:8786 by default; not its "
           "dashboard's) as scheduler=")
    received = _receive(sock, deadline - min(_HTTP_PROBE_SECONDS,
                                             (deadline - time.monotonic()) / 4))
    if _DASK_GREETING in received:
        return
    if received:
        raise InputError(f"scheduler={address}: what answered there is not a Dask scheduler "
                         f"(it sent {received[:40]!r}); {fix}")
    with contextlib.suppress(OSError):
        sock.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
    reply = _receive(sock, deadline)
    if reply.startswith(b"HTTP/"):
        status = reply.split(b"\r\n", 1)[0].decode("ascii", "replace")
        raise InputError(f"scheduler={address}: an HTTP server answered there ({status}), not "
                         f"a Dask scheduler; {fix}")
    raise InputError(f"scheduler={address}: something accepted the connection but sent nothing "
                     f"within {_timeout_text(opts)} (a Dask scheduler greets at once) and did "
                     f"not answer HTTP; {fix}")


def _receive(sock: socket.socket, until: float) -> bytes:
    """What ``sock`` sends before ``until`` (monotonic), up to 4 kB, stopping once the Dask
    greeting is seen or the peer closes."""
    data = b""
    while len(data) < 4096 and _DASK_GREETING not in data:
        left = until - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(min(left, 0.5) if data else left)  # the rest of a greeting comes at once
        try:
            chunk = sock.recv(4096)
        except (TimeoutError, OSError):
            break
        if not chunk:
            break
        data += chunk
    return data


_REFUSALS = (  # words of a refused submission → the option that asked for it
    ("memory", "memory"), ("time limit", "walltime"), ("partition", "queue"),
    ("account", "account"), ("cpu", "cores"), ("processor", "cores"))


def _refused_option(failure: str, opts: Mapping) -> str:
    """The option a refused submission names (sbatch: "Memory specification can not be
    satisfied" → cluster.memory=…), else the options that shape a batch job."""
    text = failure.lower()
    for words, key in _REFUSALS:
        if words in text:
            return f"cluster.{key}={opts.get(key)!r}"
    return "cluster.queue, cluster.account or cluster.job_extra_directives"


def _wait_for_first_worker(client: Client, opts: Mapping, deadline: float,
                           cluster=None) -> None:
    """Return when a worker has joined; raise InputError at ``deadline`` or when a batch job
    submission failed."""
    while True:
        remaining = deadline - time.monotonic()
        try:
            client.wait_for_workers(1, timeout=max(0.01, min(_POLL_SECONDS, remaining)))
            return
        except TimeoutError:
            pass
        if cluster is not None and _SUBMIT_FAILURES.failures:
            failure = _SUBMIT_FAILURES.failures[0]
            raise InputError(f"cluster {opts['kind']}: the batch job was refused: {failure}; "
                             f"fix {_refused_option(failure, opts)} (cluster.dry_run=true prints "
                             "the job script)")
        if time.monotonic() >= deadline:
            break
    kind = opts["kind"]
    if kind == "address":
        raise InputError(f"the scheduler at {opts['address']} has no worker after "
                         f"{_timeout_text(opts)}; start one (dask worker {opts['address']}) or "
                         "raise cluster.start_timeout")
    if kind == "local":
        raise InputError(f"cluster local: no worker started within {_timeout_text(opts)}; raise "
                         "cluster.start_timeout or lower cluster.n_workers")
    ids = sorted({str(job.job_id) for job in getattr(cluster, "workers", {}).values()
                 if getattr(job, "job_id", None)})
    status = kind_of(opts).batch.status
    where = f" (jobs {', '.join(ids)}: {status} {','.join(ids)})" if ids else ""
    raise InputError(f"cluster {kind}: no batch job{where} started a worker within "
                     f"{_timeout_text(opts)}; they may still be queued (the sweep cancelled "
                     "them): raise cluster.start_timeout, or check the job logs "
                     "(cluster.log_directory)")


@contextmanager
def connect(cfg: Mapping, warm_tiles: bool = True) -> Iterator[Client]:
    """A Client on the cluster ``cfg`` describes, with at least one worker; local and batch
    clusters are closed after. ``warm_tiles``: local workers load the kernel tiles' compiled
    code at their start (:func:`pipeline.cluster.prestart.dask_setup`); a sweep whose jobs
    will not use it passes False (the load would take CPU from its first jobs). Raises
    :class:`InputError` (one line) for bad options, a missing submit command, an unreachable
    scheduler or no worker within ``cluster.start_timeout``."""
    opts = check(cfg)
    kind = opts["kind"]
    timeout = seconds(opts["start_timeout"])
    deadline = time.monotonic() + timeout
    if kind == "address":
        address = opts["address"]
        _check_reachable(address, timeout, opts)
        try:
            client = Client(address, timeout=max(1.0, deadline - time.monotonic()),
                            set_as_default=False)
        except Exception as err:  # refused, timed out, or something else answered
            raise InputError(f"no Dask scheduler answered at scheduler={address} "
                             f"({type(err).__name__}: {' '.join(str(err).split())[:160]}); pass "
                             "the address `dask scheduler` printed as scheduler=") from None
        with client:
            _wait_for_first_worker(client, opts, deadline)
            register_plugin(client, UnpinMalloc())
            yield client
        return
    if kind == "local":
        check_main_guard()  # before any process starts: spawned workers import the script
        cluster = _local_cluster(opts, warm_tiles, timeout)
    else:
        command = kind_of(opts).batch.submit
        if shutil.which(command) is None:
            raise InputError(f"cluster={kind} submits batch jobs with `{command}`, which is not "
                             "on PATH here; run the sweep where it is (the cluster's login "
                             "node), or use cluster=local or cluster=address "
                             "(cluster.dry_run=true prints the job script)")
        _watch_submissions()
        with dask.config.set(SCHEDULER_SETTINGS):  # read by the scheduler it starts here
            cluster = _jobqueue_cluster(opts, opts["dashboard_address"])
        if opts["adapt"]:
            cluster.adapt(minimum_jobs=opts["adapt"]["minimum"],
                          maximum_jobs=opts["adapt"]["maximum"])
        else:
            cluster.scale(jobs=opts["n_jobs"])
    try:
        # not dask's default scheduler: the client's own dask work (consolidation) stays local
        # while the cluster closes (pipeline.sweep) — tasks are submitted to it by name
        with Client(cluster, set_as_default=False) as client, \
                _dashboard_link(opts["dashboard_address"]):
            _wait_for_first_worker(client, opts, deadline,
                                   cluster if kind_of(opts).batch is not None else None)
            register_plugin(client, UnpinMalloc())
            yield client
    except BaseException:
        _close_after_failure(cluster)
        raise
    cluster.close()


def register_plugin(client: Client, plugin: WorkerPlugin) -> None:
    """Register a worker plugin on the cluster's workers, those there now and those that join
    later. A worker that dies while the plugin is sent to it (its connection closes: Dask's
    ``CommClosedError``, an OSError with no errno) makes the registration raise, although the
    scheduler keeps the plugin for every worker that joins: it is sent once more to the
    workers there then; a second failure is raised (the cluster is losing its workers)."""
    try:
        client.register_plugin(plugin)
    except OSError as err:
        if err.errno is not None:  # not a closed connection
            raise
        client.register_plugin(plugin)


class UnpinMalloc(WorkerPlugin):
    """Resets the malloc thresholds of every worker of the cluster, those there now and those
    that join later (:func:`pipeline.cluster.here.unpin_malloc_thresholds`: a worker started
    with Dask's ``MALLOC_TRIM_THRESHOLD_`` maps every array above 128 KiB afresh), before it
    runs any task of ours: ingest, learning, jobs, shards."""

    name = "sgp-bench-unpin-malloc"

    def setup(self, worker) -> None:
        unpin_malloc_thresholds()


def _local_cluster(opts: Mapping, warm_tiles: bool, timeout: float):
    """A LocalCluster of ``cluster.n_workers`` worker processes, each given ``timeout``
    (``cluster.start_timeout``) to start. A start that fails (a nanny whose worker did not
    come up: a machine too loaded to start it in time, a worker that died as it started) is
    retried once; a second failure is one InputError line naming the load as a likely cause."""
    n_workers = opts["n_workers"] or os.cpu_count() or 1
    # A job holding the GIL for minutes (a long LAPACK call, e.g. the exact GP on kin40k)
    # misses the workers' heartbeats; Dask's default 5-minute worker-ttl then restarts a
    # healthy worker and kills the job. So the ttl is off here: a local worker that dies is
    # seen by its nanny, and one that is frozen (no heartbeat and no CPU time) is ended by
    # the sweep (pipeline.cluster.liveness).
    settings: dict[str, Any] = {**SCHEDULER_SETTINGS, "distributed.scheduler.worker-ttl": None,
                                **prestart.WORKER_SETTINGS}
    # each worker warms up the kernel tiles' compiled code at its start, on a thread
    settings["distributed.worker.preload"] = [
        *dask.config.get("distributed.worker.preload", default=[]),
        *(["pipeline.cluster.prestart"] if warm_tiles else [])]
    if prestart.started():  # workers forked from the command line's warm fork server
        settings["distributed.worker.multiprocessing-method"] = "forkserver"
    failures = []
    for _ in range(2):
        try:
            with _quiet("distributed.deploy.spec"), dask.config.set(settings):
                # death_timeout: a nanny waits this long for its worker process to start
                # (else its start fails), and a worker this long for a lost scheduler
                return LocalCluster(n_workers=n_workers, threads_per_worker=opts[
                    "threads_per_worker"], processes=True, memory_limit=worker_memory_limit(opts),
                    dashboard_address=opts["dashboard_address"], death_timeout=timeout)
        except ValueError as err:  # a bad option: no retry helps
            raise InputError(f"cluster local could not start ({_brief(err)}); check "
                             "cluster.n_workers, cluster.memory_limit and "
                             "cluster.dashboard_address") from None
        except (RuntimeError, OSError, TimeoutError) as err:
            failures.append(_brief(err))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    raise InputError(f"cluster local could not start its {n_workers} worker"
                     f"{'s' if n_workers != 1 else ''}, twice ({failures[-1]}); a likely cause "
                     f"is a machine too loaded to start them within {_timeout_text(opts)} "
                     f"(load average {load:.1f} on {os.cpu_count()} cores): raise "
                     "cluster.start_timeout or lower cluster.n_workers, or rerun when the "
                     "machine is less busy (the cause is in the sweep's dask.log)")


def _brief(err: BaseException) -> str:
    """An exception in one short line, with the cause Dask wraps ("Cluster failed to start"
    around "Nanny failed to start" around what happened)."""
    texts = []
    while err is not None and len(texts) < 3:
        text = " ".join(str(err).split()) or type(err).__name__
        if text not in texts:
            texts.append(text)
        err = err.__cause__ or err.__context__
    return ": ".join(texts)[:240]


def _close_after_failure(cluster) -> None:
    """Close a cluster whose start failed without hiding why it failed: a batch job whose
    submission was refused never leaves the "created" state, which SpecCluster.close asserts
    against, so such jobs are marked failed first, and a failure to close is not reported over
    the error that is already being raised."""
    from distributed.core import Status

    for job in list(getattr(cluster, "workers", {}).values()):
        if getattr(job, "status", None) == Status.created and not getattr(job, "job_id", 1):
            job.status = Status.failed
    with contextlib.suppress(Exception), _quiet("distributed.deploy.spec"):
        cluster.close()


def _dashboard_link(dashboard_address: str | None):
    """Dask formats the dashboard link with the scheduler's host; a dashboard bound to one
    address (127.0.0.1 by default) is linked at that address instead."""
    if dashboard_address is None:  # no dashboard
        return nullcontext()
    host = dashboard_address.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]"):
        return nullcontext()
    return dask.config.set({"distributed.dashboard.link": f"http://{host}:{{port}}/status"})

