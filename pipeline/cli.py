"""The command line: checks made before Hydra starts (so a typo gets a one-line error), then
one job or a sweep through :mod:`pipeline.app`, with the outcome taken from what it returns."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from pipeline import app
from pipeline.cluster.prestart import prestart
from pipeline.sweep.clock import mark_command_line
from pipeline.watch import watched

if TYPE_CHECKING:
    import xarray as xr

# Hydra's own flags (--help, --cfg, tab completion) need Hydra and the configs only: what a job
# or a sweep runs (numpy, scipy, Dask, xarray, the algorithms) is imported below, after them.

MULTIRUN_FLAGS = ("-m", "--multirun")


def _one_line(message: object) -> str:
    """An error's text on one line, without Hydra's config search path."""
    return " ".join(str(message).split()).split(" Config search path:")[0]


def _comma_completions(argv: Sequence[str]) -> str | None:
    """Bash completion of a config group's choice after a comma (``algorithm=exact,ny<Tab>``
    → ``algorithm=exact,nystrom``), which Hydra's own completion does not list: the choices
    its script filters, space-separated; None for anything else (Hydra answers)."""
    import re

    from pipeline.config import GROUPS, group_options

    if "query=bash" not in argv:
        return None
    line = os.environ.get("COMP_LINE", "")
    word = "" if not line or line.endswith(" ") else line.split()[-1]
    match = re.fullmatch(r"(\+{0,2})([\w/]+)=((?:[^,=]*,)+)([^,=]*)", word)
    if not match or match[2] not in GROUPS:
        return None
    plus, group, chosen, last = match.groups()
    taken = set(chosen.split(","))
    return " ".join(f"{plus}{group}={chosen}{option}" for option in group_options(group)
                    if option.startswith(last) and option not in taken)


def _error(message: object) -> int:
    print(f"error: {_one_line(message)}", file=sys.stderr)
    return 2


def _checked(argv: Sequence[str]) -> list[str]:
    """The overrides of ``argv`` (``-m`` left out, group keys forced) once the checks made
    before Hydra starts pass; bad input raises :class:`InputError` (one line)."""
    from algorithms.errors import InputError
    from pipeline.config.overrides import (
        check_benchmark,
        check_group_choices,
        check_hydra_overrides,
        check_override_syntax,
        check_size,
        force_group_keys,
    )
    from pipeline.config.untrusted import config_files_problem
    from pipeline.config.writes import check_code_and_log_overrides

    argv = [str(a) for a in argv]
    error = (config_files_problem(argv)  # again: a replayed command (resume=last) too
             or check_override_syntax(argv) or check_hydra_overrides(argv)
             or check_code_and_log_overrides(argv)
             or check_group_choices(argv) or check_size(argv) or check_benchmark(argv))
    if error:
        raise InputError(error)
    return force_group_keys([a for a in argv if a not in MULTIRUN_FLAGS])


class FailedPointsWarning(UserWarning):
    """:func:`run_sweep` finished with failed points (listed in the message)."""


class SweepFailed(RuntimeError):
    """:func:`run_sweep` with ``errors="raise"`` finished with failed points; ``results`` is
    the sweep's Dataset all the same."""

    def __init__(self, message: str, results: xr.Dataset) -> None:
        super().__init__(message)
        self.results = results


def run_sweep(overrides: Sequence[str], errors: str = "warn") -> xr.Dataset:
    """Run a Hydra sweep from Python, as ``python -m pipeline -m <overrides>`` does (same
    checks, same launcher and cluster settings), and return its consolidated Dataset: one
    entry per sweep point, ``status`` "ok" or "failed" (the error in ``error``).

    ``errors``: what failed points do. "warn" (default) returns the Dataset after a
    :class:`FailedPointsWarning` listing each failed point and its error, as scikit-learn's
    searches warn of failed fits; "raise" raises :class:`SweepFailed` (the Dataset in its
    ``results``). Bad input raises :class:`InputError` (one line), and so does a call from a
    script's top level outside ``if __name__ == "__main__":`` when the sweep would start a
    local cluster (its worker processes import the script again)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from algorithms.errors import InputError
    from pipeline.cluster.main_guard import check_main_guard
    from pipeline.results.consolidate import load
    from pipeline.sweep.outcome import SweepOutcome

    if errors not in ("warn", "raise"):
        raise InputError(f"run_sweep(errors={errors!r}): pass errors='warn' or errors='raise'")
    from pipeline.outputs import outputs_root
    from pipeline.sweep.naming import name_sweep

    checked = _checked(overrides)
    if _starts_a_local_cluster(checked):
        check_main_guard("run_sweep (a local Dask cluster)")
    checked = name_sweep(checked, outputs_root())
    try:
        outcome = SweepOutcome.from_returns(app.multirun(checked))
    except (HydraException, OmegaConfBaseException) as err:
        raise InputError(_one_line(err)) from None
    ds = load(outcome.results_path)
    failed = _failed_points(ds)
    if failed:
        message = (f"{len(failed)} of {ds['status'].size} sweep points failed "
                   f"({outcome.results_path}):\n" + "\n".join(failed))
        if errors == "raise":
            raise SweepFailed(message, ds)
        import warnings
        warnings.warn(message, FailedPointsWarning, stacklevel=2)
    return ds


def _starts_a_local_cluster(overrides: Sequence[str]) -> bool:
    """Whether these overrides leave the sweep on a local cluster (conf's default)."""
    chosen = {key: value for key, _, value in (o.partition("=") for o in overrides)}
    from pipeline.cluster.kinds import runs_here
    from pipeline.config import default_choice

    kind = chosen["cluster"] if "cluster" in chosen else default_choice("cluster")
    return runs_here(kind) and "scheduler" not in chosen


def _failed_points(ds: xr.Dataset) -> list[str]:
    """``  algorithm=nystrom, seed=1: <error>`` for each failed point of a sweep's Dataset."""
    status = ds["status"].load()
    if not (status == "failed").any():
        return []
    stacked = status.stack(point=status.dims)
    errors = ds["error"].load().stack(point=status.dims) if "error" in ds else None
    lines = []
    for i in range(stacked.sizes["point"]):
        if str(stacked.values[i]) != "failed":
            continue
        point = stacked.isel(point=i)
        where = ", ".join(f"{dim}={point[dim].item()}" for dim in status.dims
                          if status.sizes[dim] > 1)
        error = str(errors.values[i]) if errors is not None else ""
        lines.append(f"  {where or 'the point'}: {error}")
    return lines


def help_text() -> str:
    """``--help``: the template of ``conf/config.yaml`` (``hydra.help.template``) with the
    options of each config group a user chooses, read from the ``conf/`` directories. Hydra's
    own rendering composes the config once per group option (~0.3 s of CPU here) and lists
    the internal ``reduced`` group too."""
    from string import Template

    from pipeline.config import CONF_DIR, GROUPS, group_options, read_yaml

    template = read_yaml(CONF_DIR / "config.yaml")["hydra"]["help"]["template"]
    groups = "\n".join(f"{group}: {', '.join(group_options(group))}" for group in sorted(GROUPS))
    return Template(template).substitute(APP_CONFIG_GROUPS=groups)


def config_files_problem(argv: Sequence[str]) -> str | None:
    """The one line saying why a config file Hydra may compose for ``argv`` (those of
    ``conf/`` it names, a ``--config-dir``, a ``hydra.searchpath`` entry) is too large, too
    deep, an alias bomb, not strict YAML or one that runs code
    (:mod:`pipeline.config.untrusted`), or None. A bad file no command names is not read."""
    from pipeline.config.untrusted import config_files_problem as problem

    return problem(argv)


def main(argv: list[str]) -> int:
    """The command line's work: its text on stdout/stderr and its exit code (2: bad input,
    one ``error: …`` line). Hydra's own flags are read as Hydra reads them and get the same
    checks as a plain command line, or are refused (:mod:`pipeline.config.flags`)."""
    mark_command_line()  # a sweep's start-up is this process's age when its launcher runs
    from pipeline.config.flags import read_command_line

    if list(argv) in (["--help"], ["-h"]):  # at once, with no numerics imported
        print(help_text())
        return 0
    problem = config_files_problem(argv)  # before Hydra or a flag reads any of them
    if problem:
        return _error(problem)
    try:
        line = read_command_line(argv)
    except Exception as err:
        from algorithms.errors import InputError

        if isinstance(err, InputError):
            return _error(err)
        raise
    if line.printed:  # --version
        return 0
    if line.hydra_only:  # --hydra-help, shell completion: no config is composed
        listed = _comma_completions(argv)
        if listed is not None:
            print(listed)
            return 0
        return _hydra_own(list(argv))
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from algorithms.errors import InputError
    from pipeline.sweep.signals import silent_on_interrupt

    try:
        from pipeline.outputs import outputs_root
        from pipeline.sweep.naming import resumed

        again = resumed(line.overrides, outputs_root())
        if again is not None and len(again) > 1:  # a merged sweep: each unfinished command
            return _resume_each(again)
        if again is not None:  # resume=last: the last sweep's command as it was
            line = dataclasses.replace(line, overrides=tuple(again[0]), multirun=True)
        overrides = _checked(line.overrides)
        if (line.help or line.shows) and overrides and not line.multirun \
                and not declares_sweep(overrides):
            _check_composed(overrides)  # what a job would get, once it passes its checks
        if line.help:
            print(help_text())
            return 0
        if line.shows:  # --cfg, --info …
            return _hydra_own(line.hydra_argv(overrides))
        # Ctrl-C silences Dask's logging before the KeyboardInterrupt exists, wherever it comes
        # (a cluster's event-loop thread logs the interrupted calls with tracebacks otherwise)
        with silent_on_interrupt():
            return _run(line.multirun, overrides)
    except InputError as err:
        return _error(err)
    except (HydraException, OmegaConfBaseException) as err:  # a bad override
        # a plugin's own message (the sweeper's bad grids), not Hydra's wrapping of its call
        from hydra.errors import InstantiationException

        cause = err.__cause__
        return _error(cause if isinstance(err, InstantiationException)
                      and isinstance(cause, HydraException) else err)
    except OSError as err:  # where results go: a file in the path, read-only, a full disk
        from pipeline.sweep.directory import RERUN, write_error

        if _connection_closed(err):  # a worker or the scheduler went away: not a disk error
            return _error(f"the sweep lost its connection to the Dask cluster "
                          f"({type(err).__name__}: {err}): a worker or the scheduler went away "
                          f"(a crash, or a machine too loaded to keep them; see the sweep's "
                          f"dask.log); {RERUN}")
        return _error(write_error(err, err.filename or os.getcwd()))
    except KeyboardInterrupt:
        from pipeline.watch import INTERRUPTED

        print(f"error: {INTERRUPTED}", file=sys.stderr)
        return 130


def _connection_closed(err: OSError) -> bool:
    """Whether ``err`` is a closed connection to a Dask worker or scheduler (Dask's
    ``CommClosedError``, tornado's ``StreamClosedError``: OSErrors that name no file)."""
    kinds = [getattr(sys.modules.get(module), name, None) for module, name in (
        ("distributed.comm.core", "CommClosedError"), ("tornado.iostream", "StreamClosedError"))]
    return isinstance(err, tuple(k for k in kinds if k is not None))


def declares_sweep(overrides: Sequence[str]) -> bool:
    """Whether an experiment among ``overrides`` is a sweep (:mod:`pipeline.config.overrides`)."""
    from pipeline.config.overrides import declares_sweep as declares

    return declares(overrides)


def _check_composed(overrides: Sequence[str]) -> None:
    """The checks one job makes of its config before it builds anything (as
    :func:`pipeline.job.run.run_job` makes them), on the config these overrides compose;
    raises InputError (one line). Whether the fit would fit this machine's memory is left to
    the job (a config may be shown for a larger machine)."""
    import math

    from algorithms.errors import TooLarge
    from pipeline.job.protocol import apply_protocol
    from pipeline.job.validate import check_config

    config = app.compose_job(overrides)
    apply_protocol(config)
    try:
        check_config(config, available=math.inf)
    except TooLarge:
        pass


def _hydra_own(argv: list[str]) -> int:
    """Hydra's own rendering (``--cfg``, ``--info``, ``--hydra-help``, shell completion) of
    ``argv``; an error Hydra reports (its text and ``HYDRA_FULL_ERROR`` hint on stderr, exit
    1) becomes one ``error: …`` line and exit code 2."""
    import contextlib
    import io

    sys.argv = [sys.argv[0], *argv]
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            app.hydra_main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            text = captured.getvalue().split("Set the environment variable HYDRA_FULL_ERROR")[0]
            return _error(text.strip() or f"Hydra stopped with exit code {exc.code}")
    sys.stderr.write(captured.getvalue())
    return 0


def _resume_each(commands: list[list[str]]) -> int:
    """``resume=last`` of a merged sweep: each command with unfinished points, in turn, each
    announced; the worst exit code."""
    from pipeline.command import command_text
    from pipeline.sweep.signals import silent_on_interrupt

    codes = []
    for i, command in enumerate(commands, 1):
        print(f"resume=last, command {i} of {len(commands)}: {command_text(command)}",
              flush=True)
        with silent_on_interrupt():
            codes.append(_run(True, _checked(command)))
    return max(codes)


def _run(multirun: bool, overrides: list[str]) -> int:
    """One job, or a sweep (``-m``, or an experiment that declares one); its text and exit
    code (1: the job, or a sweep's job, failed)."""
    from pipeline.job.summary import job_warnings, summary_text

    if not multirun and not declares_sweep(overrides):
        from pipeline.console import phases_on_console

        with phases_on_console():  # its phases on stderr as they start
            record = app.run(overrides).return_value
        if record["status"] == "error":
            return _error(record["error"])
        if record["status"] == "failed":  # the job failed, its input was fine
            print(f"error: {_one_line(record['error'])}", file=sys.stderr)
            return 1
        print(summary_text(record["result"]))
        for line in job_warnings(record["result"]):
            print(line, file=sys.stderr)
        return 0
    from pipeline.outputs import outputs_root
    from pipeline.sweep.naming import name_sweep
    from pipeline.sweep.outcome import SweepOutcome, sweep_warnings  # xarray: not for one job

    overrides = name_sweep(overrides, outputs_root())
    outcome = SweepOutcome.from_returns(app.multirun(overrides))
    print(outcome.text())
    for line in sweep_warnings(outcome.results_path):
        print(line, file=sys.stderr)
    return 1 if outcome.failed else 0


def console() -> None:
    """The ``sgp-bench`` console script: the same program as ``python -m pipeline``, watched
    in the same way (:func:`pipeline.watch.watched`)."""
    def program() -> int:
        prestart(sys.argv[1:])
        exit_now(main(sys.argv[1:]))

    watched(program)


def exit_now(code: int) -> NoReturn:
    """End the command-line process with ``code`` once its output is flushed, without the
    interpreter's teardown: after a sweep that is ~0.6 s of stopping Dask's event-loop threads
    and finalising objects nobody reads again (every file is written and closed, the cluster
    is closed, its processes are gone)."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)

