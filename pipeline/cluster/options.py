"""Every cluster kind's options, declared once in :data:`OPTIONS` (the yaml files of
``conf/cluster/`` are tested against it), and :func:`check`, which validates a cluster config
against its table before anything starts: each bad value is one
:class:`~algorithms.errors.InputError` line naming the value and the fix.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dask.utils import format_bytes, parse_bytes, parse_timedelta

from algorithms.errors import InputError
from algorithms.options import Option, validate
from pipeline.cluster.kinds import BATCH_KINDS, KINDS, kind_of

JOBQUEUE_KEYS = ("cores", "memory", "processes", "walltime", "queue", "account",
                 "job_extra_directives", "local_directory", "log_directory", "interface")


MIN_WORKER_MEMORY = parse_bytes("256MB")  # a Dask worker process alone takes ~100 MB

# a task whose worker dies is given to another worker; when the workers running it have died
# ALLOWED_FAILURES + 1 times, Dask ends it as KilledWorker (distributed.scheduler.allowed-
# failures, set on every cluster a sweep starts; an address cluster's scheduler keeps its own)
ALLOWED_FAILURES = 3

# a worker of a batch cluster (slurm, pbs) that sends its scheduler no heartbeat for this long
# (frozen, its node partitioned) is removed and its tasks go to the other workers
# (distributed.scheduler.worker-ttl, set on the batch clusters a sweep starts; a local
# cluster's frozen workers are found sooner: pipeline.cluster.liveness)
WORKER_TTL = "5 minutes"


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


def _walltime(kind: str) -> Callable[[Any], Any]:
    pattern = KINDS[kind].batch.walltime

    def parse(value: Any) -> Any:
        if not isinstance(value, str) or not pattern.fullmatch(value.strip()):
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


def _common(kind: str, start_timeout: str, why: str) -> dict[str, Option]:
    return {
        "kind": Option(kind, "choice", "which cluster (set by cluster=<name>)", choices=(kind,)),
        "start_timeout": Option(start_timeout, "any", why, parse=_checked(
            kind, "start_timeout", "a duration > 0 like 10s, 5m or 1h", start_timeout, _duration)),
    }


def _dashboard_option(kind: str, doc: str) -> Option:
    """null: no dashboard (the scheduler starts ~0.5 s sooner: it does not import bokeh)."""
    return Option("127.0.0.1:8787", "any", doc, none_ok=True, parse=_checked(
        kind, "dashboard_address", "host:port of this machine (0.0.0.0:8787 exposes it on every "
        "interface), or null for none", "127.0.0.1:8787", _dashboard))


def _jobqueue_options(kind: str) -> dict[str, Option]:
    command = KINDS[kind].batch.submit
    walltime_form = KINDS[kind].batch.walltime_form
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
        **_common("local", "60s", "how long each worker may take to start (a loaded machine "
                                  "starts them slowly)"),
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
    **{kind: _jobqueue_options(kind) for kind in BATCH_KINDS},
}


def check(cfg: Mapping) -> dict[str, Any]:
    """The cluster config ``cfg`` validated against its kind's :data:`OPTIONS` table (defaults
    filled in); raises :class:`InputError` naming the first bad ``cluster.<option>``."""
    kind = kind_of(cfg).name
    opts = validate(OPTIONS[kind], dict(cfg), owner=f"cluster {kind}", prefix="cluster.")
    if kind == "address" and not opts["address"]:
        raise InputError("cluster=address needs the scheduler's address; pass "
                         "scheduler=tcp://host:8786 (where `dask scheduler` runs)")
    if KINDS[kind].batch is not None:
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


def worker_memory_limit(opts: Mapping) -> int:
    """The bytes each worker of a local cluster may use, from its validated options: a size,
    or ``auto``: this machine's memory shared equally among the ``n_workers`` workers (Dask's
    own ``auto`` shares it among the cores, so one worker on two cores would get half)."""
    if opts["memory_limit"] != "auto":
        return int(parse_bytes(opts["memory_limit"]))
    return int(memory_limit() // (opts["n_workers"] or os.cpu_count() or 1))


@functools.cache
def memory_limit() -> int:
    """Dask's ``distributed.system.MEMORY_LIMIT`` (this machine's memory, or its cgroup's or
    RSS rlimit's limit where lower). Planning a sweep does without importing distributed
    (~1 s of CPU; a dry run never does): its ``system`` module is then run alone."""
    module = sys.modules.get("distributed.system")
    if module is None:
        spec = importlib.util.find_spec("distributed")
        path = Path(spec.origin).with_name("system.py") if spec and spec.origin else None
        alone = path and importlib.util.spec_from_file_location("_distributed_system", path)
        if alone:
            module = importlib.util.module_from_spec(alone)
            alone.loader.exec_module(module)
        else:
            import distributed.system as module
    return int(module.MEMORY_LIMIT)


def distributed_setting(key: str):
    """Dask's setting ``key`` with distributed's defaults under the user's configuration, as
    importing distributed sets them; before that import (planning a sweep), what its
    :mod:`distributed.config` does is done here instead of importing it."""
    import dask.config

    if "distributed.config" not in sys.modules and not _DISTRIBUTED_DEFAULTS \
            and not _distributed_defaults():
        import distributed.config  # noqa: F401
    return dask.config.get(key)


_DISTRIBUTED_DEFAULTS: list[bool] = []


def _distributed_defaults() -> bool:
    """What :mod:`distributed.config` does to Dask's configuration (its ``distributed.yaml``
    added as defaults under the user's settings, the keys of its ``deprecations`` renamed),
    read from its files; False (nothing done) where they are not as expected."""
    import ast

    import dask.config
    import yaml

    spec = importlib.util.find_spec("distributed")
    if spec is None or spec.origin is None:
        return False
    try:
        defaults = yaml.safe_load(Path(spec.origin).with_name("distributed.yaml").read_text())
        tree = ast.parse(Path(spec.origin).with_name("config.py").read_text())
        found = [ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign)
                 and [getattr(t, "id", None) for t in node.targets] == ["deprecations"]]
    except (OSError, SyntaxError, ValueError, yaml.YAMLError):
        return False
    if not isinstance(defaults, dict) or len(found) != 1 or not isinstance(found[0], dict):
        return False
    dask.config.update_defaults(defaults)
    dask.config.rename(found[0])
    dask.config.deprecations.update(found[0])
    _DISTRIBUTED_DEFAULTS.append(True)
    return True


def local_worker_bytes(cluster_cfg: Mapping) -> float | None:
    """The memory one job may use on a worker of a local cluster: the bytes at which its nanny
    terminates it (``cluster.memory_limit`` × Dask's ``distributed.worker.memory.terminate``),
    or None if the limit is off (memory_limit=0) or the cluster is not local."""
    opts = check(cluster_cfg)
    if opts["kind"] != "local":
        return None
    limit = worker_memory_limit(opts)
    terminate = distributed_setting("distributed.worker.memory.terminate")
    if not limit or not terminate:
        return None
    return float(limit) * float(terminate)


def memory_hint(cluster_cfg: Mapping) -> str:
    """How much memory one worker of this cluster may use and which option changes it (for a
    job whose worker was killed for memory, e.g. a KilledWorker message)."""
    try:
        opts = check(cluster_cfg)
    except InputError:
        return "the cluster options are invalid"
    kind = opts["kind"]
    if kind == "local":
        machine = memory_limit()
        limit = worker_memory_limit(opts)
        n_workers = opts["n_workers"] or os.cpu_count() or 1
        return (f"each worker may use {format_bytes(limit) if limit else 'any amount'} "
                f"(cluster.memory_limit={opts['memory_limit']}, {n_workers} "
                f"worker{'s' if n_workers != 1 else ''} on "
                f"{format_bytes(machine)}); raise cluster.memory_limit, with fewer "
                f"cluster.n_workers so that together they fit in {format_bytes(machine)}")
    if kind == "address":
        return (f"the workers of {opts['address']} have the memory limits they were started with "
                "(dask worker --memory-limit); start workers with more memory")
    per_process = format_bytes(parse_bytes(opts["memory"]) / opts["processes"])
    return (f"each worker may use {per_process} (cluster.memory={opts['memory']} / "
            f"cluster.processes={opts['processes']}); raise cluster.memory")

