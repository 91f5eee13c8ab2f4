"""job_timeout: a job past it stops between two Python steps, or, stuck in one native call,
is handed to on_stuck after the grace period (pipeline/job/deadline.py)."""

import time

import pytest

from pipeline.config import complete
from pipeline.job.deadline import JobTimedOut, deadline
from pipeline.job.task import run_task


def test_a_python_loop_stops_at_the_timeout():
    stuck = []
    start = time.perf_counter()
    with pytest.raises(JobTimedOut, match="job_timeout=0.2 s"):
        with deadline(0.2, stuck.append):
            while True:
                sum(range(100))
    assert time.perf_counter() - start < 1.0 and not stuck


def test_a_native_call_past_the_grace_goes_to_on_stuck():
    stuck = []
    with pytest.raises(JobTimedOut):
        with deadline(0.1, stuck.append, grace=0.1):
            time.sleep(0.6)  # one C call: the exception waits for it to return
    assert len(stuck) == 1 and "still in a native call" in stuck[0]


def test_a_block_that_returns_in_time_is_untouched():
    with deadline(0.3, pytest.fail):
        value = 1
    time.sleep(0.5)  # past the deadline: nothing fires any more
    assert value == 1


def test_a_sweep_job_past_its_timeout_raises_and_logs_it(tmp_path):
    """The job raises JobTimedOut (the sweep records it as a failed point) and its own log
    says so; a single job returns it as its one-line failure."""
    config = complete({"algorithm": {"name": "sgma", "eps": 0.0, "max_basis": 1800},
                       "dataset": {"name": "friedman1", "n_train": 1900},  # numpy tiles
                       "kernel": {"name": "rbf", "width": 10.0},
                       "store_root": str(tmp_path / "stores"), "job_timeout": 0.5})
    start = time.perf_counter()
    with pytest.raises(JobTimedOut):
        run_task(config, tmp_path, one_job=False)
    assert time.perf_counter() - start < 20
    log = (tmp_path / "pipeline.log").read_text()
    assert "[ERROR] - the job failed: JobTimedOut: the job ran past job_timeout=0.5 s" in log
    assert not (tmp_path / "result.nc").exists()
    record = run_task(config, tmp_path, one_job=True)
    assert record["status"] == "failed" and "job_timeout=0.5 s" in record["error"]
