"""BLAS threads: every job runs with an explicit thread count (``threads``, threadpoolctl),
recorded with the CPU model; the count is not part of what a job computes (its hash)."""

import json
import os

import pytest
import xarray as xr

from pipeline.job.identity import config_hash

JOB = ["algorithm=nystrom", "algorithm.max_basis=20", "dataset=sine1d", "dataset.n_train=60"]


@pytest.fixture
def _job(in_process):
    """``_job(tmp_path, *extra)``: what ``python -m pipeline`` of :data:`JOB` does (in-process)."""
    return lambda tmp_path, *extra: in_process(tmp_path, "pipeline", *JOB, *extra)


@pytest.mark.parametrize("extra,threads", [((), os.cpu_count()), (("threads=1",), 1),
                                           (("threads=2",), 2)])
def test_a_single_job_runs_with_the_configured_threads_and_records_them(tmp_path, extra,
                                                                        threads, _job):
    proc = _job(tmp_path, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1].removeprefix("result: ")
    summary = json.loads(xr.open_dataset(path, engine="scipy").attrs["summary"])
    assert summary["blas_threads"] == threads
    assert summary["kernel_threads"] == threads  # the kernel blocks' tiles follow threads too
    # threads=auto (the default): a single job on this machine uses every core
    assert isinstance(summary["cpu_model"], str) and summary["cpu_model"]


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
