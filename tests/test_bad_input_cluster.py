"""Bad cluster input for a sweep: one ``error:`` line, exit 2, the bad value named, nothing on
disk changed, and nothing hangs: a cluster that cannot start fails fast (harness:
``tests/bad_input.py``)."""

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.bad_input import Case, params, run_case, run_command

SWEEP = ("pipeline", "-m", "seed=0,1", "dataset=sine1d")
# PATH without a batch system's submit commands (this machine has none anyway)
NO_BATCH_PATH = os.pathsep.join(
    d for d in os.environ.get("PATH", "").split(os.pathsep)
    if d and not any((Path(d) / c).exists() for c in ("sbatch", "qsub")))
FAKE_BIN = Path(tempfile.gettempdir()) / f"sgp-fake-sbatch-{os.getpid()}"


@pytest.fixture(scope="module", autouse=True)
def _remove_fake_batch_systems():
    yield
    shutil.rmtree(FAKE_BIN, ignore_errors=True)


def fake_sbatch(name: str, body: str):
    """A setup writing ``FAKE_BIN/<name>/sbatch`` (running ``body``) and a no-op ``scancel``;
    the case's PATH starts with that directory."""

    def setup(workdir: Path) -> None:
        bin_dir = FAKE_BIN / name
        bin_dir.mkdir(parents=True, exist_ok=True)
        for command, text in (("sbatch", body), ("scancel", "exit 0")):
            (bin_dir / command).write_text(f"#!/bin/sh\n{text}\n")
            (bin_dir / command).chmod(0o755)

    return setup, {"PATH": f"{FAKE_BIN / name}{os.pathsep}{NO_BATCH_PATH}"}


REFUSED, REFUSED_ENV = fake_sbatch("refused", "echo 'sbatch: error: Invalid account or "
                                              "account/partition combination' >&2; exit 1")
QUEUED, QUEUED_ENV = fake_sbatch("queued", "echo 'Submitted batch job 4242'")
NO_BATCH = {"PATH": NO_BATCH_PATH}

CASES = [
    # local
    Case("local-n-workers-negative", (*SWEEP, "cluster.n_workers=-1"), ("cluster.n_workers=-1",)),
    Case("local-n-workers-zero", (*SWEEP, "cluster.n_workers=0"), ("cluster.n_workers=0",)),
    Case("local-n-workers-fraction", (*SWEEP, "cluster.n_workers=1.5"),
         ("cluster.n_workers=1.5",)),
    Case("local-threads-zero", (*SWEEP, "cluster.threads_per_worker=0"),
         ("cluster.threads_per_worker=0",)),
    Case("local-memory-limit-malformed", (*SWEEP, "cluster.memory_limit=lots"),
         ("cluster.memory_limit='lots'", "4GB")),
    Case("local-memory-limit-tiny", (*SWEEP, "cluster.memory_limit=1kB"),
         ("cluster.memory_limit='1kB'", "at least")),
    Case("local-dashboard-no-port", (*SWEEP, "cluster.dashboard_address=localhost"),
         ("cluster.dashboard_address='localhost'", "host:port")),
    Case("local-dashboard-port-out-of-range", (*SWEEP, "cluster.dashboard_address=:99999"),
         ("cluster.dashboard_address=':99999'", "99999")),
    Case("local-dashboard-foreign-host", (*SWEEP, "cluster.dashboard_address=203.0.113.7:8787"),
         ("203.0.113.7", "not an address of this machine")),
    Case("local-start-timeout-malformed", (*SWEEP, "cluster.start_timeout=soon"),
         ("cluster.start_timeout='soon'", "60s")),
    Case("local-start-timeout-zero", (*SWEEP, "cluster.start_timeout=0"),
         ("cluster.start_timeout=0",)),
    Case("local-unknown-option", (*SWEEP, "+cluster.n_wokers=2"), ("'n_wokers'", "n_workers")),
    Case("unknown-cluster-kind", (*SWEEP, "cluster.kind=sge"), ("'sge'", "slurm")),
    Case("unknown-cluster", (*SWEEP, "cluster=sge"), ("'sge'", "slurm")),
    # an existing scheduler
    Case("address-missing", (*SWEEP, "cluster=address"), ("scheduler=tcp://host:8786",)),
    Case("address-malformed", (*SWEEP, "cluster=address", "scheduler=nowhere"),
         ("scheduler='nowhere'",)),
    Case("address-unreachable", (*SWEEP, "cluster=address", "scheduler=tcp://127.0.0.1:9"),
         ("scheduler=tcp://127.0.0.1:9", "dask scheduler"), timeout=25),
    Case("address-unknown-host",
         (*SWEEP, "cluster=address", "scheduler=tcp://no.such.host.invalid:8786"),
         ("no.such.host.invalid",), timeout=25),
    Case("address-start-timeout-malformed",
         (*SWEEP, "cluster=address", "scheduler=tcp://127.0.0.1:9", "cluster.start_timeout=-5s"),
         ("cluster.start_timeout='-5s'",)),
    # batch clusters
    Case("slurm-no-sbatch", (*SWEEP, "cluster=slurm"), ("`sbatch`", "PATH"), env=NO_BATCH),
    Case("pbs-no-qsub", (*SWEEP, "cluster=pbs"), ("`qsub`", "PATH"), env=NO_BATCH),
    Case("slurm-submit-refused", (*SWEEP, "cluster=slurm"), ("sbatch", "Invalid account"),
         setup=REFUSED, env=REFUSED_ENV, timeout=60),
    Case("slurm-never-starts", (*SWEEP, "cluster=slurm", "cluster.start_timeout=2s"),
         ("cluster.start_timeout=2s", "4242"), setup=QUEUED, env=QUEUED_ENV, timeout=60),
    Case("slurm-n-jobs-zero", (*SWEEP, "cluster=slurm", "cluster.n_jobs=0"),
         ("cluster.n_jobs=0",), env=NO_BATCH),
    Case("slurm-cores-zero", (*SWEEP, "cluster=slurm", "cluster.cores=0"), ("cluster.cores=0",),
         env=NO_BATCH),
    # every job needs more than a local worker may hold (its nanny would kill it mid-fit)
    Case("local-worker-memory-below-exact-fit",
         ("pipeline", "-m", "algorithm=exact", "dataset=gaussian_bumps",
          "dataset.n_train=6000,7000", "cluster.n_workers=1", "cluster.memory_limit=300MB"),
         ("a fit on n_train=6000 needs 339.6 MiB of memory but 271.8 MiB is available",
          "cluster.memory_limit=300MB")),
    Case("slurm-adapt-minimum-zero",
         (*SWEEP, "cluster=slurm", "cluster.adapt.minimum=0", "cluster.adapt.maximum=4"),
         ("cluster.adapt=", "1 ≤ minimum ≤ maximum"), env=NO_BATCH),
    Case("slurm-adapt-maximum-only", (*SWEEP, "cluster=slurm", "cluster.adapt.maximum=4"),
         ("cluster.adapt=", "both minimum and maximum"), env=NO_BATCH),
    Case("slurm-adapt-below-minimum",
         (*SWEEP, "cluster=slurm", "cluster.adapt.minimum=4", "cluster.adapt.maximum=2"),
         ("cluster.adapt=", "minimum ≤ maximum"), env=NO_BATCH),
    Case("slurm-processes-over-cores",
         (*SWEEP, "cluster=slurm", "cluster.cores=2", "cluster.processes=4"),
         ("cluster.processes=4", "cluster.cores=2"), env=NO_BATCH),
    Case("slurm-walltime-malformed", (*SWEEP, "cluster=slurm", "cluster.walltime=1h"),
         ("cluster.walltime='1h'", "01:00:00")),
    Case("slurm-dry-run-walltime-malformed",
         (*SWEEP, "cluster=slurm", "cluster.dry_run=true", "cluster.walltime=1:99:00"),
         ("cluster.walltime='1:99:00'",), env=NO_BATCH),
    Case("slurm-interface-unknown", (*SWEEP, "cluster=slurm", "cluster.interface=nosuch0"),
         ("cluster.interface='nosuch0'", "lo")),
    Case("pbs-walltime-slurm-form", (*SWEEP, "cluster=pbs", "cluster.walltime=2-00:00:00"),
         ("cluster.walltime='2-00:00:00'", "HH:MM:SS")),
    Case("pbs-memory-malformed", (*SWEEP, "cluster=pbs", "cluster.memory=lots"),
         ("cluster.memory='lots'",), env=NO_BATCH),
    Case("pbs-dry-run-not-a-bool", (*SWEEP, "cluster=pbs", "cluster.dry_run=maybe"),
         ("cluster.dry_run='maybe'", "true or false"), env=NO_BATCH),
]


@pytest.mark.parametrize("case", params(CASES))
def test_bad_input(case, seed_dir, tmp_path, capfd, monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


# also as real `python -m` commands: a cluster that cannot start, a batch system found on PATH
E2E = ["address-unreachable", "slurm-submit-refused"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("case", params(CASES, E2E))
def test_bad_input_as_a_command(case, seed_dir, tmp_path):
    run_command(case, seed_dir, tmp_path / "work")


def _silent(conn):  # accepts and never speaks
    time.sleep(30)


def _http(conn):  # answers a request as an HTTP server does, nothing before one
    conn.settimeout(30)
    with contextlib.suppress(OSError):
        if conn.recv(4096):
            conn.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            time.sleep(30)


def _chatty(conn):  # greets, but not as Dask does
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
    time.sleep(30)


@contextlib.contextmanager
def foreign_server(serve):
    """A TCP server on a free port of 127.0.0.1 whose connections ``serve`` handles, each on
    its own daemon thread; yields the port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.mark.parametrize(("serve", "names"), [
    (_silent, ("sent nothing within cluster.start_timeout=3s", "did not answer HTTP")),
    (_http, ("an HTTP server answered", "404 Not Found", "not its dashboard's")),
    (_chatty, ("not a Dask scheduler", "SSH-2.0")),
], ids=["silent", "http", "other-protocol"])
def test_a_foreign_server_at_the_scheduler_address_fails_within_the_start_timeout(
        serve, names, seed_dir, tmp_path, capfd, monkeypatch):
    """What listens at the scheduler address is not a Dask scheduler: one line naming the
    address and what answered, within cluster.start_timeout (Dask's client alone would wait for
    its handshake for ever)."""
    with foreign_server(serve) as port:
        address = f"tcp://127.0.0.1:{port}"
        case = Case("foreign", (*SWEEP, "cluster=address", f"scheduler={address}",
                                "cluster.start_timeout=3s"), (f"scheduler={address}", *names),
                    timeout=10)
        run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


def test_a_busy_dashboard_port_is_taken_elsewhere_without_dasks_warning(tmp_path, run_cli):
    """The dashboard's port is in use: the sweep runs, its dashboard on another port (the link
    it prints), and stderr holds none of Dask's 4-line UserWarning."""
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        ran = run_cli(tmp_path, "-m", "algorithm=exact", "dataset=sine1d", "dataset.n_train=40",
                      "cluster.n_workers=1", f"cluster.dashboard_address=127.0.0.1:{port}")
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.strip() == "" and "already in use" not in ran.stdout
    link = next(line for line in ran.stdout.splitlines() if line.startswith("dask dashboard: "))
    assert link.startswith("dask dashboard: http://127.0.0.1:") and f":{port}/" not in link
