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
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import dask
from dask.utils import format_bytes, parse_bytes, parse_timedelta
from distributed import Client, LocalCluster

from algorithms.errors import InputError
from algorithms.options import Option, validate
from pipeline import prestart

KINDS = ("local", "address", "slurm", "pbs")
SUBMIT_COMMAND = {"slurm": "sbatch", "pbs": "qsub"}
JOBQUEUE_KEYS = ("cores", "memory", "processes", "walltime", "queue", "account",
                 "job_extra_directives", "local_directory", "log_directory", "interface")
MIN_WORKER_MEMORY = parse_bytes("256MB")  # a Dask worker process alone takes ~100 MB
_POLL_SECONDS = 0.25


# ----------------------------------------------------------------------------- value parsers

class _Bad(ValueError):
    """A value of the right type but wrong form; the text says why (appended to the message)."""


def _checked(kind: str, key: str, what: str, example: str, fn: Callable[[Any], Any], *,
             spelled: str | None = None) -> Callable[[Any], Any]:
    """An :class:`Option` ``parse`` function: ``fn(value)``, or an InputError naming the
    option as the user spells it (``cluster.<key>`` unless ``spelled``), what it must be and
    an example."""
    spelled = spelled or f"cluster.{key}"

    def parse(value: Any) -> Any:
        try:
            return fn(value)
        except (_Bad, ValueError, TypeError, KeyError) as err:
            why = f" ({err})" if isinstance(err, _Bad) else ""
            raise InputError(f"cluster {kind}: {spelled}={value!r} is invalid{why}; it must be "
                             f"{what}, e.g. {spelled}={example}") from None

    return parse


def _duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    if parse_timedelta(value, default="seconds") <= 0:
        raise _Bad("it must be longer than 0 s")
    return value


def seconds(value: Any) -> float:
    """A validated duration (``"10s"``, ``"1h"``, ``30``) in seconds."""
    return float(parse_timedelta(value, default="seconds"))


def _worker_memory(value: Any) -> Any:
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    if isinstance(value, float) and not value.is_integer():
        raise _Bad("a byte count is a whole number")
    if parse_bytes(value) < MIN_WORKER_MEMORY:
        raise _Bad(f"a worker needs at least {format_bytes(MIN_WORKER_MEMORY)}")
    return value


def _memory(value: Any) -> Any:
    if value == "auto":
        raise _Bad("a batch job needs an explicit size")
    return _worker_memory(value)


_WALLTIME = {
    # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
    "slurm": re.compile(r"\d+|\d+:[0-5]\d|\d+:[0-5]\d:[0-5]\d|\d+-\d+(:[0-5]\d(:[0-5]\d)?)?"),
    # qsub -l walltime=: HH:MM:SS
    "pbs": re.compile(r"\d+:[0-5]\d:[0-5]\d"),
}


def _walltime(kind: str) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if not isinstance(value, str) or not _WALLTIME[kind].fullmatch(value.strip()):
            raise TypeError(value)
        return value.strip()

    return parse


def _adapt(value: Any) -> dict[str, int] | None:
    """``{minimum: m, maximum: M}`` batch jobs (1 ≤ m ≤ M), or both null: a fixed n_jobs."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"minimum", "maximum"}:
        raise TypeError(value)
    low, high = value.get("minimum"), value.get("maximum")
    if low is None and high is None:
        return None
    if low is None or high is None:
        raise _Bad("set both minimum and maximum, or neither")
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise TypeError(value)
    if not 1 <= low <= high:
        raise _Bad("it needs 1 ≤ minimum ≤ maximum: a sweep waits for its first worker")
    return {"minimum": low, "maximum": high}


def _host_port(value: Any) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise TypeError(value)
    host, _, port_text = value.strip().rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise _Bad(f"port {port_text!r} is not a number in 0..65535")
    return host, int(port_text)


def _bindable(host: str) -> None:
    """Raise _Bad unless this machine can listen on ``host``."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError:
        raise _Bad(f"host {host!r} is unknown") from None
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(sockaddr)
        except OSError:
            raise _Bad(f"{host} is not an address of this machine") from None


def _dashboard(value: Any) -> str:
    """``host:port``; an empty host is 127.0.0.1 (this machine only), 0.0.0.0 every interface."""
    host, port = _host_port(value)
    host = host or "127.0.0.1"
    _bindable(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _directives(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, str) and v.strip() for v in value):
        raise TypeError(value)
    return list(value)


def _interface(value: Any) -> str:
    import psutil

    if not isinstance(value, str):
        raise TypeError(value)
    names = sorted(psutil.net_if_addrs())
    if value not in names:
        raise _Bad(f"this machine's interfaces are {', '.join(names)}")
    return value


def _address(value: Any) -> str:
    """A scheduler address ``scheme://host:port`` (``tcp://`` when no scheme is given)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    if not isinstance(value, str):
        raise TypeError(value)
    scheme, location = parse_address(value.strip())
    host, port = parse_host_port(location)
    if not host or not 0 < int(port) <= 65535:
        raise _Bad("it needs a host and a port")
    return f"{scheme}://{location}"


# ----------------------------------------------------------------------------- option tables

def _common(kind: str, start_timeout: str, why: str) -> dict[str, Option]:
    return {
        "kind": Option(kind, "choice", "which cluster (set by cluster=<name>)", choices=(kind,)),
        "start_timeout": Option(start_timeout, "any", why, parse=_checked(
            kind, "start_timeout", "a duration > 0 like 10s, 5m or 1h", start_timeout, _duration)),
    }


def _dashboard_option(kind: str, doc: str) -> Option:
    return Option("127.0.0.1:8787", "any", doc, parse=_checked(
        kind, "dashboard_address", "host:port of this machine (0.0.0.0:8787 exposes it on every "
        "interface)", "127.0.0.1:8787", _dashboard))


def _jobqueue_options(kind: str) -> dict[str, Option]:
    command = SUBMIT_COMMAND[kind]
    walltime_form = "[D-]HH:MM:SS (or minutes)" if kind == "slurm" else "HH:MM:SS"
    return {
        **_common(kind, "1h", "how long to wait for the first batch job to start a worker (time "
                               "in the queue included)"),
        "n_jobs": Option(2, "int", f"batch jobs submitted with {command}", lo=1),
        "adapt": Option({"minimum": None, "maximum": None}, "any",
                        "adaptive scaling: between minimum and maximum batch jobs, as many as "
                        "the queued tasks need (dask-jobqueue adapt); null: n_jobs",
                        none_ok=True, parse=_checked(
                            kind, "adapt", "{minimum: m, maximum: M} batch jobs with "
                            "1 ≤ m ≤ M, or both null", "'{minimum: 1, maximum: 4}'", _adapt)),
        "cores": Option(1, "int", "cores per batch job", lo=1),
        "processes": Option(1, "int", "worker processes per batch job (≤ cores)", lo=1),
        "memory": Option("4GB", "any", "memory per batch job", parse=_checked(
            kind, "memory", "a size like 4GB", '"4GB"', _memory)),
        "walltime": Option("01:00:00", "any", "batch job time limit", parse=_checked(
            kind, "walltime", walltime_form, '"01:00:00"', _walltime(kind))),
        "queue": Option(None, "str", "queue/partition", none_ok=True, example="normal"),
        "account": Option(None, "str", "account to charge", none_ok=True, example="project1"),
        "job_extra_directives": Option([], "any", "extra header lines", parse=_checked(
            kind, "job_extra_directives", "a list of strings", "'[--exclusive]'", _directives)),
        "local_directory": Option(None, "path", "worker scratch directory", none_ok=True,
                                  example="/tmp"),
        "log_directory": Option(None, "path", "where batch jobs write their logs",
                                none_ok=True, example="logs"),
        "interface": Option(None, "any", "network interface the scheduler listens on",
                            none_ok=True, parse=_checked(
                                kind, "interface", "a network interface of this machine", "eth0",
                                _interface)),
        "dashboard_address": _dashboard_option(kind, "where the scheduler's dashboard listens"),
        "dry_run": Option(False, "bool", "print the job script and submit nothing"),
    }


OPTIONS: dict[str, dict[str, Option]] = {
    "local": {
        **_common("local", "10s", "how long to wait for the first worker"),
        "n_workers": Option(None, "int", "worker processes (null = one per core)", lo=1,
                            none_ok=True, example=2),
        "threads_per_worker": Option(1, "int", "threads per worker process", lo=1),
        "memory_limit": Option("auto", "any", "memory limit per worker", parse=_checked(
            "local", "memory_limit", "auto or a size like 4GB (bytes or a string)", '"4GB"',
            _worker_memory)),
        "dashboard_address": _dashboard_option("local", "where the dashboard listens"),
    },
    "address": {
        **_common("address", "10s", "how long to wait for the scheduler and its first worker"),
        "address": Option(None, "any", "the scheduler (set by scheduler=)", none_ok=True,
                          parse=_checked("address", "address", "a scheduler address like "
                                         "tcp://host:8786", "tcp://127.0.0.1:8786", _address,
                                         spelled="scheduler")),
    },
    "slurm": _jobqueue_options("slurm"),
    "pbs": _jobqueue_options("pbs"),
}


def check(cfg: Mapping) -> dict[str, Any]:
    """The cluster config ``cfg`` validated against its kind's :data:`OPTIONS` table (defaults
    filled in); raises :class:`InputError` naming the first bad ``cluster.<option>``."""
    kind = cfg.get("kind")
    if kind not in OPTIONS:
        raise InputError(f"unknown cluster.kind {kind!r}; choose one of: {', '.join(KINDS)} "
                         "(cluster=<name> selects conf/cluster/<name>.yaml)")
    opts = validate(OPTIONS[kind], dict(cfg), owner=f"cluster {kind}", prefix="cluster.")
    if kind == "address" and not opts["address"]:
        raise InputError("cluster=address needs the scheduler's address; pass "
                         "scheduler=tcp://host:8786 (where `dask scheduler` runs)")
    if kind in SUBMIT_COMMAND:
        if opts["processes"] > opts["cores"]:
            raise InputError(f"cluster {kind}: cluster.processes={opts['processes']} is more "
                             f"than cluster.cores={opts['cores']}; each worker process needs a "
                             f"core: set cluster.processes ≤ cluster.cores")
        per_process = parse_bytes(opts["memory"]) / opts["processes"]
        if per_process < MIN_WORKER_MEMORY:
            raise InputError(f"cluster {kind}: cluster.memory={opts['memory']!r} gives each of "
                             f"the {opts['processes']} worker processes "
                             f"{format_bytes(per_process)}, less than "
                             f"{format_bytes(MIN_WORKER_MEMORY)}; raise cluster.memory")
    return opts


def memory_hint(cluster_cfg: Mapping) -> str:
    """How much memory one worker of this cluster may use and which option changes it (for a
    job whose worker was killed for memory, e.g. a KilledWorker message)."""
    try:
        opts = check(cluster_cfg)
    except InputError:
        return "the cluster options are invalid"
    kind = opts["kind"]
    if kind == "local":
        from distributed.system import MEMORY_LIMIT
        from distributed.worker_memory import parse_memory_limit

        limit = parse_memory_limit(opts["memory_limit"], opts["threads_per_worker"],
                                   logger=logging.getLogger(__name__))
        n_workers = opts["n_workers"] or os.cpu_count() or 1
        return (f"each worker may use {format_bytes(limit) if limit else 'any amount'} "
                f"(cluster.memory_limit={opts['memory_limit']}, {n_workers} workers on "
                f"{format_bytes(MEMORY_LIMIT)}); raise cluster.memory_limit, with fewer "
                f"cluster.n_workers so that together they fit in {format_bytes(MEMORY_LIMIT)}")
    if kind == "address":
        return (f"the workers of {opts['address']} have the memory limits they were started with "
                "(dask worker --memory-limit); start workers with more memory")
    per_process = format_bytes(parse_bytes(opts["memory"]) / opts["processes"])
    return (f"each worker may use {per_process} (cluster.memory={opts['memory']} / "
            f"cluster.processes={opts['processes']}); raise cluster.memory")


# ----------------------------------------------------------------------------- starting

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
    logger, flt = logging.getLogger(logger_name), _DropStartWarnings()
    logger.addFilter(flt)
    try:
        yield
    finally:
        logger.removeFilter(flt)


def _jobqueue_cluster(opts: Mapping, dashboard_address: str):
    try:
        import dask_jobqueue
    except ImportError:  # pragma: no cover - dask-jobqueue is a declared dependency
        raise InputError("cluster.kind=" + opts["kind"] + " needs dask-jobqueue; "
                         "pip install dask-jobqueue") from None
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[opts["kind"]]
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
    if opts["kind"] not in SUBMIT_COMMAND:
        raise InputError(f"cluster {opts['kind']} has no job script; cluster.dry_run is for "
                         "cluster=slurm and cluster=pbs")
    cluster = _jobqueue_cluster(opts, "127.0.0.1:0")  # a dry run serves no dashboard
    try:
        return cluster.job_script()
    finally:
        cluster.close()


def _timeout_text(opts: Mapping) -> str:
    return f"cluster.start_timeout={opts['start_timeout']}"


def _check_reachable(address: str, timeout: float, opts: Mapping) -> None:
    """Fail at once when nothing listens at a tcp-like scheduler address (the port is closed or
    the host unknown), and within ``timeout`` when the host does not answer."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return
    host, port = parse_host_port(location)
    fix = (f"start one there (dask scheduler --port {port}) or pass the address `dask "
           "scheduler` printed as scheduler=")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror:
        raise InputError(f"scheduler={address}: host {host!r} is unknown; pass the address "
                         "`dask scheduler` printed as scheduler=") from None
    except TimeoutError:
        raise InputError(f"no answer from scheduler={address} within {_timeout_text(opts)}; is "
                         f"the host up and the port open? {fix}") from None
    except OSError as err:
        raise InputError(f"no Dask scheduler at scheduler={address} ({err.strerror or err}); "
                         f"{fix}") from None


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
    status = "squeue -j" if kind == "slurm" else "qstat"
    where = f" (jobs {', '.join(ids)}: {status} {','.join(ids)})" if ids else ""
    raise InputError(f"cluster {kind}: no batch job{where} started a worker within "
                     f"{_timeout_text(opts)}; they may still be queued (the sweep cancelled "
                     "them): raise cluster.start_timeout, or check the job logs "
                     "(cluster.log_directory)")


@contextmanager
def connect(cfg: Mapping) -> Iterator[Client]:
    """A Client on the cluster ``cfg`` describes, with at least one worker; local and batch
    clusters are closed after. Raises :class:`InputError` (one line) for bad options, a
    missing submit command, an unreachable scheduler or no worker within
    ``cluster.start_timeout``."""
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
            yield client
        return
    if kind == "local":
        n_workers = opts["n_workers"] or os.cpu_count() or 1
        try:
            # A job holding the GIL for minutes (a long LAPACK call, e.g. the exact GP on
            # kin40k) misses the workers' heartbeats; Dask's default 5-minute worker-ttl then
            # restarts a healthy worker and kills the job. A local worker that really dies is
            # seen by its nanny, so the ttl is off here.
            settings: dict[str, Any] = {"distributed.scheduler.worker-ttl": None}
            # each worker warms up the kernel tiles' compiled code at its start, on a thread
            settings["distributed.worker.preload"] = [
                *dask.config.get("distributed.worker.preload", default=[]), "pipeline.prestart"]
            if prestart.started():  # workers forked from the command line's warm fork server
                settings["distributed.worker.multiprocessing-method"] = "forkserver"
            with _quiet("distributed.deploy.spec"), dask.config.set(settings):
                cluster = LocalCluster(n_workers=n_workers,
                                       threads_per_worker=opts["threads_per_worker"],
                                       processes=True, memory_limit=opts["memory_limit"],
                                       dashboard_address=opts["dashboard_address"])
        except (RuntimeError, OSError, ValueError) as err:
            raise InputError(f"cluster local could not start ({' '.join(str(err).split())[:200]})"
                             "; check cluster.n_workers, cluster.memory_limit and "
                             "cluster.dashboard_address") from None
    else:
        command = SUBMIT_COMMAND[kind]
        if shutil.which(command) is None:
            raise InputError(f"cluster={kind} submits batch jobs with `{command}`, which is not "
                             "on PATH here; run the sweep where it is (the cluster's login "
                             "node), or use cluster=local or cluster=address "
                             "(cluster.dry_run=true prints the job script)")
        _watch_submissions()
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
                                   cluster if kind in SUBMIT_COMMAND else None)
            yield client
    except BaseException:
        _close_after_failure(cluster)
        raise
    cluster.close()


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


def _dashboard_link(dashboard_address: str):
    """Dask formats the dashboard link with the scheduler's host; a dashboard bound to one
    address (127.0.0.1 by default) is linked at that address instead."""
    host = dashboard_address.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]"):
        return nullcontext()
    return dask.config.set({"distributed.dashboard.link": f"http://{host}:{{port}}/status"})


def worker_name() -> str:
    """The name of the Dask worker running this code, or "client" outside a worker."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except ValueError:  # not on a worker
        return "client"

