"""The dask-jobqueue kinds, ``cluster=slurm`` and ``cluster=pbs``: ``n_jobs`` batch jobs (or
adaptive scaling), each starting worker processes; ``cluster.dry_run=true`` prints the job
script and submits nothing. A batch cluster needs its submit command (``sbatch``/``qsub``) on
PATH, and a refused submission stops the sweep at once with one line naming the option.

Its errors are imported where they are raised: importing a kind (``--help``, the fork server
of :mod:`pipeline.cluster.prestart`) imports nothing of ``algorithms/``.
"""

from __future__ import annotations

import logging
import re
import shutil
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pipeline.cluster.kinds.base import BatchSystem, ClusterKind, timeout_text

JOBQUEUE_KEYS = ("cores", "memory", "processes", "walltime", "queue", "account",
                 "job_extra_directives", "local_directory", "log_directory", "interface")


@dataclass(frozen=True)
class JobqueueKind(ClusterKind):
    def options(self) -> dict[str, Any]:
        from algorithms.options import Option
        from pipeline.cluster.option_forms import (
            adapt,
            checked,
            common_options,
            dashboard_option,
            directives,
            interface,
            memory,
            walltime,
        )

        kind, command = self.name, self.batch.submit
        return {
            **common_options(kind, "1h", "how long to wait for the first batch job to start a "
                                         "worker (time in the queue included)"),
            "n_jobs": Option(2, "int", f"batch jobs submitted with {command}", lo=1),
            "adapt": Option({"minimum": None, "maximum": None}, "any",
                            "adaptive scaling: between minimum and maximum batch jobs, as many "
                            "as the queued tasks need (dask-jobqueue adapt); null: n_jobs",
                            none_ok=True, parse=checked(
                                kind, "adapt", "{minimum: m, maximum: M} batch jobs with "
                                "1 ≤ m ≤ M, or both null", "'{minimum: 1, maximum: 4}'", adapt)),
            "cores": Option(1, "int", "cores per batch job", lo=1),
            "processes": Option(1, "int", "worker processes per batch job (≤ cores)", lo=1),
            "gpus": Option(0, "int", "GPUs per batch job (0 or 1: one worker per GPU, its jobs "
                           "with device=cuda; cores and memory are the worker's)", lo=0, hi=1),
            "memory": Option("4GB", "any", "memory per batch job", parse=checked(
                kind, "memory", "a size like 4GB", '"4GB"', memory)),
            "walltime": Option("01:00:00", "any", "batch job time limit", parse=checked(
                kind, "walltime", self.batch.walltime_form, '"01:00:00"',
                walltime(self.batch.walltime))),
            "queue": Option(None, "str", "queue/partition", none_ok=True, example="normal"),
            "account": Option(None, "str", "account to charge", none_ok=True,
                              example="project1"),
            "job_extra_directives": Option([], "any", "extra header lines", parse=checked(
                kind, "job_extra_directives", "a list of strings", "'[--exclusive]'",
                directives)),
            "local_directory": Option(None, "path", "worker scratch directory", none_ok=True,
                                      example="/tmp"),
            "log_directory": Option(None, "path", "where batch jobs write their logs",
                                    none_ok=True, example="logs"),
            "interface": Option(None, "any", "network interface the scheduler listens on",
                                none_ok=True, parse=checked(
                                    kind, "interface", "a network interface of this machine",
                                    "eth0", interface)),
            "dashboard_address": dashboard_option(kind, "where the scheduler's dashboard "
                                                        "listens"),
            "dry_run": Option(False, "bool", "print the job script and submit nothing"),
        }

    def check(self, opts: Mapping) -> None:
        from dask.utils import format_bytes, parse_bytes

        from algorithms.errors import InputError
        from pipeline.cluster.option_forms import MIN_WORKER_MEMORY

        if opts["gpus"] and opts["processes"] != 1:
            raise InputError(f"cluster {self.name}: cluster.gpus={opts['gpus']} with "
                             f"cluster.processes={opts['processes']}: a GPU's batch job runs "
                             "one worker; pass cluster.processes=1 and one batch job per GPU "
                             "(cluster.n_jobs)")
        if opts["processes"] > opts["cores"]:
            raise InputError(f"cluster {self.name}: cluster.processes={opts['processes']} is "
                             f"more than cluster.cores={opts['cores']}; each worker process "
                             "needs a core: set cluster.processes ≤ cluster.cores")
        per_process = parse_bytes(opts["memory"]) / opts["processes"]
        if per_process < MIN_WORKER_MEMORY:
            raise InputError(f"cluster {self.name}: cluster.memory={opts['memory']!r} gives "
                             f"each of the {opts['processes']} worker processes "
                             f"{format_bytes(per_process)}, less than "
                             f"{format_bytes(MIN_WORKER_MEMORY)}; raise cluster.memory")

    @contextmanager
    def start(self, opts: Mapping, warm_tiles: bool, deadline: float) -> Iterator[tuple]:
        import dask

        from algorithms.errors import InputError
        from pipeline.cluster.starting import SCHEDULER_SETTINGS, on_cluster

        command = self.batch.submit
        if shutil.which(command) is None:
            raise InputError(f"cluster={self.name} submits batch jobs with `{command}`, which "
                             "is not on PATH here; run the sweep where it is (the cluster's "
                             "login node), or use cluster=local or cluster=address "
                             "(cluster.dry_run=true prints the job script)")
        _watch_submissions()
        with dask.config.set(SCHEDULER_SETTINGS):  # read by the scheduler it starts here
            cluster = _jobqueue_cluster(opts, self.batch, opts["dashboard_address"])
        with on_cluster(cluster, opts) as client:
            if opts["adapt"]:
                cluster.adapt(minimum_jobs=opts["adapt"]["minimum"],
                              maximum_jobs=opts["adapt"]["maximum"])
            else:
                cluster.scale(jobs=opts["n_jobs"])
            yield client, cluster

    def refused(self, opts: Mapping) -> str | None:
        if not _SUBMIT_FAILURES.failures:
            return None
        failure = _SUBMIT_FAILURES.failures[0]
        return (f"cluster {self.name}: the batch job was refused: {failure}; fix "
                f"{_refused_option(failure, opts)} (cluster.dry_run=true prints the job script)")

    def no_worker(self, opts: Mapping, cluster: Any) -> str:
        ids = sorted({str(job.job_id) for job in getattr(cluster, "workers", {}).values()
                      if getattr(job, "job_id", None)})
        status = self.batch.status
        where = f" (jobs {', '.join(ids)}: {status} {','.join(ids)})" if ids else ""
        return (f"cluster {self.name}: no batch job{where} started a worker within "
                f"{timeout_text(opts)}; they may still be queued (the sweep cancelled them): "
                "raise cluster.start_timeout, or check the job logs (cluster.log_directory)")

    def memory_hint(self, opts: Mapping) -> str:
        from dask.utils import format_bytes, parse_bytes

        per_process = format_bytes(parse_bytes(opts["memory"]) / opts["processes"])
        return (f"each worker may use {per_process} (cluster.memory={opts['memory']} / "
                f"cluster.processes={opts['processes']}); raise cluster.memory")

    def job_script(self, opts: Mapping) -> str:
        """The batch script the cluster would submit; needs no submit command, submits
        nothing."""
        cluster = _jobqueue_cluster(opts, self.batch, "127.0.0.1:0")  # serves no dashboard
        try:
            return cluster.job_script()
        finally:
            cluster.close()


KINDS = (
    JobqueueKind("slurm", "SLURM batch jobs (dask-jobqueue)", batch=BatchSystem(
        "sbatch", "squeue -j", "SLURMCluster",
        # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
        re.compile(r"\d+|\d+:[0-5]\d|\d+:[0-5]\d:[0-5]\d|\d+-\d+(:[0-5]\d(:[0-5]\d)?)?"),
        "[D-]HH:MM:SS (or minutes)", "--gres=gpu:{gpus}")),
    JobqueueKind("pbs", "PBS batch jobs (dask-jobqueue)", batch=BatchSystem(
        "qsub", "qstat", "PBSCluster",
        re.compile(r"\d+:[0-5]\d:[0-5]\d"),  # qsub -l walltime=: HH:MM:SS
        "HH:MM:SS", "-l ngpus={gpus}")),
)


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


def import_jobqueue():
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


def _jobqueue_cluster(opts: Mapping, batch: BatchSystem, dashboard_address: str | None):
    from algorithms.errors import InputError
    from pipeline.cluster.starting import quiet

    try:
        dask_jobqueue = import_jobqueue()
    except ImportError:  # pragma: no cover - dask-jobqueue is a declared dependency
        raise InputError("cluster.kind=" + opts["kind"] + " needs dask-jobqueue; "
                         "pip install dask-jobqueue") from None
    cls = getattr(dask_jobqueue, batch.jobqueue_class)
    kwargs = {k: opts[k] for k in JOBQUEUE_KEYS if opts.get(k) is not None}
    kwargs["job_extra_directives"] = list(kwargs.get("job_extra_directives", []))
    if opts["gpus"]:  # one worker per GPU: the batch job asks for its GPU
        kwargs["job_extra_directives"].append(batch.gpu_directive.format(gpus=opts["gpus"]))
    try:
        with quiet("distributed.deploy.spec"):
            return cls(**kwargs, scheduler_options={"dashboard_address": dashboard_address})
    except (RuntimeError, OSError, ValueError) as err:
        raise InputError(f"cluster {opts['kind']} could not start its scheduler "
                         f"({' '.join(str(err).split())[:200]}); check cluster.interface and "
                         "cluster.dashboard_address") from None


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
