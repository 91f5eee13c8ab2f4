"""Dying and frozen workers are bounded and named (issue 51, classes 4 and 6), in process: the
sweep's watch over its cluster (pipeline.cluster.liveness), the client's job_timeout
(pipeline.sweep.deadlines), the local cluster's start, and the one line of a lost connection.
The subprocess tests that freeze and kill real workers are in tests/test_faults.py."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import distributed
import pytest
from distributed.comm.core import CommClosedError

from algorithms.errors import InputError
from pipeline.cluster import connect as connect_module
from pipeline.cluster import liveness
from pipeline.cluster.deaths import WorkerDeaths
from pipeline.cluster.kinds.local import local_cluster
from pipeline.cluster.liveness import ClusterLost, Liveness
from pipeline.results.job_file import job_status, load_job_result
from pipeline.sweep import deadlines
from pipeline.sweep.deadlines import JobDeadlines

LOCAL = {"kind": "local", "n_workers": 2, "dashboard_address": None}


class FakeClient:
    """What Liveness asks of a client: the scheduler's workers and its events (``registered``:
    the scheduler times of its workers' registrations); restarts asked for. ``answers``, if
    given, are the scheduler's successive worker lists (an OSError: it did not answer)."""

    def __init__(self, workers=None, cluster=None, registered=(), answers=None):
        self.workers = workers if workers is not None else {}
        self.cluster = cluster
        self.registered = list(registered)
        self.answers = answers
        self.restarted = []

    def _identity(self, n_workers):
        workers = self.answers.pop(0) if self.answers else self.workers
        if isinstance(workers, Exception):
            raise workers
        return {"workers": dict(workers), "n_workers": len(workers)}

    @property
    def scheduler(self):  # the scheduler's own answers
        return SimpleNamespace(identity=self._identity, events=lambda topic: tuple(
            (at, {"action": "add-worker", "worker": f"tcp://w{i}"})
            for i, at in enumerate(self.registered)) + ((0.5, {"action": "add-client"}),))

    def sync(self, func, *args, **kwargs):
        return func(*args, **kwargs)

    def scheduler_info(self):  # the client's cache as its periodic update leaves it
        return {"workers": {}, "n_workers": len(self.workers)}

    def restart_workers(self, addresses, timeout=None, raise_for_error=True):
        self.restarted.extend(addresses)


def _nanny_log(deaths: WorkerDeaths, message: str) -> None:
    deaths.handle(logging.LogRecord("distributed.nanny", logging.INFO, __file__, 0, message,
                                    (), None))


class FakeTime:
    """A clock the test moves (monotonic seconds; the wall clock 1000 s ahead) and a load."""

    def __init__(self, load=1.0, cpus=2):
        self.now, self.load_avg, self.cpus = 0.0, load, cpus

    def install(self, watch: Liveness) -> Liveness:
        watch.clock, watch.wall = (lambda: self.now), (lambda: 1000.0 + self.now)
        watch.load = lambda: (self.load_avg, self.cpus)
        watch._started = self.now
        return watch


def test_a_cluster_without_workers_stops_with_one_line():
    deaths = WorkerDeaths()
    for pid in range(3):
        _nanny_log(deaths, f"Worker process {100 + pid} was killed by signal 11")
    t = FakeTime()
    watch = t.install(Liveness(FakeClient(), LOCAL, deaths))
    watch.no_worker_seconds = 0.2
    watch.check()  # the first look without workers starts the clock
    t.now = 0.3
    with pytest.raises(ClusterLost) as err:
        watch.check()
    assert str(err.value) == ("the cluster has had no worker for 0.3 s (the bound 0.2 s at "
                              "load 1 on 2 CPUs; no worker seen in the 0.3 s watched); 3 died "
                              "(3 killed by SIGSEGV): none could be restarted")
    assert isinstance(err.value, InputError)  # the command line's one error line


def test_the_no_worker_bound_is_stretched_by_the_load():
    """At load 15 on 2 cores a worker restarts ~7.5 times slower: the 60 s bound is 450 s, the
    highest load of the spell counts, and the stretch stops at MAX_LOAD_FACTOR."""
    assert liveness.load_factor(0.3, 2) == 1.0 and liveness.load_factor(15.0, 2) == 7.5
    assert liveness.load_factor(100.0, 2) == liveness.MAX_LOAD_FACTOR == 10.0
    t = FakeTime(load=15.0, cpus=2)
    watch = t.install(Liveness(FakeClient({"tcp://w": {}}), LOCAL))
    watch.check()  # a worker: seen at 0
    watch.client.workers = {}
    t.now = 1.0
    watch.check()
    t.load_avg = 0.5  # the load falls meanwhile: the spell's highest still holds
    for t.now in (62.0, 300.0, 450.9):
        watch.check()
    t.now = 451.5
    with pytest.raises(ClusterLost) as err:
        watch.check()
    assert str(err.value) == ("the cluster has had no worker for 450 s (the bound 450 s at "
                              "load 15 on 2 CPUs; a worker last seen 452 s before): none could "
                              "be restarted")


def test_a_worker_that_registered_during_the_wait_starts_the_clock_again():
    """A restarted worker that registered and died between two looks (only the scheduler's
    events saw it) resets the no-worker clock; the line then names its registration."""
    t = FakeTime()
    client = FakeClient(registered=[990.0])  # the first worker, before the spell
    watch = t.install(Liveness(client, LOCAL))
    watch.check()
    t.now = 59.0
    client.registered.append(1000.0 + 58.0)  # registered at 58 s, gone by 59 s
    watch.check()
    assert watch._no_worker_since is None and watch._worker_seen == 59.0
    for t.now in (60.0, 119.9):  # a new spell from 60 s: 60 s more before a verdict
        watch.check()
    t.now = 120.5
    with pytest.raises(ClusterLost) as err:
        watch.check()
    registered = time.strftime("%H:%M:%S", time.localtime(1058.0))
    assert str(err.value) == (f"the cluster has had no worker for 60.5 s (the bound 60 s at "
                              f"load 1 on 2 CPUs; a worker last seen 61.5 s before, last "
                              f"registered at {registered}): none could be restarted")


def test_the_verdict_asks_the_scheduler_once_more():
    """Past the bound, the scheduler's worker list is read again before the verdict: a worker
    there (registered since the look) holds the sweep; a scheduler that does not answer is
    no verdict, up to the hard limit (STARTING_SECONDS)."""
    t = FakeTime()
    worker = {"tcp://w": {}}
    client = FakeClient(answers=[{}, {}, worker])  # the spell, the look past it, the verdict's
    watch = t.install(Liveness(client, LOCAL))
    watch.check()
    t.now = 61.0
    watch.check()
    assert watch._no_worker_since is None and watch._worker_seen == 61.0
    lost = OSError("timed out")
    client.answers = [{}, {}, lost, {}, lost, {}, lost]
    t.now = 62.0
    watch.check()
    t.now = 130.0
    watch.check()  # past the 60 s bound, but the scheduler did not answer
    t.now = 500.0
    watch.check()
    t.now = 670.0  # past STARTING_SECONDS: the verdict whatever the scheduler says
    with pytest.raises(ClusterLost, match=r"^the cluster has had no worker for 608 s \(the "
                                          r"bound 60 s at load 1 on 2 CPUs; a worker last seen "
                                          r"609 s before\): none could be restarted$"):
        watch.check()


def test_a_local_worker_still_starting_on_a_loaded_machine_is_waited_for(busy_process,
                                                                        stopped_process,
                                                                        monkeypatch):
    """A nanny's worker process that uses CPU time without having joined yet (importing on a
    machine other work keeps busy) holds the no-worker clock, up to STARTING_SECONDS in all;
    one that uses none (stopped) does not."""
    monkeypatch.setattr(liveness, "STARTING_SECONDS", 1.5)
    t = FakeTime()
    starting = SimpleNamespace(pid=busy_process.pid, worker_address=None)
    watch = t.install(Liveness(FakeClient(cluster=SimpleNamespace(workers={0: starting})),
                               LOCAL))
    watch.no_worker_seconds = 0.4
    watch.check()
    for _ in range(4):  # 1.2 s without a worker, three times the bound
        time.sleep(0.3)  # real time for the busy process to use CPU time
        t.now += 0.3
        watch.check()
    t.now += 0.5
    with pytest.raises(ClusterLost, match=r"^the cluster has had no worker for 1\.7 s \(the "
                                          r"bound 0\.4 s at load 1 on 2 CPUs; no worker seen "
                                          r"in the 1\.7 s watched, a worker process seen "
                                          r"starting [0-9.]+ s before \(at most 1\.5 s in "
                                          r"all\)\): none could be restarted$"):
        time.sleep(0.3)
        watch.check()
    stuck = SimpleNamespace(pid=stopped_process.pid, worker_address=None)
    t = FakeTime()
    watch = t.install(Liveness(FakeClient(cluster=SimpleNamespace(workers={0: stuck})), LOCAL))
    watch.no_worker_seconds = 0.4
    watch.check()
    t.now = 0.3
    watch.check()
    t.now = 0.6
    with pytest.raises(ClusterLost, match="no worker for 0.6 s"):
        watch.check()


@pytest.fixture
def busy_process():
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_no_worker_bound_is_stated_and_follows_start_timeout():
    assert Liveness(FakeClient(), LOCAL).no_worker_seconds == liveness.NO_WORKER_SECONDS == 60
    slow = {**LOCAL, "start_timeout": "5m"}
    assert Liveness(FakeClient(), slow).no_worker_seconds == 300


def test_workers_that_keep_dying_with_no_job_finished_stop_the_sweep():
    deaths = WorkerDeaths()
    watch = Liveness(FakeClient({"tcp://w": {"name": 0}}), {**LOCAL, "n_workers": 1}, deaths)
    assert watch.storm == 20  # max(20, 2 · (allowed failures + 1) · workers)
    for pid in range(19):
        _nanny_log(deaths, f"Worker process {pid + 10} exited with status 1")
    watch.check()  # 19 deaths: not yet
    watch.progressed()  # a job finished: counting starts again
    for pid in range(19):
        _nanny_log(deaths, f"Worker process {pid + 50} was killed by signal 9")
    watch.check()
    _nanny_log(deaths, "Worker process 99 was killed by signal 9")
    with pytest.raises(ClusterLost, match=r"^the cluster's workers keep dying: 39 died \(20 "
                                          r"killed by SIGKILL\) in \d+ s with no job finished"):
        watch.check()


@pytest.fixture
def stopped_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGSTOP)
    yield proc
    proc.kill()
    proc.wait()


def test_a_frozen_local_worker_is_ended_with_a_note(stopped_process, monkeypatch, capsys):
    """No heartbeat and no CPU time for FROZEN_SECONDS: SIGKILL, one note, and the nanny's
    "killed by signal 9" is not taken for the OOM killer's."""
    monkeypatch.setattr(liveness, "FROZEN_SECONDS", 0.2)
    pid = stopped_process.pid
    nanny = SimpleNamespace(pid=pid, worker_address="tcp://127.0.0.1:1")
    client = FakeClient({"tcp://127.0.0.1:1": {"name": 0, "last_seen": time.time() - 60}},
                        SimpleNamespace(workers={0: nanny}))
    deaths = WorkerDeaths()
    watch = Liveness(client, LOCAL, deaths)
    watch.check()  # its CPU time, first seen
    time.sleep(0.3)
    watch.check()
    assert stopped_process.wait(timeout=10) == -signal.SIGKILL
    note = capsys.readouterr().err
    assert note == (f"note: worker tcp://127.0.0.1:1 (pid {pid}) sent no heartbeat and used no "
                    "CPU time for 0.2 s (frozen: stopped, or deadlocked); it was ended and its "
                    "jobs go to the other workers\n")
    assert watch.why_ended("tcp://127.0.0.1:1").startswith("sent no heartbeat")
    _nanny_log(deaths, f"Worker process {pid} was killed by signal 9")
    assert deaths.signal() is None and deaths.died == 1  # the sweep's own kill: no cause


def test_a_busy_worker_that_misses_heartbeats_is_left_alone(monkeypatch):
    """A long native call holding the GIL stops the heartbeats but uses CPU time."""
    monkeypatch.setattr(liveness, "FROZEN_SECONDS", 0.2)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        nanny = SimpleNamespace(pid=busy.pid, worker_address="tcp://w")
        client = FakeClient({"tcp://w": {"name": 0, "last_seen": time.time() - 60}},
                            SimpleNamespace(workers={0: nanny}))
        watch = Liveness(client, LOCAL, WorkerDeaths())
        for _ in range(4):
            watch.check()
            time.sleep(0.15)
        assert busy.poll() is None and not watch.ended
    finally:
        busy.kill()
        busy.wait()


def _job(tmp_path, h="a" * 64, timeout=1.0):
    config = {"algorithm": {"name": "sgma"}, "job_timeout": timeout, "dataset": {},
              "kernel": {}, "lam": 0.1, "kappa": 5, "seed": 0}
    (tmp_path / "jobs" / h).mkdir(parents=True)
    # the part of a planned JobSpec the deadlines read: its timeout and its record
    spec = SimpleNamespace(job_timeout=timeout, config=lambda: dict(config))
    return SimpleNamespace(hash=h, spec=spec)


def _fit(tmp_path, job, pid, worker="0"):
    with open(tmp_path / "jobs" / job.hash / "fits.log", "a") as f:
        f.write(json.dumps({"time": time.time(), "host": "h", "pid": pid,
                            "worker": worker}) + "\n")


def test_job_timeout_holds_for_a_worker_that_cannot_stop_its_job(tmp_path, monkeypatch):
    """The client measures the running job from when it sees its fit start: past the limit,
    the job is recorded as timed out (one line) and its worker ended."""
    monkeypatch.setattr(deadlines, "client_limit", lambda timeout: timeout)
    done, stuck, waiting = (_job(tmp_path, h) for h in ("d" * 64, "s" * 64, "w" * 64))
    _fit(tmp_path, done, 4242)
    (tmp_path / "jobs" / done.hash / "result.nc").write_bytes(b"x")  # finished
    _fit(tmp_path, stuck, 4242)
    ended = []
    watch = SimpleNamespace(client=FakeClient({"tcp://w0": {"name": 0}}), ended={},
                            pid_of=lambda address: 4242,
                            end_worker=lambda address, why: ended.append((address, why)))
    clock = JobDeadlines(tmp_path, time.time() - 10, watch)
    clock.check([[done, stuck, waiting]])  # seen: its clock starts
    assert not ended and job_status(tmp_path / "jobs" / stuck.hash / "result.nc") is None
    time.sleep(1.1)
    clock.check([[done, stuck, waiting]])
    assert ended == [("tcp://w0", f"ran job {'s' * 12} past job_timeout=1 s without stopping "
                                  "it (1 s)")]
    result = load_job_result(tmp_path / "jobs" / stuck.hash / "result.nc")
    assert result.attrs["status"] == "failed" and result.attrs["error"] == (
        "JobTimedOut: the job ran past job_timeout=1 s and was stopped; raise job_timeout (or "
        "null: no limit) to let it finish (its worker did not stop it: the sweep ended the "
        "worker 1 s after the job started)")
    assert not (tmp_path / "jobs" / waiting.hash / "result.nc").exists()


def test_a_job_whose_worker_is_already_gone_is_not_timed_out(tmp_path, monkeypatch):
    """Its worker was ended as frozen (or restarted): Dask gives the job to another worker."""
    monkeypatch.setattr(deadlines, "client_limit", lambda timeout: 0.0)
    job = _job(tmp_path)
    _fit(tmp_path, job, 4242)
    for watch in (SimpleNamespace(client=FakeClient({"tcp://w0": {"name": 0}}),
                                  ended={"tcp://w0": "frozen"}, pid_of=lambda a: 4242),
                  SimpleNamespace(client=FakeClient({"tcp://w0": {"name": 0}}), ended={},
                                  pid_of=lambda a: 777)):  # a fresh process there now
        JobDeadlines(tmp_path, time.time() - 10, watch).check([[job]])
        assert not (tmp_path / "jobs" / job.hash / "result.nc").exists()


def test_a_local_cluster_that_cannot_start_is_retried_once_then_named(monkeypatch):
    calls = []

    def fails(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("Cluster failed to start: Nanny failed to start.")

    monkeypatch.setattr(distributed, "LocalCluster", fails)
    with pytest.raises(InputError) as err:
        local_cluster({**LOCAL, "n_workers": 2, "threads_per_worker": 1,
                       "memory_limit": "1GB", "start_timeout": "60s"}, False, 60.0)
    assert len(calls) == 2 and calls[0]["death_timeout"] == 60.0
    assert str(err.value).startswith(
        "cluster local could not start its 2 workers, twice (Cluster failed to start: Nanny "
        "failed to start.); a likely cause is a machine too loaded to start them within "
        "cluster.start_timeout=60s (load average ")
    assert "raise cluster.start_timeout or lower cluster.n_workers" in str(err.value)

    calls.clear()
    started = object()
    monkeypatch.setattr(distributed, "LocalCluster",
                        lambda **kw: started if calls.append(kw) or len(calls) > 1 else fails())
    assert local_cluster({**LOCAL, "threads_per_worker": 1, "memory_limit": "1GB",
                          "start_timeout": "60s"}, False, 60.0) is started


def test_the_workers_are_asked_of_the_scheduler_not_the_clients_cache():
    # Client.scheduler_info() returns a cache that the client's periodic update refills with
    # no workers (identity(n_workers=0)); a read racing it saw an empty cluster
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.sync(client._update_scheduler_info)  # what the periodic update does
        assert client._scheduler_identity["workers"] == {}
        assert client._scheduler_identity["n_workers"] == 1
        assert list(liveness.scheduler_workers(client)) == list(cluster.scheduler.workers)
        # the time of the add-worker event the scheduler (in this process) logged itself
        logged = [at for at, msg in cluster.scheduler.get_events("all")
                  if isinstance(msg, dict) and msg.get("action") == "add-worker"]
        assert len(logged) == 1
        assert liveness.last_registration(client) == float(logged[0])
        watch = Liveness(client, {**LOCAL, "n_workers": 1})
        watch.check()
        assert watch._no_worker_since is None


def test_a_worker_dying_while_a_plugin_is_sent_is_not_fatal():
    class Client:
        calls = 0

        def register_plugin(self, plugin):
            self.calls += 1
            if self.calls == 1:
                raise CommClosedError("in <TCP (closed) ...>: Stream is closed")

    client = Client()
    connect_module.register_plugin(client, object())
    assert client.calls == 2


def test_a_lost_cluster_connection_is_not_reported_as_a_disk_error(tmp_path, monkeypatch,
                                                                   capsys):
    from pipeline import cli

    def lost(argv, overrides):
        raise CommClosedError("ConnectionPool.register_worker_plugin local=tcp://127.0.0.1:1 "
                              "remote=tcp://127.0.0.1:2>: Stream is closed")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_run", lost)
    assert cli.main(["-m", "lam=0.1,0.2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "error: the sweep lost its connection to the Dask cluster (CommClosedError: ")
    assert "cannot write" not in err and "resume=last" in err
