"""Sweeps: Hydra multirun through the Dask launcher, consolidation, resume, failures, clusters."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from pipeline.job.claims import count_fits
from pipeline.report.build import render
from pipeline.report.tables import overhead_line
from pipeline.results.consolidate import consolidate, load
from pipeline.results.job_file import load_job_result

GRID = ["algorithm=exact,sgma", "dataset=sine1d", "lam=0.01,0.1", "kappa=5,10", "seed=0,1",
        "kernel.width=0.1,0.5", "cluster.n_workers=1", "cluster.dashboard_address=:0"]


def sweep(run_cli, cwd: Path, *args: str):
    """``python -m pipeline -m <args>`` run in this process (``run_cli``: the same ``main``,
    its process state put back after; a subprocess adds ~2 s of start-up and imports)."""
    return run_cli(cwd, "-m", *args)


def results_path(proc) -> Path:
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("results: "), proc.stdout[-2000:] + proc.stderr[-2000:]
    return Path(last.removeprefix("results: "))


def run_ids(sweep_dir: Path) -> dict[str, str]:
    return {p.parent.name: load_job_result(p).attrs["run_id"]
            for p in (sweep_dir / "jobs").glob("*/result.nc")}


def test_grid_sweep_resume_and_report(tmp_path, in_process, run_cli):
    first = sweep(run_cli, tmp_path, *GRID)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "dask dashboard: http" in first.stdout and "jobs: 20/20 (100%)" in first.stdout
    assert "\r" not in first.stdout  # not a terminal: plain progress lines (sweep.progress)
    # exact ignores κ and the seed: 2 lam × 2 widths; sgma: 2 × 2 κ × 2 seeds × 2 widths
    assert "32 sweep points, 20 distinct jobs: 0 already finished, 20 run, 0 failed" \
        in first.stdout
    path = results_path(first)
    # an unnamed sweep gets a new directory, outputs/<date>/<time>/, named as it starts
    dated = path.parent.relative_to(tmp_path / "outputs").as_posix()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d(-\d+)?", dated), dated
    assert f"resume: python -m pipeline resume=last, or the same command with sweep={dated}" \
        in first.stdout

    ds = xr.open_zarr(path)  # plain xarray opens it
    assert dict(ds["status"].sizes) == {"algorithm": 2, "dataset": 1, "lam": 2, "kappa": 2,
                                        "seed": 2, "kernel.width": 2}
    assert ds["gap"].dims == ("algorithm", "dataset", "lam", "kappa", "seed", "kernel.width",
                              "step")
    for name in ("objective", "gap", "test_rmse", "n_basis", "seconds", "status"):
        assert name in ds
    assert set(np.unique(ds["status"].values)) == {"ok"}
    assert set(np.unique(ds["worker"].values)) <= {"0", "1"}  # LocalCluster worker names
    loaded = load(path)
    assert loaded.sgp.attrs["config"]["dataset"]["name"] == "sine1d"
    assert loaded.attrs["git_sha"] and "numpy" in loaded.sgp.attrs["versions"]

    exact = ds["final_test_rmse"].sel(algorithm="exact").values
    assert np.all(exact == exact[:, :, :1, :1, :])  # one job, repeated along κ and seed
    sgma = ds.sel(algorithm="sgma")
    n_steps = np.isfinite(sgma["gap"]).sum("step").values
    assert n_steps.min() >= 1 and ds.sizes["step"] == n_steps.max()  # NaN-padded to the longest
    assert np.isnan(ds["gap"].sel(algorithm="exact").isel(step=slice(1, None))).all()

    before = run_ids(path.parent)
    consolidate(path.parent)  # idempotent
    xr.testing.assert_identical(xr.open_zarr(path).load(), ds.load())

    again = in_process(tmp_path, "pipeline", "resume=last")  # all cached: nothing starts
    assert again.returncode == 0, again.stderr[-3000:]
    assert "20 distinct jobs: 20 already finished, 0 run, 0 failed" in again.stdout
    assert results_path(again) == path
    assert run_ids(path.parent) == before  # no job was fitted again

    report = render(path)
    text = report.read_text()
    assert "| sine1d | sgma (σ² = 0.01, κ = 5, 2ω² = 0.1) | 2 |" in text
    assert (report.parent / "fig1_gap.png").stat().st_size > 5000

    # another grid in the same directory is refused, and nothing there changes ...
    other = [a.replace("lam=0.01,0.1", "lam=0.01,0.2") for a in GRID] + [f"sweep={dated}"]
    manifest = (path.parent / "manifest.json").read_bytes()
    refused = in_process(tmp_path, "pipeline", "-m", *other)
    assert refused.returncode == 2 and "pass sweep=<new name>" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "merge=true" in refused.stderr
    assert (path.parent / "manifest.json").read_bytes() == manifest
    # ... unless merged: only the new points run, and the report beside the results is redone
    changed = sweep(run_cli, tmp_path, *other, "merge=true")
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "20 distinct jobs: 10 already finished, 10 run, 0 failed" in changed.stdout
    now = run_ids(path.parent)
    assert len(now) == 30 and all(now[k] == v for k, v in before.items())
    merged = xr.open_zarr(path)
    assert merged["lam"].values.tolist() == [0.01, 0.1, 0.2]
    assert set(np.unique(merged["status"].values)) == {"ok"}
    assert f"report: {report}" in changed.stdout
    assert "σ² = 0.2" in report.read_text()


def test_failed_job_is_recorded_and_the_rest_complete(tmp_path, run_cli):
    # at lam=3e-16 the exact GP's Cholesky breaks down: that job fails when it runs
    proc = sweep(run_cli, tmp_path, "algorithm=exact", "dataset=sine1d", "lam=3e-16,0.1",
                 "cluster.n_workers=2", "cluster.dashboard_address=null")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "2 distinct jobs: 0 already finished, 2 run, 1 failed" in proc.stdout
    assert "dask dashboard" not in proc.stdout  # null: none started
    assert "failed: algorithm=exact dataset=sine1d lam=3e-16" in proc.stdout
    assert "InputError: algorithm exact: the arithmetic broke down" in proc.stdout
    ds = load(results_path(proc)).load()
    failed = ds.sel(lam=3e-16)
    assert failed["status"].item() == "failed" and "larger lam" in failed["error"].item()
    ok = ds.sel(lam=0.1)
    assert ok["status"].item() == "ok" and np.isfinite(ok["final_test_rmse"].item())
    # each job directory holds what Hydra users expect: .hydra/, its overrides, its own log
    for point, status in ((failed, "failed"), (ok, "ok")):
        job_dir = results_path(proc).parent / "jobs" / str(point["job_hash"].item())
        hydra_dir = job_dir / ".hydra"
        assert {p.name for p in hydra_dir.iterdir()} == {"config.yaml", "hydra.yaml",
                                                          "overrides.yaml"}
        assert f"lam={point['lam'].item():g}" in (hydra_dir / "overrides.yaml").read_text()
        log = (job_dir / "pipeline.log").read_text()
        assert f"job {job_dir.name} on " in log and "the exact fit on sine1d" in log
        if status == "ok":
            assert "finished:\nexact on sine1d" in log and "test RMSE" in log
        else:  # the traceback the sweep's one line leaves out
            assert "[ERROR] - the job failed: InputError" in log and "Traceback" in log


def test_bad_value_in_a_sweep_stops_it_before_any_job(tmp_path, in_process):
    proc = in_process(tmp_path, "pipeline", "-m", "algorithm=sgma", "dataset=sine1d",
                      "lam=0.1,-1", "kappa=5", "cluster.n_workers=1",
                      "cluster.dashboard_address=null")
    assert proc.returncode == 2 and proc.stderr.startswith("error: lam=-1 must be"), proc.stderr
    assert not list((tmp_path / "outputs").glob("**/jobs"))
    assert not list((tmp_path / "outputs").glob("**/manifest.json"))


def test_experiment_file_sweeper_params_and_ranges(tmp_path, run_cli):
    started = time.perf_counter()
    # a process of its own: its start-up is timed from the interpreter's start
    proc = subprocess.run([sys.executable, "-m", "pipeline", "-m",
                           "experiment=bench_sweep_overhead",
                           "hydra.sweeper.params.seed='range(0,3)'", "lam=0.1,0.2",
                           "cluster.n_workers=1", "cluster.dashboard_address=null"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 sweep points, 6 distinct jobs" in proc.stdout
    ds = load(results_path(proc))
    assert ds.attrs["sweep"] == "bench_sweep_overhead"
    assert ds["seed"].values.tolist() == [0, 1, 2] and ds["lam"].values.tolist() == [0.1, 0.2]
    # the overhead counts the whole command-line process, from its start (imports, Hydra's
    # composition of every point) to the end of the jobs, and the CLI says what it took
    timings = ds.sgp.attrs["timings"]
    assert timings["startup_seconds"] > 0 and timings["wall_seconds"] > 0
    assert timings["startup_seconds"] + timings["wall_seconds"] <= elapsed
    assert "whole process so far:" in proc.stdout
    assert "whole process from its start to the end of the jobs" in overhead_line(ds)
    ranged = sweep(run_cli, tmp_path, "algorithm=sgma", "dataset=sine1d", "seed=range(0,2)",
                   "kappa=3", "sweep=ranged", "cluster.n_workers=1",
                   "cluster.dashboard_address=null")
    assert ranged.returncode == 0, ranged.stderr[-3000:]
    assert load(results_path(ranged))["seed"].values.tolist() == [0, 1]


@pytest.mark.parametrize("kind,marker", [("slurm", "#SBATCH"), ("pbs", "#PBS")])
def test_batch_cluster_dry_run_prints_job_script(tmp_path, kind, marker, in_process):
    proc = in_process(tmp_path, "pipeline", "-m", f"cluster={kind}", "cluster.dry_run=true",
                      "seed=0,1", "cluster.walltime=00:10:00")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker in proc.stdout and "dask" in proc.stdout
    assert "dry run: nothing submitted" in proc.stdout
    assert not list((tmp_path / "outputs").glob("**/results.zarr"))


def test_sweep_runs_on_an_existing_scheduler(tmp_path, dask_processes, run_cli):
    address = dask_processes.scheduler.address
    proc = sweep(run_cli, tmp_path, "cluster=address", f"scheduler={address}", "algorithm=sgma",
                 "dataset=sine1d", "kappa=5", "seed=range(0,6)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = load(results_path(proc))
    workers = set(ds["worker"].values.ravel().tolist())
    assert workers and workers <= {"w1", "w2"}  # ran on those workers, not in the client
    assert set(ds["status"].values.ravel().tolist()) == {"ok"}


def test_killing_a_worker_mid_sweep_costs_nothing(tmp_path, dask_processes):
    address = dask_processes.scheduler.address
    args = ["cluster=address", f"scheduler={address}", "algorithm=sgma", "dataset=friedman1",
            "dataset.n_train=12000", "dataset.n_test=100", "kappa=59", "algorithm.eps=0",
            "algorithm.max_basis=150", "seed=range(0,8)", "sweep=killtest"]
    runner = subprocess.Popen([sys.executable, "-m", "pipeline", "-m", *args], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs_dir = tmp_path / "outputs" / "killtest" / "jobs"
    deadline, running = time.time() + 300, {}
    while time.time() < deadline and not running:  # wait for a job running after 3 ended
        time.sleep(0.05)
        if len(list(jobs_dir.glob("*/result.nc"))) >= 3:  # several jobs finished
            running = {w: [k for k in keys if str(k).startswith("job-")]
                       for w, keys in dask_processes.processing().items()}
            running = {w: keys for w, keys in running.items() if keys}
    address, keys = sorted(running.items())[0]
    finished = {p.parent.name for p in jobs_dir.glob("*/result.nc")}
    victim = dask_processes.run(os.getpid)[address]  # the worker process; its nanny stays
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = runner.communicate(timeout=600)
    assert runner.returncode == 0, stdout[-3000:] + stderr[-3000:]
    files = sorted(p.parent.name for p in jobs_dir.glob("*/result.nc"))
    assert len(files) == 8 == len(set(files))  # every result there, none twice
    ds = load(stdout.strip().splitlines()[-1].removeprefix("results: "))
    assert set(ds["status"].values.ravel().tolist()) == {"ok"}
    assert np.isfinite(ds["final_test_rmse"].values).all()
    assert victim not in dask_processes.run(os.getpid).values()  # it really died
    fits = {h: count_fits(jobs_dir / h) for h in files}
    print(f"\nkilled worker pid {victim} with {len(finished)} jobs finished; fits per job: "
          f"{sorted(fits.values())}")
    assert all(fits[h] == 1 for h in finished)  # no finished job was fitted again
    assert sum(fits.values()) <= 8 + len(keys)  # at most the killed worker's jobs ran twice


def test_the_closing_cluster_leaves_sys_path_alone():
    """Dask's scheduler puts its scratch directories first on sys.path and takes them off
    when it closes; the sweep closes its cluster on a thread while the main thread imports
    (consolidation: zarr), so they are taken off before that thread starts — an import walking
    sys.path while an entry is removed skips one (a ModuleNotFoundError for an installed
    module, seen in CI)."""
    import sys

    from pipeline.sweep.schedule import SweepCluster

    before = list(sys.path)
    cluster = SweepCluster()
    cluster.connect({"kind": "local", "n_workers": 1, "threads_per_worker": 1,
                     "memory_limit": "auto", "dashboard_address": None,
                     "start_timeout": "30s"})
    assert sys.path != before  # dask's scratch directory, first
    cluster.close(wait=False)
    assert sys.path == before  # taken off on this thread, before the closing one starts
    cluster.close()
    assert sys.path == before


def test_a_lone_job_killed_behind_another_runs_again_once_and_the_crasher_does_not(tmp_path):
    """Dask ends every task a dead worker held as KilledWorker, the one it was running and the
    ones queued behind it (seen on bike: the online GP, queued behind scikit-learn's GPR whose
    OpenBLAS Cholesky crashed, was recorded failed without having started). A lone job that
    did not die in its own fit runs again, once; the job whose fit started and left no result
    (the crasher) does not, nor any job whose ingest or learning failed."""
    import json
    import time
    from types import SimpleNamespace

    from distributed import KilledWorker

    from pipeline.job.claims import FITS_FILE
    from pipeline.results.job_file import job_path
    from pipeline.sweep.schedule import _rerun_alone

    class Failed:
        def __init__(self, exc):
            self.exc = exc

        def exception(self):
            return self.exc

    since = time.time() - 10
    sweep = SimpleNamespace(sweep_dir=tmp_path, since=since)
    queued, crasher, other = (SimpleNamespace(hash=h) for h in ("a" * 16, "b" * 16, "c" * 16))
    fitting = job_path(tmp_path, crasher.hash).parent
    fitting.mkdir(parents=True)
    (fitting / FITS_FILE).write_text(json.dumps({"time": time.time(), "pid": 1}) + "\n")
    ready, broken = SimpleNamespace(status="finished"), SimpleNamespace(status="error")
    killed = Failed(KilledWorker("job-x", None, 3))
    needs = {queued.hash: ready, crasher.hash: ready, other.hash: broken}
    resubmitted: set[str] = set()
    assert _rerun_alone(killed, [queued], needs, sweep, resubmitted)
    resubmitted.add(queued.hash)  # as the sweep does when it submits it again
    assert not _rerun_alone(killed, [queued], needs, sweep, resubmitted)  # once only
    assert not _rerun_alone(killed, [crasher], needs, sweep, set())
    assert not _rerun_alone(killed, [other], needs, sweep, set())  # its learning failed
    assert not _rerun_alone(Failed(RuntimeError("lost")), [queued], needs, sweep, set())
    assert _rerun_alone(killed, [queued, crasher], needs, sweep, set())  # a batch: as before
