"""Sweeps on a real SLURM (tests/slurm.py starts a single-node one): every job on a batch
job's workers, a cancelled batch job survived, job-script options in `scontrol show job`,
batch jobs that cannot start as one-line errors, and adaptive scaling."""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.job.claims import count_fits
from pipeline.results.consolidate import load
from tests import slurm as slurm_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


def pipeline_args(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "-m", *args, "cluster=slurm",
            "cluster.dashboard_address=null", f"cluster.log_directory={tmp_path / 'logs'}",
            f"cluster.local_directory={tmp_path / 'scratch'}"]


def run(slurm, tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(pipeline_args(tmp_path, *args), cwd=tmp_path, env=slurm.env,
                          capture_output=True, text=True, timeout=timeout)


def ours(slurm, comment: str) -> list[dict[str, str]]:
    """The batch jobs (finished ones too) that carry ``--comment=<comment>``."""
    return [job for job in slurm.show_jobs() if job.get("Comment") == comment]


def test_a_sweep_runs_on_slurm_workers_with_the_job_script_options(slurm, tmp_path):
    comment = "sgp-test-options"
    proc = run(slurm, tmp_path, "algorithm=exact,sgma", "dataset=abalone", "lam=0.1",
               "seed=0,1", "sweep=opts", "cluster.n_jobs=2", "cluster.memory=2GiB",
               "cluster.walltime=00:20:00", f"cluster.job_extra_directives=['--comment={comment}']")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = load(tmp_path / "outputs" / "opts" / "results.zarr")
    assert set(ds["status"].values.ravel()) == {"ok"}
    workers = {str(w) for w in ds["worker"].values.ravel()}
    print(f"\nworkers: {sorted(workers)}")
    assert workers and all(w.startswith("SLURMCluster-") for w in workers)
    jobs = ours(slurm, comment)
    assert len(jobs) == 2, jobs
    for job in jobs:  # what cluster.* asked for, as SLURM holds it
        assert job["TimeLimit"] == "00:20:00"
        assert job["MinMemoryNode"] == "2G"  # --mem=2G: dask-jobqueue's rounding of 2GiB
        assert job["NumCPUs"] == "1"
    assert slurm.wait_until_empty(30) == []  # released at the end


def test_a_cancelled_batch_job_loses_no_job_and_refits_none(slurm, tmp_path):
    """`scancel` of one of the two batch jobs mid-sweep: the sweep completes on the other,
    every job has one ok result, and no job finished before the cancel is fitted again."""
    comment = "sgp-test-preempt"
    args = pipeline_args(tmp_path, "algorithm=sgma", "dataset=friedman1",
                         "dataset.n_train=3000", "dataset.n_test=50", "algorithm.max_basis=150",
                         "algorithm.eps=0", "certificate.enabled=false", "seed=range(0,16)",
                         "sweep=preempt", "cluster.n_jobs=2", "cluster.memory=1500MB",
                         f"cluster.job_extra_directives=['--comment={comment}']")
    proc = subprocess.Popen(args, cwd=tmp_path, env=slurm.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    jobs_dir = tmp_path / "outputs" / "preempt" / "jobs"
    deadline = time.time() + 300
    running, done = [], []
    while time.time() < deadline and proc.poll() is None:
        done = list(jobs_dir.glob("*/result.nc")) if jobs_dir.exists() else []
        running = [j for j in ours(slurm, comment) if j["JobState"] == "RUNNING"]
        if len(done) >= 3 and len(running) == 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None and len(running) == 2, "never two batch jobs with work done"
    victim = running[0]["JobId"]
    slurm.run("scancel", victim)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (out[-3000:], err[-3000:])  # a failed job: stdout says which
    ds = load(tmp_path / "outputs" / "preempt" / "results.zarr")
    assert set(ds["status"].values.ravel()) == {"ok"}
    results = list(jobs_dir.glob("*/result.nc"))
    assert len(results) == 16
    fits = {p.parent.name: count_fits(p.parent) for p in results}
    before = [p.parent.name for p in done]  # written before the cancel
    workers = sorted({str(w) for w in ds["worker"].values.ravel()})
    print(f"\ncancelled batch job {victim}; {len(before)} jobs finished before; fits per job "
          f"{sorted(fits.values())}; workers {workers}")
    assert len(before) >= 3
    assert all(fits[name] == 1 for name in before)  # finished: never fitted again
    assert all(1 <= n <= 2 for n in fits.values())  # a fit cut short by the cancel: rerun once
    state = {j["JobId"]: j["JobState"] for j in ours(slurm, comment)}
    assert state[victim] == "CANCELLED"
    assert slurm.wait_until_empty(30) == []


def test_an_impossible_memory_request_is_one_line_at_once(slurm, tmp_path):
    start = time.monotonic()
    proc = run(slurm, tmp_path, "algorithm=exact", "dataset=abalone", "lam=0.1",
               "cluster.memory=100GB", "cluster.start_timeout=5m", timeout=120)
    took = time.monotonic() - start
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("error: cluster slurm: the batch job was refused: sbatch")
    assert "Memory specification can not be satisfied" in lines[0]
    assert "fix cluster.memory='100GB'" in lines[0]
    assert took < 60  # the refusal, not the 5 min start timeout
    assert slurm.wait_until_empty(30) == []


def test_a_batch_job_that_never_starts_fails_at_the_start_timeout(slurm, tmp_path):
    """Accepted but held in the queue (it may begin only in an hour): the sweep stops at
    cluster.start_timeout with one line naming it, and cancels its batch job."""
    start = time.monotonic()
    proc = run(slurm, tmp_path, "algorithm=exact", "dataset=abalone", "lam=0.1",
               "cluster.n_jobs=1", "cluster.start_timeout=5s",
               "cluster.job_extra_directives=['--begin=now+1hour']", timeout=180)
    took = time.monotonic() - start
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "no batch job" in lines[0] and "cluster.start_timeout=5s" in lines[0]
    assert 5 <= took < 120
    assert slurm.wait_until_empty(30) == []


def test_an_adaptive_sweep_grows_to_its_maximum_and_releases_its_workers(slurm, tmp_path):
    """cluster.adapt: a 12-job sweep starts with the minimum of batch jobs, grows to the
    maximum while jobs are queued, and leaves none in the queue at the end."""
    comment = "sgp-test-adapt"
    args = pipeline_args(tmp_path, "algorithm=sgma", "dataset=friedman1",
                         "dataset.n_train=4000", "dataset.n_test=50", "algorithm.max_basis=150",
                         "algorithm.eps=0", "certificate.enabled=false", "seed=range(0,12)",
                         "sweep=adapt", "cluster.adapt.minimum=1", "cluster.adapt.maximum=2",
                         "cluster.memory=1500MB",
                         f"cluster.job_extra_directives=['--comment={comment}']")
    proc = subprocess.Popen(args, cwd=tmp_path, env=slurm.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    trace = []  # (seconds, batch jobs queued or running)
    start = time.time()
    while proc.poll() is None and time.time() - start < 600:
        alive = [j for j in ours(slurm, comment) if j["JobState"] in ("PENDING", "RUNNING")]
        trace.append((round(time.time() - start, 1), len(alive)))
        time.sleep(0.3)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    counts = [n for _, n in trace if n]
    changes = [(t, n) for i, (t, n) in enumerate(trace) if i == 0 or n != trace[i - 1][1]]
    print(f"\nadapt trace (s, batch jobs): {changes}")
    assert counts and counts[0] == 1  # the minimum first
    assert max(counts) == 2  # grown to the maximum, never past it
    ds = load(tmp_path / "outputs" / "adapt" / "results.zarr")
    assert set(ds["status"].values.ravel()) == {"ok"} and ds.sizes["seed"] == 12
    # every job ran on a batch job's worker; whether the second one took any depends on how
    # soon SLURM starts it on a loaded machine (CI at -n 3 once saw all 12 jobs done first):
    # the growth itself is the trace's second batch job, requested while the sweep ran
    workers = {str(w) for w in ds["worker"].values.ravel()}
    assert workers and all(w.startswith("SLURMCluster-") for w in workers)
    assert slurm.wait_until_empty(30) == []
    assert len(ours(slurm, comment)) >= 2
    assert np.isfinite(ds["final_objective"].values).all()
