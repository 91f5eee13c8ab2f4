"""Local Dask workers that start warm: a fork server that imports the worker's code while the
command line is still importing Hydra and composing the sweep.

A LocalCluster spawns each worker as a fresh interpreter that imports Dask, numpy, scipy and
this package before it can run a job (~1.3 s for 2 workers on 2 cores, the largest fixed cost
of a short sweep). :func:`prestart` starts Python's ``multiprocessing`` fork server at the
very start of a sweep's command line, with that code preloaded; :func:`pipeline.cluster.connect`
then starts the local workers from it (Dask's ``distributed.worker.multiprocessing-method:
forkserver``), and each worker is a fork of an already-importing process (measured: cluster
start 1.3 s → 0.4 s). The fork server is a single-threaded process that does nothing but
import and fork; it starts with Dask's ``distributed.nanny.pre-spawn-environ`` (BLAS and
OpenMP pinned to one thread, as spawned workers have), and it exits with the command.

This module imports only the standard library and ``dask.config`` so that it can run before
the command line's own imports.

It is also the local workers' Dask preload (:func:`dask_setup`): a worker warms up the kernel
tiles' compiled code on a thread at its start, so its first job does not wait for it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from pipeline.cluster.kinds import runs_here
from pipeline.cluster.worker_settings import WORKER_SETTINGS, mark_started, started
from pipeline.config import CONF_DIR, default_choice, job_defaults

# what a worker runs: the task function and its imports (the command line's module is
# imported again as the worker's main module, so pipeline.cli is here too). Not the kernel
# tiles' compiled loops (algorithms._fused_exp, loaded at a job's first tile, ~0.7 s): numba
# and LLVM would add ~60 MiB to every forked worker's resident memory from its start, enough
# to keep a worker with a small memory_limit paused (tests/test_faults.py, 400 MB)
PRELOAD = ("distributed", "numpy", "scipy.linalg", "algorithms", "pipeline.job.run",
           "pipeline.blocks.store", "pipeline.sweep.launch", "pipeline.app", "pipeline.cli")

# the resident memory the kernel tiles' compiled code adds to a process (numba and LLVM)
WARM_UP_BYTES = 128 << 20


def dask_setup(worker) -> None:
    """Dask's preload hook (``distributed.worker.preload: [pipeline.cluster.prestart]``, set
    for local workers by :func:`pipeline.cluster.connect.connect`): warm up the kernel tiles
    (:func:`algorithms.kernels.warm_up`) on a daemon thread, beside the worker's start and
    its first job's data loading; a job that needs them before it is done waits for the
    import, outside its timed fit. Not under a memory limit below 8 × :data:`WARM_UP_BYTES`
    (1 GiB): there the code would take a large share of a worker that may never need it (a
    restarted worker under ``cluster.memory_limit=400MB`` would sit paused at Dask's 80 % mark);
    its first job then loads it, still untimed (:func:`pipeline.job.run.run_job`)."""
    memory = getattr(worker, "memory_manager", None)
    limit = getattr(memory, "memory_limit", None)
    if limit and limit < 8 * WARM_UP_BYTES:
        return

    def warm() -> None:
        try:
            from algorithms.kernels import warm_up

            warm_up()
        except Exception:  # a job reports the same fault in its own words
            pass

    threading.Thread(target=warm, name="kernel-warm-up", daemon=True).start()


def wants_local_workers(argv: Sequence[str]) -> bool:
    """Whether the command line ``argv`` runs on a local cluster: a sweep (``-m`` or an
    experiment whose file declares ``mode: MULTIRUN``) or a ``blocks=cluster`` job, with no
    ``cluster=`` other than local, no ``dry_run`` (on the command line, or in the experiment's
    file where the command line does not set it), and none of Hydra's own flags (``--help``,
    ``--cfg``)."""
    args = list(argv)
    if any(a.startswith("-") and a not in ("-m", "--multirun") for a in args):
        return False
    # the command line's values over conf/config.yaml's, as typed: a peek made before Hydra is
    # imported (its parser reads them afterwards; a wrong guess costs an idle fork server only)
    values = {"cluster": default_choice("cluster"), "experiment": default_choice("experiment"),
              **{key: str(job_defaults()[key]).lower() for key in ("dry_run", "blocks")},
              **{a.lstrip("+").partition("=")[0]: a.partition("=")[2] for a in args if "=" in a}}
    if not runs_here(values["cluster"]) or values["dry_run"] != "false":
        return False
    if "-m" in args or "--multirun" in args or values["blocks"] == "cluster":
        return True
    experiment = values["experiment"] or ""
    path = CONF_DIR / "experiment" / f"{experiment}.yaml"
    if not (re.fullmatch(r"[\w\-]+", experiment) and path.is_file()):
        return False
    text = path.read_text(errors="replace")  # a peek: a file not UTF-8 is the checks' to say
    # an experiment that is a dry run (bench_sweep_plan) starts no worker, unless the command
    # line says dry_run itself
    dry = not any(a.lstrip("+").startswith("dry_run=") for a in args) and \
        re.search(r"^dry_run:\s*true\b", text, flags=re.M | re.I) is not None
    return not dry and re.search(r"^\s+mode:\s*MULTIRUN\b", text, flags=re.M) is not None


def _pre_spawn_environ() -> dict[str, str]:
    """Dask's ``distributed.nanny.pre-spawn-environ`` without importing distributed (it imports
    numpy, whose BLAS reads the environment once): its defaults file, as distributed.config
    loads it, under the user's Dask configuration and :data:`WORKER_SETTINGS` (a variable set
    to None there is left out, as Dask's nanny leaves it out)."""
    import dask.config
    import yaml

    spec = importlib.util.find_spec("distributed")
    if spec is not None and spec.origin is not None:
        defaults = Path(spec.origin).with_name("distributed.yaml")
        if defaults.is_file():
            dask.config.update_defaults(yaml.safe_load(defaults.read_text()))
    with dask.config.set(WORKER_SETTINGS):  # read inside: leaving restores the dict in place
        value = dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {}
        return {str(k): str(v) for k, v in value.items() if v is not None}


def prestart(argv: Sequence[str]) -> bool:
    """Start the fork server for local workers when ``argv`` runs a local sweep; returns
    whether it did. Call before anything starts a thread (the environment is set around
    the start)."""
    if started() or not wants_local_workers(argv):
        return started()
    environ = _pre_spawn_environ()
    saved = {k: os.environ.get(k) for k in environ}
    os.environ.update(environ)
    import multiprocessing  # here: a command that starts no fork server does without

    try:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        from multiprocessing import forkserver

        forkserver.ensure_running()
    except (OSError, RuntimeError, ValueError):
        return False  # the workers are spawned instead, as without it
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    mark_started()
    return True
