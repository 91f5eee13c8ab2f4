"""One job run where this is called: its log, its timeout and its code-version cache around
:func:`pipeline.job.run.run`, and what a single job or a sweep's worker is told when it
fails. :func:`run_task` is the one entry to a job: Hydra's task function
(:func:`pipeline.app.task`) calls it on the config it composed, and a sweep's worker
(:mod:`pipeline.sweep.execute`) on the job spec the sweep planned, when the task function it was
given is one that :func:`pipeline.task_functions.runs_jobs` marked (any other task function
runs through Hydra's ``run_job``, as Hydra's own launchers run it).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path


def run_task(job, output_dir: Path, one_job: bool) -> dict:
    """Run ``job`` (a :class:`~pipeline.job.spec.JobSpec` as a sweep planned it, or a resolved
    config, made into one here) with :func:`pipeline.job.run.run`, writing ``result.nc`` into
    ``output_dir``: the one place a job runs, for a single job (:func:`pipeline.app.task`) and
    a sweep's worker (:func:`pipeline.sweep.execute.execute`) alike. One job (``one_job``)
    returns its bad input or lost cluster worker as a record, so that Hydra prints no line of
    its own about it; a sweep's job raises, and the sweep records the failure. The job's code
    is imported here, not with this module: Hydra's own flags (``--help``, ``--cfg``, tab
    completion) start without it."""
    from algorithms.errors import InputError
    from pipeline.cluster.here import ClusterFitError, worker_name
    from pipeline.codeversion import cached_under
    from pipeline.job.deadline import JobTimedOut, deadline
    from pipeline.job.log import job_log
    from pipeline.job.run import run
    from pipeline.job.spec import JobSpec
    from pipeline.job.summary import outcome_text
    from pipeline.results.job_file import JOB_FILE

    try:
        with job_log(output_dir) as log:  # <output_dir>/pipeline.log (pipeline.job.log)
            spec = job if isinstance(job, JobSpec) else JobSpec.from_config(job)
            log.info("job %s on %s: algorithm=%s dataset=%s lam=%s kappa=%s seed=%s",
                     output_dir.name, worker_name() or "this process", spec.algorithm,
                     spec.dataset["name"], spec.lam, spec.kappa, spec.seed)
            with deadline(spec.job_timeout, partial(_stuck, spec, output_dir, one_job)), \
                    cached_under(spec.store_root):  # code versions kept by the stores
                outcome = run(spec, output_dir / JOB_FILE, {"worker": worker_name(),
                                                            "pid": os.getpid()})
            log.info("finished:\n%s", outcome_text(outcome))
    except JobTimedOut as err:
        if not one_job:
            raise
        return {"status": "failed", "error": str(err)}
    except InputError as err:
        if not one_job:
            raise
        return {"status": "error", "error": str(err)}
    except ClusterFitError as err:  # a worker of a blocks=cluster fit was lost: not bad input
        if not one_job:
            raise
        return {"status": "failed", "error": str(err)}
    return {"status": "ok", "config_hash": outcome.config_hash,
            "result": str(outcome.result_path)}


def _stuck(spec, output_dir: Path, one_job: bool, message: str) -> None:
    """A job past its timeout stuck in a native call (:mod:`pipeline.job.deadline`): a single
    job prints its one line and exits; a sweep's worker records the failure and ends its own
    process (the nanny starts a fresh worker; the sweep finds the failure on disk)."""
    import signal
    import sys

    from pipeline.cluster.here import worker_name
    from pipeline.results.job_file import JOB_FILE, write_job_failure

    error = f"JobTimedOut: {message}"
    if one_job:
        print(f"error: {message}", file=sys.stderr, flush=True)
        os._exit(1)
    write_job_failure(spec.config(), error, output_dir / JOB_FILE,
                      {"config_hash": spec.identity(), "worker": worker_name(),
                       "pid": os.getpid()})
    os.kill(os.getpid(), signal.SIGKILL)
