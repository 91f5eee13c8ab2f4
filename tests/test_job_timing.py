"""Timing a reader can trust (issue 50, item 5): CPU seconds beside wall seconds, the load
average and cores of every job, an untimed warm-up per process and algorithm that changes no
result, and the training-mean predictor's test metrics beside a regression fit's."""

import json
import math
import random
import time

import numpy as np
import pytest
import xarray as xr

from algorithms.contract import Prediction
from algorithms.evaluation import Recorder, gaussian_nlpd, mean_predictor_metrics, run
from algorithms.kernel_blocks import ArrayKernelBlocks
from algorithms.kernels import Kernel
from algorithms.registry import get
from pipeline.datasets import ingest, load_arrays
from pipeline.job import warmup
from pipeline.results.variables import describe

JOB = ["algorithm=nystrom", "algorithm.max_basis=20", "dataset=sine1d", "dataset.n_train=200",
       "dataset.n_test=50"]
NEW_KEYS = ("cpu_seconds", "hyper_cpu_seconds", "load_start", "load_end", "cores",
            "other_cores", "hyper_other_cores", "hyper_blas_threads",
            "warmup_seconds", "warmup_error", "baseline_test_rmse", "baseline_test_nlpd")


@pytest.fixture
def cold(monkeypatch):
    """A process in which no algorithm has been warmed up yet."""
    monkeypatch.setattr(warmup, "WARM", set())


def _job(tmp_path, run_cli, *extra: str):
    """Run :data:`JOB` (plus ``extra``) in-process in ``tmp_path``; its result and screen."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = run_cli(tmp_path, *JOB, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    return xr.open_dataset(path, engine="scipy").load(), proc.stdout


def test_a_job_records_cpu_seconds_load_cores_and_the_training_mean(tmp_path, run_cli, cold):
    ds, screen = _job(tmp_path, run_cli, "hyper=ml", "hyper.subset=100", "hyper.restarts=0")
    s = json.loads(ds.attrs["summary"])
    for key in ("cpu_seconds", "hyper_cpu_seconds", "warmup_seconds", "other_cores",
                "hyper_other_cores"):
        assert math.isfinite(s[key]) and s[key] >= 0.0, key
    assert s["load_start"] >= 0.0 and s["load_end"] >= 0.0
    assert isinstance(s["cores"], int) and s["cores"] >= 1
    assert 1 <= s["hyper_blas_threads"] <= s["cores"]
    cpu = ds["cpu_seconds"].values  # per step too, evaluation excluded as for seconds
    assert ds["cpu_seconds"].dims == ("step",) and np.isfinite(cpu).all() and (cpu >= 0).all()
    assert cpu[-1] == s["cpu_seconds"] and np.all(np.diff(cpu) >= 0)
    # the training-mean predictor on the job's own test rows, in its (centred) units
    config = json.loads(ds.attrs["config"])
    store = ingest(config["dataset"], tmp_path / config["store_root"])
    _, y_train, _, y_test = load_arrays(store)
    y_train, y_test = y_train - s["hyper_y_offset"], y_test - s["hyper_y_offset"]
    mean, var = y_train.mean(), y_train.var()
    assert s["baseline_test_rmse"] == pytest.approx(np.sqrt(np.mean((y_test - mean) ** 2)),
                                                    rel=1e-12)
    nlpd = np.mean(0.5 * np.log(2 * np.pi * var) + (y_test - mean) ** 2 / (2 * var))
    assert s["baseline_test_nlpd"] == pytest.approx(nlpd, rel=1e-12)
    assert s["test_rmse"] < s["baseline_test_rmse"]  # the fit learned something on sine1d
    assert f"training mean    RMSE {s['baseline_test_rmse']:.6g}" in screen
    assert f"(CPU {s['cpu_seconds']:.3f} s; untimed warm-up" in screen
    assert f"on {s['cores']} cores" in screen


def test_every_new_key_is_described():
    for key in NEW_KEYS:
        long_name, units = describe(key)
        assert long_name and units in ("s", "1", "nats", "target units"), key
        assert describe(f"final_{key}")[0] == f"final {long_name}"


def test_the_first_fit_of_an_algorithm_in_a_process_is_warmed_up_once(tmp_path, run_cli,
                                                                        cold):
    first, _ = _job(tmp_path / "a", run_cli)
    second, screen = _job(tmp_path / "b", run_cli, "seed=1")
    s1, s2 = (json.loads(ds.attrs["summary"]) for ds in (first, second))
    assert s1["warmup_seconds"] > 0.0 and s2["warmup_seconds"] == 0.0
    assert "warmup_error" not in s1 and "untimed warm-up" not in screen
    # the warm-up ran before the first fit: its seconds are not in the job's either
    assert first.attrs["job_seconds"] > 0.0
    assert ("nystrom", "rbf") in warmup.WARM


def test_a_warmed_job_computes_what_an_unwarmed_one_does(tmp_path, run_cli, cold):
    warmed, _ = _job(tmp_path / "a", run_cli)  # warm-up, then the fit
    unwarmed, _ = _job(tmp_path / "b", run_cli)  # already warm: the fit alone
    assert json.loads(warmed.attrs["summary"])["warmup_seconds"] > 0.0
    assert json.loads(unwarmed.attrs["summary"])["warmup_seconds"] == 0.0
    np.testing.assert_array_equal(warmed["coef"].values, unwarmed["coef"].values)
    np.testing.assert_array_equal(warmed["basis"].values, unwarmed["basis"].values)


@pytest.mark.parametrize("name,options", [("nystrom", {"max_basis": 15}),
                                          ("sgma", {"max_basis": 15}),
                                          ("gpytorch_svgp", {"max_basis": 10, "epochs": 3,
                                                             "batch_size": 32})])
def test_the_warm_up_changes_no_fit(name, options, cold):
    """Random landmarks, random candidate subsets, minibatch order and GPyTorch's training:
    the same coefficients after a warm-up as without one."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, size=(120, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(120)
    kernel, spec = Kernel("rbf", {"width": 2.0}), get(name)
    blocks = ArrayKernelBlocks(X, kernel)

    def fit():
        return run(spec, blocks, y, lam=0.1, kappa=7, rng=np.random.default_rng(3),
                   test=(X[:20], y[:20]), **options)

    unwarmed = fit()
    seconds, error = warmup.warm_up(spec, kernel, 0.1, 7, options, d=2)
    assert seconds > 0.0 and error is None
    warmed = fit()
    np.testing.assert_array_equal(warmed.coef, unwarmed.coef)
    np.testing.assert_array_equal(warmed.basis, unwarmed.basis)
    assert warmup.warm_up(spec, kernel, 0.1, 7, options, d=2) == (0.0, None)


def test_the_warm_up_leaves_the_global_generators_as_they_were():
    import torch

    np.random.seed(11)
    random.seed(11)
    torch.manual_seed(11)
    expected = (np.random.random(), random.random(), float(torch.rand(1)))
    np.random.seed(11)
    random.seed(11)
    torch.manual_seed(11)
    with warmup.preserved_random_state():
        np.random.random(100)
        random.random()
        torch.rand(100)
    assert (np.random.random(), random.random(), float(torch.rand(1))) == expected


def test_a_failed_warm_up_is_recorded_and_the_job_still_fits(tmp_path, run_cli, cold,
                                                             monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the warm-up\nbroke")

    monkeypatch.setattr(warmup, "_tiny_fit", broken)
    ds, screen = _job(tmp_path, run_cli)
    s = json.loads(ds.attrs["summary"])
    assert s["warmup_error"] == "RuntimeError: the warm-up broke"
    assert np.isfinite(s["test_rmse"]) and s["warmup_seconds"] >= 0.0
    assert "note             the warm-up fit failed: RuntimeError: the warm-up broke" in screen


def test_a_classification_job_has_no_mean_predictor_metrics(tmp_path, run_cli, cold):
    proc = run_cli(tmp_path, "algorithm=gp_laplace", "dataset=two_moons", "dataset.n_train=100",
                   "dataset.n_test=40", "algorithm.m=10")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    s = json.loads(xr.open_dataset(path, engine="scipy").attrs["summary"])
    assert not {"baseline_test_rmse", "baseline_test_nlpd"} & set(s)
    assert s["warmup_seconds"] > 0.0 and s["cpu_seconds"] >= 0.0 and s["cores"] >= 1


def test_mean_predictor_metrics():
    y_train, y_test = np.array([1.0, 2.0, 4.0, 5.0]), np.array([0.0, 3.0, 6.0])
    out = mean_predictor_metrics(y_train, y_test)
    assert out["baseline_test_rmse"] == pytest.approx(math.sqrt((9 + 0 + 9) / 3))
    assert out["baseline_test_nlpd"] == pytest.approx(
        gaussian_nlpd(y_test, np.full(3, 3.0), np.full(3, 2.5)))
    assert set(mean_predictor_metrics(np.ones(4), y_test)) == {"baseline_test_rmse"}


def test_the_recorder_leaves_evaluation_cpu_time_out():
    """What a test evaluation spends on the CPU is counted apart from the fit's cpu_seconds:
    the two add up to the process's CPU time over the run."""
    def busy(X):  # an evaluation that keeps the CPU busy for 0.2 s of process time
        until = time.process_time() + 0.2
        while time.process_time() < until:
            pass
        return Prediction(np.zeros(len(X)), None, None)

    recorder = Recorder((np.zeros((3, 1)), np.zeros(3)))
    recorder.step(busy, n_basis=1)
    total = time.process_time() - recorder.cpu_start
    assert recorder.eval_cpu_seconds >= 0.2
    assert 0.0 <= recorder.rows[0]["cpu_seconds"] <= total - recorder.eval_cpu_seconds


def test_the_cores_others_kept_busy_are_the_machines_busy_time_less_the_processs_own(
        tmp_path):
    """pipeline.cluster.busy: (machine busy seconds − this process's CPU seconds) / wall; the
    machine's busy seconds are /proc/stat's user, nice, system, irq, softirq and steal ticks."""
    import os

    from pipeline.cluster.busy import BusyMark, machine_busy_seconds, other_cores

    assert other_cores(BusyMark(0.0, 10.0, 1.0), BusyMark(2.0, 13.0, 2.0)) == 1.0
    assert other_cores(BusyMark(0.0, 10.0, 1.0), BusyMark(2.0, 10.5, 2.0)) == 0.0  # grain
    assert math.isnan(other_cores(BusyMark(0.0, math.nan, 0.0), BusyMark(1.0, 1.0, 0.0)))
    assert math.isnan(other_cores(BusyMark(1.0, 1.0, 0.0), BusyMark(1.0, 2.0, 0.0)))
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 7 50 1000 5 1 2 3 9 0\ncpu0 50 3 25 500 2 0 1 1 4 0\n")
    assert machine_busy_seconds(stat) == 163 / os.sysconf("SC_CLK_TCK")  # idle, iowait out
    stat.write_text("cpu  1 2\n")
    assert math.isnan(machine_busy_seconds(stat))
    assert math.isnan(machine_busy_seconds(tmp_path / "none"))
