"""Which Hydra task functions run a job through :func:`pipeline.job.task.run_task`: a sweep's
worker (:mod:`pipeline.sweep.execute`) calls ``run_task`` itself for those, on the config the
sweep resolved, without Hydra's ``run_job`` and its config copies. A module of its own, light
to import: the Hydra app marks its task function when it is imported, and ``--help`` imports
the app without any job code.
"""

from __future__ import annotations

from collections.abc import Callable

_JOB_TASKS: set[Callable] = set()


def runs_jobs(task_function: Callable) -> Callable:
    """Mark a Hydra task function as one that runs :func:`pipeline.job.task.run_task` on its
    composed job config: a sweep's worker then calls ``run_task`` with the config the sweep
    resolved, without Hydra's ``run_job`` and its config copies
    (:mod:`pipeline.sweep.job_files`)."""
    _JOB_TASKS.add(task_function)
    return task_function


def is_job_task(task_function: Callable) -> bool:
    """Whether ``task_function`` was marked by :func:`runs_jobs`."""
    return task_function in _JOB_TASKS
