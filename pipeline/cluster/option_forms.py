"""The forms of the cluster kinds' option values: the ``parse`` functions of their
:class:`~algorithms.options.Option` tables (each bad value one
:class:`~algorithms.errors.InputError` line naming ``cluster.<key>``, what it must be and an
example) and the options every kind has. Each kind declares its table in its module
(:mod:`pipeline.cluster.kinds`)."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from typing import Any

from dask.utils import format_bytes, parse_bytes, parse_timedelta

from algorithms.errors import InputError
from algorithms.options import Option

MIN_WORKER_MEMORY = parse_bytes("256MB")  # a Dask worker process alone takes ~100 MB


class Bad(ValueError):
    """A value of the right type but wrong form; the text says why (appended to the message)."""


def checked(kind: str, key: str, what: str, example: str, fn: Callable[[Any], Any], *,
             spelled: str | None = None) -> Callable[[Any], Any]:
    """An :class:`Option` ``parse`` function: ``fn(value)``, or an InputError naming the
    option as the user spells it (``cluster.<key>`` unless ``spelled``), what it must be and
    an example."""
    spelled = spelled or f"cluster.{key}"

    def parse(value: Any) -> Any:
        try:
            return fn(value)
        except (Bad, ValueError, TypeError, KeyError) as err:
            why = f" ({err})" if isinstance(err, Bad) else ""
            raise InputError(f"cluster {kind}: {spelled}={value!r} is invalid{why}; it must be "
                             f"{what}, e.g. {spelled}={example}") from None

    return parse


def duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    if parse_timedelta(value, default="seconds") <= 0:
        raise Bad("it must be longer than 0 s")
    return value


def seconds(value: Any) -> float:
    """A validated duration (``"10s"``, ``"1h"``, ``30``) in seconds."""
    return float(parse_timedelta(value, default="seconds"))


def worker_memory(value: Any) -> Any:
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    if isinstance(value, float) and not value.is_integer():
        raise Bad("a byte count is a whole number")
    if parse_bytes(value) < MIN_WORKER_MEMORY:
        raise Bad(f"a worker needs at least {format_bytes(MIN_WORKER_MEMORY)}")
    return value


def memory(value: Any) -> Any:
    if value == "auto":
        raise Bad("a batch job needs an explicit size")
    return worker_memory(value)


def walltime(pattern: re.Pattern) -> Callable[[Any], Any]:
    """A batch job's time limit in one of the forms ``pattern`` accepts."""

    def parse(value: Any) -> Any:
        if not isinstance(value, str) or not pattern.fullmatch(value.strip()):
            raise TypeError(value)
        return value.strip()

    return parse


def adapt(value: Any) -> dict[str, int] | None:
    """``{minimum: m, maximum: M}`` batch jobs (1 ≤ m ≤ M), or both null: a fixed n_jobs."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"minimum", "maximum"}:
        raise TypeError(value)
    low, high = value.get("minimum"), value.get("maximum")
    if low is None and high is None:
        return None
    if low is None or high is None:
        raise Bad("set both minimum and maximum, or neither")
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise TypeError(value)
    if not 1 <= low <= high:
        raise Bad("it needs 1 ≤ minimum ≤ maximum: a sweep waits for its first worker")
    return {"minimum": low, "maximum": high}


def host_port(value: Any) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise TypeError(value)
    host, _, port_text = value.strip().rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise Bad(f"port {port_text!r} is not a number in 0..65535")
    return host, int(port_text)


def bindable(host: str) -> None:
    """Raise Bad unless this machine can listen on ``host``."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError:
        raise Bad(f"host {host!r} is unknown") from None
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(sockaddr)
        except OSError:
            raise Bad(f"{host} is not an address of this machine") from None


def dashboard(value: Any) -> str:
    """``host:port``; an empty host is 127.0.0.1 (this machine only), 0.0.0.0 every interface."""
    host, port = host_port(value)
    host = host or "127.0.0.1"
    bindable(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def directives(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, str) and v.strip() for v in value):
        raise TypeError(value)
    return list(value)


def interface(value: Any) -> str:
    import psutil

    if not isinstance(value, str):
        raise TypeError(value)
    names = sorted(psutil.net_if_addrs())
    if value not in names:
        raise Bad(f"this machine's interfaces are {', '.join(names)}")
    return value


def address(value: Any) -> str:
    """A scheduler address ``scheme://host:port`` (``tcp://`` when no scheme is given)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    if not isinstance(value, str):
        raise TypeError(value)
    scheme, location = parse_address(value.strip())
    host, port = parse_host_port(location)
    if not host or not 0 < int(port) <= 65535:
        raise Bad("it needs a host and a port")
    return f"{scheme}://{location}"


def common_options(kind: str, start_timeout: str, why: str) -> dict[str, Option]:
    return {
        "kind": Option(kind, "choice", "which cluster (set by cluster=<name>)", choices=(kind,)),
        "start_timeout": Option(start_timeout, "any", why, parse=checked(
            kind, "start_timeout", "a duration > 0 like 10s, 5m or 1h", start_timeout, duration)),
    }


def dashboard_option(kind: str, doc: str) -> Option:
    """null: no dashboard (the scheduler starts ~0.5 s sooner: it does not import bokeh)."""
    return Option("127.0.0.1:8787", "any", doc, none_ok=True, parse=checked(
        kind, "dashboard_address", "host:port of this machine (0.0.0.0:8787 exposes it on every "
        "interface), or null for none", "127.0.0.1:8787", dashboard))
