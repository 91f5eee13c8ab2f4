"""``cluster=address``: an existing Dask scheduler (``scheduler=tcp://host:8786``) and its
workers; the sweep starts and closes none of them. Nothing waits for ever: an address where
nothing listens, an unknown host and a port where something else answers are each one line.

Its errors are imported where they are raised: importing a kind (``--help``, the fork server
of :mod:`pipeline.cluster.prestart`) imports nothing of ``algorithms/``.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pipeline.cluster.kinds.base import ClusterKind, timeout_text


@dataclass(frozen=True)
class AddressKind(ClusterKind):
    def options(self) -> dict[str, Any]:
        from algorithms.options import Option
        from pipeline.cluster.option_forms import address, checked, common_options

        return {
            **common_options(self.name, "10s", "how long to wait for the scheduler and its "
                                               "first worker"),
            "address": Option(None, "any", "the scheduler (set by scheduler=)", none_ok=True,
                              parse=checked(self.name, "address", "a scheduler address like "
                                            "tcp://host:8786", "tcp://127.0.0.1:8786", address,
                                            spelled="scheduler")),
        }

    def check(self, opts: Mapping) -> None:
        from algorithms.errors import InputError

        if not opts["address"]:
            raise InputError("cluster=address needs the scheduler's address; pass "
                             "scheduler=tcp://host:8786 (where `dask scheduler` runs)")

    @contextmanager
    def start(self, opts: Mapping, warm_tiles: bool, deadline: float) -> Iterator[tuple]:
        from distributed import Client

        from algorithms.errors import InputError

        address = opts["address"]
        _check_reachable(address, max(0.0, deadline - time.monotonic()), opts)
        try:
            client = Client(address, timeout=max(1.0, deadline - time.monotonic()),
                            set_as_default=False)
        except Exception as err:  # refused, timed out, or something else answered
            raise InputError(f"no Dask scheduler answered at scheduler={address} "
                             f"({type(err).__name__}: {' '.join(str(err).split())[:160]}); pass "
                             "the address `dask scheduler` printed as scheduler=") from None
        with client:
            yield client, None

    def no_worker(self, opts: Mapping, cluster: Any) -> str:
        return (f"the scheduler at {opts['address']} has no worker after "
                f"{timeout_text(opts)}; start one (dask worker {opts['address']}) or "
                "raise cluster.start_timeout")

    def memory_hint(self, opts: Mapping) -> str:
        return (f"the workers of {opts['address']} have the memory limits they were started "
                "with (dask worker --memory-limit); start workers with more memory")


KIND = AddressKind("address", "an existing Dask scheduler and its workers (scheduler=...)",
                   starts_workers=False)


def _check_reachable(address: str, timeout: float, opts: Mapping) -> None:
    """Fail at once when nothing listens at a tcp-like scheduler address (the port is closed or
    the host unknown), within ``timeout`` when the host does not answer, and within ``timeout``
    when what listens at a ``tcp://`` address is not a Dask scheduler (:func:`_check_greeting`:
    Dask's client would wait for its handshake for ever)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    from algorithms.errors import InputError

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
        raise InputError(f"no answer from scheduler={address} within {timeout_text(opts)}; is "
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
    from algorithms.errors import InputError

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
                     f"within {timeout_text(opts)} (a Dask scheduler greets at once) and did "
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
