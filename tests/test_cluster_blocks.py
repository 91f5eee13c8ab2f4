"""One fit across a Dask cluster (blocks=cluster): the same results as in memory, its rows on
the workers, and a one-line failure when a worker holding rows is lost."""

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import xarray as xr
from distributed import Client, LocalCluster

from algorithms import ArrayKernelBlocks, InputError, Kernel, run
from pipeline.blocks.cluster import ClusterKernelBlocks, row_ranges
from pipeline.config import CONF_DIR
from pipeline.datasets import ingest, load_arrays
from pipeline.job.identity import job_config
from pipeline.job.run import run_job
from pipeline.job.validate import check_config


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra_compose("config", overrides=overrides)


@pytest.fixture(scope="module")
def client():
    # without a dashboard the scheduler still serves its health routes over HTTP, on port 8787
    # by default: a cluster of a test running beside this one may hold it (Dask then warns and
    # takes another port)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Port \d+ is already in use",
                                category=UserWarning)
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                               processes=True)
    with cluster, Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ingest({"name": "friedman1", "n_train": 4000, "n_test": 60},
                  tmp_path_factory.mktemp("stores"))


def test_row_ranges_cover_every_row_once():
    assert row_ranges(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert row_ranges(2, 5) == [(0, 1), (1, 2)]  # never an empty range


@pytest.mark.parametrize("kernel", [Kernel("rbf", {"width": 10.0}),
                                    Kernel("matern32", {"mu": 2.0})])
def test_sgma_on_cluster_blocks_equals_the_in_memory_fit(client, store, kernel):
    """Same basis in the same order, objectives to 1e-10 (relative; the gap absolute),
    predictive mean and variance bounds to 1e-7; the rows are split over both workers and a step
    moves O(t κ) numbers, not kernel columns."""
    X, y, X_test, y_test = load_arrays(store)
    options = {"eps": 0.0, "max_basis": 60}
    ref = run("sgma", ArrayKernelBlocks(X, kernel), y, lam=0.1, kappa=59, rng=3,
              test=(X_test, y_test), **options)
    with ClusterKernelBlocks(client, store, kernel) as blocks:
        assert [hi - lo for lo, hi in blocks.ranges] == [2000, 2000]
        assert len(set(blocks.owners)) == 2
        fit = run("sgma", blocks, y, lam=0.1, kappa=59, rng=3, test=(X_test, y_test),
                  **options)
        held = blocks.shard_nbytes()
        moved = blocks.bytes_moved
        mean = fit.solution.mean(X_test)
        bounds = fit.solution.variance_bounds(X_test)  # its projections run on the shards
    np.testing.assert_array_equal(fit.basis, ref.basis)
    for key in ("objective", "dual_objective"):
        np.testing.assert_allclose(fit.trace[key], ref.trace[key], rtol=1e-10)
    # the relative gap is a difference of the two: its round-off is the objectives' (1e-10)
    np.testing.assert_allclose(fit.trace["gap"], ref.trace["gap"], rtol=0, atol=1e-10)
    # β = G⁻¹b carries the projections' round-off (summed in another order) times cond(G):
    # 1e-7 relative here, 1e-9 in its predictions, as between 1 and 2 kernel threads
    np.testing.assert_allclose(mean, ref.solution.mean(X_test), rtol=1e-7)
    for got, want in zip(bounds, ref.solution.variance_bounds(X_test), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-7)
    for key in ("test_rmse", "test_nlpd"):
        np.testing.assert_allclose(fit.summary[key], ref.summary[key], rtol=1e-7)
    # each worker held its 2000 rows: X_B (d = 10) plus its rows of [y, K_{:S}]
    assert all(2000 * 10 * 8 <= b <= 2000 * (10 + 61 + 64) * 8 for b in held)
    steps = len(fit.trace["objective"])
    assert moved < steps * 2 * (62 * 59 + 59) * 8 * 2 + 4000 * 8 * 4  # no n-sized traffic


def test_a_closed_fit_leaves_nothing_on_the_workers(client, store):
    X, y, _, _ = load_arrays(store)
    with ClusterKernelBlocks(client, store, Kernel("rbf", {"width": 10.0})) as blocks:
        run("sgma", blocks, y, lam=0.1, kappa=20, rng=0, eps=0.0, max_basis=5)
        key = blocks.key

    def shards():
        from pipeline.blocks.shards import _SHARDS
        return list(_SHARDS)

    time.sleep(0.5)
    assert not any(k.startswith(key) for ks in client.run(shards).values() for k in ks)


def test_a_busy_worker_frees_its_shard_when_the_fit_ends(client, store):
    """The shards are dropped on the workers' event loops, not by tasks: a worker busy with
    another job (a mixed sweep) does not keep its rows until that job ends."""
    blocks = ClusterKernelBlocks(client, store, Kernel("rbf", {"width": 10.0}))
    busy = client.submit(time.sleep, 3, workers=[blocks.owners[0]], pure=False)
    while not client.processing(workers=[blocks.owners[0]])[blocks.owners[0]]:
        time.sleep(0.05)
    blocks.close()

    def shards():
        from pipeline.blocks.shards import _SHARDS
        return list(_SHARDS)

    held = client.run(shards)
    assert not busy.done()  # still busy, and its shard is gone
    assert not any(k.startswith(blocks.key) for ks in held.values() for k in ks)
    busy.result()


def test_only_algorithms_that_declare_it_run_on_cluster_blocks():
    cfg = job_config(compose(["algorithm=exact", "blocks=cluster"]))
    with pytest.raises(InputError, match=r"algorithm exact does not run with blocks=cluster; "
                                         r"pass blocks=memory, or one of: .*sgma"):
        check_config(cfg)
    cfg = job_config(compose(["algorithm=sgma", "blocks=everywhere"]))
    with pytest.raises(InputError, match=r"blocks='everywhere' must be one of memory, cluster"):
        check_config(cfg)


def test_a_job_with_cluster_blocks_records_the_same_result(tmp_path):
    """run_job with blocks=cluster starts the configured local cluster, fits there and writes
    the same result as blocks=memory, with the cluster's figures in its summary."""
    overrides = ["algorithm=sgma", "dataset=friedman1", "dataset.n_train=3000",
                 "dataset.n_test=50", "algorithm.max_basis=40", "algorithm.eps=0",
                 f"store_root={tmp_path / 'stores'}", "cluster.n_workers=2",
                 "cluster.dashboard_address=null"]
    summaries = {}
    for where in ("memory", "cluster"):
        cfg = job_config(compose([*overrides, f"blocks={where}"]))
        out = run_job(cfg, tmp_path / where / "result.nc")
        summaries[where] = out.result.summary
        with xr.open_dataset(out.result_path) as ds:
            assert ds.attrs["status"] == "ok"
    mem, clu = summaries["memory"], summaries["cluster"]
    for key in ("objective", "dual_objective"):
        assert clu[key] == pytest.approx(mem[key], rel=1e-10)
    for key in ("gap", "gap_certified"):  # relative differences of the objectives
        assert clu[key] == pytest.approx(mem[key], rel=0, abs=1e-10)
    assert clu["test_rmse"] == pytest.approx(mem["test_rmse"], rel=1e-7)
    assert clu["n_basis"] == mem["n_basis"] == 40
    assert clu["cluster_workers"] == 2 and clu["cluster_bytes_moved"] > 0
    assert 1500 * 10 * 8 <= clu["cluster_shard_bytes_max"] < 3000 * 60 * 8
    assert "cluster_workers" not in mem


@pytest.mark.slow
def test_a_worker_lost_mid_fit_fails_the_job_in_one_line(tmp_path, dask_processes):
    """On a real `dask scheduler` with two `dask worker` processes: the job runs with its rows
    on both; killing one worker's process mid-fit (its nanny starts a new, empty one) ends the
    job with one line naming the rows lost and writes no result."""
    address = dask_processes.scheduler.address
    args = [sys.executable, "-m", "pipeline", "algorithm=sgma", "dataset=friedman1",
            "dataset.n_train=60000", "dataset.n_test=100", "algorithm.eps=0",
            "algorithm.max_basis=400", "blocks=cluster", "cluster=address",
            f"scheduler={address}", "certificate.enabled=false"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def shard_holders():
        from pipeline.blocks.shards import _SHARDS
        return (os.getpid(), len(_SHARDS))

    deadline = time.time() + 120
    holders = {}
    while time.time() < deadline and proc.poll() is None:
        holders = {w: pid for w, (pid, n) in dask_processes.run(shard_holders).items() if n}
        if len(holders) == 2:
            break
        time.sleep(0.2)
    assert len(holders) == 2, "the fit never put its rows on both workers"
    time.sleep(1.0)  # a few steps in
    victim = sorted(holders)[0]
    os.kill(holders[victim], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)  # it ends: a hang is this timeout
    assert proc.returncode != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert f"worker {victim} holding training rows" in lines[0] and "rerun the job" in lines[0]
    assert not list(tmp_path.rglob("result.nc"))


@pytest.mark.slow
def test_a_sweep_mixes_cluster_fits_with_ordinary_jobs(tmp_path):
    """blocks=cluster in a sweep: SGMA's fits spread over both workers (one at a time), the
    jobs of Zhang's random subset, which cannot, run in memory as ordinary jobs; the SGMA
    results equal a blocks=memory sweep's."""
    args = [sys.executable, "-m", "pipeline", "-m", "algorithm=sgma,zhang_random",
            "dataset=friedman1", "dataset.n_train=3000", "dataset.n_test=50",
            "algorithm.max_basis=30", "seed=0,1", "cluster.n_workers=2",
            "cluster.dashboard_address=null"]
    results = {}
    for where in ("cluster", "memory"):
        proc = subprocess.run([*args, f"blocks={where}", f"sweep={where}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("note: zhang_random cannot spread a fit over the cluster" in proc.stdout) is (
            where == "cluster")
        results[where] = xr.open_zarr(tmp_path / "outputs" / where / "results.zarr").load()
    clu, mem = results["cluster"], results["memory"]
    assert set(clu["status"].values.ravel()) == {"ok"}
    workers = clu["final_cluster_workers"].sel(algorithm="sgma").values
    assert (workers == 2).all()
    assert np.isnan(clu["final_cluster_workers"].sel(algorithm="zhang_random").values).all()
    np.testing.assert_allclose(clu["final_objective"].sel(algorithm="sgma"),
                               mem["final_objective"].sel(algorithm="sgma"), rtol=1e-10)


@pytest.mark.slow
def test_the_cluster_benchmark_runs_at_small_size(tmp_path, in_process):
    """python -m pipeline.bench.cluster_blocks size=small: the spread fit, the one-process fit
    and the
    1 → 2 worker runs all finish and their figures are written and consistent."""
    import json

    proc = subprocess.run([sys.executable, "-m", "pipeline.bench.cluster_blocks", "size=small"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "outputs" / "bench_cluster_blocks_small"
    figures = json.loads((out / "figures.json").read_text())
    spread, one = figures["spread"], figures["one_process"]
    assert spread["n"] == one["n"] == 30_000 and spread["steps"] == one["steps"] == 30
    assert spread["summary"]["cluster_workers"] == 2 and "cluster_workers" not in one["summary"]
    assert spread["summary"]["objective"] == pytest.approx(one["summary"]["objective"],
                                                           rel=1e-10)
    # the shards hold the rows and columns; the one-process fit held all of them
    assert spread["summary"]["cluster_shard_bytes_max"] < one["summary"]["fit_peak_bytes"]
    assert figures["workers_1"]["n"] == figures["workers_2"]["n"] == 6_000
    assert figures["speedup"] == pytest.approx(figures["workers_1"]["step_seconds_median"]
                                               / figures["workers_2"]["step_seconds_median"])
    assert spread["bytes_moved_per_step"] > 0
    assert (out / "cluster_blocks.png").stat().st_size > 10000
    bad = in_process(tmp_path, "pipeline.bench.cluster_blocks", "size=huge")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown argument 'size=huge'")


@pytest.mark.parametrize("preconditioner", ["jacobi", "pivoted_cholesky"])
def test_cg_on_cluster_blocks_equals_the_in_memory_fit(client, store, preconditioner):
    """CG's products K·V run as the shards' rows k(X_B, X)·V: the same iterations, the same
    solution, mean and error bars (the error bars are CG solves too) as the in-memory tiles,
    both matrix-free (``hold_kernel=never``: the rows are computed by the same tiles)."""
    X, y, X_test, y_test = load_arrays(store)
    kernel = Kernel("rbf", {"width": 10.0})
    options = {"tol": 1e-8, "max_iter": 80, "preconditioner": preconditioner,
               "error_bars": True, "var_tol": 1e-10,  # both brackets 1e-10 wide: equal
               "hold_kernel": "never"}
    ref = run("cg", ArrayKernelBlocks(X, kernel), y, lam=0.1, rng=0,
              test=(X_test[:10], y_test[:10]), **options)
    with ClusterKernelBlocks(client, store, kernel) as blocks:
        fit = run("cg", blocks, y, lam=0.1, rng=0, test=(X_test[:10], y_test[:10]), **options)
        bounds = fit.solution.variance_bounds(X_test[:5])
        held = blocks.shard_nbytes()
    assert fit.summary["kernel_held_bytes"] == 0
    assert len(fit.trace["objective"]) == len(ref.trace["objective"])
    np.testing.assert_allclose(fit.trace["objective"], ref.trace["objective"], rtol=1e-10)
    np.testing.assert_allclose(fit.coef, ref.coef, rtol=1e-8, atol=1e-10)
    for got, want in zip(bounds, ref.solution.variance_bounds(X_test[:5]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-8)
    assert all(b >= 4000 * 10 * 8 for b in held)  # each worker read every row for K·V


def test_cg_on_cluster_blocks_holds_each_workers_rows_of_k(client, store):
    """``hold_kernel=auto`` (the default) on a cluster: each worker holds its rows k(X_B, X),
    formed by the first product (all of K's n²·8 bytes, spread over the workers), kept for
    the error bars and dropped with the fit; the fit equals the in-memory fit with K held to
    the solver's tolerance (their products differ by round-off)."""
    X, y, X_test, y_test = load_arrays(store)
    n = len(X)
    kernel = Kernel("rbf", {"width": 10.0})
    options = {"lam": 1.0, "rng": 0, "tol": 1e-9, "error_bars": True, "var_tol": 1e-9,
               "test": (X_test[:10], y_test[:10])}
    ref = run("cg", ArrayKernelBlocks(X, kernel), y, **options)
    with ClusterKernelBlocks(client, store, kernel) as blocks:
        fit = run("cg", blocks, y, **options)
        bounds = fit.solution.variance_bounds(X_test[:5])
        held = blocks.shard_nbytes()
        ranges = blocks.ranges
    assert ref.summary["kernel_held_bytes"] == fit.summary["kernel_held_bytes"] == 8 * n * n
    assert len(ranges) >= 2
    for b, (lo, hi) in zip(held, ranges, strict=True):
        assert b >= (hi - lo) * n * 8  # its rows of K, beside X
    assert fit.summary["iterations"] == ref.summary["iterations"]
    for key in ("objective", "dual_objective"):
        assert fit.summary[key] == pytest.approx(ref.summary[key], rel=1e-12)
    np.testing.assert_allclose(fit.coef, ref.coef, rtol=0, atol=1e-8 * np.abs(ref.coef).max())
    for got, want in zip(bounds, ref.solution.variance_bounds(X_test[:5]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-8)


@pytest.mark.parametrize(("name", "options"), [
    ("nystrom", {"max_basis": 150}),
    ("incomplete_cholesky", {"max_basis": 150, "eval_every": 50}),
])
def test_low_rank_fits_on_cluster_blocks_equal_the_in_memory_fit(client, store, name, options):
    """Nyström (random landmarks, added in blocks) and incomplete Cholesky (one pivot at a
    time, by the largest residual on the shards): the same pivots in the same order, the
    objectives, gap and residual trace of every prefix to 1e-10, the same mean and DTC
    variance; each worker holds its rows of F, and a pivot moves O(t) numbers, not a column."""
    X, y, X_test, y_test = load_arrays(store)
    kernel = Kernel("matern32", {"mu": 2.0})
    ref = run(name, ArrayKernelBlocks(X, kernel), y, lam=0.1, rng=5, test=(X_test, y_test),
              **options)
    with ClusterKernelBlocks(client, store, kernel) as blocks:
        fit = run(name, blocks, y, lam=0.1, rng=5, test=(X_test, y_test), **options)
        mean, (var, _) = fit.solution.mean(X_test), fit.solution.variance_bounds(X_test)
        held = blocks.shard_nbytes()
        moved = blocks.bytes_moved
    np.testing.assert_array_equal(fit.basis, ref.basis)
    assert len(fit.basis) == 150
    for key in ("objective", "dual_objective", "residual_trace"):
        np.testing.assert_allclose(fit.trace[key], ref.trace[key], rtol=1e-10)
    np.testing.assert_allclose(fit.trace["gap"], ref.trace["gap"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(fit.coef, ref.coef, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mean, ref.solution.mean(X_test), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var, ref.solution.variance_bounds(X_test)[0], rtol=1e-9)
    assert all(2000 * (10 + 150) * 8 <= b for b in held)  # its rows of X and of F
    assert moved < 150 * 2 * 200 * 8 + 2 * 150 * 151 * 8 * 8  # O(t) per pivot, no columns


@pytest.mark.slow
def test_a_cluster_fit_on_an_existing_scheduler_equals_the_in_memory_one(tmp_path,
                                                                         dask_processes):
    """blocks=cluster against a real `dask scheduler` with two `dask worker` processes
    (cluster=address): the rows go to both workers and the job's result equals the
    blocks=memory job's. Another fit holding the cluster (its Dask lock) makes the job say so
    and wait for it."""
    import json

    from distributed import Lock

    from pipeline.blocks.cluster import CLUSTER_FIT_LOCK

    address = dask_processes.scheduler.address
    base = [sys.executable, "-m", "pipeline", "algorithm=sgma", "dataset=friedman1",
            "dataset.n_train=4000", "dataset.n_test=50", "algorithm.eps=0",
            "algorithm.max_basis=40"]
    summaries = {}
    lock = Lock(CLUSTER_FIT_LOCK, scheduler_rpc=dask_processes.scheduler,
                loop=dask_processes.loop)
    assert lock.acquire(timeout=10)  # "another fit", released once the job said it waits
    for where in ("cluster", "memory"):
        extra = ([f"blocks={where}", "cluster=address", f"scheduler={address}"]
                 if where == "cluster" else [])
        proc = subprocess.Popen([*base, *extra], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines = []
        if where == "cluster":
            for line in proc.stdout:  # the job waits for the lock: it has said so first
                lines.append(line)
                if line.startswith("note: another blocks=cluster fit is running"):
                    break
            time.sleep(1.0)  # it goes on waiting while the lock is held
            assert proc.poll() is None
            lock.release()
        out, err = proc.communicate(timeout=300)
        lines += out.splitlines(keepends=True)
        assert proc.returncode == 0, err[-3000:]
        stdout = "".join(lines)
        assert ("note: another blocks=cluster fit is running on this cluster" in stdout
                ) is (where == "cluster")
        path = stdout.strip().splitlines()[-1].removeprefix("result: ")
        with xr.open_dataset(path) as ds:
            summaries[where] = json.loads(ds.attrs["summary"])
    clu, mem = summaries["cluster"], summaries["memory"]
    assert clu["cluster_workers"] == 2
    assert clu["n_basis"] == mem["n_basis"] == 40
    assert clu["objective"] == pytest.approx(mem["objective"], rel=1e-10)
    assert clu["test_rmse"] == pytest.approx(mem["test_rmse"], rel=1e-7)


def test_a_worker_paused_for_long_ends_the_fit_in_one_line(client, store, monkeypatch):
    """A worker Dask keeps paused (its memory above the pause fraction: the rows cannot
    spill, and a paused worker starts no task) ends the fit with one line naming
    cluster.memory_limit instead of waiting for ever."""
    import pipeline.blocks.cluster as cluster_blocks

    with ClusterKernelBlocks(client, store, Kernel("rbf", {"width": 10.0})) as blocks:
        monkeypatch.setattr(cluster_blocks, "PAUSED_SECONDS", 0.0)
        monkeypatch.setattr(cluster_blocks, "_workers",
                            lambda c: dict.fromkeys(blocks.owners, "paused"))
        with pytest.raises(cluster_blocks.ClusterFitError,
                           match=r"^worker tcp://\S+ holding training rows 0\.\.1999 of this "
                                 r"blocks=cluster fit has been paused for 0 s: .*give the "
                                 r"workers more memory \(cluster\.memory_limit\)"):
            blocks._run(lambda key: time.sleep(5), lambda b: ())
