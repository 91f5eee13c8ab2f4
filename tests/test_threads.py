"""BLAS threads: every job runs with an explicit thread count (``threads``, threadpoolctl),
recorded with the CPU model; the count is not part of what a job computes (its hash)."""

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from pipeline.job.identity import config_hash

JOB = ["algorithm=nystrom", "algorithm.max_basis=20", "dataset=sine1d", "dataset.n_train=60"]


@pytest.fixture
def _job(in_process):
    """``_job(tmp_path, *extra)``: what ``python -m pipeline`` of :data:`JOB` does (in-process)."""
    return lambda tmp_path, *extra: in_process(tmp_path, "pipeline", *JOB, *extra)


@pytest.mark.parametrize("extra,threads", [((), None), (("threads=1",), 1),
                                           (("threads=2",), 2)])
def test_a_single_job_runs_with_the_configured_threads_and_records_them(tmp_path, extra,
                                                                        threads, _job):
    proc = _job(tmp_path, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    summary = json.loads(xr.open_dataset(path, engine="scipy").attrs["summary"])
    if threads is None:  # threads=auto (the default): the cores free when it starts
        assert 1 <= summary["blas_threads"] <= len(os.sched_getaffinity(0))
    else:
        assert summary["blas_threads"] == threads
    assert summary["kernel_threads"] == summary["blas_threads"]  # the tiles follow threads
    assert isinstance(summary["cpu_model"], str) and summary["cpu_model"]


@pytest.mark.parametrize("cores,others,expected", [(2, 0, 2), (2, 1, 1), (2, 5, 1), (8, 3, 5),
                                                   (4, None, 4)])
def test_auto_threads_are_the_cores_no_other_runnable_thread_holds(monkeypatch, cores, others,
                                                                   expected):
    """threads=auto when a job starts: its affinity's cores less the other runnable threads
    of this instant (CI, a neighbour's job), at least one; every core where the OS does not
    say; a sweep with several jobs at once shares the cores among them at planning."""
    from pipeline.cluster import threads

    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr(threads, "runnable_others", lambda: others)
    assert threads.free_threads("auto") == expected
    assert threads.free_threads(3) == 3 and threads.free_threads(None) is None
    assert threads.resolve_threads("auto", 1) == "auto"
    assert threads.resolve_threads("auto", 2) == max(1, cores // 2)
    assert threads.resolve_threads(2, 4) == 2
    # threads=all: every core whatever else runs (a benchmark's fixed count); shared alike
    assert threads.free_threads("all") == cores
    assert threads.resolve_threads("all", 1) == cores
    assert threads.resolve_threads("all", 2) == max(1, cores // 2)


def test_runnable_others_reads_this_instants_count():
    from pipeline.cluster.threads import runnable_others

    others = runnable_others(samples=3, interval=0.0)
    assert others is None or 0 <= others < 10_000


def test_this_process_own_busy_threads_are_not_others(monkeypatch, tmp_path):
    """The sweep's own runnable threads — this process's (a BLAS pool still spinning after the
    job before) and its parents' (a local sweep's scheduler) — are not other work: only the
    rest of /proc/loadavg's runnable count is."""
    from pipeline.cluster import threads

    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc/self/task: the OS does not list a process's threads")
    busy, stop = threading.Event(), threading.Event()

    def spin() -> None:
        busy.set()
        while not stop.is_set():
            np.dot(np.ones(200_000), np.ones(200_000))  # releases the GIL: stays runnable

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        busy.wait()
        assert max(threads.own_runnable() for _ in range(50)) >= 2  # this thread and spin
        assert os.getppid() in threads.ancestors() or os.getppid() == 1
        loadavg = tmp_path / "loadavg"
        loadavg.write_text("0.50 0.40 0.30 5/300 12345\n")
        real_path = threads.Path
        monkeypatch.setattr(threads, "Path", lambda p: loadavg if p == "/proc/loadavg"
                            else real_path(p))
        monkeypatch.setattr(threads, "own_runnable", lambda pids: 2)
        assert threads.runnable_others(samples=3, interval=0.0) == 3
        monkeypatch.setattr(threads, "own_runnable", lambda pids: 0)  # the OS does not tell
        assert threads.runnable_others(samples=3, interval=0.0) == 4  # this thread only
    finally:
        stop.set()
        worker.join()


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_bad_threads_is_one_line(tmp_path, value, _job):
    proc = _job(tmp_path, f"threads={value}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: threads=") and proc.stderr.count("\n") == 1
    assert "pass e.g. threads=1" in proc.stderr


def test_threads_do_not_change_a_jobs_identity():
    base = {"algorithm": {"name": "nystrom", "max_basis": 20}, "dataset": {"name": "sine1d"},
            "kernel": {"name": "rbf", "width": 1.0}, "lam": 0.1, "kappa": 59, "seed": 0,
            "threads": 1}
    assert config_hash(base) == config_hash({**base, "threads": 2})


def test_the_contention_benchmark_writes_its_figures_at_small_size(tmp_path, monkeypatch):
    """python -m pipeline.bench.contention size=small: the exact GP's factorisation quiet and
    with a busy process running, on one thread, every core and threads=auto (which takes the
    cores the busy process leaves, at least one); the competitor is gone afterwards."""
    import json

    from pipeline.bench.contention import main

    monkeypatch.chdir(tmp_path)
    assert main(["size=small"]) == 0
    out = tmp_path / "outputs" / "bench_contention_small"
    figures = json.loads((out / "figures.json").read_text())
    (row,) = figures["rows"]
    assert row["n"] == 800 and 1 <= row["auto_threads"] <= row["cores"]
    assert row["busy_1"] > 0 and row["busy_auto"] > 0 and row["auto_over_one"] > 0
    assert (out / "contention.png").stat().st_size > 10000
    assert main(["size=huge"]) == 2


def _python_output(code: str, env: dict[str, str]) -> str:
    """The stdout of ``code`` run by a fresh interpreter with ``env`` (its BLAS libraries loaded
    in the order the code imports them); fails the test with its stderr if it fails."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _unpinned_env() -> dict[str, str]:
    """This environment without the variables that pin BLAS threads (pytest-xdist's workers
    have them): a fresh interpreter's BLAS then starts with a thread per core."""
    return {key: value for key, value in os.environ.items()
            if key not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def test_a_jobs_thread_count_reaches_scipys_blas_loaded_after_the_first_scan():
    """A Dask worker starts with OPENBLAS_NUM_THREADS=1 and scans its BLAS before any job has
    imported scipy.linalg: the threads a job then sets must reach scipy's OpenBLAS (its
    Cholesky) too, not numpy's alone — every library at the count, and the count recorded."""
    code = (
        "import sys, numpy\n"
        "assert 'scipy.linalg' not in sys.modules\n"
        "from pipeline.cluster.threads import blas_controller, blas_threads\n"
        "blas_threads()\n"
        "import scipy.linalg\n"
        "from threadpoolctl import threadpool_info\n"
        "with blas_controller().limit(limits=2, user_api='blas'):\n"
        "    counts = sorted(i['num_threads'] for i in threadpool_info()\n"
        "                    if i['user_api'] == 'blas')\n"
        "    print(counts, blas_threads())\n")
    out = _python_output(code, {**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    counts, recorded = out.rsplit(" ", 1)
    assert set(json.loads(counts)) == {2} and int(recorded) == 2


def test_single_threaded_blas_contexts_reach_scipys_blas_imported_after_them():
    """SGMA's and Zhang's loops (tiles_own_the_cores) and the small factors (small_blas) run
    every BLAS on one thread, scipy's OpenBLAS included, though algorithms.kernel_threads was
    imported before scipy.linalg (a controller scanned at its import missed scipy's: its
    solves then ran on every core and spun beside the tiles, README's default job 0.47 s
    against 0.37 s)."""
    code = (
        "import sys, numpy\n"
        "import algorithms.kernel_threads as kt\n"
        "assert 'scipy.linalg' not in sys.modules\n"
        "import scipy.linalg\n"
        "from threadpoolctl import threadpool_info, threadpool_limits\n"
        "def counts():\n"
        "    return sorted(i['num_threads'] for i in threadpool_info()\n"
        "                  if i['user_api'] == 'blas')\n"
        "with threadpool_limits(limits=2, user_api='blas'):\n"
        "    outer = counts()\n"
        "    with kt.tiles_own_the_cores():\n"
        "        tiles = counts()\n"
        "    with kt.small_blas(10):\n"
        "        small = counts()\n"
        "print(outer, tiles, small, sep=';')\n")
    out = _python_output(code, _unpinned_env())
    outer, tiles, small = (json.loads(part) for part in out.split(";"))
    assert len(outer) >= 2 and set(outer) == {2}  # numpy's and scipy's, both raised to 2 first
    assert set(tiles) == {1} and set(small) == {1}


def test_lead_blas_puts_the_other_packages_own_blas_on_one_thread():
    """lead_blas("numpy") leaves numpy's BLAS at its threads and runs the copy scipy's wheel
    ships on one (PCG: two OpenBLAS copies with threads each spin against each other), and
    lead_blas("scipy") the reverse; a library both packages share is left alone; anything
    else is refused."""
    code = (
        "import numpy, scipy.linalg\n"
        "from pathlib import Path\n"
        "from threadpoolctl import threadpool_info, threadpool_limits\n"
        "from algorithms.kernel_threads import lead_blas\n"
        "def counts():\n"
        "    out = {}\n"
        "    for i in threadpool_info():\n"
        "        if i['user_api'] == 'blas':\n"
        "            home = Path(i['filepath']).resolve().parent.name\n"
        "            out[home] = i['num_threads']\n"
        "    return out\n"
        "with threadpool_limits(limits=2, user_api='blas'):\n"
        "    with lead_blas('numpy'):\n"
        "        a = counts()\n"
        "    with lead_blas('scipy'):\n"
        "        b = counts()\n"
        "    c = counts()\n"
        "print(a, b, c, sep=';')\n")
    out = _python_output(code, _unpinned_env())
    import ast

    lead_numpy, lead_scipy, after = (ast.literal_eval(part)
                                     for part in out.split(";"))
    assert set(after.values()) == {2}  # restored
    if set(after) == {"numpy.libs", "scipy.libs"}:  # wheels: a copy each
        assert lead_numpy == {"numpy.libs": 2, "scipy.libs": 1}
        assert lead_scipy == {"numpy.libs": 1, "scipy.libs": 2}
    else:  # one library both use (a system or conda BLAS): nothing to put on one thread
        assert lead_numpy == lead_scipy == after
    from algorithms.kernel_threads import lead_blas

    with pytest.raises(ValueError, match="package='torch': pass one of numpy, scipy"):
        lead_blas("torch")


def test_a_sweeps_learning_task_learns_on_the_jobs_threads(monkeypatch):
    """A Dask nanny starts its worker with one BLAS thread; a job's fit raises that to its
    ``threads``, and so does the learning task its jobs wait for (it ran on one core of two:
    421 s of wall time for 430 s of CPU on pumadyn32nm's 7373 rows)."""
    from threadpoolctl import threadpool_limits

    from algorithms.kernel_threads import kernel_threads
    from pipeline.cluster.threads import blas_threads
    from pipeline.job.spec import JobSpec
    from pipeline.sweep import execute

    seen = []
    monkeypatch.setattr(execute, "learned",
                        lambda job, store: seen.append((blas_threads(), kernel_threads())))
    job = JobSpec.from_config({"algorithm": {"name": "exact"}, "kernel": {"name": "rbf"},
                               "dataset": {"name": "sine1d", "n_train": 40},
                               "hyper": {"name": "ml"}, "threads": 2})
    with threadpool_limits(limits=1, user_api="blas"):
        assert execute.learn_task(job, "store") == "store"
        assert blas_threads() == 1  # as it was, after the task
    assert seen == [(2, 2)]
