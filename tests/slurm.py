"""A real single-node SLURM for the tests: munge, slurmctld and slurmd started from a
configuration generated for this machine (its hostname, cores and memory), state and logs in a
temporary directory, stopped afterwards. ``.ci/run`` installs the Debian packages; a missing
daemon or a controller that does not come up is a test failure with a one-line reason, never
a skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGES = "slurmctld slurmd slurm-client munge"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
MUNGE_PIDFILE = Path("/run/munge/munged.pid")
NODE_MEMORY_MB = 6000  # what the node offers to batch jobs (the tests ask for ≤ 2 GB a job)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fail(reason: str) -> None:
    pytest.fail(f"SLURM test cluster: {reason}", pytrace=False)


def _sbin(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


@dataclass
class Slurm:
    """A running single-node SLURM; ``env`` is what a process needs to use it."""

    root: Path
    conf: Path
    node: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    munged: int | None = None  # the munge daemon started for these tests, stopped with them

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        proc = subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                              timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def queue(self) -> list[dict[str, str]]:
        """The jobs in the queue now: id, name, state."""
        out = self.run("squeue", "-h", "-o", "%i|%j|%T")
        return [dict(zip(("id", "name", "state"), line.split("|"), strict=True))
                for line in out.splitlines() if line.strip()]

    def show_jobs(self) -> list[dict[str, str]]:
        """`scontrol show jobs` (finished ones too, for MinJobAge), each as key → value."""
        out = self.run("scontrol", "show", "jobs", "-o")
        jobs = []
        for line in out.splitlines():
            if not line.strip() or line.startswith("No jobs"):
                continue
            fields = {}
            for item in line.split():
                key, _, value = item.partition("=")
                fields[key] = value
            jobs.append(fields)
        return jobs

    def cancel_all(self) -> None:
        subprocess.run(["scancel", "--user", "root"], env=self.env, capture_output=True)

    def wait_until_empty(self, timeout: float = 60.0) -> list[dict[str, str]]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            left = self.queue()
            if not left:
                return []
            time.sleep(0.5)
        return self.queue()

    def stop(self) -> None:
        self.cancel_all()
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.munged:
            with contextlib.suppress(OSError):
                os.kill(self.munged, signal.SIGTERM)


def _conf(root: Path, node: str, ctld_port: int, slurmd_port: int) -> str:
    cpus = os.cpu_count() or 1
    return f"""\
ClusterName=sgptest
SlurmctldHost={node}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
NodeName={node} CPUs={cpus} RealMemory={NODE_MEMORY_MB} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _start_munge() -> int | None:
    """munged as the munge user (the Debian package made its key), unless one answers; the
    pid of the one started here."""
    if MUNGE_SOCKET.exists() and subprocess.run(
            "munge -n | unmunge", shell=True, capture_output=True).returncode == 0:
        return None
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_SOCKET.parent, "munge", "munge")
    proc = subprocess.run(["runuser", "-u", "munge", "--", _sbin("munged")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        _fail(f"munged did not start ({proc.stderr.strip()[:200]})")
    try:
        return int(MUNGE_PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None


def start(root: Path) -> Slurm:
    """Start munge, slurmctld and slurmd for this machine under ``root``; wait until the node
    is idle."""
    missing = [b for b in BINARIES if _sbin(b) is None]
    if missing:
        _fail(f"{', '.join(missing)} not installed; .ci/run installs them "
              f"(apt-get install {PACKAGES})")
    if os.geteuid() != 0:
        _fail("the daemons must be started as root (run the tests as root, as CI does)")
    munged = _start_munge()
    node = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, node, _free_port(), _free_port()))
    slurm = Slurm(root, conf, node, munged=munged)
    for daemon in ("slurmctld", "slurmd"):
        slurm.procs.append(subprocess.Popen(
            [_sbin(daemon), "-D", "-f", str(conf)], env=slurm.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
    deadline = time.time() + 60
    state = ""
    while time.time() < deadline:
        if any(p.poll() is not None for p in slurm.procs):
            break
        try:
            state = slurm.run("sinfo", "-h", "-o", "%T").strip()
        except RuntimeError:
            state = ""
        if state == "idle":
            return slurm
        time.sleep(0.5)
    log = (root / "log" / "slurmctld.log")
    tail = log.read_text().splitlines()[-1:] if log.exists() else []
    slurm.stop()
    _fail(f"the node did not become idle within 60 s (sinfo: {state or 'no answer'}; "
          f"slurmctld log: {' '.join(tail)[:200]})")
    raise AssertionError("unreachable")
